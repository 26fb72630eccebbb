package syncer

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// BudgetReporter is told the totals a tenant takes of its budget
// (Options.Budget) when they change: the resources the budget names,
// summed over the tenant's host copies.
type BudgetReporter func(ctx context.Context, used corev1.ResourceList) error

// ValidateBudget says what is wrong with a budget's names: each must be
// one that the budget counts.
func ValidateBudget(budget corev1.ResourceList) error {
	for name, q := range budget {
		n := string(name)
		switch {
		case q.Sign() < 0:
			return fmt.Errorf("%s: %s is negative", n, q.String())
		case slices.Contains(BudgetResources, name):
		case strings.HasPrefix(n, "count/") && len(n) > len("count/"):
		default:
			return fmt.Errorf("%s is not a resource the budget counts: one of %v, or count/<resource>[.<group>]", n, BudgetResources)
		}
	}
	return nil
}

// BudgetResources are the resource names, besides count/<resource>[.<group>],
// that a budget counts.
var BudgetResources = []corev1.ResourceName{
	corev1.ResourcePods, corev1.ResourceServices, corev1.ResourcePersistentVolumeClaims, corev1.ResourceConfigMaps, corev1.ResourceSecrets,
	corev1.ResourceServicesNodePorts, corev1.ResourceServicesLoadBalancers, corev1.ResourceRequestsStorage,
	corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage,
	corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourceRequestsEphemeralStorage,
	corev1.ResourceLimitsCPU, corev1.ResourceLimitsMemory, corev1.ResourceLimitsEphemeralStorage,
}
