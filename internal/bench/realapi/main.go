// Command realapi benchmarks typedinformer, controller-runtime and client-go side by side
// on a real kube-apiserver (typed/testenv's, from the prebuilt binaries): the initial
// sync of custom resources (CPU, heap per object, peak RSS), their steady state (CPU
// per update) and the heap per Pod of a cache of Pods. Each subject runs in a process of
// its own, so that CPU time, heap and peak RSS are that library's alone; for a sync the
// subjects run one after the other, in a rotating order, and in the steady state all at
// once, on the same updates (see measure); there are several rounds, and the table gives
// medians and their ratios. It is a module of its own so that controller-runtime never
// enters the library's go.mod; `make bench` runs it. With -profile dir (or
// REALAPI_PROFILE=dir), each subject writes a CPU profile there
// (lib-kind-scenario.pprof) of what it measures: the sync, or the steady state after
// it. With -paged, typedinformer with paged initial lists
// (manager.Options.NoWatchList) runs as a fourth subject, for an A/B of its watch-list
// default in the same run.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/typed/testenv"
)

var (
	libs = []string{"typedinformer", "controller-runtime", "client-go"}
)

// Subjects beside the three libraries, measured in the same rounds: typedinformer with
// manager.Options.NoWatchList (pagedLib, with -paged), typedinformer with
// manager.Options.NoStringInterning (in the steady state), the Pods decoded and kept with
// no cache at all (the floor any cache of the same Go structs stands on), and, in the
// steady state, the custom resources watched through typedinformer's client with no
// cache: decoded and dropped (watchOnly), or decoded, transformed as a Manager's cache
// does and kept in a map (watchKept), the floors of any cache over that client.
const (
	pagedLib    = "typedinformer-paged"
	noIntern    = "typedinformer-nointern"
	objectsOnly = "objects-only"
	watchOnly   = "watch-only"
	watchKept   = "watch-kept"
	// bareController is typedinformer's controller.New with a Manager cache's defaults,
	// without the Manager (in the steady state): what the Manager adds.
	bareController = "typedinformer-controller"
)

const (
	widgetNS = "bench-widgets"
	podNS    = "bench-pods"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "subject" {
		fs := flag.NewFlagSet("subject", flag.ExitOnError)
		kubeconfig := fs.String("kubeconfig", "", "")
		lib := fs.String("lib", "", "")
		kind := fs.String("kind", "", "")
		ns := fs.String("namespace", "", "")
		scenario := fs.String("scenario", "sync", "")
		objects := fs.Int("objects", 0, "")
		n := fs.Int("n", 0, "")
		_ = fs.Parse(os.Args[2:])
		if err := runSubject(*kubeconfig, *lib, *kind, *ns, *scenario, *objects, *n); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	widgets := flag.Int("widgets", 10_000, "custom resources to sync")
	updates := flag.Int("updates", 5_000, "updates of the steady state")
	pods := flag.Int("pods", 20_000, "Pods to sync")
	rounds := flag.Int("rounds", 5, "rounds; the table gives medians")
	only := flag.String("only", "", "comma-separated scenarios to run (crd-sync, crd-steady, pods); all when empty")
	out := flag.String("o", "", "write the Markdown table to this file too")
	paged := flag.Bool("paged", false, "also run typedinformer with paged initial lists (manager.Options.NoWatchList) as a fourth subject, for an A/B of the watch-list default in one run")
	profile := flag.String("profile", "", "write a CPU profile of each subject into this directory (as REALAPI_PROFILE does)")
	flag.Parse()
	if *paged {
		libs = append(libs, pagedLib)
	}
	if *profile != "" {
		_ = os.Setenv("REALAPI_PROFILE", *profile) // the subjects inherit it
	}
	if err := run(*widgets, *updates, *pods, *rounds, *only, *out); err != nil {
		fmt.Fprintln(os.Stderr, "realapi:", err)
		os.Exit(1)
	}
}

func run(nWidgets, nUpdates, nPods, rounds int, only, out string) error {
	want := func(s string) bool { return only == "" || slices.Contains(strings.Split(only, ","), s) }
	ctx := context.Background()
	env, err := testenv.StartContext(ctx, testenv.Options{CRDs: []*apiextensionsv1.CustomResourceDefinition{widgetCRD()}})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	kubeconfig := filepath.Join(env.Dir(), "bench.kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	cfg := env.AdminConfig()
	cfg.QPS, cfg.Burst = 2000, 4000
	cs := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	for _, ns := range []string{widgetNS, podNS} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	var rows []row
	var variants []variant
	if want("crd-sync") || want("crd-steady") {
		start := time.Now()
		if err := parallel(nWidgets, func(i int) error {
			_, err := dyn.Resource(widgetGVR).Namespace(widgetNS).Create(ctx, newWidget(i), metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "created %d widgets in %v\n", nWidgets, time.Since(start).Round(time.Millisecond))
	}
	load := loadavg()
	if want("crd-sync") {
		rs, err := measure(rounds, kubeconfig, "widgets", widgetNS, "sync", nWidgets, 0, nil)
		if err != nil {
			return err
		}
		rows = append(rows,
			row{fmt.Sprintf("CRD initial sync, %d custom resources: CPU", nWidgets), rs, func(r result) float64 { return r.CPU.Seconds() * 1000 }, "ms", 0.7, "controller-runtime"},
			row{"CRD initial sync: heap per object", rs, func(r result) float64 { return r.HeapPerObject }, "B", 0.8, "controller-runtime"},
			row{"CRD initial sync: peak RSS", rs, func(r result) float64 { return float64(r.PeakRSS) / (1 << 20) }, "MiB", 1, "controller-runtime"})
	}
	if want("crd-steady") {
		gen := 0
		rs, err := measure(rounds, kubeconfig, "widgets", widgetNS, "steady", nWidgets, nUpdates, func() error {
			gen++
			return parallel(nUpdates, func(i int) error {
				patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, gen*1000+i%1000)
				_, err := dyn.Resource(widgetGVR).Namespace(widgetNS).Patch(ctx, fmt.Sprintf("widget-%05d", i%nWidgets), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				return err
			})
		}, noIntern, bareController, watchOnly, watchKept)
		if err != nil {
			return err
		}
		rows = append(rows, row{fmt.Sprintf("CRD steady state, %d updates: CPU per event", nUpdates), rs, func(r result) float64 { return float64(r.CPU.Microseconds()) }, "µs", 0.7, "controller-runtime"})
		cpu := func(r result) float64 { return float64(r.CPU.Microseconds()) }
		variants = append(variants, variant{"CRD steady state: CPU per event, strings not interned (`manager.Options.NoStringInterning`)", median(rs[noIntern], cpu), "µs",
			median(rs["typedinformer"], cpu) / median(rs[noIntern], cpu), "typedinformer at its defaults ÷ this: what interning costs the steady state"})
		bare := median(rs[bareController], cpu)
		variants = append(variants, variant{"CRD steady state: CPU per event of controller.New with a Manager cache's client, transform and watch-list, without the Manager", bare, "µs",
			median(rs["typedinformer"], cpu) / bare, "typedinformer (a Manager's cache) ÷ this: what the Manager adds"})
		floor, kept := median(rs[watchOnly], cpu), median(rs[watchKept], cpu)
		variants = append(variants,
			variant{"CRD steady state: CPU per event of the objects watched and kept (the cache's client, managedFields not decoded, and its transform; one map, no queue, no handler)", kept, "µs",
				median(rs["typedinformer"], cpu) / kept, "typedinformer ÷ this: what its pipeline adds to holding the objects"},
			variant{"same, against controller-runtime", kept, "µs",
				kept / median(rs["controller-runtime"], cpu), "÷ controller-runtime: the floor of any cache that holds these objects, against the target's 0.70"},
			variant{"CRD steady state: CPU per event of the watch alone (the cache's client and decoder, managedFields not decoded; events counted and dropped, no cache)", floor, "µs",
				median(rs["typedinformer"], cpu) / floor, "typedinformer ÷ this: what the cache adds to receiving and decoding"},
			variant{"same, against controller-runtime", floor, "µs",
				floor / median(rs["controller-runtime"], cpu), "÷ controller-runtime: the floor of any cache over this client, against the target's 0.70"})
	}
	if want("pods") {
		start := time.Now()
		if err := parallel(nPods, func(i int) error {
			_, err := cs.CoreV1().Pods(podNS).Create(ctx, newPod(i), metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "created %d pods in %v\n", nPods, time.Since(start).Round(time.Millisecond))
		rs, err := measure(rounds, kubeconfig, "pods", podNS, "sync", nPods, 0, nil, objectsOnly)
		if err != nil {
			return err
		}
		rows = append(rows,
			row{fmt.Sprintf("%d Pods (protobuf), defaults: heap per Pod", nPods), rs, func(r result) float64 { return r.HeapPerObject }, "B", 0.6, "client-go"},
			row{"same: peak RSS during the sync", rs, func(r result) float64 { return float64(r.PeakRSS) / (1 << 20) }, "MiB", 1, "controller-runtime"},
			row{"same: CPU to sync", rs, func(r result) float64 { return r.CPU.Seconds() * 1000 }, "ms", 0, ""})
		heap := func(r result) float64 { return r.HeapPerObject }
		floor := median(rs[objectsOnly], heap)
		variants = append(variants, variant{"Pods: heap per Pod of the decoded objects alone, held in a slice (managedFields dropped, strings interned, no cache)", floor, "B",
			floor / median(rs["client-go"], heap), "÷ client-go's cache: the floor of any cache of these Go structs, against the target's 0.60"})
	}
	table := render(rows, variants, rounds, load, loadavg())
	fmt.Print(table)
	if out != "" {
		return os.WriteFile(out, []byte(table), 0o644)
	}
	return nil
}

// measure runs every library's subject rounds times and returns each library's results.
// For a sync (drive nil) the subjects run one after the other, in an order that rotates
// each round, so that each has the machine to itself. For scenario steady they run at
// once: every subject syncs, then drive makes the updates once, and each measures the
// same events, arriving at the same moments. One after the other, each subject got the
// updates at the pace the server kept while it ran, and a subject's CPU per event moved
// by ±15% from one round to the next with that pace (the events of a busier moment come
// several to a read, which costs less per event), more than what told the subjects apart.
func measure(rounds int, kubeconfig, kind, ns, scenario string, objects, n int, drive func() error, extra ...string) (map[string][]result, error) {
	out := map[string][]result{}
	subjects := append(slices.Clone(libs), extra...)
	for round := range rounds {
		record := func(lib string, r result) {
			fmt.Fprintf(os.Stderr, "round %d %-18s %s %s: %+v\n", round+1, lib, kind, scenario, r)
			out[lib] = append(out[lib], r)
		}
		if drive == nil {
			for i := range subjects {
				lib := subjects[(i+round)%len(subjects)]
				c, err := startChild(kubeconfig, lib, kind, ns, scenario, objects, n)
				if err != nil {
					return nil, err
				}
				r, err := c.result()
				if err != nil {
					return nil, fmt.Errorf("%s, %s %s, round %d: %w", lib, kind, scenario, round+1, err)
				}
				record(lib, r)
			}
			continue
		}
		rs, err := together(subjects, kubeconfig, kind, ns, scenario, objects, n, drive)
		if err != nil {
			return nil, fmt.Errorf("%s %s, round %d: %w", kind, scenario, round+1, err)
		}
		for i, lib := range subjects {
			record(lib, rs[i])
		}
	}
	return out, nil
}

// together runs subjects at once: it starts them all, waits until each has synced, calls
// drive, and returns their results, in subjects' order.
func together(subjects []string, kubeconfig, kind, ns, scenario string, objects, n int, drive func() error) ([]result, error) {
	children := make([]*child, 0, len(subjects))
	defer func() {
		for _, c := range children {
			c.kill()
		}
	}()
	for _, lib := range subjects {
		c, err := startChild(kubeconfig, lib, kind, ns, scenario, objects, n)
		if err != nil {
			return nil, err
		}
		children = append(children, c)
	}
	for _, c := range children {
		if err := waitForLine(c.out, "synced"); err != nil {
			return nil, fmt.Errorf("%s: %w: %s", c.lib, err, c.stderr.String())
		}
	}
	if err := drive(); err != nil {
		return nil, err
	}
	rs := make([]result, len(children))
	for i, c := range children {
		r, err := c.result()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.lib, err)
		}
		rs[i] = r
	}
	return rs, nil
}

// child is a subject's process.
type child struct {
	lib    string
	cmd    *exec.Cmd
	out    *bufio.Reader
	stderr bytes.Buffer
	done   bool
}

func startChild(kubeconfig, lib, kind, ns, scenario string, objects, n int) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &child{lib: lib}
	c.cmd = exec.Command(self, "subject", "-kubeconfig", kubeconfig, "-lib", lib, "-kind", kind, "-namespace", ns, "-scenario", scenario, "-objects", fmt.Sprint(objects), "-n", fmt.Sprint(n))
	c.cmd.Stderr = &c.stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	c.out = bufio.NewReader(stdout)
	return c, nil
}

// result reads the child's result, once it has ended.
func (c *child) result() (result, error) {
	data, _ := io.ReadAll(c.out)
	c.done = true
	if err := c.cmd.Wait(); err != nil {
		return result{}, fmt.Errorf("%w: %s", err, c.stderr.String())
	}
	var r result
	if err := json.Unmarshal(data, &r); err != nil {
		return result{}, fmt.Errorf("%w: %q", err, data)
	}
	return r, nil
}

// kill ends a child whose result was not read.
func (c *child) kill() {
	if !c.done {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	}
}

// parallel calls f(0..n-1) on 64 goroutines, returning the first error.
func parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	next := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + widgetGV.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: widgetGV.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: widgetGV.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec":   {Type: "object", XPreserveUnknownFields: ptr.To(true)},
						"status": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
					},
				}},
			}},
		},
	}
}

// newWidget is the i-th Widget: labels, an annotation, a spec of a few hundred bytes.
func newWidget(i int) *unstructured.Unstructured {
	w := &Widget{
		TypeMeta: metav1.TypeMeta{APIVersion: widgetGV.String(), Kind: "Widget"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("widget-%05d", i), Namespace: widgetNS,
			Labels:      map[string]string{"app.kubernetes.io/name": "widget", "app.kubernetes.io/part-of": "bench", "shard": fmt.Sprint(i % 16)},
			Annotations: map[string]string{"bench.typedinformer.io/created-by": "realapi"}},
		Spec: WidgetSpec{Replicas: int32(i % 5), Image: "registry.example.com/team/widget:v1.2.3", Owner: fmt.Sprintf("team-%d", i%20),
			Tags:   []string{"blue", "green", fmt.Sprintf("t%d", i%100)},
			Config: map[string]string{"logLevel": "info", "mode": "fast", "region": "eu-west-1"},
			Ports:  []WidgetPort{{Name: "http", Port: 8080, Protocol: "TCP"}, {Name: "metrics", Port: 9090, Protocol: "TCP"}}},
	}
	m, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(w)
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// newPod is the i-th Pod of a Deployment's ReplicaSet: what a cluster's Pods look like
// before a kubelet adds their status.
func newPod(i int) *corev1.Pod {
	rs := fmt.Sprintf("web-%d-7d9c8b6f5", i%50)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", rs, i), Namespace: podNS,
			Labels: map[string]string{"app": fmt.Sprintf("web-%d", i%50), "pod-template-hash": "7d9c8b6f5", "tier": "frontend"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs,
				UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i%50)), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: "registry.example.com/team/web:v2.7.1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Env:   []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "REGION", Value: "eu-west-1"}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}},
		}, {
			Name: "sidecar", Image: "registry.example.com/infra/proxy:v1.30.0",
			Args: []string{"--listen=:15001", "--upstream=127.0.0.1:8080"},
		}}},
	}
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
