package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// The attack step: hostile tenants that write large ConfigMaps as fast as
// their API servers take them, 300 of 1 MiB each, one and then ten at
// once, while two other tenants sync; bin/manager runs with default flags
// in a memory cgroup of config/manager's limit, as in its container.
const (
	attackObjects     = 300
	attackObjectBytes = 1 << 20
	attackWriters     = 4 // per attacker
	attackNamespace   = "bench-attack"
	probeNamespace    = "bench-probe"
	probeInterval     = 500 * time.Millisecond
	// probeLate is a probe's copy that the attack delayed.
	probeLate = time.Second
	// attackMemoryLimit is config/manager's memory limit.
	attackMemoryLimit = 1 << 30
	// attackDefaultByteLimit is a tenant's default cache byte limit
	// (clusterregistry.DefaultCacheBytes), whose double bounds what one
	// attacker may add to the manager's memory.
	attackDefaultByteLimit = 64 << 20
)

func attackName(i, attackers int) string {
	if i < attackers {
		return fmt.Sprintf("attack-%d", i+1)
	}
	return fmt.Sprintf("quiet-%d", i-attackers+1)
}

func runAttack(ctx context.Context, o Options, out io.Writer) (_ []result, retErr error) {
	attackers := o.AttackTenants
	w, err := startManagerWorld(ctx, o, "attack", attackers+2, out)
	if err != nil {
		return nil, err
	}
	defer func() { retErr = w.close(retErr) }()
	name := func(i int) string { return attackName(i, attackers) }
	if err := w.ensureVirtualClusters(ctx, attackers+2, name); err != nil {
		return nil, err
	}
	for i, tenant := range w.tenants {
		ns := attackNamespace
		if i >= attackers {
			ns = probeNamespace
		}
		if err := tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
	}
	cgroup, cleanup, why := memoryCgroup("tenantry-bench-attack", attackMemoryLimit)
	defer cleanup()
	limited := "in a memory cgroup of 1 GiB, config/manager's limit"
	if cgroup == "" {
		limited = "without a memory limit (" + why + ")"
	}
	w.managerCgroup = cgroup
	fmt.Fprintf(out, "    bin/manager %s, %s\n", w.managerFlags(), limited)
	rounds := []int{1}
	if attackers > 1 {
		rounds = append(rounds, attackers)
	}
	var results []result
	for _, n := range rounds {
		rs, err := w.attack(ctx, out, n, attackers, limited)
		if err != nil {
			return nil, fmt.Errorf("%d attackers: %w", n, err)
		}
		results = append(results, rs...)
	}
	return results, nil
}

// attack runs one round: n attackers of the world's, the two quiet
// tenants probed meanwhile; then the attackers' objects go.
func (w *managerWorld) attack(ctx context.Context, out io.Writer, n, attackers int, limited string) (_ []result, retErr error) {
	fmt.Fprintf(out, "    %d attacker(s), each writing %d ConfigMaps of 1 MiB\n", n, attackObjects)
	if err := w.startManager(ctx, fmt.Sprintf("manager-attack-%d.log", n)); err != nil {
		return nil, err
	}
	defer func() { retErr = errors.Join(retErr, w.stopManager()) }()
	if err := w.waitReady(ctx, attackers+2, 2*time.Minute); err != nil {
		return nil, err
	}
	pid := w.manager.cmd.Process.Pid
	before, err := residentMiB(pid)
	if err != nil {
		return nil, err
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	peak := make(chan float64, 1)
	go func() { peak <- peakResident(sampleCtx, pid, before) }()
	defer stopSampling()

	var quiet []string
	for i := attackers; i < attackers+2; i++ {
		quiet = append(quiet, syncer.HostNamespace(attackName(i, attackers), probeNamespace))
	}
	arrivals, stopWatching, err := watchArrivals(ctx, w.env.Host.Config(), &corev1.ConfigMap{}, quiet, func(client.Object) bool { return true })
	if err != nil {
		return nil, err
	}
	defer stopWatching()
	probeCtx, stopProbes := context.WithCancel(ctx)
	probed := make(chan probes, 1)
	go func() { probed <- w.probe(probeCtx, attackers, n) }()

	began := time.Now()
	attackErr := parallel(n, n, func(i int) error { return w.hoard(ctx, w.tenants[i], attackName(i, attackers)) })
	stopped := tenantrytest.Poll(ctx, 250*time.Millisecond, 3*time.Minute, func(ctx context.Context) (bool, error) {
		for i := range n {
			if !w.cacheLimitExceeded(ctx, attackName(i, attackers)) {
				return false, nil
			}
		}
		return true, nil
	})
	took := time.Since(began)
	// The quiet tenants a while longer, the attackers stopped.
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
	}
	stopProbes()
	p := <-probed
	stopSampling()
	peakMiB := <-peak
	select {
	case <-w.manager.exited:
		return nil, fmt.Errorf("bin/manager ended during the attack (%v): past its memory limit?", w.manager.err)
	default:
	}
	if attackErr != nil {
		return nil, attackErr
	}
	if stopped != nil {
		return nil, fmt.Errorf("the attackers' VirtualClusters were not all stopped with %s: %w", tenantryv1alpha1.ReasonCacheLimitExceeded, stopped)
	}
	lat, err := arrivals.wait(ctx, p.asked, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("the quiet tenants' probes: %w", err)
	}
	synced, err := arrivals.wait(ctx, p.answered, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("the quiet tenants' probes: %w", err)
	}
	late := 0
	for _, d := range lat {
		if d > probeLate {
			late++
		}
	}
	after, err := residentMiB(pid) // the attackers stopped 10 s ago and more
	if err != nil {
		return nil, err
	}
	if err := w.clearHoards(ctx, n); err != nil {
		return nil, err
	}

	label := fmt.Sprintf("%d attacker", n)
	if n > 1 {
		label += "s"
	}
	note := fmt.Sprintf("bin/manager %s, %s; %s at once writing %d ConfigMaps of 1 MiB (4 writers each) until stopped with %s (%s); RSS %.0f MiB before",
		w.managerFlags(), limited, label, attackObjects, tenantryv1alpha1.ReasonCacheLimitExceeded, took.Round(time.Second), before)
	growth := result{Name: "attack, " + label + ": peak RSS growth of bin/manager", Value: round(peakMiB-before, 0), Unit: "MiB", Note: note}
	if n == 1 {
		growth.Target = fmt.Sprintf("< %d MiB (2 x the tenant's byte limit)", 2*attackDefaultByteLimit>>20)
		growth.Met = ptrBool(peakMiB-before < 2*attackDefaultByteLimit>>20)
	}
	probeNote := fmt.Sprintf("%d probes of the 2 quiet tenants, one every %s during the attack and 10 s after, from the create asked of the tenant's API server to the copy in the host; late: over %s", len(lat), probeInterval, probeLate)
	syncNote := fmt.Sprintf("the same %d probes, from the tenant API server's answer to the create (the tenant's own share of the machine not counted) to the copy in the host", len(synced))
	return []result{
		growth,
		{Name: "attack, " + label + ": peak RSS of bin/manager", Value: round(peakMiB, 0), Unit: "MiB", Target: "< 1024 MiB (its limit)", Met: ptrBool(peakMiB < 1024), Note: note},
		{Name: "attack, " + label + ": RSS of bin/manager 10 s after", Value: round(after, 0), Unit: "MiB", Note: note},
		ms("attack, "+label+": the others' sync latency p50", percentile(lat, 50), "", probeNote),
		ms("attack, "+label+": the others' sync latency p99", percentile(lat, 99), "", probeNote),
		ms("attack, "+label+": the others' sync latency from their API server's answer p50", percentile(synced, 50), "", syncNote),
		ms("attack, "+label+": the others' sync latency from their API server's answer p99", percentile(synced, 99), "", syncNote),
		{Name: "attack, " + label + ": the others' late probes", Value: float64(late), Unit: "probes", Target: "0", Met: ptrBool(late == 0), Note: probeNote},
	}, nil
}

// hoard writes the attack's ConfigMaps into tenant, attackWriters at a
// time, until all are written or the manager stops the VirtualCluster
// named vc.
func (w *managerWorld) hoard(ctx context.Context, tenant client.Client, vc string) error {
	// Each object's data its own (the manager holds equal values once),
	// its metadata within the MiB.
	filler := strings.Repeat("x", attackObjectBytes-4096-16)
	var next atomic.Int64
	return parallel(attackWriters, attackWriters, func(int) error {
		for i := next.Add(1) - 1; i < attackObjects; i = next.Add(1) - 1 {
			if w.cacheLimitExceeded(ctx, vc) {
				return nil
			}
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: attackNamespace, Name: fmt.Sprintf("hoard-%d", i)},
				Data:       map[string]string{"data": fmt.Sprintf("%s-%016d", vc, i) + filler},
			}
			if err := tenant.Create(ctx, cm); err != nil {
				return fmt.Errorf("%s: creating ConfigMap %s: %w", vc, cm.Name, err)
			}
		}
		return nil
	})
}

// clearHoards deletes the first n attackers' ConfigMaps.
func (w *managerWorld) clearHoards(ctx context.Context, n int) error {
	return parallel(n, n, func(i int) error {
		return w.tenants[i].DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(attackNamespace))
	})
}

// cacheLimitExceeded says whether the VirtualCluster vc is Ready=False
// for its cache limits, as the watch has it.
func (w *managerWorld) cacheLimitExceeded(ctx context.Context, vc string) bool {
	var v tenantryv1alpha1.VirtualCluster
	if err := w.vcs.Get(ctx, client.ObjectKey{Name: vc}, &v); err != nil {
		return false
	}
	c := meta.FindStatusCondition(v.Status.Conditions, tenantryv1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == tenantryv1alpha1.ReasonCacheLimitExceeded
}

// probes are, by name, when each probe's create was asked of its tenant's
// API server, and when that answered.
type probes struct{ asked, answered map[string]time.Time }

// probe creates a ConfigMap in one of the two quiet tenants every
// probeInterval, in turn, until ctx ends.
func (w *managerWorld) probe(ctx context.Context, attackers, round int) probes {
	p := probes{asked: map[string]time.Time{}, answered: map[string]time.Time{}}
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return p
		case <-tick.C:
		}
		q := attackers + i%2
		name := fmt.Sprintf("probe-%d-%d", round, i)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: probeNamespace, Name: name}}
		start := time.Now()
		if err := w.tenants[q].Create(ctx, cm); err == nil {
			// names are the round's own, whichever tenant
			p.asked[name], p.answered[name] = start, time.Now()
		}
	}
}

// residentMiB is a process's resident memory.
func residentMiB(pid int) (float64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		var kb float64
		if _, err := fmt.Sscanf(line, "VmRSS: %g kB", &kb); err == nil {
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// peakResident samples a process's resident memory every 50 ms until ctx
// ends, and returns the most it saw (from, at least).
func peakResident(ctx context.Context, pid int, from float64) float64 {
	most := from
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return most
		case <-tick.C:
			if v, err := residentMiB(pid); err == nil && v > most {
				most = v
			}
		}
	}
}

// memoryCgroup makes a memory cgroup of limit bytes, and returns its
// cgroup.procs file and what removes it; "" and why where it cannot (not
// root, no memory controller).
func memoryCgroup(name string, limit int64) (procs string, cleanup func(), why string) {
	none := func() {}
	for _, c := range []struct{ dir, limitFile string }{
		{"/sys/fs/cgroup/memory", "memory.limit_in_bytes"}, // v1
		{"/sys/fs/cgroup", "memory.max"},                   // v2
	} {
		if _, err := os.Stat(filepath.Join(c.dir, "cgroup.procs")); err != nil {
			continue
		}
		dir := filepath.Join(c.dir, fmt.Sprintf("%s-%d", name, os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", none, fmt.Sprintf("making a memory cgroup: %v", err)
		}
		remove := func() { _ = os.Remove(dir) }
		if err := os.WriteFile(filepath.Join(dir, c.limitFile), []byte(fmt.Sprint(limit)), 0o644); err != nil {
			remove()
			return "", none, fmt.Sprintf("setting its limit: %v", err)
		}
		return filepath.Join(dir, "cgroup.procs"), remove, ""
	}
	return "", none, "no memory cgroup hierarchy"
}
