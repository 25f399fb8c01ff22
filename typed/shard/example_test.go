package shard_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/shard"
)

// A replica of a sharded controller: the same program runs in every replica, each with
// its own identity (its pod name), and the replicas divide the ConfigMaps among them.
func ExampleLoop() {
	run := func(ctx context.Context, clientset kubernetes.Interface, podName string) error {
		sharder, err := shard.New(shard.Options{
			Client:    clientset.CoordinationV1(),
			Namespace: "my-operator", // where the Leases live
			Name:      "configmaps",
			Identity:  podName,
			Space:     shard.Space{Shards: 32, By: shard.ByUID},
		})
		if err != nil {
			return err
		}
		reconcile := func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			// Only this replica reconciles req.Key now; other keys go to other replicas.
			return typed.Result{}, nil
		}
		loop := shard.NewLoop(sharder, clientset.CoreV1().ConfigMaps(""),
			typed.ReconcilerFunc[*corev1.ConfigMap](reconcile), typed.Options{Workers: 4})
		return loop.Run(ctx) // until ctx ends; then this replica's shards go to the others
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
