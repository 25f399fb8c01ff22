package shard_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/manager"
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
		// The shards' caches are the Manager's, shared with its other loops: it must run.
		m := manager.New(manager.Options{})
		loop, err := shard.NewLoop(m, sharder, manager.Namespaced[*corev1.ConfigMap](clientset.CoreV1().ConfigMaps), reconciler, typed.Options{Workers: 4})
		if err != nil {
			return err
		}
		shard.Related(loop, manager.Namespaced[*corev1.Secret](clientset.CoreV1().Secrets), secretToConfigMap) // optional
		// The Manager runs it on every replica, leading or not.
		if err := m.Add("configmaps", loop); err != nil {
			return err
		}
		return m.Run(ctx)
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

// Work of one's own on each shard held: it runs until its context ends (the shard moved
// away, or Run ends), and may then finish handing the shard over while Held lasts; the
// shard's Lease is released only once it returns.
func ExampleSharder_Run() {
	clientset := fake.NewClientset()
	sharder, err := shard.New(shard.Options{
		Client: clientset.CoordinationV1(), Namespace: "my-operator", Name: "example", Identity: "replica-a",
		Space: shard.Space{Shards: 2}, LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var working sync.WaitGroup
	working.Add(2)
	go func() { working.Wait(); cancel() }() // stop once both shards are worked on
	var mu sync.Mutex
	err = sharder.Run(ctx, func(ctx context.Context, sh shard.Shard) {
		mu.Lock()
		fmt.Println("working on shard", sh.Index)
		mu.Unlock()
		working.Done()
		<-ctx.Done()
		// Still holding the Lease: finish what the next owner cannot do, before
		// sh.Held() ends.
		mu.Lock()
		fmt.Println("handing over shard", sh.Index, "holding its Lease:", sh.Held().Err() == nil)
		mu.Unlock()
	})
	fmt.Println("Run returned", err)
	// Unordered output:
	// working on shard 0
	// working on shard 1
	// handing over shard 0 holding its Lease: true
	// handing over shard 1 holding its Lease: true
	// Run returned <nil>
}
