package manager

import (
	"context"
	"fmt"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed/crd"
)

// CRDInstall is what a Manager installs as it starts: CustomResourceDefinitions built from
// Go types (package crd), with the server's schemas of the Kubernetes types they embed
// (crd.InstallDefinitions). Every replica installs them, each update retried on conflict,
// and one whose spec is unchanged writes nothing; Run returns once every CRD is served,
// so a cache of a custom resource finds it. A Definition that does not build or a CRD the
// server refuses ends Run with the error, before anything else started.
type CRDInstall struct {
	// Client writes the CRDs; its discovery client reads the server's OpenAPI.
	Client apiextensionsclient.Interface
	// Definitions are the CRDs to install.
	Definitions []*crd.Definition
}

// installCRDs installs Options.InstallCRDs, if set, and waits until they are served.
func (m *Manager) installCRDs(ctx context.Context) error {
	in := m.opts.InstallCRDs
	if in == nil {
		return nil
	}
	if guard.IsNil(in.Client) {
		return fmt.Errorf("manager: %w: InstallCRDs.Client", controller.ErrNilArgument)
	}
	if err := crd.InstallDefinitions(ctx, in.Client, in.Definitions...); err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	klog.FromContext(ctx).Info("installed CRDs", "definitions", len(in.Definitions))
	return nil
}
