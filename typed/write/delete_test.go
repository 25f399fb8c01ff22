package write_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/typed/consistency"
	"github.com/typedinformer/typedinformer/typed/write"
)

// Owned.Delete deletes an object only when the owner controls it, with the UID it
// checked as the precondition, and records the deletion for read-your-writes (DESIGN 19,
// 20): never another controller's object, never one made anew under the name since the
// check, and a stale cache costs a read, not a wrong delete.
func TestOwnedDeleteDeletesOnlyWhatItsOwnerControls(t *testing.T) {
	otherRef := webRef
	otherRef.Name, otherRef.UID = "other", "uid-other"
	for _, tc := range []struct {
		name        string
		server      *corev1.ConfigMap // what the server holds, nil for nothing
		cached      bool              // the cache holds the server's object
		staleCache  *corev1.ConfigMap // or this older object of the name
		wantDeleted bool
		wantErr     error
		wantCalls   []string
		wantRecord  []string // the deletions recorded, name@uid
		wantStored  bool
	}{
		{name: "controlled, cached: no read", server: owned("", nil, webRef), cached: true,
			wantDeleted: true, wantCalls: []string{"delete shop/web-config"}, wantRecord: []string{"web-config@uid-1"}},
		{name: "controlled, not cached: read first", server: owned("", nil, webRef),
			wantDeleted: true, wantCalls: []string{"get shop/web-config", "delete shop/web-config"}, wantRecord: []string{"web-config@uid-1"}},
		{name: "nowhere: nothing to do", wantCalls: []string{"get shop/web-config"}},
		{name: "another controller's: refused", server: owned("", nil, otherRef), cached: true,
			wantErr: write.ErrControlledByOther, wantStored: true},
		{name: "no controller: refused", server: owned("", nil), wantErr: write.ErrControlledByOther,
			wantCalls: []string{"get shop/web-config"}, wantStored: true},
		{name: "a stale cache of an object made anew, controlled: read and deleted",
			server: owned("", nil, webRef), staleCache: withUID(owned("1", nil, webRef), "uid-old"), wantDeleted: true,
			wantCalls:  []string{"delete shop/web-config", "get shop/web-config", "delete shop/web-config"},
			wantRecord: []string{"web-config@uid-1"}},
		{name: "a stale cache of an object made anew by another controller: refused",
			server: owned("", nil, otherRef), staleCache: withUID(owned("1", nil, webRef), "uid-old"), wantErr: write.ErrControlledByOther,
			wantCalls: []string{"delete shop/web-config", "get shop/web-config"}, wantStored: true},
		{name: "cached but gone from the server: recorded, the cache must drop it",
			staleCache: withUID(owned("1", nil, webRef), "uid-gone"),
			wantCalls:  []string{"delete shop/web-config"}, wantRecord: []string{"web-config@uid-gone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRVServer[*corev1.ConfigMap]("configmaps")
			cache := mapCache[*corev1.ConfigMap]{}
			if tc.server != nil {
				stored := srv.put(t, tc.server)
				if tc.cached {
					cache["shop/web-config"] = stored
				}
			}
			if tc.staleCache != nil {
				cache["shop/web-config"] = tc.staleCache
			}
			srv.takeCalls()
			rec := &recorded{}
			o := write.NewOwned[*appsv1.Deployment](srv.Namespace, deployKind).WithCache(cache)

			deleted, err := o.Delete(consistency.WithRecorder(t.Context(), rec), webOwner(), "shop", "web-config")
			if deleted != tc.wantDeleted || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Delete = %v, %v; want %v, %v", deleted, err, tc.wantDeleted, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantCalls, srv.takeCalls(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRecord, rec.deletions(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("deletions recorded (-want +got):\n%s", diff)
			}
			if got := srv.exists("shop", "web-config"); got != tc.wantStored {
				t.Errorf("the object is stored: %v, want %v", got, tc.wantStored)
			}
		})
	}
}

// A Job deleted through Owned.Delete takes its pods with it (batch/v1 orphans them by
// default), and the delete carries the UID checked.
func TestOwnedDeleteDeletesDependentsInTheBackgroundWithTheUIDAsPrecondition(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-migrate", UID: "uid-job", OwnerReferences: []metav1.OwnerReference{webRef}}}
	cs := kubefake.NewClientset(job)
	var opts metav1.DeleteOptions
	cs.PrependReactor("delete", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts = a.(k8stesting.DeleteActionImpl).DeleteOptions
		return false, nil, nil
	})
	jobs := write.NewOwned[*appsv1.Deployment](cs.BatchV1().Jobs, deployKind)
	if deleted, err := jobs.Delete(t.Context(), webOwner(), "shop", "web-migrate"); !deleted || err != nil {
		t.Fatalf("Delete = %v, %v; want true, nil", deleted, err)
	}
	if opts.PropagationPolicy == nil || *opts.PropagationPolicy != metav1.DeletePropagationBackground {
		t.Errorf("propagation policy %v, want Background", opts.PropagationPolicy)
	}
	if opts.Preconditions == nil || opts.Preconditions.UID == nil || *opts.Preconditions.UID != "uid-job" {
		t.Errorf("preconditions %+v, want the UID uid-job", opts.Preconditions)
	}
}

// Nil and typed-nil arguments are errors, never panics.
func TestOwnedDeleteNilArgumentsAreErrors(t *testing.T) {
	var nilOwned *write.Owned[*appsv1.Deployment, *corev1.ConfigMap]
	var nilOwner *appsv1.Deployment
	o := write.NewOwned[*appsv1.Deployment](kubefake.NewClientset().CoreV1().ConfigMaps, deployKind)
	for name, call := range map[string]func() (bool, error){
		"a nil Owned":       func() (bool, error) { return nilOwned.Delete(t.Context(), webOwner(), "shop", "web-config") },
		"a typed-nil owner": func() (bool, error) { return o.Delete(t.Context(), nilOwner, "shop", "web-config") },
		"no name":           func() (bool, error) { return o.Delete(t.Context(), webOwner(), "shop", "") },
	} {
		if deleted, err := call(); deleted || !errors.Is(err, controller.ErrNilArgument) {
			t.Errorf("%s: Delete = %v, %v; want false and an error wrapping controller.ErrNilArgument", name, deleted, err)
		}
	}
}

func withUID(cm *corev1.ConfigMap, uid string) *corev1.ConfigMap {
	cm.UID = types.UID(uid)
	return cm
}
