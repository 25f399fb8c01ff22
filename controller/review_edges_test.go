package controller_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/reflect"
)

// A nil IndexFunc is refused once, by Run and by AddIndexers, with ErrNilIndexFunc: not
// reported again on every write of every object (DESIGN 18).
func TestANilIndexFuncIsRefusedOnce(t *testing.T) {
	var reported int
	c := controller.New[obj, list](fake.New[obj, list](cm("ns", "a", nil)), controller.Options[obj]{
		Options:  reflect.Options[obj]{OnError: func(context.Context, error) { reported++ }},
		Indexers: eventcache.Indexers[obj]{"byLabel": nil},
	})
	if err := c.Run(t.Context()); !errors.Is(err, eventcache.ErrNilIndexFunc) {
		t.Errorf("Run = %v, want ErrNilIndexFunc", err)
	}
	if reported != 0 {
		t.Errorf("%d errors reported, want none: Run refused the options", reported)
	}
	w := eventcache.NewWriter[obj](nil)
	if err := w.AddIndexers(eventcache.Indexers[obj]{"byLabel": nil}); !errors.Is(err, eventcache.ErrNilIndexFunc) {
		t.Errorf("AddIndexers = %v, want ErrNilIndexFunc", err)
	}
}

// A panic of any callback of the pipeline, a KeyFunc's as a Transform's, wraps the one
// sentinel that reflect and eventcache both name.
func TestAPanickingKeyFuncWrapsReflectsErrCallbackPanicked(t *testing.T) {
	var mu sync.Mutex
	var errs []error
	c := controller.New[obj, list](fake.New[obj, list](cm("ns", "a", nil)), controller.Options[obj]{
		Options: reflect.Options[obj]{OnError: func(_ context.Context, err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
		}},
		KeyFunc: func(obj) (string, error) { panic("key bug") },
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	eventually(t, "the KeyFunc's panic reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, err := range errs {
			if errors.Is(err, reflect.ErrCallbackPanicked) {
				return true
			}
		}
		return false
	})
	cancel()
	<-done
}
