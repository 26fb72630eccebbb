package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// The kit registry's images (pkg/testing, make node).
const (
	agnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	busyboxImage = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
)

// TestTenantPodsOnRealNodes runs the management app against a host with
// two real nodes and a tenant with its own kube-controller-manager, and
// checks, inside running containers of tenant Pods, what a workload
// relies on: its API server with its own token and CA, its tenant's DNS
// names and Services, the downward API in the tenant's names, and kubectl
// logs and exec through the tenant's API server.
func TestTenantPodsOnRealNodes(t *testing.T) {
	tenantrytest.RequireRealNodes(t)
	env := tenantrytest.New(t, tenantrytest.Options{
		Tenants:                 2,
		HostKubelets:            2,
		TenantControllerManager: true,
		HostCRDDirectoryPaths:   []string{filepath.Join("..", "..", "config", "crd", "bases")},
	})
	host := newHostClient(t, env.Host)
	data, err := env.Host.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	// Tenant Pods reach the DNS server on the kit network, port 53.
	kitIP := env.KitIP()
	// The kubelet API on the kit network too, in reach of tenant Pods as
	// a manager Pod's address is.
	kubeletAddr := freeAddrOn(t, kitIP)
	startManager(t, data, "--dns-bind-address", net.JoinHostPort(kitIP, "53"), "--dns-nameserver", kitIP,
		"--dns-upstream", startUpstream(t), "--kubelet-bind-address", kubeletAddr)

	var vc *tenantryv1alpha1.VirtualCluster
	for i, name := range []string{"alpha", "beta"} {
		kubeconfig, err := env.Tenants[i].Kubeconfig()
		if err != nil {
			t.Fatal(err)
		}
		createSecret(t, host, name+"-kubeconfig", kubeconfig)
		v := &tenantryv1alpha1.VirtualCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: tenantryv1alpha1.VirtualClusterSpec{
				KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: name + "-kubeconfig"},
				// The tenant API server's address on the kit network.
				InClusterServer: "https://" + env.Tenants[i].Address(),
			},
		}
		if i == 0 {
			// alpha's API server calls its Pods from this machine; beta's
			// VirtualCluster lets no control plane in.
			v.Spec.HostPolicy = &tenantryv1alpha1.HostPolicy{Network: &tenantryv1alpha1.NetworkPolicy{ControlPlaneCIDRs: env.ControlPlaneCIDRs()}}
		}
		if err := host.Create(t.Context(), v); err != nil {
			t.Fatal(err)
		}
		expectReady(t, host, name, metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
		if i == 0 {
			vc = v
		}
	}
	hostKubeconfig, err := env.Host.KubeconfigFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	tenant := newHostClient(t, env.Tenants[0])
	ctx := t.Context()
	kubectl, err := tenantrytest.FindKubectl()
	if err != nil {
		t.Fatal(err)
	}
	tenantKubeconfig, err := env.Tenants[0].KubeconfigFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"app", "other"} {
		if err := tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the default ServiceAccount of "+ns, func(ctx context.Context) (bool, error) {
			err := tenant.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
			return err == nil, err
		})
	}

	web := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: agnhostImage, Args: []string{"netexec", "--http-port=8080"},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
		}}},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	shell := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "shell", Labels: map[string]string{"role": "shell"}, Annotations: map[string]string{"team": "blue"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "shell", Image: agnhostImage, Command: []string{"sh", "-c", "echo shell started; exec sleep 3600"},
				Env: []corev1.EnvVar{
					{Name: "MY_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					{Name: "MY_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "MY_SERVICE_ACCOUNT", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.serviceAccountName"}}},
				},
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	for _, obj := range []client.Object{web, svc, shell} {
		if err := tenant.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	for _, pod := range []*corev1.Pod{web, shell} {
		eventually(t, 90*time.Second, "tenant Pod "+pod.Name+" running on a real node", func(ctx context.Context) (bool, error) {
			if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return false, err
			}
			return pod.Status.Phase == corev1.PodRunning && podIsReady(pod) && strings.HasPrefix(pod.Spec.NodeName, tenantrytest.KubeletNamePrefix),
				fmt.Errorf("phase %s, node %q, conditions %+v", pod.Status.Phase, pod.Spec.NodeName, pod.Status.Conditions)
		})
	}
	exec := func(ctx context.Context, args ...string) (string, error) {
		return kubectl.Run(ctx, tenantKubeconfig, "", append([]string{"-n", "other", "exec", "shell", "--"}, args...)...)
	}

	k := &tenantKit{tenant: tenant, kubectl: kubectl, kubeconfig: tenantKubeconfig, shellExec: exec,
		tenantServer: vc.Spec.InClusterServer, hostKubeconfig: hostKubeconfig}
	// First: every check after it runs under an enforced isolation policy.
	var other *corev1.Pod // beta's
	t.Run("the isolation policy keeps a tenant's container from the host API server, cloud metadata, other tenants and the kubelet API", func(t *testing.T) {
		beta := newHostClient(t, env.Tenants[1])
		other = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "betaweb"},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{{
				Name: "web", Image: agnhostImage, Args: []string{"netexec", "--http-port=8080"},
			}}},
		}
		eventually(t, 30*time.Second, "beta's default ServiceAccount", func(ctx context.Context) (bool, error) {
			err := beta.Get(ctx, client.ObjectKey{Namespace: "default", Name: "default"}, &corev1.ServiceAccount{})
			return err == nil, err
		})
		if err := beta.Create(ctx, other); err != nil {
			t.Fatal(err)
		}
		eventually(t, 90*time.Second, "beta's Pod running", func(ctx context.Context) (bool, error) {
			err := beta.Get(ctx, client.ObjectKeyFromObject(other), other)
			return err == nil && other.Status.Phase == corev1.PodRunning && other.Status.PodIP != "", err
		})
		k.isolation(t, host, other, listenAt(t, env.CloudMetadataIP()), kubeletAddr)
	})
	t.Run("the tenant API server reaches its Pods from hostPolicy.network.controlPlaneCIDRs, and without them does not", func(t *testing.T) {
		if other == nil {
			t.Fatal("beta's Pod did not start")
		}
		betaKubeconfig, err := env.Tenants[1].KubeconfigFile(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		k.controlPlaneIngress(t, betaKubeconfig, other)
	})
	t.Run("the tenant's own NetworkPolicies hold, within the tenant", func(t *testing.T) {
		if other == nil {
			t.Fatal("beta's Pod did not start")
		}
		betaKubeconfig, err := env.Tenants[1].KubeconfigFile(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		beta := podExec{kubectl: kubectl, kubeconfig: betaKubeconfig, namespace: other.Namespace, name: other.Name}
		k.networkPolicies(t, host, web, beta, listenAt(t, env.CloudMetadataIP()))
	})
	t.Run("the host's DNS answers a tenant's Pod nothing of other tenants", func(t *testing.T) {
		betaService := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "betaweb"},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "betaweb"}, Ports: []corev1.ServicePort{{Port: 80}}},
		}
		if err := newHostClient(t, env.Tenants[1]).Create(ctx, betaService); err != nil {
			t.Fatal(err)
		}
		k.hostDNS(t, host, betaService, podExec{kubectl: kubectl, kubeconfig: hostKubeconfig, namespace: "default", name: "unisolated"})
	})

	t.Run("kubectl logs and exec reach the container through the tenant", func(t *testing.T) {
		eventually(t, 30*time.Second, "the container's log line", func(ctx context.Context) (bool, error) {
			out, err := kubectl.Run(ctx, tenantKubeconfig, "", "-n", "other", "logs", "shell")
			return strings.Contains(out, "shell started"), fmt.Errorf("kubectl logs: %q, %v", out, err)
		})
		out := kubectl.MustRun(t, tenantKubeconfig, "", "-n", "other", "exec", "shell", "--", "echo", "exec reached")
		if strings.TrimSpace(out) != "exec reached" {
			t.Errorf("kubectl exec printed %q", out)
		}
	})

	t.Run("the downward API gives the tenant's names", func(t *testing.T) {
		out := kubectl.MustRun(t, tenantKubeconfig, "", "-n", "other", "exec", "shell", "--", "sh", "-c", `echo "$MY_NAMESPACE $MY_NAME $MY_SERVICE_ACCOUNT"`)
		if got, want := strings.TrimSpace(out), "other shell default"; got != want {
			t.Errorf("namespace, name and ServiceAccount in the container = %q, want %q", got, want)
		}
	})

	t.Run("the tenant's DNS names and Service reach its Pods", func(t *testing.T) {
		for _, name := range []string{"web.app", "web.app.svc", "web.app.svc.cluster.local"} {
			eventually(t, 30*time.Second, "GET http://"+name+"/hostname from the container", func(ctx context.Context) (bool, error) {
				out, err := exec(ctx, "curl", "-sS", "-m", "5", "http://"+name+"/hostname")
				return strings.TrimSpace(out) == "web", err
			})
		}
	})

	t.Run("the environment names the tenant's Services and API server", func(t *testing.T) { k.environment(t, svc) })
	t.Run("ConfigMap, Secret, projected and emptyDir volumes, with subPath", k.volumes)
	t.Run("ClusterTrustBundle projections read the tenant's bundles", k.trustBundles)
	t.Run("podCertificate projections hold what the tenant's signer issued", k.podCertificates)
	t.Run("readiness reaches the tenant's EndpointSlices, liveness restarts", func(t *testing.T) { k.probes(t, web) })
	t.Run("exit codes, termination messages, CrashLoopBackOff and Jobs reach the tenant", k.lifecycle)
	t.Run("kubectl logs -f, exec -i and -it, attach and port-forward", func(t *testing.T) { k.streams(t, web) })
	t.Run("DNS: headless Services, SRV, ExternalName and Pod records", func(t *testing.T) { k.dns(t, web) })

	t.Run("a Pod resized in place in the tenant is resized in the host", k.resize)
	t.Run("kubectl debug runs an ephemeral container beside its target", k.debug)
	t.Run("a Service without a selector reaches the Pod its EndpointSlice names, and no address of the host's", func(t *testing.T) {
		k.manualEndpoints(t, web, host)
	})

	t.Run("the container calls its tenant API server with its own token and CA", func(t *testing.T) {
		var out string
		eventually(t, 30*time.Second, "a SelfSubjectReview from the container", func(ctx context.Context) (bool, error) {
			var err error
			out, err = exec(ctx, "sh", "-c", tenantrytest.WhoAmIScript)
			return err == nil, err
		})
		var review authenticationv1.SelfSubjectReview
		if err := json.Unmarshal([]byte(out), &review); err != nil {
			t.Fatalf("the review: %v\n%s", err, out)
		}
		if got, want := review.Status.UserInfo.Username, "system:serviceaccount:other:default"; got != want {
			t.Errorf("the container is %q to its API server, want %q", got, want)
		}
		// Asked for once the Pod was bound, as a kubelet asks: the token
		// names the Pod's node.
		if got := review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != shell.Spec.NodeName {
			t.Errorf("the token's node %v, want the Pod's, %s", got, shell.Spec.NodeName)
		}
	})
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
