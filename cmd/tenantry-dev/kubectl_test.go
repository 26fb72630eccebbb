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
	k, err := tenantrytest.FindKubectl()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := k.Path
	ctx := t.Context()
	dir := t.TempDir()
	metricsAddr, err := tenantrytest.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	dev := exec.Command(os.Args[0], "up", "--tenants=1", "--nodes=1", "--simulated-nodes", "--dir="+dir, "--metrics-bind-address="+metricsAddr)
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
		case <-time.After(time.Minute):
			_ = dev.Process.Kill()
			t.Errorf("tenantry-dev up still runs a minute after Ctrl-C:\n%s", devOut.String())
		}
	})
	tenantrytest.Eventually(t, 3*time.Minute, "tenantry-dev up is ready", func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			t.Fatalf("tenantry-dev up exited: %v\n%s", err, devOut.String())
		default:
		}
		return strings.Contains(devOut.String(), "Ready. Press Ctrl-C to stop."), errors.New("not yet")
	})
	kubeconfig := filepath.Join(dir, "tenant-1.kubeconfig")
	command := func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
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
	run("", "run", "web", "--image=busybox")
	run("", "wait", "--for=condition=Ready", "pod/web", "--timeout=60s")
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
	_, _, stop = stream(`/attach\?.*101 Switching Protocols`, "attach", "web", "-c", "web", "-v=6")
	// The tenant API server answers kubectl first, then reaches the
	// kubelet: attached until the kubelet API has opened the stream.
	tenantrytest.Eventually(t, 30*time.Second, "the kubelet API opened the attach", func(context.Context) (bool, error) {
		return strings.Contains(metricsText(t, metricsAddr), kubeletSeries("attach", "101")), errors.New("not yet")
	})
	stop()

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

	// Every command went through the virtual node's kubelet API, as the
	// manager's metrics count.
	metrics := metricsText(t, metricsAddr)
	for _, want := range [][2]string{{"logs", "200"}, {"exec", "101"}, {"portforward", "101"}} {
		if series := kubeletSeries(want[0], want[1]); !strings.Contains(metrics, series) {
			t.Errorf("the manager's metrics have no %s:\n%s", series, grepLines(metrics, "tenantry_kubelet_api_requests_total"))
		}
	}
}

// kubeletSeries is the start of the kubelet API's request counter of
// tenant-1's requests to endpoint answered with code.
func kubeletSeries(endpoint, code string) string {
	return fmt.Sprintf(`tenantry_kubelet_api_requests_total{cluster="tenant-1",code=%q,endpoint=%q} `, code, endpoint)
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
