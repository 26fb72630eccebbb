package testing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// agnhost is the e2e suite's test image, served by the kit's registry.
const agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"

// TestRealNodes starts a host with two real nodes and checks what a real
// cluster does with containers: they run and log, kubectl exec reaches
// them, Pods of two nodes reach each other, a Service's cluster IP reaches
// its Pods from a Pod and from this process, and a Pod reaches its API
// server through the kubernetes Service with its own token.
func TestRealNodes(t *testing.T) {
	tenantrytest.RequireRealNodes(t)
	env := tenantrytest.New(t, tenantrytest.Options{HostKubelets: 2, LogDirectory: t.TempDir()})
	ctx := t.Context()
	host := newClient(t, env.Host)
	kubectl, err := tenantrytest.FindKubectl()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := env.Host.KubeconfigFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	var nodes corev1.NodeList
	if err := host.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 2 {
		t.Fatalf("%d nodes, want 2", len(nodes.Items))
	}
	for _, n := range nodes.Items {
		if !nodeReady(&n) {
			t.Fatalf("node %s is not Ready: %+v", n.Name, n.Status.Conditions)
		}
	}

	// One server per node, and a Service in front of both.
	servers := make([]*corev1.Pod, 2)
	for i, n := range nodes.Items {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("web-%d", i), Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{
				NodeName: n.Name,
				Containers: []corev1.Container{{
					Name: "web", Image: agnhost, Args: []string{"netexec", "--http-port=8080"},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
				}},
			},
		}
		if err := host.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		servers[i] = waitPod(t, host, pod, "Running and Ready", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && podReady(p)
		})
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if err := host.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}

	t.Run("this process reaches a Pod and a cluster IP", func(t *testing.T) {
		httpGet(t, "http://"+net.JoinHostPort(servers[0].Status.PodIP, "8080")+"/hostname", servers[0].Name)
		tenantrytest.Eventually(t, time.Minute, "the Service answers at its cluster IP", func(ctx context.Context) (bool, error) {
			body, err := get(ctx, "http://"+net.JoinHostPort(svc.Spec.ClusterIP, "80")+"/hostname")
			return err == nil && strings.HasPrefix(body, "web-"), err
		})
	})

	t.Run("a container logs and kubectl exec reaches it", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "talker"},
			Spec: corev1.PodSpec{
				NodeName: nodes.Items[1].Name,
				Containers: []corev1.Container{{
					Name: "talker", Image: "docker.io/library/busybox:1.37",
					Command: []string{"sh", "-c", "echo hello from a real container; exec sleep 3600"},
				}},
				TerminationGracePeriodSeconds: new(int64),
			},
		}
		if err := host.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		waitPod(t, host, pod, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		tenantrytest.Eventually(t, 30*time.Second, "the container's log line", func(ctx context.Context) (bool, error) {
			out, err := kubectl.Run(ctx, kubeconfig, "", "logs", "talker")
			return strings.Contains(out, "hello from a real container"), err
		})
		out := kubectl.MustRun(t, kubeconfig, "", "exec", "talker", "--", "cat", "/etc/hostname")
		if strings.TrimSpace(out) != "talker" {
			t.Errorf("exec cat /etc/hostname = %q, want talker", out)
		}

		// Across nodes: from node 2's Pod to node 1's server, by Pod IP
		// and through the Service's name-less cluster IP.
		for _, target := range []string{
			net.JoinHostPort(servers[0].Status.PodIP, "8080"),
			net.JoinHostPort(svc.Spec.ClusterIP, "80"),
		} {
			tenantrytest.Eventually(t, 30*time.Second, "talker reaches "+target, func(ctx context.Context) (bool, error) {
				out, err := kubectl.Run(ctx, kubeconfig, "", "exec", "talker", "--", "timeout", "5", "wget", "-q", "-O-", "http://"+target+"/hostname")
				return strings.HasPrefix(out, "web-"), err
			})
		}
	})

	t.Run("the host's Pods resolve Service names through the cluster DNS", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "resolver"},
			Spec: corev1.PodSpec{
				NodeName:                      nodes.Items[1].Name,
				Containers:                    []corev1.Container{{Name: "resolver", Image: agnhost, Args: []string{"pause"}}},
				TerminationGracePeriodSeconds: new(int64),
			},
		}
		if err := host.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		waitPod(t, host, pod, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		resolv := kubectl.MustRun(t, kubeconfig, "", "exec", "resolver", "--", "cat", "/etc/resolv.conf")
		if !strings.Contains(resolv, "nameserver "+env.ClusterDNSIP()+"\n") || !strings.Contains(resolv, "search default.svc."+tenantrytest.ClusterDomain) {
			t.Fatalf("the Pod's resolv.conf names no cluster DNS at %s:\n%s", env.ClusterDNSIP(), resolv)
		}
		var api corev1.Service
		if err := host.Get(ctx, types.NamespacedName{Namespace: "default", Name: "kubernetes"}, &api); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]string{
			"web":                svc.Spec.ClusterIP,
			"kubernetes.default": api.Spec.ClusterIP,
			"web.default.svc." + tenantrytest.ClusterDomain: svc.Spec.ClusterIP,
		} {
			tenantrytest.Eventually(t, 30*time.Second, name+" resolves to "+want, func(ctx context.Context) (bool, error) {
				out, err := kubectl.Run(ctx, kubeconfig, "", "exec", "resolver", "--", "getent", "hosts", name)
				if err != nil {
					return false, err
				}
				return strings.HasPrefix(out, want+" "), fmt.Errorf("getent hosts %s: %q", name, out)
			})
		}
	})

	// The kit's images are built here, not pulled: they hold what
	// upstream's hold, and the programs behave as upstream's. busybox is
	// 1.37.0 with upstream's applets, static with musl, whose resolver
	// reads resolv.conf's search list without NSS.
	t.Run("busybox and agnhost behave as upstream's", func(t *testing.T) {
		script := func(name, image, script string) *corev1.Pod {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
				Spec: corev1.PodSpec{
					NodeName:                      nodes.Items[1].Name,
					RestartPolicy:                 corev1.RestartPolicyNever,
					TerminationGracePeriodSeconds: new(int64),
					Containers: []corev1.Container{{
						Name: "c", Image: image, Command: []string{"sh", "-c", script},
						// A name that is no shell identifier, as a
						// ConfigMap's key may be: sh hands it on.
						Env: []corev1.EnvVar{{Name: "data-1", Value: "value-1"}},
					}},
				},
			}
			if err := host.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
			return pod
		}
		fqdn := "web.default.svc." + tenantrytest.ClusterDomain
		busybox := script("busybox", "registry.k8s.io/e2e-test-images/busybox:1.37.0-2", `set -e
busybox | head -1
echo "printenv: $(printenv data-1)"
echo "wget: $(wget -qO- http://web.default/hostname)"
nslookup `+fqdn+` | grep -q '`+svc.Spec.ClusterIP+`' && echo "nslookup: `+svc.Spec.ClusterIP+`"
echo "text: $(echo abc | sed s/b/x/ | awk '{ print toupper($0) }' | tr X Y)"
echo "numbers: $(seq 3 | sort -r | head -1) $(echo -n hi | base64) $(echo -n hi | md5sum | cut -c1-8)"
timeout 1 sleep 10 || echo "timeout: $?"
for a in cat cp cut date dd df du env find grep gzip head hostname id ip kill ln ls mkdir mktemp mount mv nc ping ps rm sha256sum stat tail tar tee test touch wc xargs; do
  command -v $a >/dev/null || { echo "no applet $a"; exit 1; }
done
echo applets ok`)
		agnhostTools := script("agnhost-tools", agnhost, `set -e
echo "sh: $(readlink /bin/sh)"
echo "bash: $(bash -c 'echo ${BASH_VERSINFO[0]}')"
echo "curl: $(curl -sS http://web.default/hostname)"
echo "dig: $(dig +short `+fqdn+`)"
nc -z -w 5 web.default 80 && echo "nc: open"
ip -o link show lo | grep -q LOOPBACK && echo "ip: lo"
ss -ltn >/dev/null && echo "ss: ok"
echo "getent: $(getent hosts web.default | cut -d' ' -f1)"
socat -V | head -1`)
		for pod, want := range map[*corev1.Pod][]string{
			busybox: {"BusyBox v1.37.0", "printenv: value-1", "wget: web-", "nslookup: " + svc.Spec.ClusterIP,
				"text: AYC", "numbers: 3 aGk= 49f68a5c", "timeout: 143", "applets ok"},
			agnhostTools: {"sh: /bin/busybox", "bash: 5", "curl: web-", "dig: " + svc.Spec.ClusterIP, "nc: open", "ip: lo", "ss: ok",
				"getent: " + svc.Spec.ClusterIP, "socat by Gerhard Rieger"},
		} {
			done := waitPod(t, host, pod, "ended", func(p *corev1.Pod) bool {
				return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
			})
			logs := podLogs(t, env, done)
			if done.Status.Phase != corev1.PodSucceeded {
				t.Errorf("%s ended %s, logging:\n%s", pod.Name, done.Status.Phase, logs)
				continue
			}
			for _, w := range want {
				if !strings.Contains(logs, w) {
					t.Errorf("%s logged no %q:\n%s", pod.Name, w, logs)
				}
			}
		}
	})

	t.Run("the conformance suite's images run", func(t *testing.T) {
		e2e := "registry.k8s.io/e2e-test-images/"
		run := func(name, image string, sc *corev1.SecurityContext, command ...string) *corev1.Pod {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
				Spec: corev1.PodSpec{
					RestartPolicy:                 corev1.RestartPolicyNever,
					TerminationGracePeriodSeconds: new(int64),
					Containers:                    []corev1.Container{{Name: "c", Image: image, Command: command, SecurityContext: sc}},
				},
			}
			if err := host.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
			return pod
		}
		// Programs that end, and what each prints. nonewprivs is setuid
		// root, as upstream's: a user that may escalate is root.
		escalating := &corev1.SecurityContext{RunAsUser: ptr.To[int64](1000), AllowPrivilegeEscalation: ptr.To(true)}
		resolve := "test -x /coredns && getent hosts kubernetes.default.svc." + tenantrytest.ClusterDomain
		ends := map[*corev1.Pod]string{
			run("nonroot", e2e+"nonroot:1.5", nil, "id", "-u"):                                         "1234",
			run("nonewprivs", e2e+"nonewprivs:1.4", escalating):                                        "Effective uid: 0",
			run("glibc-dns", e2e+"glibc-dns-testing:2.1.1", nil, "sh", "-c", resolve):                  " kubernetes.default.svc." + tenantrytest.ClusterDomain,
			run("sample-apiserver", e2e+"sample-apiserver:1.29.2", nil, "/sample-apiserver", "--help"): "--etcd-servers",
			run("etcd", "registry.k8s.io/etcd:3.7.0-0", nil, "/usr/local/bin/etcd", "--version"):       "etcd Version: 3.7.0",
			run("agnhost-prev", e2e+"agnhost:2.55", nil, "/agnhost", "--help"):                         "test-webserver",
		}
		// Servers, and a page each serves.
		serves := map[*corev1.Pod]string{
			run("nginx", e2e+"nginx:1.28.0-2", nil):  "/",
			run("kitten", e2e+"kitten:1.8", nil):     "/kitten.jpg",
			run("nautilus", e2e+"nautilus:1.8", nil): "/nautilus.jpg",
		}
		for pod, want := range ends {
			done := waitPod(t, host, pod, "ended", func(p *corev1.Pod) bool {
				return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
			})
			if logs := podLogs(t, env, done); done.Status.Phase != corev1.PodSucceeded || !strings.Contains(logs, want) {
				t.Errorf("%s (%s) ended %s, logging %q; want it to succeed and print %q", pod.Name, pod.Spec.Containers[0].Image, done.Status.Phase, logs, want)
			}
		}
		for pod, page := range serves {
			running := waitPod(t, host, pod, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" })
			url := "http://" + net.JoinHostPort(running.Status.PodIP, "80") + page
			tenantrytest.Eventually(t, 30*time.Second, pod.Name+" serves "+page, func(ctx context.Context) (bool, error) {
				body, err := get(ctx, url)
				if err != nil {
					return false, err
				}
				if page == "/" {
					return strings.Contains(body, "Welcome to nginx!"), fmt.Errorf("body %.80q", body)
				}
				return strings.HasPrefix(body, "\xff\xd8"), fmt.Errorf("not a JPEG: %.16q", body) // JPEG's start of image
			})
		}
	})

	t.Run("a Pod reaches its API server through the kubernetes Service", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "caller"},
			Spec: corev1.PodSpec{
				NodeName:      nodes.Items[0].Name,
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "caller", Image: agnhost,
					// As an in-cluster client: the mounted token and CA, and
					// KUBERNETES_SERVICE_HOST; the certificate is verified.
					Command: []string{"sh", "-c", tenantrytest.WhoAmIScript},
				}},
			},
		}
		if err := host.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		done := waitPod(t, host, pod, "Succeeded", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		})
		logs := podLogs(t, env, done)
		var review authenticationv1.SelfSubjectReview
		if done.Status.Phase != corev1.PodSucceeded || json.Unmarshal([]byte(logs), &review) != nil {
			t.Fatalf("the Pod ended %s, logging %q", done.Status.Phase, logs)
		}
		if got, want := review.Status.UserInfo.Username, "system:serviceaccount:default:default"; got != want {
			t.Errorf("the Pod is %q to its API server, want %q", got, want)
		}
	})
}

// podLogs reads a Pod's log through the API server.
func podLogs(t *testing.T, env *tenantrytest.Environment, pod *corev1.Pod) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Host.Config())
	if err != nil {
		t.Fatal(err)
	}
	data, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(t.Context())
	if err != nil {
		t.Fatalf("logs of %s: %v", pod.Name, err)
	}
	return string(data)
}

// httpGet fails t unless GET url answers 200 with a body that starts with
// want.
func httpGet(t *testing.T, url, want string) {
	t.Helper()
	body, err := get(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(body, want) {
		t.Fatalf("GET %s = %q, want %q", url, body, want)
	}
}

func get(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), nil
}
