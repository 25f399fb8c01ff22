package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/reflect"
)

// Filtered is a ListerWatcher of the objects of some shards only. It asks the API server
// to filter (ListOptions.ShardSelector) and filters again on the client with the same
// hash, so that it selects the same objects from a server that filters, one whose
// ShardedListAndWatch feature gate is off, and one that predates it. The client-side
// check costs one hash per object and keeps a watch-list stream, which carries no
// ShardInfo to tell the two apart, right as well.
//
// An object's UID and namespace never change, so an object never leaves the shards of a
// Filtered: a watch of it has no event for an object leaving its scope.
type Filtered[T event.Object, L reflect.List] struct {
	lw       controller.ListerWatcher[T, L]
	space    Space
	held     []bool
	selector string
	// all is true when every shard is selected: nothing is filtered. With no shard, the
	// selector is empty too, but every object is filtered out on the client.
	all bool
	// server records whether the last list's response said the server applied the
	// selector (ListMeta.ShardInfo).
	server atomic.Bool
}

// Filter returns a ListerWatcher of lw's objects in the given shards of space. A nil lw
// gives a nil *Filtered, which controller.New refuses with controller.ErrNilArgument.
// With every shard of space (or space.Shards = 1) it selects everything and sends no
// selector.
func Filter[T event.Object, L reflect.List](lw controller.ListerWatcher[T, L], space Space, shards []int) (*Filtered[T, L], error) {
	if err := space.Validate(); err != nil {
		return nil, err
	}
	f := &Filtered[T, L]{lw: lw, space: space, held: make([]bool, space.Shards), selector: space.Selector(shards)}
	for _, i := range shards {
		if i < 0 || i >= space.Shards {
			return nil, fmt.Errorf("shard %d is outside the %d shards", i, space.Shards)
		}
		f.held[i] = true
	}
	if guard.IsNil(lw) {
		return nil, nil
	}
	f.all = !slices.Contains(f.held, false)
	return f, nil
}

// IsWatchListSemanticsUnSupported answers for the ListerWatcher f filters (see
// reflect.WatchListUnsupported), which a reflector sees only through f: over client-go's
// fakes, a cache lists instead of waiting for initial events that never end.
func (f *Filtered[T, L]) IsWatchListSemanticsUnSupported() bool {
	return f != nil && reflect.WatchListUnsupported(f.lw)
}

// Selector returns the shard selector sent to the server.
func (f *Filtered[T, L]) Selector() string { return f.selector }

// ServerFiltered reports whether the last list's response said the server applied the
// selector (it echoed it in ListMeta.ShardInfo). When false, the objects were filtered on
// the client only, having all crossed the network.
func (f *Filtered[T, L]) ServerFiltered() bool { return f.server.Load() }

// contains reports whether o belongs to the shards of f. An object without metadata (an
// unreadable one) is kept, for the reflector to report.
func (f *Filtered[T, L]) contains(o runtime.Object) bool {
	if f.all {
		return true
	}
	m, err := meta.Accessor(o)
	if err != nil {
		return true
	}
	return f.held[f.space.Of(m)]
}

// List lists the objects of f's shards.
func (f *Filtered[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	opts.ShardSelector = f.selector
	list, listErr := f.lw.List(ctx, opts)
	// A list returned with an error may still be used (reflect.ErrIncompleteList keeps
	// its items), so it is filtered too.
	if f.all || guard.IsNil(list) {
		return list, listErr
	}
	f.server.Store(shardInfo(list) == f.selector)
	items, err := meta.ExtractList(list)
	if err != nil {
		return list, errors.Join(listErr, fmt.Errorf("filtering the list by shard: %w", err))
	}
	kept := items[:0]
	for _, o := range items {
		if f.contains(o) {
			kept = append(kept, o)
		}
	}
	if len(kept) == len(items) {
		return list, listErr
	}
	if err := meta.SetList(list, kept); err != nil {
		return list, errors.Join(listErr, fmt.Errorf("filtering the list by shard: %w", err))
	}
	return list, listErr
}

// Watch watches the objects of f's shards.
func (f *Filtered[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.ShardSelector = f.selector
	w, err := f.lw.Watch(ctx, opts)
	if err != nil || f.all || guard.IsNil(w) || w.ResultChan() == nil {
		return w, err // the reflector reports a nil watch or channel
	}
	fw := &filteredWatch{in: w, out: make(chan watch.Event), stop: make(chan struct{}), keep: f.contains}
	go fw.run()
	return fw, nil
}

// shardInfo returns the selector a list response says the server applied, or "".
func shardInfo(list runtime.Object) string {
	switch l := list.(type) {
	case interface{ GetListMeta() metav1.ListInterface }:
		if lm, ok := l.GetListMeta().(*metav1.ListMeta); ok && lm.ShardInfo != nil {
			return lm.ShardInfo.Selector
		}
	case *unstructured.UnstructuredList:
		s, _, _ := unstructured.NestedString(l.Object, "metadata", "shardInfo", "selector")
		return s
	}
	return ""
}

// filteredWatch passes on the events of in whose objects keep keeps. Unlike
// watch.Filter, its goroutine ends on Stop even when nobody reads its channel.
type filteredWatch struct {
	in       watch.Interface
	out      chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
	keep     func(runtime.Object) bool
}

func (w *filteredWatch) run() {
	defer close(w.out)
	defer w.in.Stop()
	for {
		var e watch.Event
		var ok bool
		select {
		case e, ok = <-w.in.ResultChan():
		case <-w.stop:
			return
		}
		if !ok {
			return
		}
		switch e.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			if e.Object != nil && !w.keep(e.Object) {
				continue
			}
		}
		select {
		case w.out <- e:
		case <-w.stop:
			return
		}
	}
}

func (w *filteredWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *filteredWatch) Stop() { w.stopOnce.Do(func() { close(w.stop) }) }
