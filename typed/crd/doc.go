// Package crd builds CustomResourceDefinitions from Go types at run time, by
// reflection, with no code generation and no marker comments; installs or
// upgrades them from a program; and writes them as YAML for "kubectl apply".
//
// # From a Go struct to a schema
//
// A Definition names the resource (group, kind, plural, scope, short names,
// categories) and lists its versions, each made by VersionOf[T] from the
// custom resource's Go type T. Build returns the
// apiextensionsv1.CustomResourceDefinition. The structural OpenAPI v3 schema
// follows what encoding/json writes for T:
//
//   - A field is required unless its json tag has omitempty or omitzero, or
//     its type is a pointer: a field that is always written is part of the
//     object's intent, as it is for server-side apply. json:"-" fields and
//     unexported fields are left out; anonymous embedded structs (with or
//     without json:",inline") are inlined, the shallower of two fields of one
//     name winning, as in encoding/json, and the fields of one embedded
//     through a pointer are optional.
//   - bool, integers (int32 and smaller: format int32; others: int64),
//     floats (number), strings, []byte (a base64 string), slices and arrays,
//     maps with string keys (additionalProperties), structs and pointers have
//     their natural schemas.
//   - API machinery types with a JSON form of their own have the schemas
//     controller-gen gives them: metav1.Time and MicroTime (date-time
//     strings), metav1.Duration (a string), resource.Quantity and
//     intstr.IntOrString (x-kubernetes-int-or-string, Quantity with its
//     pattern), runtime.RawExtension (an object whose fields are kept),
//     apiextensionsv1.JSON and json.RawMessage (any value, kept).
//   - metav1.TypeMeta inlined gives apiVersion and kind; metav1.ObjectMeta is
//     "type: object" at the root (the server owns its schema) and, nested in
//     a template, an object with name, namespace, labels, annotations and
//     finalizers, so that a pod template's labels are not pruned away.
//   - Built-in API types (k8s.io/api, k8s.io/apimachinery) embedded in T are
//     reflected like any other type, offline; a slice field tagged
//     patchStrategy:"merge" with a patchMergeKey that its items require
//     becomes a list map keyed by it, as in the server's own schema.
//     BuildFromServer takes their schemas from the server's OpenAPI v3
//     documents instead, as controller-gen inlines them: with their enums
//     (a pod's restartPolicy, a container's imagePullPolicy, a port's
//     protocol), descriptions, formats and list types. InstallDefinitions
//     does that for a program that installs on a server anyway.
//
// A Go type that no schema can describe (a chan, a func, a complex number, an
// interface, a map with non-string keys, a recursive type, a struct JSON
// cannot see into, custom MarshalJSON without a Schemer) is an error naming
// its Go field path (a *TypeError, ErrUnsupportedType), never a panic.
//
// # Validation in Go
//
// A type states what holds wherever it is used: Enumerated (EnumValues) for
// a closed set of strings, Validated (ValidationRules) for CEL rules about
// its own values, Schemer for a schema of its own. A version states the rest
// by JSON path with Field: Minimum, Maximum, MinLength, MaxLength, MinItems,
// MaxItems, Pattern, Format, Enum, Default, Description, Required, Optional,
// and Rule (x-kubernetes-validations, also at the root "."). A path that is
// not in the schema (ErrUnknownPath) or a constraint that does not fit it, such
// as a Minimum on a string or a Default of the wrong type or outside the enum
// (ErrInvalidValue), makes Build fail: no option is ever ignored.
//
// # Versions and subresources
//
// Each version is served unless NotServed; exactly one has Storage. Versions
// with Go types of different shapes are converted by a webhook
// (Definition.Conversion; typed/webhook.Converter converts through a hub). The
// status subresource is on when the Go type has a status field (Status
// overrides); Scale turns the scale subresource on, with its paths checked
// against the schema; Column adds a printer column typed from the schema.
//
// # Installing and writing
//
// Install creates each CRD or updates it in place (from its current
// resourceVersion; one being deleted is waited for and created anew) and
// returns once it is established, its names accepted (ErrNamesNotAccepted
// otherwise, with the server's message) and every served version listed by
// discovery and listable. typed/testenv installs its CRDs through it.
// WriteYAML writes CRDs as "kubectl apply -f" reads them; a command of three
// lines prints a project's own (examples/cronjob/cmd/cronjob-crd).
//
// # What differs from controller-gen
//
// Go doc comments are not available at run time, so reflected schemas have no
// descriptions (Description sets one; BuildFromServer brings the server's).
// Reflection cannot see the +enum, +listType and +optional markers of
// k8s.io/api: a built-in type's enums come only from BuildFromServer, and a
// field without omitempty is required even where the server's schema says
// optional (ProjectedVolumeSource.Sources, say). From the server's documents,
// Go zero-value defaults ("", 0, false, {}) are dropped, except on optional
// list-map keys, which the server requires to have one; built-in types' own
// CEL rules are not copied.
package crd
