// Package bench holds the benchmarks that run typedinformer's controller.Controller and
// client-go's cache.SharedIndexInformer side by side on identical input (`make bench`,
// which writes BENCHMARKS.md through internal/benchreport).
//
// Both libraries are fed by the same in-memory [Source]: List returns one pre-built
// *corev1.ConfigMapList and Watch returns a [Watch] whose events the benchmark pushes one
// at a time through an unbuffered channel, as client-go's StreamWatcher delivers decoded
// events. The objects and events come from a [Dataset] that is built once, outside the
// timed sections, and shared by both libraries, so neither pays for producing its input
// and both see exactly the same pointers in the same order.
//
// The benchmarks themselves are in the _test.go files; this file holds only the input
// machinery, so that it is documented and usable from other benchmarks of the module.
package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// Source is an in-memory list/watch source of ConfigMaps whose List and Watch cost the
// same whoever calls them. It has the method set of a generated typed client
// (clientset.CoreV1().ConfigMaps(ns)), so it is a typedinformer ListerWatcher as it is,
// and a cache.ListWatch whose functions call it feeds client-go.
//
// It ignores list and watch options: List always returns the same list object, in one
// page, and every Watch starts where the benchmark's pushes start.
type Source struct {
	list   *corev1.ConfigMapList
	opened chan *Watch
}

// NewSource returns a Source whose List returns list. The list and its items are shared,
// never copied: the libraries under test must not (and do not) modify them.
func NewSource(list *corev1.ConfigMapList) *Source {
	return &Source{list: list, opened: make(chan *Watch, 16)}
}

// List returns the Source's list.
func (s *Source) List(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error) {
	return s.list, nil
}

// Watch opens a new Watch and hands it to NextWatch.
func (s *Source) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	w := &Watch{ch: make(chan watch.Event), done: make(chan struct{})}
	select {
	case s.opened <- w:
	default:
		return nil, fmt.Errorf("bench: too many watches opened and not taken by NextWatch")
	}
	return w, nil
}

// NextWatch waits for the next watch a reflector opens and returns it, or ctx's error.
func (s *Source) NextWatch(ctx context.Context) (*Watch, error) {
	select {
	case w := <-s.opened:
		return w, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("bench: waiting for a watch: %w", ctx.Err())
	}
}

// Watch is a watch.Interface whose events are pushed with Send through an unbuffered
// channel. It is closed by Stop, as a real watch is.
type Watch struct {
	ch   chan watch.Event
	done chan struct{}
	mu   sync.Mutex // held by Send, so that Stop closes ch only when nobody sends
	once sync.Once
}

// ResultChan returns the channel the watch's events arrive on.
func (w *Watch) ResultChan() <-chan watch.Event { return w.ch }

// Stop ends the watch: a blocked Send returns false and the result channel is closed.
func (w *Watch) Stop() {
	w.once.Do(func() {
		close(w.done)
		w.mu.Lock()
		close(w.ch)
		w.mu.Unlock()
	})
}

// Send delivers e to the watch's reader, waiting until it is read. It returns false if
// the watch was stopped first.
func (w *Watch) Send(e watch.Event) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
		return false
	default:
	}
	select {
	case w.ch <- e:
		return true
	case <-w.done:
		return false
	}
}

// Namespaces is how many namespaces a Dataset spreads its objects over: object k is in
// namespace "ns-<k mod Namespaces>".
const Namespaces = 10

// Dataset is the input of one benchmark: Keys ConfigMaps, listed at version 1, and a
// stream of Events modifications that visit the keys round robin (event i modifies key
// i mod Keys). Every object of the stream is a distinct object with a resource version
// newer than every object before it, as a real watch delivers them (both libraries may
// rely on resource versions growing); the last modification of each key is its final
// state (see IsFinal), so that a handler can tell when it has caught up with the whole
// stream even when a library merges modifications.
//
// The objects are built before the timed part and shared; each holds one small data
// entry and a label, like a typical ConfigMap.
type Dataset struct {
	// Keys is the number of objects.
	Keys int
	// Events is the length of the modification stream.
	Events int
	// List is the initial list, resource version "1".
	List *corev1.ConfigMapList

	keys   []string
	base   []*corev1.ConfigMap
	rv     int
	stream []*corev1.ConfigMap
	final  []*corev1.ConfigMap // the last state of each key
	isFin  map[*corev1.ConfigMap]struct{}
}

// NewDataset builds the objects for keys ConfigMaps and a stream of events modifications.
func NewDataset(keys, events int) *Dataset {
	d := &Dataset{Keys: keys, Events: events, keys: make([]string, keys), rv: 1}
	labels := map[string]string{"app.kubernetes.io/name": "bench"}
	d.List = &corev1.ConfigMapList{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "1"},
		Items:    make([]corev1.ConfigMap, keys),
	}
	d.base = make([]*corev1.ConfigMap, keys)
	for k := range keys {
		ns, name := "ns-"+strconv.Itoa(k%Namespaces), fmt.Sprintf("cm-%07d", k)
		d.keys[k] = ns + "/" + name
		d.List.Items[k] = corev1.ConfigMap{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       ns,
				Name:            name,
				UID:             types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", k)),
				ResourceVersion: "1",
				Labels:          labels,
			},
			Data: map[string]string{"config.yaml": "key: value-" + strconv.Itoa(k)},
		}
		d.base[k] = &d.List.Items[k]
	}
	d.Renew()
	return d
}

// version returns a new state of key k, newer than every object built before.
func (d *Dataset) version(k int) *corev1.ConfigMap {
	d.rv++
	obj := *d.base[k] // shallow: name, labels and data are shared, the struct is not
	obj.ResourceVersion = strconv.Itoa(d.rv)
	return &obj
}

// Renew builds a new stream of Events modifications, newer than everything before, for
// benchmarks that stream more than once into the same cache.
func (d *Dataset) Renew() {
	d.stream = make([]*corev1.ConfigMap, d.Events)
	for i := range d.stream {
		d.stream[i] = d.version(i % d.Keys)
	}
	d.final = make([]*corev1.ConfigMap, min(d.Keys, d.Events))
	d.isFin = make(map[*corev1.ConfigMap]struct{}, len(d.final))
	for i := max(0, d.Events-d.Keys); i < d.Events; i++ {
		d.final[i%d.Keys] = d.stream[i]
		d.isFin[d.stream[i]] = struct{}{}
	}
}

// Key returns the cache key ("namespace/name") of object k.
func (d *Dataset) Key(k int) string { return d.keys[k] }

// Event returns event i of the stream: a modification of key i mod Keys. Past the end of
// the stream (i >= Events) it builds a new, newer state on the spot, for benchmarks that
// write for as long as they run; only one goroutine may ask for those.
func (d *Dataset) Event(i int) watch.Event {
	if i < len(d.stream) {
		return watch.Event{Type: watch.Modified, Object: d.stream[i]}
	}
	return watch.Event{Type: watch.Modified, Object: d.version(i % d.Keys)}
}

// Touched returns how many keys the stream modifies, which is how many final objects a
// handler sees once it has caught up.
func (d *Dataset) Touched() int { return len(d.final) }

// IsFinal reports whether obj is the last state of its key in the stream.
func (d *Dataset) IsFinal(obj *corev1.ConfigMap) bool {
	_, ok := d.isFin[obj]
	return ok
}

// Final returns the last state of key k in the stream, k < Touched().
func (d *Dataset) Final(k int) *corev1.ConfigMap { return d.final[k] }
