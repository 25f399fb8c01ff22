package webhook

import (
	"errors"
	"fmt"
	goreflect "reflect"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed/client"
)

// Builder registers the admission webhooks of kind T on a Server:
// controller-runtime's NewWebhookManagedBy(mgr).For(&T{}), typed.
//
//	err := webhook.For[*Website](srv).WithKind(website.Kind).
//		WithDefaulter(defaulter).WithValidator(validator).Complete()
type Builder[T event.Object] struct {
	srv       *Server
	kind      schema.GroupVersionKind
	defaulter Defaulter[T]
	validator Validator[T]
	done      bool
}

// For starts the registration of webhooks for objects of kind T on srv.
func For[T event.Object](srv *Server) *Builder[T] { return &Builder[T]{srv: srv} }

// WithKind says T's group, version and kind: needed for a custom resource's Go struct,
// which client-go's scheme does not know.
func (b *Builder[T]) WithKind(kind schema.GroupVersionKind) *Builder[T] {
	b.kind = kind
	return b
}

// WithDefaulter sets the defaulting webhook, served at MutatePath(kind).
func (b *Builder[T]) WithDefaulter(d Defaulter[T]) *Builder[T] {
	b.defaulter = d
	return b
}

// WithValidator sets the validating webhook, served at ValidatePath(kind).
func (b *Builder[T]) WithValidator(v Validator[T]) *Builder[T] {
	b.validator = v
	return b
}

// Complete registers the webhooks on the Server. It returns an error wrapping
// ErrInvalidOptions for a nil Server, neither a defaulter nor a validator, a path
// registered already, or a second call; and ErrNoKind for a kind it cannot tell. Nothing
// is registered when it fails.
func (b *Builder[T]) Complete() error {
	if b == nil || b.srv == nil {
		return fmt.Errorf("%w: a webhook Builder needs a Server", ErrInvalidOptions)
	}
	if b.done {
		return fmt.Errorf("%w: the Builder completed already", ErrInvalidOptions)
	}
	kind, err := b.kindOf()
	if err != nil {
		return err
	}
	hasD, hasV := !guard.IsNil(b.defaulter), !guard.IsNil(b.validator)
	if !hasD && !hasV {
		return fmt.Errorf("%w: webhooks for %s with neither a defaulter nor a validator", ErrInvalidOptions, kind)
	}
	for _, p := range []string{MutatePath(kind), ValidatePath(kind)} {
		if b.srv.registered(p) {
			return fmt.Errorf("%w: path %q is registered already", ErrInvalidOptions, p)
		}
	}
	b.done = true
	var errs []error
	if hasD {
		h, err := NewDefaulting(kind, b.defaulter)
		errs = append(errs, err, b.srv.Register(MutatePath(kind), h))
	}
	if hasV {
		h, err := NewValidating(kind, b.validator)
		errs = append(errs, err, b.srv.Register(ValidatePath(kind), h))
	}
	return errors.Join(errs...)
}

// kindOf returns the kind WithKind gave, else the one client-go's scheme has for T.
func (b *Builder[T]) kindOf() (schema.GroupVersionKind, error) {
	if !b.kind.Empty() {
		return b.kind, nil
	}
	if goreflect.TypeFor[T]().Kind() == goreflect.Pointer {
		if kinds, _, err := scheme.Scheme.ObjectKinds(client.New[T]()); err == nil && len(kinds) > 0 {
			return kinds[0], nil
		}
	}
	var zero T
	return schema.GroupVersionKind{}, fmt.Errorf("%w: %T is not in client-go's scheme; name its kind with WithKind", ErrNoKind, zero)
}

// MutatePath is where a Builder serves the defaulting webhook of kind:
// "/mutate-<group with dashes>-<version>-<lowercase kind>", controller-runtime's path.
func MutatePath(kind schema.GroupVersionKind) string { return "/mutate-" + pathOf(kind) }

// ValidatePath is where a Builder serves the validating webhook of kind:
// "/validate-<group with dashes>-<version>-<lowercase kind>", controller-runtime's path.
func ValidatePath(kind schema.GroupVersionKind) string { return "/validate-" + pathOf(kind) }

func pathOf(kind schema.GroupVersionKind) string {
	return strings.ReplaceAll(kind.Group, ".", "-") + "-" + kind.Version + "-" + strings.ToLower(kind.Kind)
}
