package write

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed/consistency"
)

// ApplyClient applies intents of type A to objects of type T by server-side apply. A
// generated client of a built-in kind is one as it is, with A its apply configuration
// (appsv1client.DeploymentInterface: *appsv1ac.DeploymentApplyConfiguration), and so is
// a *client.Dynamic[T], with A = T (the custom resource's Go struct, see client.Intent).
type ApplyClient[T event.Object, A any] interface {
	Apply(ctx context.Context, intent A, opts metav1.ApplyOptions) (T, error)
}

// StatusApplyClient applies intents of type A to the status subresource of objects of
// type T; generated clients of kinds with a status, and *client.Dynamic[T], are ones.
type StatusApplyClient[T event.Object, A any] interface {
	ApplyStatus(ctx context.Context, intent A, opts metav1.ApplyOptions) (T, error)
}

// OwnedApplyClient applies intents and reads objects: what an OwnedApplier needs, to
// check that no other owner controls the object before applying.
type OwnedApplyClient[T event.Object, A any] interface {
	ApplyClient[T, A]
	Getter[T]
}

type fieldManagerKey struct{}

// WithFieldManager returns a context whose applies, by writers of this package not
// given a field manager of their own, are made as the field manager name. A
// manager.Manager puts its Options.FieldManager in the context of everything it runs, so
// a reconciler's writers need not be told.
func WithFieldManager(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, fieldManagerKey{}, name)
}

// FieldManagerFrom returns the field manager ctx carries (see WithFieldManager): none
// for a nil ctx or an empty name.
func FieldManagerFrom(ctx context.Context) (string, bool) {
	if ctx == nil {
		return "", false
	}
	name, _ := ctx.Value(fieldManagerKey{}).(string)
	return name, name != ""
}

// applying is what Applier and OwnedApplier share: the client, the field manager and
// force.
type applying[T event.Object, A any] struct {
	clients      func(namespace string) (func(context.Context, A, metav1.ApplyOptions) (T, error), error)
	op           string // "applying", or "applying status of"
	fieldManager string
	force        bool
}

// apply applies intent, as the field manager the writer was given or else ctx's.
func (a *applying[T, A]) apply(ctx context.Context, namespace string, intent A) (T, error) {
	var zero T
	manager := a.fieldManager
	if manager == "" {
		manager, _ = FieldManagerFrom(ctx)
	}
	if manager == "" {
		return zero, ErrNoFieldManager
	}
	apply, err := a.clients(namespace)
	if err != nil {
		return zero, err
	}
	opts := metav1.ApplyOptions{FieldManager: manager}
	if a.force {
		opts.Force = true
	}
	got, err := apply(ctx, intent, opts)
	if err := answered("Apply", got, err); err != nil {
		if c := applyConflict(err); c != nil {
			return zero, c
		}
		return zero, err
	}
	// The write is recorded for the reconcile (DESIGN 19) whatever the client; a
	// client.Dynamic has recorded it too, which changes nothing.
	consistency.Wrote(ctx, got)
	return got, nil
}

// Applier applies intents of type A to objects of type T by server-side apply: the
// server keeps, per field manager, the fields each applied, so that two writers (this
// controller and an autoscaler, say) own different fields of one object and neither
// reverts the other. An intent names only the fields the writer owns; a field it applied
// before and leaves out of its next intent is removed (or handed back to its other
// owners). See the package doc for how a Go struct becomes an intent.
//
// It is safe for concurrent use. It compares nothing before writing: the server computes
// the change, and an apply that changes nothing writes nothing (the resource version
// stays).
type Applier[T event.Object, A any] struct {
	applying[T, A]
}

// NewApplier returns an Applier that applies through clients, a function from a
// namespace to a client of that namespace: a generated client's method value such as
// clientset.AppsV1().Deployments (with apply configurations as intents), or
// client.FromDynamicNamespaced's (with the custom resource's Go struct as intents). Go
// infers the type arguments:
//
//	deployments := write.NewApplier(clientset.AppsV1().Deployments)
//	_, err := deployments.Apply(ctx, appsv1ac.Deployment("web", "shop").WithSpec(...))
func NewApplier[T event.Object, A any, C ApplyClient[T, A]](clients func(namespace string) C) *Applier[T, A] {
	return &Applier[T, A]{applying[T, A]{
		clients: perNamespace(clients, func(c C) func(context.Context, A, metav1.ApplyOptions) (T, error) { return c.Apply }),
		op:      "applying",
	}}
}

// NewStatusApplier returns an Applier that applies intents through the status
// subresource (clients' ApplyStatus): only their status is written, and the spec's
// owners are not affected.
func NewStatusApplier[T event.Object, A any, C StatusApplyClient[T, A]](clients func(namespace string) C) *Applier[T, A] {
	return &Applier[T, A]{applying[T, A]{
		clients: perNamespace(clients, func(c C) func(context.Context, A, metav1.ApplyOptions) (T, error) { return c.ApplyStatus }),
		op:      "applying status of",
	}}
}

// WithFieldManager returns a copy of a that applies as the field manager name, whatever
// the context says (see WithFieldManager, the function). An empty name falls back on
// the context's.
func (a *Applier[T, A]) WithFieldManager(name string) *Applier[T, A] {
	if a == nil {
		return nil
	}
	c := *a
	c.fieldManager = name
	return &c
}

// WithForce returns a copy of a whose applies force (ApplyOptions.Force): a field
// another manager owns with another value is taken over instead of failing with an
// ApplyConflictError. A controller that alone decides some fields usually forces; one
// that shares fields with people or other tools does not, and reports the conflicts.
func (a *Applier[T, A]) WithForce(force bool) *Applier[T, A] {
	if a == nil {
		return nil
	}
	c := *a
	c.force = force
	return &c
}

// Apply applies intent and returns the object the server returned. The namespace and
// name are the intent's. Errors are *WriteErrors naming the object: one wrapping an
// *ApplyConflictError (errors.Is ErrApplyConflict) when, without force, the intent sets a
// field another manager owns with another value; ErrNoFieldManager when neither a nor
// ctx names a field manager; controller.ErrNilArgument for nil arguments; the server's
// error otherwise.
func (a *Applier[T, A]) Apply(ctx context.Context, intent A) (T, error) {
	var zero T
	if a == nil {
		return zero, writeError("applying", zero, "", "", fmt.Errorf("%w: the Applier", controller.ErrNilArgument), false)
	}
	id, err := identify(intent)
	if err == nil && a.clients == nil {
		err = fmt.Errorf("%w: the Applier's clients", controller.ErrNilArgument)
	}
	if err != nil {
		return zero, writeError(a.op, zero, id.namespace, id.name, err, false)
	}
	got, err := a.apply(ctx, id.namespace, intent)
	return got, writeError(a.op, zero, id.namespace, id.name, err, false)
}

// OwnedApplier applies intents of type A to objects of type T that an owner of type O
// controls, as an Applier does, with the controller reference to the owner in each
// intent (Controller and BlockOwnerDeletion set, as Owned sets it), so that the garbage
// collector deletes the object with its owner and typed.OwnerKeys maps its events to its
// owner. It never applies to an object another owner controls.
type OwnedApplier[O event.Object, T event.Object, A any] struct {
	applying[T, A]
	getters   func(namespace string) (Getter[T], error)
	ownerKind schema.GroupVersionKind
	cache     CacheReader[T]
}

// NewOwnedApplier returns an OwnedApplier that applies through clients (see NewApplier)
// for owners of type O whose apiVersion and kind are ownerKind (see NewOwned: the owner's
// type is named, and Go infers the rest):
//
//	deployments := write.NewOwnedApplier[*Website](clientset.AppsV1().Deployments, websiteKind)
func NewOwnedApplier[O event.Object, T event.Object, A any, C OwnedApplyClient[T, A]](clients func(namespace string) C, ownerKind schema.GroupVersionKind) *OwnedApplier[O, T, A] {
	return &OwnedApplier[O, T, A]{
		applying: applying[T, A]{
			clients: perNamespace(clients, func(c C) func(context.Context, A, metav1.ApplyOptions) (T, error) { return c.Apply }),
			op:      "applying",
		},
		getters:   perNamespace(clients, func(c C) Getter[T] { return c }),
		ownerKind: ownerKind,
	}
}

// WithCache returns a copy of o that checks the owner of an object in cache instead of
// reading it from the server before each apply (see Apply).
func (o *OwnedApplier[O, T, A]) WithCache(cache CacheReader[T]) *OwnedApplier[O, T, A] {
	if o == nil {
		return nil
	}
	c := *o
	c.cache = cache
	return &c
}

// WithFieldManager returns a copy of o that applies as the field manager name (see
// Applier.WithFieldManager).
func (o *OwnedApplier[O, T, A]) WithFieldManager(name string) *OwnedApplier[O, T, A] {
	if o == nil {
		return nil
	}
	c := *o
	c.fieldManager = name
	return &c
}

// WithForce returns a copy of o whose applies force (see Applier.WithForce).
func (o *OwnedApplier[O, T, A]) WithForce(force bool) *OwnedApplier[O, T, A] {
	if o == nil {
		return nil
	}
	c := *o
	c.force = force
	return &c
}

// Apply applies intent with the controller reference to owner added to its owner
// references, and returns the object the server returned. The namespace and name are
// the intent's; a namespaced owner must be in the same namespace.
//
// An object controlled by another owner is never applied to: the error is a *WriteError
// wrapping an *OwnerConflictError (errors.Is ErrControlledByOther). Whether another owner
// controls it is checked on the cached object (WithCache), which costs no call, or else
// on the object read from the server, and the apply carries the resource version of
// the state checked: when the object changed since (the cache was stale), the server
// refuses it, and the object is read and checked again (retry.DefaultRetry). An object
// that did not exist when checked and that another controller created since is refused
// by the server's validation (one controller at most), and that refusal turned into
// the same error. Other errors are Applier.Apply's, and ErrInvalidOwner's (see
// Owned.CreateOrUpdate).
func (o *OwnedApplier[O, T, A]) Apply(ctx context.Context, owner O, intent A) (T, error) {
	var zero T
	if o == nil {
		return zero, writeError("applying", zero, "", "", fmt.Errorf("%w: the OwnedApplier", controller.ErrNilArgument), false)
	}
	id, err := identify(intent)
	fail := func(err error) (T, error) { return zero, writeError(o.op, zero, id.namespace, id.name, err, false) }
	switch {
	case err != nil:
		return fail(err)
	case o.clients == nil:
		return fail(fmt.Errorf("%w: the OwnedApplier's clients", controller.ErrNilArgument))
	case guard.IsNil(owner):
		return fail(fmt.Errorf("%w: the owner", controller.ErrNilArgument))
	}
	ref, err := controllerRef(o.ownerKind, owner, id.namespace)
	if err != nil {
		return fail(err)
	}
	getter, err := o.getters(id.namespace)
	if err != nil {
		return fail(err)
	}
	// The controller is checked on a state of the object (the cache's, else the
	// server's), and the apply carries that state's resource version as a precondition:
	// were the state stale, the apply could take the object from its controller without
	// the server noticing, since an intent that names one owner removes the owner
	// references this field manager applied before. A stale state makes the server
	// refuse the apply with a conflict; the object is then read again and checked again.
	cur, known := o.cached(id)
	known = known && cur.GetResourceVersion() != "" // else no precondition could be sent
	stale := false
	var got T
	err = retry.OnError(retry.DefaultRetry, func(error) bool { return stale }, func() error {
		if !known {
			live, err := getter.Get(ctx, id.name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				live = zero
			case err != nil:
				return err
			case guard.IsNil(live):
				return answered("Get", live, nil)
			}
			cur = live
		}
		known, stale = false, false
		var rv string
		if !guard.IsNil(cur) {
			if err := controlledBy(cur, ref); err != nil {
				return err
			}
			rv = cur.GetResourceVersion()
		}
		owned, err := withOwnerRef(intent, id.fields, ref, rv)
		if err != nil {
			return err
		}
		got, err = o.apply(ctx, id.namespace, owned)
		switch {
		case rv != "" && (apierrors.IsNotFound(err) || apierrors.IsConflict(err) && !errors.Is(err, ErrApplyConflict)):
			stale = true
		case apierrors.IsInvalid(err):
			// Created meanwhile by another controller: the server refuses a second one.
			var taken *OwnerConflictError
			if conflict := o.liveControlledBy(ctx, getter, id, ref); errors.As(conflict, &taken) {
				return conflict
			}
		}
		return err
	})
	if err != nil {
		return fail(err)
	}
	klog.FromContext(ctx).V(2).Info("Applied owned object", "kind", kindOf(got), "object", klog.KObj(got), "owner", klog.KObj(owner))
	return got, nil
}

func (o *OwnedApplier[O, T, A]) cached(id identity) (T, bool) {
	if guard.IsNil(o.cache) {
		var zero T
		return zero, false
	}
	obj, ok := o.cache.GetByName(id.namespace, id.name)
	return obj, ok && !guard.IsNil(obj)
}

// liveControlledBy reads the object from the server and returns an *OwnerConflictError
// if another owner controls it; nil when it is absent or not controlled by another.
func (o *OwnedApplier[O, T, A]) liveControlledBy(ctx context.Context, getter Getter[T], id identity, ref metav1.OwnerReference) error {
	live, err := getter.Get(ctx, id.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err := answered("Get", live, err); err != nil {
		return err
	}
	return controlledBy(live, ref)
}

// controlledBy returns an *OwnerConflictError when obj has a controller reference other
// than ref.
func controlledBy[T event.Object](obj T, ref metav1.OwnerReference) error {
	if c := metav1.GetControllerOfNoCopy(obj); c != nil && c.UID != ref.UID {
		return &OwnerConflictError{Controller: *c, Wanted: ref}
	}
	return nil
}

// identity is an intent's namespace and name, and its JSON fields.
type identity struct {
	namespace, name string
	fields          map[string]any
}

// identify reads the namespace and name of intent, which may be an apply configuration
// or a Go struct: both say them in their JSON form's metadata.
func identify[A any](intent A) (identity, error) {
	if guard.IsNil(intent) {
		return identity{}, fmt.Errorf("%w: the intent to apply", controller.ErrNilArgument)
	}
	data, err := json.Marshal(intent)
	if err != nil {
		return identity{}, fmt.Errorf("encoding the intent %T: %w", intent, err)
	}
	var id identity
	if err := json.Unmarshal(data, &id.fields); err != nil || id.fields == nil {
		return identity{}, fmt.Errorf("the intent %T is not a JSON object (%s)", intent, data)
	}
	if meta, ok := id.fields["metadata"].(map[string]any); ok {
		id.name, _ = meta["name"].(string)
		id.namespace, _ = meta["namespace"].(string)
	}
	if id.name == "" {
		return id, fmt.Errorf("%w: the name of the %T to apply", controller.ErrNilArgument, intent)
	}
	return id, nil
}

// withOwnerRef returns a copy of intent, whose JSON fields are fields, with ref among its
// owner references (replacing a reference to the same owner) and, unless it is empty,
// the resource version rv as the apply's precondition. It goes through JSON because
// apply configurations share no interface to set owner references by.
func withOwnerRef[A any](intent A, fields map[string]any, ref metav1.OwnerReference, rv string) (A, error) {
	var out A
	meta, _ := fields["metadata"].(map[string]any)
	delete(meta, "resourceVersion")
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	refs, _ := meta["ownerReferences"].([]any)
	var kept []any
	for _, r := range refs {
		if m, ok := r.(map[string]any); !ok || m["uid"] != string(ref.UID) {
			kept = append(kept, r)
		}
	}
	own := map[string]any{"apiVersion": ref.APIVersion, "kind": ref.Kind, "name": ref.Name, "uid": string(ref.UID),
		"controller": ptr.Deref(ref.Controller, false), "blockOwnerDeletion": ptr.Deref(ref.BlockOwnerDeletion, false)}
	meta["ownerReferences"] = append(kept, own)
	data, err := json.Marshal(fields)
	if err != nil {
		return out, fmt.Errorf("encoding the intent %T: %w", intent, err)
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return out, fmt.Errorf("decoding the intent %T with its owner reference: %w", intent, err)
	}
	return out, nil
}
