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
		return patchBudgetStatus(ctx, host, cluster, "add", &status)
	}
}

// clearBudgetStatus takes status.budget off VirtualCluster cluster, whose
// policy has no budget any more.
func clearBudgetStatus(ctx context.Context, host client.Client, cluster string) error {
	return patchBudgetStatus(ctx, host, cluster, "remove", nil)
}

// patchBudgetStatus sets (op "add") or removes status.budget, whole, of
// VirtualCluster cluster: a JSON patch, so that resources the budget no
// longer names go, and nothing else of the status is touched.
func patchBudgetStatus(ctx context.Context, host client.Client, cluster, op string, status *tenantryv1alpha1.BudgetStatus) error {
	patch := []map[string]any{{"op": op, "path": "/status/budget"}}
	if status != nil {
		patch[0]["value"] = status
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	vc := &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}}
	if err := host.Status().Patch(ctx, vc, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return fmt.Errorf("writing the budget to VirtualCluster %s's status: %w", cluster, err)
	}
	return nil
}
