package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane/datastore"
)

// +kubebuilder:rbac:groups=tenantry.dev,resources=datastores,verbs=list;watch;patch
// +kubebuilder:rbac:groups=tenantry.dev,resources=datastores/status,verbs=patch

// storeReason is the condition reason of a DataStore that could not be
// opened.
func storeReason(err error) string {
	if errors.Is(err, datastore.ErrUnreachable) {
		return tenantryv1alpha1.ReasonDataStoreUnreachable
	}
	return tenantryv1alpha1.ReasonDataStoreInvalid
}

// DataStoreFinalizer holds a deleted DataStore until no control plane
// keeps its data in it: their users and keys are removed with them, which
// takes the store.
const DataStoreFinalizer = "tenantry.dev/datastore"

// dataStoreRecheck is how often a DataStore is reached again.
const dataStoreRecheck = time.Minute

// DataStoreReconciler says in a DataStore's Ready condition whether
// control planes can use it, and counts those that do.
type DataStoreReconciler struct {
	client    client.Client
	apiReader client.Reader
	recorder  events.EventRecorder
}

// Reconcile reaches the DataStore and writes its status, and holds it
// while control planes keep their data in it.
func (r *DataStoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		// Its finalizers are written under lock: read again.
		ctrl.LoggerFrom(ctx).V(1).Info("retrying: the DataStore changed meanwhile", "dataStore", req.Name, "error", err.Error())
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return res, err
}

func (r *DataStoreReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ds tenantryv1alpha1.DataStore
	if err := r.client.Get(ctx, req.NamespacedName, &ds); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var vcs tenantryv1alpha1.VirtualClusterList
	if err := r.client.List(ctx, &vcs); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing VirtualClusters: %w", err)
	}
	users := int32(0)
	for _, vc := range vcs.Items {
		if usesDataStore(&vc) == ds.Name {
			users++
		}
	}
	deleting, held := !ds.DeletionTimestamp.IsZero(), controllerutil.ContainsFinalizer(&ds, DataStoreFinalizer)
	switch {
	case deleting && held && users > 0:
		return ctrl.Result{RequeueAfter: dataStoreRecheck}, r.writeStatus(ctx, &ds, users, metav1.Condition{
			Type: tenantryv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: tenantryv1alpha1.ReasonDataStoreInUse,
			Message: fmt.Sprintf("deleted, and %d control planes keep their data in it: it goes once they are deleted", users)})
	case deleting && held, !deleting && !held:
		// Held once made; let go once deleted and used by none.
		patch := client.MergeFromWithOptions(ds.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if deleting {
			controllerutil.RemoveFinalizer(&ds, DataStoreFinalizer)
		} else {
			controllerutil.AddFinalizer(&ds, DataStoreFinalizer)
		}
		if err := r.client.Patch(ctx, &ds, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("the finalizer of DataStore %s: %w", ds.Name, client.IgnoreNotFound(err))
		}
	}
	if deleting {
		return ctrl.Result{}, nil
	}
	condition := metav1.Condition{Type: tenantryv1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: tenantryv1alpha1.ReasonDataStoreReachable, Message: "reached as etcd's root user; etcd authenticates its clients"}
	store, err := datastore.OpenObject(ctx, r.apiReader, &ds)
	if err != nil {
		condition.Status, condition.Reason, condition.Message = metav1.ConditionFalse, storeReason(err), err.Error()
	} else {
		_ = store.Close()
	}
	return ctrl.Result{RequeueAfter: dataStoreRecheck}, r.writeStatus(ctx, &ds, users, condition)
}

// writeStatus writes ds's Ready condition and count of control planes,
// with an Event when the condition's reason changes.
func (r *DataStoreReconciler) writeStatus(ctx context.Context, ds *tenantryv1alpha1.DataStore, users int32, condition metav1.Condition) error {
	condition.ObservedGeneration = ds.Generation
	before := meta.FindStatusCondition(ds.Status.Conditions, tenantryv1alpha1.ConditionReady)
	conditions := slices.Clone(ds.Status.Conditions)
	changed := meta.SetStatusCondition(&conditions, condition)
	if changed || ds.Status.ControlPlanes != users || ds.Status.ObservedGeneration != ds.Generation {
		patch := client.MergeFrom(ds.DeepCopy())
		ds.Status.Conditions, ds.Status.ControlPlanes, ds.Status.ObservedGeneration = conditions, users, ds.Generation
		if err := r.client.Status().Patch(ctx, ds, patch); err != nil {
			return fmt.Errorf("updating the status of DataStore %s: %w", ds.Name, err)
		}
	}
	if before == nil || before.Reason != condition.Reason {
		kind := corev1.EventTypeNormal
		if condition.Status != metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		r.recorder.Eventf(ds, nil, kind, condition.Reason, "Check", "%s", condition.Message)
	}
	return nil
}

// usesDataStore is the DataStore vc's control plane keeps its data in,
// or "".
func usesDataStore(vc *tenantryv1alpha1.VirtualCluster) string {
	if cp := vc.Spec.ControlPlane; cp != nil && cp.Storage.Type == tenantryv1alpha1.StorageDataStore {
		return cp.Storage.DataStore
	}
	return ""
}
