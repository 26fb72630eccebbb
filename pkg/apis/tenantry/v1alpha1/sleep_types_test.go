package v1alpha1_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

// The later request wins; a time that does not parse is no request; a
// tenant whose control plane runs elsewhere never sleeps.
func TestAsleep(t *testing.T) {
	const earlier, later = "2026-11-29T08:00:00Z", "2026-11-29T08:00:00.5Z"
	for _, tc := range []struct {
		sleep, wake string
		provisioned bool
		want        bool
	}{
		{"", "", true, false},
		{earlier, "", true, true},
		{later, earlier, true, true},
		{earlier, later, true, false},
		{earlier, earlier, true, false},
		{"yesterday", "", true, false},
		{later, "soon", true, true},
		{earlier, "", false, false},
	} {
		vc := &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			tenantryv1alpha1.AnnotationSleepRequestedAt: tc.sleep, tenantryv1alpha1.AnnotationWakeRequestedAt: tc.wake,
		}}}
		if tc.provisioned {
			vc.Spec.ControlPlane = &tenantryv1alpha1.ControlPlaneSpec{}
		}
		if got := vc.Asleep(); got != tc.want {
			t.Errorf("sleep %q, wake %q, provisioned %v: asleep %v, want %v", tc.sleep, tc.wake, tc.provisioned, got, tc.want)
		}
	}
}

// A tenant is inactive since the latest of its readiness, its last
// activity and its last wake; not at all while its control plane is not
// ready.
func TestInactiveSince(t *testing.T) {
	ready := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		ready    bool
		activity time.Duration // after ready; 0: none
		wake     string
		want     time.Time
	}{
		{"not ready", false, time.Minute, "", time.Time{}},
		{"never used", true, 0, "", ready},
		{"used", true, time.Minute, "", ready.Add(time.Minute)},
		{"woken after", true, time.Minute, ready.Add(2 * time.Minute).Format(time.RFC3339Nano), ready.Add(2 * time.Minute)},
		{"woken before", true, time.Minute, ready.Add(-time.Hour).Format(time.RFC3339Nano), ready.Add(time.Minute)},
		{"activity before ready", true, -time.Hour, "", ready},
	} {
		vc := &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{tenantryv1alpha1.AnnotationWakeRequestedAt: tc.wake}}}
		status := metav1.ConditionFalse
		if tc.ready {
			status = metav1.ConditionTrue
		}
		vc.Status.Conditions = []metav1.Condition{{Type: tenantryv1alpha1.ConditionControlPlaneReady, Status: status, LastTransitionTime: metav1.NewTime(ready)}}
		if tc.activity != 0 {
			vc.Status.Sleep = &tenantryv1alpha1.SleepStatus{LastActivityTime: &metav1.Time{Time: ready.Add(tc.activity)}}
		}
		if got := vc.InactiveSince(); !got.Equal(tc.want) {
			t.Errorf("%s: inactive since %s, want %s", tc.name, got, tc.want)
		}
	}
}
