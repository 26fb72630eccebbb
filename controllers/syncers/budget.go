package syncers

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
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
		return patchStatusField(ctx, host, cluster, "add", "budget", &status)
	}
}

// clearBudgetStatus takes status.budget off VirtualCluster cluster, whose
// policy has no budget any more.
func clearBudgetStatus(ctx context.Context, host client.Client, cluster string) error {
	return patchStatusField(ctx, host, cluster, "remove", "budget", nil)
}

// patchStatusField sets (op "add") or removes (op "remove", value nil) one
// field of VirtualCluster cluster's status, whole: a JSON patch, so that
// what the new value no longer holds goes, and nothing else of the status
// is touched.
func patchStatusField(ctx context.Context, host client.Client, cluster, op, field string, value any) error {
	patch := []map[string]any{{"op": op, "path": "/status/" + field}}
	if value != nil {
		patch[0]["value"] = value
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	vc := &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}}
	if err := host.Status().Patch(ctx, vc, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return fmt.Errorf("writing status.%s of VirtualCluster %s: %w", field, cluster, err)
	}
	return nil
}
