package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// kubectlPath is the kubectl that make envtest builds beside the control
// planes' binaries.
func kubectlPath(t *testing.T) string {
	t.Helper()
	path := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no kubectl at %s (make envtest builds it): %v", path, err)
	}
	return path
}

// What a person does with a tenant of `tenantry dev`, with the real
// kubectl against the tenant's API server: logs, logs -f, exec with stdin,
// attach and port-forward, each through the virtual node's kubelet API,
// the host API server, and kwok.
func TestDevKubectl(t *testing.T) {
	kubectl := kubectlPath(t)
	ctx := t.Context()
	d, err := startDev(ctx, devOptions{tenants: 1, nodes: 1, metricsBindAddress: "0", healthProbeBindAddress: "0", assets: os.Getenv("KUBEBUILDER_ASSETS")}, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.finish(nil); err != nil {
			t.Error(err)
		}
	})
	tenant := d.tenants["tenant-1"]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}
	if err := tenant.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	tenantrytest.Eventually(t, time.Minute, "the Pod runs", func(ctx context.Context) (bool, error) {
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		return pod.Status.Phase == corev1.PodRunning, fmt.Errorf("phase %s", pod.Status.Phase)
	})
	command := func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", d.kubeconfigs["tenant-1"]}, args...)...)
	}
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := command(ctx, args...)
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}
	wantLogs := strings.Join(tenantrytest.KwokLogLines, "\n") + "\n"

	if got := run("", "logs", "web"); got != wantLogs {
		t.Errorf("kubectl logs web = %q, want %q", got, wantLogs)
	}
	if got := run("", "logs", "web", "--tail=1"); got != tenantrytest.KwokLogLines[len(tenantrytest.KwokLogLines)-1]+"\n" {
		t.Errorf("kubectl logs --tail=1 = %q", got)
	}
	if got := run("hello\n", "exec", "-i", "web", "--", "sh", "-c", "echo in-$((6*7)); read line; echo got-$line"); got != "in-42\ngot-hello\n" {
		t.Errorf("kubectl exec -i = %q", got)
	}

	// Streams that stay open: read what they print, then stop them.
	stream := func(pattern string, args ...string) (*regexp.Regexp, []string, func()) {
		t.Helper()
		sctx, cancel := context.WithCancel(ctx)
		cmd := command(sctx, args...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stop := func() {
			cancel()
			_ = cmd.Wait()
		}
		re := regexp.MustCompile(pattern)
		lines := make(chan string)
		go func() {
			defer close(lines)
			s := bufio.NewScanner(out)
			for s.Scan() {
				lines <- s.Text()
			}
		}()
		var seen []string
		timeout := time.After(30 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					stop()
					t.Fatalf("kubectl %s ended before printing %q: %q", strings.Join(args, " "), pattern, seen)
				}
				seen = append(seen, line)
				if m := re.FindStringSubmatch(line); m != nil {
					go func() {
						for range lines { // drain until it stops
						}
					}()
					return re, m, stop
				}
			case <-timeout:
				stop()
				t.Fatalf("kubectl %s printed no %q in 30 s: %q", strings.Join(args, " "), pattern, seen)
			}
		}
	}
	_, _, stop := stream("^"+regexp.QuoteMeta(tenantrytest.KwokLogLines[len(tenantrytest.KwokLogLines)-1])+"$", "logs", "-f", "web")
	stop()

	// kubectl logs the upgraded request at -v=6: the attach stream opened.
	_, _, stop = stream(`/attach\?.*101 Switching Protocols`, "attach", "web", "-c", "app", "-v=6")
	stop()
	// Counted as the stream ends.
	tenantrytest.Eventually(t, 10*time.Second, "Tenantry's kubelet API relayed the attach", func(context.Context) (bool, error) {
		n, err := kubeletRequests("tenant-1", "attach", "101")
		return n > 0, err
	})

	_, m, stop := stream(`^Forwarding from 127\.0\.0\.1:(\d+) -> 8080$`, "port-forward", "pod/web", ":8080")
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+m[1], 5*time.Second)
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
		t.Fatalf("through kubectl port-forward: %q, %v; want the echo", got, err)
	}

	conn.Close()
	stop()

	// Every command went through the virtual node's kubelet API (the
	// manager runs in this process); a stream is counted as it ends.
	for _, want := range [][2]string{{"logs", "200"}, {"exec", "101"}, {"portforward", "101"}} {
		tenantrytest.Eventually(t, 10*time.Second, "Tenantry's kubelet API relayed "+want[0], func(context.Context) (bool, error) {
			n, err := kubeletRequests("tenant-1", want[0], want[1])
			return n > 0, err
		})
	}
}

// kubeletRequests reads the kubelet API's request counter of this
// process's manager.
func kubeletRequests(cluster, endpoint, code string) (float64, error) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() != "tenantry_kubelet_api_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["cluster"] == cluster && labels["endpoint"] == endpoint && labels["code"] == code {
				return m.GetCounter().GetValue(), nil
			}
		}
	}
	return 0, nil
}
