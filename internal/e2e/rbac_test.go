package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/testsupport/eventcheck"
	"github.com/typedinformer/typedinformer/internal/testsupport/testctl"
	"github.com/typedinformer/typedinformer/reflect"
)

// forbiddenBackoff doubles from 200 ms without jitter, so that the attempts a fake clock
// allows are exact.
var forbiddenBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 100, Cap: 5 * time.Second}

// grantConfigMapReader lets user get, list and watch the ConfigMaps of namespace, and
// waits until the apiserver's authorizer has caught up.
func grantConfigMapReader(t *testing.T, admin, user kubernetes.Interface, namespace, userName string) {
	t.Helper()
	rbac := admin.RbacV1()
	if _, err := rbac.Roles(namespace).Create(timeout(t), &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(namespace).Create(timeout(t), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader-" + userName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmap-reader"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: userName}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, userName+" to be allowed to list ConfigMaps in "+namespace, func() bool {
		return try(t, func(ctx context.Context) error {
			_, err := user.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{Limit: 1})
			return err
		})
	})
}

// TestRBAC runs controllers as a user who may read the ConfigMaps of one namespace only.
func TestRBAC(t *testing.T) {
	const ns = "team-a"
	cp, admin := setUp(t, ns, "team-b")
	alice := newClients(t, cp.UserConfig("alice"))
	grantConfigMapReader(t, admin.kube, alice.kube, ns, "alice")
	for i := range 5 {
		createConfigMap(t, admin.kube, ns, fmt.Sprintf("cm-%d", i), map[string]string{"v": "0"})
		createConfigMap(t, admin.kube, "team-b", fmt.Sprintf("cm-%d", i), map[string]string{"v": "0"})
	}

	t.Run("namespace-scoped controller works", func(t *testing.T) {
		errs := &errorLog{}
		c := testctl.New(t, alice.kube.CoreV1().ConfigMaps(ns), controller.Options[cm]{Options: reflect.Options[cm]{OnError: errs.handle}})
		h := eventcheck.New[cm]("checker")
		reg := registered(t)(c.AddHandler("checker", h))
		stop := start(t, c)
		waitSynced(t, "the handler", reg.Synced())

		updateConfigMap(t, admin.kube, ns, "cm-0", map[string]string{"v": "1"})
		deleteConfigMap(t, admin.kube, ns, "cm-1")
		createConfigMap(t, admin.kube, ns, "cm-new", map[string]string{"v": "0"})
		updateConfigMap(t, admin.kube, "team-b", "cm-0", map[string]string{"v": "1"}) // not visible

		list := listConfigMaps(admin.kube, ns)
		converge(t, list, storeView(c.Store()), handlerView(h))
		stop()
		assertMatchesServer(t, list, storeView(c.Store()), handlerView(h))
		h.Verify(t)
		assertDeletionsDelivered(t, c.Store(), h, []string{ns + "/cm-1"}, false)
		if all := errs.all(); len(all) != 0 {
			t.Errorf("the controller reported errors: %v", all)
		}
	})

	// assertForbidden checks that every error is a clear Forbidden error: one that
	// apierrors.IsForbidden recognises through the controller's wrapping, and that says
	// who was refused what.
	assertForbidden := func(t *testing.T, errs []error) {
		t.Helper()
		for _, err := range errs {
			if !apierrors.IsForbidden(err) {
				t.Errorf("error %q (%T) is not recognised by apierrors.IsForbidden", err, errors.Unwrap(err))
				continue
			}
			for _, want := range []string{`"alice"`, "configmaps", "cluster scope"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Forbidden error %q does not mention %s", err, want)
				}
			}
		}
	}

	t.Run("cluster-wide controller is forbidden and backs off on a fake clock", func(t *testing.T) {
		clk := testingclock.NewFakeClock(time.Now())
		errs := &errorLog{}
		c := testctl.New(t, alice.kube.CoreV1().ConfigMaps(""), controller.Options[cm]{Options: reflect.Options[cm]{OnError: errs.handle, Backoff: forbiddenBackoff, Clock: clk}})
		h := eventcheck.New[cm]("checker")
		reg := registered(t)(c.AddHandler("checker", h))
		stop := start(t, c)

		// Each attempt is one list, refused, then one timer. No attempt may happen
		// before the backoff has elapsed on the clock, and the backoff doubles.
		attempts := 0
		for _, wait := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond} {
			attempts++
			waitFor(t, fmt.Sprintf("attempt %d to fail and back off", attempts), func() bool {
				return errs.count() >= attempts && clk.HasWaiters()
			})
			clk.Step(wait - time.Millisecond)
			// The timer must not fire a millisecond early. Give a wrongly fired
			// timer a moment to show as an extra attempt; this only looks for a
			// failure, the test never waits on it to pass.
			time.Sleep(100 * time.Millisecond)
			if got := errs.count(); got != attempts || !clk.HasWaiters() {
				t.Fatalf("%d attempts after stepping the clock by %v of a %v backoff, want %d", got, wait-time.Millisecond, wait, attempts)
			}
			clk.Step(time.Millisecond)
		}
		waitFor(t, "the attempt after the last backoff", func() bool { return errs.count() > attempts && clk.HasWaiters() })
		if c.HasSynced() || reg.HasSynced() {
			t.Error("a controller that was never allowed to list reports synced")
		}
		stop()
		assertForbidden(t, errs.all())
		if n := c.Store().Len(); n != 0 || h.Count() != 0 {
			t.Errorf("a forbidden controller has %d known objects and delivered %d events", n, h.Count())
		}
	})

	t.Run("cluster-wide controller is forbidden and backs off on the real clock", func(t *testing.T) {
		errs := &errorLog{}
		c := testctl.New(t, alice.kube.CoreV1().ConfigMaps(""), controller.Options[cm]{Options: reflect.Options[cm]{OnError: errs.handle, Backoff: forbiddenBackoff}})
		started := time.Now()
		stop := start(t, c)
		// Count attempts over a time window. A spinning controller would make
		// hundreds; one that backs off from 200 ms makes about five in 5 s, and a
		// slow machine can only make fewer: this is an upper bound, not a speed test.
		waitFor(t, "the first attempt", func() bool { return errs.count() > 0 })
		for time.Since(started) < 5*time.Second {
			time.Sleep(100 * time.Millisecond)
		}
		got := errs.count()
		if got >= 10 {
			t.Errorf("%d list attempts in %v, want fewer than 10", got, time.Since(started).Round(time.Millisecond))
		}
		if c.HasSynced() {
			t.Error("a controller that was never allowed to list reports synced")
		}
		stop()
		assertForbidden(t, errs.all())
	})
}
