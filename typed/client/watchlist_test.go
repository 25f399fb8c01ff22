package client_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/rest"

	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed/client"
)

// A Dynamic says it cannot serve watch-list exactly when the client it reads through
// cannot: over client-go's dynamic fake, whose watch would never end a watch-list's
// initial events, and not over a real server's REST client. A nil one answers too.
func TestDynamicAnswersForTheWatchListSupportOfItsClient(t *testing.T) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	rc, err := rest.UnversionedRESTClientFor(&rest.Config{Host: "https://127.0.0.1:1", ContentConfig: rest.ContentConfig{NegotiatedSerializer: runtime.NewSimpleNegotiatedSerializer(runtime.SerializerInfo{})}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		d    *client.Dynamic[*corev1.ConfigMap]
		want bool
	}{
		{"over the dynamic fake", client.FromDynamicNamespaced[*corev1.ConfigMap](dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()).Resource(gvr))("ns"), true},
		{"straight over a REST client", client.FromREST[*corev1.ConfigMap](rc, gvr)("ns"), false},
		{"nil", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.d.IsWatchListSemanticsUnSupported(); got != tt.want {
				t.Errorf("IsWatchListSemanticsUnSupported() = %v, want %v", got, tt.want)
			}
			if got := reflect.WatchListUnsupported(tt.d); got != tt.want {
				t.Errorf("reflect.WatchListUnsupported = %v, want %v", got, tt.want)
			}
		})
	}
}
