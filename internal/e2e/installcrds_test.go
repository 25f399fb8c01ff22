package e2e

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"

	"github.com/typedinformer/typedinformer/examples/cronjob"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// A Manager installs the CronJob CRD, built from its Go types, before it starts its
// caches: a cache of CronJobs acquired before Run syncs, a CronJob created afterwards is
// reconciled, and the server refuses one the generated schema forbids. A second Manager
// starting with the same Definition (another replica) writes nothing new.
func TestAManagerInstallsCRDsFromGoTypesBeforeItsCaches(t *testing.T) {
	const ns = "manager-install"
	cp, admin := setUp(t, ns)
	ext := extensionsClient(t, cp.AdminConfig())
	install := &manager.CRDInstall{Client: ext, Definitions: []*crd.Definition{cronjob.Definition()}}
	m := manager.New(manager.Options{InstallCRDs: install})
	c, err := manager.Acquire(m, manager.Dynamic(admin.dyn, cronjob.Resource, false), manager.CacheOptions[u]{Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	var mu sync.Mutex
	reconciled := map[string]bool{}
	if _, err := manager.NewLoop(c, typed.ReconcilerFunc[u](func(_ context.Context, req typed.Request[u]) (typed.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		reconciled[req.Key] = !req.Deleted
		return typed.Result{}, nil
	}), typed.Options{Name: "cronjobs"}); err != nil {
		t.Fatal(err)
	}
	stop := start(t, m)
	defer stop()

	cronJob := func(name, schedule string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": cronjob.Kind.GroupVersion().String(), "kind": cronjob.Kind.Kind,
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec": map[string]any{"schedule": schedule, "jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{
				"spec": map[string]any{"restartPolicy": "OnFailure", "containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}}}},
		}}
	}
	cronJobs := admin.dyn.Resource(cronjob.Resource).Namespace(ns)
	// Once the cache has synced, Run has installed the CRD: the cache needed it served.
	waitFor(t, "the CronJobs cache to sync", func() bool { return c.HasSynced() })
	if _, err := cronJobs.Create(timeout(t), cronJob("nightly", "0 3 * * *"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a valid CronJob: %v", err)
	}
	waitFor(t, "the loop to reconcile the CronJob", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reconciled[ns+"/nightly"]
	})
	if _, err := cronJobs.Create(timeout(t), cronJob("never", "not a schedule"), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("a CronJob whose schedule is not cron: %v, want Invalid from the generated schema", err)
	}

	before, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(timeout(t), cronjob.Resource.GroupResource().String(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := manager.New(manager.Options{InstallCRDs: install})
	running := make(chan struct{})
	// Runnables start once the install is done.
	if err := other.Add("running", manager.EveryReplica(manager.RunnableFunc(func(ctx context.Context) error {
		close(running)
		<-ctx.Done()
		return nil
	}))); err != nil {
		t.Fatal(err)
	}
	stopOther := start(t, other)
	select {
	case <-running:
	case <-time.After(time.Minute):
		t.Fatal("the second replica's runnables did not start within a minute of its install")
	}
	stopOther()
	after, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(timeout(t), before.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Generation != before.Generation {
		t.Fatalf("a second replica installing the same Definition changed the CRD's spec: generation %d, then %d", before.Generation, after.Generation)
	}
}

// extensionsClient returns the apiextensions clientset of cfg, over connections of its own
// that are closed when the test ends (see newClients).
func extensionsClient(t *testing.T, cfg *rest.Config) apiextensions.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	d := connrotation.NewDialer((&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	cfg.Dial = d.DialContext
	t.Cleanup(d.CloseAll)
	cs, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
