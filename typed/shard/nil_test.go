package shard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/typedinformer/typedinformer/typed/predicate"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/testsupport/leasefake"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/shard"
)

func TestNilAndInvalidArgumentsAreErrorsNeverPanics(t *testing.T) {
	var typedNilLeases *coordinationclient.CoordinationV1Client
	valid := shard.Options{Client: leasefake.NewServer().CoordinationV1(), Namespace: "default", Name: "g", Identity: "a"}
	for _, tc := range []struct {
		name   string
		change func(*shard.Options)
	}{
		{"nil client", func(o *shard.Options) { o.Client = nil }},
		{"typed-nil client", func(o *shard.Options) { o.Client = typedNilLeases }},
		{"no identity", func(o *shard.Options) { o.Identity = "" }},
		{"no name", func(o *shard.Options) { o.Name = "" }},
		{"an identity no Lease name can hold", func(o *shard.Options) { o.Identity = "Not_A_Name" }},
		{"shards not a power of two", func(o *shard.Options) { o.Space.Shards = 12 }},
		{"a renew deadline past the lease duration", func(o *shard.Options) { o.RenewDeadline = o.LeaseDuration + 1 }},
		{"a lease duration of no whole seconds, which a Lease cannot hold", func(o *shard.Options) { o.LeaseDuration = 15500 * time.Millisecond }},
		{"a negative retry period", func(o *shard.Options) { o.RetryPeriod = -time.Second }},
		{"a negative lease duration", func(o *shard.Options) { o.LeaseDuration = -15 * time.Second }},
	} {
		t.Run("New with "+tc.name, func(t *testing.T) {
			opts := valid
			tc.change(&opts)
			if _, err := shard.New(opts); !errors.Is(err, shard.ErrInvalidOptions) {
				t.Errorf("New = %v, want an error wrapping ErrInvalidOptions", err)
			}
		})
	}

	sharder, err := shard.New(valid)
	if err != nil {
		t.Fatal(err)
	}
	m := manager.New(manager.Options{}) // never run: no case gets as far as its caches
	cms := configMapSource(fake.NewClientset())
	ok := typed.ReconcilerFunc[*corev1.ConfigMap](func(context.Context, typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
		return typed.Result{}, nil
	})
	var nilReconciler typed.ReconcilerFunc[*corev1.ConfigMap]
	var nilClient func(string) corev1client.ConfigMapInterface
	toKey := func(s *corev1.Secret) []string { return []string{s.Namespace + "/" + s.Name} }
	// NewLoop refuses its own arguments, and makes no Loop.
	for _, tc := range []struct {
		name    string
		newLoop func() (*shard.Loop[*corev1.ConfigMap], error)
	}{
		{"a nil manager", func() (*shard.Loop[*corev1.ConfigMap], error) {
			return shard.NewLoop(nil, sharder, cms, ok, typed.Options{})
		}},
		{"a nil sharder", func() (*shard.Loop[*corev1.ConfigMap], error) {
			return shard.NewLoop(m, nil, cms, ok, typed.Options{})
		}},
		{"a Source with a nil ListerWatcher", func() (*shard.Loop[*corev1.ConfigMap], error) {
			return shard.NewLoop(m, sharder, manager.Source[*corev1.ConfigMap, *corev1.ConfigMapList]{}, ok, typed.Options{})
		}},
		{"a Source of a nil client", func() (*shard.Loop[*corev1.ConfigMap], error) {
			return shard.NewLoop(m, sharder, manager.Namespaced[*corev1.ConfigMap](nilClient), ok, typed.Options{})
		}},
		{"a nil reconciler", func() (*shard.Loop[*corev1.ConfigMap], error) {
			return shard.NewLoop(m, sharder, cms, nil, typed.Options{})
		}},
		{"a typed-nil reconciler", func() (*shard.Loop[*corev1.ConfigMap], error) {
			return shard.NewLoop(m, sharder, cms, nilReconciler, typed.Options{})
		}},
		{"a nil predicate", func() (*shard.Loop[*corev1.ConfigMap], error) {
			return shard.NewLoop(m, sharder, cms, ok, typed.Options{}, predicate.GenerationChanged[*corev1.ConfigMap], nil)
		}},
		{"a combinator of a nil predicate", func() (*shard.Loop[*corev1.ConfigMap], error) {
			return shard.NewLoop(m, sharder, cms, ok, typed.Options{}, predicate.Not[*corev1.ConfigMap](nil))
		}},
	} {
		t.Run("NewLoop with "+tc.name, func(t *testing.T) {
			if l, err := tc.newLoop(); !errors.Is(err, controller.ErrNilArgument) || l != nil {
				t.Errorf("NewLoop = %v, %v; want no Loop and an error wrapping controller.ErrNilArgument", l, err)
			}
		})
	}

	// Run refuses the mistakes of Related, and a Loop NewLoop did not make; RunShard
	// reports them.
	newLoop := func(opts typed.Options) *shard.Loop[*corev1.ConfigMap] {
		l, err := shard.NewLoop(m, sharder, cms, ok, opts)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, tc := range []struct {
		name string
		loop func() *shard.Loop[*corev1.ConfigMap]
	}{
		{"a Loop not made by NewLoop", func() *shard.Loop[*corev1.ConfigMap] { return new(shard.Loop[*corev1.ConfigMap]) }},
		{"a Related with a nil ListerWatcher", func() *shard.Loop[*corev1.ConfigMap] {
			l := newLoop(typed.Options{})
			shard.Related(l, manager.Source[*corev1.Secret, *corev1.SecretList]{}, toKey)
			return l
		}},
		{"a Related with a nil predicate", func() *shard.Loop[*corev1.ConfigMap] {
			l := newLoop(typed.Options{})
			shard.Related(l, secretSource(fake.NewClientset()), toKey, nil)
			return l
		}},
		{"a Related with a nil mapping", func() *shard.Loop[*corev1.ConfigMap] {
			l := newLoop(typed.Options{})
			shard.Related(l, secretSource(fake.NewClientset()), nil)
			return l
		}},
	} {
		t.Run("Run with "+tc.name, func(t *testing.T) {
			if err := tc.loop().Run(t.Context()); !errors.Is(err, controller.ErrNilArgument) {
				t.Errorf("Run = %v, want an error wrapping controller.ErrNilArgument", err)
			}
		})
		t.Run("RunShard with "+tc.name, func(t *testing.T) {
			// Documented for direct use: it reports what Run returns, and returns.
			tc.loop().RunShard(t.Context(), shard.Shard{Space: shard.Space{Shards: 1}})
		})
	}
	var reported error
	onError := typed.Options{OnError: func(_ context.Context, _ string, err error) { reported = err }}
	related := newLoop(onError)
	shard.Related(related, secretSource(fake.NewClientset()), nil)
	related.RunShard(t.Context(), shard.Shard{Space: shard.Space{Shards: 1}})
	if !errors.Is(reported, controller.ErrNilArgument) {
		t.Errorf("RunShard with a Related's nil mapping reported %v, want an error wrapping controller.ErrNilArgument", reported)
	}
	// A Source whose ListerWatcher is typed-nil is found when a shard's cache is acquired
	// (manager.Acquire refuses it), not before: RunShard reports it, and returns.
	reported = nil
	typedNil := manager.Namespaced[*corev1.ConfigMap](func(string) *shard.Filtered[*corev1.ConfigMap, *corev1.ConfigMapList] { return nil })
	typedNilLoop, err := shard.NewLoop(m, sharder, typedNil, ok, onError)
	if err != nil {
		t.Fatal(err)
	}
	typedNilLoop.RunShard(t.Context(), shard.Shard{Space: shard.Space{Shards: 1}})
	if !errors.Is(reported, controller.ErrNilArgument) {
		t.Errorf("RunShard with a typed-nil ListerWatcher reported %v, want an error wrapping controller.ErrNilArgument", reported)
	}
	var nilLoop *shard.Loop[*corev1.ConfigMap]
	nilLoop.RunShard(t.Context(), shard.Shard{Space: shard.Space{Shards: 1}})
	if err := nilLoop.Run(t.Context()); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Run of a nil Loop = %v, want an error wrapping controller.ErrNilArgument", err)
	}
	if n := len(nilLoop.Cached()); n != 0 {
		t.Errorf("a nil Loop caches %d shards, want none", n)
	}
	if _, ok := nilLoop.Get("default/a"); ok {
		t.Error("a nil Loop returned an object")
	}
	if err := shard.Related(nilLoop, secretSource(fake.NewClientset()), toKey); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Related of a nil Loop = %v, want an error wrapping controller.ErrNilArgument", err)
	}
	if err := shard.Related(newLoop(typed.Options{}), manager.Source[*corev1.Secret, *corev1.SecretList]{}, toKey); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Related with a nil ListerWatcher = %v, want an error wrapping controller.ErrNilArgument", err)
	}
	if err := sharder.Run(t.Context(), nil); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Sharder.Run with nil work = %v, want an error wrapping controller.ErrNilArgument", err)
	}
	if (shard.Shard{}).Held().Err() == nil {
		t.Error("the Held of a Shard no Sharder gave has not ended")
	}
	for _, shards := range []int{-1, 0} {
		if got := (shard.Space{Shards: shards}).Selector([]int{0}); got != "" {
			t.Errorf("Space{Shards: %d}.Selector = %q, want \"\"", shards, got)
		}
	}
	if f, err := shard.Filter[*corev1.ConfigMap, *corev1.ConfigMapList](nil, shard.Space{Shards: 2}, []int{0}); f != nil || err != nil {
		t.Errorf("Filter of a nil ListerWatcher = %v, %v; want a nil *Filtered, which controller.New refuses", f, err)
	}
}
