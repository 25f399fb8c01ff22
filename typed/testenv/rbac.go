//go:build unix

package testenv

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	rbacclient "k8s.io/client-go/kubernetes/typed/rbac/v1"
)

// ManagedByLabel is set, with the value "typedinformer-testenv", on the roles
// and bindings [Environment.Grant] creates.
const ManagedByLabel = "app.kubernetes.io/managed-by"

// User returns the RBAC subject for the user name, the user that
// [Environment.UserConfig](name) authenticates as.
func User(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

// Group returns the RBAC subject for the group name, which includes every user
// that [Environment.UserConfig] was given that group for.
func Group(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
}

// Grant allows subject what rules allow: in namespace, through a new Role and
// RoleBinding, or, if namespace is "", in every namespace and for
// cluster-scoped resources, through a new ClusterRole and ClusterRoleBinding.
// Their names start with "testenv-grant-" and they carry [ManagedByLabel].
//
// It returns once the API server's authorizer allows every verb of every rule
// (checked with SubjectAccessReviews, as the admin), so the subject's next
// request sees the permissions; RBAC otherwise takes effect a moment after the
// binding is created. ctx bounds that wait, which is also capped at two minutes.
// Without rules, or with a subject of an unknown kind, it is an error and
// nothing is created; the server's validation errors are returned as they are.
func (env *Environment) Grant(ctx context.Context, namespace string, subject rbacv1.Subject, rules ...rbacv1.PolicyRule) error {
	if len(rules) == 0 {
		return fmt.Errorf("testenv: granting %s nothing: no rules", describeSubject(subject))
	}
	sar, err := accessReviewSpec(subject)
	if err != nil {
		return err
	}
	cfg, closeConns := env.ownConnections()
	defer closeConns()
	rbac, err := rbacclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	authz, err := authorizationclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}

	meta := metav1.ObjectMeta{Name: "testenv-grant-" + randomHex(4), Namespace: namespace, Labels: map[string]string{ManagedByLabel: "typedinformer-testenv"}}
	subjects := []rbacv1.Subject{subject}
	if namespace == "" {
		_, err = rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: meta, Rules: rules}, metav1.CreateOptions{})
		if err == nil {
			_, err = rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: meta.Name}}, metav1.CreateOptions{})
		}
	} else {
		_, err = rbac.Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: meta, Rules: rules}, metav1.CreateOptions{})
		if err == nil {
			_, err = rbac.RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: meta.Name}}, metav1.CreateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("testenv: granting %s %s: %w", describeSubject(subject), describeScope(namespace), err)
	}

	reviews := accessReviews(sar, namespace, rules)
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	err = poll(ctx, func(ctx context.Context) (string, error) {
		for _, spec := range reviews {
			got, err := authz.SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			if err != nil {
				return "", err
			}
			if !got.Status.Allowed {
				return fmt.Sprintf("%s is still denied %s (%s)", describeSubject(subject), describeAccess(spec), got.Status.Reason), nil
			}
		}
		return "", nil
	})
	if err != nil {
		return fmt.Errorf("testenv: granting %s %s through %s: %w", describeSubject(subject), describeScope(namespace), meta.Name, err)
	}
	env.log.V(1).Info("Granted permissions", "subject", describeSubject(subject), "namespace", namespace, "role", meta.Name)
	return nil
}

// accessReviewSpec returns the user and groups of subject for SubjectAccessReviews.
func accessReviewSpec(subject rbacv1.Subject) (authorizationv1.SubjectAccessReviewSpec, error) {
	switch subject.Kind {
	case rbacv1.UserKind:
		return authorizationv1.SubjectAccessReviewSpec{User: subject.Name}, nil
	case rbacv1.GroupKind:
		return authorizationv1.SubjectAccessReviewSpec{Groups: []string{subject.Name}}, nil
	case rbacv1.ServiceAccountKind:
		return authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + subject.Namespace + ":" + subject.Name,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + subject.Namespace},
		}, nil
	}
	return authorizationv1.SubjectAccessReviewSpec{}, fmt.Errorf("testenv: cannot grant anything to %s: the kind must be %s, %s or %s",
		describeSubject(subject), rbacv1.UserKind, rbacv1.GroupKind, rbacv1.ServiceAccountKind)
}

// accessReviews returns one SubjectAccessReview spec per verb, API group,
// resource (or non-resource URL) and resource name of rules.
func accessReviews(base authorizationv1.SubjectAccessReviewSpec, namespace string, rules []rbacv1.PolicyRule) []authorizationv1.SubjectAccessReviewSpec {
	var specs []authorizationv1.SubjectAccessReviewSpec
	for _, rule := range rules {
		for _, verb := range rule.Verbs {
			for _, url := range rule.NonResourceURLs {
				spec := base
				spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: url, Verb: verb}
				specs = append(specs, spec)
			}
			names := rule.ResourceNames
			if len(names) == 0 {
				names = []string{""}
			}
			for _, group := range rule.APIGroups {
				for _, resource := range rule.Resources {
					resource, subresource, _ := strings.Cut(resource, "/")
					for _, name := range names {
						spec := base
						spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb,
							Group: group, Resource: resource, Subresource: subresource, Name: name}
						specs = append(specs, spec)
					}
				}
			}
		}
	}
	return specs
}

func describeSubject(s rbacv1.Subject) string {
	if s.Namespace != "" {
		return fmt.Sprintf("%s %s/%s", s.Kind, s.Namespace, s.Name)
	}
	return fmt.Sprintf("%s %q", s.Kind, s.Name)
}

func describeScope(namespace string) string {
	if namespace == "" {
		return "cluster-wide permissions"
	}
	return "permissions in namespace " + namespace
}

func describeAccess(spec authorizationv1.SubjectAccessReviewSpec) string {
	if a := spec.NonResourceAttributes; a != nil {
		return a.Verb + " " + a.Path
	}
	a := spec.ResourceAttributes
	what := a.Resource
	if a.Group != "" {
		what += "." + a.Group
	}
	if a.Subresource != "" {
		what += "/" + a.Subresource
	}
	if a.Name != "" {
		what += " " + a.Name
	}
	if a.Namespace != "" {
		what += " in " + a.Namespace
	}
	return a.Verb + " " + what
}
