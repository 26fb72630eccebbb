package syncer_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// Only names a budget counts pass.
func TestValidateBudget(t *testing.T) {
	for budget, wantErr := range map[string]string{
		"pods":                  "",
		"requests.cpu":          "",
		"count/widgets.example": "",
		"count/":                "not a resource the budget counts",
		"nvidia.com/gpu":        "not a resource the budget counts",
	} {
		err := syncer.ValidateBudget(corev1.ResourceList{corev1.ResourceName(budget): resource.MustParse("1")})
		if (wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), wantErr) {
			t.Errorf("budget %s: %v; want %q", budget, err, wantErr)
		}
	}
}
