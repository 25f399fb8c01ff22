//go:build unix

package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/typedinformer/typedinformer/typed/crd"
)

// crdAPIVersion and crdKind are what every document of a CRD file must declare.
const (
	crdAPIVersion = "apiextensions.k8s.io/v1"
	crdKind       = "CustomResourceDefinition"
)

// InstallCRDs installs the CRDs with [crd.Install], through connections of
// its own that it closes before it returns: it creates each CRD (or, if a CRD
// of that name exists, replaces its labels, annotations and spec) and returns
// once every one is ready to use:
// its Established and NamesAccepted conditions are true, its accepted names
// are its spec's names, and in every served version discovery lists its
// resource and a list of it succeeds, so that clients, informers and REST
// mappers find it. The values are not modified.
//
// ctx bounds the installation, and each wait is also capped at two minutes. An
// error names the CRD and says what went wrong: the server's answer to an
// invalid CRD (a Kubernetes API error, testable with apierrors.IsInvalid),
// names not accepted (with the server's reason, such as a plural already taken),
// or the condition that did not hold in time.
func (env *Environment) InstallCRDs(ctx context.Context, crds ...*apiextensionsv1.CustomResourceDefinition) error {
	cfg, closeConns := env.ownConnections()
	defer closeConns()
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	if err := crd.Install(ctx, client, crds...); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	env.log.V(1).Info("Installed CRDs", "names", crdNames(crds))
	return nil
}

// InstallDefinitions builds the Definitions with the server's schemas of the Kubernetes
// types they embed and installs them, as [crd.InstallDefinitions] does, through
// connections of its own, as [Environment.InstallCRDs] does. Nothing is installed if one
// does not build.
func (env *Environment) InstallDefinitions(ctx context.Context, defs ...*crd.Definition) error {
	cfg, closeConns := env.ownConnections()
	defer closeConns()
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	if err := crd.InstallDefinitions(ctx, client, defs...); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	env.log.V(1).Info("Installed CRDs from Go types", "definitions", len(defs))
	return nil
}

// InstallCRDFiles reads CRDs as [ReadCRDFiles] does and installs them as
// [Environment.InstallCRDs] does. Nothing is installed if a file cannot be
// read or parsed.
func (env *Environment) InstallCRDFiles(ctx context.Context, paths ...string) error {
	crds, err := ReadCRDFiles(paths...)
	if err != nil {
		return err
	}
	return env.InstallCRDs(ctx, crds...)
}

// InstallCRDYAML parses data as [ParseCRDs] does and installs the CRDs as
// [Environment.InstallCRDs] does. Nothing is installed if data does not parse.
func (env *Environment) InstallCRDYAML(ctx context.Context, data []byte) error {
	crds, err := ParseCRDs(data, "the YAML")
	if err != nil {
		return err
	}
	return env.InstallCRDs(ctx, crds...)
}

// ReadCRDFiles parses the CRDs in the files at paths, as [ParseCRDs] does. A
// path that is a directory stands for the files in it (not in its
// subdirectories) whose names end in .yaml, .yml or .json, in lexical order.
// Every file, and every directory, must hold at least one CRD.
func ReadCRDFiles(paths ...string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, path := range paths {
		files := []string{path}
		fi, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("testenv: reading CRDs: %w", err)
		}
		if fi.IsDir() {
			entries, err := os.ReadDir(path)
			if err != nil {
				return nil, fmt.Errorf("testenv: reading CRDs: %w", err)
			}
			files = files[:0]
			for _, e := range entries {
				if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
					files = append(files, filepath.Join(path, e.Name()))
				}
			}
			if len(files) == 0 {
				return nil, fmt.Errorf("testenv: reading CRDs: %s has no .yaml, .yml or .json file", path)
			}
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("testenv: reading CRDs: %w", err)
			}
			parsed, err := ParseCRDs(data, file)
			if err != nil {
				return nil, err
			}
			crds = append(crds, parsed...)
		}
	}
	return crds, nil
}

// documentSeparator is a YAML document separator line: "---", maybe followed by
// a space and anything (a comment).
var documentSeparator = regexp.MustCompile(`^---(\s.*)?$`)

// ParseCRDs parses data, one or more YAML (or JSON) documents separated by
// "---" lines, each an apiextensions.k8s.io/v1 CustomResourceDefinition, as
// kubectl apply takes them. Empty documents (such as one before a leading
// "---", or only comments) are skipped; at least one CRD is required. Fields
// are decoded strictly: an unknown or duplicated field is an error, so that a
// misspelt field fails here instead of being dropped by the server. source
// names data in errors (a file name, say); each error also says which document,
// starting at which line, is wrong. Fields are matched case-sensitively, as the
// API server matches them.
func ParseCRDs(data []byte, source string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	docs := splitDocuments(data)
	for i, doc := range docs {
		where := fmt.Sprintf("%s, document %d (from line %d)", source, i+1, doc.line)
		// Duplicate keys are an error here; the apiserver would keep one silently.
		data, err := yaml.YAMLToJSONStrict(doc.data)
		if err != nil {
			return nil, fmt.Errorf("testenv: %s does not parse: %w", where, err)
		}
		if string(bytes.TrimSpace(data)) == "null" {
			continue // empty, or only comments
		}
		var typeMeta metav1.TypeMeta
		if err := json.Unmarshal(data, &typeMeta); err != nil {
			return nil, fmt.Errorf("testenv: %s is not an object: %w", where, err)
		}
		if typeMeta.APIVersion != crdAPIVersion || typeMeta.Kind != crdKind {
			return nil, fmt.Errorf("testenv: %s is a %s, not a %s %s", where, describeType(typeMeta), crdAPIVersion, crdKind)
		}
		// Case-sensitive, as the apiserver decodes: "openAPIv3Schema" is unknown.
		crd := new(apiextensionsv1.CustomResourceDefinition)
		strictErrs, err := sigsjson.UnmarshalStrict(data, crd)
		if err == nil && len(strictErrs) > 0 {
			err = errors.Join(strictErrs...)
		}
		if err != nil {
			return nil, fmt.Errorf("testenv: %s is not a valid %s: %w", where, crdKind, err)
		}
		if crd.Name == "" {
			return nil, fmt.Errorf("testenv: %s: the %s has no metadata.name", where, crdKind)
		}
		crds = append(crds, crd)
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("testenv: %s holds no %s", source, crdKind)
	}
	return crds, nil
}

func describeType(tm metav1.TypeMeta) string {
	switch {
	case tm.APIVersion == "" && tm.Kind == "":
		return "document with neither apiVersion nor kind"
	case tm.Kind == "":
		return tm.APIVersion + " object with no kind"
	case tm.APIVersion == "":
		return tm.Kind + " with no apiVersion"
	}
	return tm.APIVersion + " " + tm.Kind
}

// document is one YAML document of a stream and the line it starts at (1-based).
type document struct {
	data []byte
	line int
}

// splitDocuments splits a YAML stream at its "---" lines.
func splitDocuments(data []byte) []document {
	lines := bytes.SplitAfter(data, []byte("\n"))
	docs := []document{{line: 1}}
	for i, line := range lines {
		if documentSeparator.Match(bytes.TrimRight(line, "\r\n")) {
			docs = append(docs, document{line: i + 2})
			continue
		}
		last := &docs[len(docs)-1]
		last.data = append(last.data, line...)
	}
	return docs
}

// permanent marks an error of a poll's check that no retry will mend.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// poll calls check every pollInterval until it returns no reason to wait and no
// error, or a permanent error, or ctx ends. A transient error (a request that
// failed) counts as a reason to wait. The error of a wait that timed out gives
// the last reason.
func poll(ctx context.Context, check func(context.Context) (string, error)) error {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		reason, err := check(reqCtx)
		cancel()
		var p permanent
		if errors.As(err, &p) {
			return p.error
		}
		if err != nil {
			reason = err.Error()
		}
		if reason == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w, when %s", context.Cause(ctx), reason)
		case <-ticker.C:
		}
	}
}

func crdNames(crds []*apiextensionsv1.CustomResourceDefinition) []string {
	names := make([]string, len(crds))
	for i, crd := range crds {
		names[i] = crd.Name
	}
	return names
}

// ownConnections returns an admin configuration with connections of its own and
// the function that closes them. client-go otherwise shares one transport per
// TLS configuration for the life of the process, whose HTTP/2 connections each
// keep a reader goroutine: closing them is what leaves no goroutine behind.
func (env *Environment) ownConnections() (*rest.Config, func()) {
	cfg := env.AdminConfig()
	d := connrotation.NewDialer((&net.Dialer{Timeout: 10 * time.Second}).DialContext)
	cfg.Dial = d.DialContext // a config with its own Dial gets its own transport
	return cfg, d.CloseAll
}
