package guard

import (
	"context"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// ErrNoLease is returned, wrapped, for a call that returned neither a Lease nor an error.
var ErrNoLease = errors.New("the Lease client returned neither a Lease nor an error")

// Checked returns leases, whose Get, Create, Update and List turn a nil result with no
// error into an error wrapping ErrNoLease.
func Leases(leases coordinationclient.LeasesGetter) coordinationclient.LeasesGetter {
	if c, ok := leases.(checkedGetter); ok {
		return c
	}
	return checkedGetter{leases}
}

type checkedGetter struct {
	coordinationclient.LeasesGetter
}

func (g checkedGetter) Leases(namespace string) coordinationclient.LeaseInterface {
	return checked{g.LeasesGetter.Leases(namespace)}
}

type checked struct {
	coordinationclient.LeaseInterface
}

func (c checked) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	l, err := c.LeaseInterface.Get(ctx, name, opts)
	return nonNil(l, err, "get", name)
}

func (c checked) Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	out, err := c.LeaseInterface.Create(ctx, l, opts)
	return nonNil(out, err, "create", l.Name)
}

func (c checked) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	out, err := c.LeaseInterface.Update(ctx, l, opts)
	return nonNil(out, err, "update", l.Name)
}

func (c checked) List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	l, err := c.LeaseInterface.List(ctx, opts)
	return nonNil(l, err, "list", "")
}

// nonNil returns v and err, or an error naming the call when both are nil.
func nonNil[P *coordinationv1.Lease | *coordinationv1.LeaseList](v P, err error, verb, name string) (P, error) {
	if err == nil && v == nil {
		return nil, fmt.Errorf("%w: %s %s", ErrNoLease, verb, name)
	}
	return v, err
}
