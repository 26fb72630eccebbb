package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// What a person does with a tenant of `tenantry dev` (which runs
// `tenantry-dev up`), with the real kubectl against the tenant's API
// server: run a Pod, then logs, logs -f, exec with stdin, attach and
// port-forward, each through the virtual node's kubelet API, the host API
// server, and kwok; Ctrl-C then stops it all.
func TestDevKubectl(t *testing.T) {
	metricsAddr, err := tenantrytest.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	dir := startDev(t, "--tenants=1", "--nodes=1", "--simulated-nodes", "--metrics-bind-address="+metricsAddr)
	k := newKubectl(t, filepath.Join(dir, "tenant-1.kubeconfig"))
	k.run("", "run", "web", "--image=busybox")
	k.run("", "wait", "--for=condition=Ready", "pod/web", "--timeout=60s")
	wantLogs := strings.Join(tenantrytest.KwokLogLines, "\n") + "\n"

	if got := k.run("", "logs", "web"); got != wantLogs {
		t.Errorf("kubectl logs web = %q, want %q", got, wantLogs)
	}
	if got := k.run("", "logs", "web", "--tail=1"); got != tenantrytest.KwokLogLines[len(tenantrytest.KwokLogLines)-1]+"\n" {
		t.Errorf("kubectl logs --tail=1 = %q", got)
	}
	k.execStdin("web")
	_, _, stop := k.stream("^"+regexp.QuoteMeta(tenantrytest.KwokLogLines[len(tenantrytest.KwokLogLines)-1])+"$", "logs", "-f", "web")
	stop()
	k.attach("web", metricsAddr, "tenant-1")

	// kwok's Pods echo what a port-forward sends.
	conn, stop := k.portForward("pod/web", 8080)
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

	expectKubeletRequests(t, metricsAddr, "tenant-1")
}

// startDev runs `tenantry-dev up` with args as a process of its own (as a
// person does), in a directory of the test's, until it says it is ready;
// the test's end stops it with Ctrl-C and fails the test if it does not
// stop cleanly. It returns the directory, which holds the kubeconfigs.
func startDev(t *testing.T, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	dev := exec.Command(os.Args[0], append([]string{"up", "--dir=" + dir}, args...)...)
	dev.Env = append(os.Environ(), runCLIEnv+"=1")
	var devOut tenantrytest.Buffer
	dev.Stdout, dev.Stderr = &devOut, &devOut
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- dev.Wait() }()
	t.Cleanup(func() {
		_ = dev.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("tenantry-dev up after Ctrl-C: %v\n%s", err, devOut.String())
			}
		case <-time.After(2 * time.Minute):
			_ = dev.Process.Kill()
			t.Errorf("tenantry-dev up still runs two minutes after Ctrl-C:\n%s", devOut.String())
		}
	})
	tenantrytest.Eventually(t, 8*time.Minute, "tenantry-dev up is ready", func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			t.Fatalf("tenantry-dev up exited: %v\n%s", err, devOut.String())
		default:
		}
		return strings.Contains(devOut.String(), "Ready. Press Ctrl-C to stop."), errors.New("not yet")
	})
	return dir
}

// kubectl is the real kubectl against one cluster, for a test.
type kubectl struct {
	t          *testing.T
	path       string
	kubeconfig string
}

func newKubectl(t *testing.T, kubeconfig string) *kubectl {
	k, err := tenantrytest.FindKubectl()
	if err != nil {
		t.Fatal(err)
	}
	return &kubectl{t: t, path: k.Path, kubeconfig: kubeconfig}
}

func (k *kubectl) command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, k.path, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
}

// run runs kubectl with stdin and returns its output, failing the test
// if it fails.
func (k *kubectl) run(stdin string, args ...string) string {
	k.t.Helper()
	cmd := k.command(k.t.Context(), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// execStdin runs a shell in pod through kubectl exec -i, and checks what
// it prints of the line it reads.
func (k *kubectl) execStdin(pod string) {
	k.t.Helper()
	if got := k.run("hello\n", "exec", "-i", pod, "--", "sh", "-c", "echo in-$((6*7)); read line; echo got-$line"); got != "in-42\ngot-hello\n" {
		k.t.Errorf("kubectl exec -i %s = %q", pod, got)
	}
}

// attach attaches to pod's first container until the kubelet API of
// cluster, whose manager serves its metrics at metricsAddr, opened the
// stream.
func (k *kubectl) attach(pod, metricsAddr, cluster string) {
	k.t.Helper()
	// kubectl logs the upgraded request at -v=6: the attach stream opened.
	_, _, stop := k.stream(`/attach\?.*101 Switching Protocols`, "attach", pod, "-v=6")
	defer stop()
	// The tenant API server answers kubectl first, then reaches the
	// kubelet: attached until the kubelet API has opened the stream.
	tenantrytest.Eventually(k.t, 30*time.Second, "the kubelet API opened the attach", func(context.Context) (bool, error) {
		return strings.Contains(metricsText(k.t, metricsAddr), kubeletSeries(cluster, "attach", "101")), errors.New("not yet")
	})
}

// portForward runs kubectl port-forward to target's port and returns a
// connection through it, and what stops it.
func (k *kubectl) portForward(target string, port int) (net.Conn, func()) {
	k.t.Helper()
	_, m, stop := k.stream(fmt.Sprintf(`^Forwarding from 127\.0\.0\.1:(\d+) -> %d$`, port), "port-forward", target, fmt.Sprintf(":%d", port))
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+m[1], 5*time.Second)
	if err != nil {
		stop()
		k.t.Fatal(err)
	}
	return conn, stop
}

// stream runs kubectl until it printed a line that matches pattern, and
// returns the match and what stops it.
func (k *kubectl) stream(pattern string, args ...string) (*regexp.Regexp, []string, func()) {
	t := k.t
	t.Helper()
	sctx, cancel := context.WithCancel(t.Context())
	cmd := k.command(sctx, args...)
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

// expectKubeletRequests checks that logs, exec and port-forward of
// cluster went through its virtual nodes' kubelet API, as the manager's
// metrics at metricsAddr count.
func expectKubeletRequests(t *testing.T, metricsAddr, cluster string) {
	t.Helper()
	metrics := metricsText(t, metricsAddr)
	for _, want := range [][2]string{{"logs", "200"}, {"exec", "101"}, {"portforward", "101"}} {
		if series := kubeletSeries(cluster, want[0], want[1]); !strings.Contains(metrics, series) {
			t.Errorf("the manager's metrics have no %s:\n%s", series, grepLines(metrics, "tenantry_kubelet_api_requests_total"))
		}
	}
}

// kubeletSeries is the start of the kubelet API's request counter of
// cluster's requests to endpoint answered with code.
func kubeletSeries(cluster, endpoint, code string) string {
	return fmt.Sprintf(`tenantry_kubelet_api_requests_total{cluster=%q,code=%q,endpoint=%q} `, cluster, code, endpoint)
}

// metricsText reads the manager's metrics.
func metricsText(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// grepLines are the lines of text that hold s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
