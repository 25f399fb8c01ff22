package website_test

import (
	"errors"
	"fmt"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/webhook"
)

// New registers the Website's three webhooks on the webhook server a main gives
// (Options.Manager.Webhook), as on the one Options.Webhooks makes; and a server whose
// paths are taken already is New's error, not a webhook silently missing.
func TestNewWiresTheWebhooksOnTheMainsServer(t *testing.T) {
	// New only wires: nothing is sent to the server the configuration names.
	cs, cfg := fake.NewClientset(), &rest.Config{Host: "http://127.0.0.1:1"}
	srv := webhook.NewServer(webhook.ServerOptions{})
	if _, err := website.New(cs, cfg, website.Options{Manager: manager.Options{Webhook: srv}}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]string{webhook.ConvertPath(website.Kind.GroupKind()), webhook.MutatePath(website.Kind), webhook.ValidatePath(website.Kind)})
	if got := fmt.Sprint(srv.Paths()); got != want {
		t.Errorf("paths %s; want %s", got, want)
	}
	if _, err := website.New(cs, cfg, website.Options{Manager: manager.Options{Webhook: srv}}); !errors.Is(err, webhook.ErrInvalidOptions) {
		t.Errorf("New on a server with the Website's paths taken: %v; want ErrInvalidOptions", err)
	}
}
