package controller_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/eventcache"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
)

// Options that cannot work are refused by New, once, with what is wrong: not reported
// again on every write of every object (DESIGN 18), nor found only when Run starts.
func TestNewRefusesOptionsThatCannotWork(t *testing.T) {
	tests := []struct {
		name string
		opts controller.Options[obj]
		want error
	}{
		{"a nil index function", controller.Options[obj]{Indexers: eventcache.Indexers[obj]{"byLabel": nil}}, eventcache.ErrNilIndexFunc},
		{"an index named as the built-in one", controller.Options[obj]{Indexers: eventcache.Indexers[obj]{
			eventcache.NamespaceIndex: func(obj) ([]string, error) { return nil, nil }}}, eventcache.ErrIndexExists},
		{"metrics given to the reflector alone", controller.Options[obj]{Options: reflect.Options[obj]{Metrics: &countingMetrics{}}}, controller.ErrInvalidOptions},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := controller.New(fake.New[obj, list](cm("ns", "a", nil)), tt.opts)
			if !errors.Is(err, tt.want) || c != nil {
				t.Errorf("New = %v, %v; want no controller and %v", c, err, tt.want)
			}
		})
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
	c := testctl.New(t, fake.New[obj, list](cm("ns", "a", nil)), controller.Options[obj]{
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
