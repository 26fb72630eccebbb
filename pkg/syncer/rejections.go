package syncer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// ReasonHostRejected is the reason of the Warning Event a tenant object gets
// when the host refuses its copy (Pod Security, a quota, an admission
// webhook or policy, validation), and of the condition a syncer may set on
// it (a Pod's PodScheduled=False).
const ReasonHostRejected = "HostRejected"

// ReasonHostStripped is the reason of the Normal Event a tenant object gets
// when its host copy leaves out fields the host does not allow (see
// Syncer.Stripped).
const ReasonHostStripped = "HostStripped"

// Retries of a refused copy back off, doubling, from rejectionBaseDelay to
// rejectionMaxDelay. Some refusals pass in a moment (a Pod created before
// the host's controller-manager gave its new namespace the default
// ServiceAccount), others wait for a person (a quota raised, a policy
// relaxed).
const (
	rejectionBaseDelay = 200 * time.Millisecond
	rejectionMaxDelay  = 5 * time.Minute
)

// refusal is a copy that is not made: the host refused to write it, or the
// syncer refused to ask (Refuse).
type refusal struct {
	// reason is the API status reason of the host's refusal, or
	// reasonRefused.
	reason  string
	message string
	// detail, if set, is what the host said, for the log only: the
	// message tells the tenant less.
	detail string
}

// reasonRefused is the metric reason of a copy the syncer refused.
const reasonRefused = "Refused"

func (r *refusal) Error() string { return r.message }

// Refuse is the error with which a syncer's Down refuses to copy a tenant
// object to the host, for a reason the tenant can mend (a reserved name, a
// field the host cannot honour): the tenant object gets the same Warning
// Event as for a copy the host refuses (reason ReasonHostRejected, the
// message), and the copy is retried with the same backoff, and at once when
// the tenant object changes.
func Refuse(format string, args ...any) error {
	return &refusal{reason: reasonRefused, message: fmt.Sprintf(format, args...)}
}

// hostRejection is the refusal in err, or nil if err is not one: the
// syncer's own (Refuse), or the host's answer about the object itself (an
// eviction that a PodDisruptionBudget does not allow yet among them). Other
// failures (the host unreachable or throttling, a conflict, a timeout) are
// not the tenant's to hear of.
func hostRejection(err error) *refusal {
	if errors.As(err, new(tenantError)) {
		return nil // the tenant's answer to a write of ours, never the host's
	}
	var own *refusal
	if errors.As(err, &own) {
		return own
	}
	var status *apierrors.StatusError
	if !errors.As(err, &status) {
		return nil
	}
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsRequestEntityTooLargeError(err) || disruptionBudget(status) {
		out := &refusal{reason: string(status.ErrStatus.Reason), message: refusalMessage(status)}
		if ownRights(status) {
			// The host's authorizer refused Tenantry itself: its message
			// names the manager's host identity, which is not the
			// tenant's to know, nor to mend.
			out.message, out.detail = "the host did not let Tenantry write this object's copy: Tenantry's own rights in the host lack it (its log says which); ask the host's administrator", out.message
		}
		return out
	}
	return nil
}

// HostRefusal says whether err is the host's refusal of an object itself,
// which the tenant should hear of (invalid, refused by admission: a quota,
// Pod Security, a webhook), with the host's message; not a refusal of
// Tenantry's own rights, nor a failure a retry may mend.
func HostRefusal(err error) (message string, ok bool) {
	var status *apierrors.StatusError
	if !errors.As(err, &status) || ownRights(status) {
		return "", false
	}
	if r := hostRejection(err); r != nil {
		return r.message, true
	}
	return "", false
}

// ownRights says whether status is the host authorizer's refusal of
// Tenantry's own identity ("User ... cannot create resource ..."), rather
// than admission's refusal of the object (a quota, Pod Security, a
// webhook), which the tenant is told as the host says it.
func ownRights(status *apierrors.StatusError) bool {
	m := status.ErrStatus.Message
	return apierrors.IsForbidden(status) && strings.Contains(m, `User "`) && strings.Contains(m, " cannot ") && strings.Contains(m, ` resource "`)
}

// tenantError marks a failed write to the tenant (bringing status up,
// reporting a loss), whose refusal is not the host's and is not reported
// to the tenant as one.
type tenantError struct{ error }

func (e tenantError) Unwrap() error { return e.error }

// disruptionBudget says whether status is an eviction's refusal by a
// PodDisruptionBudget.
func disruptionBudget(status *apierrors.StatusError) bool {
	if !apierrors.IsTooManyRequests(status) || status.ErrStatus.Details == nil {
		return false
	}
	for _, cause := range status.ErrStatus.Details.Causes {
		if cause.Type == policyv1.DisruptionBudgetCause {
			return true
		}
	}
	return false
}

// refusalMessage is what the host said: its message, and its causes' when
// they add to it.
func refusalMessage(status *apierrors.StatusError) string {
	message := status.ErrStatus.Message
	if status.ErrStatus.Details != nil {
		for _, cause := range status.ErrStatus.Details.Causes {
			if cause.Message != "" && !strings.Contains(message, cause.Message) {
				message += " " + cause.Message
			}
		}
	}
	return message
}

// rejections remembers, per tenant object, the host's last refusal and when
// to try again, so that a refusal is told (as an Event and a log line) once
// per change of the host's message, and retried with a growing delay, not
// at the pace of the events and patrols that bring the object back.
type rejections struct {
	backoff workqueue.TypedRateLimiter[types.NamespacedName]

	mu   sync.Mutex
	last map[types.NamespacedName]rejection
}

// rejection is the host's last refusal of one tenant object's copy.
type rejection struct {
	message string
	version string // the tenant object's resourceVersion that was refused
	retryAt time.Time
}

func newRejections() *rejections {
	return &rejections{
		backoff: workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](rejectionBaseDelay, rejectionMaxDelay),
		last:    map[types.NamespacedName]rejection{},
	}
}

// record notes a refusal of version of key's copy with message; it reports
// whether the message is new (and so to be told) and when to retry.
func (r *rejections) record(key types.NamespacedName, version, message string) (news bool, retry time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	news = r.last[key].message != message
	retry = r.backoff.When(key)
	r.last[key] = rejection{message: message, version: version, retryAt: time.Now().Add(retry)}
	return news, retry
}

// pending is how long a sync of version of key must still wait: the host
// refused that very version, and its retry is not due. A changed tenant
// object is tried at once.
func (r *rejections) pending(key types.NamespacedName, version string) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.last[key]
	if !ok || last.version != version {
		return 0, false
	}
	wait := time.Until(last.retryAt)
	return wait, wait > 0
}

// forget clears key once its copy was written, or its tenant object is
// gone. It runs after every successful sync, so a key never refused costs a
// map lookup and nothing more.
func (r *rejections) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, refused := r.last[key]; !refused {
		return // only record counts failures in the backoff
	}
	delete(r.last, key)
	r.backoff.Forget(key)
}

// hostRejected reports the host's refusal of tenant's copy: a Warning Event
// on the tenant object and a log line when the host says something new,
// the syncer's own report (Lifecycle.HostRejected), and a retry after a
// growing delay.
func (r *reconciler) hostRejected(ctx context.Context, key types.NamespacedName, tenant client.Object, refusal *refusal) (reconcile.Result, error) {
	message := refusal.message
	news, retry := r.rejections.record(key, tenant.GetResourceVersion(), message)
	hostRejections.WithLabelValues(r.translator.Cluster, r.syncer.Name, refusal.reason).Inc()
	if news {
		r.activity.refused()
		note := "the host refused this object's copy: "
		if refusal.reason == reasonRefused {
			note = "this object is not copied to the host: "
		}
		log := ctrl.LoggerFrom(ctx)
		if refusal.detail != "" {
			log = log.WithValues("host", refusal.detail)
		}
		log.Info("the copy was refused; retrying with backoff", "reason", refusal.reason, "message", message, "retryIn", retry.String())
		r.recorder.Eventf(tenant, nil, corev1.EventTypeWarning, ReasonHostRejected, "Sync", "%s%s", note, message)
	}
	if r.syncer.Lifecycle != nil {
		if err := r.syncer.Lifecycle.HostRejected(ctx, r.tenant, tenant.DeepCopyObject().(client.Object), message); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: retry}, nil
}
