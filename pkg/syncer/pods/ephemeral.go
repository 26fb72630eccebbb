package pods

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// ephemeralExtension runs a tenant Pod's ephemeral containers (kubectl
// debug) in its host Pod: each one the tenant adds is added to the host
// Pod through its ephemeralcontainers subresource, under the host's
// policy, as the Pod's own containers went down (the image pulled as the
// policy says, the tenant API server named in its variables). Its status
// comes up with the Pod's; one the host refuses ends at once, saying why.
type ephemeralExtension struct {
	policy Policy
	// hostIP is what the downward API's status.hostIP gives; nil: the
	// host node's address (see shownHostIP).
	hostIP func() string
}

// Setup runs the ephemeral container controller of the tenant's Pods.
func (e ephemeralExtension) Setup(scope *syncer.TenantScope) error {
	mgr := scope.Manager()
	r := &ephemeralAdder{scope: scope, policy: e.policy, hostIP: e.hostIP, tenant: mgr.GetClient(), recorder: mgr.GetEventRecorder("tenantry-syncer")}
	hostPod := func(o client.Object) (types.NamespacedName, bool) { return scope.TenantKey(o) }
	return scope.RunController("pod-ephemeral-containers", 1, r,
		scope.TenantObjects(&corev1.Pod{}, predicate.Funcs{
			// A Pod is made without ephemeral containers.
			CreateFunc: func(event.CreateEvent) bool { return false },
			UpdateFunc: func(e event.UpdateEvent) bool {
				return len(e.ObjectOld.(*corev1.Pod).Spec.EphemeralContainers) != len(e.ObjectNew.(*corev1.Pod).Spec.EphemeralContainers)
			},
		}),
		// A host Pod made after the tenant added to its Pod.
		scope.HostEvents(&corev1.Pod{}, hostPod))
}

// ephemeralAdder is the ephemeral container controller of one tenant's
// Pods.
type ephemeralAdder struct {
	scope    *syncer.TenantScope
	policy   Policy
	hostIP   func() string
	tenant   client.Client
	recorder events.EventRecorder
}

func (r *ephemeralAdder) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	tenantPod, hostPod, ok, err := livePair(ctx, r.scope, r.tenant, req.NamespacedName)
	if !ok || len(tenantPod.Spec.EphemeralContainers) == 0 {
		return reconcile.Result{}, err
	}
	tenant, host := *tenantPod, *hostPod
	// One at a time: the host's refusal of one is not another's.
	refused := map[string]string{}
	var result reconcile.Result
	var failed error
	for _, e := range tenant.Spec.EphemeralContainers {
		if runsEphemeral(&host, &tenant, e.Name) || refusedEphemeral(&tenant, e.Name) {
			continue // added before, or refused for good (an ephemeral container never changes)
		}
		if hostHasContainer(&host, e.Name) {
			// Not the tenant's: one the host added (a host admin's kubectl
			// debug), or a container of the host's.
			refused[e.Name] = "its name is taken in the host Pod: name it otherwise"
			continue
		}
		down, stripped, err := ephemeralDown(&tenant, e, r.scope.Cluster(), r.policy, r.hostIP)
		if err != nil {
			refused[e.Name] = err.Error()
			continue
		}
		added := host.DeepCopy()
		added.Spec.EphemeralContainers = append(added.Spec.EphemeralContainers, down)
		err = r.scope.HostClient().SubResource("ephemeralcontainers").Update(ctx, added)
		if err == nil {
			host = *added
			r.scope.CountWrite("pods/ephemeralcontainers", "down", "update")
			ctrl.LoggerFrom(ctx).V(1).Info("added an ephemeral container to the host Pod", "container", e.Name)
			if len(stripped) > 0 {
				r.recorder.Eventf(&tenant, nil, corev1.EventTypeNormal, syncer.ReasonHostStripped, "Sync",
					"the host copy of ephemeral container %s leaves out what the host does not allow: %s", e.Name, strings.Join(stripped, "; "))
			}
			continue
		}
		if message, ok := syncer.HostRefusal(err); ok {
			// The host's word on it (its Pod Security level): it never
			// runs.
			refused[e.Name] = "the host refused it: " + message
			continue
		}
		if why, after := r.scope.Transient(err); why != "" {
			ctrl.LoggerFrom(ctx).V(1).Info("retrying the Pod's ephemeral containers: "+why, "error", err.Error())
			result.RequeueAfter = after
		} else {
			failed = fmt.Errorf("adding ephemeral container %s to the host copy of Pod %s: %w", e.Name, req.NamespacedName, err)
		}
		break
	}
	if len(refused) == 0 {
		return result, failed
	}
	for _, name := range slices.Sorted(maps.Keys(refused)) {
		r.recorder.Eventf(&tenant, nil, corev1.EventTypeWarning, syncer.ReasonHostRejected, "Sync", "ephemeral container %s does not run: %s", name, refused[name])
	}
	return result, errors.Join(failed, r.endRefused(ctx, req.NamespacedName, refused))
}

// endRefused ends the refused ephemeral containers of the tenant Pod in
// its status, with the reason why, so that kubectl debug does not wait for
// them.
func (r *ephemeralAdder) endRefused(ctx context.Context, key types.NamespacedName, refused map[string]string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var pod corev1.Pod
		if err := r.tenant.Get(ctx, key, &pod); err != nil {
			return err
		}
		for _, e := range pod.Spec.EphemeralContainers {
			why, ok := refused[e.Name]
			if !ok {
				continue
			}
			status := corev1.ContainerStatus{
				Name: e.Name, Image: e.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 128, Reason: syncer.ReasonHostRejected, Message: why,
				}},
			}
			if i := slices.IndexFunc(pod.Status.EphemeralContainerStatuses, func(s corev1.ContainerStatus) bool { return s.Name == e.Name }); i >= 0 {
				pod.Status.EphemeralContainerStatuses[i] = status
			} else {
				pod.Status.EphemeralContainerStatuses = append(pod.Status.EphemeralContainerStatuses, status)
			}
		}
		return r.tenant.Status().Update(ctx, &pod)
	})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("ending refused ephemeral containers of Pod %s: %w", key, err)
	}
	return nil
}

// refusedEphemeral says whether the tenant Pod's ephemeral container name
// was refused: it ended without running in the host.
func refusedEphemeral(tenant *corev1.Pod, name string) bool {
	return slices.ContainsFunc(tenant.Status.EphemeralContainerStatuses, func(s corev1.ContainerStatus) bool {
		return s.Name == name && s.State.Terminated != nil && s.State.Terminated.Reason == syncer.ReasonHostRejected
	})
}

// ephemeralDown is the host copy of tenant Pod's ephemeral container e,
// under policy for VirtualCluster cluster, and what the policy left out of
// it; a container the policy refuses is an error (syncer.Refuse). It is
// made as the Pod's own containers are (see specDown), its status.hostIP
// from hostIP (nil: the host's).
func ephemeralDown(tenant *corev1.Pod, e corev1.EphemeralContainer, cluster string, policy Policy, hostIP func() string) (corev1.EphemeralContainer, []string, error) {
	// The tenant's API server checks this; the host Pod has containers of
	// its own, whose processes (and their credentials) a target shows.
	if t := e.TargetContainerName; t != "" && !slices.ContainsFunc(tenant.Spec.Containers, func(c corev1.Container) bool { return c.Name == t }) {
		return corev1.EphemeralContainer{}, nil, syncer.Refuse("its target container %s is not one of the Pod's", t)
	}
	for _, m := range e.VolumeMounts {
		if !slices.ContainsFunc(tenant.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
			return corev1.EphemeralContainer{}, nil, syncer.Refuse("it mounts volume %s, which is not one of the Pod's", m.Name)
		}
	}
	// The Pod's volumes went down with the Pod; only the container is
	// made here, as one of the Pod's own.
	spec := corev1.PodSpec{Containers: []corev1.Container{corev1.Container(*e.EphemeralContainerCommon.DeepCopy())}}
	stripped, err := policy.apply(&spec, cluster)
	if err != nil {
		return corev1.EphemeralContainer{}, nil, err
	}
	if err := APIAccess(tenant.Name, &spec); err != nil {
		return corev1.EphemeralContainer{}, nil, err
	}
	if hostIP != nil {
		showHostIP(&spec, hostIP())
	}
	return corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon(spec.Containers[0]),
		TargetContainerName:      e.TargetContainerName,
	}, stripped, nil
}

// runsEphemeral says whether host runs tenant Pod's ephemeral container of
// that name as the tenant's: one of that name, image, command, arguments
// and target that Tenantry added, which alone names the tenant API server
// from the Pod's API access Secret. An ephemeral container the host added
// (a host admin's kubectl debug) is the host's, and never the tenant's,
// whatever the tenant copies of it under its name.
func runsEphemeral(host, tenant *corev1.Pod, name string) bool {
	i := slices.IndexFunc(tenant.Spec.EphemeralContainers, func(e corev1.EphemeralContainer) bool { return e.Name == name })
	j := slices.IndexFunc(host.Spec.EphemeralContainers, func(e corev1.EphemeralContainer) bool { return e.Name == name })
	if i < 0 || j < 0 {
		return false
	}
	t, h := tenant.Spec.EphemeralContainers[i], host.Spec.EphemeralContainers[j]
	return t.Image == h.Image && t.TargetContainerName == h.TargetContainerName &&
		equality.Semantic.DeepEqual(t.Command, h.Command) && equality.Semantic.DeepEqual(t.Args, h.Args) &&
		namesTenantServer(h.Env, apiAccessSecretName(tenant.Name))
}

// namesTenantServer says whether env reads the API access Secret secret,
// as APIAccess makes every container Tenantry adds read it (the tenant API
// server's variables), and as no tenant may ask for itself
// (refuseCredentialSources).
func namesTenantServer(env []corev1.EnvVar, secret string) bool {
	return slices.ContainsFunc(env, func(e corev1.EnvVar) bool {
		return e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == secret
	})
}

// hostHasContainer says whether host has a container of any kind named
// name.
func hostHasContainer(host *corev1.Pod, name string) bool {
	named := func(c corev1.Container) bool { return c.Name == name }
	return slices.ContainsFunc(host.Spec.InitContainers, named) || slices.ContainsFunc(host.Spec.Containers, named) ||
		slices.ContainsFunc(host.Spec.EphemeralContainers, func(e corev1.EphemeralContainer) bool { return e.Name == name })
}

// ephemeralStatuses are the statuses of the tenant Pod's ephemeral
// containers: the host's for those it runs as the tenant's, the tenant
// Pod's own for those refused (see endRefused); none for one not added
// yet.
func ephemeralStatuses(host, tenant *corev1.Pod) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, e := range tenant.Spec.EphemeralContainers {
		statuses := tenant.Status.EphemeralContainerStatuses
		if runsEphemeral(host, tenant, e.Name) {
			statuses = host.Status.EphemeralContainerStatuses
		}
		if i := slices.IndexFunc(statuses, func(s corev1.ContainerStatus) bool { return s.Name == e.Name }); i >= 0 {
			out = append(out, statuses[i])
		}
	}
	return out
}
