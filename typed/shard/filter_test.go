package shard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/typedinformer/typedinformer/typed/shard"
)

// namespaces are in shards 1, 3, 3, 0, 1 and 1 of 4 by namespace. (ns-0 to ns-9 would
// all be in shard 1: FNV-1a spreads names that differ only at the end poorly.)
var namespaces = []string{"apps", "default", "payments", "search", "web", "billing"}

// configMaps returns n ConfigMaps with random UIDs in namespaces.
func configMaps(seed uint64, n int) []*corev1.ConfigMap {
	r := rand.New(rand.NewPCG(seed, seed))
	out := make([]*corev1.ConfigMap, n)
	for i := range out {
		out[i] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Namespace: namespaces[i%len(namespaces)], Name: fmt.Sprintf("cm-%03d", i), UID: randomUID(r), ResourceVersion: "1",
		}}
	}
	return out
}

// keys returns the namespace/name of objects of metadata, sorted.
func keys[O metav1.Object](objs []O) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.GetNamespace()+"/"+o.GetName())
	}
	slices.Sort(out)
	return out
}

// keysIn returns the keys of the objects in the given shards of space, by the reference
// hash.
func keysIn(objs []*corev1.ConfigMap, space shard.Space, shards []int) []string {
	var in []*corev1.ConfigMap
	for _, o := range objs {
		v := string(o.UID)
		if space.By == shard.ByNamespace {
			v = o.Namespace
		}
		if slices.Contains(shards, refShard(v, space.Shards)) {
			in = append(in, o)
		}
	}
	return keys(in)
}

func newClientset(objs []*corev1.ConfigMap) *fake.Clientset {
	ros := make([]runtime.Object, len(objs))
	for i, o := range objs {
		ros[i] = o
	}
	return fake.NewClientset(ros...)
}

// listOptions returns the ListOptions of the actions of verb the fake received.
func listOptions(cs *fake.Clientset, verb string) []metav1.ListOptions {
	var out []metav1.ListOptions
	for _, a := range cs.Actions() {
		switch a := a.(type) {
		case clienttesting.ListActionImpl:
			if verb == "list" {
				out = append(out, a.ListOptions)
			}
		case clienttesting.WatchActionImpl:
			if verb == "watch" {
				out = append(out, a.ListOptions)
			}
		}
	}
	return out
}

func TestFilteredListKeepsTheObjectsOfItsShardsWhenTheServerDoesNot(t *testing.T) {
	objs := configMaps(1, 60)
	for _, tc := range []struct {
		space  shard.Space
		shards []int
	}{
		{shard.Space{Shards: 4}, []int{1}},
		{shard.Space{Shards: 4}, []int{3, 0}},
		{shard.Space{Shards: 8}, []int{2, 3, 4, 7}},
		{shard.Space{Shards: 4, By: shard.ByNamespace}, []int{0, 2}},
		{shard.Space{Shards: 2, By: shard.ByNamespace}, []int{1}},
	} {
		t.Run(fmt.Sprintf("%v of %d by %v", tc.shards, tc.space.Shards, tc.space.By), func(t *testing.T) {
			cs := newClientset(objs) // the fake ignores ShardSelector, as a server without the gate does
			f, err := shard.Filter[*corev1.ConfigMap, *corev1.ConfigMapList](cs.CoreV1().ConfigMaps(""), tc.space, tc.shards)
			if err != nil {
				t.Fatal(err)
			}
			opts := metav1.ListOptions{LabelSelector: "", ResourceVersion: "0", Limit: 500}
			list, err := f.List(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			want := keysIn(objs, tc.space, tc.shards)
			if len(want) == 0 || len(want) == len(objs) {
				t.Fatalf("the test's objects are all in or all out of shards %v: %d of %d", tc.shards, len(want), len(objs))
			}
			if diff := cmp.Diff(want, keys(ptrs(list.Items))); diff != "" {
				t.Errorf("listed (-want +got):\n%s", diff)
			}
			if f.ServerFiltered() {
				t.Error("ServerFiltered() = true after a list without ShardInfo")
			}
			// The caller's options are sent as they are, with the selector.
			sent := opts
			sent.ShardSelector = tc.space.Selector(tc.shards)
			if diff := cmp.Diff([]metav1.ListOptions{sent}, listOptions(cs, "list")); diff != "" {
				t.Errorf("ListOptions sent (-want +got):\n%s", diff)
			}
			if f.Selector() != sent.ShardSelector {
				t.Errorf("Selector() = %q, want %q", f.Selector(), sent.ShardSelector)
			}
		})
	}
}

func ptrs[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

func TestFilteredServerFilteredSaysWhetherTheLastListEchoedTheSelector(t *testing.T) {
	objs := configMaps(2, 40)
	space, shards := shard.Space{Shards: 4}, []int{2}
	selector := space.Selector(shards)
	// Each list answers with every object, and the ShardInfo of the step.
	steps := []struct {
		name      string
		shardInfo *metav1.ShardInfo
		want      bool
	}{
		{"no ShardInfo", nil, false},
		{"the selector echoed", &metav1.ShardInfo{Selector: selector}, true},
		{"the selector echoed again", &metav1.ShardInfo{Selector: selector}, true},
		{"another selector echoed", &metav1.ShardInfo{Selector: space.Selector([]int{1})}, false},
		{"the selector echoed once more", &metav1.ShardInfo{Selector: selector}, true},
		{"no ShardInfo after one", nil, false},
		{"an empty ShardInfo", &metav1.ShardInfo{}, false},
	}
	cs := newClientset(nil)
	step := 0
	cs.PrependReactor("list", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "7", ShardInfo: steps[step].shardInfo}}
		for _, o := range objs {
			list.Items = append(list.Items, *o)
		}
		return true, list, nil
	})
	f, err := shard.Filter[*corev1.ConfigMap, *corev1.ConfigMapList](cs.CoreV1().ConfigMaps(""), space, shards)
	if err != nil {
		t.Fatal(err)
	}
	for ; step < len(steps); step++ {
		list, err := f.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := f.ServerFiltered(); got != steps[step].want {
			t.Errorf("after a list with %s: ServerFiltered() = %v, want %v", steps[step].name, got, steps[step].want)
		}
		// A server that says it filtered is still checked: the objects of other shards
		// it returned are dropped; the list's metadata is kept.
		got := struct {
			Meta metav1.ListMeta
			Keys []string
		}{list.ListMeta, keys(ptrs(list.Items))}
		want := struct {
			Meta metav1.ListMeta
			Keys []string
		}{metav1.ListMeta{ResourceVersion: "7", ShardInfo: steps[step].shardInfo}, keysIn(objs, space, shards)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("after a list with %s (-want +got):\n%s", steps[step].name, diff)
		}
	}
}

// echoing is a dynamic ListerWatcher whose lists say the server applied selector, as a
// real server's JSON does: the dynamic fake drops metadata.shardInfo.
type echoing struct {
	dynamic.ResourceInterface
	selector string
}

func (e echoing) List(ctx context.Context, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	list, err := e.ResourceInterface.List(ctx, opts)
	if err == nil {
		err = unstructured.SetNestedField(list.Object, e.selector, "metadata", "shardInfo", "selector")
	}
	return list, err
}

func TestFilteredUnstructuredListReadsShardInfoFromItsMetadata(t *testing.T) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	objs := configMaps(3, 40)
	space, shards := shard.Space{Shards: 2}, []int{0}
	var uobjs []runtime.Object
	for _, o := range objs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		uo := &unstructured.Unstructured{Object: u}
		uo.SetAPIVersion("v1")
		uo.SetKind("ConfigMap")
		uobjs = append(uobjs, uo)
	}
	for _, tc := range []struct {
		name string
		echo string // the selector the list says the server applied
		want bool
	}{
		{"a server that ignores the selector", "", false},
		{"a server that applies it", space.Selector(shards), true},
		{"a server that applied another", space.Selector([]int{1}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{gvr: "ConfigMapList"}, uobjs...)
			var lw dynamic.ResourceInterface = client.Resource(gvr).Namespace("")
			if tc.echo != "" {
				lw = echoing{lw, tc.echo}
			}
			f, err := shard.Filter[*unstructured.Unstructured, *unstructured.UnstructuredList](lw, space, shards)
			if err != nil {
				t.Fatal(err)
			}
			list, err := f.List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(keysIn(objs, space, shards), keys(ptrs(list.Items))); diff != "" {
				t.Errorf("listed (-want +got):\n%s", diff)
			}
			if f.ServerFiltered() != tc.want {
				t.Errorf("ServerFiltered() = %v, want %v", f.ServerFiltered(), tc.want)
			}
		})
	}
}

// watched sets up a Filter over a fake whose watch is the returned FakeWatcher.
func watched(t *testing.T, space shard.Space, shards []int) (*shard.Filtered[*corev1.ConfigMap, *corev1.ConfigMapList], *fake.Clientset, *watch.FakeWatcher) {
	t.Helper()
	cs := newClientset(nil)
	in := watch.NewFake()
	cs.PrependWatchReactor("configmaps", func(clienttesting.Action) (bool, watch.Interface, error) { return true, in, nil })
	f, err := shard.Filter[*corev1.ConfigMap, *corev1.ConfigMapList](cs.CoreV1().ConfigMaps(""), space, shards)
	if err != nil {
		t.Fatal(err)
	}
	return f, cs, in
}

// drain returns the events of w until its channel closes.
func drain(t *testing.T, w watch.Interface) []watch.Event {
	t.Helper()
	var out []watch.Event
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				return out
			}
			out = append(out, e)
		case <-timeout:
			t.Fatalf("the watch's channel is still open after %d events", len(out))
		}
	}
}

func TestFilteredWatchDropsEventsOfOtherShardsAndPassesBookmarksAndErrors(t *testing.T) {
	space, shards := shard.Space{Shards: 4}, []int{0, 3}
	objs := configMaps(4, 40)
	var in, out []*corev1.ConfigMap
	for _, o := range objs {
		if slices.Contains(shards, refShard(string(o.UID), space.Shards)) {
			in = append(in, o)
		} else {
			out = append(out, o)
		}
	}
	f, cs, source := watched(t, space, shards)
	opts := metav1.ListOptions{ResourceVersion: "12", AllowWatchBookmarks: true}
	w, err := f.Watch(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	// A bookmark's object has only a resource version; one whose empty UID hashes into
	// another shard passes all the same.
	bookmark := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "20", UID: out[0].UID}}
	status := &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired}
	sent := []watch.Event{
		{Type: watch.Added, Object: in[0]},
		{Type: watch.Added, Object: out[0]},
		{Type: watch.Modified, Object: out[1]},
		{Type: watch.Bookmark, Object: bookmark},
		{Type: watch.Modified, Object: in[1]},
		{Type: watch.Deleted, Object: out[2]},
		{Type: watch.Deleted, Object: in[2]},
		{Type: watch.Error, Object: status},
	}
	go func() {
		for _, e := range sent {
			source.Action(e.Type, e.Object)
		}
		source.Stop() // closes the source's channel: the filtered one closes too
	}()
	want := []watch.Event{sent[0], sent[3], sent[4], sent[6], sent[7]}
	if diff := cmp.Diff(want, drain(t, w)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	sentOpts := opts
	sentOpts.ShardSelector = space.Selector(shards)
	sentOpts.Watch = true // set by the fake clientset's Watch
	if diff := cmp.Diff([]metav1.ListOptions{sentOpts}, listOptions(cs, "watch")); diff != "" {
		t.Errorf("ListOptions sent (-want +got):\n%s", diff)
	}
	w.Stop() // after the end: nothing to do, no panic
}

func TestFilteredWatchStopEndsItsGoroutineWithNobodyReading(t *testing.T) {
	space, shards := shard.Space{Shards: 2}, []int{1}
	var kept *corev1.ConfigMap
	for _, o := range configMaps(5, 20) {
		if refShard(string(o.UID), 2) == 1 {
			kept = o
			break
		}
	}
	for _, tc := range []struct {
		name string
		send int // events of the shard sent, none of them read
	}{
		{"waiting for an event", 0},
		{"holding an event", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			f, _, source := watched(t, space, shards)
			w, err := f.Watch(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for range tc.send {
				source.Add(kept) // returns once the filter has taken it
			}
			w.Stop()
			w.Stop() // twice: no panic
			if got := drain(t, w); len(got) > tc.send {
				t.Errorf("after Stop: %d events, want at most %d", len(got), tc.send)
			}
			if !source.IsStopped() {
				t.Error("the source watch was not stopped")
			}
			if err := goleak.Find(before); err != nil {
				t.Errorf("goroutines left after Stop: %v", err)
			}
		})
	}
}

// funcs is a ListerWatcher of functions.
type funcs struct {
	list  func(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error)
	watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
}

func (f funcs) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	return f.list(ctx, opts)
}

func (f funcs) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return f.watch(ctx, opts)
}

// nilChannel is a watch whose ResultChan is nil.
type nilChannel struct{}

func (nilChannel) Stop()                          {}
func (nilChannel) ResultChan() <-chan watch.Event { return nil }

func TestFilteredWatchReturnsNilWatchesAndErrorsAsTheyAre(t *testing.T) {
	failure := errors.New("watch failed")
	for _, tc := range []struct {
		name string
		w    watch.Interface
		err  error
	}{
		{"a nil watch", nil, nil},
		{"a watch with a nil channel", nilChannel{}, nil},
		{"an error", nil, failure},
		{"an error with a watch", watch.NewEmptyWatch(), failure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := shard.Filter[*corev1.ConfigMap, *corev1.ConfigMapList](funcs{
				watch: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return tc.w, tc.err },
			}, shard.Space{Shards: 4}, []int{1})
			if err != nil {
				t.Fatal(err)
			}
			w, err := f.Watch(context.Background(), metav1.ListOptions{})
			if w != tc.w || err != tc.err {
				t.Errorf("Watch() = %#v, %v; want %#v, %v", w, err, tc.w, tc.err)
			}
		})
	}
}

func TestFilterRejectsBadSpacesAndShardsOutsideTheSpace(t *testing.T) {
	cms := fake.NewClientset().CoreV1().ConfigMaps("")
	for _, tc := range []struct {
		name      string
		space     shard.Space
		shards    []int
		errShards bool // the error wraps ErrShards
	}{
		{"no shards in the space", shard.Space{}, []int{0}, true},
		{"shards not a power of two", shard.Space{Shards: 3}, []int{0}, true},
		{"too many shards", shard.Space{Shards: 1 << 17}, []int{0}, true},
		{"a shard past the last", shard.Space{Shards: 4}, []int{1, 4}, false},
		{"a negative shard", shard.Space{Shards: 4}, []int{-1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := shard.Filter[*corev1.ConfigMap, *corev1.ConfigMapList](cms, tc.space, tc.shards)
			if err == nil || f != nil {
				t.Fatalf("Filter = %v, %v; want an error", f, err)
			}
			if errors.Is(err, shard.ErrShards) != tc.errShards {
				t.Errorf("Filter error %q: wraps ErrShards = %v, want %v", err, !tc.errShards, tc.errShards)
			}
		})
	}
}

func TestFilterOfEveryShardSendsNoSelectorAndKeepsEverything(t *testing.T) {
	objs := configMaps(6, 30)
	for _, tc := range []struct {
		space  shard.Space
		shards []int
	}{
		{shard.Space{Shards: 1}, []int{0}},
		{shard.Space{Shards: 4}, []int{0, 1, 2, 3}},
		{shard.Space{Shards: 4, By: shard.ByNamespace}, []int{3, 2, 1, 0, 2}},
	} {
		t.Run(fmt.Sprintf("%v of %d by %v", tc.shards, tc.space.Shards, tc.space.By), func(t *testing.T) {
			cs := newClientset(objs)
			source := watch.NewFake()
			cs.PrependWatchReactor("configmaps", func(clienttesting.Action) (bool, watch.Interface, error) { return true, source, nil })
			f, err := shard.Filter[*corev1.ConfigMap, *corev1.ConfigMapList](cs.CoreV1().ConfigMaps(""), tc.space, tc.shards)
			if err != nil {
				t.Fatal(err)
			}
			list, err := f.List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(keys(objs), keys(ptrs(list.Items))); diff != "" {
				t.Errorf("listed (-want +got):\n%s", diff)
			}
			w, err := f.Watch(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if w != source {
				t.Errorf("Watch() = %T, want the source watch itself", w)
			}
			if f.ServerFiltered() || f.Selector() != "" {
				t.Errorf("ServerFiltered(), Selector() = %v, %q; want false, \"\"", f.ServerFiltered(), f.Selector())
			}
			want := []metav1.ListOptions{{}, {Watch: true}}
			if diff := cmp.Diff(want, append(listOptions(cs, "list"), listOptions(cs, "watch")...)); diff != "" {
				t.Errorf("ListOptions sent (-want +got):\n%s", diff)
			}
		})
	}
}
