package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// managerProcess is bin/manager run by the bench as a user runs it: default
// flags, but for its listeners' addresses and a pprof listener from which
// the bench reads the live heap.
type managerProcess struct {
	cmd                 *exec.Cmd
	exited              chan struct{}
	err                 error // once exited is closed
	started             time.Time
	metricsURL, heapURL string
	log                 *os.File
}

func startManagerProcess(ctx context.Context, binary, kubeconfig string, extraArgs []string, logPath string) (*managerProcess, error) {
	var addrs [3]string
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		addrs[i] = l.Addr().String()
		_ = l.Close()
	}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	m := &managerProcess{
		exited:     make(chan struct{}),
		metricsURL: "http://" + addrs[0] + "/metrics",
		heapURL:    "http://" + addrs[2] + "/debug/pprof/heap?gc=1&debug=1",
		log:        log,
	}
	args := []string{"--kubeconfig", kubeconfig,
		"--metrics-bind-address", addrs[0], "--health-probe-bind-address", addrs[1], "--pprof-bind-address", addrs[2]}
	m.cmd = exec.Command(binary, append(args, extraArgs...)...)
	m.cmd.Stdout, m.cmd.Stderr = log, log
	m.started = time.Now()
	if err := m.cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting %s: %w", binary, err)
	}
	go func() {
		m.err = m.cmd.Wait()
		_ = log.Close()
		close(m.exited)
	}()
	readyz := "http://" + addrs[1] + "/readyz"
	if err := poll(ctx, 100*time.Millisecond, time.Minute, func(ctx context.Context) (bool, error) {
		select {
		case <-m.exited:
			return false, fmt.Errorf("bin/manager exited: %v (see %s)", m.err, logPath)
		default:
		}
		_, err := m.get(ctx, readyz)
		return err == nil, nil
	}); err != nil {
		_ = m.stop()
		return nil, fmt.Errorf("waiting for bin/manager to be ready: %w", err)
	}
	return m, nil
}

// stop ends the manager with SIGTERM, as a kubelet does, and kills it if it
// has not exited in a minute.
func (m *managerProcess) stop() error {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(time.Minute):
		_ = m.cmd.Process.Kill()
		<-m.exited
		return fmt.Errorf("bin/manager did not exit within a minute of SIGTERM (log: %s)", m.log.Name())
	}
	return nil
}

func (m *managerProcess) get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, nil
}

// scrape is one reading of the manager's metrics endpoint.
type scrape map[string]*dto.MetricFamily

func (m *managerProcess) metrics(ctx context.Context) (scrape, error) {
	body, err := m.get(ctx, m.metricsURL)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("parsing bin/manager's metrics: %w", err)
	}
	return families, nil
}

// value is the first series of a gauge, or 0.
func (s scrape) value(name string) float64 {
	f := s[name]
	if f == nil || len(f.GetMetric()) == 0 {
		return 0
	}
	return f.GetMetric()[0].GetGauge().GetValue()
}

// requests sums client-go's request counter over the API servers host
// selects.
func (s scrape) requests(host func(string) bool) float64 {
	sum := 0.0
	for _, m := range s["rest_client_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "host" && host(l.GetValue()) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// liveHeap is the manager's heap in use right after a garbage collection,
// read from the runtime statistics at the end of pprof's text heap profile.
func (m *managerProcess) liveHeap(ctx context.Context) (uint64, error) {
	body, err := m.get(ctx, m.heapURL)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapInuse = "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no HeapInuse in bin/manager's heap profile")
}

// sockets counts the open sockets of the manager process.
func (m *managerProcess) sockets() int {
	dir := fmt.Sprintf("/proc/%d/fd", m.cmd.Process.Pid)
	entries, _ := os.ReadDir(dir)
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}
