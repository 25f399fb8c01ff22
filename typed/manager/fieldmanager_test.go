package manager_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/write"
)

// The field manager is named once, on the Manager: every reconcile of its loops and
// every runnable gets it through the context, so the writers' applies need not be told.
func TestTheFieldManagerReachesReconcilesAndRunnables(t *testing.T) {
	m := manager.New(manager.Options{FieldManager: "website-operator"})
	cache := acquire(t, m, source(fake.New[cm, cmList](configMap("a", "one", nil))))
	defer cache.Release()
	reconciled := make(chan string, 1)
	if _, err := manager.NewLoop(cache, typed.ReconcilerFunc[cm](func(ctx context.Context, _ typed.Request[cm]) (typed.Result, error) {
		name, _ := write.FieldManagerFrom(ctx)
		reconciled <- name
		return typed.Result{}, nil
	}), typed.Options{}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan string, 1)
	if err := m.Add("every replica", manager.EveryReplica(manager.RunnableFunc(func(ctx context.Context) error {
		name, _ := write.FieldManagerFrom(ctx)
		ran <- name
		<-ctx.Done()
		return nil
	}))); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	if got := receive(t, reconciled, "a reconcile"); got != "website-operator" {
		t.Errorf("a reconcile's field manager is %q, want website-operator", got)
	}
	if got := receive(t, ran, "the runnable"); got != "website-operator" {
		t.Errorf("a runnable's field manager is %q, want website-operator", got)
	}
}

// By default the field manager is the program's base name: the same on every replica
// (a replica's identity would make a new leader's applies conflict with the old one's
// fields), and never empty.
func TestTheDefaultFieldManagerIsTheProgramsName(t *testing.T) {
	if got, want := manager.New(manager.Options{}).FieldManager(), filepath.Base(os.Args[0]); got != want {
		t.Errorf("default field manager %q, want %q", got, want)
	}
	if got := (*manager.Manager)(nil).FieldManager(); got != "" {
		t.Errorf("a nil Manager's field manager is %q", got)
	}
}
