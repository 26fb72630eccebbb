package controlplane_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
)

// The latest request wins whatever the clocks: a sleep written by a clock
// an hour ahead loses to a wake asked after it, and the other way round.
func TestAskAgainstAClockAhead(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := tenantryv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ahead := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	vc := &tenantryv1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Annotations: map[string]string{tenantryv1alpha1.AnnotationSleepRequestedAt: ahead}},
		Spec:       tenantryv1alpha1.VirtualClusterSpec{ControlPlane: &tenantryv1alpha1.ControlPlaneSpec{}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(vc).Build()
	ctx := context.Background()
	asleep := func() bool {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			t.Fatal(err)
		}
		return vc.Asleep()
	}
	if !asleep() {
		t.Fatal("not asleep to begin with")
	}
	if err := controlplane.AskToWake(ctx, c, "shop"); err != nil {
		t.Fatal(err)
	}
	if asleep() {
		t.Errorf("asked to wake after a sleep written an hour ahead, still asleep: %v", vc.Annotations)
	}
	if err := controlplane.AskToSleep(ctx, c, "shop"); err != nil {
		t.Fatal(err)
	}
	if !asleep() {
		t.Errorf("asked to sleep after that wake, awake: %v", vc.Annotations)
	}
	if err := controlplane.AskToWake(ctx, c, "gone"); err == nil {
		t.Error("asked a VirtualCluster that does not exist to wake: no error")
	}
}
