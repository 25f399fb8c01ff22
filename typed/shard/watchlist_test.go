package shard_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	cfake "github.com/typedinformer/typedinformer/controller/fake"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// A Filtered says it cannot serve watch-list exactly when what it filters cannot: over
// client-go's fake clientset a cache lists instead of waiting for initial events that
// never end; over a ListerWatcher that serves watch-list, it streams.
func TestFilteredAnswersForTheWatchListSupportOfWhatItFilters(t *testing.T) {
	space := shard.Space{Shards: 2}
	overFake, err := shard.Filter[*corev1.ConfigMap, *corev1.ConfigMapList](fake.NewClientset().CoreV1().ConfigMaps(""), space, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	overServer, err := shard.Filter[*corev1.ConfigMap, *corev1.ConfigMapList](cfake.New[*corev1.ConfigMap, *corev1.ConfigMapList](), space, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	var none *shard.Filtered[*corev1.ConfigMap, *corev1.ConfigMapList]
	got := map[string]bool{"over the fake clientset": reflect.WatchListUnsupported(overFake), "over controller/fake": reflect.WatchListUnsupported(overServer), "nil": none.IsWatchListSemanticsUnSupported()}
	want := map[string]bool{"over the fake clientset": true, "over controller/fake": false, "nil": false}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("%s: WatchListUnsupported = %v, want %v", k, got[k], want[k])
		}
	}
}
