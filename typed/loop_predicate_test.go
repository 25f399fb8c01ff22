package typed_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/typedinformer/typedinformer/typed/predicate"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/typed"
)

// step is one write to the fake and the reconciles of ns/a it must lead to.
type step struct {
	do   func(src *fake.ListerWatcher[obj, list]) error
	want []string
}

func update(o obj) func(*fake.ListerWatcher[obj, list]) error {
	return func(src *fake.ListerWatcher[obj, list]) error { _, err := src.Update(o); return err }
}

// versioned is ns/a with the value v and the given generation, labels and annotations.
func versioned(v string, generation int64, labels, annotations map[string]string) obj {
	o := cm("a", v)
	o.Generation, o.Labels, o.Annotations = generation, labels, annotations
	return o
}

func TestLoopReconcilesOnlyTheEventsItsPredicatesPass(t *testing.T) {
	deleteA := func(src *fake.ListerWatcher[obj, list]) error { _, err := src.Delete("ns", "a"); return err }
	tests := []struct {
		name  string
		preds []predicate.Predicate[obj]
		steps []step
	}{
		{
			name:  "GenerationChanged: writes that keep the generation are not reconciled",
			preds: []predicate.Predicate[obj]{predicate.GenerationChanged[obj]},
			steps: []step{
				{do: update(versioned("2", 1, nil, nil))},
				{do: update(versioned("3", 2, nil, nil)), want: []string{"ns/a value=3"}},
				{do: deleteA, want: []string{"ns/a deleted, last value=3"}},
			},
		},
		{
			name:  "Or(LabelsChanged, AnnotationsChanged)",
			preds: []predicate.Predicate[obj]{predicate.Or[obj](predicate.LabelsChanged, predicate.AnnotationsChanged)},
			steps: []step{
				{do: update(versioned("2", 1, nil, nil))},
				{do: update(versioned("3", 1, map[string]string{"app": "web"}, nil)), want: []string{"ns/a value=3"}},
				{do: update(versioned("4", 1, map[string]string{"app": "web"}, map[string]string{"n": "1"})), want: []string{"ns/a value=4"}},
			},
		},
		{
			name: "several predicates must all pass",
			preds: []predicate.Predicate[obj]{predicate.ResourceVersionChanged[obj], func(e event.Event[obj]) bool {
				return e.Object == nil || e.Object.Data["v"] != "skip"
			}},
			steps: []step{
				{do: update(versioned("skip", 1, nil, nil))},
				{do: update(versioned("2", 1, nil, nil)), want: []string{"ns/a value=2"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fake.New[obj, list](versioned("1", 1, nil, nil))
			c := testctl.New(t, src, controller.Options[obj]{})
			got := newCalls()
			l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
				got.add(describe(req))
				return typed.Result{}, nil
			}), typed.Options{}, tt.preds...)
			if err != nil {
				t.Fatal(err)
			}
			runUntilCleanup(context.Background(), t, src, c, l)
			want := []string{"ns/a value=1"}
			got.wait(t, len(want))
			for i, s := range tt.steps {
				if err := s.do(src); err != nil {
					t.Fatal(err)
				}
				// One worker reconciles keys of live changes in order: a reconcile of ns/a
				// that this step led to comes before that of a key created after it.
				barrier := fmt.Sprint("z", i)
				if _, err := src.Create(cm(barrier, "1")); err != nil {
					t.Fatal(err)
				}
				want = append(append(want, s.want...), "ns/"+barrier+" value=1")
				got.wait(t, len(want))
			}
			if diff := cmp.Diff(want, got.wait(t, len(want))); diff != "" {
				t.Errorf("reconciles (-want +got):\n%s", diff)
			}
		})
	}
}

// A deletion that the predicates filter enqueues nothing, yet a reconcile of its key that
// is due anyway gets its last state, and the Loop keeps that state no longer than the key
// is pending.
func TestAFilteredDeletionNeitherLosesNorLeaksItsLastState(t *testing.T) {
	noDeletions := func(e event.Event[obj]) bool { return e.Type != event.Deleted }
	boom := errors.New("boom")
	tests := []struct {
		name   string
		block  string // the key whose reconcile after its update holds the one worker
		result error  // what that reconcile returns once released
		want   []string
	}{
		{name: "of a key nothing is due for: not reconciled",
			want: []string{"ns/a value=1", "ns/b value=1", "ns/z value=1"}},
		{name: "of a key being reconciled that then fails: the retry gets the last state",
			block: "ns/a", result: boom,
			want: []string{"ns/a value=1", "ns/b value=1", "ns/a value=2", "ns/a deleted, last value=2", "ns/z value=1"}},
		{name: "of a key being reconciled that then succeeds: nothing more",
			block: "ns/a",
			want:  []string{"ns/a value=1", "ns/b value=1", "ns/a value=2", "ns/z value=1"}},
		{name: "of a key queued behind another: its reconcile gets the last state",
			block: "ns/b",
			want:  []string{"ns/a value=1", "ns/b value=1", "ns/b value=2", "ns/a deleted, last value=2", "ns/z value=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fake.New[obj, list](cm("a", "1"), cm("b", "1"))
			c := testctl.New(t, src, controller.Options[obj]{})
			got := newCalls()
			blocked, release := make(chan struct{}), make(chan error, 1)
			l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
				got.add(describe(req))
				if req.Key == tt.block && !req.Deleted && req.Object.Data["v"] == "2" {
					close(blocked)
					return typed.Result{}, <-release
				}
				return typed.Result{}, nil
			}), typed.Options{RateLimiter: fastRetries, OnError: func(context.Context, string, error) {}}, noDeletions)
			if err != nil {
				t.Fatal(err)
			}
			runUntilCleanup(context.Background(), t, src, c, l)
			t.Cleanup(func() {
				select {
				case release <- nil: // a failed test must not leave the worker blocked
				default:
				}
			})
			got.wait(t, 2)
			if tt.block != "" {
				ns, name := event.SplitKey(tt.block)
				if _, err := src.Update(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"v": "2"}}); err != nil {
					t.Fatal(err)
				}
				receive(t, blocked, "the reconcile after the update starts")
			}
			if tt.block == "ns/b" {
				if _, err := src.Update(cm("a", "2")); err != nil {
					t.Fatal(err)
				}
				eventually(t, "ns/a is queued", func() bool { live, _ := l.Queued(); return live == 1 })
			}
			if _, err := src.Delete("ns", "a"); err != nil {
				t.Fatal(err)
			}
			if tt.block != "" {
				eventually(t, "the Loop keeps the filtered deletion's last state", func() bool {
					last, ok := l.LastKnown("ns/a")
					return ok && last.Data["v"] == "2"
				})
				release <- tt.result
			}
			got.wait(t, len(tt.want)-1)
			if _, err := src.Create(cm("z", "1")); err != nil {
				t.Fatal(err)
			}
			all := got.wait(t, len(tt.want))
			slices.Sort(all[:2]) // the initial reconciles come in no particular order
			if diff := cmp.Diff(tt.want, all); diff != "" {
				t.Errorf("reconciles (-want +got):\n%s", diff)
			}
			// With one worker, every reconcile of ns/a has ended before that of ns/z.
			if n, retries := l.Tombstones(), l.ScheduledRetries(); n != 0 || retries != 0 {
				t.Errorf("after the deletion: %d last states kept and %d retries scheduled, want none", n, retries)
			}
		})
	}
}

func TestAPanickingPredicateLetsTheEventThroughAndIsReported(t *testing.T) {
	src := fake.New[obj, list](cm("a", "1"))
	c := testctl.New(t, src, controller.Options[obj]{})
	got := newCalls()
	errs := make(chan error, 10)
	l, err := typed.NewLoop(c, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		got.add(describe(req))
		return typed.Result{}, nil
	}), typed.Options{OnError: func(_ context.Context, _ string, err error) { errs <- err }},
		predicate.ResourceVersionChanged, func(e event.Event[obj]) bool {
			if e.Type == event.Modified {
				panic("predicate boom")
			}
			return true
		})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(context.Background(), t, src, c, l)
	got.wait(t, 1)
	if _, err := src.Update(cm("a", "2")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ns/a value=1", "ns/a value=2"}, got.wait(t, 2)); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
	want := "predicate 1 panicked on MODIFIED of ns/a: predicate boom"
	if err := receive(t, errs, "the panic is reported"); err == nil || err.Error() != want {
		t.Errorf("reported %v, want %q", err, want)
	}
}

func TestRelatedMapsOnlyTheEventsItsPredicatesPass(t *testing.T) {
	secret := func(name, owner string, labels map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner}}}}
	}
	primaries := fake.New[obj, list](cm("a", "1"), cm("b", "1"))
	secondaries := fake.New[*corev1.Secret, *corev1.SecretList](secret("a-copy", "a", nil))
	pc := testctl.New(t, primaries, controller.Options[obj]{})
	sc := testctl.New(t, secondaries, controller.Options[*corev1.Secret]{})
	got := newCalls()
	l, err := typed.NewLoop(pc, typed.ReconcilerFunc[obj](func(_ context.Context, req typed.Request[obj]) (typed.Result, error) {
		got.add(req.Key)
		return typed.Result{}, nil
	}), typed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	typed.Related(l, sc, func(s *corev1.Secret) []string { return []string{"ns/" + s.OwnerReferences[0].Name} }, predicate.LabelsChanged)
	ctx := runUntilEnd(context.Background(), t, pc.Run, sc.Run, l.Run)
	got.wait(t, 2)
	_ = secondaries.WaitForWatchers(ctx, 1)
	// Each write to a-copy is followed by a Secret of ns/b: one worker reconciles ns/b
	// after any reconcile of ns/a that the write led to.
	writes := []*corev1.Secret{secret("a-copy", "a", nil), secret("a-copy", "a", map[string]string{"v": "2"})}
	for i, s := range writes {
		s.Data = map[string][]byte{"write": []byte(fmt.Sprint(i))}
		if _, err := secondaries.Update(s); err != nil {
			t.Fatal(err)
		}
		if _, err := secondaries.Create(secret(fmt.Sprint("b-copy-", i), "b", nil)); err != nil {
			t.Fatal(err)
		}
		got.wait(t, 3+2*i) // the next write must not merge with this one
	}
	want := []string{"ns/a", "ns/b", "ns/b", "ns/a", "ns/b"} // the list, then the writes: keeping the labels, changing them
	all := got.wait(t, len(want))
	slices.Sort(all[:2]) // the initial reconciles come in no particular order
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("reconciles (-want +got):\n%s", diff)
	}
}
