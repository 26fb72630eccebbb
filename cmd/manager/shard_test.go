package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/sharding"
	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// shardArgs run a sharded replica with the default lease timing (15 s).
var shardArgs = []string{"--shard-mode", "lease", "--shard-namespace", "default", "--sync-resources", "configmaps"}

// shardedVCs VirtualClusters over 3 tenant API servers: enough that a
// replica joining three live ones takes some (all but a 0.1% chance).
const shardedVCs = 18

// Three sharded replicas share the VirtualClusters, each run by the
// replica that owns it; SIGKILL one and its VirtualClusters are Ready
// again under the others within about the lease duration, while the
// others' never stop; a fourth replica takes exactly the VirtualClusters
// it now owns, and only those stop where they ran; a replica frozen past
// its lease exits once thawed. Throughout, no cluster runs on two replicas
// at once, and no replica writes to the host for a cluster while another
// holds its Lease.
func TestShardedReplicas(t *testing.T) {
	w := newRecoveryWorld(t, 3)
	for i := 3; i < shardedVCs; i++ {
		createVC(t, w.host, vcName(i), vcName(i%3)+"-kubeconfig")
	}
	kubeconfig, err := w.env.Host.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	history := watchKeyLeases(t, w.env.Host)

	replicas := map[string]*managerProcess{}
	for range 3 {
		m := startManager(t, kubeconfig, shardArgs...)
		replicas[replicaIdentity(t, m)] = m
	}
	live := slices.Sorted(maps.Keys(replicas))
	before := waitPlacement(t, w.host, live)
	waitEngaged(t, replicas, before)
	w.probe(t, "probe-1", shardedVCs)

	// SIGKILL the replica that runs the most VirtualClusters.
	victim := live[0]
	for _, id := range live {
		if len(before.runBy(id)) > len(before.runBy(victim)) {
			victim = id
		}
	}
	if err := replicas[victim].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	<-replicas[victim].done
	survivors := slices.DeleteFunc(slices.Clone(live), func(id string) bool { return id == victim })
	after := waitPlacement(t, w.host, survivors)
	failover := time.Since(killedAt)
	waitEngaged(t, without(replicas, victim), after)
	for vc, id := range before {
		if id != victim && after[vc] != id {
			t.Errorf("%s moved from %s to %s although its replica lives", vc, id, after[vc])
		}
	}
	for _, id := range survivors {
		if stopped := replicas[id].stoppedClusters(t, killedAt); len(stopped) > 0 {
			t.Errorf("replica %s stopped %v when %s was killed; it should only have taken clusters over", id, stopped, victim)
		}
	}
	t.Logf("killed %s, which ran %d of %d VirtualClusters: all Ready under %v %s later (lease duration %s)",
		victim, len(before.runBy(victim)), shardedVCs, survivors, failover.Round(100*time.Millisecond), sharding.DefaultLeaseDuration)
	// The lease duration from the kill at most, then a Spawn and a status
	// write: 3 s of room for a loaded machine.
	if limit := sharding.DefaultLeaseDuration + 3*time.Second; failover > limit {
		t.Errorf("failover took %s; want the lease duration and a spawn (at most %s)", failover, limit)
	}
	w.probe(t, "probe-2", shardedVCs)

	// A fourth replica joins: it takes what it owns now, and nothing else moves.
	ends := map[string]time.Time{victim: killedAt}
	joinedAt := time.Now()
	joiner := startManager(t, kubeconfig, shardArgs...)
	joinerID := replicaIdentity(t, joiner)
	replicas[joinerID] = joiner
	final := waitPlacement(t, w.host, append(slices.Clone(survivors), joinerID))
	waitEngaged(t, without(replicas, victim), final)
	moved := final.runBy(joinerID)
	if len(moved) == 0 {
		t.Fatalf("no VirtualCluster moved to the new replica %s: %v", joinerID, final)
	}
	for _, id := range survivors {
		var want []string
		for _, vc := range moved {
			if after[vc] == id {
				want = append(want, vc)
			}
		}
		if got := replicas[id].stoppedClusters(t, joinedAt); !slices.Equal(got, want) {
			t.Errorf("replica %s stopped %v when %s joined; want exactly those that moved to it: %v", id, got, joinerID, want)
		}
	}
	w.probe(t, "probe-3", shardedVCs)
	t.Logf("%s joined and took %v", joinerID, moved)

	// A replica frozen (SIGSTOP) past its lease: the others take its
	// VirtualClusters; thawed with work queued (the tenants changed
	// meanwhile), it writes nothing more and exits with code 1.
	live = append(slices.Clone(survivors), joinerID)
	frozenID := live[0]
	for _, id := range live {
		if len(final.runBy(id)) > len(final.runBy(frozenID)) {
			frozenID = id
		}
	}
	frozen := replicas[frozenID]
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozenAt := time.Now()
	thawed := slices.DeleteFunc(slices.Clone(live), func(id string) bool { return id == frozenID })
	w.probe(t, "probe-4", shardedVCs) // copied by the others once they took over
	waitPlacement(t, w.host, thawed)
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-frozen.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s, thawed past its renew deadline, still runs", frozenID)
	}
	var exit *exec.ExitError
	if !errors.As(frozen.err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("%s, thawed past its renew deadline, ended with %v; want exit code 1", frozenID, frozen.err)
	}
	// Frozen, it ran nothing; thawed, its tenants' requests were fenced
	// until it exited, which the write audit below checks.
	ends[frozenID] = frozenAt
	t.Logf("froze %s, which ran %d VirtualClusters: the others took them over, and it exited %s after the freeze, once thawed",
		frozenID, len(final.runBy(frozenID)), frozen.exitAt.Sub(frozenAt).Round(100*time.Millisecond))

	// Fencing, from the replicas' own logs and the Leases' history.
	checkNoOverlap(t, replicas, ends)
	writes := 0
	for id, m := range replicas {
		for _, wr := range m.hostWrites(t) {
			writes++
			if holder := history.holderAt(wr.Cluster, wr.at); holder != id {
				t.Errorf("replica %s wrote to the host for %s at %s, while %q held its Lease", id, wr.Cluster, wr.at.Format(time.RFC3339Nano), holder)
			}
		}
	}
	if writes == 0 {
		t.Fatal("the replicas logged no host write: the fencing audit saw nothing")
	}
}

// replicaIdentity waits for the manager to log its replica identity.
func replicaIdentity(t *testing.T, m *managerProcess) string {
	t.Helper()
	var id string
	eventually(t, 30*time.Second, "the replica logs its identity", func(context.Context) (bool, error) {
		for _, l := range m.lines(t) {
			if l.Replica != "" && strings.HasPrefix(l.Msg, "sharding VirtualClusters") {
				id = l.Replica
				return true, nil
			}
		}
		return false, nil
	})
	return id
}

// engaged is what the replica's multicluster-runtime provider has
// engaged, from its log: "cluster engaged" and "cluster disengaged", in
// order.
func (m *managerProcess) engaged(t *testing.T) []string {
	t.Helper()
	set := map[string]bool{}
	for _, l := range m.lines(t) {
		switch l.Msg {
		case "cluster engaged":
			set[l.Cluster] = true
		case "cluster disengaged":
			delete(set, l.Cluster)
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// waitEngaged waits until each replica's multicluster-runtime provider has
// engaged exactly the VirtualClusters the replica runs in p: so each is
// engaged by exactly one replica.
func waitEngaged(t *testing.T, replicas map[string]*managerProcess, p placement) {
	t.Helper()
	eventually(t, 30*time.Second, "each replica's provider engages exactly what it runs", func(context.Context) (bool, error) {
		for id, m := range replicas {
			if got, want := m.engaged(t), p.runBy(id); !slices.Equal(got, want) {
				return false, fmt.Errorf("replica %s engaged %v, runs %v", id, got, want)
			}
		}
		return true, nil
	})
}

// without is replicas less the one named.
func without(replicas map[string]*managerProcess, id string) map[string]*managerProcess {
	out := maps.Clone(replicas)
	delete(out, id)
	return out
}

// placement is the replica that runs each VirtualCluster.
type placement map[string]string

func (p placement) runBy(id string) []string {
	var out []string
	for vc, r := range p {
		if r == id {
			out = append(out, vc)
		}
	}
	slices.Sort(out)
	return out
}

// waitPlacement waits until every VirtualCluster is Ready, run by the
// replica that owns it among live (by rendezvous hashing), which holds its
// Lease.
func waitPlacement(t *testing.T, host client.Client, live []string) placement {
	t.Helper()
	p := placement{}
	eventually(t, 90*time.Second, fmt.Sprintf("every VirtualCluster Ready on its owner among %v", live), func(ctx context.Context) (bool, error) {
		for i := range shardedVCs {
			name := vcName(i)
			want := sharding.OwnerAmong(live, name)
			var vc tenantryv1alpha1.VirtualCluster
			if err := host.Get(ctx, client.ObjectKey{Name: name}, &vc); err != nil {
				return false, err
			}
			cond := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady)
			if cond == nil || cond.Status != metav1.ConditionTrue || vc.Status.Replica != want {
				return false, fmt.Errorf("%s: run by %q, want %q; Ready %v", name, vc.Status.Replica, want, cond)
			}
			var l coordinationv1.Lease
			if err := host.Get(ctx, client.ObjectKey{Namespace: "default", Name: "tenantry-key-" + name}, &l); err != nil {
				return false, err
			}
			if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != want {
				return false, fmt.Errorf("%s's Lease held by %q, want %q", name, h, want)
			}
			p[name] = want
		}
		return true, nil
	})
	return p
}

// probe makes a ConfigMap in every tenant, and waits for its copy in the
// host namespace of each of the first n VirtualClusters.
func (w *recoveryWorld) probe(t *testing.T, name string, n int) {
	t.Helper()
	for _, tenant := range w.tenants {
		if err := tenant.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 60*time.Second, "every VirtualCluster copies "+name, func(ctx context.Context) (bool, error) {
		for i := range n {
			key := client.ObjectKey{Namespace: syncer.HostNamespace(vcName(i), "default"), Name: name}
			if err := w.host.Get(ctx, key, &corev1.ConfigMap{}); err != nil {
				return false, fmt.Errorf("%s: %w", vcName(i), err)
			}
		}
		return true, nil
	})
}

// stoppedClusters are the clusters whose app the manager stopped since,
// sorted.
func (m *managerProcess) stoppedClusters(t *testing.T, since time.Time) []string {
	t.Helper()
	var out []string
	for _, l := range m.lines(t) {
		if l.Msg == "cluster stopped" && l.at.After(since) {
			out = append(out, l.Cluster)
		}
	}
	slices.Sort(out)
	return out
}

// checkNoOverlap checks, from the replicas' logs, that no cluster ran on
// two replicas at once: from "spawning cluster" to "cluster stopped", or to
// the process's end (ends, else now).
func checkNoOverlap(t *testing.T, replicas map[string]*managerProcess, ends map[string]time.Time) {
	t.Helper()
	type span struct {
		replica    string
		start, end time.Time
	}
	spans := map[string][]span{}
	for id, m := range replicas {
		open := map[string]time.Time{}
		for _, l := range m.lines(t) {
			switch l.Msg {
			case "spawning cluster":
				open[l.Cluster] = l.at
			case "cluster stopped":
				spans[l.Cluster] = append(spans[l.Cluster], span{id, open[l.Cluster], l.at})
				delete(open, l.Cluster)
			}
		}
		end, ok := ends[id]
		if !ok {
			end = time.Now()
		}
		for cluster, start := range open {
			spans[cluster] = append(spans[cluster], span{id, start, end})
		}
	}
	for cluster, ss := range spans {
		for i, a := range ss {
			for _, b := range ss[i+1:] {
				if a.replica != b.replica && a.start.Before(b.end) && b.start.Before(a.end) {
					t.Errorf("%s ran on %s (%s to %s) and on %s (%s to %s) at once", cluster,
						a.replica, a.start.Format(time.RFC3339Nano), a.end.Format(time.RFC3339Nano),
						b.replica, b.start.Format(time.RFC3339Nano), b.end.Format(time.RFC3339Nano))
				}
			}
		}
	}
}

// leaseHistory records every change of holder of the VirtualClusters'
// Leases ("" for a Lease given up or deleted).
type leaseHistory struct {
	mu       sync.Mutex
	acquired map[string][]acquisition // by VirtualCluster, in order
}

type acquisition struct {
	holder string
	at     time.Time
}

// watchKeyLeases records the holders of the VirtualClusters' Leases until
// the test ends.
func watchKeyLeases(t *testing.T, host *tenantrytest.ControlPlane) *leaseHistory {
	t.Helper()
	wc, err := client.NewWithWatch(host.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &leaseHistory{acquired: map[string][]acquisition{}}
	ctx, cancel := context.WithCancel(context.Background())
	watcher, err := wc.Watch(ctx, &coordinationv1.LeaseList{}, client.InNamespace("default"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range watcher.ResultChan() {
			if ev.Type == watch.Error {
				if ctx.Err() == nil {
					t.Errorf("watching Leases: %v", ev.Object)
				}
				return
			}
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			vc, isKey := strings.CutPrefix(l.Name, "tenantry-key-")
			if !isKey {
				continue
			}
			// An acquisition counts from its acquireTime, written before
			// the taker writes anything; a release or deletion from when
			// the watch tells of it, after the holder stopped writing.
			next := acquisition{at: time.Now()}
			if ev.Type != watch.Deleted {
				next.holder = ptr.Deref(l.Spec.HolderIdentity, "")
				if next.holder != "" && l.Spec.AcquireTime != nil {
					next.at = l.Spec.AcquireTime.Time
				}
			}
			h.mu.Lock()
			list := h.acquired[vc]
			if len(list) == 0 || list[len(list)-1].holder != next.holder {
				h.acquired[vc] = append(list, next)
			}
			h.mu.Unlock()
		}
		if ctx.Err() == nil {
			t.Error("the watch of Leases ended early: the fencing audit would miss handovers")
		}
	}()
	t.Cleanup(func() { cancel(); watcher.Stop(); <-done })
	return h
}

// holderAt is who held vc's Lease at time at, as far as the watch saw.
func (h *leaseHistory) holderAt(vc string, at time.Time) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	holder := ""
	for _, a := range h.acquired[vc] {
		if a.at.After(at) {
			break
		}
		holder = a.holder
	}
	return holder
}
