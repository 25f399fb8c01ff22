package shard_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/typedinformer/typedinformer/typed/manager"
)

// runManager runs a Manager, whose caches are a sharded Loop's, for the rest of the test,
// as a program runs one beside its loops, and stops it at cleanup, checking that it
// stopped cleanly (goleak, in TestMain, checks that it left nothing running). The loops
// stop before it: the cleanups and defers that stop them are registered after this.
func runManager(t *testing.T) *manager.Manager {
	t.Helper()
	m := manager.New(manager.Options{})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig())))
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Manager.Run: %v", err)
		}
	})
	return m
}

// configMapSource is the Source of every ConfigMap of cs.
func configMapSource(cs kubernetes.Interface) manager.Source[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return manager.Namespaced[*corev1.ConfigMap](cs.CoreV1().ConfigMaps)
}

// secretSource is the Source of every Secret of cs.
func secretSource(cs kubernetes.Interface) manager.Source[*corev1.Secret, *corev1.SecretList] {
	return manager.Namespaced[*corev1.Secret](cs.CoreV1().Secrets)
}
