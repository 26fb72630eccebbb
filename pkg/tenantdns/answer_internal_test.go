package tenantdns

import (
	"testing"

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
		answers, _, err := s.service(t.Context(), Tenant{Name: "t", Reader: reader}, "app", name, q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(answers) != 1 || answers[0].(*dns.A).A.String() != want {
			t.Errorf("%s answers %v, want A %s", name, answers, want)
		}
	}
}
