// Command mirror keeps a Secret copy of every ConfigMap labelled mirror=true.
package main

import (
	"bytes"
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/reflect"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/client"
)

// Mirror runs the controller in namespace ns until ctx ends.
func Mirror(ctx context.Context, cs kubernetes.Interface, ns string) error {
	configMaps, err := controller.New(cs.CoreV1().ConfigMaps(ns), controller.Options[*corev1.ConfigMap]{
		Options: reflect.Options[*corev1.ConfigMap]{ListOptions: client.Selectors(labels.SelectorFromSet(labels.Set{"mirror": "true"}), nil)},
	})
	if err != nil {
		return err
	}
	secrets, err := controller.New(cs.CoreV1().Secrets(ns), controller.Options[*corev1.Secret]{})
	if err != nil {
		return err
	}
	loop, err := typed.NewLoop(configMaps, typed.ReconcilerFunc[*corev1.ConfigMap](
		func(ctx context.Context, req typed.Request[*corev1.ConfigMap]) (typed.Result, error) {
			if req.Deleted { // deleted, or no longer labelled: remove the copy
				err := cs.CoreV1().Secrets(req.Namespace).Delete(ctx, req.Name, metav1.DeleteOptions{})
				return typed.Result{}, settle(err)
			}
			data := map[string][]byte{}
			for k, v := range req.Object.Data {
				data[k] = []byte(v)
			}
			if have, ok := secrets.Store().Get(req.Key); ok && maps.EqualFunc(have.Data, data, bytes.Equal) {
				return typed.Result{}, nil // already right: no write
			}
			want := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(req.Object,
					corev1.SchemeGroupVersion.WithKind("ConfigMap"))}}, Data: data}
			_, err := cs.CoreV1().Secrets(req.Namespace).Create(ctx, want, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				_, err = cs.CoreV1().Secrets(req.Namespace).Update(ctx, want, metav1.UpdateOptions{})
			}
			return typed.Result{}, settle(err)
		}), typed.Options{Workers: 2})
	if err != nil {
		return err
	}
	// A copy edited or deleted by someone else is put back.
	typed.Related(loop, secrets, typed.OwnerKeys[*corev1.Secret](schema.GroupKind{Kind: "ConfigMap"}, meta.RESTScopeNamespace))
	return typed.RunAll(ctx, configMaps.Run, secrets.Run, loop.Run)
}

// settle ignores NotFound (already gone) and does not retry invalid requests.
func settle(err error) error {
	if apierrors.IsInvalid(err) {
		return typed.Terminal(err)
	} else if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
