package v1alpha1_test

import (
	"testing"

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
