package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

// AskToSleep asks VirtualCluster name to sleep, as `tenantry sleep`
// does: it writes tenantryv1alpha1.AnnotationSleepRequestedAt with the
// time now, and touches nothing else of it.
func AskToSleep(ctx context.Context, c client.Client, name string) error {
	return ask(ctx, c, name, tenantryv1alpha1.AnnotationSleepRequestedAt, tenantryv1alpha1.AnnotationWakeRequestedAt)
}

// AskToWake asks VirtualCluster name to wake, as `tenantry wake` does:
// it writes tenantryv1alpha1.AnnotationWakeRequestedAt with the time now.
func AskToWake(ctx context.Context, c client.Client, name string) error {
	return ask(ctx, c, name, tenantryv1alpha1.AnnotationWakeRequestedAt, tenantryv1alpha1.AnnotationSleepRequestedAt)
}

// ask writes annotation with the time now, or just after the time of the
// other request if that is later (written by a clock ahead of this one):
// the latest request wins, whatever the clocks.
func ask(ctx context.Context, c client.Client, name, annotation, other string) error {
	vc := &tenantryv1alpha1.VirtualCluster{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, vc); err != nil {
		return fmt.Errorf("virtualcluster/%s: %w", name, err)
	}
	at := time.Now().UTC()
	if t, err := time.Parse(time.RFC3339Nano, vc.Annotations[other]); err == nil && !at.After(t) {
		at = t.Add(time.Millisecond)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		annotation: at.Format(time.RFC3339Nano),
	}}})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, vc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("virtualcluster/%s: writing %s: %w", name, annotation, err)
	}
	return nil
}
