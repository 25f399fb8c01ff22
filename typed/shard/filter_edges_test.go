package shard_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// TestFilteredListFiltersAListReturnedWithAnErrorAndSelectsNothingForNoShards covers the
// two lists that must not leak other shards' objects: a partial list (the reflector keeps
// the items of one returned with reflect.ErrIncompleteList) and a Filter of no shard.
func TestFilteredListFiltersAListReturnedWithAnErrorAndSelectsNothingForNoShards(t *testing.T) {
	space := shard.Space{Shards: 2}
	var items []corev1.ConfigMap
	for range 40 {
		items = append(items, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: string(uuid.NewUUID()), UID: uuid.NewUUID()}})
	}
	partial := errors.Join(reflect.ErrIncompleteList, errors.New("one item did not convert"))
	for _, tc := range []struct {
		name   string
		shards []int
		err    error
	}{
		{"a partial list of shard 0", []int{0}, partial},
		{"no shard", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			cs.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, &corev1.ConfigMapList{Items: append([]corev1.ConfigMap(nil), items...)}, tc.err
			})
			f, err := shard.Filter[*corev1.ConfigMap, *corev1.ConfigMapList](cs.CoreV1().ConfigMaps(""), space, tc.shards)
			if err != nil {
				t.Fatal(err)
			}
			list, err := f.List(t.Context(), metav1.ListOptions{})
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Errorf("List error = %v, want %v", err, tc.err)
			}
			var want, got []string
			for _, o := range items {
				if tc.shards != nil && space.Of(&o) == tc.shards[0] {
					want = append(want, o.Name)
				}
			}
			if list != nil {
				for _, o := range list.Items {
					got = append(got, o.Name)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("listed (-want +got):\n%s", diff)
			}
		})
	}
}
