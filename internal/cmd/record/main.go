// Command record writes testdata/watch/configmaps.json: a list and a watch stream recorded
// from a real kube-apiserver, which the replay tests feed through the pipeline. It starts
// a local control plane (make controlplane builds it), lists ConfigMaps in a fresh
// namespace, watches from the list's resource version while a fixed script creates,
// updates, deletes and re-creates objects, and ends with a fresh List of the final state.
//
//	go run ./internal/cmd/record -o testdata/watch/configmaps.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/internal/testsupport/watchrecord"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

func main() {
	out := flag.String("o", "testdata/watch/configmaps.json", "the file to write")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, *out); err != nil {
		fmt.Fprintln(os.Stderr, "record:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out string) (err error) {
	cp, err := testenv.StartContext(ctx, testenv.Options{Logger: klog.Background().V(1)})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cp.Stop()) }()
	cs, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	const ns = "replay"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	cms := cs.CoreV1().ConfigMaps(ns)
	for i := range 5 {
		if _, err := cms.Create(ctx, configMap(ns, "before-"+strconv.Itoa(i), "0"), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	rec := watchrecord.Recording{Description: "ConfigMaps in namespace " + ns + " on kube-apiserver v1.36.3: five listed, then a watch while a script creates, updates (twice in a row), deletes, and deletes and re-creates under the same name; final is a fresh List after the script"}
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	rec.List = *list
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
	if err != nil {
		return err
	}
	defer w.Stop()
	last, err := script(ctx, cms, ns)
	if err != nil {
		return err
	}
	if rec.Events, err = readUntil(ctx, w, last); err != nil {
		return err
	}
	final, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	rec.Final = *final
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("record: %d listed, %d watch events, %d in the final list: %s\n", len(rec.List.Items), len(rec.Events), len(rec.Final.Items), out)
	return nil
}

// script changes the namespace and returns the resource version of its last write. It
// ends with a creation, whose version the watch is read up to (a deletion returns none).
func script(ctx context.Context, cms typedcorev1.ConfigMapInterface, ns string) (string, error) {
	var last string
	write := func(obj *corev1.ConfigMap, err error) error {
		if err == nil {
			last = obj.ResourceVersion
		}
		return err
	}
	update := func(name, value string) error {
		cur, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Data["value"] = value
		return write(cms.Update(ctx, cur, metav1.UpdateOptions{}))
	}
	remove := func(name string) error { return cms.Delete(ctx, name, metav1.DeleteOptions{}) }
	steps := []func() error{
		func() error { return update("before-0", "1") },
		func() error { return update("before-0", "2") },
		func() error { return remove("before-1") },
		func() error { return write(cms.Create(ctx, configMap(ns, "new-0", "0"), metav1.CreateOptions{})) },
		func() error { return write(cms.Create(ctx, configMap(ns, "new-1", "0"), metav1.CreateOptions{})) },
		func() error { return update("new-0", "1") },
		func() error { return remove("before-2") },
		func() error {
			return write(cms.Create(ctx, configMap(ns, "before-2", "recreated"), metav1.CreateOptions{}))
		},
		func() error { return remove("new-1") },
		func() error { return update("before-3", "1") },
		func() error { return update("before-0", "3") },
		func() error { return write(cms.Create(ctx, configMap(ns, "new-2", "0"), metav1.CreateOptions{})) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return "", fmt.Errorf("step %d: %w", i, err)
		}
	}
	return last, nil
}

// readUntil reads watch events until one carries resource version last, skipping
// bookmarks, which come at the server's discretion and so would make the recording vary.
func readUntil(ctx context.Context, w watch.Interface, last string) ([]metav1.WatchEvent, error) {
	var events []metav1.WatchEvent
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the watch event of resource version %s: %w", last, ctx.Err())
		case e, ok := <-w.ResultChan():
			if !ok {
				return nil, errors.New("the watch ended before the script's last write")
			}
			if e.Type == watch.Bookmark {
				continue
			}
			we, err := watchrecord.Encode(e)
			if err != nil {
				return nil, err
			}
			events = append(events, we)
			if e.Object.(*corev1.ConfigMap).ResourceVersion == last {
				return events, nil
			}
		}
	}
}

func configMap(ns, name, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "replay"}},
		Data:       map[string]string{"value": value},
	}
}
