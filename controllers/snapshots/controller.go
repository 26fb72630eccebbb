// Package snapshots is the host-side controller of scheduled snapshots:
// for a VirtualCluster with spec.snapshots, it takes a snapshot of its
// control plane's storage at each time of the schedule, as `tenantry
// snapshot` does, pushes it to the OCI repository the spec names, keeps
// the newest spec.snapshots.keep there, and says how it went in
// status.snapshots, in Events and in metrics. A snapshot that fails
// never stops the tenant: it is read-only, and the next one comes at the
// next time of the schedule.
package snapshots

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/robfig/cron/v3"
	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/snapshot"
)

// +kubebuilder:rbac:groups=tenantry.dev,resources=virtualclusters;datastores,verbs=list;watch
// +kubebuilder:rbac:groups=tenantry.dev,resources=virtualclusters/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=pods/portforward,verbs=create

// ControllerName names the controller, its logger and its Events.
const ControllerName = "snapshots"

// Event reasons on a VirtualCluster.
const (
	// ReasonSnapshotTaken: a scheduled snapshot was pushed.
	ReasonSnapshotTaken = "SnapshotTaken"
	// ReasonSnapshotFailed: a scheduled snapshot failed; the tenant runs
	// on.
	ReasonSnapshotFailed = "SnapshotFailed"
	// ReasonSnapshotsNotPruned: a snapshot was pushed, and older ones
	// beyond spec.snapshots.keep could not be deleted.
	ReasonSnapshotsNotPruned = "SnapshotsNotPruned"
)

// Timeout bounds one snapshot, pushed.
const Timeout = 10 * time.Minute

// Module adds the scheduled snapshots' controller to the management app.
var Module = fx.Module(ControllerName, fx.Invoke(setup))

func setup(mgr manager.Manager) error {
	r := &Reconciler{
		client: mgr.GetClient(), apiReader: mgr.GetAPIReader(), config: mgr.GetConfig(),
		recorder: mgr.GetEventRecorder("tenantry-" + ControllerName), now: time.Now,
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		// Those with spec.snapshots, and those that just lost it (their
		// series goes).
		For(&tenantryv1alpha1.VirtualCluster{}, builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(e event.CreateEvent) bool { return scheduled(e.Object) },
			UpdateFunc:  func(e event.UpdateEvent) bool { return scheduled(e.ObjectOld) || scheduled(e.ObjectNew) },
			DeleteFunc:  func(e event.DeleteEvent) bool { return scheduled(e.Object) },
			GenericFunc: func(e event.GenericEvent) bool { return scheduled(e.Object) },
		})).
		Complete(r)
}

func scheduled(o client.Object) bool {
	return o.(*tenantryv1alpha1.VirtualCluster).Spec.Snapshots != nil
}

// Reconciler takes the scheduled snapshots of VirtualClusters.
type Reconciler struct {
	client client.Client
	// apiReader reads what no cache holds: Secrets (the control plane's
	// certificates, the registry's credentials).
	apiReader client.Reader
	// config is the host's, through which the storage is reached.
	config   *rest.Config
	recorder events.EventRecorder
	now      func() time.Time
}

// Reconcile takes vc's snapshot if one is due, and comes back when the
// next is.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var vc tenantryv1alpha1.VirtualCluster
	if err := r.client.Get(ctx, req.NamespacedName, &vc); err != nil {
		if apierrors.IsNotFound(err) {
			lastSuccess.DeleteLabelValues(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	spec := vc.Spec.Snapshots
	if spec == nil || vc.Spec.ControlPlane == nil || !vc.DeletionTimestamp.IsZero() {
		lastSuccess.DeleteLabelValues(req.Name)
		return ctrl.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", vc.Name)
	ctx = ctrl.LoggerInto(ctx, log)
	reportLastSuccess(&vc)
	now := r.now()
	status := tenantryv1alpha1.SnapshotsStatus{}
	if vc.Status.Snapshots != nil {
		status = *vc.Status.Snapshots.DeepCopy()
	}
	schedule, err := cron.ParseStandard(spec.Schedule)
	if err != nil {
		// Bad input: said once, and not retried until the spec changes.
		message := fmt.Sprintf("spec.snapshots.schedule %q: %v", spec.Schedule, err)
		if status.LastFailure == nil || status.LastFailure.Message != message {
			status.LastFailure = &tenantryv1alpha1.SnapshotFailure{Time: metav1.NewTime(now), Message: message}
			r.recorder.Eventf(&vc, nil, corev1.EventTypeWarning, ReasonSnapshotFailed, "Snapshot", "%s", message)
			return ctrl.Result{}, r.writeStatus(ctx, &vc, status)
		}
		return ctrl.Result{}, nil
	}
	from := vc.CreationTimestamp.Time
	if status.LastScheduleTime != nil {
		from = status.LastScheduleTime.Time
	}
	if due := schedule.Next(from); now.Before(due) {
		return ctrl.Result{RequeueAfter: due.Sub(now)}, nil
	}
	// Due (once, however many times were missed while no manager ran).
	// Claimed first, under the object's version: of replicas that all
	// run this controller, one takes it.
	status.LastScheduleTime = &metav1.Time{Time: now}
	if err := r.writeStatus(ctx, &vc, status); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	record, pruneErr, err := r.take(ctx, &vc, spec, now)
	if err != nil {
		status.LastFailure = &tenantryv1alpha1.SnapshotFailure{Time: metav1.NewTime(now), Message: err.Error()}
		snapshotsTotal.WithLabelValues(resultFailed).Inc()
		r.recorder.Eventf(&vc, nil, corev1.EventTypeWarning, ReasonSnapshotFailed, "Snapshot", "%v", err)
		log.Error(err, "a scheduled snapshot failed")
	} else {
		status.LastSuccessful = record
		snapshotsTotal.WithLabelValues(resultSucceeded).Inc()
		snapshotDuration.Observe(record.Took.Seconds())
		r.recorder.Eventf(&vc, nil, corev1.EventTypeNormal, ReasonSnapshotTaken, "Snapshot", "pushed %s: %d keys, %d bytes, in %s",
			record.Reference, record.Keys, record.Size, record.Took.Duration)
		log.Info("took a scheduled snapshot", "reference", record.Reference, "keys", record.Keys, "bytes", record.Size, "took", record.Took.Duration)
	}
	if pruneErr != nil {
		r.recorder.Eventf(&vc, nil, corev1.EventTypeWarning, ReasonSnapshotsNotPruned, "Prune", "%v", pruneErr)
	}
	// The outcome is kept whatever else wrote the status meanwhile (the
	// control plane's conditions): read again on a conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := r.client.Get(ctx, req.NamespacedName, &vc); err != nil {
			return err
		}
		return r.writeStatus(ctx, &vc, status)
	})
	if err != nil {
		return ctrl.Result{}, err
	}
	reportLastSuccess(&vc)
	now = r.now()
	return ctrl.Result{RequeueAfter: max(schedule.Next(now).Sub(now), time.Second)}, nil
}

// take takes vc's snapshot into a temporary file, pushes it as spec
// says, and prunes the older ones; a failed prune is said apart, the
// snapshot being taken.
func (r *Reconciler) take(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster, spec *tenantryv1alpha1.SnapshotsSpec, at time.Time) (_ *tenantryv1alpha1.SnapshotRecord, pruneErr, err error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	if c := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionControlPlaneReady); c == nil || c.Status != metav1.ConditionTrue {
		return nil, nil, errors.New("its control plane is not running (ControlPlaneReady is not True): no snapshot of it now")
	}
	registry, err := r.registry(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	began := time.Now()
	f, err := os.CreateTemp("", "tenantry-snapshot-*.tar.gz")
	if err != nil {
		return nil, nil, err
	}
	defer os.Remove(f.Name())
	taken, err := snapshot.OfVirtualCluster(ctx, r.config, storageReader{cache: r.client, api: r.apiReader}, vc, f, "")
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return nil, nil, err
	}
	digest, err := registry.Push(ctx, f.Name(), spec.Destination+":"+snapshot.Tag(vc.Name, at))
	if err != nil {
		return nil, nil, err
	}
	record := &tenantryv1alpha1.SnapshotRecord{
		Time: metav1.NewTime(at), Reference: spec.Destination + "@" + digest,
		Keys: int64(taken.Manifest.Keys), Size: taken.Size, Took: metav1.Duration{Duration: time.Since(began).Round(time.Millisecond)},
	}
	keep := int(spec.Keep)
	if keep < 1 {
		keep = 7
	}
	if _, err := registry.Prune(ctx, spec.Destination, vc.Name, keep); err != nil {
		pruneErr = fmt.Errorf("pushed %s, and could not delete the snapshots beyond the %d newest: %w", record.Reference, keep, err)
	}
	return record, pruneErr, nil
}

// storageReader reads what reaching a tenant's storage needs: its
// DataStore from the manager's cache (which holds them all), the rest
// (its certificates' Secret) from the API server, as no cache of every
// Secret is kept.
type storageReader struct {
	cache, api client.Reader
}

func (r storageReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*tenantryv1alpha1.DataStore); ok {
		return r.cache.Get(ctx, key, obj, opts...)
	}
	return r.api.Get(ctx, key, obj, opts...)
}

func (r storageReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.api.List(ctx, list, opts...)
}

// registry reaches the registry with the credentials spec names.
func (r *Reconciler) registry(ctx context.Context, spec *tenantryv1alpha1.SnapshotsSpec) (snapshot.Registry, error) {
	ref := spec.CredentialsSecretRef
	if ref == nil {
		return snapshot.Registry{Keychain: authn.NewMultiKeychain()}, nil // anonymous: the manager's own config is not the tenant's to use
	}
	var secret corev1.Secret
	if err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &secret); err != nil {
		return snapshot.Registry{}, fmt.Errorf("reading spec.snapshots.credentialsSecretRef %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	if secret.Type != corev1.SecretTypeDockerConfigJson {
		return snapshot.Registry{}, fmt.Errorf("Secret %s/%s of spec.snapshots.credentialsSecretRef is of type %q, not %s", ref.Namespace, ref.Name, secret.Type, corev1.SecretTypeDockerConfigJson)
	}
	keychain, err := snapshot.DockerConfigKeychain(secret.Data[corev1.DockerConfigJsonKey])
	if err != nil {
		return snapshot.Registry{}, fmt.Errorf("Secret %s/%s of spec.snapshots.credentialsSecretRef: %w", ref.Namespace, ref.Name, err)
	}
	return snapshot.Registry{Keychain: keychain}, nil
}

// writeStatus writes status.snapshots of vc, under its version.
func (r *Reconciler) writeStatus(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster, status tenantryv1alpha1.SnapshotsStatus) error {
	patch := client.MergeFromWithOptions(vc.DeepCopy(), client.MergeFromWithOptimisticLock{})
	vc.Status.Snapshots = &status
	if err := r.client.Status().Patch(ctx, vc, patch); err != nil {
		return fmt.Errorf("writing the snapshots' status of %s: %w", vc.Name, err)
	}
	return nil
}
