package syncers

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/syncer"
)

func TestVirtualClusterPolicyOverDefault(t *testing.T) {
	def := tenantryv1alpha1.HostPolicy{
		Pods: &tenantryv1alpha1.PodPolicy{
			AllowedPriorityClasses: []string{"tenant-low"},
			NodeSelector:           map[string]string{"pool": "tenants"},
		},
		Metadata:      &tenantryv1alpha1.MetadataPolicy{DeniedPrefixes: []string{"team.example.com/"}},
		ResourceQuota: &corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10")}},
	}
	if got := overDefault(def, nil); got.Pods.NodeSelector["pool"] != "tenants" || got.ResourceQuota == nil {
		t.Fatalf("no VirtualCluster policy: %+v; want the default", got)
	}
	got := overDefault(def, &tenantryv1alpha1.HostPolicy{
		Pods:       &tenantryv1alpha1.PodPolicy{AllowedPriorityClasses: []string{"tenant-high"}},
		Metadata:   &tenantryv1alpha1.MetadataPolicy{AllowedPrefixes: []string{"linkerd.io/"}, DeniedPrefixes: []string{"billing.example.com/"}},
		LimitRange: &corev1.LimitRangeSpec{},
	})
	if !slices.Equal(got.Pods.AllowedPriorityClasses, []string{"tenant-high"}) {
		t.Errorf("priority classes %v: the VirtualCluster's replace the default's", got.Pods.AllowedPriorityClasses)
	}
	if got.Pods.NodeSelector["pool"] != "tenants" || got.ResourceQuota == nil || got.LimitRange == nil {
		t.Errorf("fields the VirtualCluster leaves unset keep the default: %+v", got)
	}
	if !slices.Equal(def.Pods.AllowedPriorityClasses, []string{"tenant-low"}) {
		t.Error("the default policy was changed")
	}
	// A Pod Security level set for one tenant is its own; unset, the
	// default's.
	def.Pods.PodSecurityLevel = "restricted"
	if level := overDefault(def, &tenantryv1alpha1.HostPolicy{Pods: &tenantryv1alpha1.PodPolicy{PodSecurityLevel: "privileged"}}).Pods.PodSecurityLevel; level != "privileged" {
		t.Errorf("the VirtualCluster's Pod Security level: %q, want privileged", level)
	}
	if level := overDefault(def, &tenantryv1alpha1.HostPolicy{Pods: &tenantryv1alpha1.PodPolicy{}}).Pods.PodSecurityLevel; level != "restricted" {
		t.Errorf("no Pod Security level of the VirtualCluster's: %q, want the default's restricted", level)
	}
	def.Pods.PodSecurityLevel = ""

	// Denied egress adds up, as denied metadata prefixes do.
	def.Network = &tenantryv1alpha1.NetworkPolicy{DeniedEgressCIDRs: []string{"10.99.0.0/16"}}
	network := overDefault(def, &tenantryv1alpha1.HostPolicy{Network: &tenantryv1alpha1.NetworkPolicy{DeniedEgressCIDRs: []string{"fd00:99::/64"}}}).Network
	if !slices.Equal(network.DeniedEgressCIDRs, []string{"10.99.0.0/16", "fd00:99::/64"}) {
		t.Errorf("denied egress %v: want the default policy's and the VirtualCluster's", network.DeniedEgressCIDRs)
	}
	if !slices.Equal(def.Network.DeniedEgressCIDRs, []string{"10.99.0.0/16"}) {
		t.Error("the default policy's denied egress was changed")
	}
	// The control plane's addresses are the VirtualCluster's own, never a
	// default's (which readHostPolicy refuses).
	def.Network.ControlPlaneCIDRs = []string{"10.98.0.1/32"}
	if network := overDefault(def, &tenantryv1alpha1.HostPolicy{Network: &tenantryv1alpha1.NetworkPolicy{}}).Network; len(network.ControlPlaneCIDRs) != 0 {
		t.Errorf("control plane addresses %v: want none but the VirtualCluster's", network.ControlPlaneCIDRs)
	}
	network = overDefault(def, &tenantryv1alpha1.HostPolicy{Network: &tenantryv1alpha1.NetworkPolicy{ControlPlaneCIDRs: []string{"10.98.0.2/32"}}}).Network
	if !slices.Equal(network.ControlPlaneCIDRs, []string{"10.98.0.2/32"}) {
		t.Errorf("control plane addresses %v: want the VirtualCluster's alone", network.ControlPlaneCIDRs)
	}
	// The translation of tenant NetworkPolicies: the VirtualCluster's
	// choice over the default's; unset, the default's (unset: on).
	off, on := false, true
	def.Network.TranslatePolicies = &off
	if network := overDefault(def, &tenantryv1alpha1.HostPolicy{Network: &tenantryv1alpha1.NetworkPolicy{}}).Network; network.TranslatePolicies == nil || *network.TranslatePolicies {
		t.Errorf("translatePolicies %v: want the default's false", network.TranslatePolicies)
	}
	if network := overDefault(def, &tenantryv1alpha1.HostPolicy{Network: &tenantryv1alpha1.NetworkPolicy{TranslatePolicies: &on}}).Network; network.TranslatePolicies == nil || !*network.TranslatePolicies {
		t.Errorf("translatePolicies %v: want the VirtualCluster's true", network.TranslatePolicies)
	}

	denied, allowed := metadataPrefixes(nil, nil, got)
	if !slices.Contains(denied, "team.example.com/") || !slices.Contains(denied, "billing.example.com/") ||
		slices.Contains(denied, "linkerd.io/") || !slices.Contains(denied, "kubernetes.io/") {
		t.Errorf("denied prefixes %v: want the default list, plus the default policy's and the VirtualCluster's, less linkerd.io/", denied)
	}
	if !slices.Contains(allowed, "linkerd.io/") || !slices.Contains(allowed, "app.kubernetes.io/") {
		t.Errorf("allowed prefixes %v: want the default list and linkerd.io/", allowed)
	}
	if n := len(syncer.DefaultDeniedMetadataPrefixes); !slices.Contains(syncer.DefaultDeniedMetadataPrefixes, "linkerd.io/") || n < 10 {
		t.Error("the default deny list was changed")
	}
	_, allowed = metadataPrefixes(nil, nil, tenantryv1alpha1.HostPolicy{
		Metadata: &tenantryv1alpha1.MetadataPolicy{DeniedPrefixes: []string{"app.kubernetes.io/"}},
	})
	if slices.Contains(allowed, "app.kubernetes.io/") {
		t.Errorf("allowed prefixes %v: a VirtualCluster's denied prefix stays allowed", allowed)
	}
	if denied, _ := metadataPrefixes([]string{}, nil, tenantryv1alpha1.HostPolicy{}); len(denied) != 0 {
		t.Errorf("an empty manager list: %v; want none", denied)
	}
}

func TestReadHostPolicy(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	p, err := readHostPolicy(write("good.yaml", "pods:\n  allowedVolumeTypes: [nfs]\nresourceQuota:\n  hard:\n    pods: \"20\"\n"))
	if err != nil || p.Pods.AllowedVolumeTypes[0] != "nfs" || p.ResourceQuota.Hard.Pods().Value() != 20 {
		t.Fatalf("a good policy: %+v, %v", p, err)
	}
	for name, c := range map[string]struct{ content, want string }{
		"unknown field": {"pods:\n  allowedVolumeType: [nfs]\n", "allowedVolumeType"},
		"gitRepo":       {"pods:\n  allowedVolumeTypes: [gitRepo]\n", `"gitRepo" is not one of`},
		"pod security":  {"pods:\n  podSecurityLevel: root\n", `pods.podSecurityLevel: "root" is not one of restricted, baseline, privileged`},
		"no slash":      {"metadata:\n  deniedPrefixes: [example.com]\n", `prefix "example.com": a key prefix is a DNS subdomain and a slash`},
		"a path":        {"metadata:\n  allowedPrefixes: [example.com/foo/]\n", `prefix "example.com/foo/"`},
		"upper case":    {"metadata:\n  deniedPrefixes: [Example.com/]\n", `prefix "Example.com/"`},
		"a bare key":    {"metadata:\n  deniedPrefixes: [Version]\n", `prefix "Version"`},
		"not a CIDR":    {"network:\n  deniedEgressCIDRs: [10.0.0.1]\n", `network.deniedEgressCIDRs: "10.0.0.1" is not a CIDR`},
		"v4-mapped":     {"network:\n  deniedEgressCIDRs: [\"::ffff:0:0/96\"]\n", `::ffff:0:0/96 is an IPv4-mapped IPv6 prefix`},
		"every address": {"network:\n  deniedEgressCIDRs: [\"::/0\"]\n", `::/0 is every address`},
		"control plane": {"network:\n  controlPlaneCIDRs: [10.0.0.5]\n", `network.controlPlaneCIDRs: "10.0.0.5" is not a CIDR`},
		"shared control plane addresses": {"network:\n  controlPlaneCIDRs: [10.0.0.5/32]\n",
			"network.controlPlaneCIDRs belongs to one VirtualCluster's control plane: set it in that VirtualCluster's spec.hostPolicy, never in the default"},
	} {
		if _, err := readHostPolicy(write(name, c.content)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %q", name, err, c.want)
		}
	}
}

// The prefix flags take prefixes in any case, stored lower-cased, and
// refuse what is not a domain and a slash.
func TestParsePrefixes(t *testing.T) {
	var list []string
	if err := parsePrefixes("Mesh.Example.COM/, team.example.com/", &list); err != nil || !slices.Equal(list, []string{"mesh.example.com/", "team.example.com/"}) {
		t.Errorf("parsed %v, %v", list, err)
	}
	if err := parsePrefixes("", &list); err != nil || list == nil || len(list) != 0 {
		t.Errorf("an empty value: %v, %v; want an empty, non-nil list (none denied)", list, err)
	}
	if err := parsePrefixes("example.com/,aadpodidbinding", &list); err != nil || !slices.Equal(list, []string{"example.com/", "aadpodidbinding"}) {
		t.Errorf("a key without a prefix: %v, %v", list, err)
	}
	for _, bad := range []string{"example.com", "example.com/x/", "/", "exa_mple.com/", "bad!key", "-key"} {
		if err := parsePrefixes(bad, &list); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}

// --sync-custom-resources takes group/version/Kind, or version/Kind for the
// core group.
func TestParseGVK(t *testing.T) {
	for in, want := range map[string]schema.GroupVersionKind{
		"samples.tenantry.dev/v1alpha1/Foo": {Group: "samples.tenantry.dev", Version: "v1alpha1", Kind: "Foo"},
		"v1/ConfigMap":                      {Version: "v1", Kind: "ConfigMap"},
	} {
		got, err := parseGVK(in)
		if err != nil || got != want {
			t.Errorf("parseGVK(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "Foo", "a/b/c/d", "g//K"} {
		if _, err := parseGVK(bad); err == nil {
			t.Errorf("parseGVK(%q) accepted", bad)
		}
	}
}
