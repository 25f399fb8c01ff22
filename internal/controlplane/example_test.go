//go:build unix

package controlplane_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedinformer/typedinformer/internal/controlplane"
)

// Example starts a control plane, writes a kubeconfig for kubectl, and
// creates a ConfigMap as the admin. It needs the binaries from
// `make controlplane`, so it has no Output line and is only compiled.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cp, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer cp.Stop()

	kubeconfig := filepath.Join(os.TempDir(), "controlplane.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		log.Fatal(err)
	}
	fmt.Println("kubectl --kubeconfig", kubeconfig, "get configmaps")

	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		log.Fatal(err)
	}
	cm, err := client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Data:       map[string]string{"greeting": "hello"},
	}, metav1.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created", cm.Name, "at resource version", cm.ResourceVersion)
}
