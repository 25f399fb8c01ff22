package e2e

// shard.Filter against a real kube-apiserver, with the ShardedListAndWatch feature gate
// on (the control plane's default) and off: the server and the client must agree on which
// objects are in which shard, and a Filter must give the same objects either way.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/typed/shard"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// shardNamespaces fall into shards 1, 1, 0, 0, 2, 3 and 3 of 4 by namespace, so that
// sharding by namespace leaves no shard empty.
var shardNamespaces = []string{"apps", "billing", "orders", "search", "queue", "payments", "catalog"}

func TestShardFilterSelectsWhatTheServerSelectsWithTheGateOnAndOff(t *testing.T) {
	checkLeaksAtEnd(t)
	for _, tc := range []struct {
		name   string
		gateOn bool
		args   []string
	}{
		{"gate on", true, nil}, // the control plane's default
		{"gate off", false, []string{"--feature-gates=ShardedListAndWatch=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := time.Now()
			cp := testenv.Start(t, testenv.Options{ExtraAPIServerArgs: tc.args})
			t.Logf("control plane started in %v", time.Since(started).Round(time.Millisecond))
			admin := newClients(t, cp.AdminConfig())
			createNamespaces(t, admin.kube, shardNamespaces...)
			for i := range 200 {
				createShardConfigMap(t, admin, shardNamespaces[i%len(shardNamespaces)], fmt.Sprintf("cm-%03d", i))
			}
			for _, by := range []shard.By{shard.ByUID, shard.ByNamespace} {
				t.Run("by "+by.String(), func(t *testing.T) {
					checkShardLists(t, admin, shard.Space{Shards: 4, By: by}, tc.gateOn)
				})
			}
		})
	}
}

func createShardConfigMap(t *testing.T, admin clients, namespace, name string) cm {
	t.Helper()
	created, err := admin.kube.CoreV1().ConfigMaps(namespace).Create(timeout(t),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating ConfigMap %s/%s: %v", namespace, name, err)
	}
	return created
}

func cmKey(o metav1.Object) string { return o.GetNamespace() + "/" + o.GetName() }

// cmKeys returns the sorted keys of objs.
func cmKeys[O metav1.Object](objs []O) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, cmKey(o))
	}
	slices.Sort(out)
	return out
}

func items(l *corev1.ConfigMapList) []cm {
	out := make([]cm, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out
}

// checkShardLists lists each shard of space through shard.Filter and directly, then
// watches each shard from its list while new ConfigMaps are created.
func checkShardLists(t *testing.T, admin clients, space shard.Space, gateOn bool) {
	all, err := admin.kube.CoreV1().ConfigMaps("").List(timeout(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if all.ShardInfo != nil {
		t.Errorf("a list without a selector has ShardInfo %+v", all.ShardInfo)
	}
	shardOf := map[string]int{} // the shard of each key, as the client computes it
	for _, o := range all.Items {
		shardOf[cmKey(&o)] = space.Of(&o)
	}

	var union []string
	rvs := make([]string, space.Shards)
	filters := make([]*shard.Filtered[cm, cmList], space.Shards)
	for i := range space.Shards {
		f, err := shard.Filter[cm, cmList](admin.kube.CoreV1().ConfigMaps(""), space, []int{i})
		if err != nil {
			t.Fatal(err)
		}
		filters[i] = f
		list, err := f.List(timeout(t), metav1.ListOptions{})
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
		rvs[i] = list.ResourceVersion
		if f.ServerFiltered() != gateOn {
			t.Errorf("shard %d: ServerFiltered() = %v, want %v", i, f.ServerFiltered(), gateOn)
		}
		got := cmKeys(items(list))
		var want []string // the keys the client puts in shard i
		for k, s := range shardOf {
			if s == i {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		if len(want) == 0 {
			t.Errorf("shard %d holds no object: the test's objects do not cover the shards", i)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("shard %d through Filter: the objects Space.Of puts in it (-want +got):\n%s", i, diff)
		}
		union = append(union, got...)

		// The server alone, with no filtering on the client.
		raw, err := admin.kube.CoreV1().ConfigMaps("").List(timeout(t), metav1.ListOptions{ShardSelector: f.Selector()})
		if err != nil {
			t.Fatalf("shard %d, listed directly: %v", i, err)
		}
		wantRaw, wantInfo := got, &metav1.ShardInfo{Selector: f.Selector()}
		if !gateOn {
			wantRaw, wantInfo = cmKeys(items(all)), nil // the selector ignored, not rejected
		}
		if diff := cmp.Diff(wantRaw, cmKeys(items(raw))); diff != "" {
			t.Errorf("shard %d listed directly with ShardSelector %q (-want +got):\n%s", i, f.Selector(), diff)
		}
		if diff := cmp.Diff(wantInfo, raw.ShardInfo); diff != "" {
			t.Errorf("shard %d listed directly: ShardInfo (-want +got):\n%s", i, diff)
		}
	}
	slices.Sort(union)
	// Equal to every key once: the shards cover everything and are pairwise disjoint.
	if diff := cmp.Diff(cmKeys(items(all)), union); diff != "" {
		t.Errorf("the shards' lists together (-every object +union):\n%s", diff)
	}

	// The dynamic client reads ShardInfo from the list's metadata.
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	df, err := shard.Filter[*unstructured.Unstructured, *unstructured.UnstructuredList](admin.dyn.Resource(gvr), space, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	ul, err := df.List(timeout(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var dynKeys []string
	for _, o := range ul.Items {
		dynKeys = append(dynKeys, cmKey(&o))
		if o.GetUID() == "" {
			t.Errorf("%s has no UID", cmKey(&o))
		}
	}
	slices.Sort(dynKeys)
	var want1 []string
	for k, s := range shardOf {
		if s == 1 {
			want1 = append(want1, k)
		}
	}
	slices.Sort(want1)
	if diff := cmp.Diff(want1, dynKeys); diff != "" {
		t.Errorf("shard 1 through Filter over the dynamic client (-want +got):\n%s", diff)
	}
	if df.ServerFiltered() != gateOn {
		t.Errorf("dynamic: ServerFiltered() = %v, want %v", df.ServerFiltered(), gateOn)
	}

	checkShardWatches(t, admin, space, gateOn, filters, rvs)
}

// checkShardWatches watches each shard through its Filter, and directly with its
// selector, from the shard's list, creates ConfigMaps, and checks what each watch saw.
func checkShardWatches(t *testing.T, admin clients, space shard.Space, gateOn bool, filters []*shard.Filtered[cm, cmList], rvs []string) {
	filtered := make([]watch.Interface, space.Shards)
	raw := make([]watch.Interface, space.Shards)
	for i, f := range filters {
		var err error
		if filtered[i], err = f.Watch(timeout(t), metav1.ListOptions{ResourceVersion: rvs[i]}); err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
		t.Cleanup(filtered[i].Stop)
		raw[i], err = admin.kube.CoreV1().ConfigMaps("").Watch(timeout(t), metav1.ListOptions{ResourceVersion: rvs[i], ShardSelector: f.Selector()})
		if err != nil {
			t.Fatalf("shard %d, watched directly: %v", i, err)
		}
		t.Cleanup(raw[i].Stop)
	}

	// New objects, then one "end" object per shard, created after all of them: a watch
	// that has seen its shard's first end object has seen every earlier event of it.
	prefix := "new-" + space.By.String()
	var created []cm // in the order of creation, which is the watches' order
	for i := range 40 {
		created = append(created, createShardConfigMap(t, admin, shardNamespaces[i%len(shardNamespaces)], fmt.Sprintf("%s-%02d", prefix, i)))
	}
	end := make([]string, space.Shards) // the key of each shard's first end object
	for i := 0; slices.Contains(end, ""); i++ {
		if i == 200 {
			t.Fatalf("no end object in some shard after %d: %q", i, end)
		}
		o := createShardConfigMap(t, admin, shardNamespaces[i%len(shardNamespaces)], fmt.Sprintf("%s-end-%02d", prefix, i))
		created = append(created, o)
		if s := space.Of(o); end[s] == "" {
			end[s] = cmKey(o)
		}
	}

	for i := range space.Shards {
		// What the watch of shard i must have seen up to its end object.
		var want, everything []string
		for _, o := range created {
			everything = append(everything, cmKey(o))
			if space.Of(o) == i {
				want = append(want, cmKey(o))
			}
			if cmKey(o) == end[i] {
				break
			}
		}
		got := readAddedUntil(t, filtered[i], end[i])
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("shard %d watched through Filter: ADDED events (-want +got):\n%s", i, diff)
		}
		gotRaw := readAddedUntil(t, raw[i], end[i])
		wantRaw := want
		if !gateOn {
			wantRaw = everything
		}
		if diff := cmp.Diff(wantRaw, gotRaw); diff != "" {
			t.Errorf("shard %d watched directly with ShardSelector (gate on: %v): ADDED events (-want +got):\n%s", i, gateOn, diff)
		}
	}

	checkShardWatchList(t, admin, space, gateOn, filters[2])
}

// readAddedUntil returns the keys of w's ADDED events up to and including last's.
func readAddedUntil(t *testing.T, w watch.Interface, last string) []string {
	t.Helper()
	var keys []string
	deadline := time.After(waitTimeout)
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %q, before %s", keys, last)
			}
			if e.Type != watch.Added {
				t.Fatalf("after %q: a %s event: %+v", keys, e.Type, e.Object)
			}
			m, err := meta.Accessor(e.Object)
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, cmKey(m))
			if cmKey(m) == last {
				return keys
			}
		case <-deadline:
			t.Fatalf("no event for %s within %v; saw %q", last, waitTimeout, keys)
		}
	}
}

// checkShardWatchList starts a watch-list stream (SendInitialEvents) through f and
// directly, and checks its initial events: the server applies the selector to them too
// when the gate is on.
func checkShardWatchList(t *testing.T, admin clients, space shard.Space, gateOn bool, f *shard.Filtered[cm, cmList]) {
	all, err := admin.kube.CoreV1().ConfigMaps("").List(timeout(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, o := range items(all) {
		if space.Of(o) == 2 {
			want = append(want, cmKey(o))
		}
	}
	slices.Sort(want)
	opts := metav1.ListOptions{
		SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks: true,
	}
	for _, via := range []struct {
		name string
		want []string
	}{{"Filter", want}, {"directly", want}} {
		wopts := opts
		if via.name == "directly" {
			wopts.ShardSelector = f.Selector()
			if !gateOn {
				via.want = cmKeys(items(all))
			}
		}
		var w watch.Interface
		if via.name == "Filter" {
			w, err = f.Watch(timeout(t), wopts)
		} else {
			w, err = admin.kube.CoreV1().ConfigMaps("").Watch(timeout(t), wopts)
		}
		if err != nil {
			t.Fatalf("watch-list %s: %v", via.name, err)
		}
		got, bookmark := readInitialEvents(t, w)
		w.Stop()
		slices.Sort(got)
		if diff := cmp.Diff(via.want, got); diff != "" {
			t.Errorf("watch-list of shard 2 %s (gate on: %v): initial events (-want +got):\n%s", via.name, gateOn, diff)
		}
		t.Logf("watch-list %s (gate on: %v): %d initial events, final bookmark annotations %v", via.name, gateOn, len(got), bookmark.GetAnnotations())
	}
}

// readInitialEvents returns the keys of a watch-list stream's initial events and the
// bookmark that ends them.
func readInitialEvents(t *testing.T, w watch.Interface) ([]string, metav1.Object) {
	t.Helper()
	var keys []string
	deadline := time.After(waitTimeout)
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %d initial events", len(keys))
			}
			m, err := meta.Accessor(e.Object)
			if err != nil {
				t.Fatalf("a %s event: %v", e.Type, err)
			}
			switch e.Type {
			case watch.Added:
				keys = append(keys, cmKey(m))
			case watch.Bookmark:
				if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					return keys, m
				}
			default:
				t.Fatalf("a %s event among the initial events: %v", e.Type, strings.TrimSpace(fmt.Sprint(e.Object)))
			}
		case <-deadline:
			t.Fatalf("no end of the initial events within %v; saw %d", waitTimeout, len(keys))
		}
	}
}
