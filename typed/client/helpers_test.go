package client_test

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type (
	obj  = *corev1.ConfigMap
	list = *corev1.ConfigMapList
)

func cm(name, value string) obj {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"v": value}}
}
