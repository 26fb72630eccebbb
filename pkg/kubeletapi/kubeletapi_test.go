package kubeletapi_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

var eventually = tenantrytest.Eventually

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// criLog writes lines in the CRI log format that kwok serves.
func criLog(t *testing.T, lines ...string) string {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%s stdout F %s\n", time.Now().UTC().Format(time.RFC3339Nano), l)
	}
	path := filepath.Join(t.TempDir(), "container.log")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// podDebugging is kwok's Logs and Attach objects of one host Pod: its
// logs, and the file whose new lines an attach streams.
func podDebugging(namespace, name, logs, attach string) string {
	return fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: Logs
metadata:
  namespace: %[1]s
  name: %[2]s
spec:
  logs:
  - logsFile: %[3]q
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Attach
metadata:
  namespace: %[1]s
  name: %[2]s
spec:
  attaches:
  - logsFile: %[4]q
`, namespace, name, logs, attach)
}

// appendUntil appends line to a CRI log file every half second until ctx
// ends: an attach streams only what is written once it is attached.
func appendUntil(ctx context.Context, t *testing.T, path, line string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		fmt.Fprintf(f, "%s stdout F %s\n", time.Now().UTC().Format(time.RFC3339Nano), line)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Both tenants have a Pod default/web, and each of their API servers
// reaches only its own through the kubelet API of its virtual nodes:
// logs, exec, attach and port-forward, all the way to kwok through the
// host API server. A kubelet client of one tenant cannot name the other's
// Pods, a certificate of no tenant is refused, and a user of the tenant
// without nodes/proxy is forbidden.
func TestKubeletAPIOfVirtualNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts control planes")
	}
	var kwok []string
	said, logsFile, attachLog := map[string]string{}, map[string]string{}, map[string]string{}
	for _, cluster := range []string{"tenant-1", "tenant-2"} {
		said[cluster] = cluster + " is talking"
		logsFile[cluster], attachLog[cluster] = criLog(t, said[cluster]), criLog(t)
		kwok = append(kwok, podDebugging(syncer.HostNamespace(cluster, "default"), "web", logsFile[cluster], attachLog[cluster]))
	}
	w := syncertest.NewWorld(t, syncertest.WorldOptions{
		Tenants: 2, HostNodes: 1, Syncers: builtin.All(), Pods: &pods.Options{}, KubeletAPI: true, KwokConfig: kwok,
	})
	address, port := w.KubeletAPI.Endpoint()
	if address != "127.0.0.1" {
		t.Fatalf("kubelet API advertised at %s, want the bind address 127.0.0.1", address)
	}
	for _, cp := range w.Env.Tenants {
		createRunningPod(t, w.Tenants[cp.Name()], "web")
	}
	createRunningPod(t, w.Tenants["tenant-2"], "only-in-2")

	// The virtual node points the tenant's API server at Tenantry.
	var pod corev1.Pod
	if err := w.Tenants["tenant-1"].Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "web"}, &pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the virtual node gives the kubelet API's address and port", func(ctx context.Context) (bool, error) {
		var node corev1.Node
		if err := w.Tenants["tenant-1"].Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, &node); err != nil {
			return false, err
		}
		want := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: address}}
		ok := fmt.Sprint(node.Status.Addresses) == fmt.Sprint(want) && node.Status.DaemonEndpoints.KubeletEndpoint.Port == port
		return ok, fmt.Errorf("addresses %v, kubelet port %d; want %v, %d", node.Status.Addresses, node.Status.DaemonEndpoints.KubeletEndpoint.Port, want, port)
	})

	for _, cp := range w.Env.Tenants {
		cs := kubernetes.NewForConfigOrDie(cp.Config())
		t.Run(cp.Name()+"/logs", func(t *testing.T) {
			var got string
			eventually(t, 30*time.Second, "the tenant API server serves the Pod's logs", func(ctx context.Context) (bool, error) {
				raw, err := cs.CoreV1().Pods("default").GetLogs("web", &corev1.PodLogOptions{Container: "app"}).DoRaw(ctx)
				got = string(raw)
				return err == nil, err
			})
			if strings.TrimSpace(got) != said[cp.Name()] {
				t.Fatalf("logs %q, want this tenant's own %q", got, said[cp.Name()])
			}
			raw, err := cs.CoreV1().Pods("default").GetLogs("web", &corev1.PodLogOptions{Container: "app", Timestamps: true}).DoRaw(t.Context())
			if err != nil || !strings.HasSuffix(strings.TrimSpace(string(raw)), " "+said[cp.Name()]) || !strings.HasPrefix(string(raw), "20") {
				t.Fatalf("logs with timestamps: %q, %v", raw, err)
			}
		})
		t.Run(cp.Name()+"/logs-follow", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			stream, err := cs.CoreV1().Pods("default").GetLogs("web", &corev1.PodLogOptions{Container: "app", Follow: true}).Stream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			live := cp.Name() + " followed"
			writing := make(chan struct{})
			go func() {
				defer close(writing)
				appendUntil(ctx, t, logsFile[cp.Name()], live)
			}()
			out := &untilWriter{want: live, seen: cancel}
			_, _ = io.Copy(out, stream)
			cancel()
			<-writing
			if !strings.HasPrefix(out.String(), said[cp.Name()]+"\n") || !strings.Contains(out.String(), live) {
				t.Fatalf("followed logs %q, want %q and then %q as it is written", out.String(), said[cp.Name()], live)
			}
		})
		t.Run(cp.Name()+"/exec", func(t *testing.T) {
			stdout, stderr, err := execIn(t.Context(), cp.Config(), cs, "web", []string{"sh", "-c", "echo out-$((6*7)); echo err >&2; read line; echo got-$line"}, "ping\n")
			if err != nil {
				t.Fatalf("exec: %v (stderr %q)", err, stderr)
			}
			if stdout != "out-42\ngot-ping\n" || stderr != "err\n" {
				t.Fatalf("exec: stdout %q, stderr %q", stdout, stderr)
			}
			// kwok reports a command's exit status as an error message, not
			// as the status a kubelet gives: the message must come through.
			//
			// A streaming server writes the status and then resets every
			// stream as it closes; the SPDY client's Read then chooses at
			// random between the stream's data and its reset (moby/spdystream
			// Stream.Read), so upstream loses a status now and then (a nil
			// error), with or without Tenantry in the path. The proxy must
			// pass the status on whenever it is not lost that way: it must
			// come through within a few tries, and nothing else may.
			const tries = 5
			err = nil
			for i := 0; i < tries && err == nil; i++ {
				_, _, err = execIn(t.Context(), cp.Config(), cs, "web", []string{"sh", "-c", "exit 3"}, "")
			}
			if err == nil || !strings.Contains(err.Error(), "exit status 3") {
				t.Fatalf("exec of exit 3 (%d tries): %v, want the exit status", tries, err)
			}
		})
		t.Run(cp.Name()+"/attach", func(t *testing.T) {
			// kwok's attach streams the container's log, and holds on.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("web").SubResource("attach").
				VersionedParams(&corev1.PodAttachOptions{Container: "app", Stdout: true}, scheme.ParameterCodec)
			exec, err := remotecommand.NewSPDYExecutor(cp.Config(), http.MethodPost, req.URL())
			if err != nil {
				t.Fatal(err)
			}
			live := cp.Name() + " live"
			writing := make(chan struct{})
			go func() {
				defer close(writing)
				appendUntil(ctx, t, attachLog[cp.Name()], live)
			}()
			out := &untilWriter{want: live, seen: cancel}
			_ = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: out})
			cancel()
			<-writing
			if !strings.Contains(out.String(), live) {
				t.Fatalf("attached output %q, want %q", out.String(), live)
			}
		})
		t.Run(cp.Name()+"/port-forward", func(t *testing.T) {
			echoThroughPortForward(t, cp.Config(), "web", 8080)
		})
	}

	// Straight at Tenantry's kubelet API, as each tenant's API server.
	base := "https://" + net.JoinHostPort(address, strconv.Itoa(int(port)))
	asTenant1 := kubeletClient(t, w.Env.Tenants[0], "kube-apiserver-kubelet-client")
	status, body := get(t, asTenant1, base+"/containerLogs/default/web/app")
	if status != http.StatusOK || !strings.HasPrefix(body, said["tenant-1"]+"\n") {
		t.Fatalf("tenant-1's own Pod: %d %q", status, body)
	}
	// The host gets the query built from the path, not the caller's.
	status, body = get(t, asTenant1, base+"/containerLogs/default/web/app?container=sidecar&insecureSkipTLSVerifyBackend=true")
	if status != http.StatusOK || !strings.HasPrefix(body, said["tenant-1"]+"\n") {
		t.Fatalf("a query naming another container: %d %q, want app's whole log", status, body)
	}
	status, body = get(t, asTenant1, base+"/exec/default/web/sidecar?command=ls&output=1")
	if status != http.StatusNotFound || !strings.Contains(body, "pod default/web has no container sidecar") {
		t.Fatalf("a container the tenant Pod does not have: %d %q, want 404", status, body)
	}
	// An ephemeral container (kubectl debug) runs in the host Pod, and the
	// kubelet API reaches it; one of the same name that a host admin added
	// first is the host's, never the tenant's.
	hostKey := client.ObjectKey{Namespace: syncer.HostNamespace("tenant-1", "default"), Name: "web"}
	hostWeb := &corev1.Pod{}
	if err := w.Host.Get(t.Context(), hostKey, hostWeb); err != nil {
		t.Fatal(err)
	}
	ephemeral := func(name, image string) corev1.EphemeralContainer {
		return corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: name, Image: image, ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}}
	}
	hostWeb.Spec.EphemeralContainers = append(hostWeb.Spec.EphemeralContainers, ephemeral("admin-debugger", "host-tools"))
	if err := w.Host.SubResource("ephemeralcontainers").Update(t.Context(), hostWeb); err != nil {
		t.Fatal(err)
	}
	debugged := &corev1.Pod{}
	eventually(t, 10*time.Second, "the tenant adds two ephemeral containers", func(ctx context.Context) (bool, error) {
		if err := w.Tenants["tenant-1"].Get(ctx, client.ObjectKey{Namespace: "default", Name: "web"}, debugged); err != nil {
			return false, err
		}
		debugged.Spec.EphemeralContainers = append(debugged.Spec.EphemeralContainers, ephemeral("debugger", "busybox"), ephemeral("admin-debugger", "busybox"))
		err := w.Tenants["tenant-1"].SubResource("ephemeralcontainers").Update(ctx, debugged)
		return err == nil, err // a conflict: Tenantry wrote the status meanwhile
	})
	eventually(t, 30*time.Second, "the tenant's debugger in the host Pod, and the tenant's admin-debugger ended as refused", func(ctx context.Context) (bool, error) {
		if err := w.Host.Get(ctx, hostKey, hostWeb); err != nil {
			return false, err
		}
		if err := w.Tenants["tenant-1"].Get(ctx, client.ObjectKeyFromObject(debugged), debugged); err != nil {
			return false, err
		}
		var images []string
		for _, e := range hostWeb.Spec.EphemeralContainers {
			images = append(images, e.Name+"="+e.Image)
		}
		refused := slices.ContainsFunc(debugged.Status.EphemeralContainerStatuses, func(s corev1.ContainerStatus) bool {
			return s.Name == "admin-debugger" && s.State.Terminated != nil && s.State.Terminated.Reason == syncer.ReasonHostRejected
		})
		return slices.Equal(images, []string{"admin-debugger=host-tools", "debugger=busybox"}) && refused,
			fmt.Errorf("host ephemeral containers %v; tenant statuses %+v", images, debugged.Status.EphemeralContainerStatuses)
	})
	status, body = get(t, asTenant1, base+"/containerLogs/default/web/debugger")
	if status != http.StatusOK || !strings.HasPrefix(body, said["tenant-1"]+"\n") {
		t.Fatalf("the tenant's ephemeral container's logs: %d %q", status, body)
	}
	for _, path := range []string{"/exec/default/web/admin-debugger?command=ls&output=1", "/containerLogs/default/web/admin-debugger", "/attach/default/web/admin-debugger?output=1"} {
		status, body := get(t, asTenant1, base+path)
		if status != http.StatusNotFound || !strings.Contains(body, "container admin-debugger of pod default/web does not run in the host") {
			t.Fatalf("%s, the host's ephemeral container under the tenant's name: %d %q, want 404", path, status, body)
		}
	}

	status, body = get(t, asTenant1, base+"/containerLogs/default/only-in-2/app")
	if status != http.StatusNotFound || !strings.Contains(body, "pod default/only-in-2 not found") {
		t.Fatalf("tenant-2's Pod asked by tenant-1: %d %q, want 404", status, body)
	}
	status, body = get(t, kubeletClient(t, w.Env.Tenants[0], "nobody"), base+"/containerLogs/default/web/app")
	if status != http.StatusForbidden || !strings.Contains(body, "nobody may not get nodes/proxy") {
		t.Fatalf("a tenant-1 user without nodes/proxy: %d %q, want 403", status, body)
	}
	status, body = get(t, selfSignedClient(t), base+"/containerLogs/default/web/app")
	if status != http.StatusUnauthorized || !strings.Contains(body, "not signed by the client CA of any tenant") {
		t.Fatalf("a certificate of no tenant: %d %q, want 401", status, body)
	}
	status, _ = get(t, asTenant1, base+"/pods")
	if status != http.StatusNotFound {
		t.Fatalf("an endpoint not served: %d, want 404", status)
	}

	// Any tenant Pod can open connections to the kubelet API (a virtual
	// node's address is the manager's): held open without a handshake,
	// one source's are bounded, those past the bound are closed at once,
	// and the tenant's API server still reaches its Pods' logs.
	const flood = 300
	conns := make([]net.Conn, flood)
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.55")}}
	for i := range conns {
		c, err := dialer.Dial("tcp", net.JoinHostPort(address, strconv.Itoa(int(port))))
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		defer c.Close()
	}
	var closedAtOnce atomic.Int32
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := c.Read(make([]byte, 1)); errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
				closedAtOnce.Add(1)
			}
		})
	}
	wg.Wait()
	if n := closedAtOnce.Load(); n != flood-256 {
		t.Errorf("%d of %d idle connections from one source were closed at once; want those past 256", n, flood)
	}
	tenant1 := kubernetes.NewForConfigOrDie(w.Env.Tenants[0].Config())
	if raw, err := tenant1.CoreV1().Pods("default").GetLogs("web", &corev1.PodLogOptions{Container: "app"}).DoRaw(t.Context()); err != nil || !strings.HasPrefix(string(raw), said["tenant-1"]) {
		t.Errorf("logs through tenant-1's API server during the flood: %q, %v", raw, err)
	}
}

// createRunningPod creates a one-container Pod in default and waits until
// it runs in the host and the tenant says so.
func createRunningPod(t *testing.T, c client.Client, name string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}
	if err := c.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "Pod "+name+" runs", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		return pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName != "", fmt.Errorf("phase %s, node %q", pod.Status.Phase, pod.Spec.NodeName)
	})
}

// execIn runs command in the Pod's container through the tenant API
// server, with stdin, as kubectl exec -i does.
func execIn(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, pod string, command []string, stdin string) (string, string, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "app", Command: command, Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, req.URL())
	if err != nil {
		return "", "", err
	}
	var stdout, stderr bytes.Buffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), stderr.String(), err
}

// untilWriter collects a stream, and calls seen once it holds want. (It
// has no ReadFrom, which io.Copy would use to read to the end.)
type untilWriter struct {
	buf  bytes.Buffer
	want string
	seen func()
}

func (w *untilWriter) Write(p []byte) (int, error) {
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.seen()
	}
	return n, err
}

func (w *untilWriter) String() string { return w.buf.String() }

// echoThroughPortForward forwards a local port to the Pod's port, through
// the tenant API server, and checks that what it sends comes back (the
// kit's port-forwards echo).
func echoThroughPortForward(t *testing.T, cfg *rest.Config, pod string, port int) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cfg)
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	defer func() {
		close(stop)
		<-done
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("port-forward not ready after 30 s")
	}
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "ping\n" {
		t.Fatalf("through the port-forward: %q, %v; want the echo ping", got, err)
	}
}

// kubeletClient is an HTTPS client with a client certificate of the
// control plane's client CA, for user in groups.
func kubeletClient(t *testing.T, cp *tenantrytest.ControlPlane, user string, groups ...string) *http.Client {
	t.Helper()
	cfg, err := cp.AddUser(user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	return httpsClient(pair)
}

// selfSignedClient presents a certificate that no tenant's CA signed.
func selfSignedClient(t *testing.T) *http.Client {
	t.Helper()
	crt, key, err := cert.GenerateSelfSignedCertKey("intruder", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	return httpsClient(pair)
}

func httpsClient(pair tls.Certificate) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{pair},
		// The kubelet API serves a self-signed certificate, as a tenant
		// API server without --kubelet-certificate-authority accepts.
		InsecureSkipVerify: true, //nolint:gosec
	}}}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	if _, err := url.Parse(u); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
