package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer/pods"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// trustBundles: a container reads the tenant's ClusterTrustBundles through
// its clusterTrustBundle projections, by name and by signer and labels,
// an optional one that matches nothing as an empty file; a Pod whose
// bundle is missing is held back, told so with a Warning Event, and
// starts once the tenant creates the bundle.
func (k *tenantKit) trustBundles(t *testing.T) {
	ctx := t.Context()
	cert := func(cn string) string {
		crt, err := tenantrytest.CACertificatePEM(cn)
		if err != nil {
			t.Fatal(err)
		}
		return string(crt)
	}
	root, live, dead, later := cert("corp-root"), cert("signer-live"), cert("signer-dead"), cert("later-root")
	const signer = "tenantry.test/signer"
	bundle := func(name, signer, pem string, labels map[string]string) *certificatesv1.ClusterTrustBundle {
		return &certificatesv1.ClusterTrustBundle{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signer, TrustBundle: pem},
		}
	}
	for _, ctb := range []*certificatesv1.ClusterTrustBundle{
		bundle("corp-root", "", root, nil),
		bundle("tenantry.test:signer:live", signer, live, map[string]string{"live": "true"}),
		bundle("tenantry.test:signer:dead", signer, dead, map[string]string{"live": "false"}),
	} {
		if err := k.tenant.Create(ctx, ctb); err != nil {
			t.Fatal(err)
		}
	}

	pod := checkPod("app", "trust", `for f in root live all none; do echo "== $f"; cat /ctb/$f.pem; done`)
	pod.Spec.Volumes = []corev1.Volume{{Name: "ctb", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To("corp-root"), Path: "root.pem"}},
		{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{SignerName: ptr.To(signer), LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"live": "true"}}, Path: "live.pem"}},
		{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{SignerName: ptr.To(signer), LabelSelector: &metav1.LabelSelector{}, Path: "all.pem"}},
		{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To("no-such-bundle"), Optional: ptr.To(true), Path: "none.pem"}},
	}}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "ctb", MountPath: "/ctb"}}
	done := k.run(t, pod, "ended", ended)
	files := map[string]string{}
	for _, part := range strings.Split(k.logs(t, "app", "trust"), "== ")[1:] {
		name, content, _ := strings.Cut(part, "\n")
		files[name] = content
	}
	all := files["all"]
	if done.Status.Phase != corev1.PodSucceeded || files["root"] != root || files["live"] != live ||
		len(all) != len(live)+len(dead) || !strings.Contains(all, live) || !strings.Contains(all, dead) || files["none"] != "" {
		t.Errorf("the Pod ended %s and read %q;\nwant root.pem the tenant's corp-root, live.pem the live signer bundle, all.pem both of the signer's, none.pem empty", done.Status.Phase, files)
	}

	held := checkPod("app", "held", `cat /ctb/later.pem`)
	held.Spec.Volumes = []corev1.Volume{{Name: "ctb", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To("later-root"), Path: "later.pem"}},
	}}}}}
	held.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "ctb", MountPath: "/ctb"}}
	if err := k.tenant.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "a FailedMount Warning Event on the held Pod", func(ctx context.Context) (bool, error) {
		var events corev1.EventList
		if err := k.tenant.List(ctx, &events, client.InNamespace("app")); err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == "held" && e.Type == corev1.EventTypeWarning && e.Reason == pods.ReasonFailedMount &&
				strings.Contains(e.Message, `"later-root"`) {
				return true, nil
			}
		}
		return false, fmt.Errorf("%d Events in app, none for it", len(events.Items))
	})
	if err := k.tenant.Get(ctx, client.ObjectKeyFromObject(held), held); err != nil {
		t.Fatal(err)
	}
	if held.Status.Phase != corev1.PodPending {
		t.Fatalf("the Pod whose bundle is missing is %s, want Pending", held.Status.Phase)
	}
	if err := k.tenant.Create(ctx, bundle("later-root", "", later, nil)); err != nil {
		t.Fatal(err)
	}
	k.await(t, held, "ended once its bundle exists", ended)
	if got := k.logs(t, "app", "held"); got != later {
		t.Errorf("the held Pod read %q, want the bundle created after it", got)
	}
}
