package e2e

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
)

type opKind uint8

const (
	opCreate opKind = iota
	opUpdate
	opDelete
)

// keyModel is what the churn did to one ConfigMap. Exactly one worker owns each key, so
// the operations of a key are sequential and "the data last written before a deletion"
// is well defined.
type keyModel struct {
	namespace, name string
	script          []opKind
	next            int
	gen, version    int
	// data is what the server holds now, nil when the ConfigMap does not exist.
	data map[string]string
	// deleted holds, per deleted incarnation, the data it had when it was deleted.
	deleted []map[string]string
	// writes are the key's successful writes, in order.
	writes []change
}

// change is one write as a handler of a full-history controller must see it: an
// addition or modification to the resource version and data written, or a deletion
// carrying the data last written. A deletion has no resource version here, because
// Delete does not return the revision of the deletion, which its event carries.
type change struct {
	Type              event.Type
	ResourceVersion   string
	Data              map[string]string
	Sync              bool
	FinalStateUnknown bool
}

func (k *keyModel) key() string { return k.namespace + "/" + k.name }

// churn creates, updates and deletes ConfigMaps with several workers at once and keeps a
// model of what it did.
type churn struct {
	t        *testing.T
	kube     kubernetes.Interface
	tolerant bool // faults expected: retry failed requests instead of failing

	keys    []*keyModel
	total   int
	done    atomic.Int64
	retries atomic.Int64
}

// newChurn scripts perNamespace ConfigMaps in each namespace: each is created, updated
// one to three times, and then maybe deleted, maybe re-created and updated, maybe
// deleted again. The script is random but fixed by seed.
func newChurn(t *testing.T, kube kubernetes.Interface, namespaces []string, perNamespace int, seed uint64, tolerant bool) *churn {
	c := &churn{t: t, kube: kube, tolerant: tolerant}
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, ns := range namespaces {
		for i := range perNamespace {
			k := &keyModel{namespace: ns, name: fmt.Sprintf("cm-%03d", i)}
			k.script = append(k.script, opCreate)
			for range 1 + rng.IntN(3) {
				k.script = append(k.script, opUpdate)
			}
			if rng.IntN(10) < 5 {
				k.script = append(k.script, opDelete)
				if rng.IntN(2) == 0 {
					k.script = append(k.script, opCreate)
					for range rng.IntN(3) {
						k.script = append(k.script, opUpdate)
					}
					if rng.IntN(3) == 0 {
						k.script = append(k.script, opDelete)
					}
				}
			}
			c.total += len(k.script)
			c.keys = append(c.keys, k)
		}
	}
	return c
}

// run runs the scripts with workers goroutines, each owning every workers-th key and
// interleaving its keys' operations at random, and returns when all are done.
func (c *churn) run(ctx context.Context, workers int, seed uint64) {
	var wg sync.WaitGroup
	for w := range workers {
		var mine []*keyModel
		for i := w; i < len(c.keys); i += workers {
			mine = append(mine, c.keys[i])
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)+1))
			for len(mine) > 0 && ctx.Err() == nil {
				i := rng.IntN(len(mine))
				k := mine[i]
				if !c.apply(ctx, k) {
					return
				}
				if k.next == len(k.script) {
					mine = slices.Delete(mine, i, i+1)
				}
			}
		})
	}
	wg.Wait()
}

// start runs the churn in the background; the returned function waits for it to end.
func (c *churn) start(ctx context.Context, workers int, seed uint64) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.run(ctx, workers, seed)
	}()
	return func() { <-done }
}

func (c *churn) apply(ctx context.Context, k *keyModel) bool {
	op := k.script[k.next]
	k.next++
	defer c.done.Add(1)
	cms := c.kube.CoreV1().ConfigMaps(k.namespace)
	switch op {
	case opCreate:
		k.gen++
		k.version = 0
		want := k.payload()
		return c.request(ctx, "create "+k.key(), func(ctx context.Context) error {
			obj, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: k.name}, Data: want}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// An earlier attempt may have succeeded without our hearing of it.
				got, gerr := cms.Get(ctx, k.name, metav1.GetOptions{})
				if gerr != nil {
					return gerr
				}
				if !maps.Equal(got.Data, want) {
					return fmt.Errorf("exists with data %v, want %v", got.Data, want)
				}
				obj, err = got, nil
			}
			if err == nil {
				k.data = want
				k.writes = append(k.writes, change{Type: event.Added, ResourceVersion: obj.ResourceVersion, Data: want})
			}
			return err
		})
	case opUpdate:
		k.version++
		want := k.payload()
		return c.request(ctx, "update "+k.key(), func(ctx context.Context) error {
			got, err := cms.Get(ctx, k.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !maps.Equal(got.Data, want) {
				got.Data = want
				if got, err = cms.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
					return err
				}
			}
			k.data = want
			k.writes = append(k.writes, change{Type: event.Modified, ResourceVersion: got.ResourceVersion, Data: want})
			return nil
		})
	default:
		return c.request(ctx, "delete "+k.key(), func(ctx context.Context) error {
			err := cms.Delete(ctx, k.name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) && c.tolerant {
				err = nil // an earlier attempt succeeded without our hearing of it
			}
			if err == nil {
				k.deleted = append(k.deleted, k.data)
				k.writes = append(k.writes, change{Type: event.Deleted, Data: k.data})
				k.data = nil
			}
			return err
		})
	}
}

// payload is the data of the key's current incarnation and version. The incarnation
// ("gen") tells which deletion a Deleted event belongs to.
func (k *keyModel) payload() map[string]string {
	return map[string]string{"key": k.key(), "gen": strconv.Itoa(k.gen), "version": strconv.Itoa(k.version)}
}

// request runs f until it succeeds. Without faults the first failure fails the test;
// with faults every failure is retried until ctx ends.
func (c *churn) request(ctx context.Context, what string, f func(context.Context) error) bool {
	for {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := f(rctx)
		cancel()
		if err == nil {
			return true
		}
		if !c.tolerant || ctx.Err() != nil {
			c.t.Errorf("churn: %s: %v", what, err)
			return false
		}
		c.retries.Add(1)
		time.Sleep(50 * time.Millisecond) // the server is down: do not spin
	}
}

// gone returns the keys that the churn deleted and did not re-create.
func (c *churn) gone() []string {
	var out []string
	for _, k := range c.keys {
		if k.data == nil {
			out = append(out, k.key())
		}
	}
	return out
}

// assertServerMatchesModel checks the churn itself: the server holds what the churn
// believes it wrote.
func (c *churn) assertServerMatchesModel(t *testing.T, namespaces ...string) {
	t.Helper()
	want := map[string]map[string]string{}
	for _, k := range c.keys {
		if k.data != nil {
			want[k.key()] = k.data
		}
	}
	got := map[string]map[string]string{}
	for _, ns := range namespaces {
		l, err := listConfigMaps(c.kube, ns)(timeout(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l {
			got[o.Namespace+"/"+o.Name] = o.Data
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("the server does not hold what the churn wrote (-churn +server):\n%s", diff)
	}
}

// assertDeletionsCarryLastState checks every deletion the handler saw for a churned key:
// one seen on the watch must carry exactly the data last written to that incarnation
// before it was deleted; one inferred from a relist (final state unknown) must carry the
// handler's last known state, which the checker verifies, and is allowed only if
// allowUnknown. It also checks that no incarnation is deleted twice.
func (c *churn) assertDeletionsCarryLastState(t *testing.T, h *eventcheck.Checker[cm], allowUnknown bool) {
	t.Helper()
	for _, k := range c.keys {
		seen := map[string]bool{}
		for _, s := range h.Events(k.key()) {
			e := s.Event
			if e.Type != event.Deleted {
				continue
			}
			if e.FinalStateUnknown {
				if !allowUnknown {
					t.Errorf("handler %s: %v: a final-state-unknown deletion without any fault", h.Name(), e)
				}
				continue
			}
			gen := e.Object.Data["gen"]
			if seen[gen] {
				t.Errorf("handler %s: incarnation %s of %s deleted twice", h.Name(), gen, k.key())
			}
			seen[gen] = true
			var want map[string]string
			for _, d := range k.deleted {
				if d["gen"] == gen {
					want = d
				}
			}
			if want == nil {
				t.Errorf("handler %s: %v deletes incarnation %s, which the churn never deleted", h.Name(), e, gen)
				continue
			}
			if diff := cmp.Diff(want, e.Object.Data); diff != "" {
				t.Errorf("handler %s: %v does not carry the data last written before the deletion (-written +event):\n%s", h.Name(), e, diff)
			}
		}
	}
}

// assertEveryWriteSeen checks the handler of a full-history controller that watched the
// whole churn: for every key, the events it saw, in order, are exactly the churn's
// writes (see change). The one exception is by design: an incarnation created and
// deleted with no update in between cancels out if its addition is still pending when
// its deletion arrives (see package queue), so it may be missing, as a whole.
func (c *churn) assertEveryWriteSeen(t *testing.T, h *eventcheck.Checker[cm]) {
	t.Helper()
	for _, k := range c.keys {
		var seen []change
		for _, s := range h.Events(k.key()) {
			e := s.Event
			ch := change{Type: e.Type, ResourceVersion: e.Object.ResourceVersion, Data: e.Object.Data, Sync: e.Sync, FinalStateUnknown: e.FinalStateUnknown}
			if e.Type == event.Deleted {
				ch.ResourceVersion = ""
			}
			seen = append(seen, ch)
		}
		var want []change
		for inc := range k.incarnations() {
			cancelled := len(inc) == 2 && inc[1].Type == event.Deleted &&
				!slices.ContainsFunc(seen, func(s change) bool { return s.Type == event.Added && s.ResourceVersion == inc[0].ResourceVersion })
			if !cancelled {
				want = append(want, inc...)
			}
		}
		if diff := cmp.Diff(want, seen); diff != "" {
			t.Errorf("handler %s: the events of %s are not the writes of the churn (-written +seen):\n%s", h.Name(), k.key(), diff)
		}
	}
}

// incarnations yields the key's writes split at each creation.
func (k *keyModel) incarnations() iter.Seq[[]change] {
	return func(yield func([]change) bool) {
		for i := 0; i < len(k.writes); {
			j := i + 1
			for j < len(k.writes) && k.writes[j].Type != event.Added {
				j++
			}
			if !yield(k.writes[i:j]) {
				return
			}
			i = j
		}
	}
}

// TestChurnDeliversEveryChange creates, updates and deletes 300 ConfigMaps in two
// namespaces with four workers while a controller watches all namespaces, with a
// handler registered before Run, a deliberately slow one (whose backlog gets
// compressed), and one added in the middle of the churn. Compression merges updates, so
// that these handlers prove convergence but not that every change arrived: a second
// controller, with full history, has a slow handler that must see every write of the
// churn, in order. 120 ConfigMaps exist before the controllers start, so that the initial list
// (paged, or a watch-list) has work to do.
func TestChurnDeliversEveryChange(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts controller.Options[cm]
	}{
		{name: "paged list", opts: controller.Options[cm]{Options: reflect.Options[cm]{PageSize: 25}}},
		{name: "watch-list", opts: controller.Options[cm]{Options: reflect.Options[cm]{WatchList: true}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			namespaces := []string{"churn-a", "churn-b"}
			cp, admin := setUp(t, append(namespaces, "seed")...)
			for i := range 120 {
				createConfigMap(t, admin.kube, "seed", fmt.Sprintf("seed-%03d", i), map[string]string{"v": "0"})
			}

			errs, m, fullM := &errorLog{}, &counters{}, &counters{}
			opts, fullOpts := tt.opts, tt.opts
			opts.OnError, opts.Metrics = errs.handle, m
			fullOpts.OnError, fullOpts.Metrics, fullOpts.FullHistory = errs.handle, fullM, true
			c := testctl.New(t, newClients(t, cp.AdminConfig()).kube.CoreV1().ConfigMaps(""), opts)
			full := testctl.New(t, newClients(t, cp.AdminConfig()).kube.CoreV1().ConfigMaps(""), fullOpts)
			early, slow, late := eventcheck.New[cm]("early"), eventcheck.New[cm]("slow"), eventcheck.New[cm]("late")
			every := eventcheck.New[cm]("full-history")
			earlyReg := registered(t)(c.AddHandler("early", early))
			slowReg := registered(t)(c.AddHandler("slow", delayed[cm]{h: slow, d: time.Millisecond}))
			// Slow, so that its backlog holds several events of a key, which full history
			// must all keep.
			everyReg := registered(t)(full.AddHandler("full-history", delayed[cm]{h: every, d: time.Millisecond}))
			stop := start(t, c, full)
			waitSynced(t, "the controller", c.Synced())
			waitSynced(t, "the full-history handler", everyReg.Synced())
			if got := len(c.Store().InNamespace("seed")); got != 120 {
				t.Errorf("synced with %d ConfigMaps in namespace seed, want 120", got)
			}

			ch := newChurn(t, admin.kube, namespaces, 150, 1, false)
			wait := ch.start(t.Context(), 4, 1)
			waitFor(t, "a third of the churn", func() bool { return ch.done.Load() >= int64(ch.total/3) })
			lateReg := registered(t)(c.AddHandler("late", late))
			wait()
			if t.Failed() {
				t.FailNow()
			}
			ch.assertServerMatchesModel(t, namespaces...)
			t.Logf("churn: %d operations on %d keys; controller listed %d times, %d watch events",
				ch.total, len(ch.keys), m.lists.Load(), m.watchEvents.Load())

			list := listConfigMaps(admin.kube, "")
			views := []view{storeView(c.Store()), handlerView(early), handlerView(slow), handlerView(late), handlerView(every)}
			converge(t, list, views...)
			for _, reg := range []*controller.Registration{earlyReg, slowReg, lateReg} {
				waitSynced(t, "a handler", reg.Synced())
			}
			stop()

			assertMatchesServer(t, list, views...)
			for _, h := range []*eventcheck.Checker[cm]{early, slow, late, every} {
				h.Verify(t)
				ch.assertDeletionsCarryLastState(t, h, false)
				assertDeletionsDelivered(t, c.Store(), h, ch.gone(), true)
			}
			ch.assertEveryWriteSeen(t, every)
			if all := errs.all(); len(all) != 0 {
				t.Errorf("the controllers reported errors without any fault: %v", all)
			}
			for _, n := range []*counters{m, fullM} {
				if got := n.lists.Load(); got != 1 {
					t.Errorf("a controller replaced its cache %d times without any fault, want once", got)
				}
			}
		})
	}
}
