package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/controllers/virtualcluster"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
	"github.com/tenantry/tenantry/providers"
)

var benchCommand = command{
	name: "bench",
	summary: "Measure spawn and stop times, memory per tenant, sync latency and throughput on local control planes; " +
		"print a table and write it as JSON and Markdown.",
	flags: func(fs *flag.FlagSet) func(context.Context) error {
		o := benchOptions{}
		fs.StringVar(&o.out, "out", "bench/results", "Directory for results.json and results.md.")
		fs.StringVar(&o.assets, "assets", "", "Directory holding kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok "+
			"(default: $"+tenantrytest.AssetsEnv+", else this binary's own directory).")
		fs.IntVar(&o.nodes, "nodes", 2, "Simulated host nodes that run the Pods.")
		fs.Func("steps", "Comma-separated steps to run, in their order: "+strings.Join(benchSteps, ", ")+
			" (starts: the test clusters' start times; dns: the tenant DNS server's latency and queries per second; scale: bin/manager with many VirtualClusters; handover: sharded replicas, one killed, one added). Default: all.", func(v string) error {
			steps, err := parseSteps(v)
			o.steps = steps
			return err
		})
		o.steps = parseStepsDefault()
		fs.Func("scale-tenants", "Comma-separated, growing VirtualCluster counts of the scale run (default 100,250,500,1000).", func(v string) error {
			counts, err := parseCounts(v)
			o.scaleTenants = counts
			return err
		})
		o.scaleTenants = []int{100, 250, 500, 1000}
		fs.IntVar(&o.scaleServers, "scale-servers", 4, "Tenant API servers the scale run's VirtualClusters share.")
		fs.IntVar(&o.scaleObjects, "scale-objects", 3, "ConfigMaps each VirtualCluster of the scale run syncs.")
		fs.IntVar(&o.scaleExtraObjects, "scale-extra-objects", 10,
			"ConfigMaps added per tenant API server at the largest count, for the memory per synced object; 0 skips it.")
		fs.DurationVar(&o.scaleIdleWindow, "scale-idle-window", 20*time.Second, "How long the idle manager's request rates are measured over.")
		fs.Func("manager-args", "Extra flags for bin/manager in the scale run, space-separated (the figures are then not the defaults').", func(v string) error {
			o.managerArgs = strings.Fields(v)
			return nil
		})
		fs.StringVar(&o.managerBinary, "manager", "", "bin/manager for the scale run (default: the manager beside this binary).")
		fs.IntVar(&o.handoverClusters, "handover-clusters", 300, "VirtualClusters shared by the sharded replicas of the handover run.")
		fs.IntVar(&o.spawnClusters, "spawn-clusters", 50, "Clusters spawned and stopped one by one for the spawn figures.")
		fs.IntVar(&o.memoryClusters, "memory-clusters", 100, "Clusters spawned at once for the memory figure.")
		fs.IntVar(&o.latencySamples, "latency-samples", 300, "Objects created for each latency figure.")
		fs.Float64Var(&o.latencyRate, "latency-rate", 50, "Objects per second while measuring latency.")
		fs.IntVar(&o.podSamples, "pod-samples", 200, "Pods created, at --latency-rate, for the Pod start figures.")
		fs.IntVar(&o.throughputObjects, "throughput-objects", 1000, "ConfigMaps created, in all, for the throughput figure.")
		fs.IntVar(&o.throughputWriters, "throughput-writers", 16, "Writers creating them, spread over the tenants.")
		fs.StringVar(&o.cpuProfile, "cpuprofile", "", "Write a CPU profile of the throughput run to this file (read it with go tool pprof).")
		return func(ctx context.Context) error { return runBench(ctx, o, os.Stdout) }
	},
}

type benchOptions struct {
	out, assets                          string
	nodes                                int
	steps                                map[string]bool
	scaleTenants                         []int
	scaleServers, scaleObjects           int
	scaleExtraObjects                    int
	scaleIdleWindow                      time.Duration
	handoverClusters                     int
	managerBinary                        string
	managerArgs                          []string
	spawnClusters, memoryClusters        int
	latencySamples, podSamples           int
	latencyRate                          float64
	throughputObjects, throughputWriters int
	cpuProfile                           string
}

// result is one row of the results table.
type result struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target,omitempty"`
	Met    *bool   `json:"met,omitempty"`
	Note   string  `json:"note,omitempty"`
}

// report is what a bench run writes.
type report struct {
	Date    string   `json:"date"`
	Command string   `json:"command"`
	Machine string   `json:"machine"`
	Results []result `json:"results"`
	// Scale holds the scale run's figures at each VirtualCluster count.
	Scale []scalePoint `json:"scale,omitempty"`
}

// bench is the machinery of one run: a host that runs Pods on simulated
// nodes and two tenants with their own controller-manager, a hub and a
// registry with every built-in syncer.
type bench struct {
	o        benchOptions
	env      *tenantrytest.Environment
	host     client.Client
	hub      *syncer.Hub
	registry *clusterregistry.RemoteClusterRegistry
	tenants  []*rest.Config
}

func runBench(ctx context.Context, o benchOptions, out io.Writer) error {
	if o.assets == "" {
		o.assets = defaultAssets()
	}
	var results []result
	if o.steps["starts"] {
		fmt.Fprintln(out, "==> measuring the start of the test clusters")
		rs, err := clusterStart(ctx, o)
		if err != nil {
			return fmt.Errorf("cluster start: %w", err)
		}
		results = append(results, rs...)
	}
	if libraryStepsIn(o.steps) {
		rs, err := runLibrarySteps(ctx, o, out)
		if err != nil {
			return err
		}
		results = append(results, rs...)
	}
	if o.steps["dns"] {
		fmt.Fprintln(out, "==> measuring the tenant DNS server")
		rs, err := runDNS(ctx, o)
		if err != nil {
			return fmt.Errorf("dns: %w", err)
		}
		results = append(results, rs...)
	}
	if o.steps["sync"] {
		fmt.Fprintln(out, "==> measuring sync latency and throughput through bin/manager")
		rs, err := runSync(ctx, o, out)
		if err != nil {
			return fmt.Errorf("sync: %w", err)
		}
		results = append(results, rs...)
	}
	var points []scalePoint
	if o.steps["scale"] {
		fmt.Fprintln(out, "==> measuring bin/manager at scale")
		rs, ps, err := runScale(ctx, o, out)
		if err != nil {
			return fmt.Errorf("scale: %w", err)
		}
		results, points = append(results, rs...), ps
	}

	if o.steps["handover"] {
		fmt.Fprintln(out, "==> measuring handovers between sharded bin/manager replicas")
		rs, err := runHandover(ctx, o, out)
		if err != nil {
			return fmt.Errorf("handover: %w", err)
		}
		results = append(results, rs...)
	}

	rep := report{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Command: "make bench (bin/tenantry bench " + strings.Join(os.Args[2:], " ") + ")",
		Machine: machine(),
		Results: results,
		Scale:   points,
	}
	table := rep.table()
	fmt.Fprint(out, "\n"+table)
	return rep.write(o.out)
}

// benchSteps are the bench's steps, in the order they run.
var benchSteps = []string{"starts", "spawn", "memory", "pods", "dns", "sync", "scale", "handover"}

// libraryStep is a step that drives the library in this process.
type libraryStep struct {
	name, what string
	run        func(*bench, context.Context) ([]result, error)
}

// librarySteps are the steps that drive the library in this process, on a
// host with nodes and two tenants with their controller-manager.
var librarySteps = []libraryStep{
	{"spawn", "spawn and stop", (*bench).spawn},
	{"memory", "memory per tenant", (*bench).memory},
	{"pods", "Pod start", (*bench).podStart},
}

func parseSteps(v string) (map[string]bool, error) {
	steps := map[string]bool{}
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !slices.Contains(benchSteps, f) {
			return nil, fmt.Errorf("unknown step %q: the steps are %s", f, strings.Join(benchSteps, ", "))
		}
		steps[f] = true
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no step named: the steps are %s", strings.Join(benchSteps, ", "))
	}
	return steps, nil
}

func parseStepsDefault() map[string]bool {
	steps, _ := parseSteps(strings.Join(benchSteps, ","))
	return steps
}

func libraryStepsIn(steps map[string]bool) bool {
	return slices.ContainsFunc(librarySteps, func(s libraryStep) bool { return steps[s.name] })
}

// runLibrarySteps runs the selected library steps on a host that runs Pods
// on simulated nodes and two tenants with their own controller-manager,
// with a Hub and a registry wired as bin/manager wires them, with its
// default limits.
func runLibrarySteps(ctx context.Context, o benchOptions, out io.Writer) ([]result, error) {
	fmt.Fprintf(out, "==> starting a host with %d nodes and 2 tenants with their controller-manager\n", o.nodes)
	env, err := tenantrytest.Start(ctx, tenantrytest.Options{Tenants: 2, HostNodes: o.nodes, TenantControllerManager: true, BinaryAssetsDirectory: o.assets})
	if err != nil {
		return nil, err
	}
	defer func() { _ = env.Stop() }()
	b := &bench{o: o, env: env}
	for _, cp := range env.Tenants {
		cfg := cp.Config()
		// What bin/manager gives each tenant's clients by default.
		cfg.QPS, cfg.Burst = virtualcluster.DefaultTenantQPS, virtualcluster.DefaultTenantBurst
		b.tenants = append(b.tenants, cfg)
	}
	scheme, err := providers.NewScheme()
	if err != nil {
		return nil, err
	}
	if b.host, err = client.New(env.Host.Config(), client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	if b.hub, err = syncer.NewHub(env.Host.Config(), syncer.HubOptions{Scheme: scheme}); err != nil {
		return nil, err
	}
	hubCtx, stopHub := context.WithCancel(ctx)
	defer stopHub()
	go func() { _ = b.hub.Start(hubCtx) }()
	b.registry = clusterregistry.NewWithOptions(clusterregistry.Options{
		Logger: logr.Discard(), ManageClient: b.host, Scheme: scheme,
	}, syncer.TenantModule(b.hub, syncer.Options{}, builtin.All()...))
	defer func() { _ = b.registry.Close(context.Background()) }()

	var results []result
	for _, step := range librarySteps {
		if !o.steps[step.name] {
			continue
		}
		fmt.Fprintln(out, "==> measuring", step.what)
		rs, err := step.run(b, ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", step.what, err)
		}
		results = append(results, rs...)
	}
	return append(results, processMemory(o.assets)...), nil
}

// spawn measures Spawn (to caches synced) and Stop, one cluster at a time,
// and counts goroutines left once all are stopped.
func (b *bench) spawn(ctx context.Context) ([]result, error) {
	// Warm the process-wide lazies (informers of the hub, client caches).
	if err := b.registry.Spawn("warmup", b.tenants[0]); err != nil {
		return nil, err
	}
	if err := b.registry.Stop(ctx, "warmup"); err != nil {
		return nil, err
	}
	before := settledGoroutines(0)
	var spawns, stops []time.Duration
	for i := range b.o.spawnClusters {
		name := fmt.Sprintf("spawn-%d", i)
		began := time.Now()
		if err := b.registry.Spawn(name, b.tenants[i%len(b.tenants)]); err != nil {
			return nil, err
		}
		spawns = append(spawns, time.Since(began))
		began = time.Now()
		if err := b.registry.Stop(ctx, name); err != nil {
			return nil, err
		}
		stops = append(stops, time.Since(began))
	}
	left := max(settledGoroutines(before)-before, 0)
	n := fmt.Sprintf("%d clusters, every built-in syncer", b.o.spawnClusters)
	return []result{
		ms("spawn p50 (to caches synced)", percentile(spawns, 50), "<= 100 ms", n),
		ms("spawn p99", percentile(spawns, 99), "<= 300 ms", n),
		ms("stop p50", percentile(stops, 50), "", n),
		ms("stop p99", percentile(stops, 99), "", n),
		{Name: "goroutines left after stops", Value: float64(left), Unit: "goroutines", Target: "0", Met: ptrBool(left <= 0)},
	}, nil
}

// memory measures the heap that idle spawned tenants hold.
func (b *bench) memory(ctx context.Context) ([]result, error) {
	before := heapInUse()
	names := make([]string, b.o.memoryClusters)
	for i := range names {
		names[i] = fmt.Sprintf("memory-%d", i)
		if err := b.registry.Spawn(names[i], b.tenants[i%len(b.tenants)]); err != nil {
			return nil, err
		}
	}
	after := heapInUse()
	for _, name := range names {
		if err := b.registry.Stop(ctx, name); err != nil {
			return nil, err
		}
	}
	per := float64(after-before) / float64(len(names)) / (1 << 20)
	return []result{{
		Name: "heap per idle tenant", Value: round(per, 2), Unit: "MiB", Target: "<= 4 MiB", Met: ptrBool(per <= 4),
		Note: fmt.Sprintf("%d VirtualClusters over 2 tenant API servers, every built-in syncer", len(names)),
	}}, nil
}

// podStart measures, for Pods created in a tenant at latencyRate, the time
// from the tenant's create to the tenant Pod Running: down to the host, the
// host's scheduler, kwok's kubelet, and status back up. The last leg, host
// Pod Running -> tenant Pod Running, is the up-sync figure. The host
// namespace is warmed first (created, and given its default ServiceAccount
// by the host's controller-manager), so the figures are a running tenant's.
func (b *bench) podStart(ctx context.Context) ([]result, error) {
	const cluster, ns = "pods", "bench-pods"
	tenant, stop, err := b.spawnWithNamespace(ctx, cluster, ns)
	if err != nil {
		return nil, err
	}
	defer stop()
	if err := tenant.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "warm-up"}}); err != nil {
		return nil, err
	}
	hostNS := syncer.HostNamespace(cluster, ns)
	for _, wait := range []struct {
		c   client.Client
		key client.ObjectKey
	}{
		{tenant, client.ObjectKey{Namespace: ns, Name: "default"}}, // Pods need their ServiceAccount
		{b.host, client.ObjectKey{Namespace: hostNS, Name: "default"}},
	} {
		if err := waitGet(ctx, wait.c, wait.key, &corev1.ServiceAccount{}); err != nil {
			return nil, fmt.Errorf("ServiceAccount %s: %w", wait.key, err)
		}
	}

	running := func(o client.Object) bool { return o.(*corev1.Pod).Status.Phase == corev1.PodRunning }
	hostRunning, stopHost, err := watchArrivals(ctx, b.env.Host.Config(), &corev1.Pod{}, []string{hostNS}, running)
	if err != nil {
		return nil, err
	}
	defer stopHost()
	tenantRunning, stopTenant, err := watchArrivals(ctx, b.tenants[0], &corev1.Pod{}, []string{ns}, running)
	if err != nil {
		return nil, err
	}
	defer stopTenant()

	created, err := createPaced(ctx, tenant, b.o.podSamples, b.o.latencyRate, func(i int) client.Object {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pod-%d", i)},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}},
		}
	})
	if err != nil {
		return nil, err
	}
	start, err := tenantRunning.wait(ctx, created, 2*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("tenant Pods Running: %w", err)
	}
	hostTimes, err := hostRunning.times(ctx, created, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("host Pods Running: %w", err)
	}
	up, err := tenantRunning.wait(ctx, hostTimes, time.Minute)
	if err != nil {
		return nil, err
	}
	n := fmt.Sprintf("%d Pods at %g/s on %d kwok nodes, through the host's kube-scheduler", b.o.podSamples, b.o.latencyRate, b.o.nodes)
	return []result{
		ms("Pod start p50 (tenant create -> Running in the tenant)", percentile(start, 50), "", n),
		ms("Pod start p99", percentile(start, 99), "", n),
		ms("up-sync p50 (host Pod Running -> tenant Pod Running)", percentile(up, 50), "", n),
		ms("up-sync p99", percentile(up, 99), "", n),
	}, nil
}

// spawnWithNamespace spawns cluster on the first tenant API server and
// creates namespace ns there; stop stops the cluster again.
func (b *bench) spawnWithNamespace(ctx context.Context, cluster, ns string) (_ client.Client, stop func(), err error) {
	if err := b.registry.Spawn(cluster, b.tenants[0]); err != nil {
		return nil, nil, err
	}
	stop = func() { _ = b.registry.Stop(context.Background(), cluster) }
	tenant, err := client.New(b.tenants[0], client.Options{})
	if err == nil {
		err = tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	if err != nil {
		stop()
		return nil, nil, err
	}
	return tenant, stop, nil
}

// createPaced creates n objects, object(0) to object(n-1), at rate per
// second through c, and returns when the API server answered each create,
// by name.
func createPaced(ctx context.Context, c client.Client, n int, rate float64, object func(i int) client.Object) (map[string]time.Time, error) {
	created := make(map[string]time.Time, n)
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for i := range n {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		obj := object(i)
		if err := c.Create(ctx, obj); err != nil {
			return nil, err
		}
		created[obj.GetName()] = time.Now()
	}
	return created, nil
}

// arrivals records when each object first satisfied a condition.
type arrivals struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// watchArrivals watches objects like obj in namespaces and records when
// each name first satisfied cond.
func watchArrivals(ctx context.Context, cfg *rest.Config, obj client.Object, namespaces []string, cond func(client.Object) bool) (*arrivals, func(), error) {
	watched := map[string]ctrlcache.Config{}
	for _, ns := range namespaces {
		watched[ns] = ctrlcache.Config{}
	}
	c, err := ctrlcache.New(cfg, ctrlcache.Options{DefaultNamespaces: watched})
	if err != nil {
		return nil, nil, err
	}
	a := &arrivals{seen: map[string]time.Time{}}
	informer, err := c.GetInformer(ctx, obj, ctrlcache.BlockUntilSynced(false))
	if err != nil {
		return nil, nil, err
	}
	record := func(o any) {
		if co, ok := o.(client.Object); ok && cond(co) {
			a.mu.Lock()
			if _, dup := a.seen[co.GetName()]; !dup {
				a.seen[co.GetName()] = time.Now()
			}
			a.mu.Unlock()
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: record, UpdateFunc: func(_, o any) { record(o) },
	}); err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Start(cctx) }()
	if !c.WaitForCacheSync(ctx) {
		cancel()
		return nil, nil, fmt.Errorf("watch did not sync")
	}
	return a, func() { cancel(); <-done }, nil
}

// times waits until every name in names has arrived, and returns when each
// did.
func (a *arrivals) times(ctx context.Context, names map[string]time.Time, timeout time.Duration) (map[string]time.Time, error) {
	if _, err := a.wait(ctx, names, timeout); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	at := make(map[string]time.Time, len(names))
	for name := range names {
		at[name] = a.seen[name]
	}
	return at, nil
}

// wait returns, for each name in since, how long after its time it arrived.
func (a *arrivals) wait(ctx context.Context, since map[string]time.Time, timeout time.Duration) ([]time.Duration, error) {
	var lat []time.Duration
	err := tenantrytest.Poll(ctx, 20*time.Millisecond, timeout, func(context.Context) (bool, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		lat = lat[:0]
		for name, t := range since {
			if at, ok := a.seen[name]; ok {
				lat = append(lat, at.Sub(t))
			}
		}
		return len(lat) == len(since), fmt.Errorf("%d of %d arrived", len(lat), len(since))
	})
	return lat, err
}

func waitGet(ctx context.Context, c client.Client, key client.ObjectKey, obj client.Object) error {
	return tenantrytest.Poll(ctx, 20*time.Millisecond, time.Minute, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, obj)
		return err == nil, err
	})
}

func parallel(workers, n int, f func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

func parallelNames(names []string, f func(i int, name string) error) error {
	return parallel(len(names), len(names), func(i int) error { return f(i, names[i]) })
}

// settledGoroutines waits, up to a few seconds, for the goroutine count to
// come down to target, and returns it.
func settledGoroutines(target int) int {
	n := runtime.NumGoroutine()
	if target == 0 {
		return n
	}
	_ = tenantrytest.Poll(context.Background(), 50*time.Millisecond, 5*time.Second, func(context.Context) (bool, error) {
		n = runtime.NumGoroutine()
		return n <= target, nil
	})
	return n
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

func ms(name string, d time.Duration, target, note string) result {
	r := result{Name: name, Value: round(float64(d)/float64(time.Millisecond), 1), Unit: "ms", Target: target, Note: note}
	if target != "" {
		var limit float64
		if _, err := fmt.Sscanf(target, "<= %g ms", &limit); err == nil {
			r.Met = ptrBool(r.Value <= limit)
		}
	}
	return r
}

func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

func ptrBool(b bool) *bool { return &b }

func machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "model name") {
				model = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Sscanf(strings.SplitN(string(data), "\n", 2)[0], "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %d GiB", (kb+(1<<19))>>20)
		}
	}
	return fmt.Sprintf("%d cores (%s)%s, %s %s/%s", runtime.NumCPU(), model, mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func (r report) table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASURE\tVALUE\tTARGET\tMET\tNOTE")
	for _, x := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", x.Name, x.value(), x.Target, x.met(), x.Note)
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "\nMachine: %s\n", r.Machine)
	return b.String()
}

func (r report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmark results\n\n%s, `%s`, on %s.\n\n", r.Date, r.Command, r.Machine)
	fmt.Fprintln(&b, "| measure | value | target | met | note |\n| --- | --- | --- | --- | --- |")
	for _, x := range r.Results {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", x.Name, x.value(), x.Target, x.met(), x.Note)
	}
	return b.String()
}

func (r report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.markdown()), 0o644)
}

func (x result) value() string {
	return strings.TrimSpace(fmt.Sprintf("%g %s", x.Value, x.Unit))
}

func (x result) met() string {
	switch {
	case x.Met == nil:
		return ""
	case *x.Met:
		return "yes"
	}
	return "NO"
}
