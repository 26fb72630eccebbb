package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/sharding"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
	"github.com/tenantry/tenantry/providers"
)

// shardRun is the handover step: VirtualClusters over three bin/manager
// replicas sharded on Leases (default flags, and --shard-mode=lease), one
// of them killed, then a fourth added.
type shardRun struct {
	*managerWorld
	out      io.Writer
	replicas map[string]*managerProcess // by identity
	logs     int
}

func runHandover(ctx context.Context, o Options, out io.Writer) (_ []result, retErr error) {
	n := o.HandoverClusters
	w, err := startManagerWorld(ctx, o, "handover", o.ScaleServers, out)
	if err != nil {
		return nil, err
	}
	defer func() { retErr = w.close(retErr) }()
	s := &shardRun{managerWorld: w, out: out, replicas: map[string]*managerProcess{}}
	defer s.stopReplicas()
	if err := s.ensureVirtualClusters(ctx, n, scaleName); err != nil {
		return nil, err
	}

	began := time.Now()
	for range 3 {
		if _, err := s.addReplica(ctx); err != nil {
			return nil, err
		}
	}
	live := slices.Sorted(maps.Keys(s.replicas))
	if _, err := s.waitPlacement(ctx, n, live, nil); err != nil {
		return nil, err
	}
	readyAll := time.Since(began)
	before, err := s.placement(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "    %d VirtualClusters Ready over 3 replicas in %.1f s: %s\n", n, readyAll.Seconds(), spread(before, live))

	keyWrites, peerWrites, err := s.leaseWrites(ctx, o.ScaleIdleWindow, len(live))
	if err != nil {
		return nil, err
	}

	victim := live[0]
	for _, id := range live {
		if len(runBy(before, id)) > len(runBy(before, victim)) {
			victim = id
		}
	}
	moved := runBy(before, victim)
	if len(moved) == 0 {
		return nil, fmt.Errorf("no replica runs a VirtualCluster: %v", before)
	}
	stopWatching, err := s.watchTakeovers(ctx, victim)
	if err != nil {
		return nil, err
	}
	if err := s.replicas[victim].cmd.Process.Kill(); err != nil {
		stopWatching()
		return nil, err
	}
	killed := time.Now()
	<-s.replicas[victim].exited
	delete(s.replicas, victim)
	survivors := slices.Sorted(maps.Keys(s.replicas))
	times, err := s.waitPlacement(ctx, n, survivors, moved)
	takenAt := stopWatching()
	if err != nil {
		return nil, fmt.Errorf("after killing %s: %w", victim, err)
	}
	failover := sinceEach(times, killed)
	var takeover []time.Duration
	for _, vc := range moved {
		at, ok := takenAt[vc]
		if !ok {
			return nil, fmt.Errorf("the watch did not see %s's Lease taken from %s", vc, victim)
		}
		takeover = append(takeover, at.Sub(killed))
	}
	slices.Sort(takeover)
	fmt.Fprintf(out, "    killed the replica that ran %d: all their Leases taken by the others %.1f s later, all Ready %.1f s later (first %.1f s)\n",
		len(moved), slices.Max(takeover).Seconds(), slices.Max(failover).Seconds(), slices.Min(failover).Seconds())

	joined := time.Now()
	joiner, err := s.addReplica(ctx)
	if err != nil {
		return nil, err
	}
	after, err := s.placement(ctx)
	if err != nil {
		return nil, err
	}
	var joining []string
	for vc := range after {
		if sharding.OwnerAmong(append(slices.Clone(survivors), joiner), vc) == joiner {
			joining = append(joining, vc)
		}
	}
	times, err = s.waitPlacement(ctx, n, append(survivors, joiner), joining)
	if err != nil {
		return nil, fmt.Errorf("after adding a replica: %w", err)
	}
	if len(joining) == 0 {
		return nil, fmt.Errorf("the fourth replica owns none of the %d VirtualClusters: too few for the step", n)
	}
	rebalance := sinceEach(times, joined)
	fmt.Fprintf(out, "    a fourth replica took %d VirtualClusters, all Ready on it %.1f s after it started\n", len(joining), slices.Max(rebalance).Seconds())

	setup := fmt.Sprintf("%d VirtualClusters over %d tenant API servers, bin/manager replicas with %s and --shard-mode=lease (lease %s)",
		n, o.ScaleServers, s.managerFlags(), sharding.DefaultLeaseDuration)
	return []result{
		{Name: "sharded: VirtualClusters Ready over 3 replicas", Value: round(readyAll.Seconds(), 1), Unit: "s",
			Note: setup + "; replicas started one after another; " + spread(before, live)},
		{Name: "sharded: takeover after a replica is killed, all its VirtualClusters' Leases", Value: round(slices.Max(takeover).Seconds(), 1), Unit: "s",
			Target: fmt.Sprintf("<= %s (lease duration)", sharding.DefaultLeaseDuration), Met: ptrBool(slices.Max(takeover) <= sharding.DefaultLeaseDuration),
			Note: fmt.Sprintf("SIGKILL -> each of its %d VirtualClusters' Lease held by a survivor; p50 %.1f s", len(moved), percentile(takeover, 50).Seconds())},
		{Name: "sharded: handover after a replica is killed, all its VirtualClusters Ready", Value: round(slices.Max(failover).Seconds(), 1), Unit: "s",
			Note: fmt.Sprintf("SIGKILL -> each of its %d VirtualClusters Ready under a survivor; p50 %.1f s", len(moved), percentile(failover, 50).Seconds())},
		{Name: "sharded: rebalance when a replica joins", Value: round(slices.Max(rebalance).Seconds(), 1), Unit: "s",
			Note: fmt.Sprintf("start of a 4th replica -> the %d VirtualClusters it owns Ready on it; p50 %.1f s", len(joining), percentile(rebalance, 50).Seconds())},
		{Name: "sharded: VirtualCluster Lease writes at steady state", Value: float64(keyWrites), Unit: "writes",
			Target: "0", Met: ptrBool(keyWrites == 0), Note: fmt.Sprintf("over %s idle, all %d VirtualClusters' Leases", o.ScaleIdleWindow, n)},
		{Name: "sharded: peer Lease writes per replica", Value: round(peerWrites, 2), Unit: "writes/s",
			Note: fmt.Sprintf("over %s idle: the renewals, whatever the VirtualCluster count", o.ScaleIdleWindow)},
	}, nil
}

// addReplica starts one more sharded replica and returns its identity.
func (s *shardRun) addReplica(ctx context.Context) (string, error) {
	args := append([]string{"--shard-mode", providers.ShardModeLease, "--shard-namespace", secretsNamespace}, s.o.ManagerArgs...)
	logPath := filepath.Join(s.dir, fmt.Sprintf("replica-%d.log", s.logs))
	s.logs++
	m, err := startManagerProcess(ctx, s.binary, s.kubeconfig, args, logPath)
	if err != nil {
		return "", err
	}
	id, err := replicaIdentity(logPath)
	if err != nil {
		_ = m.stop()
		return "", err
	}
	s.replicas[id] = m
	return id, nil
}

// replicaIdentity reads a sharded replica's identity from its log.
func replicaIdentity(logPath string) (string, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	scanner.Buffer(nil, 1<<20)
	for scanner.Scan() {
		var line struct {
			Msg     string `json:"msg"`
			Replica string `json:"replica"`
		}
		if json.Unmarshal(scanner.Bytes(), &line) == nil && line.Replica != "" && strings.HasPrefix(line.Msg, "sharding VirtualClusters") {
			return line.Replica, nil
		}
	}
	return "", fmt.Errorf("%s: no replica identity logged", logPath)
}

func (s *shardRun) stopReplicas() {
	for _, m := range s.replicas {
		_ = m.stop()
	}
}

// placement is the replica in each VirtualCluster's status, as the watch
// has them.
func (s *shardRun) placement(ctx context.Context) (map[string]string, error) {
	var list tenantryv1alpha1.VirtualClusterList
	if err := s.vcs.List(ctx, &list); err != nil {
		return nil, err
	}
	p := map[string]string{}
	for _, vc := range list.Items {
		p[vc.Name] = vc.Status.Replica
	}
	return p, nil
}

// waitPlacement waits until all n VirtualClusters are Ready on their owner
// among live, and returns when each of watched was first seen so.
func (s *shardRun) waitPlacement(ctx context.Context, n int, live []string, watched []string) (map[string]time.Time, error) {
	seen := map[string]time.Time{}
	err := tenantrytest.Poll(ctx, 100*time.Millisecond, 5*time.Minute, func(ctx context.Context) (bool, error) {
		var list tenantryv1alpha1.VirtualClusterList
		if err := s.vcs.List(ctx, &list); err != nil {
			return false, err
		}
		placed := 0
		now := time.Now()
		for _, vc := range list.Items {
			c := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady)
			if c == nil || c.Status != metav1.ConditionTrue || vc.Status.Replica != sharding.OwnerAmong(live, vc.Name) {
				continue
			}
			placed++
			if _, ok := seen[vc.Name]; !ok {
				seen[vc.Name] = now
			}
		}
		return placed == n, fmt.Errorf("%d of %d Ready on their owner among %v", placed, n, live)
	})
	out := map[string]time.Time{}
	for _, vc := range watched {
		out[vc] = seen[vc]
	}
	return out, err
}

// leaseWrites counts, through a watch over window, the writes of the
// VirtualClusters' Leases, and of the peer Leases per replica per second.
func (s *shardRun) leaseWrites(ctx context.Context, window time.Duration, replicas int) (keys int, peersPerSecond float64, err error) {
	watchCtx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	watcher, err := s.watchLeases(watchCtx)
	if err != nil {
		return 0, 0, err
	}
	defer watcher.Stop()
	peers := 0
	for {
		select {
		case ev, ok := <-watcher.ResultChan():
			if !ok {
				if watchCtx.Err() == nil {
					return 0, 0, fmt.Errorf("the watch of Leases ended early")
				}
				return keys, float64(peers) / window.Seconds() / float64(replicas), ctx.Err()
			}
			l, isLease := ev.Object.(*coordinationv1.Lease)
			if !isLease {
				continue
			}
			if strings.Contains(l.Name, "-peer-") {
				peers++
			} else {
				keys++
			}
		case <-watchCtx.Done():
			if ctx.Err() != nil {
				return 0, 0, ctx.Err()
			}
			return keys, float64(peers) / window.Seconds() / float64(replicas), nil
		}
	}
}

// watchTakeovers watches the VirtualClusters' Leases, from now until stop
// is called; stop returns when each Lease held by from passed to another
// replica.
func (s *shardRun) watchTakeovers(ctx context.Context, from string) (stop func() map[string]time.Time, err error) {
	watchCtx, cancel := context.WithCancel(ctx)
	watcher, err := s.watchLeases(watchCtx, client.HasLabels{sharding.LabelKeyGroup})
	if err != nil {
		cancel()
		return nil, err
	}
	taken := map[string]time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range watcher.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			if holder := ptr.Deref(l.Spec.HolderIdentity, ""); holder != "" && holder != from {
				vc := strings.TrimPrefix(l.Name, "tenantry-key-")
				if _, seen := taken[vc]; !seen {
					taken[vc] = time.Now()
				}
			}
		}
	}()
	return func() map[string]time.Time {
		cancel()
		watcher.Stop()
		<-done
		return taken
	}, nil
}

// watchLeases watches the changes of the Leases in the manager's namespace
// (those opts select) from now on, until ctx ends.
func (s *shardRun) watchLeases(ctx context.Context, opts ...client.ListOption) (watch.Interface, error) {
	wc, err := client.NewWithWatch(unthrottled(s.env.Host.Config()), client.Options{})
	if err != nil {
		return nil, err
	}
	opts = append(opts, client.InNamespace(secretsNamespace))
	var list coordinationv1.LeaseList
	if err := wc.List(ctx, &list, opts...); err != nil {
		return nil, err
	}
	opts = append(opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	return wc.Watch(ctx, &coordinationv1.LeaseList{}, opts...)
}

func runBy(p map[string]string, id string) []string {
	var out []string
	for vc, r := range p {
		if r == id {
			out = append(out, vc)
		}
	}
	slices.Sort(out)
	return out
}

func spread(p map[string]string, live []string) string {
	var parts []string
	for _, id := range live {
		parts = append(parts, fmt.Sprint(len(runBy(p, id))))
	}
	return "VirtualClusters per replica " + strings.Join(parts, "/")
}

func sinceEach(times map[string]time.Time, since time.Time) []time.Duration {
	var out []time.Duration
	for _, t := range times {
		out = append(out, t.Sub(since))
	}
	slices.Sort(out)
	return out
}
