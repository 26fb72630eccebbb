package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// runManagerEnv makes the test binary run the manager (TestMain).
const runManagerEnv = "TENANTRY_TEST_RUN_MANAGER"

// managerProcess is a manager running in a process of its own, as a replica.
type managerProcess struct {
	cmd    *exec.Cmd
	log    *tenantrytest.Buffer
	done   chan struct{}
	exitAt time.Time
	err    error
}

// startManager runs the manager with kubeconfig and args as a process of
// its own; it is killed at the test's end.
func startManager(t *testing.T, kubeconfig []byte, args ...string) *managerProcess {
	t.Helper()
	m, err := launchManager(t, kubeconfig, args...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// launchManager is startManager for any goroutine: it returns its error.
func launchManager(t *testing.T, kubeconfig []byte, args ...string) (*managerProcess, error) {
	path := filepath.Join(t.TempDir(), "host.kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	m := &managerProcess{log: &tenantrytest.Buffer{}, done: make(chan struct{})}
	m.cmd = exec.Command(os.Args[0], append([]string{
		"--kubeconfig", path, "--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--log-level", "debug",
		"--kubelet-bind-address", "127.0.0.1:0", "--dns-bind-address", "127.0.0.1:0", "--control-plane-activity-bind-address", "127.0.0.1:0",
	}, args...)...)
	m.cmd.Env = append(os.Environ(), runManagerEnv+"=1")
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting a manager process: %w", err)
	}
	go func() {
		m.err = m.cmd.Wait()
		m.exitAt = time.Now()
		close(m.done)
	}()
	t.Cleanup(func() {
		_ = m.cmd.Process.Kill()
		<-m.done
		if t.Failed() {
			t.Logf("manager %d's log:\n%s", m.cmd.Process.Pid, m.log.String())
		}
	})
	return m, nil
}

// logLine is one JSON line of a manager's log.
type logLine struct {
	Msg     string `json:"msg"`
	TS      string `json:"ts"`
	Cluster string `json:"cluster"`
	Replica string `json:"replica"`
	at      time.Time
}

// lines are the manager's JSON log lines so far.
func (m *managerProcess) lines(t *testing.T) []logLine {
	t.Helper()
	var out []logLine
	scanner := bufio.NewScanner(bytes.NewReader([]byte(m.log.String())))
	scanner.Buffer(nil, 1<<20)
	for scanner.Scan() {
		var line logLine
		if json.Unmarshal(scanner.Bytes(), &line) != nil {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, line.TS)
		if err != nil {
			t.Fatalf("log time %q: %v", line.TS, err)
		}
		line.at = ts
		out = append(out, line)
	}
	return out
}

// hostWrites are the manager's logs of each write of a host copy that
// succeeded.
func (m *managerProcess) hostWrites(t *testing.T) []logLine {
	t.Helper()
	var out []logLine
	for _, l := range m.lines(t) {
		if strings.HasSuffix(l.Msg, "host copy") {
			out = append(out, l)
		}
	}
	return out
}

// A leader cut off from the host loses its Lease, and exits before the
// next leader acquires it: none of its writes lands after that, although
// it had work queued and the network comes back. (The write times are
// the replicas' own logs of each write that succeeded.)
func TestOldLeaderWritesNothingAfterTheNewLeaderAcquires(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{
		Tenants:               1,
		HostCRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
	})
	ctx := t.Context()
	host := newHostClient(t, env.Host)
	tenant := newHostClient(t, env.Tenants[0])
	tenantKubeconfig, err := env.Tenants[0].Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	createSecret(t, host, "vc-kubeconfig", tenantKubeconfig)
	createVC(t, host, "vc", "vc-kubeconfig")

	// Replica A reaches the host through a path of its own, which is cut.
	pathA, err := env.Host.NewPath()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigA, err := pathA.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigB, err := env.Host.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	electionArgs := []string{"--leader-elect", "--leader-election-namespace", "default", "--sync-resources", "configmaps"}
	a := startManager(t, kubeconfigA, electionArgs...)
	lease := func(ctx context.Context) (*coordinationv1.Lease, error) {
		var l coordinationv1.Lease
		err := host.Get(ctx, client.ObjectKey{Namespace: "default", Name: "tenantry-manager.tenantry.dev"}, &l)
		return &l, err
	}
	var holderA string
	tenantrytest.Eventually(t, 30*time.Second, "A leads", func(ctx context.Context) (bool, error) {
		l, err := lease(ctx)
		if err != nil {
			return false, err
		}
		holderA = ptr.Deref(l.Spec.HolderIdentity, "")
		return holderA != "", nil
	})
	expectReady(t, host, "vc", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
	copied := func(name string) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			err := host.Get(ctx, client.ObjectKey{Namespace: syncer.HostNamespace("vc", "default"), Name: name}, &corev1.ConfigMap{})
			return err == nil, err
		}
	}
	if err := tenant.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "before"}}); err != nil {
		t.Fatal(err)
	}
	tenantrytest.Eventually(t, 30*time.Second, "A copies a ConfigMap", copied("before"))
	startManager(t, kubeconfigB, electionArgs...)

	if err := pathA.Disconnect(); err != nil {
		t.Fatal(err)
	}
	// The tenant goes on: A sees it (its tenant is not cut off) and queues
	// work that it cannot write.
	var (
		wg      sync.WaitGroup
		created []string
	)
	writerCtx, stopWriter := context.WithCancel(ctx)
	wg.Go(func() {
		for i := 0; writerCtx.Err() == nil; i++ {
			name := fmt.Sprintf("during-%d", i)
			if tenant.Create(writerCtx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}) == nil {
				created = append(created, name)
			}
			select {
			case <-writerCtx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
	var acquired time.Time
	tenantrytest.Eventually(t, 60*time.Second, "B acquires the Lease", func(ctx context.Context) (bool, error) {
		l, err := lease(ctx)
		if err != nil {
			return false, err
		}
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h == "" || h == holderA || l.Spec.AcquireTime == nil {
			return false, fmt.Errorf("holder %q", h)
		}
		acquired = l.Spec.AcquireTime.Time
		return true, nil
	})
	// The network comes back: a replica still running would now write.
	if err := pathA.Reconnect(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatal("A still runs after losing its Lease")
	}
	var exit *exec.ExitError
	if !errors.As(a.err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("A ended with %v; want exit code 1", a.err)
	}
	if !a.exitAt.Before(acquired) {
		t.Errorf("A exited at %s, after B acquired the Lease at %s", a.exitAt.Format(time.RFC3339Nano), acquired.Format(time.RFC3339Nano))
	}
	stopWriter()
	wg.Wait()
	for _, name := range created {
		tenantrytest.Eventually(t, 30*time.Second, "B copies "+name, copied(name))
	}
	writes := a.hostWrites(t)
	if len(writes) == 0 {
		t.Fatal("A's log shows no host write at all: the audit sees nothing")
	}
	for _, w := range writes {
		if !w.at.Before(acquired) {
			t.Errorf("A wrote to the host at %s, after B acquired the Lease at %s", w.at.Format(time.RFC3339Nano), acquired.Format(time.RFC3339Nano))
		}
	}
	t.Logf("A exited %s before B acquired the Lease; B copied the %d ConfigMaps made meanwhile",
		acquired.Sub(a.exitAt).Round(100*time.Millisecond), len(created))
}
