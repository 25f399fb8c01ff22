// Package leasefake gives tests a fake clientset whose Leases behave as on the API server
// in the one way leader election depends on and client-go's fake does not: optimistic
// concurrency.
package leasefake

import (
	"errors"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// NewServer returns a fake clientset whose Leases have the API server's optimistic
// concurrency: every write gives the Lease a new resourceVersion, and an update carrying
// another resourceVersion than the stored Lease's fails with a conflict (one carrying
// none succeeds, as on the API server).
func NewServer() *fake.Clientset {
	server := fake.NewClientset()
	leases := coordinationv1.SchemeGroupVersion.WithResource("leases")
	var version int64 // reactors run one at a time, under the fake's lock
	next := func() string {
		version++
		return strconv.FormatInt(version, 10)
	}
	server.PrependReactor("create", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		action.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).ResourceVersion = next()
		return false, nil, nil // the tracker stores it
	})
	server.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		lease := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		stored, err := server.Tracker().Get(leases, action.GetNamespace(), lease.Name)
		if err != nil {
			return false, nil, nil // the tracker answers
		}
		if v := lease.ResourceVersion; v != "" && v != stored.(*coordinationv1.Lease).ResourceVersion {
			return true, nil, apierrors.NewConflict(leases.GroupResource(), lease.Name,
				errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		lease.ResourceVersion = next()
		return false, nil, nil
	})
	return server
}
