package fake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The field selectors every resource supports on a real server.
const (
	fieldName      = "metadata.name"
	fieldNamespace = "metadata.namespace"
)

// selector is the parsed label and field selector of one request.
type selector struct {
	labels labels.Selector
	fields fields.Selector
}

// parseSelector parses the selectors of opts, rejecting field selectors the server would
// not support for an arbitrary resource.
func parseSelector(opts metav1.ListOptions) (selector, error) {
	ls, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return selector{}, apierrors.NewBadRequest(fmt.Sprintf("unable to parse label selector %q: %v", opts.LabelSelector, err))
	}
	fs, err := fields.ParseSelector(opts.FieldSelector)
	if err != nil {
		return selector{}, apierrors.NewBadRequest(fmt.Sprintf("unable to parse field selector %q: %v", opts.FieldSelector, err))
	}
	for _, r := range fs.Requirements() {
		if r.Field != fieldName && r.Field != fieldNamespace {
			return selector{}, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
		}
	}
	return selector{labels: ls, fields: fs}, nil
}

// empty reports whether the selector selects everything.
func (s selector) empty() bool {
	return s.labels.Empty() && s.fields.Empty()
}

// matches reports whether obj is selected.
func (s selector) matches(obj metav1.Object) bool {
	if s.empty() {
		return true
	}
	return s.labels.Matches(labels.Set(obj.GetLabels())) &&
		s.fields.Matches(fields.Set{fieldName: obj.GetName(), fieldNamespace: obj.GetNamespace()})
}

// invalidOptions builds the error the server returns for invalid ListOptions.
func invalidOptions(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", errs)
}

// validateList mirrors the API server's validation of list requests, so that a test
// catches a request a real server would reject.
func validateList(opts metav1.ListOptions) error {
	var errs field.ErrorList
	if match := opts.ResourceVersionMatch; match != "" {
		p := field.NewPath("resourceVersionMatch")
		if opts.ResourceVersion == "" {
			errs = append(errs, field.Forbidden(p, "resourceVersionMatch is forbidden unless resourceVersion is provided"))
		}
		if opts.Continue != "" {
			errs = append(errs, field.Forbidden(p, "resourceVersionMatch is forbidden when continue is provided"))
		}
		if match != metav1.ResourceVersionMatchExact && match != metav1.ResourceVersionMatchNotOlderThan {
			errs = append(errs, field.NotSupported(p, match, []string{string(metav1.ResourceVersionMatchExact), string(metav1.ResourceVersionMatchNotOlderThan), ""}))
		}
		if match == metav1.ResourceVersionMatchExact && opts.ResourceVersion == "0" {
			errs = append(errs, field.Forbidden(p, `resourceVersionMatch "exact" is forbidden for resourceVersion "0"`))
		}
	}
	if opts.SendInitialEvents != nil {
		errs = append(errs, field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for list"))
	}
	if err := invalidOptions(errs); err != nil {
		return err
	}
	if opts.Continue != "" && opts.ResourceVersion != "" {
		return apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
	}
	return nil
}

// validateWatch mirrors the API server's validation of watch requests; watchList says
// whether the server has the WatchList feature.
func validateWatch(opts metav1.ListOptions, watchList bool) error {
	var errs field.ErrorList
	match := opts.ResourceVersionMatch
	if opts.SendInitialEvents != nil {
		if match != metav1.ResourceVersionMatchNotOlderThan {
			errs = append(errs, field.Forbidden(field.NewPath("resourceVersionMatch"), fmt.Sprintf("sendInitialEvents requires setting resourceVersionMatch to %s", metav1.ResourceVersionMatchNotOlderThan)))
		}
		if !watchList {
			errs = append(errs, field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"))
		}
	}
	if match != "" {
		p := field.NewPath("resourceVersionMatch")
		if opts.SendInitialEvents == nil {
			errs = append(errs, field.Forbidden(p, "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"))
		}
		if match != metav1.ResourceVersionMatchNotOlderThan {
			errs = append(errs, field.NotSupported(p, match, []string{string(metav1.ResourceVersionMatchNotOlderThan)}))
		}
		if opts.Continue != "" {
			errs = append(errs, field.Forbidden(p, "resourceVersionMatch is forbidden when continue is provided"))
		}
	}
	return invalidOptions(errs)
}

// parseRV parses a non-empty resource version.
func parseRV(rv string) (int64, error) {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n < 0 {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", rv))
	}
	return n, nil
}

func formatRV(rv int64) string { return strconv.FormatInt(rv, 10) }

// tooOld is the error the server gives for a resource version older than its compaction
// point; the watch cache words it the same way.
func tooOld(rv, compacted int64) *apierrors.StatusError {
	return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, compacted))
}

// tooLarge is the error the server gives for a resource version it has not reached. It
// carries the ResourceVersionTooLarge cause that client-go's reflector looks for.
func tooLarge(rv, current int64) *apierrors.StatusError {
	err := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", rv, current), 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{
		Type:    metav1.CauseTypeResourceVersionTooLarge,
		Message: "Too large resource version",
	}}
	return err
}

// continueToken is the decoded form of a continue string: the resource version of the
// snapshot the first page was read at, and the key of the last item returned.
type continueToken struct {
	RV   int64  `json:"rv"`
	Last string `json:"last"`
}

func encodeContinue(rv int64, last string) string {
	b, err := json.Marshal(continueToken{RV: rv, Last: last})
	if err != nil {
		panic(err) // cannot happen: the struct always marshals
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(s string) (continueToken, error) {
	var tok continueToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &tok)
	}
	if err == nil && (tok.RV <= 0 || tok.Last == "") {
		err = fmt.Errorf("incomplete continue token")
	}
	if err != nil {
		return continueToken{}, apierrors.NewBadRequest(fmt.Sprintf("continue key is not valid: %v", err))
	}
	return tok, nil
}

// expiredContinue is the error the server gives for a continue token whose snapshot was
// compacted away.
func expiredContinue() error {
	return apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
}
