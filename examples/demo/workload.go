package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/typedinformer/typedinformer/eventcache"
)

var (
	colors = []string{"red", "green", "blue", "amber", "violet"}
	words  = []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"}
	// optionalKeys are the keys a new ConfigMap may have besides "color".
	optionalKeys = []string{"size", "owner", "tier"}
)

type opKind uint8

const (
	opCreate opKind = iota
	opUpdate
	opDelete
)

// op is one write. round numbers an object's updates, from 1.
type op struct {
	kind  opKind
	name  string
	round int
}

// plan is the churn: each worker's ops, in order. Every object belongs to one worker, so
// an object's create, updates and delete never race with each other, while the workers
// interleave freely.
type plan struct {
	perWorker                 [][]op
	creates, updates, deletes int
}

func (p plan) total() int { return p.creates + p.updates + p.deletes }

// workload writes ConfigMaps through the API, as the users of a cluster would.
type workload struct {
	s      settings
	ns     string
	client typedcorev1.ConfigMapInterface
	rng    *rand.Rand // used only before the workers start
	// staleReads counts updates whose copy from the controller's cache was missing or
	// out of date (the write came back 409 Conflict) and that re-read from the server.
	staleReads atomic.Int64
}

func newWorkload(s settings, ns string, client typedcorev1.ConfigMapInterface) *workload {
	return &workload{s: s, ns: ns, client: client, rng: rand.New(rand.NewPCG(s.seed, 0))}
}

func objName(i int) string { return fmt.Sprintf("cm-%03d", i) }

// newConfigMap returns a ConfigMap with a color and a random selection of other keys.
func newConfigMap(name string, rng *rand.Rand) *corev1.ConfigMap {
	data := map[string]string{"color": colors[rng.IntN(len(colors))]}
	for _, k := range optionalKeys {
		if rng.IntN(2) == 0 {
			data[k] = words[rng.IntN(len(words))]
		}
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{demoLabel: "typedinformer-demo"}},
		Data:       data,
	}
}

// precreate creates the objects that the controller's first list will find.
func (w *workload) precreate(ctx context.Context) error {
	ops := make([][]op, w.s.workers)
	for i := range w.s.precreate {
		ops[i%w.s.workers] = append(ops[i%w.s.workers], op{kind: opCreate, name: objName(i)})
	}
	return w.run(ctx, nil, plan{perWorker: ops})
}

// plan draws the churn: the objects created during the churn, then 1 to maxUpdates
// updates of every object, then the deletion of a deleteRatio fraction of them. Each
// worker's share is shuffled so that creates, updates and deletes overlap in time.
func (w *workload) plan() plan {
	var p plan
	n := w.s.precreate + w.s.create
	seqs := make([][][]op, w.s.workers) // worker -> object -> its ops in order
	for i := range n {
		var seq []op
		if i >= w.s.precreate {
			seq = append(seq, op{kind: opCreate, name: objName(i)})
			p.creates++
		}
		for r := range 1 + w.rng.IntN(w.s.maxUpdates) {
			seq = append(seq, op{kind: opUpdate, name: objName(i), round: r + 1})
			p.updates++
		}
		if w.rng.Float64() < w.s.deleteRatio {
			seq = append(seq, op{kind: opDelete, name: objName(i)})
			p.deletes++
		}
		seqs[i%w.s.workers] = append(seqs[i%w.s.workers], seq)
	}
	p.perWorker = make([][]op, w.s.workers)
	for wi, objs := range seqs {
		// Interleave the objects' sequences at random, keeping each one's order: pick
		// the next op from an object chosen in proportion to how many ops it has left,
		// which spreads every object's ops over the whole churn.
		left := 0
		for _, s := range objs {
			left += len(s)
		}
		for ; left > 0; left-- {
			k := w.rng.IntN(left)
			for j, s := range objs {
				if k < len(s) {
					p.perWorker[wi] = append(p.perWorker[wi], s[0])
					objs[j] = s[1:]
					break
				}
				k -= len(s)
			}
		}
	}
	return p
}

// run executes p, one goroutine per worker, and returns the first error, after which
// the other workers stop. Updates read the object from store (nil: from the server).
func (w *workload) run(ctx context.Context, store *eventcache.Store[*corev1.ConfigMap], p plan) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for wi, ops := range p.perWorker {
		rng := rand.New(rand.NewPCG(w.s.seed, uint64(wi)+1))
		wg.Go(func() {
			for _, o := range ops {
				if err := w.do(ctx, store, rng, o); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

func (w *workload) do(ctx context.Context, store *eventcache.Store[*corev1.ConfigMap], rng *rand.Rand, o op) error {
	var err error
	switch o.kind {
	case opCreate:
		_, err = w.client.Create(ctx, newConfigMap(o.name, rng), metav1.CreateOptions{})
	case opUpdate:
		err = w.update(ctx, store, rng, o)
	case opDelete:
		err = w.client.Delete(ctx, o.name, metav1.DeleteOptions{})
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s %s: %w", [...]string{"creating", "updating", "deleting"}[o.kind], o.name, err)
	}
	return err
}

// update is the read-modify-write of a controller: read the object from the cache, which
// costs no request, copy it (cached objects are shared and must never be modified), change
// the copy and write it with its resource version. When the cache was behind, the server
// answers 409 Conflict and the update starts again from a fresh GET.
func (w *workload) update(ctx context.Context, store *eventcache.Store[*corev1.ConfigMap], rng *rand.Rand, o op) error {
	var cm *corev1.ConfigMap
	ok := false
	if store != nil {
		cm, ok = store.GetByName(w.ns, o.name)
	}
	if !ok {
		w.staleReads.Add(1)
	}
	for attempt := 1; ; attempt++ {
		if !ok {
			var err error
			if cm, err = w.client.Get(ctx, o.name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		cm = cm.DeepCopy()
		mutate(cm, rng, o.round)
		_, err := w.client.Update(ctx, cm, metav1.UpdateOptions{})
		if err == nil || !apierrors.IsConflict(err) || attempt == 5 {
			return err
		}
		if ok {
			w.staleReads.Add(1)
		}
		ok = false
	}
}

// mutate applies update number round to cm: it always sets "round", and also changes
// the color, adds a note or removes a key, so that the printed diffs vary.
func mutate(cm *corev1.ConfigMap, rng *rand.Rand, round int) {
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data["round"] = strconv.Itoa(round)
	switch rng.IntN(3) {
	case 0:
		cm.Data["color"] = colors[rng.IntN(len(colors))]
	case 1:
		cm.Data["note-"+strconv.Itoa(round)] = words[rng.IntN(len(words))] + " " + words[rng.IntN(len(words))]
	case 2:
		var keys []string
		for k := range cm.Data {
			if k != "round" {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			slices.Sort(keys) // map order is random; keep the seeded workload reproducible
			delete(cm.Data, keys[rng.IntN(len(keys))])
		}
	}
}
