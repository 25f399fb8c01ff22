package crd_test

import (
	"context"
	"errors"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/typed/crd"
)

func TestInstallRefusesNilInputBeforeWritingAnything(t *testing.T) {
	c, err := build[struct{}]()
	if err != nil {
		t.Fatal(err)
	}
	if err := crd.Install(context.Background(), nil, c); !errors.Is(err, crd.ErrInvalidDefinition) {
		t.Errorf("Install with a nil client: %v, want ErrInvalidDefinition", err)
	}
	if err := crd.InstallDefinitions(context.Background(), nil); !errors.Is(err, crd.ErrInvalidDefinition) {
		t.Errorf("InstallDefinitions with a nil client: %v, want ErrInvalidDefinition", err)
	}
	if err := crd.Install(context.Background(), (*fake.Clientset)(nil), c); !errors.Is(err, crd.ErrInvalidDefinition) {
		t.Errorf("Install with a typed nil client: %v, want ErrInvalidDefinition", err)
	}
	client := fake.NewClientset()
	if err := crd.Install(context.Background(), client, c, nil); !errors.Is(err, crd.ErrInvalidDefinition) {
		t.Errorf("Install of a nil CRD: %v, want ErrInvalidDefinition", err)
	}
	if err := crd.InstallDefinitions(context.Background(), client, &crd.Definition{}); !errors.Is(err, crd.ErrInvalidDefinition) {
		t.Errorf("InstallDefinitions of an empty Definition: %v, want ErrInvalidDefinition", err)
	}
	list, err := client.ApiextensionsV1().CustomResourceDefinitions().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("CRDs written: %v, %v; want none", list, err)
	}
}
