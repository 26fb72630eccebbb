package syncer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestHostRejection(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"Pod Security", apierrors.NewForbidden(pods, "web", errors.New(`violates PodSecurity "baseline:latest"`)), true},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "web", field.ErrorList{field.Required(field.NewPath("spec"), "")}), true},
		{"webhook's bad request", apierrors.NewBadRequest("denied by policy"), true},
		{"too large", apierrors.NewRequestEntityTooLargeError("limit is 3145728"), true},
		{"wrapped", fmt.Errorf("creating host pods x: %w", apierrors.NewForbidden(pods, "web", errors.New("quota"))), true},
		{"eviction a budget refuses", budgetRefusal(), true},
		{"the syncer's own", fmt.Errorf("translating pods web down: %w", Refuse("reserved name %q", "x")), true},
		{"the tenant's refusal of a status update", tenantError{fmt.Errorf("syncing pods web up: %w",
			apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "web", field.ErrorList{field.Invalid(field.NewPath("status", "qosClass"), "Burstable", "field is immutable")}))}, false},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), false},
		{"conflict", apierrors.NewConflict(pods, "web", errors.New("newer")), false},
		{"host unavailable", apierrors.NewServiceUnavailable("later"), false},
		{"timeout", apierrors.NewTimeoutError("slow", 1), false},
		{"not an API error", context.DeadlineExceeded, false},
	} {
		if got := hostRejection(tc.err) != nil; got != tc.want {
			t.Errorf("%s: hostRejection = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// budgetRefusal is the host's answer to an eviction that a
// PodDisruptionBudget does not allow.
func budgetRefusal() *apierrors.StatusError {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget web needs 2 healthy pods and has 2 currently",
	})
	return err
}

// The host authorizer's refusal of Tenantry's own identity reaches the
// tenant without naming it; admission's refusal of the object reaches it
// as the host said it.
func TestRefusalOfTenantrysOwnRightsIsNotTold(t *testing.T) {
	rbac := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "web",
		errors.New(`User "system:serviceaccount:tenantry-system:tenantry" cannot create resource "pods" in API group "" in the namespace "vc-x-default"`))
	r := hostRejection(rbac)
	if r == nil || strings.Contains(r.message, "system:serviceaccount") || !strings.Contains(r.message, "Tenantry's own rights") ||
		!strings.Contains(r.detail, "tenantry-system:tenantry") {
		t.Errorf("refusal %+v: want a message without the host identity, the host's words kept for the log", r)
	}
	quota := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "web", errors.New("exceeded quota: tenantry-quota, requested: pods=1"))
	if r := hostRejection(quota); r == nil || !strings.Contains(r.message, "exceeded quota") || r.detail != "" {
		t.Errorf("quota refusal %+v: want the host's message as it is", r)
	}
}

func TestRefusalMessageTellsTheCauses(t *testing.T) {
	want := "Cannot evict pod as it would violate the pod's disruption budget. The disruption budget web needs 2 healthy pods and has 2 currently"
	if got := refusalMessage(budgetRefusal()); got != want {
		t.Errorf("refusalMessage = %q, want %q", got, want)
	}
}

// A refusal is news once per message; the same object version waits for
// its retry, a changed one does not; success forgets it all.
func TestRejectionsBackOff(t *testing.T) {
	r := newRejections()
	key := types.NamespacedName{Namespace: "default", Name: "web"}
	news, first := r.record(key, "1", "quota exceeded")
	if !news || first != rejectionBaseDelay {
		t.Fatalf("first refusal: news %v, retry %s; want news, %s", news, first, rejectionBaseDelay)
	}
	news, second := r.record(key, "1", "quota exceeded")
	if news || second != 2*first {
		t.Fatalf("same refusal again: news %v, retry %s; want no news, %s", news, second, 2*first)
	}
	if news, _ := r.record(key, "1", "denied by policy"); !news {
		t.Fatal("a new message is not news")
	}
	if _, waiting := r.pending(key, "1"); !waiting {
		t.Fatal("the refused version does not wait for its retry")
	}
	if _, waiting := r.pending(key, "2"); waiting {
		t.Fatal("a changed object waits for the old one's retry")
	}
	r.forget(key)
	if _, waiting := r.pending(key, "1"); waiting {
		t.Fatal("a forgotten key still waits")
	}
	if news, retry := r.record(key, "1", "denied by policy"); !news || retry != rejectionBaseDelay {
		t.Fatalf("after forget: news %v, retry %s; want news, %s", news, retry, rejectionBaseDelay)
	}
}
