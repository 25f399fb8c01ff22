package manager_test

import (
	"context"
	"errors"
	"testing"
	"time"

	apiextensionsfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"

	"github.com/typedinformer/typedinformer/controller"
	crdgen "github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// InstallCRDs without a client, or with a Definition that does not build, ends Run with
// the error before anything starts: no cache runs without the CRDs it needs, and no CRD
// is written.
func TestRunEndsWithTheErrorOfAnInstallThatCannotBeMade(t *testing.T) {
	var typedNil *apiextensionsfake.Clientset
	for _, tc := range []struct {
		name    string
		install *manager.CRDInstall
		want    error
	}{
		{"no client", &manager.CRDInstall{Definitions: []*crdgen.Definition{{Group: "example.com", Kind: "Widget"}}}, controller.ErrNilArgument},
		{"a typed-nil client", &manager.CRDInstall{Client: typedNil}, controller.ErrNilArgument},
		{"a Definition without a kind", &manager.CRDInstall{Client: apiextensionsfake.NewClientset(), Definitions: []*crdgen.Definition{{Group: "example.com"}}}, crdgen.ErrInvalidDefinition},
		{"a nil Definition", &manager.CRDInstall{Client: apiextensionsfake.NewClientset(), Definitions: []*crdgen.Definition{nil}}, crdgen.ErrInvalidDefinition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := manager.New(manager.Options{InstallCRDs: tc.install})
			started := false
			if err := m.Add("runnable", manager.EveryReplica(manager.RunnableFunc(func(context.Context) error { started = true; return nil }))); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- m.Run(t.Context()) }()
			select {
			case err := <-done:
				if !errors.Is(err, tc.want) {
					t.Fatalf("Run = %v, want an error wrapping %v", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return")
			}
			if started {
				t.Fatal("a runnable started although the CRDs were not installed")
			}
			if c, ok := tc.install.Client.(*apiextensionsfake.Clientset); ok && c != nil && len(c.Actions()) != 0 {
				t.Fatalf("the install wrote or read %d times: %v", len(c.Actions()), c.Actions())
			}
		})
	}
}
