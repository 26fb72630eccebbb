package controlplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/controlplane/datastore"
	"github.com/tenantry/tenantry/pkg/controlplane/pki"
	"github.com/tenantry/tenantry/pkg/syncer"
)

// errNamespaceTerminating holds a deleted VirtualCluster until its control
// plane's namespace is gone; retried with backoff.
var errNamespaceTerminating = errors.New("the control plane's namespace is being deleted")

// fieldOwner is the field manager of what the controller applies.
const fieldOwner = client.FieldOwner("tenantry-control-plane")

// Reconciler runs the control planes of VirtualClusters with
// spec.controlPlane.
type Reconciler struct {
	opts   Options
	client client.Client
	// apiReader reads what no cache holds: the host's ServiceCIDRs, a
	// kubeconfig Secret before it is written.
	apiReader client.Reader
	// workloads caches the control planes' own objects (labelled
	// controlplane.LabelControlPlane) and nothing else of the host.
	workloads cache.Cache
	recorder  events.EventRecorder
	// probe asks a control plane's API server whether it is ready.
	probe func(ctx context.Context, cluster string, kubeconfig []byte) error
	// host is the host's config, for what goes through its API server
	// to a control plane's Pods (a port forwarded to its etcd).
	host *rest.Config
	// activityURL is where the API servers of control planes with
	// spec.sleep report their requests; empty: nowhere.
	activityURL string
	// applied is what was last applied of each object.
	applied appliedObjects
}

func newReconciler(mgr manager.Manager, opts Options) (*Reconciler, error) {
	if opts.Resources == nil {
		opts.Resources = ptrTo(controlplane.DefaultResources())
	}
	if !slices.Contains(opts.Versions, opts.Version) {
		opts.Versions = append(slices.Clone(opts.Versions), opts.Version)
	}
	if opts.EtcdImage == "" {
		return nil, errors.New("control planes: no etcd image")
	}
	own, err := labels.NewRequirement(controlplane.LabelControlPlane, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	workloads, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultLabelSelector: labels.NewSelector().Add(*own),
	})
	if err != nil {
		return nil, fmt.Errorf("control planes: a cache of their workloads: %w", err)
	}
	if err := mgr.Add(workloads); err != nil {
		return nil, err
	}
	return &Reconciler{
		opts: opts, client: mgr.GetClient(), apiReader: mgr.GetAPIReader(), workloads: workloads, host: mgr.GetConfig(),
		recorder: mgr.GetEventRecorder("tenantry-" + ControllerName), probe: probeReady,
	}, nil
}

// outcome is what a reconcile found, for the ControlPlaneReady condition.
type outcome struct {
	ready   bool
	reason  string
	message string
	// warn records a Warning Event with the condition: bad input.
	warn bool
	// asleep: asked to sleep, and no Pod of the control plane runs.
	asleep bool
	// changing: ready, and changing still (replicas of several replaced
	// one after another, etcd's members): looked at again soon, and its
	// version not yet taken for the one it runs.
	changing bool
	// retry, said in the message, is tried again with backoff, whatever
	// the condition: a change to the etcd's members that failed while
	// the control plane serves.
	retry error
}

// Reconcile makes and keeps a VirtualCluster's control plane.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		// Its finalizers are written under lock, beside the VirtualCluster
		// controller's: read again.
		ctrl.LoggerFrom(ctx).V(1).Info("retrying: the VirtualCluster changed meanwhile", "cluster", req.Name, "error", err.Error())
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return res, err
}

func (r *Reconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var vc tenantryv1alpha1.VirtualCluster
	if err := r.client.Get(ctx, req.NamespacedName, &vc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if vc.Spec.ControlPlane == nil {
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("cluster", vc.Name))
	if !vc.DeletionTimestamp.IsZero() {
		err := r.remove(ctx, &vc)
		if errors.Is(err, errNamespaceTerminating) {
			return ctrl.Result{RequeueAfter: provisioningRequeue}, nil
		}
		return ctrl.Result{}, err
	}
	if !controllerutil.ContainsFinalizer(&vc, Finalizer) {
		// Locked: the VirtualCluster controller adds its own finalizer
		// beside, and a merge patch replaces the whole list.
		patch := client.MergeFromWithOptions(vc.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&vc, Finalizer)
		if err := r.client.Patch(ctx, &vc, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the control plane finalizer to %s: %w", vc.Name, err)
		}
	}
	out, status, requeue, err := r.provision(ctx, &vc)
	if err != nil {
		// Said in the condition too, and retried with backoff.
		failed := outcome{reason: tenantryv1alpha1.ReasonControlPlaneFailed, message: err.Error()}
		return ctrl.Result{}, errors.Join(err, r.report(ctx, &vc, failed, status))
	}
	if err := r.report(ctx, &vc, out, status); err != nil {
		return ctrl.Result{}, err
	}
	if out.retry != nil {
		return ctrl.Result{}, out.retry
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// Requeue periods: while a control plane comes up, and once it runs (its
// certificates' renewal comes sooner if due).
const (
	provisioningRequeue = 3 * time.Second
	runningRequeue      = time.Hour
	// changingRequeue: a control plane that serves while it changes
	// (replicas replaced one at a time, an etcd member that joins).
	changingRequeue = 2 * time.Second
)

// provision applies the control plane of vc and says how it stands.
func (r *Reconciler) provision(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) (outcome, tenantryv1alpha1.ControlPlaneStatus, time.Duration, error) {
	status := tenantryv1alpha1.ControlPlaneStatus{}
	if vc.Status.ControlPlane != nil {
		status = *vc.Status.ControlPlane.DeepCopy()
	}
	spec := controlplane.FromVirtualCluster(vc, r.opts.Version, *r.opts.Resources)
	status.Namespace = controlplane.Namespace(vc.Name)
	ran := status.Version
	if from, ok := restoringFrom(vc); ok {
		// The snapshot's data were last run by its version.
		spec.Restoring, ran = true, from
	} else {
		spec.Asleep = vc.Asleep()
	}
	if out, ok := r.checkVersion(spec.Version, ran); !ok {
		return out, status, 0, nil
	}
	if r.opts.StoragePolicy != nil && spec.Storage != tenantryv1alpha1.StorageDataStore {
		claim := corev1.PersistentVolumeClaimSpec{StorageClassName: spec.StorageClassName}
		if err := r.opts.StoragePolicy(vc).Check("spec.controlPlane.storage", &claim); err != nil {
			return outcome{reason: tenantryv1alpha1.ReasonStorageRefused, message: err.Error(), warn: true}, status, 0, nil
		}
	}
	ref := vc.Spec.KubeconfigSecretRef
	var kubeconfigSecret corev1.Secret
	switch err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &kubeconfigSecret); {
	case apierrors.IsNotFound(err):
		kubeconfigSecret = corev1.Secret{}
	case err != nil:
		return outcome{}, status, 0, fmt.Errorf("reading kubeconfig Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	case kubeconfigSecret.Labels[controlplane.LabelControlPlane] != vc.Name:
		return outcome{reason: tenantryv1alpha1.ReasonSecretTaken, warn: true, message: fmt.Sprintf(
			"Secret %s/%s, which spec.kubeconfigSecretRef names, exists and is not the kubeconfig Tenantry wrote for this VirtualCluster: name another, or delete it",
			ref.Namespace, ref.Name)}, status, 0, nil
	}
	cidr, err := r.serviceCIDR(ctx)
	if err != nil {
		return outcome{}, status, 0, err
	}
	var ns corev1.Namespace
	switch err := r.apiReader.Get(ctx, client.ObjectKey{Name: status.Namespace}, &ns); {
	case apierrors.IsNotFound(err):
		r.applied.forget(status.Namespace) // deleted: everything in it is made anew
	case err != nil:
		return outcome{}, status, 0, fmt.Errorf("reading namespace %s: %w", status.Namespace, err)
	case err == nil && ns.Labels[controlplane.LabelControlPlane] != vc.Name:
		return outcome{reason: tenantryv1alpha1.ReasonControlPlaneFailed, warn: true, message: fmt.Sprintf(
			"namespace %s, where the control plane runs, exists and is not this VirtualCluster's: delete it, or rename the VirtualCluster", status.Namespace)}, status, 0, nil
	case err == nil && !ns.DeletionTimestamp.IsZero():
		return outcome{reason: tenantryv1alpha1.ReasonControlPlaneProvisioning, message: fmt.Sprintf(
			"namespace %s, of an earlier control plane of this name, is being deleted", status.Namespace)}, status, provisioningRequeue, nil
	}
	if spec.Storage == tenantryv1alpha1.StorageDataStore {
		access, err := r.grantDataStore(ctx, vc)
		if err != nil {
			return outcome{reason: tenantryv1alpha1.ReasonDataStoreUnavailable, warn: true, message: err.Error()}, status, provisioningRequeue, nil
		}
		spec.DataStore = access
	}
	spec.ServiceCIDR = cidr
	spec.Images = controlplane.UpstreamImages(spec.Version, r.opts.EtcdImage)
	if vc.Spec.Sleep != nil && r.activityURL != "" {
		spec.Activity = &controlplane.Activity{URL: r.activityURL}
	}
	spec.ManagerPeers = r.managerPeers()
	apiServerIPs, err := syncer.HostAPIServerAddresses(ctx, r.apiReader)
	if err != nil {
		return outcome{}, status, 0, err
	}
	if spec.Egress, err = syncer.IsolatedEgress(apiServerIPs, nil); err != nil {
		return outcome{}, status, 0, err
	}

	if err := r.apply(ctx, spec.NamespaceObject()); err != nil {
		return outcome{}, status, 0, err
	}
	for _, o := range spec.NetworkPolicies() {
		if err := r.apply(ctx, o); err != nil {
			return outcome{}, status, 0, err
		}
	}
	for _, o := range spec.PodDisruptionBudgets() {
		if err := r.apply(ctx, o); err != nil {
			return outcome{}, status, 0, err
		}
	}
	var etcd etcdMembers
	if spec.Storage == tenantryv1alpha1.StorageEtcd {
		if etcd, err = r.readEtcdMembers(ctx, spec); err != nil {
			return outcome{}, status, 0, err
		}
		if len(etcd.files) == 0 {
			// Its members' ConfigMap gone while they run: they keep
			// running, their files written again from the membership.
			var sts appsv1.StatefulSet
			switch err := r.workloads.Get(ctx, client.ObjectKey{Namespace: controlplane.Namespace(vc.Name), Name: controlplane.EtcdName}, &sts); {
			case err == nil:
				etcd.running = ptr.Deref(sts.Spec.Replicas, 1)
			case !apierrors.IsNotFound(err):
				return outcome{}, status, 0, fmt.Errorf("reading etcd's StatefulSet: %w", err)
			}
		}
		spec.EtcdPods = etcd.pods()
	}
	// The certificates name the Services' addresses.
	serviceIPs := map[string]string{}
	for _, o := range spec.Services() {
		// Applied, o is the Service as the API server has it.
		if err := r.apply(ctx, o); err != nil {
			return outcome{}, status, 0, err
		}
		svc := o
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			return outcome{reason: tenantryv1alpha1.ReasonControlPlaneProvisioning, message: fmt.Sprintf("Service %s has no cluster IP yet", svc.Name)}, status, provisioningRequeue, nil
		}
		serviceIPs[svc.Name] = svc.Spec.ClusterIP
	}
	status.Endpoint = "https://" + net.JoinHostPort(serviceIPs[controlplane.ServiceName], strconv.Itoa(controlplane.ServicePort))
	spec.EtcdServiceIP = serviceIPs[controlplane.EtcdName]
	for _, o := range spec.EtcdMemberServices() {
		spec.EtcdMemberIPs = append(spec.EtcdMemberIPs, serviceIPs[o.Name])
	}

	now := time.Now()
	pkiSecret := &corev1.Secret{}
	err = r.apiReader.Get(ctx, client.ObjectKey{Namespace: status.Namespace, Name: controlplane.PKISecretName}, pkiSecret)
	if err != nil && !apierrors.IsNotFound(err) {
		return outcome{}, status, 0, fmt.Errorf("reading the control plane's certificates: %w", err)
	}
	data, expires, err := spec.Certificates(pkiSecret.Data, serviceIPs[controlplane.ServiceName], now)
	if err != nil {
		return outcome{reason: tenantryv1alpha1.ReasonControlPlaneFailed, warn: true, message: "the control plane's certificates: " + err.Error()}, status, 0, nil
	}
	if !maps.EqualFunc(data, pkiSecret.Data, slices.Equal) {
		if err := r.apply(ctx, secret(status.Namespace, controlplane.PKISecretName, vc.Name, data)); err != nil {
			return outcome{}, status, 0, err
		}
		ctrl.LoggerFrom(ctx).Info("wrote the control plane's certificates", "expires", expires)
	}
	ca, err := controlplane.CA(data)
	if err != nil {
		return outcome{}, status, 0, err
	}
	admin := pki.Leaf{CommonName: controlplane.AdminUser, Organization: []string{"system:masters"}, Usage: pki.Client}
	key := ref.KubeconfigKey()
	kubeconfig, adminPair, err := controlplane.Kubeconfig(ca, kubeconfigSecret.Data[key], status.Endpoint, admin, now)
	if err != nil {
		return outcome{}, status, 0, err
	}
	if adminPair.Cert.NotAfter.Before(expires) {
		expires = adminPair.Cert.NotAfter
	}
	if string(kubeconfig) != string(kubeconfigSecret.Data[key]) {
		if err := r.apply(ctx, secret(ref.Namespace, ref.Name, vc.Name, map[string][]byte{key: kubeconfig})); err != nil {
			return outcome{}, status, 0, err
		}
	}
	status.CertificatesExpire = &metav1.Time{Time: expires}

	var membership error
	if spec.Storage == tenantryv1alpha1.StorageEtcd {
		if etcd, membership = r.reconcileEtcdMembers(ctx, vc, spec, etcd); membership != nil {
			// The control plane may serve meanwhile: said, and tried
			// again with backoff.
			membership = fmt.Errorf("changing its etcd's members: %w", membership)
		}
		if err := r.apply(ctx, etcd.configMap(spec)); err != nil {
			return outcome{}, status, 0, errors.Join(membership, err)
		}
		spec.EtcdPods = etcd.pods()
	}
	// The generations applied, which the cache may not hold yet.
	applied := map[string]int64{}
	for _, o := range spec.StatefulSets() {
		if err := r.applyStatefulSet(ctx, o); err != nil {
			return outcome{}, status, 0, errors.Join(membership, err)
		}
		applied[o.Name] = o.Generation
	}
	out := r.readiness(ctx, spec, kubeconfig, applied)
	switch {
	case membership != nil:
		out.message += "; " + membership.Error()
		out.retry = membership
	case etcd.note != "":
		out.message += "; " + etcd.note
		out.changing = out.ready
	}
	if out.asleep {
		// Its certificates still renew; its Pods' going brings it back.
		return out, status, runningRequeue, nil
	}
	if !out.ready {
		return out, status, provisioningRequeue, nil
	}
	if out.changing {
		return out, status, changingRequeue, nil
	}
	status.Version = spec.Version
	// Renewal is due once a third of the shortest life is left.
	renew := time.Until(expires.Add(-pki.LeafLifetime / 3))
	return out, status, max(min(runningRequeue, renew), time.Minute), nil
}

// checkVersion refuses a version this manager cannot run, or one that
// skips a minor version or goes back from running, which Kubernetes does
// not support.
func (r *Reconciler) checkVersion(want, running string) (outcome, bool) {
	if !slices.Contains(r.opts.Versions, want) {
		return outcome{reason: tenantryv1alpha1.ReasonUnknownVersion, warn: true, message: fmt.Sprintf(
			"spec.controlPlane.version %s is not one this manager runs: %s", want, strings.Join(r.opts.Versions, ", "))}, false
	}
	if running == "" {
		return outcome{}, true
	}
	if err := controlplane.CheckVersionChange(running, want); err != nil {
		return outcome{reason: tenantryv1alpha1.ReasonVersionSkew, warn: true, message: fmt.Sprintf(
			"spec.controlPlane.version %s: %v", want, err)}, false
	}
	return outcome{}, true
}

// restoringFrom is the version of the snapshot being restored into vc
// (tenantryv1alpha1.AnnotationRestoring), if one is and its control
// plane has not run yet.
func restoringFrom(vc *tenantryv1alpha1.VirtualCluster) (string, bool) {
	from := vc.Annotations[tenantryv1alpha1.AnnotationRestoring]
	if from == "" || vc.Status.ControlPlane != nil && vc.Status.ControlPlane.Version != "" {
		return "", false
	}
	return from, true
}

// defaultServiceCIDR names the ServiceCIDR of an API server's own
// --service-cluster-ip-range.
const defaultServiceCIDR = "kubernetes"

// serviceCIDR is the host's Service range (its first IPv4 one), which a
// tenant's API server takes for its own.
func (r *Reconciler) serviceCIDR(ctx context.Context) (string, error) {
	var list networkingv1.ServiceCIDRList
	if err := r.apiReader.List(ctx, &list); err != nil {
		return "", fmt.Errorf("reading the host's Service ranges: %w", err)
	}
	// The range the API server was started with, "kubernetes", first.
	slices.SortStableFunc(list.Items, func(a, b networkingv1.ServiceCIDR) int {
		return strings.Compare(strconv.FormatBool(a.Name != defaultServiceCIDR), strconv.FormatBool(b.Name != defaultServiceCIDR))
	})
	for _, c := range list.Items {
		for _, cidr := range c.Spec.CIDRs {
			if ip, _, err := net.ParseCIDR(cidr); err == nil && ip.To4() != nil {
				return cidr, nil
			}
		}
	}
	return "", errors.New("the host has no IPv4 Service range (ServiceCIDR)")
}

// managerPeers are who, besides its tenant, may reach a control plane:
// the manager.
func (r *Reconciler) managerPeers() []networkingv1.NetworkPolicyPeer {
	var peers []networkingv1.NetworkPolicyPeer
	if ns := r.opts.ManagerNamespace; ns != "" {
		peers = append(peers, networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{corev1.LabelMetadataName: ns},
		}})
	}
	for _, cidr := range r.opts.ManagerCIDRs {
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr}})
	}
	return peers
}

// readiness says whether the control plane runs: its Pod's API server is
// ready and answers through its Service, and its controller-manager runs.
func (r *Reconciler) readiness(ctx context.Context, spec controlplane.Spec, kubeconfig []byte, applied map[string]int64) outcome {
	waiting := func(format string, args ...any) outcome {
		return outcome{reason: tenantryv1alpha1.ReasonControlPlaneProvisioning, message: fmt.Sprintf(format, args...)}
	}
	// Its etcd first, if apart: the API server waits for it.
	var changes []string
	workloads := spec.StatefulSets()
	slices.Reverse(workloads)
	if spec.Asleep {
		return r.sleeping(ctx, workloads)
	}
	for _, want := range workloads {
		var sts appsv1.StatefulSet
		if err := r.workloads.Get(ctx, client.ObjectKeyFromObject(want), &sts); err != nil {
			return waiting("StatefulSet %s: %v", want.Name, err)
		}
		if sts.Status.ObservedGeneration < max(sts.Generation, applied[sts.Name]) || sts.Status.UpdateRevision != sts.Status.CurrentRevision && sts.Status.UpdateRevision != "" {
			rolling := fmt.Sprintf("rolling out StatefulSet %s (revision %s)", sts.Name, sts.Status.UpdateRevision)
			if *want.Spec.Replicas <= 1 || sts.Status.ReadyReplicas == 0 {
				return waiting("%s", rolling)
			}
			// Replaced one at a time: the others serve meanwhile.
			changes = append(changes, rolling)
			continue
		}
		if sts.Status.ReadyReplicas > 0 {
			continue // one serves: the others come, or are replaced
		}
		var pod corev1.Pod
		if err := r.workloads.Get(ctx, client.ObjectKey{Namespace: sts.Namespace, Name: sts.Name + "-0"}, &pod); err != nil {
			return waiting("Pod %s-0: %v", sts.Name, err)
		}
		for _, c := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
			if w := c.State.Waiting; w != nil && slices.Contains([]string{"ErrImagePull", "ImagePullBackOff", "CrashLoopBackOff", "CreateContainerConfigError", "InvalidImageName"}, w.Reason) {
				return outcome{reason: tenantryv1alpha1.ReasonControlPlaneFailed, message: fmt.Sprintf("container %s of Pod %s/%s: %s: %s", c.Name, pod.Namespace, pod.Name, w.Reason, w.Message)}
			}
			if c.State.Running == nil {
				return waiting("container %s of Pod %s/%s is not running", c.Name, pod.Namespace, pod.Name)
			}
		}
		if len(pod.Status.ContainerStatuses) == 0 {
			return waiting("Pod %s/%s has not started (%s)", pod.Namespace, pod.Name, pod.Status.Phase)
		}
	}
	if spec.Restoring {
		return outcome{reason: tenantryv1alpha1.ReasonRestoring, message: "its storage runs, for the snapshot's keys to be loaded (tenantry restore); " +
			"its API server and controller-manager start once they are"}
	}
	if err := r.probe(ctx, spec.Cluster, kubeconfig); err != nil {
		return waiting("the API server does not answer ready through its Service: %v", err)
	}
	message := "the API server answers ready, and its controller-manager runs"
	if want := spec.StatefulSet(); *want.Spec.Replicas > 1 {
		var sts appsv1.StatefulSet
		if err := r.workloads.Get(ctx, client.ObjectKeyFromObject(want), &sts); err == nil {
			message = fmt.Sprintf("the API server answers ready through its Service, of %d of its %d replicas ready, each with its controller-manager",
				sts.Status.ReadyReplicas, *want.Spec.Replicas)
		}
	}
	if spec.EtcdMembers() > 1 {
		message += fmt.Sprintf(", on an etcd of %d members", spec.EtcdMembers())
	}
	if len(changes) > 0 {
		message += "; " + strings.Join(changes, "; ")
	}
	return outcome{ready: true, reason: tenantryv1alpha1.ReasonControlPlaneRunning, message: message, changing: len(changes) > 0}
}

// sleeping says whether the Pods of workloads, at zero replicas, are
// gone.
func (r *Reconciler) sleeping(ctx context.Context, workloads []*appsv1.StatefulSet) outcome {
	for _, want := range workloads {
		var pod corev1.Pod
		switch err := r.workloads.Get(ctx, client.ObjectKey{Namespace: want.Namespace, Name: want.Name + "-0"}, &pod); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return outcome{reason: tenantryv1alpha1.ReasonSleepRequested, message: fmt.Sprintf("falling asleep: Pod %s-0: %v", want.Name, err)}
		default:
			return outcome{reason: tenantryv1alpha1.ReasonSleepRequested, message: fmt.Sprintf("falling asleep: Pod %s/%s still runs", pod.Namespace, pod.Name)}
		}
	}
	return outcome{reason: tenantryv1alpha1.ReasonSleepRequested, asleep: true,
		message: "asleep: no Pod of its control plane runs, and its data wait in its storage; tenantry wake wakes it, and so does a request to its API server"}
}

// probeReady asks the API server of kubeconfig, cluster's, for /readyz,
// as Tenantry: a probe that finds the control plane just put to sleep
// (its Service at the manager's waker) does not wake it.
func probeReady(ctx context.Context, cluster string, kubeconfig []byte) error {
	config, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return err
	}
	config.UserAgent = clusterregistry.UserAgent(cluster)
	config.Timeout = 5 * time.Second
	c, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	_, err = c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}

// applyStatefulSet applies sts; one whose Pods are managed otherwise
// (podManagementPolicy, which cannot change) is deleted first, its Pods
// and claims left for the new one to take up.
func (r *Reconciler) applyStatefulSet(ctx context.Context, sts *appsv1.StatefulSet) error {
	want := sts.Spec.PodManagementPolicy
	if want == "" {
		want = appsv1.OrderedReadyPodManagement
	}
	var current appsv1.StatefulSet
	err := r.workloads.Get(ctx, client.ObjectKeyFromObject(sts), &current)
	if apierrors.IsNotFound(err) || err == nil && current.Spec.PodManagementPolicy == want {
		return r.apply(ctx, sts)
	}
	if err != nil {
		return fmt.Errorf("reading StatefulSet %s: %w", client.ObjectKeyFromObject(sts), err)
	}
	if current.DeletionTimestamp.IsZero() {
		if err := r.client.Delete(ctx, &current, client.PropagationPolicy(metav1.DeletePropagationOrphan), client.Preconditions{UID: &current.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting StatefulSet %s, to make it anew with Pods managed %s: %w", client.ObjectKeyFromObject(sts), sts.Spec.PodManagementPolicy, err)
		}
		ctrl.LoggerFrom(ctx).Info("deleted a StatefulSet, its Pods kept, to make it anew", "statefulSet", sts.Name, "podManagementPolicy", sts.Spec.PodManagementPolicy)
	}
	return nil // made anew once it is gone
}

// apply applies o, server side, as the controller's own, unless it is as
// the controller last applied it (appliedObjects). An object of a watched
// kind (StatefulSet, Service) is then as the API server has it, applied
// or not; another is as the API server answered only if it was applied.
// A Secret or ConfigMap is applied every time it is asked to be: the
// callers read it live first, and ask only when it differs or they act
// on what they read.
func (r *Reconciler) apply(ctx context.Context, o client.Object) error {
	gvk, err := r.client.GroupVersionKindFor(o)
	if err != nil {
		return err
	}
	o.GetObjectKind().SetGroupVersionKind(gvk)
	var always bool
	switch o.(type) {
	case *corev1.Secret, *corev1.ConfigMap:
		always = true
	}
	digest, err := digestOf(o)
	if err != nil {
		return err
	}
	now := time.Now()
	if !always && r.applied.unchanged(ctx, r.workloads, gvk, o, digest, now) {
		return nil
	}
	//nolint:staticcheck // typed objects, applied whole: every field set is the controller's.
	if err := r.client.Patch(ctx, o, client.Apply, fieldOwner, client.ForceOwnership); err != nil {
		namespace := o.GetNamespace()
		if _, ok := o.(*corev1.Namespace); ok {
			namespace = o.GetName()
		}
		r.applied.forget(namespace)
		return fmt.Errorf("applying %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(o), err)
	}
	if !always {
		r.applied.record(gvk, o, digest, now)
	}
	return nil
}

// secret is a Secret of a control plane.
func secret(namespace, name, cluster string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: controlplane.Labels(cluster)},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
}

// report writes the ControlPlaneReady condition and status.controlPlane,
// with an Event when the condition changes, a Warning one for bad input.
// They are applied server-side as this controller's own fields: the
// VirtualCluster controller's Ready condition beside them is its own.
func (r *Reconciler) report(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster, out outcome, status tenantryv1alpha1.ControlPlaneStatus) error {
	before := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionControlPlaneReady)
	condition := metav1.Condition{Type: tenantryv1alpha1.ConditionControlPlaneReady, Status: metav1.ConditionFalse,
		Reason: out.reason, Message: out.message, ObservedGeneration: vc.Generation}
	if out.ready {
		condition.Status = metav1.ConditionTrue
	}
	asleep := metav1.Condition{Type: tenantryv1alpha1.ConditionAsleep, Status: metav1.ConditionFalse,
		Reason: tenantryv1alpha1.ReasonAwake, Message: "its control plane is not asked to sleep", ObservedGeneration: vc.Generation}
	switch {
	case out.asleep:
		asleep.Status, asleep.Reason, asleep.Message = metav1.ConditionTrue, out.reason, out.message
	case out.reason == tenantryv1alpha1.ReasonSleepRequested:
		asleep.Reason, asleep.Message = tenantryv1alpha1.ReasonFallingAsleep, out.message
	}
	conditions := slices.Clone(vc.Status.Conditions)
	changed := meta.SetStatusCondition(&conditions, condition)
	changed = meta.SetStatusCondition(&conditions, asleep) || changed
	if vc.Status.ControlPlane == nil || !equalStatus(*vc.Status.ControlPlane, status) {
		changed = true
	}
	if changed {
		apply := &tenantryv1alpha1.VirtualCluster{
			TypeMeta:   metav1.TypeMeta{APIVersion: tenantryv1alpha1.GroupVersion.String(), Kind: "VirtualCluster"},
			ObjectMeta: metav1.ObjectMeta{Name: vc.Name},
			Status: tenantryv1alpha1.VirtualClusterStatus{
				Conditions: []metav1.Condition{*meta.FindStatusCondition(conditions, tenantryv1alpha1.ConditionControlPlaneReady),
					*meta.FindStatusCondition(conditions, tenantryv1alpha1.ConditionAsleep)},
				ControlPlane: &status,
			},
		}
		//nolint:staticcheck // a typed object, its status applied: the fields set are the controller's.
		if err := r.client.Status().Patch(ctx, apply, client.Apply, fieldOwner, client.ForceOwnership); err != nil {
			return fmt.Errorf("updating the control plane status of %s: %w", vc.Name, err)
		}
	}
	if before == nil || before.Reason != out.reason {
		kind := corev1.EventTypeNormal
		if out.warn || out.reason == tenantryv1alpha1.ReasonControlPlaneFailed {
			kind = corev1.EventTypeWarning
		}
		r.recorder.Eventf(vc, nil, kind, out.reason, "ControlPlane", "%s", out.message)
	}
	return nil
}

func equalStatus(a, b tenantryv1alpha1.ControlPlaneStatus) bool {
	expiry := func(t *metav1.Time) time.Time {
		if t == nil {
			return time.Time{}
		}
		return t.Truncate(time.Second)
	}
	return a.Version == b.Version && a.Namespace == b.Namespace && a.Endpoint == b.Endpoint && expiry(a.CertificatesExpire).Equal(expiry(b.CertificatesExpire))
}

// remove deletes vc's control plane: its namespace (with its data, unless
// spec.controlPlane.retainData says to keep the claim) and the kubeconfig
// Secret Tenantry wrote, then lets the VirtualCluster go.
func (r *Reconciler) remove(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) error {
	if !controllerutil.ContainsFinalizer(vc, Finalizer) {
		return nil
	}
	ns := controlplane.Namespace(vc.Name)
	r.applied.forget(ns)
	if vc.Spec.ControlPlane.RetainData {
		// The workloads and their Services go (its etcd's too); the
		// namespace keeps the claims, the certificates and the Services
		// of its etcd's members (the addresses its data know them by),
		// which a VirtualCluster of the same name takes up again.
		spec := controlplane.FromVirtualCluster(vc, r.opts.Version, *r.opts.Resources)
		var workloads []client.Object
		for _, o := range spec.StatefulSets() {
			workloads = append(workloads, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: o.Name}})
		}
		for _, o := range []*corev1.Service{spec.Service(), spec.EtcdService()} {
			if o == nil {
				continue
			}
			workloads = append(workloads, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: o.Name}})
		}
		for _, o := range workloads {
			if err := r.client.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationForeground)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %s/%s: %w", ns, o.GetName(), err)
			}
		}
	} else {
		var namespace corev1.Namespace
		err := r.apiReader.Get(ctx, client.ObjectKey{Name: ns}, &namespace)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("reading the control plane's namespace %s: %w", ns, err)
		case namespace.Labels[controlplane.LabelControlPlane] != vc.Name:
			// Not this VirtualCluster's: left as it is.
		case namespace.DeletionTimestamp.IsZero():
			if err := r.client.Delete(ctx, &namespace, client.Preconditions{UID: &namespace.UID}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting the control plane's namespace %s: %w", ns, err)
			}
			return errNamespaceTerminating
		default:
			// Gone in full before the VirtualCluster goes: one made anew
			// under its name finds no namespace in the way.
			return errNamespaceTerminating
		}
	}
	if err := r.revokeDataStore(ctx, vc); err != nil {
		return err
	}
	ref := vc.Spec.KubeconfigSecretRef
	var kubeconfigSecret corev1.Secret
	err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &kubeconfigSecret)
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading kubeconfig Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	if err == nil && kubeconfigSecret.Labels[controlplane.LabelControlPlane] == vc.Name {
		if err := r.client.Delete(ctx, &kubeconfigSecret, client.Preconditions{UID: &kubeconfigSecret.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting kubeconfig Secret %s/%s: %w", ref.Namespace, ref.Name, err)
		}
	}
	patch := client.MergeFromWithOptions(vc.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(vc, Finalizer)
	if err := r.client.Patch(ctx, vc, patch); err != nil {
		return fmt.Errorf("removing the control plane finalizer from %s: %w", vc.Name, client.IgnoreNotFound(err))
	}
	ctrl.LoggerFrom(ctx).Info("control plane removed", "namespace", ns, "dataKept", vc.Spec.ControlPlane.RetainData)
	return nil
}

// grantDataStore gives vc's control plane its user and prefix on the
// DataStore it names, and says how its API server reaches the store.
func (r *Reconciler) grantDataStore(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) (*controlplane.DataStoreAccess, error) {
	store, err := datastore.OpenNamed(ctx, r.client, r.apiReader, vc.Spec.ControlPlane.Storage.DataStore)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	if err := store.Grant(ctx, vc.Name); err != nil {
		return nil, fmt.Errorf("DataStore %s: %w", vc.Spec.ControlPlane.Storage.DataStore, err)
	}
	return &controlplane.DataStoreAccess{Endpoints: store.Endpoints, CA: store.CA()}, nil
}

// revokeDataStore removes vc's user from its DataStore, and its keys
// unless it retains its data. A DataStore that is gone holds nothing of
// it any more; one that does not answer is tried again.
func (r *Reconciler) revokeDataStore(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) error {
	name := usesDataStore(vc)
	if name == "" {
		return nil
	}
	store, err := datastore.OpenNamed(ctx, r.client, r.apiReader, name)
	if errors.Is(err, datastore.ErrNotFound) {
		ctrl.LoggerFrom(ctx).Info("the DataStore of the control plane is gone: nothing of it to remove", "dataStore", name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing the control plane's data: %w", err)
	}
	defer store.Close()
	if err := store.Revoke(ctx, vc.Name, vc.Spec.ControlPlane.RetainData); err != nil {
		return fmt.Errorf("DataStore %s: %w", name, err)
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }
