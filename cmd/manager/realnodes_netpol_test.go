package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// podExec runs a shell script in a Pod's container through kubectl and
// kubeconfig.
type podExec struct {
	kubectl    tenantrytest.Kubectl
	kubeconfig string
	namespace  string
	name       string
}

// reaches says whether the Pod opens a TCP connection to addr (nc -z's
// own verdict, from an exec that itself worked: a failed exec says
// nothing of a policy).
func (p podExec) reaches(ctx context.Context, addr string) (bool, error) {
	host, port, _ := net.SplitHostPort(addr)
	// /usr/bin/nc: the images' sh is busybox's, whose own nc knows no -z.
	out, err := p.kubectl.Run(ctx, p.kubeconfig, "", "-n", p.namespace, "exec", p.name, "--",
		"sh", "-c", "/usr/bin/nc -z -w 2 "+host+" "+port+"; echo rc=$?")
	switch out = strings.TrimSpace(out); {
	case err != nil:
		return false, fmt.Errorf("exec in %s/%s: %w", p.namespace, p.name, err)
	case out == "rc=0":
		return true, nil
	case out == "rc=1":
		return false, nil
	}
	return false, fmt.Errorf("nc in %s/%s: %q", p.namespace, p.name, out)
}

// sleeper runs a tenant Pod ns/name of the agnhost image that sleeps, and
// returns exec into it once it runs.
func (k *tenantKit) sleeper(t *testing.T, ns, name string) podExec {
	t.Helper()
	k.run(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{{
			Name: name, Image: agnhostImage, Command: []string{"sh", "-c", "exec sleep 3600"},
		}}},
	}, "running", func(p *corev1.Pod) (bool, error) { return p.Status.Phase == corev1.PodRunning, nil })
	return podExec{kubectl: k.kubectl, kubeconfig: k.kubeconfig, namespace: ns, name: name}
}

// resolves says whether the Pod's DNS answers name.
func (p podExec) resolves(ctx context.Context, name string) (bool, error) {
	out, err := p.kubectl.Run(ctx, p.kubeconfig, "", "-n", p.namespace, "exec", p.name, "--",
		"sh", "-c", "dig +short +time=2 +tries=1 "+name+"; echo rc=$?")
	if err != nil {
		return false, fmt.Errorf("exec in %s/%s: %w", p.namespace, p.name, err)
	}
	return net.ParseIP(strings.Fields(out)[0]) != nil, nil
}

// networkPolicies: the tenant's own NetworkPolicies hold, from its
// running containers: a policy admitting one namespace admits it and
// refuses another; namespaceSelector {} and ipBlock 0.0.0.0/0 admit no Pod
// of another tenant; an egress deny-all cuts a namespace's Pods off, DNS
// included; an egress ipBlock 0.0.0.0/0 reaches neither the host API
// server nor cloud metadata; an egress rule for port 53 lets DNS through.
// web is the tenant's Pod app/web, serving on 8080; the shell Pod is in
// namespace other; beta is a Pod of another tenant, with the agnhost
// image; metadata is an address in the cloud metadata range that a host
// Pod reaches.
func (k *tenantKit) networkPolicies(t *testing.T, host client.Client, web *corev1.Pod, beta podExec, metadata string) {
	ctx := t.Context()
	if err := k.tenant.Get(ctx, client.ObjectKeyFromObject(web), web); err != nil {
		t.Fatal(err)
	}
	webAddr := net.JoinHostPort(web.Status.PodIP, "8080")
	shell := podExec{kubectl: k.kubectl, kubeconfig: k.kubeconfig, namespace: "other", name: "shell"}
	probe := k.sleeper(t, "default", "probe")

	// expect waits until from reaches (or not) addr, then holds it so.
	expect := func(t *testing.T, from podExec, addr string, want bool, what string) {
		t.Helper()
		check := func(ctx context.Context) (bool, error) {
			got, err := from.reaches(ctx, addr)
			if err != nil {
				return false, err
			}
			return got == want, fmt.Errorf("%s/%s reaches %s: %v", from.namespace, from.name, addr, got)
		}
		eventually(t, 60*time.Second, what, check)
		tenantrytest.Consistently(t, 3*time.Second, time.Second, what, check)
	}
	expectDNS := func(t *testing.T, want bool, what string) {
		t.Helper()
		check := func(ctx context.Context) (bool, error) {
			got, err := shell.resolves(ctx, "web.app.svc.cluster.local")
			return err == nil && got == want, fmt.Errorf("resolves: %v, %v", got, err)
		}
		eventually(t, 60*time.Second, what, check)
		tenantrytest.Consistently(t, 3*time.Second, time.Second, what, check)
	}
	apply := func(t *testing.T, policies ...*networkingv1.NetworkPolicy) {
		t.Helper()
		for _, p := range policies {
			if err := k.tenant.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			for _, p := range policies {
				_ = k.tenant.Delete(context.Background(), p)
			}
		})
	}
	ingressTo := func(name string, from ...networkingv1.NetworkPolicyPeer) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: from}},
			},
		}
	}
	egressFrom := func(name string, rules ...networkingv1.NetworkPolicyEgressRule) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: name},
			Spec: networkingv1.NetworkPolicySpec{
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress:      rules,
			},
		}
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// What the host held: the policies of the tenant's namespaces.
		var list networkingv1.NetworkPolicyList
		if err := host.List(context.Background(), &list, client.MatchingLabels{syncer.LabelCluster: "alpha"}); err != nil {
			t.Logf("listing the host's NetworkPolicies: %v", err)
			return
		}
		for _, p := range list.Items {
			spec, _ := json.Marshal(p.Spec)
			t.Logf("host NetworkPolicy %s/%s: %s", p.Namespace, p.Name, spec)
		}
	})
	expect(t, probe, webAddr, true, "without a policy, every namespace of the tenant reaches web")

	t.Run("a policy admitting one namespace admits it and refuses another", func(t *testing.T) {
		var other corev1.Namespace
		if err := k.tenant.Get(ctx, client.ObjectKey{Name: "other"}, &other); err != nil {
			t.Fatal(err)
		}
		other.Labels["team"] = "blue"
		if err := k.tenant.Update(ctx, &other); err != nil {
			t.Fatal(err)
		}
		apply(t, ingressTo("from-blue", networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "blue"}},
		}))
		expect(t, probe, webAddr, false, "namespace default (not team=blue) refused")
		expect(t, shell, webAddr, true, "namespace other (team=blue) admitted")
	})
	expect(t, probe, webAddr, true, "the policy gone, namespace default reaches web again")

	t.Run("namespaceSelector {} and ipBlock 0.0.0.0/0 admit no Pod of another tenant", func(t *testing.T) {
		apply(t, ingressTo("from-everywhere",
			networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{}},
			networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}))
		expect(t, shell, webAddr, true, "the tenant's own Pods admitted")
		expect(t, beta, webAddr, false, "another tenant's Pod refused")
	})

	t.Run("an ingress deny-all keeps out the namespace's own Pods too", func(t *testing.T) {
		peer := k.sleeper(t, "app", "peer")
		t.Cleanup(func() {
			_ = k.tenant.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "peer"}})
		})
		expect(t, peer, webAddr, true, "without a policy, a Pod of web's namespace reaches it")
		apply(t, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "deny-ingress"},
			Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
		})
		expect(t, peer, webAddr, false, "a Pod of web's own namespace refused")
		expect(t, shell, webAddr, false, "a Pod of another namespace refused")
	})

	t.Run("an egress deny-all cuts a namespace's Pods off, DNS too", func(t *testing.T) {
		apply(t, egressFrom("deny-egress"))
		expect(t, shell, webAddr, false, "web out of the shell's reach")
		expectDNS(t, false, "no DNS under an egress deny-all")
	})
	expect(t, shell, webAddr, true, "the deny-all gone, the shell reaches web again")

	t.Run("an egress ipBlock 0.0.0.0/0 reaches neither the host API server nor cloud metadata", func(t *testing.T) {
		apply(t, egressFrom("anywhere", networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}},
		}))
		expect(t, shell, webAddr, true, "web, in 0.0.0.0/0, reached")
		expect(t, shell, hostAPIServerEndpoint(t, host), false, "the host API server's endpoint out of reach")
		expect(t, shell, metadata, false, "cloud metadata out of reach")
	})

	t.Run("an egress rule for port 53 lets DNS through, and nothing else", func(t *testing.T) {
		udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
		apply(t, egressFrom("dns-only", networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}},
			Ports: []networkingv1.NetworkPolicyPort{
				{Protocol: &udp, Port: ptr.To(intstr.FromInt32(53))}, {Protocol: &tcp, Port: ptr.To(intstr.FromInt32(53))},
			},
		}))
		expect(t, shell, webAddr, false, "web out of reach (port 8080)")
		expectDNS(t, true, "DNS answers")
	})
}

// dig asks server for name (-x: a reverse lookup of an address) from the
// Pod, and returns its answers, none when it has none or no answer came.
func (p podExec) dig(ctx context.Context, server string, args ...string) ([]string, error) {
	out, err := p.kubectl.Run(ctx, p.kubeconfig, "", append([]string{"-n", p.namespace, "exec", p.name, "--",
		"dig", "+short", "+time=2", "+tries=1", "@" + server}, args...)...)
	// No answer at all: dig ends 9, and kubectl says so.
	timedOut := strings.Contains(out, "exit code 9")
	if err != nil && !timedOut {
		return nil, fmt.Errorf("dig in %s/%s: %q, %w", p.namespace, p.name, out, err)
	}
	var answers []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" && !strings.HasPrefix(line, ";") && !strings.HasPrefix(line, "command terminated") {
			answers = append(answers, line)
		}
	}
	return answers, nil
}

// hostDNS: where the tenant DNS serves the tenant's Pods, the host's
// cluster DNS answers them nothing: not the name of another tenant's
// Service address (a reverse lookup), nor the host's names (a forward
// one), which a host Pod is answered. betaService is a Service of the
// other tenant; unisolated a host Pod of the agnhost image.
func (k *tenantKit) hostDNS(t *testing.T, host client.Client, betaService *corev1.Service, unisolated podExec) {
	ctx := t.Context()
	var dns corev1.Service
	if err := host.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-dns"}, &dns); err != nil {
		t.Fatal(err)
	}
	var hostCopy corev1.Service
	eventually(t, 30*time.Second, "the other tenant's Service in the host", func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKey{Namespace: syncer.HostNamespace("beta", betaService.Namespace), Name: betaService.Name}, &hostCopy)
		return err == nil && hostCopy.Spec.ClusterIP != "", err
	})
	shell := podExec{kubectl: k.kubectl, kubeconfig: k.kubeconfig, namespace: "other", name: "shell"}
	lookups := map[string][]string{
		"a reverse lookup of the other tenant's Service address": {"-x", hostCopy.Spec.ClusterIP},
		"a forward lookup of the host's API server Service":      {"kubernetes.default.svc.cluster.local"},
	}
	for what, args := range lookups {
		eventually(t, 30*time.Second, "the host DNS answers a host Pod "+what, func(ctx context.Context) (bool, error) {
			answers, err := unisolated.dig(ctx, dns.Spec.ClusterIP, args...)
			return err == nil && len(answers) > 0, fmt.Errorf("answers %q, %v", answers, err)
		})
		nothing := func(ctx context.Context) (bool, error) {
			answers, err := shell.dig(ctx, dns.Spec.ClusterIP, args...)
			return err == nil && len(answers) == 0, fmt.Errorf("answers %q, %v", answers, err)
		}
		eventually(t, 30*time.Second, "the host DNS answers the tenant's Pod nothing of "+what, nothing)
		tenantrytest.Consistently(t, 5*time.Second, time.Second, "the host DNS answers the tenant's Pod nothing of "+what, nothing)
	}
}
