package pods

import (
	"bytes"
	"encoding/pem"
	"slices"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// A clusterTrustBundle projection becomes an item of the Pod's API access
// Secret, under a key that names what it asks, at the path it asked for;
// the other sources of its volume stay as they were.
func TestAPIAccessProjectsTheTenantsTrustBundles(t *testing.T) {
	byName := &corev1.ClusterTrustBundleProjection{Name: ptr.To("corp-root"), Path: "root.pem"}
	bySigner := &corev1.ClusterTrustBundleProjection{SignerName: ptr.To("example.com/signer"), LabelSelector: &metav1.LabelSelector{}, Path: "all.pem", Optional: ptr.To(true)}
	spec := corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app"}},
		Volumes: []corev1.Volume{{Name: "trust", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{
				{ClusterTrustBundle: byName},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
				{ClusterTrustBundle: bySigner},
			},
		}}}},
	}
	if err := APIAccess("web", &spec); err != nil {
		t.Fatal(err)
	}
	secret := apiAccessSecretName("web")
	got := spec.Volumes[0].Projected.Sources
	want := []corev1.VolumeProjection{
		{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Items: []corev1.KeyToPath{{Key: trustBundleKey(byName), Path: "root.pem"}}}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
		{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Items: []corev1.KeyToPath{{Key: trustBundleKey(bySigner), Path: "all.pem"}}}},
	}
	if len(got) != len(want) {
		t.Fatalf("sources %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i].String() {
			t.Errorf("source %d = %s, want %s", i, got[i].String(), want[i].String())
		}
	}
	if !usesAPIAccess(&spec, secret) {
		t.Error("the host Pod does not read its API access Secret")
	}
}

// Two projections that ask the same share a key; any two that ask
// something else do not, a nil label selector (nothing) and an empty one
// (everything) included, and an optional projection and one that is not
// (nothing found, one is an empty file, the other holds the Pod back);
// every key is a valid Secret key.
func TestTrustBundleKeys(t *testing.T) {
	signer := ptr.To("example.com/signer")
	asks := map[string]*corev1.ClusterTrustBundleProjection{
		"name":                  {Name: ptr.To("a")},
		"other name":            {Name: ptr.To("b")},
		"signer, nil selector":  {SignerName: signer},
		"signer, everything":    {SignerName: signer, LabelSelector: &metav1.LabelSelector{}},
		"signer, labelled":      {SignerName: signer, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"live": "true"}}},
		"other signer":          {SignerName: ptr.To("example.com/other"), LabelSelector: &metav1.LabelSelector{}},
		"name like a signer":    {Name: ptr.To("example.com/signer")},
		"signer with a \\x00":   {SignerName: ptr.To("a\x00selector")},
		"signer, matchExpr":     {SignerName: signer, LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "live", Operator: metav1.LabelSelectorOpExists}}}},
		"signer, other labels":  {SignerName: signer, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"live": "false"}}},
		"signer, nil, optional": {SignerName: signer, Optional: ptr.To(true)},
		"name, optional":        {Name: ptr.To("a"), Optional: ptr.To(true)},
	}
	seen := map[string]string{}
	for what, p := range asks {
		key := trustBundleKey(p)
		if other, ok := seen[key]; ok {
			t.Errorf("%s and %s share key %s", what, other, key)
		}
		seen[key] = what
		if errs := validation.IsConfigMapKey(key); len(errs) > 0 {
			t.Errorf("%s: key %q is not a Secret key: %v", what, key, errs)
		}
		same := *p
		same.Path = "elsewhere.pem"
		if trustBundleKey(&same) != key {
			t.Errorf("%s: the path changed the key", what)
		}
	}
}

// The anchors are those a kubelet writes: each certificate once, as a PEM
// CERTIFICATE block, whatever bundle brought it; in one order whatever
// the order of the bundles.
func TestNormalizeTrustAnchors(t *testing.T) {
	a, b, c := testCertPEM(t, "a"), testCertPEM(t, "b"), testCertPEM(t, "c")
	bundle := func(pems ...[]byte) certificatesv1.ClusterTrustBundle {
		return certificatesv1.ClusterTrustBundle{Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: string(bytes.Join(pems, []byte("\n")))}}
	}
	one := normalizeTrustAnchors([]certificatesv1.ClusterTrustBundle{bundle(a, b), bundle(b, c)})
	other := normalizeTrustAnchors([]certificatesv1.ClusterTrustBundle{bundle(c), bundle(b, a, a)})
	if !bytes.Equal(one, other) {
		t.Errorf("the order of the bundles changed the anchors:\n%s\n---\n%s", one, other)
	}
	var ders [][]byte
	for rest := one; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				t.Errorf("left over after the PEM blocks: %q", rest)
			}
			break
		}
		if block.Type != "CERTIFICATE" {
			t.Errorf("a %s block", block.Type)
		}
		ders = append(ders, block.Bytes)
	}
	if len(ders) != 3 {
		t.Fatalf("%d certificates, want a, b and c once each", len(ders))
	}
	for _, want := range [][]byte{a, b, c} {
		block, _ := pem.Decode(want)
		if !bytes.Contains(one, pem.EncodeToMemory(block)) {
			t.Errorf("a certificate is missing:\n%s", want)
		}
	}
	if got := normalizeTrustAnchors(nil); got == nil || len(got) != 0 {
		t.Errorf("no bundles: %q, want an empty file", got)
	}
}

func testCertPEM(t *testing.T, cn string) []byte {
	t.Helper()
	crt, err := tenantrytest.CACertificatePEM(cn)
	if err != nil {
		t.Fatal(err)
	}
	return crt
}

// A ClusterTrustBundle's change reaches the Pods that project it by its
// name or by its signer, each once, and no other Pod.
func TestABundleReachesThePodsThatReadIt(t *testing.T) {
	pod := func(name string, projections ...*corev1.ClusterTrustBundleProjection) *corev1.Pod {
		var sources []corev1.VolumeProjection
		for _, p := range projections {
			sources = append(sources, corev1.VolumeProjection{ClusterTrustBundle: p})
		}
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name},
			Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "trust", VolumeSource: corev1.VolumeSource{
				Projected: &corev1.ProjectedVolumeSource{Sources: sources},
			}}}},
		}
	}
	byName := &corev1.ClusterTrustBundleProjection{Name: ptr.To("corp-root"), Path: "a.pem"}
	bySigner := &corev1.ClusterTrustBundleProjection{SignerName: ptr.To("example.com/signer"), LabelSelector: &metav1.LabelSelector{}, Path: "b.pem"}
	otherSigner := &corev1.ClusterTrustBundleProjection{SignerName: ptr.To("example.com/other"), Path: "c.pem"}
	tenant := fake.NewClientBuilder().WithIndex(&corev1.Pod{}, podBundleIndex, bundlesRead).WithObjects(
		pod("named", byName),
		pod("signed", bySigner, bySigner),
		pod("both", byName, bySigner),
		pod("other", otherSigner),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "plain"}},
	).Build()

	for _, c := range []struct {
		bundle *certificatesv1.ClusterTrustBundle
		want   []string
	}{
		{&certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "corp-root"}}, []string{"both", "named"}},
		{&certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "example.com:signer:abc"}, Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/signer"}}, []string{"both", "signed"}},
		{&certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "corp-root"}, Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/signer"}}, []string{"both", "named", "signed"}},
		{&certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: "unread"}, Spec: certificatesv1.ClusterTrustBundleSpec{SignerName: "example.com/unused"}}, nil},
	} {
		requests, err := podsReadingBundle(t.Context(), tenant, c.bundle)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range requests {
			got = append(got, r.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) || slices.ContainsFunc(requests, func(r reconcile.Request) bool { return r.Namespace != "app" }) {
			t.Errorf("bundle %s of signer %q reaches %v; want %v", c.bundle.Name, c.bundle.Spec.SignerName, requests, c.want)
		}
	}
}
