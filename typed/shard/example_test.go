package shard_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// A replica of a sharded controller (the README's example): the same program runs in
// every replica, each with its own identity (its pod name), and the replicas divide the
// ConfigMaps among them. A Secret's change reconciles the ConfigMap of the same name.
func ExampleLoop() {
	run := func(ctx context.Context, clientset kubernetes.Interface, podName string, reconciler typed.Reconciler[*corev1.ConfigMap]) error {
		secretToConfigMap := func(s *corev1.Secret) []string { return []string{s.Namespace + "/" + s.Name} }

		sharder, err := shard.New(shard.Options{
			Client: clientset.CoordinationV1(), Namespace: "my-operator", Name: "configmaps",
			Identity: podName, Space: shard.Space{Shards: 32},
		})
		if err != nil {
			return err
		}
		loop := shard.NewLoop(sharder, clientset.CoreV1().ConfigMaps(""), reconciler, typed.Options{Workers: 4})
		shard.Related(loop, clientset.CoreV1().Secrets(""), secretToConfigMap) // optional
		return loop.Run(ctx)                                                   // or manager.Add: it runs on every replica
	}
	_ = run
}

// Every replica computes the same assignment from the same members, whatever their
// order; a member that joins takes about its share, and the others keep the rest.
func ExampleAssign() {
	fmt.Println(shard.Assign(8, []string{"replica-b", "replica-a"}))
	fmt.Println(shard.Assign(8, []string{"replica-a", "replica-b", "replica-c"}))
	// Output:
	// [replica-b replica-b replica-a replica-a replica-b replica-a replica-a replica-b]
	// [replica-b replica-c replica-c replica-a replica-b replica-c replica-a replica-b]
}
