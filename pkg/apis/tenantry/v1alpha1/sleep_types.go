package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Sleep and wake of a tenant whose control plane Tenantry runs
// (spec.controlPlane). Asleep, it runs no Pod of its own in the host:
// neither its control plane's (its storage's claim stays) nor its
// workloads'. Its objects, and the host copies of all but its Pods, stay.
const (
	// AnnotationSleepRequestedAt asks the tenant to sleep (`tenantry
	// sleep`): an RFC 3339 time. It sleeps while this is later than
	// AnnotationWakeRequestedAt.
	AnnotationSleepRequestedAt = "tenantry.dev/sleep-requested-at"
	// AnnotationWakeRequestedAt asks the tenant to wake (`tenantry
	// wake`): an RFC 3339 time.
	AnnotationWakeRequestedAt = "tenantry.dev/wake-requested-at"

	// ConditionAsleep is True while the tenant sleeps.
	ConditionAsleep = "Asleep"
	// ReasonSleepRequested (Asleep=True): `tenantry sleep` put it to
	// sleep. Also the reason of ControlPlaneReady=False and Ready=False
	// meanwhile.
	ReasonSleepRequested = "SleepRequested"
	// ReasonFallingAsleep (Asleep=False): asked to sleep, and a Pod of
	// its control plane still runs.
	ReasonFallingAsleep = "FallingAsleep"
	// ReasonAwake (Asleep=False): it is not asked to sleep.
	ReasonAwake = "Awake"
)

// Asleep says whether vc is asked to sleep: a control plane Tenantry
// runs, whose latest request (AnnotationSleepRequestedAt,
// AnnotationWakeRequestedAt) is to sleep. A time that does not parse
// counts as none.
func (vc *VirtualCluster) Asleep() bool {
	if vc.Spec.ControlPlane == nil {
		return false
	}
	at := func(key string) time.Time {
		t, err := time.Parse(time.RFC3339Nano, vc.Annotations[key])
		if err != nil {
			return time.Time{}
		}
		return t
	}
	return at(AnnotationSleepRequestedAt).After(at(AnnotationWakeRequestedAt))
}

// SleepSpec says when the tenant sleeps on its own.
type SleepSpec struct {
	// AfterInactivity puts the tenant to sleep once no one but Tenantry
	// has used its API server for this long: no request of a user or a
	// tool other than Tenantry's own syncing and checks, the tenant's
	// controllers (its service accounts, its controller-manager) and its
	// health checks. At least 1m. A request to it asleep wakes it.
	// Setting or removing it restarts the control plane's API server once
	// (it then reports its requests to the manager).
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="afterInactivity must be at least 1m"
	AfterInactivity metav1.Duration `json:"afterInactivity"`
}

// SleepStatus says when people last used the tenant.
type SleepStatus struct {
	// LastActivityTime is when, last, a request that counts as activity
	// (spec.sleep.afterInactivity) reached the tenant's API server, to
	// within a few seconds of writes.
	// +optional
	LastActivityTime *metav1.Time `json:"lastActivityTime,omitempty"`
}

// InactiveSince is when the tenant was last active, for
// spec.sleep.afterInactivity: the latest of its last activity, its last
// wake and since when its control plane is ready; zero if it is not
// ready.
func (vc *VirtualCluster) InactiveSince() time.Time {
	ready := false
	var since time.Time
	for _, c := range vc.Status.Conditions {
		if c.Type == ConditionControlPlaneReady && c.Status == metav1.ConditionTrue {
			ready, since = true, c.LastTransitionTime.Time
		}
	}
	if !ready {
		return time.Time{}
	}
	if s := vc.Status.Sleep; s != nil && s.LastActivityTime != nil && s.LastActivityTime.After(since) {
		since = s.LastActivityTime.Time
	}
	if woke, err := time.Parse(time.RFC3339Nano, vc.Annotations[AnnotationWakeRequestedAt]); err == nil && woke.After(since) {
		since = woke
	}
	return since
}
