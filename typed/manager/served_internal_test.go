package manager

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A probe for progress (reflect.Reflector.RequestProgress) watches through the same gate
// as the cache's own watch. Whichever of them watches first after an outage, the cache's
// watch must still make it relist, or it would go on from before the outage.
func TestEveryWatchAfterAnOutageRelistsUntilAListIsIn(t *testing.T) {
	s := newServed("configmaps", "configmaps", func(context.Context) bool { return true })
	s.mu.Lock()
	s.ctx = t.Context()
	s.mu.Unlock()
	_ = s.notServed(apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, ""))
	if err := s.wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.waiters.Wait()
	for _, who := range []string{"a probe's watch", "the cache's watch"} {
		if err := s.watching(); !apierrors.IsResourceExpired(err) {
			t.Fatalf("%s after the outage: %v; want 410 Gone, so that the cache relists", who, err)
		}
	}
	s.listing()
	if err := s.watching(); err != nil {
		t.Fatalf("a watch after the relist: %v", err)
	}
}
