package syncers

// What the syncers write to their VirtualCluster's status: status.budget
// here, status.sync in syncstatus.go, each one field whole
// (patchStatusField).

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/syncer"
)

// budgetReporter writes what VirtualCluster cluster takes of its budget to
// its status.budget.
func budgetReporter(host client.Client, cluster string, budget corev1.ResourceList) syncer.BudgetReporter {
	return func(ctx context.Context, used corev1.ResourceList) error {
		status := tenantryv1alpha1.BudgetStatus{Used: used}
		if allowed, ok := budget[corev1.ResourcePods]; ok {
			u := used[corev1.ResourcePods]
			status.Pods = fmt.Sprintf("%s/%s", u.String(), allowed.String())
		}
		var vc tenantryv1alpha1.VirtualCluster
		if err := host.Get(ctx, client.ObjectKey{Name: cluster}, &vc); err != nil {
			return fmt.Errorf("reading VirtualCluster %s: %w", cluster, err)
		}
		return patchStatusField(ctx, host, &vc, "add", "budget", &status)
	}
}

// clearBudgetStatus takes status.budget off vc, whose policy has no budget
// any more.
func clearBudgetStatus(ctx context.Context, host client.Client, vc *tenantryv1alpha1.VirtualCluster) error {
	return patchStatusField(ctx, host, vc, "remove", "budget", nil)
}

// patchStatusField sets (op "add") or removes (op "remove", value nil) one
// field of vc's status, whole: a JSON patch, so that what the new value no
// longer holds goes, and nothing else of the status is touched.
//
// A status with nothing in it, as vc was read, may be missing from the
// object, where a JSON patch cannot add a field to it (the API server
// answers 422): the status is then added whole, on the condition that the
// object is still the one read; if it changed, the patch fails and the
// caller's retry reads it again.
func patchStatusField(ctx context.Context, host client.Client, vc *tenantryv1alpha1.VirtualCluster, op, field string, value any) error {
	patch := []map[string]any{{"op": op, "path": "/status/" + field}}
	if value != nil {
		patch[0]["value"] = value
	}
	if equality.Semantic.DeepEqual(vc.Status, tenantryv1alpha1.VirtualClusterStatus{}) {
		if op == "remove" {
			return nil
		}
		patch = []map[string]any{
			{"op": "test", "path": "/metadata/resourceVersion", "value": vc.ResourceVersion},
			{"op": "add", "path": "/status", "value": map[string]any{field: value}},
		}
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	target := &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: vc.Name}}
	if err := host.Status().Patch(ctx, target, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return fmt.Errorf("writing status.%s of VirtualCluster %s: %w", field, vc.Name, err)
	}
	return nil
}
