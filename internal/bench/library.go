package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/controllers/virtualcluster"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
	"github.com/tenantry/tenantry/providers"
)

// bench is the machinery of one run: a host that runs Pods on simulated
// nodes and two tenants with their own controller-manager, a hub and a
// registry with every built-in syncer.
type bench struct {
	o        Options
	env      *tenantrytest.Environment
	host     client.Client
	hub      *syncer.Hub
	registry *clusterregistry.RemoteClusterRegistry
	tenants  []*rest.Config
}

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

func libraryStepsIn(steps map[string]bool) bool {
	return slices.ContainsFunc(librarySteps, func(s libraryStep) bool { return steps[s.name] })
}

// runLibrarySteps runs the selected library steps on a host that runs Pods
// on simulated nodes and two tenants with their own controller-manager,
// with a Hub and a registry wired as bin/manager wires them, with its
// default limits.
func runLibrarySteps(ctx context.Context, o Options, out io.Writer) ([]result, error) {
	fmt.Fprintf(out, "==> starting a host with %d nodes and 2 tenants with their controller-manager\n", o.Nodes)
	env, err := tenantrytest.Start(ctx, tenantrytest.Options{Tenants: 2, HostNodes: o.Nodes, TenantControllerManager: true, BinaryAssetsDirectory: o.Assets})
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
		if !o.Steps[step.name] {
			continue
		}
		fmt.Fprintln(out, "==> measuring", step.what)
		rs, err := step.run(b, ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", step.what, err)
		}
		results = append(results, rs...)
	}
	return append(results, processMemory(o.Assets)...), nil
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
	if err := b.saveGoroutines("goroutines-before-spawns.txt"); err != nil {
		return nil, err
	}
	var spawns, stops []time.Duration
	for i := range b.o.SpawnClusters {
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
	if err := b.saveGoroutines("goroutines-after-stops.txt"); err != nil {
		return nil, err
	}
	n := fmt.Sprintf("%d clusters, every built-in syncer", b.o.SpawnClusters)
	return []result{
		ms("spawn p50 (to caches synced)", percentile(spawns, 50), "<= 100 ms", n),
		ms("spawn p99", percentile(spawns, 99), "<= 300 ms", n),
		ms("stop p50", percentile(stops, 50), "", n),
		ms("stop p99", percentile(stops, 99), "", n),
		{Name: "goroutines left after stops", Value: float64(left), Unit: "goroutines", Target: "0", Met: ptrBool(left <= 0)},
	}, nil
}

// saveGoroutines saves this process's goroutines, with their stacks, as
// file name of the Profiles directory, if one is set.
func (b *bench) saveGoroutines(name string) error {
	if b.o.Profiles == "" {
		return nil
	}
	f, err := os.Create(filepath.Join(b.o.Profiles, name))
	if err != nil {
		return err
	}
	if err := pprof.Lookup("goroutine").WriteTo(f, 1); err != nil {
		_ = f.Close()
		return fmt.Errorf("saving the goroutines: %w", err)
	}
	return f.Close()
}

// memory measures the heap that idle spawned tenants hold.
func (b *bench) memory(ctx context.Context) ([]result, error) {
	before := heapInUse()
	names := make([]string, b.o.MemoryClusters)
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

	created, err := createPaced(ctx, tenant, b.o.PodSamples, b.o.LatencyRate, func(i int) client.Object {
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
	n := fmt.Sprintf("%d Pods at %g/s on %d kwok nodes, through the host's kube-scheduler", b.o.PodSamples, b.o.LatencyRate, b.o.Nodes)
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
