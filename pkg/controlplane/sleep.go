package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

// AskToSleep asks VirtualCluster name to sleep, as `tenantry sleep`
// does: it writes tenantryv1alpha1.AnnotationSleepRequestedAt with the
// time now, and touches nothing else of it.
func AskToSleep(ctx context.Context, c client.Writer, name string) error {
	return ask(ctx, c, name, tenantryv1alpha1.AnnotationSleepRequestedAt)
}

// AskToWake asks VirtualCluster name to wake, as `tenantry wake` does:
// it writes tenantryv1alpha1.AnnotationWakeRequestedAt with the time now.
func AskToWake(ctx context.Context, c client.Writer, name string) error {
	return ask(ctx, c, name, tenantryv1alpha1.AnnotationWakeRequestedAt)
}

func ask(ctx context.Context, c client.Writer, name, annotation string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		annotation: time.Now().UTC().Format(time.RFC3339Nano),
	}}})
	if err != nil {
		return err
	}
	vc := &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Patch(ctx, vc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("virtualcluster/%s: writing %s: %w", name, annotation, err)
	}
	return nil
}
