package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// The sync step's namespaces, in each tenant API server.
const (
	latencyNamespace    = "bench-latency"
	throughputNamespace = "bench-throughput"
)

// syncStep measures what a user of bin/manager sees, with its default
// flags: the time from a tenant's create to the host copy, and how many
// objects per second reach the host against how many the same writers
// create in the host directly.
type syncStep struct {
	*managerWorld
	out io.Writer
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

// throughput has throughputWriters writers, spread over the tenants, create
// throughputObjects ConfigMaps in them as fast as the tenant API servers
// take them, and times until the last copy is in the host; then the same
// writers create as many ConfigMaps in the host directly. Both runs' clients
// have no rate limit of their own.
func (s *syncStep) throughput(ctx context.Context) ([]result, error) {
	n, writers := s.o.ThroughputObjects, s.o.ThroughputWriters
	var hostNamespaces []string
	for i := range s.tenants {
		hostNamespaces = append(hostNamespaces, syncer.HostNamespace(syncName(i), throughputNamespace))
	}
	arrivals, stop, err := watchArrivals(ctx, s.env.Host.Config(), &corev1.ConfigMap{}, hostNamespaces, func(client.Object) bool { return true })
	if err != nil {
		return nil, err
	}
	defer stop()
	name := func(i int) string { return fmt.Sprintf("cm-%d", i) }
	if s.o.CPUProfile != "" {
		f, err := os.Create(s.o.CPUProfile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	began := time.Now()
	if err := parallel(writers, n, func(i int) error {
		// Writer w writes to tenant w mod tenants; so does object i.
		return s.tenants[i%writers%len(s.tenants)].Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: throughputNamespace, Name: name(i)}})
	}); err != nil {
		return nil, err
	}
	tenantsTook := time.Since(began)
	want := make(map[string]time.Time, n)
	for i := range n {
		want[name(i)] = began
	}
	lat, err := arrivals.wait(ctx, want, 5*time.Minute)
	if err != nil {
		return nil, err
	}
	lastCopy := slices.Max(lat)
	synced := float64(n) / lastCopy.Seconds()

	// The same writers, straight into two host namespaces.
	for i := range s.tenants {
		if err := s.host.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-raw-%d", i)}}); err != nil {
			return nil, err
		}
	}
	began = time.Now()
	if err := parallel(writers, n, func(i int) error {
		ns := fmt.Sprintf("bench-raw-%d", i%writers%len(s.tenants))
		return s.host.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name(i)}})
	}); err != nil {
		return nil, err
	}
	raw := float64(n) / time.Since(began).Seconds()
	ratio := synced / raw
	note := fmt.Sprintf("bin/manager, %s; %d ConfigMaps by %d writers over %d tenants", s.managerFlags(), n, writers, len(s.tenants))
	return []result{
		{Name: "throughput synced down", Value: round(synced, 0), Unit: "objects/s", Note: note + ", until the last copy is in the host"},
		{Name: "raw host create rate (same writers)", Value: round(raw, 0), Unit: "objects/s", Note: note + ", created in the host directly"},
		{Name: "throughput ratio synced/raw", Value: round(ratio, 2), Unit: "", Target: ">= 0.95", Met: ptrBool(ratio >= 0.95),
			Note: "the synced run also pays for the tenant API servers' writes, on the same cores"},
		{Name: "tenant create rate (same writers)", Value: round(float64(n)/tenantsTook.Seconds(), 0), Unit: "objects/s",
			Note: note + ", what the tenant API servers took while Tenantry synced"},
		ms("last copy after the last tenant create", lastCopy-tenantsTook, "", "how far the copies trail what the tenants take"),
	}, nil
}
