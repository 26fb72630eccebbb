package v1alpha1

import (
	"time"
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
