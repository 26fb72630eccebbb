package main

import (
	"context"
	"fmt"
	"maps"
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

	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// recoveryWorld is a host and tenants, each tenant with a VirtualCluster
// "vc-<i>" and objects in its default namespace, for the recovery tests,
// which run the manager as processes of their own.
type recoveryWorld struct {
	env     *tenantrytest.Environment
	host    client.Client
	tenants []client.Client
}

func newRecoveryWorld(t *testing.T, tenants int) *recoveryWorld {
	t.Helper()
	w := &recoveryWorld{env: tenantrytest.New(t, tenantrytest.Options{
		Tenants:               tenants,
		HostCRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
	})}
	w.host = newHostClient(t, w.env.Host)
	for i, cp := range w.env.Tenants {
		w.tenants = append(w.tenants, newHostClient(t, cp))
		kubeconfig, err := cp.Kubeconfig()
		if err != nil {
			t.Fatal(err)
		}
		createSecret(t, w.host, vcName(i)+"-kubeconfig", kubeconfig)
		createVC(t, w.host, vcName(i), vcName(i)+"-kubeconfig")
	}
	return w
}

func vcName(i int) string { return fmt.Sprintf("vc-%d", i) }

// recoveryConfigMap is the ConfigMap named cm-<i> with value v.
func recoveryConfigMap(i int, v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cm-%d", i)},
		Data:       map[string]string{"v": v},
	}
}

// create makes ConfigMaps cm-<from> to cm-<to-1> with value v in every
// tenant.
func (w *recoveryWorld) create(t *testing.T, from, to int, v string) {
	t.Helper()
	for _, tenant := range w.tenants {
		for i := from; i < to; i++ {
			if err := tenant.Create(t.Context(), recoveryConfigMap(i, v)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// edit, in every tenant, deletes cm-<0..n-1>, changes cm-<n..2n-1> to
// value v, and creates cm-<next..next+n-1>: what a tenant does while the
// manager, or the host, is away.
func (w *recoveryWorld) edit(t *testing.T, n, next int, v string) {
	t.Helper()
	ctx := t.Context()
	for _, tenant := range w.tenants {
		for i := range n {
			if err := tenant.Delete(ctx, recoveryConfigMap(i, "")); err != nil {
				t.Fatal(err)
			}
			if err := tenant.Update(ctx, recoveryConfigMap(n+i, v)); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.create(t, next, next+n, v)
}

// converged says whether every tenant's cm-* ConfigMaps and their host
// copies are the same set with the same data.
func (w *recoveryWorld) converged(ctx context.Context) (bool, error) {
	for i, tenant := range w.tenants {
		var tl, hl corev1.ConfigMapList
		if err := tenant.List(ctx, &tl, client.InNamespace("default")); err != nil {
			return false, err
		}
		if err := w.host.List(ctx, &hl, client.InNamespace(syncer.HostNamespace(vcName(i), "default"))); err != nil {
			return false, err
		}
		want, have := dataByName(tl.Items), dataByName(hl.Items)
		if !maps.EqualFunc(want, have, maps.Equal) {
			return false, fmt.Errorf("%s: %d ConfigMaps in the tenant, %d host copies, %s", vcName(i), len(want), len(have), firstDifference(want, have))
		}
	}
	return true, nil
}

func dataByName(items []corev1.ConfigMap) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, cm := range items {
		if strings.HasPrefix(cm.Name, "cm-") {
			out[cm.Name] = cm.Data
		}
	}
	return out
}

func firstDifference(want, have map[string]map[string]string) string {
	for name, data := range want {
		if h, ok := have[name]; !ok {
			return name + " has no host copy"
		} else if !maps.Equal(h, data) {
			return fmt.Sprintf("%s's copy holds %v, not %v", name, h, data)
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			return name + "'s host copy is an orphan"
		}
	}
	return "no difference"
}

// waitConverged waits until the tenants and the host agree, and returns
// how long that took from since.
func (w *recoveryWorld) waitConverged(t *testing.T, since time.Time, what string) time.Duration {
	t.Helper()
	eventually(t, 90*time.Second, what, w.converged)
	return time.Since(since)
}

// A manager killed mid-run, with tenants edited while it is down (objects
// deleted, changed and created), converges at once when it restarts: each
// tenant reconciles its host copies as it starts, orphans among them. The
// patroller is off, so nothing here depends on it.
func TestRestartedManagerConverges(t *testing.T) {
	w := newRecoveryWorld(t, 2)
	kubeconfig, err := w.env.Host.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	const objects = 300
	w.create(t, 0, objects, "1")
	args := []string{"--sync-resources", "configmaps", "--patrol-period", "-1s"}
	first := startManager(t, kubeconfig, args...)
	w.waitConverged(t, time.Now(), "the first manager syncs every ConfigMap")

	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.done
	w.edit(t, 50, objects, "2")

	restarted := time.Now()
	startManager(t, kubeconfig, args...)
	took := w.waitConverged(t, restarted, "the restarted manager converges, with the patroller off")
	t.Logf("converged %s after the restart (%d ConfigMaps per tenant; 50 deleted, 50 changed, 50 created while down)",
		took.Round(100*time.Millisecond), objects)
}

// A host that is away for 20 s: the leader loses its Lease and exits (the
// one exit allowed); restarted at once, as a kubelet would, the manager
// waits for the host instead of exiting again, and converges once the
// host is back, edits made meanwhile included.
func TestHostOutage(t *testing.T) {
	w := newRecoveryWorld(t, 2)
	path, err := w.env.Host.NewPath()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := path.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	const objects = 100
	w.create(t, 0, objects, "1")
	sup := supervise(t, kubeconfig, "--leader-elect", "--leader-election-namespace", "default", "--sync-resources", "configmaps")
	w.waitConverged(t, time.Now(), "the manager syncs every ConfigMap")

	if err := path.Disconnect(); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	w.edit(t, 20, objects, "2")
	// An outage, not a state to wait for: the manager must ride it out.
	select {
	case <-time.After(20*time.Second - time.Since(cut)):
	case <-t.Context().Done():
		t.Fatal(t.Context().Err())
	}
	if err := path.Reconnect(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	took := w.waitConverged(t, back, "converged after the host came back")
	// Counted once converged: an exit after the host came back counts too.
	exits := sup.exits()
	if len(exits) > 1 || (len(exits) == 1 && !strings.Contains(exits[0], errLeaderElectionLostLog)) {
		t.Errorf("the manager exited %d times, want at most once, on losing its Lease: %q", len(exits), exits)
	}
	t.Logf("converged %s after the 20 s outage ended; the manager exited %d times", took.Round(100*time.Millisecond), len(exits))
}

// errLeaderElectionLostLog is what the manager logs as it exits on losing
// its Lease.
const errLeaderElectionLostLog = "lost the leader Lease"

// When the leader is killed, another replica takes over within the Lease
// duration and syncs what the tenant made meanwhile.
func TestLeaderFailover(t *testing.T) {
	w := newRecoveryWorld(t, 1)
	kubeconfig, err := w.env.Host.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--leader-elect", "--leader-election-namespace", "default", "--sync-resources", "configmaps"}
	leader := startManager(t, kubeconfig, args...)
	w.create(t, 0, 1, "1")
	w.waitConverged(t, time.Now(), "the leader syncs")
	eventually(t, 30*time.Second, "the leader holds the Lease", func(ctx context.Context) (bool, error) {
		var l coordinationv1.Lease
		if err := w.host.Get(ctx, client.ObjectKey{Namespace: "default", Name: "tenantry-manager.tenantry.dev"}, &l); err != nil {
			return false, err
		}
		return ptr.Deref(l.Spec.HolderIdentity, "") != "", nil
	})
	standby := startManager(t, kubeconfig, args...)
	eventually(t, 30*time.Second, "the standby tries for the Lease", func(context.Context) (bool, error) {
		return strings.Contains(standby.log.String(), "Attempting to acquire leader lease"), nil
	})

	if err := leader.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	w.create(t, 1, 2, "1")
	took := w.waitConverged(t, killed, "the new leader copies the ConfigMap made after the kill")
	t.Logf("first new copy %s after the leader was killed (lease duration %s)", took.Round(100*time.Millisecond), 15*time.Second)
}

// supervisor restarts a manager process whenever it exits, at once, as a
// kubelet restarts a container (without its backoff), and records why each
// exited.
type supervisor struct {
	mu     sync.Mutex
	exited []string // the last lines of each exited process's log
}

func supervise(t *testing.T, kubeconfig []byte, args ...string) *supervisor {
	t.Helper()
	s := &supervisor{}
	ctx := t.Context()
	m := startManager(t, kubeconfig, args...)
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		for {
			select {
			case <-ctx.Done():
				return
			case <-m.done:
			}
			if ctx.Err() != nil {
				return
			}
			log := m.log.String()
			s.mu.Lock()
			s.exited = append(s.exited, fmt.Sprintf("%v: %s", m.err, log[max(0, len(log)-2000):]))
			s.mu.Unlock()
			if m, err = launchManager(t, kubeconfig, args...); err != nil {
				t.Errorf("restarting the manager: %v", err)
				return
			}
		}
	})
	t.Cleanup(wg.Wait)
	return s
}

// exits are the logs' ends of the processes that exited so far.
func (s *supervisor) exits() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.exited...)
}
