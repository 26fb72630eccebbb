package pods

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// A podCertificate projection becomes the Secret's items of the files it
// asked for, and nothing else.
func TestAPIAccessProjectsPodCertificates(t *testing.T) {
	spec := corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app"}},
		Volumes: []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
				{PodCertificate: &corev1.PodCertificateProjection{SignerName: "example.com/pods", KeyPath: "tls.key", CertificateChainPath: "tls.crt"}},
			},
		}}}},
	}
	if err := APIAccess("web", &spec); err != nil {
		t.Fatal(err)
	}
	key := podCertificateKey("cert", 1)
	want := corev1.VolumeProjection{Secret: &corev1.SecretProjection{
		LocalObjectReference: corev1.LocalObjectReference{Name: apiAccessSecretName("web")},
		Items:                []corev1.KeyToPath{{Key: key + podCertKey, Path: "tls.key"}, {Key: key + podCertChain, Path: "tls.crt"}},
	}}
	if got := spec.Volumes[0].Projected.Sources[1]; got.String() != want.String() {
		t.Errorf("the projection became %s, want %s", got.String(), want.String())
	}
	if podCertificateKey("cert", 0) == key || podCertificateKey("other", 1) == key {
		t.Error("two projections share a key")
	}

	// As a kubelet writes a credential: 0600 when the Pod has an fsGroup
	// or a user owns the file, owned by the projection's user.
	for _, tc := range []struct {
		name     string
		fsGroup  *int64
		user     *int64
		wantMode *int32
	}{
		{"neither", nil, nil, nil},
		{"fsGroup", ptr.To[int64](2000), nil, ptr.To[int32](0o600)},
		{"user", nil, ptr.To[int64](1000), ptr.To[int32](0o600)},
	} {
		spec := corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{FSGroup: tc.fsGroup},
			Volumes: []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{
					{PodCertificate: &corev1.PodCertificateProjection{SignerName: "example.com/pods", KeyPath: "tls.key", User: tc.user}},
					{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To("root"), Path: "ca.pem", User: tc.user}},
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", User: tc.user}},
				},
			}}}},
		}
		if err := APIAccess("web", &spec); err != nil {
			t.Fatal(err)
		}
		for _, src := range spec.Volumes[0].Projected.Sources {
			item := src.Secret.Items[0]
			if !reflect.DeepEqual(item.Mode, tc.wantMode) || !reflect.DeepEqual(item.User, tc.user) {
				t.Errorf("%s: %s has mode %v, user %v; want %v, %v", tc.name, item.Path, ptr.Deref(item.Mode, -1), item.User, ptr.Deref(tc.wantMode, -1), tc.user)
			}
		}
	}
}

// fill does what a kubelet does for a projection: it asks once, waits,
// writes the issued key and chain, keeps them until the signer's refresh
// time, and asks again after a denial only when the denial has held a
// while.
func TestPodCertificatesFill(t *testing.T) {
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web", UID: "pod-uid"},
		Spec: corev1.PodSpec{NodeName: "node-a", Volumes: []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{PodCertificate: &corev1.PodCertificateProjection{SignerName: "example.com/pods", CredentialBundlePath: "b.pem"}}},
		}}}}},
	}
	tenant := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "default", UID: "sa-uid"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "node-uid"}},
	).WithStatusSubresource(&certificatesv1.PodCertificateRequest{}).Build()
	asked := 0
	c := podCertificates{tenant: tenant, live: tenant, served: true, count: func(string) { asked++ }}
	key := podCertificateKey("cert", 0)
	requests := func() []certificatesv1.PodCertificateRequest {
		var list certificatesv1.PodCertificateRequestList
		if err := tenant.List(ctx, &list); err != nil {
			t.Fatal(err)
		}
		return list.Items
	}

	const room = maxAPIAccessBytes
	// Not on a node yet: nothing asked, looked at again soon.
	unbound := pod.DeepCopy()
	unbound.Spec.NodeName = ""
	data := map[string][]byte{}
	if next, unfilled := c.fill(ctx, unbound, nil, data, room); asked != 0 || len(unfilled) > 0 || next.IsZero() || time.Until(next) > unboundRetry {
		t.Fatalf("unbound: asked %d times, %q, next %v", asked, unfilled, next)
	}
	// No room left in the Secret: nothing asked, and told.
	if _, unfilled := c.fill(ctx, pod, nil, data, podCertRoom-1); asked != 0 || len(unfilled) != 1 || !strings.Contains(unfilled[0], "exceed") {
		t.Fatalf("no room: asked %d times, %q", asked, unfilled)
	}

	// Asked.
	data = map[string][]byte{}
	if _, unfilled := c.fill(ctx, pod, nil, data, room); len(unfilled) > 0 {
		t.Fatalf("fill: %v", unfilled)
	}
	reqs := requests()
	if len(reqs) != 1 || string(data[key+podCertPendingName]) != reqs[0].Name || len(data[key+podCertPendingKey]) == 0 || data[key+podCertBundle] != nil {
		t.Fatalf("after the first fill: %d requests, data keys %v", len(reqs), keys(data))
	}
	if s := reqs[0].Spec; s.PodUID != "pod-uid" || s.ServiceAccountUID != "sa-uid" || s.NodeName != "node-a" || s.NodeUID != "node-uid" ||
		len(reqs[0].OwnerReferences) != 1 || reqs[0].OwnerReferences[0].UID != "pod-uid" {
		t.Errorf("the request: %+v, owners %+v", s, reqs[0].OwnerReferences)
	}

	// Pending: asked no more.
	old, data := data, map[string][]byte{}
	if c.fill(ctx, pod, old, data, room); asked != 1 || string(data[key+podCertPendingName]) != reqs[0].Name {
		t.Fatalf("pending: asked %d times", asked)
	}

	// Issued: the key that was asked with, then the chain; kept until the
	// refresh time.
	refreshAt := time.Now().Add(time.Hour).Truncate(time.Second)
	leaf := testCertPEM(t, "leaf")
	pcr := reqs[0]
	pcr.Status = certificatesv1.PodCertificateRequestStatus{CertificateChain: "text around the blocks\n" + string(leaf), BeginRefreshAt: ptr.To(metav1.NewTime(refreshAt))}
	if err := tenant.Status().Update(ctx, &pcr); err != nil {
		t.Fatal(err)
	}
	old, data = data, map[string][]byte{}
	if next, _ := c.fill(ctx, pod, old, data, room); !next.Equal(refreshAt) {
		t.Fatalf("issued: next %v, want %v", next, refreshAt)
	}
	if string(data[key+podCertKey]) != string(old[key+podCertPendingKey]) || string(data[key+podCertChain]) != string(leaf) ||
		string(data[key+podCertBundle]) != string(data[key+podCertKey])+string(data[key+podCertChain]) || data[key+podCertPendingKey] != nil {
		t.Fatalf("issued: data keys %v", keys(data))
	}
	old, data = data, map[string][]byte{}
	if c.fill(ctx, pod, old, data, room); asked != 1 || string(data[key+podCertBundle]) != string(old[key+podCertBundle]) {
		t.Fatalf("fresh: asked %d times", asked)
	}

	// Due: asked again, and the old credential serves meanwhile; denied:
	// told, the old credential kept, and never asked again, as a kubelet.
	old[key+podCertRefreshAt] = []byte(time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
	data = map[string][]byte{}
	if c.fill(ctx, pod, old, data, room); asked != 2 || string(data[key+podCertBundle]) != string(old[key+podCertBundle]) {
		t.Fatalf("due: asked %d times", asked)
	}
	var second certificatesv1.PodCertificateRequest
	if err := tenant.Get(ctx, client.ObjectKey{Namespace: "app", Name: string(data[key+podCertPendingName])}, &second); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&second.Status.Conditions, metav1.Condition{Type: certificatesv1.PodCertificateRequestConditionTypeDenied, Status: metav1.ConditionTrue, Reason: "NotAllowed", Message: "no"})
	if err := tenant.Status().Update(ctx, &second); err != nil {
		t.Fatal(err)
	}
	old, data = data, map[string][]byte{}
	if _, unfilled := c.fill(ctx, pod, old, data, room); len(unfilled) != 1 || !strings.Contains(unfilled[0], "denied (NotAllowed: no)") ||
		data[key+podCertRefused] == nil || data[key+podCertBundle] == nil {
		t.Fatalf("denied: %q, data keys %v", unfilled, keys(data))
	}
	old, data = data, map[string][]byte{}
	if _, unfilled := c.fill(ctx, pod, old, data, room); asked != 2 || len(unfilled) > 0 {
		t.Fatalf("after a denial: asked %d times, %q", asked, unfilled)
	}

	// A request that cannot be made (no ServiceAccount): told, tried again
	// a minute later, not at once.
	lonely := pod.DeepCopy()
	lonely.UID, lonely.Spec.ServiceAccountName = "other-uid", "missing"
	data = map[string][]byte{}
	next, unfilled := c.fill(ctx, lonely, nil, data, room)
	if len(unfilled) != 1 || !strings.Contains(unfilled[0], "ServiceAccount app/missing") || data[key+podCertRetryAt] == nil || time.Until(next) < podCertRetryAfter-time.Second {
		t.Fatalf("no ServiceAccount: %q, next %v", unfilled, next)
	}
	old, data = data, map[string][]byte{}
	if _, unfilled := c.fill(ctx, lonely, old, data, room); len(unfilled) > 0 || data[key+podCertRetryAt] == nil {
		t.Fatalf("before the retry: %q, data keys %v", unfilled, keys(data))
	}
	old[key+podCertRetryAt] = []byte(time.Now().Add(-time.Second).UTC().Format(time.RFC3339))
	if _, unfilled := c.fill(ctx, lonely, old, map[string][]byte{}, room); len(unfilled) != 1 {
		t.Fatalf("at the retry: %q, want it tried and told again", unfilled)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k[strings.LastIndex(k, "-"):])
	}
	return out
}
