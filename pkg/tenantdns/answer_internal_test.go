package tenantdns

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// A Service answers with its cluster IP, unless the Service syncer named
// the host cluster IP that serves it in its stead (a tenant whose service
// range does not hold its host's): that one, since the tenant's own
// reaches nothing. An annotation that is not an IP changes nothing.
func TestServiceAnswersWithTheHostClusterIPItCouldNotTake(t *testing.T) {
	service := func(name string, annotations map[string]string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name, Annotations: annotations},
			Spec:       corev1.ServiceSpec{ClusterIP: "10.0.0.7", ClusterIPs: []string{"10.0.0.7"}},
		}
	}
	reader := fake.NewClientBuilder().WithObjects(
		service("own", nil),
		service("moved", map[string]string{AnnotationHostClusterIP: "10.96.3.4"}),
		service("garbled", map[string]string{AnnotationHostClusterIP: "not-an-ip"}),
	).Build()
	s := &Server{}
	for name, want := range map[string]string{"own": "10.0.0.7", "moved": "10.96.3.4", "garbled": "10.0.0.7"} {
		q := dns.Question{Name: name + ".app.svc.cluster.local.", Qtype: dns.TypeA, Qclass: dns.ClassINET}
		answers, _, err := s.service(t.Context(), &tenantEntry{Tenant: Tenant{Name: "t", Reader: reader}}, "app", name, q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(answers) != 1 || answers[0].(*dns.A).A.String() != want {
			t.Errorf("%s answers %v, want A %s", name, answers, want)
		}
	}
}

// An ExternalName Service answers an address query with its CNAME and
// what the name resolves to, through chains of aliases, as CoreDNS does;
// a cycle ends, and a name nothing resolves leaves the CNAME alone.
func TestExternalNameFollowsItsAlias(t *testing.T) {
	external := func(name, target string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: target},
		}
	}
	reader := fake.NewClientBuilder().WithObjects(
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web"}, Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.7", ClusterIPs: []string{"10.0.0.7"}}},
		external("ext", "web.app.svc.cluster.local"),
		external("ext2", "ext.app.svc.cluster.local"),
		external("loop1", "loop2.app.svc.cluster.local"),
		external("loop2", "loop1.app.svc.cluster.local"),
		external("gone", "nothere.app.svc.cluster.local"),
	).Build()
	s := &Server{domain: "." + DefaultClusterDomain + "."}
	tenant := &tenantEntry{Tenant: Tenant{Name: "t", Reader: reader}}
	answer := func(name string, qtype uint16) []string {
		q := dns.Question{Name: name + ".app.svc.cluster.local.", Qtype: qtype, Qclass: dns.ClassINET}
		rrs, _, err := s.service(t.Context(), tenant, "app", name, q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var out []string
		for _, rr := range rrs {
			out = append(out, strings.TrimPrefix(rr.String(), rr.Header().String()))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  []string
	}{
		{"ext", dns.TypeA, []string{"web.app.svc.cluster.local.", "10.0.0.7"}},
		{"ext2", dns.TypeA, []string{"ext.app.svc.cluster.local.", "web.app.svc.cluster.local.", "10.0.0.7"}},
		{"ext", dns.TypeCNAME, []string{"web.app.svc.cluster.local."}},
		{"gone", dns.TypeA, []string{"nothere.app.svc.cluster.local."}},
	} {
		if got := answer(tc.name, tc.qtype); !slices.Equal(got, tc.want) {
			t.Errorf("%s %s = %q, want %q", dns.TypeToString[tc.qtype], tc.name, got, tc.want)
		}
	}
	if got := answer("loop1", dns.TypeA); len(got) != maxAliasChain+1 {
		t.Errorf("a cycle of aliases answered %d records, want the chain cut at %d aliases: %q", len(got), maxAliasChain+1, got)
	}
}

// A query from an address that no tenant Pod has yet waits a moment for
// one to have it (a container's first query can come before its host
// Pod's IP reaches the cache); one that none comes to have is refused
// after sourceWait.
func TestQueriesWaitForTheirPodsAddress(t *testing.T) {
	calls := 0
	s := &Server{sourceWaits: make(chan struct{}, 1), opts: Options{ClusterOf: func(_ context.Context, ip string) (string, bool, error) {
		calls++
		return "t", ip == "10.0.0.1" && calls >= 3, nil
	}}}
	if name, ok, err := s.clusterOf(t.Context(), "10.0.0.1"); !ok || err != nil || name != "t" {
		t.Errorf("an address that a Pod comes to have = %q, %v, %v; want tenant t", name, ok, err)
	}
	began := time.Now()
	if _, ok, err := s.clusterOf(t.Context(), "10.0.0.2"); ok || err != nil {
		t.Errorf("an address no Pod has = %v, %v; want none", ok, err)
	}
	if waited := time.Since(began); waited < sourceWait || waited > sourceWait+time.Second {
		t.Errorf("waited %v for an address no Pod has, want %v", waited, sourceWait)
	}

	// With every slot taken, an unknown address is refused at once.
	s.sourceWaits <- struct{}{}
	began = time.Now()
	if _, ok, err := s.clusterOf(t.Context(), "10.0.0.3"); ok || err != nil || time.Since(began) > sourceWait/2 {
		t.Errorf("with no slot free: %v, %v after %v; want a refusal at once", ok, err, time.Since(began))
	}
}
