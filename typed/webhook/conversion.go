package webhook

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	kjson "sigs.k8s.io/json"

	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/typed/client"
)

// Convertible is the Go struct of one version (a spoke) of a custom resource whose
// versions convert through a hub H, the Go struct of one other version (usually the
// storage version): ConvertTo fills hub from the receiver, ConvertFrom fills the receiver
// from hub. Both are typed; no version needs to know another spoke, and none of them is
// generated. A conversion that cannot be done returns an error, which fails the whole
// ConversionReview with its message.
//
// A conversion need not copy ObjectMeta: the Converter keeps the request's metadata, as
// the API server requires. It may add or change labels and annotations (to keep fields
// the other version lacks, say), which are merged into the request's.
type Convertible[H event.Object] interface {
	event.Object
	ConvertTo(hub H) error
	ConvertFrom(hub H) error
}

// Converter is the http.Handler of the conversion webhook of one custom resource, which
// the API server calls with apiextensions.k8s.io/v1 ConversionReviews: it converts each
// object of a review from its version to the hub H, then to the desired version, and
// answers with every converted object, or with a Failed status naming the first object
// that did not convert and why (ErrConversion). A panic of a conversion is recovered and
// reported the same way. Make one with NewConverter, add the other versions with
// AddSpoke, and register it on a Server at Path.
type Converter[H event.Object] struct {
	kind schema.GroupVersionKind // the hub's

	mu       sync.RWMutex
	versions map[string]versionOf[H]
}

// versionOf converts between one version and the hub.
type versionOf[H event.Object] struct {
	toHub   func(raw []byte) (H, error)
	fromHub func(hub H) (runtime.Object, error)
}

// NewConverter returns the Converter of the custom resource of hubKind's group and kind,
// whose hub is the Go struct H of version hubKind.Version. It returns an error wrapping
// ErrNoKind when hubKind lacks a group, a version or a kind (a built-in kind has no
// conversion webhook).
func NewConverter[H event.Object](hubKind schema.GroupVersionKind) (*Converter[H], error) {
	if hubKind.Group == "" || hubKind.Version == "" || hubKind.Kind == "" {
		return nil, fmt.Errorf("%w: a conversion webhook's kind needs a group, a version and a kind, got %q", ErrNoKind, hubKind)
	}
	c := &Converter[H]{kind: hubKind, versions: map[string]versionOf[H]{}}
	c.versions[hubKind.Version] = versionOf[H]{
		toHub:   func(raw []byte) (H, error) { return decodeAs[H](raw) },
		fromHub: func(hub H) (runtime.Object, error) { return hub, nil },
	}
	return c, nil
}

// AddSpoke adds version, whose Go struct S converts to and from c's hub. It returns an
// error wrapping ErrInvalidOptions for a nil c, an empty version, or one c converts
// already.
func AddSpoke[S Convertible[H], H event.Object](c *Converter[H], version string) error {
	if c == nil || version == "" {
		return fmt.Errorf("%w: AddSpoke needs a Converter and a version", ErrInvalidOptions)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.versions[version]; ok {
		return fmt.Errorf("%w: version %s of %s is converted already", ErrInvalidOptions, version, c.kind.GroupKind())
	}
	c.versions[version] = versionOf[H]{
		toHub: func(raw []byte) (H, error) {
			spoke, err := decodeAs[S](raw)
			if err != nil {
				var zero H
				return zero, err
			}
			hub := client.New[H]()
			return hub, spoke.ConvertTo(hub)
		},
		fromHub: func(hub H) (runtime.Object, error) {
			spoke := client.New[S]()
			return spoke, spoke.ConvertFrom(hub)
		},
	}
	return nil
}

// Path is where a Server serves c, by convention: ConvertPath of its group and kind.
func (c *Converter[H]) Path() string { return ConvertPath(c.kind.GroupKind()) }

// ConvertPath is where a Server serves the conversion webhook of kind, by convention:
// "/convert-<group with dashes>-<lowercase kind>", after controller-runtime's webhook
// paths; the CRD's conversion clientConfig names it.
func ConvertPath(kind schema.GroupKind) string {
	return "/convert-" + strings.ReplaceAll(kind.Group, ".", "-") + "-" + strings.ToLower(kind.Kind)
}

// Versions returns the versions c converts, sorted.
func (c *Converter[H]) Versions() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Sorted(maps.Keys(c.versions))
}

// ServeHTTP answers a ConversionReview.
func (c *Converter[H]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var review apiextensionsv1.ConversionReview
	if !readReview(w, r, &review, apiextensionsv1.SchemeGroupVersion.WithKind("ConversionReview"), func() bool { return review.Request != nil }) {
		return
	}
	req := review.Request
	resp := &apiextensionsv1.ConversionResponse{UID: req.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	converted, err := c.convertAll(req)
	if err != nil {
		klog.FromContext(r.Context()).Error(err, "Conversion failed", "webhook", r.URL.Path, "uid", req.UID, "desiredAPIVersion", req.DesiredAPIVersion)
		resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
	} else {
		resp.ConvertedObjects = converted
	}
	writeJSON(w, r, &apiextensionsv1.ConversionReview{TypeMeta: review.TypeMeta, Response: resp})
}

// convertAll converts every object of req, or none.
func (c *Converter[H]) convertAll(req *apiextensionsv1.ConversionRequest) ([]runtime.RawExtension, error) {
	desired, err := schema.ParseGroupVersion(req.DesiredAPIVersion)
	if err != nil || desired.Group != c.kind.Group {
		return nil, fmt.Errorf("%w: the desired API version %q is not of group %s", ErrConversion, req.DesiredAPIVersion, c.kind.Group)
	}
	c.mu.RLock()
	to, ok := c.versions[desired.Version]
	c.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: the desired version %s of %s is not converted by this webhook (it converts %q)", ErrConversion, desired.Version, c.kind.GroupKind(), c.Versions())
	}
	out := make([]runtime.RawExtension, len(req.Objects))
	for i, obj := range req.Objects {
		raw, err := c.convert(obj.Raw, desired.WithKind(c.kind.Kind), to)
		if err != nil {
			return nil, fmt.Errorf("%w: object %d of %d (%s): %w", ErrConversion, i+1, len(req.Objects), describe(obj.Raw), err)
		}
		out[i] = runtime.RawExtension{Raw: raw}
	}
	return out, nil
}

// header is what the Converter reads of an object before it knows its Go type.
type header struct {
	APIVersion string                     `json:"apiVersion"`
	Kind       string                     `json:"kind"`
	Metadata   map[string]json.RawMessage `json:"metadata"`
}

// describe names an object for an error: its kind, version, namespace and name.
func describe(raw []byte) string {
	var h header
	if kjson.UnmarshalCaseSensitivePreserveInts(raw, &h) != nil {
		return "not a JSON object"
	}
	var ns, name string
	_ = json.Unmarshal(h.Metadata["namespace"], &ns)
	_ = json.Unmarshal(h.Metadata["name"], &name)
	if ns != "" {
		name = ns + "/" + name
	}
	return fmt.Sprintf("%s %s %s", h.APIVersion, h.Kind, name)
}

// convert converts raw to desired through the hub, recovering a panic of a conversion.
func (c *Converter[H]) convert(raw []byte, desired schema.GroupVersionKind, to versionOf[H]) (out []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("the conversion panicked: %v", v)
		}
	}()
	var in header
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &in); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	gv, err := schema.ParseGroupVersion(in.APIVersion)
	if err != nil || gv.Group != c.kind.Group || in.Kind != c.kind.Kind {
		return nil, fmt.Errorf("an object of apiVersion %q and kind %q, not of %s", in.APIVersion, in.Kind, c.kind.GroupKind())
	}
	c.mu.RLock()
	from, ok := c.versions[gv.Version]
	c.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("version %s is not converted by this webhook (it converts %q)", gv.Version, c.Versions())
	}
	hub, err := from.toHub(raw)
	if err != nil {
		return nil, fmt.Errorf("to the hub version %s: %w", c.kind.Version, err)
	}
	obj, err := to.fromHub(hub)
	if err != nil {
		return nil, fmt.Errorf("from the hub version %s to %s: %w", c.kind.Version, desired.Version, err)
	}
	obj.GetObjectKind().SetGroupVersionKind(desired)
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding the converted object: %w", err)
	}
	return withMetadata(data, in.Metadata)
}

// withMetadata returns the object data with the metadata meta, the labels and
// annotations of data's own metadata merged in.
func withMetadata(data []byte, meta map[string]json.RawMessage) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("the converted object is not a JSON object: %w", err)
	}
	var converted map[string]json.RawMessage
	if m, ok := obj["metadata"]; ok {
		if err := json.Unmarshal(m, &converted); err != nil {
			return nil, fmt.Errorf("the converted object's metadata is not a JSON object: %w", err)
		}
	}
	meta = maps.Clone(meta)
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	for _, field := range []string{"labels", "annotations"} {
		var kept, set map[string]string
		if err := json.Unmarshal(cmpOr(meta[field]), &kept); err != nil {
			return nil, fmt.Errorf("metadata.%s: %w", field, err)
		}
		if err := json.Unmarshal(cmpOr(converted[field]), &set); err != nil {
			return nil, fmt.Errorf("the converted object's metadata.%s: %w", field, err)
		}
		if len(set) == 0 {
			continue
		}
		if kept == nil {
			kept = map[string]string{}
		}
		maps.Copy(kept, set)
		b, err := json.Marshal(kept)
		if err != nil {
			return nil, err
		}
		meta[field] = b
	}
	m, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	obj["metadata"] = m
	return json.Marshal(obj)
}

// cmpOr returns raw, or JSON null when it is empty.
func cmpOr(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// decodeAs decodes raw into a new T.
func decodeAs[T event.Object](raw []byte) (T, error) {
	obj := client.New[T]()
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, obj); err != nil {
		return obj, fmt.Errorf("decoding into a %T: %w", obj, err)
	}
	return obj, nil
}
