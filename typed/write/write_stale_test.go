package write_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	goreflect "reflect"
	"strconv"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/write"
)

// rvServer is an API server in memory for one kind, for the writers' tests of stale
// copies. Unlike client-go's fake clientset, it honours resource versions as
// kube-apiserver does: one counter, bumped by every write, stamps the object written; an
// update or a patch that carries a resource version other than the stored object's is
// refused with a Conflict; a create gives the object a new UID. UpdateStatus changes only
// the status and Update everything but the status; an object being deleted goes once its
// last finalizer is removed. Objects go in and come out as copies (through JSON).
//
// Its Namespace method is the per-namespace clients function the writers take.
type rvServer[T event.Object] struct {
	resource schema.GroupResource
	// opaque makes resource versions that are not decimal ("v1", "v2", ...), as some
	// aggregated API servers' are: they cannot be ordered.
	opaque bool

	mu      sync.Mutex
	rv      int64
	uids    int
	objects map[string]map[string]any // by namespace/name, as JSON
	calls   []string
	hooks   map[string][]func() // by call ("update/status"), each run once before one call
}

func newRVServer[T event.Object](resource string) *rvServer[T] {
	return &rvServer[T]{
		resource: schema.GroupResource{Resource: resource},
		objects:  map[string]map[string]any{},
		hooks:    map[string][]func(){},
	}
}

// rvClient is an rvServer's client for one namespace.
type rvClient[T event.Object] struct {
	s         *rvServer[T]
	namespace string
}

// Namespace returns the client of namespace.
func (s *rvServer[T]) Namespace(namespace string) *rvClient[T] {
	return &rvClient[T]{s: s, namespace: namespace}
}

// put stores obj as another writer would, creating it (with a new UID unless it has one)
// or replacing it, and returns what is stored.
func (s *rvServer[T]) put(t *testing.T, obj T) T {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := rvToMap(t, obj)
	meta := rvMeta(m)
	if meta["uid"] == nil || meta["uid"] == "" {
		if old, ok := s.objects[rvKey(obj.GetNamespace(), obj.GetName())]; ok {
			meta["uid"] = rvMeta(old)["uid"]
		} else {
			s.uids++
			meta["uid"] = "uid-" + strconv.Itoa(s.uids)
		}
	}
	s.storeLocked(obj.GetNamespace(), obj.GetName(), m)
	return rvFromMap[T](t, m)
}

// remove deletes the object at once, whatever its finalizers.
func (s *rvServer[T]) remove(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	delete(s.objects, rvKey(namespace, name))
}

// stored returns the stored object.
func (s *rvServer[T]) stored(t *testing.T, namespace, name string) T {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.objects[rvKey(namespace, name)]
	if !ok {
		t.Fatalf("%s %s/%s is not stored", s.resource, namespace, name)
	}
	return rvFromMap[T](t, m)
}

// exists says whether namespace/name is stored.
func (s *rvServer[T]) exists(namespace, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.objects[rvKey(namespace, name)]
	return ok
}

// before runs f once, before the next call (such as "patch" or "update/status").
func (s *rvServer[T]) before(call string, f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks[call] = append(s.hooks[call], f)
}

// takeCalls returns the calls made since the last takeCalls, each as "call
// namespace/name", and forgets them.
func (s *rvServer[T]) takeCalls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.calls
	s.calls = nil
	return out
}

// call records a call and runs the hook waiting for it, if any.
func (c *rvClient[T]) call(call, name string) {
	s := c.s
	s.mu.Lock()
	s.calls = append(s.calls, call+" "+rvKey(c.namespace, name))
	var hook func()
	if hs := s.hooks[call]; len(hs) > 0 {
		hook, s.hooks[call] = hs[0], hs[1:]
	}
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
}

func (c *rvClient[T]) Get(_ context.Context, name string, _ metav1.GetOptions) (T, error) {
	c.call("get", name)
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.objects[rvKey(c.namespace, name)]
	if !ok {
		var zero T
		return zero, apierrors.NewNotFound(s.resource, name)
	}
	return rvFromMapErr[T](m)
}

func (c *rvClient[T]) Create(_ context.Context, obj T, _ metav1.CreateOptions) (T, error) {
	c.call("create", obj.GetName())
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero T
	if _, ok := s.objects[rvKey(c.namespace, obj.GetName())]; ok {
		return zero, apierrors.NewAlreadyExists(s.resource, obj.GetName())
	}
	if obj.GetResourceVersion() != "" {
		return zero, apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
	}
	m, err := rvToMapErr(obj)
	if err != nil {
		return zero, err
	}
	s.uids++
	rvMeta(m)["uid"] = "uid-" + strconv.Itoa(s.uids)
	s.storeLocked(c.namespace, obj.GetName(), m)
	return rvFromMapErr[T](m)
}

func (c *rvClient[T]) Update(_ context.Context, obj T, _ metav1.UpdateOptions) (T, error) {
	c.call("update", obj.GetName())
	return c.replace(obj, func(old, m map[string]any) { rvSetOrDelete(m, "status", old["status"]) })
}

func (c *rvClient[T]) UpdateStatus(_ context.Context, obj T, _ metav1.UpdateOptions) (T, error) {
	c.call("update/status", obj.GetName())
	return c.replace(obj, func(old, m map[string]any) {
		status := m["status"]
		for k := range m {
			delete(m, k)
		}
		for k, v := range old {
			m[k] = v
		}
		rvSetOrDelete(m, "status", status)
	})
}

// Delete marks the object deleted, if the precondition's UID is the stored object's: it
// goes at once, or once its last finalizer is removed.
func (c *rvClient[T]) Delete(_ context.Context, name string, opts metav1.DeleteOptions) error {
	c.call("delete", name)
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.objects[rvKey(c.namespace, name)]
	if !ok {
		return apierrors.NewNotFound(s.resource, name)
	}
	uid := ""
	if opts.Preconditions != nil && opts.Preconditions.UID != nil {
		uid = string(*opts.Preconditions.UID)
	}
	if err := s.preconditionsLocked(name, old, "", uid); err != nil {
		return err
	}
	m := rvCopy(old)
	rvMeta(m)["deletionTimestamp"] = "2026-01-01T00:00:00Z"
	s.storeLocked(c.namespace, name, m)
	return nil
}

// replace stores obj, as keep changes it given the stored object, if obj's resource
// version and UID are the stored object's.
func (c *rvClient[T]) replace(obj T, keep func(old, m map[string]any)) (T, error) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero T
	name := obj.GetName()
	old, ok := s.objects[rvKey(c.namespace, name)]
	if !ok {
		return zero, apierrors.NewNotFound(s.resource, name)
	}
	if err := s.preconditionsLocked(name, old, obj.GetResourceVersion(), string(obj.GetUID())); err != nil {
		return zero, err
	}
	m, err := rvToMapErr(obj)
	if err != nil {
		return zero, err
	}
	oldCopy := rvCopy(old)
	keep(oldCopy, m)
	rvMeta(m)["uid"] = rvMeta(old)["uid"]
	s.storeLocked(c.namespace, name, m)
	return rvFromMapErr[T](m)
}

func (c *rvClient[T]) Patch(_ context.Context, name string, pt types.PatchType, data []byte, _ metav1.PatchOptions, subresources ...string) (T, error) {
	c.call("patch", name)
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero T
	if pt != types.MergePatchType || len(subresources) > 0 {
		return zero, fmt.Errorf("rvServer patches only with JSON merge patches of the object, not %s of %v", pt, subresources)
	}
	old, ok := s.objects[rvKey(c.namespace, name)]
	if !ok {
		return zero, apierrors.NewNotFound(s.resource, name)
	}
	var patch map[string]any
	if err := json.Unmarshal(data, &patch); err != nil {
		return zero, apierrors.NewBadRequest(err.Error())
	}
	pm, _ := patch["metadata"].(map[string]any)
	rv, _ := pm["resourceVersion"].(string)
	uid, _ := pm["uid"].(string)
	if err := s.preconditionsLocked(name, old, rv, uid); err != nil {
		return zero, err
	}
	m := rvMergePatch(rvCopy(old), patch).(map[string]any)
	s.storeLocked(c.namespace, name, m)
	return rvFromMapErr[T](m)
}

// preconditionsLocked refuses a write carrying a resource version or UID other than the
// stored object's, as the server does.
func (s *rvServer[T]) preconditionsLocked(name string, old map[string]any, rv, uid string) error {
	meta := rvMeta(old)
	if rv != "" && rv != meta["resourceVersion"] {
		return apierrors.NewConflict(s.resource, name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	}
	if uid != "" && uid != meta["uid"] {
		return apierrors.NewConflict(s.resource, name, fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", uid, meta["uid"]))
	}
	return nil
}

// storeLocked stamps m with the next resource version and stores it, or removes it when
// it is being deleted and has no finalizer left.
func (s *rvServer[T]) storeLocked(namespace, name string, m map[string]any) {
	s.rv++
	meta := rvMeta(m)
	meta["resourceVersion"] = strconv.FormatInt(s.rv, 10)
	if s.opaque {
		meta["resourceVersion"] = "v" + strconv.FormatInt(s.rv, 10)
	}
	if meta["deletionTimestamp"] != nil {
		if fs, _ := meta["finalizers"].([]any); len(fs) == 0 {
			delete(s.objects, rvKey(namespace, name))
			return
		}
	}
	s.objects[rvKey(namespace, name)] = m
}

func rvKey(namespace, name string) string { return namespace + "/" + name }

func rvMeta(m map[string]any) map[string]any {
	meta, ok := m["metadata"].(map[string]any)
	if !ok {
		meta = map[string]any{}
		m["metadata"] = meta
	}
	return meta
}

func rvSetOrDelete(m map[string]any, k string, v any) {
	if v == nil {
		delete(m, k)
		return
	}
	m[k] = v
}

// mergePatch applies a JSON merge patch (RFC 7386) to doc.
func rvMergePatch(doc, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	d, ok := doc.(map[string]any)
	if !ok {
		d = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(d, k)
			continue
		}
		d[k] = rvMergePatch(d[k], v)
	}
	return d
}

func rvCopy(m map[string]any) map[string]any {
	data, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		panic(err)
	}
	return out
}

func rvToMapErr(obj any) (map[string]any, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(data, &m)
}

func rvToMap(t *testing.T, obj any) map[string]any {
	t.Helper()
	m, err := rvToMapErr(obj)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func rvFromMapErr[T event.Object](m map[string]any) (T, error) {
	var zero T
	data, err := json.Marshal(m)
	if err != nil {
		return zero, err
	}
	obj := rvNew[T]()
	if err := json.Unmarshal(data, obj); err != nil {
		return zero, err
	}
	return obj, nil
}

func rvFromMap[T event.Object](t *testing.T, m map[string]any) T {
	t.Helper()
	obj, err := rvFromMapErr[T](m)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// rvNew returns a new T, a pointer to a struct.
func rvNew[T event.Object]() T {
	var zero T
	return goreflect.New(goreflect.TypeOf(zero).Elem()).Interface().(T)
}

// nilAnswers is an rvServer client whose writes are made but answered with a nil object.
type nilAnswers[T event.Object] struct{ *rvClient[T] }

func (c nilAnswers[T]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	var zero T
	_, err := c.rvClient.Create(ctx, obj, opts)
	return zero, err
}

func (c nilAnswers[T]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	var zero T
	_, err := c.rvClient.Update(ctx, obj, opts)
	return zero, err
}

func (c nilAnswers[T]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	var zero T
	_, err := c.rvClient.UpdateStatus(ctx, obj, opts)
	return zero, err
}

func (c nilAnswers[T]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	var zero T
	_, err := c.rvClient.Patch(ctx, name, pt, data, opts, subresources...)
	return zero, err
}

// DESIGN 18: a client that answers a write with a nil object is a reported error
// (ErrNilObject, in a WriteError naming the object), never a panic: the writer
// cannot know the state it wrote, which it compares with next.
func TestWritersReportAClientAnsweringAWriteWithANilObject(t *testing.T) {
	srv := newRVServer[*appsv1.Deployment]("deployments")
	clients := func(namespace string) nilAnswers[*appsv1.Deployment] {
		return nilAnswers[*appsv1.Deployment]{srv.Namespace(namespace)}
	}
	live := srv.put(t, deployed(false))
	cms := newRVServer[*corev1.ConfigMap]("configmaps")
	cmClients := func(namespace string) nilAnswers[*corev1.ConfigMap] {
		return nilAnswers[*corev1.ConfigMap]{cms.Namespace(namespace)}
	}
	owned := write.NewOwned[*appsv1.Deployment](cmClients, deployKind)

	writes := map[string]func() error{
		"StatusWriter.Update": func() error {
			return write.NewStatusWriter(clients, deploymentStatus).Update(t.Context(), live, readyReplicas(3))
		},
		"Finalizer.Handle": func() error {
			_, err := write.NewFinalizer(clients, cleanupFinalizer, func(context.Context, *appsv1.Deployment) error { return nil }).
				Handle(t.Context(), typed.Request[*appsv1.Deployment]{Key: "shop/web", Object: live})
			return err
		},
		"Owned.CreateOrUpdate creating": func() error {
			_, err := owned.CreateOrUpdate(t.Context(), webOwner(), "shop", "web-config", greeting("hello"))
			return err
		},
		"Owned.CreateOrUpdate updating": func() error {
			_, err := owned.CreateOrUpdate(t.Context(), webOwner(), "shop", "web-config", greeting("hi"))
			return err
		},
	}
	for _, name := range []string{"StatusWriter.Update", "Finalizer.Handle", "Owned.CreateOrUpdate creating", "Owned.CreateOrUpdate updating"} {
		t.Run(name, func(t *testing.T) {
			err := writes[name]()
			var we *write.WriteError
			if !errors.Is(err, write.ErrNilObject) || !errors.As(err, &we) || we.Name == "" {
				t.Errorf("%s returned %v, want a WriteError naming the object, wrapping ErrNilObject", name, err)
			}
		})
	}
}
