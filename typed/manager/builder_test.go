package manager_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/manager"
)

type (
	pod       = *corev1.Pod
	podList   = *corev1.PodList
	namespace = *corev1.Namespace
)

// gadget is a custom resource's Go struct: in no scheme, so its kind must be named.
type gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

func (g *gadget) DeepCopyObject() runtime.Object {
	out := *g
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

var gadgetKind = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}

// controlledBy returns an owner reference to a ConfigMap, a controller reference when
// controller is true.
func controlledBy(name string, controller bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: types.UID("uid-" + name), Controller: &controller}
}

func ownedSecret(ns, name string, labels map[string]string, refs ...metav1.OwnerReference) secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, OwnerReferences: refs},
		Data: map[string][]byte{"v": []byte("1")}}
}

// keyLog records the keys a Loop reconciles, for the test to read between sentinels.
type keyLog struct {
	mu   sync.Mutex
	keys []string
	ch   chan string
}

func (k *keyLog) reconcile(_ context.Context, req typed.Request[cm]) (typed.Result, error) {
	k.mu.Lock()
	k.keys = append(k.keys, req.Key)
	k.mu.Unlock()
	k.ch <- req.Key
	return typed.Result{}, nil
}

// until returns the keys reconciled before sentinel, sorted and without duplicates, and
// forgets them. The sentinel's event passes through the same handler as what the test
// did before it, after it, and a Loop with one worker reconciles the keys of live events
// in the order they were queued: every key the test's action queued is reconciled
// before the sentinel's, so what is absent was never queued.
func (k *keyLog) until(t *testing.T, sentinel string) []string {
	t.Helper()
	for key := receive(t, k.ch, "the sentinel "+sentinel+" reconciled"); key != sentinel; key = receive(t, k.ch, "the sentinel "+sentinel+" reconciled") {
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	got := slices.Compact(slices.Sorted(slices.Values(slices.DeleteFunc(k.keys, func(key string) bool { return key == sentinel }))))
	k.keys = nil
	return got
}

// ignored filters the events of objects labelled ignore=true.
func ignored[T event.Object](e event.Event[T]) bool { return e.Object.GetLabels()["ignore"] != "true" }

// The Builder's declaration says which events reconcile which keys: the primary kind's
// own (through its predicates), an owned object's controller when that is of the primary
// kind (through the owned kind's predicates), and a watched object's mapped keys; in the
// primary's namespaces only.
func TestBuilderReconcilesWhatItsDeclarationSays(t *testing.T) {
	type fakes struct {
		configMaps *cmFake
		secrets    *fake.ListerWatcher[secret, secretList]
		pods       *fake.ListerWatcher[pod, podList]
	}
	create := func(t *testing.T, f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	createSecret := func(t *testing.T, f fakes, s secret) {
		create(t, func() error { _, err := f.secrets.Create(s); return err })
	}
	updateSecret := func(t *testing.T, f fakes, s secret) {
		create(t, func() error { _, err := f.secrets.Update(s); return err })
	}
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, f fakes) // before the manager runs
		act    func(t *testing.T, f fakes)
		// through says which handler the action's events pass through, and so which one
		// the sentinel's must: "primary", "owned" or "watched".
		through string
		want    []string
	}{{
		name:    "an owned object created reconciles its controller",
		act:     func(t *testing.T, f fakes) { createSecret(t, f, ownedSecret("a", "s", nil, controlledBy("web", true))) },
		through: "owned",
		want:    []string{"a/web"},
	}, {
		name:   "an owned object changed behind the controller's back reconciles its controller",
		before: func(t *testing.T, f fakes) { createSecret(t, f, ownedSecret("a", "s", nil, controlledBy("web", true))) },
		act: func(t *testing.T, f fakes) {
			s, _ := f.secrets.Get("a", "s")
			s.Data["v"] = []byte("edited")
			updateSecret(t, f, s)
		},
		through: "owned",
		want:    []string{"a/web"},
	}, {
		name:   "an owned object deleted reconciles its controller",
		before: func(t *testing.T, f fakes) { createSecret(t, f, ownedSecret("a", "s", nil, controlledBy("web", true))) },
		act: func(t *testing.T, f fakes) {
			create(t, func() error { _, err := f.secrets.Delete("a", "s"); return err })
		},
		through: "owned",
		want:    []string{"a/web"},
	}, {
		name: "an object owned without being controlled reconciles nothing",
		act: func(t *testing.T, f fakes) {
			createSecret(t, f, ownedSecret("a", "s", nil, controlledBy("web", false)))
		},
		through: "owned",
	}, {
		name: "an object controlled by another kind reconciles nothing",
		act: func(t *testing.T, f fakes) {
			ref := controlledBy("web", true)
			ref.APIVersion, ref.Kind = "apps/v1", "Deployment"
			createSecret(t, f, ownedSecret("a", "s", nil, ref))
		},
		through: "owned",
	}, {
		name: "an object controlled by a kind of the same name in another API group reconciles nothing",
		act: func(t *testing.T, f fakes) {
			ref := controlledBy("web", true)
			ref.APIVersion = "example.com/v1"
			createSecret(t, f, ownedSecret("a", "s", nil, ref))
		},
		through: "owned",
	}, {
		name: "an object controlled by another owner reconciles that owner, not one it merely references",
		act: func(t *testing.T, f fakes) {
			createSecret(t, f, ownedSecret("a", "s", nil, controlledBy("web", false), controlledBy("other", true)))
		},
		through: "owned",
		want:    []string{"a/other"},
	}, {
		name:   "an owned object handed to another controller reconciles both",
		before: func(t *testing.T, f fakes) { createSecret(t, f, ownedSecret("a", "s", nil, controlledBy("web", true))) },
		act: func(t *testing.T, f fakes) {
			s, _ := f.secrets.Get("a", "s")
			s.OwnerReferences = []metav1.OwnerReference{controlledBy("other", true)}
			updateSecret(t, f, s)
		},
		through: "owned",
		want:    []string{"a/other", "a/web"},
	}, {
		name:    "an owned object outside the primary's namespaces is not even watched",
		act:     func(t *testing.T, f fakes) { createSecret(t, f, ownedSecret("b", "s", nil, controlledBy("web", true))) },
		through: "owned",
	}, {
		name:   "an owned kind's event its predicates filter reconciles nothing",
		before: func(t *testing.T, f fakes) { createSecret(t, f, ownedSecret("a", "s", nil, controlledBy("web", true))) },
		act: func(t *testing.T, f fakes) {
			s, _ := f.secrets.Get("a", "s")
			s.Labels = map[string]string{"ignore": "true"}
			updateSecret(t, f, s)
		},
		through: "owned",
	}, {
		name: "a primary object's own change reconciles it",
		act: func(t *testing.T, f fakes) {
			create(t, func() error { _, err := f.configMaps.Create(configMap("a", "web", nil)); return err })
		},
		through: "primary",
		want:    []string{"a/web"},
	}, {
		name: "a primary event its predicates filter reconciles nothing",
		act: func(t *testing.T, f fakes) {
			create(t, func() error {
				_, err := f.configMaps.Create(configMap("a", "web", map[string]string{"ignore": "true"}))
				return err
			})
		},
		through: "primary",
	}, {
		name: "a watched object reconciles the keys its mapping gives",
		act: func(t *testing.T, f fakes) {
			create(t, func() error {
				_, err := f.pods.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", Labels: map[string]string{"config": "web"}}})
				return err
			})
		},
		through: "watched",
		want:    []string{"a/web"},
	}, {
		name: "a watched object's key in a namespace the primary does not cache is dropped",
		act: func(t *testing.T, f fakes) {
			create(t, func() error {
				_, err := f.pods.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p",
					Labels: map[string]string{"config": "web", "config-namespace": "b"}}})
				return err
			})
		},
		through: "watched",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakes{configMaps: fake.New[cm, cmList](), secrets: fake.New[secret, secretList](), pods: fake.New[pod, podList]()}
			if tc.before != nil {
				tc.before(t, f)
			}
			m := manager.New(manager.Options{})
			b := manager.For(m, source(f.configMaps), manager.CacheOptions[cm]{Namespaces: []string{"a"}}).WithPredicates(ignored)
			manager.Owns(b, sourceOf(f.secrets), ignored)
			manager.Watches(b, sourceOf(f.pods), func(p pod) []string {
				return []string{cmpOr(p.Labels["config-namespace"], p.Namespace) + "/" + p.Labels["config"]}
			})
			log := &keyLog{ch: make(chan string, 100)}
			if _, err := b.Complete(typed.ReconcilerFunc[cm](log.reconcile)); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			run(t, m)
			if tc.before != nil {
				// What every tc.before makes, an owned Secret of web, reconciles a/web from the
				// initial list: at the initial list's priority, so after a live sentinel's.
				log.until(t, "a/web")
			}
			create(t, func() error { _, err := f.configMaps.Create(configMap("a", "sentinel-0", nil)); return err })
			log.until(t, "a/sentinel-0")

			tc.act(t, f)
			sentinel := "sentinel-1"
			switch tc.through {
			case "primary":
				create(t, func() error { _, err := f.configMaps.Create(configMap("a", sentinel, nil)); return err })
			case "owned":
				createSecret(t, f, ownedSecret("a", sentinel, nil, controlledBy(sentinel, true)))
			case "watched":
				create(t, func() error {
					_, err := f.pods.Create(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: sentinel, Labels: map[string]string{"config": sentinel}}})
					return err
				})
			}
			if diff := cmp.Diff(tc.want, log.until(t, "a/"+sentinel)); diff != "" {
				t.Errorf("keys reconciled (-want +got):\n%s", diff)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// A cluster-scoped primary kind owns objects in any namespace: an owned object's event
// reconciles its controller's name.
func TestOwnsByAClusterScopedOwnerReconcilesTheOwnersName(t *testing.T) {
	namespaces := fake.New[namespace, *corev1.NamespaceList]()
	configMaps := fake.New[cm, cmList]()
	m := manager.New(manager.Options{})
	b := manager.For(m, manager.ClusterScoped[namespace](namespaces))
	owned := manager.Owns(b, source(configMaps))
	log := &keyLog{ch: make(chan string, 100)}
	_, err := b.Complete(typed.ReconcilerFunc[namespace](func(ctx context.Context, req typed.Request[namespace]) (typed.Result, error) {
		return log.reconcile(ctx, typed.Request[cm]{Key: req.Key})
	}))
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if got, want := owned.Name(), "*v1.ConfigMap"; got != want {
		t.Errorf("the owned cache is %q, want %q: all namespaces", got, want)
	}
	run(t, m)
	controller := true
	for i, ns := range []string{"x", "y"} {
		obj := configMap(ns, "cm", nil)
		obj.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: "team", UID: "uid-team", Controller: &controller}}
		if _, err := configMaps.Create(obj); err != nil {
			t.Fatal(err)
		}
		sentinel := fmt.Sprintf("sentinel-%d", i)
		obj = configMap(ns, sentinel, nil)
		obj.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: sentinel, UID: "uid-s", Controller: &controller}}
		if _, err := configMaps.Create(obj); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"team"}, log.until(t, sentinel)); diff != "" {
			t.Errorf("an object in namespace %s: keys reconciled (-want +got):\n%s", ns, diff)
		}
	}
}

// Owns and Watches given a Source cache the owned or watched kind in the scope the
// primary implies; given a Cache, they use it.
func TestOwnedAndWatchedCachesFollowThePrimarysScope(t *testing.T) {
	secrets := fake.New[secret, secretList]()
	for _, tc := range []struct {
		name string
		// declare declares a controller and returns the owned or watched cache's name.
		declare func(m *manager.Manager) (*manager.Builder[cm], string)
		want    string
	}{{
		name: "a namespaced owner's owned kind is cached in its namespaces",
		declare: func(m *manager.Manager) (*manager.Builder[cm], string) {
			b := manager.For(m, source(fake.New[cm, cmList]()), manager.CacheOptions[cm]{Namespaces: []string{"b", "a"}})
			return b, manager.Owns(b, sourceOf(secrets)).Name()
		},
		want: "*v1.Secret namespaces=a,b",
	}, {
		name: "a watched namespaced kind is cached in the primary's namespace",
		declare: func(m *manager.Manager) (*manager.Builder[cm], string) {
			b := manager.For(m, source(fake.New[cm, cmList]()), manager.CacheOptions[cm]{Namespaces: []string{"a"}})
			return b, manager.Watches(b, sourceOf(secrets), func(secret) []string { return nil }).Name()
		},
		want: "*v1.Secret namespace=a",
	}, {
		name: "a watched cluster-scoped kind is cached cluster-wide",
		declare: func(m *manager.Manager) (*manager.Builder[cm], string) {
			b := manager.For(m, source(fake.New[cm, cmList]()), manager.CacheOptions[cm]{Namespaces: []string{"a"}})
			return b, manager.Watches(b, manager.ClusterScoped[namespace](fake.New[namespace, *corev1.NamespaceList]()),
				func(namespace) []string { return nil }).Name()
		},
		want: "*v1.Namespace",
	}, {
		name: "a Cache the caller acquired is used as it is",
		declare: func(m *manager.Manager) (*manager.Builder[cm], string) {
			b := manager.For(m, source(fake.New[cm, cmList]()), manager.CacheOptions[cm]{Namespaces: []string{"a"}})
			mine, err := manager.Acquire(m, sourceOf(secrets), manager.CacheOptions[secret]{Namespaces: []string{"c"}})
			if err != nil {
				return b, err.Error()
			}
			if got := manager.Owns(b, mine); got != mine {
				return b, "another cache"
			}
			return b, mine.Name()
		},
		want: "*v1.Secret namespace=c",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := manager.New(manager.Options{})
			b, got := tc.declare(m)
			if got != tc.want {
				t.Errorf("cache %q, want %q", got, tc.want)
			}
			if _, err := b.Complete(typed.ReconcilerFunc[cm](newReconciles().reconcile)); err != nil {
				t.Errorf("Complete: %v", err)
			}
			run(t, m)
		})
	}
}

// The Loop is named after the primary kind, which client-go's scheme gives for built-in
// kinds and WithKind for others; typed.Options.Name wins.
func TestTheLoopIsNamedAfterThePrimaryKind(t *testing.T) {
	reconcileGadget := typed.ReconcilerFunc[*gadget](func(context.Context, typed.Request[*gadget]) (typed.Result, error) {
		return typed.Result{}, nil
	})
	for _, tc := range []struct {
		name     string
		complete func(m *manager.Manager) error
		want     string
	}{{
		name: "a built-in kind is looked up in client-go's scheme",
		complete: func(m *manager.Manager) error {
			_, err := manager.For(m, source(fake.New[cm, cmList]())).Complete(typed.ReconcilerFunc[cm](newReconciles().reconcile))
			return err
		},
		want: "loop configmap",
	}, {
		name: "a custom resource's kind is named with WithKind",
		complete: func(m *manager.Manager) error {
			_, err := manager.For(m, manager.Namespaced[*gadget](func(string) *fake.ListerWatcher[*gadget, *client.List[*gadget]] {
				return fake.New[*gadget, *client.List[*gadget]]()
			})).WithKind(gadgetKind).Complete(reconcileGadget)
			return err
		},
		want: "loop gadget",
	}, {
		name: "without WithKind, a custom resource's loop is named after its Go type",
		complete: func(m *manager.Manager) error {
			_, err := manager.For(m, manager.Namespaced[*gadget](func(string) *fake.ListerWatcher[*gadget, *client.List[*gadget]] {
				return fake.New[*gadget, *client.List[*gadget]]()
			})).Complete(reconcileGadget)
			return err
		},
		want: "loop *manager_test.gadget",
	}, {
		name: "typed.Options.Name wins",
		complete: func(m *manager.Manager) error {
			_, err := manager.For(m, source(fake.New[cm, cmList]())).WithOptions(typed.Options{Name: "settings"}).
				Complete(typed.ReconcilerFunc[cm](newReconciles().reconcile))
			return err
		},
		want: "loop settings",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := manager.New(manager.Options{})
			if err := tc.complete(m); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if body := get(m.ReadyzHandler(), "/readyz?verbose").Body; !strings.Contains(body, tc.want+" ") {
				t.Errorf("/readyz says\n%s\nwant a check %q", body, tc.want)
			}
		})
	}
}

// Complete returns every mistake of a declaration at once, joined, adds no Loop, and
// releases every cache the Builder acquired.
func TestCompleteReturnsEveryErrorOfTheDeclarationAndReleasesItsCaches(t *testing.T) {
	reconciler := typed.ReconcilerFunc[cm](newReconciles().reconcile)
	other := manager.New(manager.Options{})
	for _, tc := range []struct {
		name string
		// declare returns the Builder and the caches it returned.
		declare    func(m *manager.Manager) (*manager.Builder[cm], typed.Reconciler[cm], []waiter)
		wantIs     []error
		wantInText []string
	}{{
		name: "a nil manager",
		declare: func(*manager.Manager) (*manager.Builder[cm], typed.Reconciler[cm], []waiter) {
			return manager.For(nil, source(fake.New[cm, cmList]())), reconciler, nil
		},
		wantIs: []error{controller.ErrNilArgument},
	}, {
		name: "a nil reconciler",
		declare: func(m *manager.Manager) (*manager.Builder[cm], typed.Reconciler[cm], []waiter) {
			return manager.For(m, source(fake.New[cm, cmList]())), nil, nil
		},
		wantIs: []error{controller.ErrNilArgument},
	}, {
		name: "a Source without a ListerWatcher",
		declare: func(m *manager.Manager) (*manager.Builder[cm], typed.Reconciler[cm], []waiter) {
			return manager.For(m, manager.Source[cm, cmList]{}), reconciler, nil
		},
		wantIs: []error{controller.ErrNilArgument},
	}, {
		name: "a nil predicate",
		declare: func(m *manager.Manager) (*manager.Builder[cm], typed.Reconciler[cm], []waiter) {
			b := manager.For(m, source(fake.New[cm, cmList]())).WithPredicates(nil)
			return b, reconciler, []waiter{manager.Owns(b, sourceOf(fake.New[secret, secretList]()), nil)}
		},
		wantIs:     []error{controller.ErrNilArgument},
		wantInText: []string{"WithPredicates(*v1.ConfigMap)", "Owns(*v1.Secret)"},
	}, {
		name: "a nil mapping",
		declare: func(m *manager.Manager) (*manager.Builder[cm], typed.Reconciler[cm], []waiter) {
			b := manager.For(m, source(fake.New[cm, cmList]()))
			return b, reconciler, []waiter{manager.Watches(b, sourceOf(fake.New[secret, secretList]()), nil)}
		},
		wantIs: []error{controller.ErrNilArgument},
	}, {
		name: "a cluster-scoped kind owned by a namespaced one",
		declare: func(m *manager.Manager) (*manager.Builder[cm], typed.Reconciler[cm], []waiter) {
			b := manager.For(m, source(fake.New[cm, cmList]()))
			owned := manager.Owns(b, manager.ClusterScoped[namespace](fake.New[namespace, *corev1.NamespaceList]()))
			return b, reconciler, []waiter{owned}
		},
		wantIs: []error{manager.ErrScope},
	}, {
		name: "a Cache of another manager",
		declare: func(m *manager.Manager) (*manager.Builder[cm], typed.Reconciler[cm], []waiter) {
			theirs, err := manager.Acquire(other, sourceOf(fake.New[secret, secretList]()))
			if err != nil {
				panic(err)
			}
			b := manager.For(m, source(fake.New[cm, cmList]()))
			return b, reconciler, []waiter{manager.Owns(b, theirs)}
		},
		wantInText: []string{"belongs to another manager"},
	}, {
		name: "several mistakes, each reported",
		declare: func(m *manager.Manager) (*manager.Builder[cm], typed.Reconciler[cm], []waiter) {
			b := manager.For(m, source(fake.New[cm, cmList]()))
			owned := manager.Owns(b, manager.ClusterScoped[namespace](fake.New[namespace, *corev1.NamespaceList]()))
			watched := manager.Watches(b, sourceOf(fake.New[secret, secretList]()), nil)
			return b, nil, []waiter{owned, watched}
		},
		wantIs:     []error{manager.ErrScope, controller.ErrNilArgument},
		wantInText: []string{"Owns(*v1.Namespace)", "Watches(*v1.Secret)", "Complete(*v1.ConfigMap)"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := manager.New(manager.Options{})
			b, r, caches := tc.declare(m)
			l, err := b.Complete(r)
			if err == nil || l != nil {
				t.Fatalf("Complete = %v, %v; want an error and no Loop", l, err)
			}
			for _, want := range tc.wantIs {
				if !errors.Is(err, want) {
					t.Errorf("Complete = %v; want it to wrap %v", err, want)
				}
			}
			for _, want := range tc.wantInText {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Complete = %v; want it to say %q", err, want)
				}
			}
			// A released handle says so; a held one would wait, and returns the ended
			// context's error.
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			if c := b.Cache(); c != nil {
				caches = append(caches, c)
			}
			for i, c := range caches {
				if err := c.WaitForSync(ended); c != nil && !isNilCache(c) && !errors.Is(err, manager.ErrReleased) {
					t.Errorf("cache %d: WaitForSync = %v; want ErrReleased", i, err)
				}
			}
			if body := get(m.ReadyzHandler(), "/readyz?verbose").Body; strings.Contains(body, "loop") {
				t.Errorf("a Loop was added: /readyz says\n%s", body)
			}
			if _, err := b.Complete(reconciler); !errors.Is(err, manager.ErrAlreadyCompleted) {
				t.Errorf("Complete again = %v, want ErrAlreadyCompleted", err)
			}
		})
	}
}

// waiter is a cache handle of any type.
type waiter interface {
	WaitForSync(ctx context.Context) error
}

func isNilCache(c waiter) bool {
	switch c := c.(type) {
	case *manager.Cache[secret]:
		return c == nil
	case *manager.Cache[namespace]:
		return c == nil
	case *manager.Cache[cm]:
		return c == nil
	}
	return c == nil
}

// Owns needs the primary kind's API group and kind: a custom resource's Go struct names
// it with WithKind.
func TestOwnsNeedsTheKindOfACustomResource(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind schema.GroupVersionKind
		want error
	}{
		{name: "not named", want: manager.ErrNoOwnerKind},
		{name: "named with WithKind", kind: gadgetKind},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := manager.New(manager.Options{})
			b := manager.For(m, manager.Namespaced[*gadget](func(string) *fake.ListerWatcher[*gadget, *client.List[*gadget]] {
				return fake.New[*gadget, *client.List[*gadget]]()
			}))
			if !tc.kind.Empty() {
				b = b.WithKind(tc.kind)
			}
			manager.Owns(b, sourceOf(fake.New[secret, secretList]()))
			_, err := b.Complete(typed.ReconcilerFunc[*gadget](func(context.Context, typed.Request[*gadget]) (typed.Result, error) {
				return typed.Result{}, nil
			}))
			if !errors.Is(err, tc.want) || (err != nil && !strings.Contains(err.Error(), "WithKind")) {
				t.Errorf("Complete = %v, want %v (saying to use WithKind)", err, tc.want)
			}
		})
	}
}

// The Loop that Complete returns is a Manager Loop like NewLoop's: a reconcile can
// enqueue another key by hand.
func TestABuildersLoopTakesKeysByHand(t *testing.T) {
	configMaps := fake.New[cm, cmList]()
	m := manager.New(manager.Options{})
	log := &keyLog{ch: make(chan string, 100)}
	_, err := manager.For(m, source(configMaps)).Complete(typed.ReconcilerFunc[cm](func(ctx context.Context, req typed.Request[cm]) (typed.Result, error) {
		if req.Key == "a/web" {
			if err := manager.Enqueue(ctx, "a/by-hand"); err != nil {
				t.Errorf("Enqueue: %v", err)
			}
		}
		return log.reconcile(ctx, req)
	}))
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	run(t, m)
	if _, err := configMaps.Create(configMap("a", "web", nil)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a/web"}, log.until(t, "a/by-hand")); diff != "" {
		t.Errorf("keys reconciled before the one enqueued by hand (-want +got):\n%s", diff)
	}
}
