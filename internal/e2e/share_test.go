package e2e

// One watch per scope across the manager's loops and sharded loops (DESIGN 16), counted on
// the server: a shard's caches and a Related cache of all objects are the Manager's
// shared caches.

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// serverWatchesOf returns how many WATCH requests of a namespaced resource ("secrets")
// kube-apiserver is serving, from its apiserver_longrunning_requests gauge.
func serverWatchesOf(ctx context.Context, kube kubernetes.Interface, resource string) (int, error) {
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") ||
			!strings.Contains(line, `resource="`+resource+`"`) || !strings.Contains(line, `scope="namespace"`) ||
			!strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("reading %q: %w", line, err)
		}
		n += int(v)
	}
	return n, sc.Err()
}

// reconcileCounts counts the reconciles of each key by one loop.
type reconcileCounts[T event.Object] struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *reconcileCounts[T]) reconciler() typed.ReconcilerFunc[T] {
	return func(_ context.Context, req typed.Request[T]) (typed.Result, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[req.Key]++
		return typed.Result{}, nil
	}
}

func (c *reconcileCounts[T]) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// reconciledOnce returns keys, each reconciled once: what a loop reconciles of objects
// that are not changed.
func reconciledOnce(keys []string) map[string]int {
	out := make(map[string]int, len(keys))
	for _, k := range keys {
		out[k] = 1
	}
	return out
}

// In one process, a manager.Loop over the Secrets of a namespace, a sharded Loop of its
// ConfigMaps (2 shards, this replica holding both) relating those Secrets by UID, and a
// second sharded Loop of the same ConfigMaps on the same Sharder cost the server one
// watch of Secrets and one watch of ConfigMaps per shard held, and every loop reconciles
// what it should.
func TestManagerAndShardedLoopsShareOneWatchPerScope(t *testing.T) {
	const (
		ns      = "share"
		objects = 8
	)
	_, admin := setUp(t, ns)
	var keys []string
	for i := range objects {
		name := fmt.Sprintf("cm-%d", i)
		createConfigMap(t, admin.kube, ns, name, map[string]string{"v": "1"})
		if _, err := admin.kube.CoreV1().Secrets(ns).Create(timeout(t), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"v": "1"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, ns+"/"+name)
	}
	before := map[string]int{}
	for _, resource := range []string{"secrets", "configmaps"} {
		n, err := serverWatchesOf(timeout(t), admin.kube, resource)
		if err != nil {
			t.Fatal(err)
		}
		before[resource] = n
	}
	t.Logf("watches on the server before the manager runs: %v", before)

	m := manager.New(manager.Options{})
	scope := []string{ns}
	secretSrc := manager.Namespaced[*corev1.Secret](admin.kube.CoreV1().Secrets)
	cmSrc := manager.Namespaced[cm](admin.kube.CoreV1().ConfigMaps)

	// The manager's loop over Secrets.
	var secretLoop reconcileCounts[*corev1.Secret]
	secrets, err := manager.Acquire(m, secretSrc, manager.CacheOptions[*corev1.Secret]{Namespaces: scope})
	if err != nil {
		t.Fatal(err)
	}
	defer secrets.Release()
	if _, err := manager.NewLoop(secrets, secretLoop.reconciler(), typed.Options{Name: "secrets"}); err != nil {
		t.Fatal(err)
	}

	// Two sharded loops over the ConfigMaps, on one Sharder; the first relates the Secrets.
	space := shard.Space{Shards: 2, By: shard.ByUID}
	sharder, err := shard.New(shard.Options{
		Client: admin.kube.CoordinationV1(), Namespace: ns, Name: "share", Identity: "replica", Space: space,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
	})
	if err != nil {
		t.Fatal(err)
	}
	var first, second reconcileCounts[cm]
	firstLoop, err := shard.NewLoop(m, sharder, cmSrc, first.reconciler(), typed.Options{Name: "first"})
	if err != nil {
		t.Fatal(err)
	}
	firstLoop.WithCacheOptions(manager.CacheOptions[cm]{Namespaces: scope})
	if err := shard.Related(firstLoop, secretSrc, func(s *corev1.Secret) []string { return []string{s.Namespace + "/" + s.Name} }); err != nil {
		t.Fatal(err)
	}
	secondLoop, err := shard.NewLoop(m, sharder, cmSrc, second.reconciler(), typed.Options{Name: "second"})
	if err != nil {
		t.Fatal(err)
	}
	secondLoop.WithCacheOptions(manager.CacheOptions[cm]{Namespaces: scope})
	if err := m.Add("shards", manager.EveryReplica(manager.RunnableFunc(func(ctx context.Context) error {
		return sharder.Run(ctx, func(ctx context.Context, sh shard.Shard) {
			var wg sync.WaitGroup
			wg.Go(func() { firstLoop.RunShard(ctx, sh) })
			wg.Go(func() { secondLoop.RunShard(ctx, sh) })
			wg.Wait()
		})
	}))); err != nil {
		t.Fatal(err)
	}
	start(t, m)

	// Every loop reconciles what it should, once.
	waitUntil(t, "every loop to reconcile every key", func() (bool, string) {
		got := map[string]map[string]int{"secrets": secretLoop.counts(), "first": first.counts(), "second": second.counts()}
		want := map[string]map[string]int{"secrets": reconciledOnce(keys), "first": reconciledOnce(keys), "second": reconciledOnce(keys)}
		diff := cmp.Diff(want, got)
		return diff == "", diff
	})
	for name, l := range map[string]*shard.Loop[cm]{"first": firstLoop, "second": secondLoop} {
		total := 0
		for _, n := range l.Cached() {
			total += n
		}
		if held := len(l.Cached()); held != space.Shards || total != objects {
			t.Errorf("the %s sharded loop caches %d objects in %d shards, want %d in %d", name, total, held, objects, space.Shards)
		}
	}

	// One watch of Secrets, whoever reads them; one of ConfigMaps per shard held, for
	// both sharded loops.
	want := map[string]int{"secrets": before["secrets"] + 1, "configmaps": before["configmaps"] + space.Shards}
	watching := func() map[string]int {
		got := map[string]int{}
		for resource := range want {
			n, err := serverWatchesOf(timeout(t), admin.kube, resource)
			if err != nil {
				t.Fatalf("reading the server's metrics: %v", err)
			}
			got[resource] = n
		}
		return got
	}
	// A watch the process has just ended (a watch-list's, a probe's) may still be counted
	// for a moment; a watch too many that stays fails here when the wait times out.
	waitUntil(t, "the server to serve the process's watches", func() (bool, string) {
		diff := cmp.Diff(want, watching())
		return diff == "", diff
	})

	// Changes reach the loops through those watches: a Secret's reconciles it and its
	// ConfigMap in the first sharded loop; a ConfigMap's reconciles it in both.
	secret, err := admin.kube.CoreV1().Secrets(ns).Get(timeout(t), "cm-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.StringData = map[string]string{"v": "2"}
	if _, err := admin.kube.CoreV1().Secrets(ns).Update(timeout(t), secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	updateConfigMap(t, admin.kube, ns, "cm-1", map[string]string{"v": "2"})
	waitUntil(t, "the changes reconciled", func() (bool, string) {
		s, f, sc := secretLoop.counts(), first.counts(), second.counts()
		ok := s[ns+"/cm-0"] >= 2 && f[ns+"/cm-0"] >= 2 && f[ns+"/cm-1"] >= 2 && sc[ns+"/cm-1"] >= 2
		return ok, fmt.Sprintf("secrets %v, first %v, second %v", s, f, sc)
	})
	if n := second.counts()[ns+"/cm-0"]; n != 1 {
		t.Errorf("the second sharded loop, which relates no Secrets, reconciled %s/cm-0 %d times after its Secret changed, want once", ns, n)
	}
	waitUntil(t, "the same watches after the changes", func() (bool, string) {
		diff := cmp.Diff(want, watching())
		return diff == "", diff
	})
}
