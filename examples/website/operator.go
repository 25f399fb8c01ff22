// Package website is an operator for Website resources (a custom resource with a Go
// struct and no code generation): each Website gets a ConfigMap holding its message and a
// Deployment of web servers serving it, both controlled by the Website, kept as they
// should be when someone edits them, and deleted by a finalizer when the Website goes. It
// reports its status through the status subresource, records Events, and runs under
// leader election: replicas keep their caches warm and one of them reconciles. Its
// webhooks (webhook.go, served when Options.Webhooks is set) give a Website its title
// by default, refuse a message longer than MaxMessageLength, and convert between the
// CRD's two versions, v1 (Website, stored) and v2 (WebsiteV2).
//
// It is typedinformer's answer to "how much code is an operator": the wiring is the
// manager.Builder declaration in New, and the whole operator this file.
package website

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/typedinformer/typedinformer/typed/predicate"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/leaderelection"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/webhook"
	"github.com/typedinformer/typedinformer/typed/write"
)

const (
	// Finalizer is the finalizer that keeps a Website until its objects are deleted.
	Finalizer = "examples.typedinformer.io/cleanup"
	// Component names the operator in its Events and its Lease.
	Component = "website-operator"
	// Image is the web server's.
	Image = "nginx:1.27"
)

// Options configure an Operator.
type Options struct {
	// Namespace is where the operator manages Websites (all namespaces when "") and where
	// its Lease is ("default" when "").
	Namespace string
	// LeaderElection says this replica's Identity, how leader election is timed, and
	// OnNewLeader; New sets its Client, Namespace and Name.
	LeaderElection leaderelection.Config
	// HealthProbeAddress, when set, is where /healthz and /readyz are served.
	HealthProbeAddress string
	// Metrics, when set, receives the metrics of the operator's caches and of its loop:
	// it is the Manager's (manager.Options.Metrics), given once for all of them.
	Metrics manager.Metrics
	// Manager is the rest of the Manager's options, as a main's operator.Run gives them
	// (metrics server, CRD installation, ...). The fields above, when set, replace
	// theirs; its LeaderElection is used when LeaderElection above has no Identity (with
	// neither, the operator runs alone, without leader election), and New names the
	// Lease. New registers the Website's webhooks on its Webhook server, when it has one.
	Manager manager.Options
	// Webhooks, when set, makes the Manager's webhook server with these options (the
	// certificate of its CertDir): it serves the Website's webhooks (SetupWebhooks:
	// defaulting, validation, conversion between v1 and v2) over TLS on every replica,
	// and /readyz waits for it. A cluster reaches them through the Service
	// WebhookServiceNamespace/WebhookServiceName (see WebhookConfigurations and
	// Definition).
	Webhooks *webhook.ServerOptions
	// Websites, when set, is the Websites' client, in place of the one New makes from
	// its *rest.Config (client.ForResource, which decodes the API server's JSON straight
	// into a Website); a unit test gives one over a fake dynamic client
	// (client.FromDynamicNamespaced), and New's config may then be nil.
	Websites func(namespace string) *client.Dynamic[*Website]
}

// Operator is one replica of the Website operator: a Manager (Run runs it) and the
// caches it reads, which may be read while it runs.
type Operator struct {
	*manager.Manager
	Websites    *manager.Cache[*Website]
	Deployments *manager.Cache[*appsv1.Deployment]
	ConfigMaps  *manager.Cache[*corev1.ConfigMap]
}

// New returns a replica of the operator that talks to the cluster through cs
// (kubernetes.NewForConfig's) and, for Websites, through cfg (or Options.Websites). Run
// runs it until its context ends: the caches always, the reconciler while it leads.
func New(cs kubernetes.Interface, cfg *rest.Config, opts Options) (*Operator, error) {
	websites := opts.Websites
	if websites == nil {
		var err error
		if websites, err = client.ForResource[*Website](cfg, Resource); err != nil { // the CRD's Go struct, decoded straight from JSON
			return nil, err
		}
	}
	recorder, err := write.NewRecorder(cs, Component)
	if err != nil {
		return nil, err
	}
	mo := managerOptions(cs, opts)
	if opts.Webhooks != nil {
		mo.Webhook = webhook.NewServer(*opts.Webhooks)
	}
	if mo.Webhook != nil {
		if err := SetupWebhooks(mo.Webhook); err != nil {
			return nil, err
		}
	}
	m := manager.New(mo)

	// The wiring: Websites are reconciled when their spec changes (not on status writes),
	// and when a Deployment or ConfigMap they control changes.
	b := manager.For(m, manager.Namespaced[*Website](websites), manager.CacheOptions[*Website]{Namespaces: []string{opts.Namespace}}).
		WithKind(Kind).WithPredicates(predicate.GenerationChanged).WithOptions(typed.Options{Workers: 2})
	o := &Operator{Manager: m, Websites: b.Cache(),
		Deployments: manager.Owns(b, manager.Namespaced[*appsv1.Deployment](cs.AppsV1().Deployments)),
		ConfigMaps:  manager.Owns(b, manager.Namespaced[*corev1.ConfigMap](cs.CoreV1().ConfigMaps))}
	r := &reconciler{o: o, recorder: recorder,
		status:      write.NewStatusWriter(websites, func(w *Website) *WebsiteStatus { return &w.Status }),
		deployments: write.NewOwned[*Website](cs.AppsV1().Deployments, Kind).WithCache(o.Deployments),
		configMaps:  write.NewOwned[*Website](cs.CoreV1().ConfigMaps, Kind).WithCache(o.ConfigMaps)}
	r.finalizer = write.NewFinalizer(websites, Finalizer, r.cleanup)
	_, err = b.Complete(r)
	if err = errors.Join(err, m.Add("events", manager.EveryReplica(recorder))); err != nil {
		return nil, err
	}
	return o, nil
}

type reconciler struct {
	o           *Operator
	recorder    *write.Recorder
	status      *write.StatusWriter[*Website, WebsiteStatus]
	deployments *write.Owned[*Website, *appsv1.Deployment]
	configMaps  *write.Owned[*Website, *corev1.ConfigMap]
	finalizer   *write.Finalizer[*Website]
}

// Reconcile makes a Website's ConfigMap, Deployment and status what its spec says.
func (r *reconciler) Reconcile(ctx context.Context, req typed.Request[*Website]) (typed.Result, error) {
	if deleted, err := r.finalizer.Handle(ctx, req); deleted || err != nil {
		return typed.Result{}, err
	}
	w := req.Object
	labels := map[string]string{"app.kubernetes.io/name": "website", "app.kubernetes.io/instance": w.Name}
	change, err := r.configMaps.CreateOrUpdate(ctx, w, w.Namespace, w.Name, func(cm *corev1.ConfigMap) {
		cm.Labels = merged(cm.Labels, labels)
		cm.Data = map[string]string{"index.html": w.Spec.Message, "title": w.Spec.Title}
	})
	if err = r.record(w, "ConfigMap", change, err); err != nil {
		return typed.Result{}, err
	}
	change, err = r.deployments.CreateOrUpdate(ctx, w, w.Namespace, w.Name, func(d *appsv1.Deployment) {
		d.Labels = merged(d.Labels, labels)
		d.Spec.Replicas = ptr.To(w.Spec.Replicas)
		d.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels}
		d.Spec.Template.Labels = merged(d.Spec.Template.Labels, labels)
		pod := &d.Spec.Template.Spec
		if len(pod.Containers) == 0 {
			pod.Containers = make([]corev1.Container, 1)
		}
		pod.Containers[0].Name, pod.Containers[0].Image = "web", Image
		pod.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "content", MountPath: "/usr/share/nginx/html", ReadOnly: true}}
		pod.Volumes = []corev1.Volume{{Name: "content", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: w.Name}, DefaultMode: ptr.To[int32](0o644)}}}}
	})
	if err = r.record(w, "Deployment", change, err); err != nil {
		return typed.Result{}, err
	}
	var ready int32
	if d, ok := r.o.Deployments.GetByName(w.Namespace, w.Name); ok {
		ready = d.Status.ReadyReplicas
	}
	return typed.Result{}, r.status.Update(ctx, w, func(s *WebsiteStatus) {
		s.ObservedGeneration, s.ReadyReplicas = w.Generation, ready
		cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Progressing", ObservedGeneration: w.Generation,
			Message: fmt.Sprintf("%d of %d replicas ready", ready, w.Spec.Replicas)}
		if ready >= w.Spec.Replicas {
			cond.Status, cond.Reason = metav1.ConditionTrue, "Available"
		}
		meta.SetStatusCondition(&s.Conditions, cond)
	})
}

// record records an Event for what CreateOrUpdate did to w's object of kind, and returns
// its error. Events of one kind and action form a series, so each kind has its action.
func (r *reconciler) record(w *Website, kind string, change write.Change, err error) error {
	switch action := "Apply" + kind; {
	case err != nil:
		r.recorder.Eventf(w, nil, corev1.EventTypeWarning, "Failed", action, "%s %s: %v", kind, w.Name, err)
	case change != write.Unchanged:
		reason := map[write.Change]string{write.Created: "Created", write.Updated: "Updated"}[change]
		r.recorder.Eventf(w, nil, corev1.EventTypeNormal, reason, action, "%s %s %s", reason, kind, w.Name)
	}
	return err
}

// cleanup deletes what the Website controls, before the finalizer lets it go: no garbage
// collector is needed, and what another owner controls is left alone.
func (r *reconciler) cleanup(ctx context.Context, w *Website) error {
	return errors.Join(r.deleted(w, "Deployment")(r.deployments.Delete(ctx, w, w.Namespace, w.Name)),
		r.deleted(w, "ConfigMap")(r.configMaps.Delete(ctx, w, w.Namespace, w.Name)))
}

// deleted records an Event for a deletion of w's namesake of kind, and leaves alone one
// that another owner controls: it is not the Website's to clean up.
func (r *reconciler) deleted(w *Website, kind string) func(bool, error) error {
	return func(deleted bool, err error) error {
		if deleted {
			r.recorder.Eventf(w, nil, corev1.EventTypeNormal, "Deleted", "Delete"+kind, "Deleted %s %s", kind, w.Name)
		}
		if errors.Is(err, write.ErrControlledByOther) {
			return nil
		}
		return err
	}
}

// merged returns labels with add set, keeping what others set.
func merged(labels, add map[string]string) map[string]string {
	out := maps.Clone(add)
	maps.Copy(out, labels)
	maps.Copy(out, add)
	return out
}
