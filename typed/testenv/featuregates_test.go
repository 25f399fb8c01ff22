//go:build unix

package testenv_test

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedinformer/typedinformer/typed/testenv"
)

// firstHalf selects the objects whose uid's FNV-1a 64 hash is below 2^63.
const firstHalf = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"

// inFirstHalf reports whether firstHalf selects the object of uid.
func inFirstHalf(uid string) bool {
	h := fnv.New64a()
	h.Write([]byte(uid))
	return h.Sum64() < 1<<63
}

// featureEnabled matches the kubernetes_feature_enabled metric of a gate.
func featureEnabled(gate string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^kubernetes_feature_enabled\{name="` + gate + `",stage="[A-Z]*"\} ([01])$`)
}

// gatesAndShardList returns the gates ShardedListAndWatch and HPAScaleToZero (another
// alpha gate, off by default) as the server's kubernetes_feature_enabled metric gives them
// ("0" or "1") and lists the ConfigMaps of namespace with firstHalf as the shard selector.
func gatesAndShardList(t *testing.T, client kubernetes.Interface) (gates map[string]string, list *corev1.ConfigMapList) {
	t.Helper()
	metrics, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(timeout(t))
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	gates = map[string]string{}
	for _, gate := range []string{"ShardedListAndWatch", "HPAScaleToZero"} {
		m := featureEnabled(gate).FindSubmatch(metrics)
		if m == nil {
			t.Fatalf("/metrics has no kubernetes_feature_enabled for %s", gate)
		}
		gates[gate] = string(m[1])
	}
	list, err = client.CoreV1().ConfigMaps(namespace).List(timeout(t), metav1.ListOptions{ShardSelector: firstHalf})
	if err != nil {
		t.Fatalf("listing with a shard selector: %v", err)
	}
	return gates, list
}

// kube-apiserver starts with ShardedListAndWatch on, so that it applies shard selectors;
// ExtraAPIServerArgs turn it off, and add other gates without turning it off, since the
// server merges repeated --feature-gates flags gate by gate, the last value winning.
func TestShardedListAndWatchIsOnUnlessExtraArgsTurnItOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		on   bool
		hpa  string // HPAScaleToZero
	}{
		{"by default", nil, true, "0"},
		{"turned off", []string{"--feature-gates=ShardedListAndWatch=false"}, false, "0"},
		{"turned off, then on again", []string{"--feature-gates=ShardedListAndWatch=false", "--feature-gates=ShardedListAndWatch=true"}, true, "0"},
		{"another gate turned on", []string{"--feature-gates=HPAScaleToZero=true"}, true, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := testenv.Start(t, testenv.Options{ExtraAPIServerArgs: tc.args})
			client := newClient(t, env.AdminConfig())
			var all, half []string
			for i := range 16 {
				cm := createConfigMap(t, client, fmt.Sprintf("cm-%d", i))
				all = append(all, cm.Name)
				if inFirstHalf(string(cm.UID)) {
					half = append(half, cm.Name)
				}
			}
			gates, list := gatesAndShardList(t, client)
			var listed []string
			for _, cm := range list.Items {
				listed = append(listed, cm.Name)
			}
			slices.Sort(listed)
			slices.Sort(all)
			slices.Sort(half)
			type state struct {
				Gates     map[string]string
				ShardInfo *metav1.ShardInfo
				Listed    []string
			}
			// With the gate off, the server ignores the selector: no error, every object.
			want := state{map[string]string{"ShardedListAndWatch": "0", "HPAScaleToZero": tc.hpa}, nil, all}
			if tc.on {
				want = state{map[string]string{"ShardedListAndWatch": "1", "HPAScaleToZero": tc.hpa}, &metav1.ShardInfo{Selector: firstHalf}, half}
			}
			if diff := cmp.Diff(want, state{gates, list.ShardInfo, listed}); diff != "" {
				t.Errorf("args %q (-want +got):\n%s", tc.args, diff)
			}
		})
	}
}
