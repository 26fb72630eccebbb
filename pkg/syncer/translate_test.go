package syncer

import (
	"strings"
	"testing"

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
