package syncer

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestHostNamespace(t *testing.T) {
	got := HostNamespace("tenant-1", "default")
	if !strings.HasPrefix(got, "tenant-1-") || !strings.HasSuffix(got, "-default") || len(got) != len("tenant-1--default")+hashLength {
		t.Fatalf("HostNamespace(tenant-1, default) = %q, want tenant-1-<hash>-default", got)
	}
	if HostNamespace("tenant-1", "default") != got {
		t.Fatal("not deterministic")
	}
	for _, tc := range []struct{ cluster, ns string }{
		{"a", "b"},
		{strings.Repeat("c", 253), strings.Repeat("n", 63)},
		{strings.Repeat("c", 40), "default"},
		{"vc", strings.Repeat("n", 63)},
		{"my.cluster.example", "kube-system"},
		{strings.Repeat("a-", 30) + "a", strings.Repeat("b-", 31) + "b"},
	} {
		checkHostNamespace(t, tc.cluster, tc.ns)
	}
	// Same string pieces, split differently, still differ.
	if HostNamespace("a-b", "c") == HostNamespace("a", "b-c") {
		t.Fatal("(a-b, c) and (a, b-c) share a host namespace")
	}
}

func checkHostNamespace(t testing.TB, cluster, ns string) string {
	t.Helper()
	got := HostNamespace(cluster, ns)
	if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
		t.Fatalf("HostNamespace(%q, %q) = %q: not a DNS-1123 label: %v", cluster, ns, got, errs)
	}
	return got
}

// validPair says whether cluster and ns are names Kubernetes accepts for a
// VirtualCluster (DNS-1123 subdomain) and a namespace (DNS-1123 label).
func validPair(cluster, ns string) bool {
	return len(validation.IsDNS1123Subdomain(cluster)) == 0 && len(validation.IsDNS1123Label(ns)) == 0
}

// FuzzHostNamespace checks, for any valid names, that the host namespace
// is a valid DNS-1123 label, and that two distinct pairs never share one.
func FuzzHostNamespace(f *testing.F) {
	f.Add("tenant-1", "default", "tenant-2", "default")
	f.Add("a-b", "c", "a", "b-c")
	f.Add(strings.Repeat("x", 100), strings.Repeat("y", 60)+"a", strings.Repeat("x", 100), strings.Repeat("y", 60)+"b")
	f.Add("a.b", "c", "a-b", "c")
	f.Fuzz(func(t *testing.T, c1, n1, c2, n2 string) {
		if !validPair(c1, n1) || !validPair(c2, n2) {
			t.Skip()
		}
		h1, h2 := checkHostNamespace(t, c1, n1), checkHostNamespace(t, c2, n2)
		if (c1 != c2 || n1 != n2) && h1 == h2 {
			t.Fatalf("(%q, %q) and (%q, %q) share host namespace %q", c1, n1, c2, n2, h1)
		}
	})
}

// A denied prefix covers its domain's subdomains, in any case; an allowed
// prefix wins where it is the longer; Tenantry's own keys never pass.
func TestDeniedMetadataKeys(t *testing.T) {
	defaults := translator{Cluster: "vc"}
	// As a VirtualCluster's allowedPrefixes make it: off the denied list,
	// onto the allowed one.
	linkerdAllowed := translator{
		Cluster:                 "vc",
		DeniedMetadataPrefixes:  slices.DeleteFunc(slices.Clone(DefaultDeniedMetadataPrefixes), func(p string) bool { return p == "linkerd.io/" }),
		AllowedMetadataPrefixes: append([]string{"linkerd.io/"}, DefaultAllowedMetadataPrefixes...),
	}
	appDenied := translator{Cluster: "vc", DeniedMetadataPrefixes: []string{"app.kubernetes.io/"}}
	for _, c := range []struct {
		tr     translator
		key    string
		denied bool
	}{
		{defaults, "app", false},
		{defaults, "team.example.com/owner", false},
		{defaults, "kubernetes.io/ingress.class", true},
		{defaults, "volume.kubernetes.io/selected-node", true},
		{defaults, "pv.kubernetes.io/bind-completed", true},
		{defaults, "scheduler.alpha.kubernetes.io/node-selector", true},
		{defaults, "service.kubernetes.io/service-proxy-name", true},
		{defaults, "Volume.Kubernetes.IO/selected-node", true},
		{defaults, "notkubernetes.io/x", false},
		{defaults, "app.kubernetes.io/name", false},
		{defaults, "statefulset.kubernetes.io/pod-name", false},
		{defaults, "batch.kubernetes.io/job-completion-index", false},
		{defaults, "k8s.v1.cni.cncf.io/networks", true},
		{defaults, "traffic.sidecar.istio.io/excludeOutboundIPRanges", true},
		{defaults, "eks.amazonaws.com/role-arn", true},
		{defaults, "consul.hashicorp.com/connect-inject", true},
		{defaults, "config.linkerd.io/skip-outbound-ports", true},
		{defaults, "tenantry.dev/cluster", true},
		{defaults, "x.tenantry.dev/y", true},
		{linkerdAllowed, "config.linkerd.io/skip-outbound-ports", false},
		{linkerdAllowed, "tenantry.dev/cluster", true},
		{translator{Cluster: "vc", AllowedMetadataPrefixes: []string{"tenantry.dev/"}}, "tenantry.dev/cluster", true},
		{translator{Cluster: "vc", DeniedMetadataPrefixes: []string{}}, "kubernetes.io/x", false},
		{appDenied, "app.kubernetes.io/name", true}, // a tie goes to the denied
		{appDenied, "kubernetes.io/x", false},
		{defaults, "prometheus.io/scrape", true},
		{defaults, "aadpodidbinding", true},
		{defaults, "AADPodIDBinding", true},
		{defaults, "istio-injection", true},
		{defaults, "kueue.x-k8s.io/queue-name", true},
		{defaults, "scheduling.x-k8s.io/pod-group", true},
		{defaults, "cluster-autoscaler.kubernetes.io/safe-to-evict", true},
		{translator{Cluster: "vc", AllowedMetadataPrefixes: []string{"kueue.x-k8s.io/"}}, "kueue.x-k8s.io/queue-name", false},
		{translator{Cluster: "vc", AllowedMetadataPrefixes: []string{"kueue.x-k8s.io/"}}, "scheduling.x-k8s.io/pod-group", true},
		// Keys without a prefix: named one by one, denied or opened.
		{translator{Cluster: "vc", DeniedMetadataPrefixes: []string{"version"}}, "version", true},
		{translator{Cluster: "vc", DeniedMetadataPrefixes: []string{"version"}}, "Version", true},
		{translator{Cluster: "vc", DeniedMetadataPrefixes: []string{"version"}}, "versions", false},
		{translator{Cluster: "vc", DeniedMetadataPrefixes: []string{"version"}}, "version/x", false}, // names a key, covers no domain
		{translator{Cluster: "vc", DeniedMetadataPrefixes: []string{"version"}}, "aadpodidbinding", false},
		{translator{Cluster: "vc", AllowedMetadataPrefixes: []string{"aadpodidbinding"}}, "aadpodidbinding", false},
		{translator{Cluster: "vc", AllowedMetadataPrefixes: []string{"aadpodidbinding"}}, "istio-injection", true},
	} {
		if got := c.tr.denied(c.key); got != c.denied {
			t.Errorf("denied(%q) = %v, want %v (denied %v, allowed %v)", c.key, got, c.denied, c.tr.DeniedMetadataPrefixes, c.tr.AllowedMetadataPrefixes)
		}
	}
}

// A syncer that denies unprefixed annotations (Pods') keeps them off its
// host copies, and takes off those it copied before; unprefixed labels
// still pass.
func TestHostMetadataDeniesUnprefixedAnnotations(t *testing.T) {
	tenant := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p",
		Labels:      map[string]string{"app": "web"},
		Annotations: map[string]string{"io.kubernetes.cri-o.Devices": "/dev/kvm", "io.katacontainers.config.hypervisor.kernel": "/evil", "team.example.com/owner": "blue"},
	}}
	host := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1", Annotations: map[string]string{
		AnnotationSyncedDigest:        "x",
		AnnotationCopiedAnnotations:   "io.kubernetes.cri-o.Devices,team.example.com/owner",
		"io.kubernetes.cri-o.Devices": "/dev/kvm",
	}}}
	tr := translator{Cluster: "vc", DenyUnprefixedAnnotations: true}
	tr.hostMetadata(tenant, host, false, true)
	want := map[string]string{"team.example.com/owner": "blue"}
	for k := range tenant.Annotations {
		if got, ok := host.Annotations[k]; (want[k] != "") != ok || ok && got != want[k] {
			t.Errorf("host annotation %s = %q (present %v); want %q", k, got, ok, want[k])
		}
	}
	if host.Labels["app"] != "web" {
		t.Errorf("host labels %v: the unprefixed label app is copied", host.Labels)
	}
	// Without the denial (a ConfigMap's, or a policy that copies them),
	// they pass.
	cm := &corev1.ConfigMap{}
	translator{Cluster: "vc"}.hostMetadata(tenant, cm, false, true)
	if cm.Annotations["io.kubernetes.cri-o.Devices"] != "/dev/kvm" {
		t.Errorf("annotations %v: unprefixed ones pass where not denied", cm.Annotations)
	}
}

// Tenant labels and annotations reach the host copy except denied ones;
// one removed in the tenant goes from the host copy, one the host added
// stays.
func TestHostMetadataCopiesAllowedKeysAndRemovals(t *testing.T) {
	tr := translator{Cluster: "vc"}
	tenant := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default", Name: "web", UID: "u1",
		Labels: map[string]string{"app": "web", "tier": "front", "tenantry.dev/cluster": "other"},
		Annotations: map[string]string{
			"team":                        "blue",
			"k8s.v1.cni.cncf.io/networks": "host-net",
			"eks.amazonaws.com/role-arn":  "arn:aws:iam::1:role/admin",
			"sidecar.istio.io/inject":     "true",
		},
	}}
	host := &corev1.ConfigMap{}
	tr.hostMetadata(tenant, host, false, true)
	if host.Labels["app"] != "web" || host.Labels["tier"] != "front" || host.Labels["tenantry.dev/cluster"] != "vc" {
		t.Fatalf("host labels %v", host.Labels)
	}
	for _, k := range []string{"k8s.v1.cni.cncf.io/networks", "eks.amazonaws.com/role-arn", "sidecar.istio.io/inject"} {
		if _, ok := host.Annotations[k]; ok {
			t.Errorf("denied annotation %s reached the host", k)
		}
	}
	if host.Annotations["team"] != "blue" {
		t.Errorf("annotation team did not reach the host: %v", host.Annotations)
	}

	host.Labels["host-added"] = "yes" // a host controller's
	delete(tenant.Labels, "tier")
	delete(tenant.Annotations, "team")
	tr.hostMetadata(tenant, host, false, true)
	if _, ok := host.Labels["tier"]; ok {
		t.Error("a label removed in the tenant stayed in the host")
	}
	if _, ok := host.Annotations["team"]; ok {
		t.Error("an annotation removed in the tenant stayed in the host")
	}
	if host.Labels["host-added"] != "yes" || host.Labels["app"] != "web" {
		t.Errorf("host labels %v: want the host's own and the tenant's remaining ones kept", host.Labels)
	}

	// With no deny list the mesh annotation goes down; denied again, it
	// goes from the host.
	open := translator{Cluster: "vc", DeniedMetadataPrefixes: []string{}}
	open.hostMetadata(tenant, host, false, true)
	if host.Annotations["sidecar.istio.io/inject"] != "true" {
		t.Fatalf("with no deny list, annotations %v", host.Annotations)
	}
	tr.hostMetadata(tenant, host, false, true)
	if _, ok := host.Annotations["sidecar.istio.io/inject"]; ok {
		t.Error("an annotation denied after it was copied stayed in the host")
	}
}

// A host copy written before Tenantry kept records loses the denied keys
// it has from its tenant object; one written since keeps a denied key the
// host added.
func TestHostMetadataCleansCopiesWithoutRecords(t *testing.T) {
	tr := translator{Cluster: "vc"}
	tenant := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: "default", Name: "web", UID: "u1",
		Labels: map[string]string{"app": "web", "linkerd.io/inject": "enabled"},
	}}
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		ResourceVersion: "7", Labels: map[string]string{"app": "web", "linkerd.io/inject": "enabled"},
	}}
	tr.hostMetadata(tenant, old, false, true)
	if _, ok := old.Labels["linkerd.io/inject"]; ok || old.Labels["app"] != "web" {
		t.Errorf("an old copy's labels %v: want the denied key gone, app kept", old.Labels)
	}

	recent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		ResourceVersion: "8", Labels: map[string]string{"app": "web", "linkerd.io/inject": "enabled"},
		Annotations: map[string]string{AnnotationSyncedDigest: "d", AnnotationCopiedLabels: "app"},
	}}
	tr.hostMetadata(tenant, recent, false, true)
	if recent.Labels["linkerd.io/inject"] != "enabled" {
		t.Errorf("a recent copy's labels %v: the host's own denied key must stay", recent.Labels)
	}
}

// The whole of a host copy's labels and annotations: Tenantry's identity
// always, over forged keys; the tenant's own keys, less denied ones, with a
// record of them, when the syncer copies user metadata; the host's own keys
// kept.
func TestHostMetadata(t *testing.T) {
	identity := func(extra map[string]string) map[string]string {
		m := map[string]string{AnnotationTenantNamespace: "default", AnnotationTenantName: "web", AnnotationTenantUID: "u1"}
		maps.Copy(m, extra)
		return m
	}
	ours := func(extra map[string]string) map[string]string {
		m := map[string]string{LabelManagedBy: ManagedByValue, LabelCluster: "vc"}
		maps.Copy(m, extra)
		return m
	}
	for _, tc := range []struct {
		name                  string
		labels, annotations   map[string]string // the tenant object's
		host                  *corev1.ConfigMap // as it is; nil: new
		copyUser              bool
		wantLabels, wantAnnos map[string]string
	}{
		{
			name:       "not copying user metadata: Tenantry's identity only",
			labels:     map[string]string{"app": "web"},
			copyUser:   false,
			wantLabels: ours(nil), wantAnnos: identity(nil),
		},
		{
			name:        "copied, with a record of the keys",
			labels:      map[string]string{"app": "web", "tier": "front"},
			annotations: map[string]string{"team": "blue"},
			copyUser:    true,
			wantLabels:  ours(map[string]string{"app": "web", "tier": "front"}),
			wantAnnos:   identity(map[string]string{"team": "blue", AnnotationCopiedLabels: "app,tier", AnnotationCopiedAnnotations: "team"}),
		},
		{
			name:        "forged identity and denied keys left out",
			labels:      map[string]string{LabelCluster: "other", LabelManagedBy: "me", "kubernetes.io/metadata.name": "kube-system", "app": "web"},
			annotations: map[string]string{AnnotationTenantUID: "forged", AnnotationCopiedLabels: "x", "eks.amazonaws.com/role-arn": "admin", "app.kubernetes.io/name": "web"},
			copyUser:    true,
			wantLabels:  ours(map[string]string{"app": "web"}),
			wantAnnos:   identity(map[string]string{"app.kubernetes.io/name": "web", AnnotationCopiedLabels: "app", AnnotationCopiedAnnotations: "app.kubernetes.io/name"}),
		},
		{
			name:     "updated: a key the tenant removed goes, the host's own stay",
			labels:   map[string]string{"app": "web"},
			copyUser: true,
			host: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "4",
				Labels: map[string]string{"app": "web", "tier": "front", "host-label": "h", LabelManagedBy: ManagedByValue, LabelCluster: "vc"},
				Annotations: map[string]string{AnnotationSyncedDigest: "d", AnnotationCopiedLabels: "app,tier", AnnotationCopiedAnnotations: "team",
					"team": "blue", "host-annotation": "h"}}},
			wantLabels: ours(map[string]string{"app": "web", "host-label": "h"}),
			wantAnnos:  identity(map[string]string{AnnotationSyncedDigest: "d", AnnotationCopiedLabels: "app", "host-annotation": "h"}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tenant := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u1",
				Labels: maps.Clone(tc.labels), Annotations: maps.Clone(tc.annotations)}}
			host := &corev1.ConfigMap{}
			if tc.host != nil {
				host = tc.host.DeepCopy()
			}
			translator{Cluster: "vc"}.hostMetadata(tenant, host, false, tc.copyUser)
			if want := HostNamespace("vc", "default"); host.Namespace != want || host.Name != "web" {
				t.Errorf("host key %s/%s, want %s/web", host.Namespace, host.Name, want)
			}
			if !maps.Equal(host.Labels, tc.wantLabels) {
				t.Errorf("labels\n got %v\nwant %v", host.Labels, tc.wantLabels)
			}
			if !maps.Equal(host.Annotations, tc.wantAnnos) {
				t.Errorf("annotations\n got %v\nwant %v", host.Annotations, tc.wantAnnos)
			}
		})
	}
}
