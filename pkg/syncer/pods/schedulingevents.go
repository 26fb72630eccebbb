package pods

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The scheduler's verdicts on a tenant Pod are the host scheduler's, on its
// host copy: the tenant hears them as Events on the Pod, as a cluster's
// scheduler tells them (reasons Scheduled and FailedScheduling, action
// Scheduling), written by the syncer that carries them up.
const (
	ReasonScheduled        = "Scheduled"
	ReasonFailedScheduling = "FailedScheduling"

	// schedulingReporter is the reporting controller of those Events.
	schedulingReporter = "tenantry.dev/pods-syncer"
)

// scheduledCondition is pod's PodScheduled condition, or nil.
func scheduledCondition(pod *corev1.Pod) *corev1.PodCondition {
	i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodScheduled })
	if i < 0 {
		return nil
	}
	return &pod.Status.Conditions[i]
}

// newlyUnschedulable is the host scheduler's message when host says that
// it cannot place the Pod, and tenant does not show that message yet: the
// tenant is to be told (once per message, as the scheduler tells it once
// per attempt that changes its mind).
func newlyUnschedulable(host, tenant *corev1.Pod) (message string, ok bool) {
	h := scheduledCondition(host)
	if h == nil || h.Status != corev1.ConditionFalse || h.Reason != corev1.PodReasonUnschedulable {
		return "", false
	}
	if t := scheduledCondition(tenant); t != nil && t.Status == h.Status && t.Reason == h.Reason && t.Message == h.Message {
		return "", false
	}
	return h.Message, true
}

// maxNote is the longest note an Event may carry.
const maxNote = 1024

// tellScheduling writes an Event of the scheduler's verdict on tenant Pod
// pod through c, the tenant's client, named after the Pod as a recorder
// names it. As a recorder's, a write that fails is logged, not retried.
func tellScheduling(ctx context.Context, c client.Client, pod *corev1.Pod, eventType, reason, note string) {
	if len(note) > maxNote {
		note = strings.ToValidUTF8(note[:maxNote-3], "") + "..."
	}
	now := metav1.NewMicroTime(time.Now())
	event := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace,
			Name:      fmt.Sprintf("%s.%x", pod.Name, now.UnixNano()),
		},
		EventTime:           now,
		ReportingController: schedulingReporter,
		ReportingInstance:   schedulingReporter,
		Action:              "Scheduling",
		Reason:              reason,
		Type:                eventType,
		Note:                note,
		Regarding: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
			UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		},
	}
	if err := c.Create(ctx, event); err != nil {
		ctrl.LoggerFrom(ctx).Info("cannot tell the tenant Pod the scheduler's verdict", "reason", reason, "error", err.Error())
	}
}
