// Package webhook serves Kubernetes webhooks for typed objects: defaulting and
// validating admission webhooks for a kind T, and conversion webhooks between the Go
// structs of the versions of a custom resource, over TLS with certificates read from files
// and reloaded when they change. It is controller-runtime's pkg/webhook, typed, with no
// code generation.
//
// # Admission
//
// A Defaulter[T] sets defaults on an object being created or updated; the handler
// answers with a JSON patch from the object as decoded to the object as the Defaulter
// left it, so fields of the request that T does not know are kept. A Validator[T] checks
// creates, updates (with the old object) and deletes (with the object as stored). Both
// return Warnings, shown to the client, and an error that refuses the request: a
// *Denied (Deny, DenyFields) or an API status error (apierrors.NewInvalid...) refuses it
// with its code, reason, message and causes, as a decision; any other error, or a
// panic, refuses it with 500 Internal Server Error saying that the webhook failed, and is
// logged. RequestFromContext and IsDryRun tell the request's user, options and dry-run
// flag. A review of another kind than T, or with an object that does not decode into T,
// is refused 400 Bad Request naming both; a body that is not an admission.k8s.io/v1
// AdmissionReview, or larger than MaxRequestBytes, is answered with an HTTP error.
//
// For builds the pair and registers it on a Server at controller-runtime's paths
// (MutatePath, ValidatePath):
//
//	srv := webhook.NewServer(webhook.ServerOptions{CertDir: "/tmp/k8s-webhook-server/serving-certs"})
//	err := webhook.For[*Website](srv).WithKind(kind).WithDefaulter(d).WithValidator(v).Complete()
//
// # Conversion
//
// A Converter[H] converts the versions of one custom resource through a hub, the Go
// struct H of one version (usually the storage version). Every other version's Go struct
// S implements Convertible[H]: ConvertTo(hub H) and ConvertFrom(hub H), typed, checked
// at compile time by AddSpoke[S]. A ConversionReview's objects are each converted from
// their version to the hub and on to the desired one, and get the desired apiVersion and
// the request's metadata (a conversion may add labels and annotations); an object that
// does not convert fails the review with a message naming it (ErrConversion).
//
// # Serving
//
// A Server serves registered handlers over TLS (1.2 at least; HTTP/1.1 unless TLSOpts
// say otherwise) with the certificate and key of CertDir, read when it starts and again
// at the first handshake after either file changed (a stat per handshake: no file
// watcher, no restart). Run serves until its context ends, then lets reviews in flight
// finish. Ready is a readiness check that passes while it listens with a certificate
// loaded. A Manager runs it beside its other servers when given as
// manager.Options.Webhook, and /readyz waits for it.
package webhook
