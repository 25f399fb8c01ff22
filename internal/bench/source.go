// Package bench holds the benchmarks that run typedinformer's controller.Controller,
// client-go's cache.SharedIndexInformer and client-go's typed wrapper of it,
// cache.TypedSharedIndexInformer[*corev1.ConfigMap], side by side on identical input
// (`make bench`, which writes BENCHMARKS.md through internal/cmd/benchreport).
//
// Every library is fed by the same in-memory [Source]: List returns one pre-built
// *corev1.ConfigMapList and Watch returns a [Watch] whose events the benchmark pushes one
// at a time through an unbuffered channel, as client-go's StreamWatcher delivers decoded
// events. The objects and events come from a [Dataset] that is built once, outside the
// timed sections, and shared by all libraries, so that they see the same objects (or,
// for a fresh stream, objects built the same way at the same point) in the same order.
//
// The benchmarks themselves are in the _test.go files; this file holds only the input
// machinery, so that it is documented and usable from other benchmarks of the module.
package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

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
// The stream comes in two kinds, which differ only in where its objects come from:
//
//   - prebuilt ([NewDataset]): every object of the stream is built before the timed part
//     and kept by the Dataset, a shallow copy of its key's listed object (name, labels
//     and data shared) with a new resource version. Pushing an event costs nothing but
//     the channel hand-over and the replaced object never becomes garbage, so a library
//     pays for its own work only: a lower bound.
//   - fresh ([NewFreshDataset]): [Dataset.Event] allocates the event's object as it is
//     asked for, inside the timed part, with every string and map of it new and an empty
//     TypeMeta, as client-go's watch decoder (through a generated typed client) hands
//     out decoded objects; once the cache replaces it, it is garbage. The allocation is
//     paid by the pushing goroutine, as the decoding is by client-go's StreamWatcher
//     goroutine, and counts in every library's figures alike (lib=watch-alone shows it
//     alone).
//
// The listed objects each hold one small data entry and a label, like a typical ConfigMap.
type Dataset struct {
	// Keys is the number of objects.
	Keys int
	// Events is the length of the modification stream.
	Events int
	// List is the initial list, resource version "1".
	List *corev1.ConfigMapList
	// Fresh is true when Event allocates each event's object anew (NewFreshDataset).
	Fresh bool

	keys []string
	base []*corev1.ConfigMap
	rv   int // the newest resource version handed out so far
	// first is the resource version of event 0 of the current stream; event i has
	// resource version first+i.
	first int
	// finalFrom is the resource version of the first final state of the stream: the
	// last min(Keys, Events) events are the final states of their keys.
	finalFrom, finalTo atomic.Int64
	stream             []*corev1.ConfigMap // prebuilt only
	final              []*corev1.ConfigMap // the last state of each key; prebuilt only
}

// NewDataset builds the objects for keys ConfigMaps and a prebuilt stream of events
// modifications.
func NewDataset(keys, events int) *Dataset { return newDataset(keys, events, false) }

// NewFreshDataset builds the objects for keys ConfigMaps and a fresh stream of events
// modifications, whose objects Event allocates when it is called.
func NewFreshDataset(keys, events int) *Dataset { return newDataset(keys, events, true) }

func newDataset(keys, events int, fresh bool) *Dataset {
	d := &Dataset{Keys: keys, Events: events, Fresh: fresh, keys: make([]string, keys), rv: 1}
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

// version returns a new prebuilt state of key k, newer than every object built before.
func (d *Dataset) version(k int) *corev1.ConfigMap {
	d.rv++
	obj := *d.base[k] // shallow: name, labels and data are shared, the struct is not
	obj.ResourceVersion = strconv.Itoa(d.rv)
	return &obj
}

// decoded returns a new object for key k at resource version rv, every string and map of
// it allocated anew, as a decoder builds it from the bytes of a watch event. Like the
// objects of a generated typed client, it has no TypeMeta.
func (d *Dataset) decoded(k, rv int) *corev1.ConfigMap {
	src := d.base[k]
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       strings.Clone(src.Namespace),
			Name:            strings.Clone(src.Name),
			UID:             types.UID(strings.Clone(string(src.UID))),
			ResourceVersion: strconv.Itoa(rv),
			Labels:          cloneMap(src.Labels),
		},
		Data: cloneMap(src.Data),
	}
}

// cloneMap returns a copy of m whose keys and values are new strings.
func cloneMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[strings.Clone(k)] = strings.Clone(v)
	}
	return out
}

// Renew starts a new stream of Events modifications, newer than everything before, for
// benchmarks that stream more than once into the same cache. Of a prebuilt Dataset it
// builds the stream's objects; of a fresh one it only moves the resource versions on.
func (d *Dataset) Renew() {
	d.first = d.rv + 1
	if d.Fresh {
		d.rv += d.Events
		d.stream, d.final = nil, nil
	} else {
		d.stream = make([]*corev1.ConfigMap, d.Events)
		for i := range d.stream {
			d.stream[i] = d.version(i % d.Keys)
		}
		d.final = make([]*corev1.ConfigMap, min(d.Keys, d.Events))
		for i := max(0, d.Events-d.Keys); i < d.Events; i++ {
			d.final[i%d.Keys] = d.stream[i]
		}
	}
	d.finalFrom.Store(int64(d.first + max(0, d.Events-d.Keys)))
	d.finalTo.Store(int64(d.first + d.Events - 1))
}

// Key returns the cache key ("namespace/name") of object k.
func (d *Dataset) Key(k int) string { return d.keys[k] }

// Event returns event i of the stream: a modification of key i mod Keys. Of a fresh
// Dataset, its object is allocated by this call. Past the end of the stream (i >= Events)
// it builds a new, newer state on the spot, for benchmarks that write for as long as
// they run; only one goroutine may ask for those.
func (d *Dataset) Event(i int) watch.Event {
	k := i % d.Keys
	switch {
	case i < d.Events && d.Fresh:
		return watch.Event{Type: watch.Modified, Object: d.decoded(k, d.first+i)}
	case i < d.Events:
		return watch.Event{Type: watch.Modified, Object: d.stream[i]}
	case d.Fresh:
		d.rv++
		return watch.Event{Type: watch.Modified, Object: d.decoded(k, d.rv)}
	default:
		return watch.Event{Type: watch.Modified, Object: d.version(k)}
	}
}

// Touched returns how many keys the stream modifies, which is how many final objects a
// handler sees once it has caught up.
func (d *Dataset) Touched() int { return min(d.Keys, d.Events) }

// IsFinal reports whether obj is the last state of its key in the current stream, by its
// resource version (the same test for both kinds of stream, and for every library).
func (d *Dataset) IsFinal(obj *corev1.ConfigMap) bool {
	rv, err := strconv.ParseInt(obj.ResourceVersion, 10, 64)
	return err == nil && rv >= d.finalFrom.Load() && rv <= d.finalTo.Load()
}

// Final returns the last state of key k in a prebuilt stream, k < Touched(), or nil for a
// fresh Dataset, whose objects exist only once Event has built them.
func (d *Dataset) Final(k int) *corev1.ConfigMap {
	if d.Fresh {
		return nil
	}
	return d.final[k]
}
