package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// The sync step's namespaces, in each tenant API server.
const (
	latencyNamespace    = "bench-latency"
	throughputNamespace = "bench-throughput"
	floorNamespace      = "bench-floor"
)

// syncStep measures what a user of bin/manager sees, with its default
// flags: the time from a tenant's create to the host copy, and how many
// objects per second reach the host against how many the same writers
// create in the host directly.
type syncStep struct {
	*managerWorld
	out io.Writer
	// floor is the floor pipeline's process while it runs, when it, and
	// not bin/manager, copies the objects.
	floor *childProcess
}

func syncName(i int) string { return fmt.Sprintf("sync-%d", i+1) }

func runSync(ctx context.Context, o Options, out io.Writer) (_ []result, retErr error) {
	w, err := startManagerWorld(ctx, o, "sync", 2, out)
	if err != nil {
		return nil, err
	}
	defer func() { retErr = w.close(retErr) }()
	s := &syncStep{managerWorld: w, out: out}
	// One VirtualCluster per tenant API server.
	if err := s.ensureVirtualClusters(ctx, len(s.tenants), syncName); err != nil {
		return nil, err
	}
	if err := s.startManager(ctx, "manager.log"); err != nil {
		return nil, err
	}
	if err := s.waitReady(ctx, len(s.tenants), time.Minute); err != nil {
		return nil, err
	}
	for i, tenant := range s.tenants {
		for _, ns := range []string{latencyNamespace, throughputNamespace} {
			if err := s.warm(ctx, tenant, syncName(i), ns); err != nil {
				return nil, err
			}
		}
	}
	lat, err := s.latency(ctx)
	if err != nil {
		return nil, fmt.Errorf("latency: %w", err)
	}
	tp, err := s.throughput(ctx)
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	return append(lat, tp...), nil
}

// warm makes namespace ns in a tenant and waits for the host copy of an
// object in it: a host namespace's first object waits for the namespace
// and its policies, which are a tenant's first minutes, not its running.
func (s *syncStep) warm(ctx context.Context, tenant client.Client, cluster, ns string) error {
	if err := tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	if err := tenant.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "warm"}}); err != nil {
		return err
	}
	return waitGet(ctx, s.host, client.ObjectKey{Namespace: syncer.HostNamespace(cluster, ns), Name: "warm"}, &corev1.ConfigMap{})
}

// latency creates latencySamples ConfigMaps in the first tenant at
// latencyRate, and times each from the tenant API server's answer to the
// copy's arrival in the host's watch.
func (s *syncStep) latency(ctx context.Context) ([]result, error) {
	hostNS := syncer.HostNamespace(syncName(0), latencyNamespace)
	arrivals, stop, err := watchArrivals(ctx, s.env.Host.Config(), &corev1.ConfigMap{}, []string{hostNS}, func(client.Object) bool { return true })
	if err != nil {
		return nil, err
	}
	defer stop()
	created, err := createPaced(ctx, s.tenants[0], s.o.LatencySamples, s.o.LatencyRate, func(i int) client.Object {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: latencyNamespace, Name: fmt.Sprintf("cm-%d", i)}}
	})
	if err != nil {
		return nil, err
	}
	down, err := arrivals.wait(ctx, created, time.Minute)
	if err != nil {
		return nil, err
	}
	note := fmt.Sprintf("bin/manager, %s; %d ConfigMaps at %g/s, from the tenant's answer to the create to the copy in the host's watch",
		s.managerFlags(), s.o.LatencySamples, s.o.LatencyRate)
	return []result{
		ms("added latency p50 (tenant create -> host copy)", percentile(down, 50), "<= 5 ms", note),
		ms("added latency p99", percentile(down, 99), "<= 50 ms", note),
	}, nil
}

// throughput has ThroughputWriters writers, spread over the tenants, create
// ThroughputObjects ConfigMaps in them as fast as the tenant API servers
// take them, and times until the last copy is in the host; then the same
// writers create as many ConfigMaps in the host directly. Both runs' clients
// have no rate limit of their own, and the bench watches both runs' objects
// arrive in the host, so that the host API server serves one watcher of
// each raw object and, of each synced one, that watcher and the manager's.
//
// Last, the floor pipeline (floor.go) copies as many in bin/manager's
// place: what the stack alone costs per object.
//
// Over each run it reads what the pipeline and the host API server spent
// (their CPU time) and the requests the manager sent the host: Tenantry's
// cost per object, which on one machine says more than the write rates,
// bounded as they are by the tenant API servers' CPU. Both processes also
// spend CPU by the second, whatever they serve (an API server's own
// controllers and its garbage collector; the manager's health checks), and
// the synced run lasts three times as long as the raw one, its pace set
// by the tenant API servers on the same cores: what each spends over an
// idle window before the runs, per second, is taken off each run's CPU
// for its duration, so that a figure per object is the object's.
func (s *syncStep) throughput(ctx context.Context) ([]result, error) {
	n, writers := s.o.ThroughputObjects, s.o.ThroughputWriters
	name := func(i int) string { return fmt.Sprintf("cm-%d", i) }
	var synced, raw []string
	for i := range s.tenants {
		synced = append(synced, syncer.HostNamespace(syncName(i), throughputNamespace))
		raw = append(raw, fmt.Sprintf("bench-raw-%d", i))
		if err := s.host.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: raw[i]}}); err != nil {
			return nil, err
		}
	}
	// Writer w writes to tenant (or raw namespace) w mod tenants; so does
	// object i.
	target := func(i int) int { return i % writers % len(s.tenants) }

	idle, err := s.idleRates(ctx, idleWindow)
	if err != nil {
		return nil, err
	}
	profiled := []func() error{s.profileCPU(ctx, "throughput-manager.cpu", profileWindow), s.profileServerCPU(ctx, s.hostREST, "throughput-apiserver.cpu", profileWindow)}
	syncedRun, err := s.timedRun(ctx, synced, func(i int) error {
		return s.tenants[target(i)].Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: throughputNamespace, Name: name(i)}})
	}, name)
	if err != nil {
		return nil, fmt.Errorf("synced run: %w", err)
	}
	for _, wait := range profiled {
		if err := wait(); err != nil {
			return nil, err
		}
	}
	// The same objects created in the host directly, twice: as fast as
	// the writers go (the figure the targets compare against), and at the
	// pace the synced run's copies reached the host. An API server spends
	// less per create the more creates it takes at once (fewer wake-ups,
	// syscalls and collections per create): the paced run shows how much
	// of the synced run's cost is its pace, which the tenant API servers
	// set, and not the object.
	syncedRate := float64(n) / syncedRun.lastArrival.Seconds()
	hostCreate := func(i int, name func(int) string) error {
		return s.host.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: raw[target(i)], Name: name(i)}})
	}
	pacedRun, err := s.rawRun(ctx, raw, name, hostCreate, rate.NewLimiter(rate.Limit(syncedRate), 1), "paced-apiserver.cpu")
	if err != nil {
		return nil, fmt.Errorf("raw run at the synced pace: %w", err)
	}
	fastRun, err := s.rawRun(ctx, raw, func(i int) string { return "fast-" + name(i) }, hostCreate, nil, "raw-apiserver.cpu")
	if err != nil {
		return nil, fmt.Errorf("raw run, flat out: %w", err)
	}

	// The same objects once more, copied by the floor pipeline in
	// bin/manager's place: what the stack itself costs per object.
	floorRun, floorIdle, err := s.floorRun(ctx, func(i int) error {
		return s.tenants[target(i)].Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: floorNamespace, Name: name(i)}})
	}, name)
	if err != nil {
		return nil, fmt.Errorf("floor pipeline run: %w", err)
	}

	perObject := func(v float64) float64 { return v / float64(n) }
	net := func(spent, perSecond float64, run timedRun) float64 {
		return perObject(spent-perSecond*run.lastArrival.Seconds()) * 1000
	}
	managerCPU := net(syncedRun.cost.pipelineCPU, idle.pipelineCPU, syncedRun)
	floorCPU := net(floorRun.cost.pipelineCPU, floorIdle.pipelineCPU, floorRun)
	hostSynced := net(syncedRun.cost.hostCPU, idle.hostCPU, syncedRun)
	hostFloor := net(floorRun.cost.hostCPU, floorIdle.hostCPU, floorRun)
	hostPaced := net(pacedRun.cost.hostCPU, idle.hostCPU, pacedRun)
	hostRaw := net(fastRun.cost.hostCPU, idle.hostCPU, fastRun)
	requests := perObject(syncedRun.cost.hostRequests)
	rawRate := float64(n) / fastRun.created.Seconds()
	floorRate := float64(n) / floorRun.lastArrival.Seconds()
	setup := fmt.Sprintf("bin/manager, %s; %d ConfigMaps by %d writers over %d tenants", s.managerFlags(), n, writers, len(s.tenants))
	cpuNote := fmt.Sprintf("the process's CPU time over the run less its idle rate (manager %.1f ms/s, host API server %.1f ms/s over %s), per object; %s",
		1000*idle.pipelineCPU, 1000*idle.hostCPU, idleWindow, setup)
	paced := fmt.Sprintf(", created in the host directly at the synced run's pace (%.0f/s, one at a time)", syncedRate)
	floorSetup := fmt.Sprintf("the floor pipeline (internal/bench/floor.go: controller-runtime watches the tenants' objects and the copies, %d workers per tenant, "+
		"one create per object, nothing else, no client rate limit) in bin/manager's place, the same writers (%.0f objects/s)", floorWorkers, floorRate)
	floorNote := fmt.Sprintf("%s; its CPU time less its idle rate (%.1f ms/s), per object", floorSetup, 1000*floorIdle.pipelineCPU)
	hostFloorNote := fmt.Sprintf("%s; the host API server's CPU time less its idle rate beside the floor pipeline (%.1f ms/s), per object", floorSetup, 1000*floorIdle.hostCPU)
	return []result{
		{Name: "host requests per synced object", Value: round(requests, 3), Unit: "", Target: "<= 1.05", Met: ptrBool(requests <= 1.05),
			Note: "bin/manager's rest_client_requests_total to the host over the synced run, per object"},
		{Name: "manager CPU per synced object", Value: round(managerCPU, 3), Unit: "ms", Note: cpuNote},
		{Name: "host API server CPU per synced object", Value: round(hostSynced, 3), Unit: "ms", Note: cpuNote},
		{Name: "host API server CPU per raw create", Value: round(hostRaw, 3), Unit: "ms",
			Note: cpuNote + fmt.Sprintf(", created in the host directly by the same writers, as fast as they go (%.0f/s)", rawRate)},
		{Name: "host API server CPU per raw create, at the synced run's pace", Value: round(hostPaced, 3), Unit: "ms", Note: cpuNote + paced},
		ratio("manager CPU per synced object, against the host API server's CPU per raw create", managerCPU, hostRaw, 0.3),
		ratio("host API server CPU per synced object, against per raw create", hostSynced, hostRaw, 1.2),
		{Name: "floor pipeline CPU per copied object", Value: round(floorCPU, 3), Unit: "ms", Note: floorNote},
		{Name: "floor pipeline CPU per copied object, against the host API server's CPU per raw create", Value: round(quotient(floorCPU, hostRaw), 2), Unit: "x",
			Note: "what the least pipeline on the same stack is to the same target"},
		{Name: "manager CPU per synced object over the floor pipeline's", Value: round(managerCPU-floorCPU, 3), Unit: "ms",
			Note: "Tenantry's own work per object (translation, policy, digest, patrol, metrics, budget), and the two runs' noise: each pipeline runs at its own pace"},
		{Name: "host API server CPU per object copied by the floor pipeline", Value: round(hostFloor, 3), Unit: "ms", Note: hostFloorNote},
		{Name: "throughput synced down", Value: round(syncedRate, 0), Unit: "objects/s", Note: setup + ", until the last copy is in the host"},
		{Name: "raw host create rate (same writers)", Value: round(rawRate, 0), Unit: "objects/s", Note: setup + ", created in the host directly, flat out"},
		{Name: "throughput ratio synced/raw", Value: round(syncedRate/rawRate, 2), Unit: "",
			Note: "bounded, on one machine, by the tenant API servers' CPU: the synced run writes every object twice, on the same cores"},
		{Name: "tenant create rate (same writers)", Value: round(float64(n)/syncedRun.created.Seconds(), 0), Unit: "objects/s",
			Note: setup + ", what the tenant API servers took while Tenantry synced"},
		ms("last copy after the last tenant create", syncedRun.lastArrival-syncedRun.created, "", "how far the copies trail what the tenants take"),
	}, nil
}

// floorRun stops bin/manager, starts the floor pipeline in its place to
// copy floorNamespace of every tenant, measures its and the host API
// server's idle rates beside it, and times the creates of create as the
// synced run's. It stops the pipeline after.
func (s *syncStep) floorRun(ctx context.Context, create func(i int) error, name func(i int) string) (_ timedRun, idle runCost, retErr error) {
	if err := s.stopManager(); err != nil {
		return timedRun{}, runCost{}, err
	}
	o := FloorOptions{HostKubeconfig: s.kubeconfig, Tenants: map[string]string{}, Namespace: floorNamespace}
	if s.o.Profiles != "" {
		o.CPUProfile = filepath.Join(s.o.Profiles, "throughput-floor.cpu")
	}
	var hostNamespaces []string
	for i, tenant := range s.tenants {
		if err := tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floorNamespace}}); err != nil {
			return timedRun{}, runCost{}, err
		}
		hostNS := syncer.HostNamespace(syncName(i), floorNamespace)
		if err := s.host.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hostNS}}); err != nil {
			return timedRun{}, runCost{}, err
		}
		hostNamespaces = append(hostNamespaces, hostNS)
		kubeconfig, err := s.env.Tenants[i].Kubeconfig()
		if err != nil {
			return timedRun{}, runCost{}, err
		}
		path := filepath.Join(s.dir, syncName(i)+".kubeconfig")
		if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
			return timedRun{}, runCost{}, err
		}
		o.Tenants[syncName(i)] = path
	}
	p, err := startFloorProcess(ctx, o, filepath.Join(s.dir, "floor.log"))
	if err != nil {
		return timedRun{}, runCost{}, err
	}
	s.floor = p
	defer func() {
		s.floor = nil
		if err := p.stop(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	if idle, err = s.idleRates(ctx, idleWindow); err != nil {
		return timedRun{}, runCost{}, err
	}
	run, err := s.timedRun(ctx, hostNamespaces, create, name)
	return run, idle, err
}

// ratio is a result of a over b, met when at most limit.
func ratio(name string, a, b, limit float64) result {
	v := quotient(a, b)
	return result{Name: name, Value: round(v, 2), Unit: "x", Target: fmt.Sprintf("<= %g", limit), Met: ptrBool(b > 0 && v <= limit)}
}

// quotient is a over b, or 0 when b is not above 0 (a cost too small to
// read, less its idle rate, over a handful of objects).
func quotient(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// runCost is what the pipeline that copies the objects (bin/manager, or
// the floor pipeline) and the host API server spent over a run.
type runCost struct {
	pipelineCPU, hostCPU float64 // seconds
	hostRequests         float64 // bin/manager's, to the host
}

// cost reads the pipeline's and the host API server's CPU time from /proc,
// which costs them nothing, and bin/manager's requests to the host.
func (s *syncStep) cost(ctx context.Context) (runCost, error) {
	var c runCost
	pipeline := 0
	if s.floor != nil {
		pipeline = s.floor.cmd.Process.Pid
	} else {
		pipeline = s.manager.cmd.Process.Pid
		m, err := s.manager.metrics(ctx)
		if err != nil {
			return runCost{}, err
		}
		c.hostRequests = m.requests(func(h string) bool { return h == s.hostURL })
	}
	pipelineCPU, err := tenantrytest.ProcessCPU(pipeline)
	if err != nil {
		return runCost{}, err
	}
	host, err := s.env.Host.APIServerPID()
	if err != nil {
		return runCost{}, err
	}
	hostCPU, err := tenantrytest.ProcessCPU(host)
	if err != nil {
		return runCost{}, err
	}
	c.pipelineCPU, c.hostCPU = pipelineCPU.Seconds(), hostCPU.Seconds()
	return c, nil
}

// rawRun is a timedRun of creates straight into the host namespaces, of
// objects named by name, each waiting for pace if it is not nil, with the
// host API server's CPU profile saved as profile.
func (s *syncStep) rawRun(ctx context.Context, namespaces []string, name func(int) string,
	create func(i int, name func(int) string) error, pace *rate.Limiter, profile string) (timedRun, error) {
	profiled := s.profileServerCPU(ctx, s.hostREST, profile, profileWindow)
	run, err := s.timedRun(ctx, namespaces, func(i int) error {
		if pace != nil {
			if err := pace.Wait(ctx); err != nil {
				return err
			}
		}
		return create(i, name)
	}, name)
	if err != nil {
		return timedRun{}, err
	}
	return run, profiled()
}

// profileWindow is how much of each throughput run its profiles cover,
// from its start (--throughput-objects to make a run last that long).
const profileWindow = 10 * time.Second

// idleWindow is how long the idle CPU rates are measured over.
const idleWindow = 10 * time.Second

// idleRates is what the pipeline and the host API server spend per second
// while no object is written: CPU seconds per second.
func (s *syncStep) idleRates(ctx context.Context, window time.Duration) (runCost, error) {
	before, err := s.cost(ctx)
	if err != nil {
		return runCost{}, err
	}
	// A window to measure rates over, not a wait for a state.
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return runCost{}, ctx.Err()
	}
	after, err := s.cost(ctx)
	if err != nil {
		return runCost{}, err
	}
	return runCost{
		pipelineCPU: (after.pipelineCPU - before.pipelineCPU) / window.Seconds(),
		hostCPU:     (after.hostCPU - before.hostCPU) / window.Seconds(),
	}, nil
}

// timedRun is one throughput run's outcome.
type timedRun struct {
	created     time.Duration // until the last create was answered
	lastArrival time.Duration // until the last object was in the host's watch
	cost        runCost
}

// timedRun creates ThroughputObjects objects with create, by
// ThroughputWriters writers, and waits until each, by name, is in one of
// the host namespaces.
func (s *syncStep) timedRun(ctx context.Context, namespaces []string, create func(i int) error, name func(i int) string) (timedRun, error) {
	n := s.o.ThroughputObjects
	arrivals, stop, err := watchArrivals(ctx, s.env.Host.Config(), &corev1.ConfigMap{}, namespaces, func(client.Object) bool { return true })
	if err != nil {
		return timedRun{}, err
	}
	defer stop()
	before, err := s.cost(ctx)
	if err != nil {
		return timedRun{}, err
	}
	began := time.Now()
	if err := parallel(s.o.ThroughputWriters, n, create); err != nil {
		return timedRun{}, err
	}
	run := timedRun{created: time.Since(began)}
	want := make(map[string]time.Time, n)
	for i := range n {
		want[name(i)] = began
	}
	lat, err := arrivals.wait(ctx, want, 5*time.Minute)
	if err != nil {
		return timedRun{}, err
	}
	run.lastArrival = slices.Max(lat)
	after, err := s.cost(ctx)
	if err != nil {
		return timedRun{}, err
	}
	run.cost = runCost{
		pipelineCPU:  after.pipelineCPU - before.pipelineCPU,
		hostCPU:      after.hostCPU - before.hostCPU,
		hostRequests: after.hostRequests - before.hostRequests,
	}
	return run, nil
}
