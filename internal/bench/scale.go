package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// scaleNamespace is the namespace, in every tenant API server of the scale
// run, that holds the objects each VirtualCluster syncs.
const scaleNamespace = "bench-scale"

// scalePoint is what the scale run measures at one VirtualCluster count.
type scalePoint struct {
	Tenants          int     `json:"tenants"`
	ReadySeconds     float64 `json:"readySeconds"`     // manager start -> every VirtualCluster Ready
	HeapMiB          float64 `json:"heapMiB"`          // live heap, after a forced GC
	RSSMiB           float64 `json:"rssMiB"`           // resident memory of the process
	Goroutines       int     `json:"goroutines"`       // of the process
	Connections      int     `json:"connections"`      // open sockets of the process
	HostRequestsIdle float64 `json:"hostRequestsIdle"` // host API requests per second, idle, all tenants
	TenantRequests   float64 `json:"tenantRequestsIdle"`
	// StartCPUSeconds is the manager's CPU time from its start until
	// every VirtualCluster was Ready.
	StartCPUSeconds float64 `json:"startCPUSeconds"`
	// StartControlPlaneCPU is what the control planes spent over the
	// same time, on the same machine, and IdleControlPlaneCPU what they
	// spend per second before the manager starts, with nothing to serve.
	StartControlPlaneCPU controlPlaneCPU `json:"startControlPlaneCPU"`
	IdleControlPlaneCPU  controlPlaneCPU `json:"idleControlPlaneCPUPerSecond"`
}

// scaleRun is the scale step: bin/manager, run as users run it (default
// flags, but for the addresses of its listeners), against a host and a
// handful of tenant API servers that many VirtualClusters share. Every
// VirtualCluster syncs its server's bench-scale namespace into host
// namespaces of its own.
type scaleRun struct {
	*managerWorld
	o   Options
	out io.Writer
}

func runScale(ctx context.Context, o Options, out io.Writer) (_ []result, _ []scalePoint, retErr error) {
	if len(o.ScaleTenants) == 0 {
		return nil, nil, nil
	}
	w, err := startManagerWorld(ctx, o, "scale", o.ScaleServers, out)
	if err != nil {
		return nil, nil, err
	}
	defer func() { retErr = w.close(retErr) }()
	s := &scaleRun{managerWorld: w, o: o, out: out}
	if err := s.prepare(ctx); err != nil {
		return nil, nil, err
	}

	var points []scalePoint
	for i, n := range o.ScaleTenants {
		if err := s.stopManager(); err != nil {
			return nil, nil, err
		}
		if err := s.ensureVirtualClusters(ctx, n, scaleName); err != nil {
			return nil, nil, err
		}
		idle, err := s.idleControlPlaneCPU(ctx)
		if err != nil {
			return nil, nil, err
		}
		planesBefore, err := s.controlPlaneCPU()
		if err != nil {
			return nil, nil, err
		}
		if err := s.startManager(ctx, fmt.Sprintf("manager-%d.log", i)); err != nil {
			return nil, nil, err
		}
		profiled := []func() error{
			s.profileCPU(ctx, fmt.Sprintf("start-%d.cpu", n), startProfileWindow),
			s.profileServerCPU(ctx, s.hostREST, fmt.Sprintf("start-%d-host-apiserver.cpu", n), startProfileWindow),
			s.profileServerCPU(ctx, s.tenantREST[0], fmt.Sprintf("start-%d-tenant-apiserver.cpu", n), startProfileWindow),
		}
		p, err := s.measure(ctx, n, planesBefore)
		if err != nil {
			return nil, nil, fmt.Errorf("%d VirtualClusters: %w", n, err)
		}
		p.IdleControlPlaneCPU = idle
		for _, wait := range profiled {
			if err := wait(); err != nil {
				return nil, nil, err
			}
		}
		fmt.Fprintf(out, "    %d VirtualClusters: Ready in %.1f s, heap %.0f MiB, RSS %.0f MiB, %d goroutines, %d connections, %.2f host requests/s idle\n",
			n, p.ReadySeconds, p.HeapMiB, p.RSSMiB, p.Goroutines, p.Connections, p.HostRequestsIdle)
		points = append(points, p)
	}
	perObject, err := s.memoryPerObject(ctx, points[len(points)-1])
	if err != nil {
		return nil, nil, fmt.Errorf("memory per synced object: %w", err)
	}
	if err := writeScaleChart(filepath.Join(o.Out, "scale.svg"), points); err != nil {
		return nil, nil, err
	}
	return scaleResults(o, s.managerFlags(), points, perObject), points, nil
}

// prepare makes the objects the VirtualClusters sync in every tenant API
// server.
func (s *scaleRun) prepare(ctx context.Context) error {
	for i, tenant := range s.tenants {
		if err := tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNamespace}}); err != nil {
			return err
		}
		if err := createConfigMaps(ctx, tenant, 0, s.o.ScaleObjects); err != nil {
			return fmt.Errorf("tenant %d: %w", i, err)
		}
	}
	return nil
}

func createConfigMaps(ctx context.Context, c client.Client, from, to int) error {
	for j := from; j < to; j++ {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: scaleNamespace, Name: fmt.Sprintf("cm-%d", j)},
			Data:       map[string]string{"index": strconv.Itoa(j), "payload": strings.Repeat("x", 256)},
		}
		if err := c.Create(ctx, cm); err != nil {
			return err
		}
	}
	return nil
}

// startProfileWindow is how much of a manager start the profiles of the
// scale run cover, from the start.
const startProfileWindow = 30 * time.Second

func scaleName(i int) string { return fmt.Sprintf("scale-%04d", i) }

// measure waits until the n VirtualClusters are Ready and have synced
// their objects, then measures the idle manager.
func (s *scaleRun) measure(ctx context.Context, n int, planesBefore controlPlaneCPU) (scalePoint, error) {
	p := scalePoint{Tenants: n}
	began := s.manager.started
	if err := s.waitReady(ctx, n, 5*time.Minute); err != nil {
		return p, err
	}
	p.ReadySeconds = round(time.Since(began).Seconds(), 1)
	startCPU, err := tenantrytest.ProcessCPU(s.manager.cmd.Process.Pid)
	if err != nil {
		return p, err
	}
	p.StartCPUSeconds = round(startCPU.Seconds(), 2)
	planesAfter, err := s.controlPlaneCPU()
	if err != nil {
		return p, err
	}
	p.StartControlPlaneCPU = planesAfter.minus(planesBefore)
	if err := s.waitCopies(ctx, n*s.o.ScaleObjects); err != nil {
		return p, err
	}
	before, err := s.manager.metrics(ctx)
	if err != nil {
		return p, err
	}
	// A window to measure rates over, not a wait for a state.
	select {
	case <-time.After(s.o.ScaleIdleWindow):
	case <-ctx.Done():
		return p, ctx.Err()
	}
	after, err := s.manager.metrics(ctx)
	if err != nil {
		return p, err
	}
	window := s.o.ScaleIdleWindow.Seconds()
	hostRequests := after.requests(func(h string) bool { return h == s.hostURL }) - before.requests(func(h string) bool { return h == s.hostURL })
	tenantRequests := after.requests(func(h string) bool { return h != s.hostURL }) - before.requests(func(h string) bool { return h != s.hostURL })
	p.HostRequestsIdle = round(hostRequests/window, 2)
	p.TenantRequests = round(tenantRequests/window, 2)
	p.RSSMiB = round(after.value("process_resident_memory_bytes")/(1<<20), 0)
	p.Goroutines = int(after.value("go_goroutines"))
	heap, err := s.manager.liveHeap(ctx)
	if err != nil {
		return p, err
	}
	p.HeapMiB = round(float64(heap)/(1<<20), 1)
	p.Connections = s.manager.sockets()
	if err := s.saveProfiles(ctx, fmt.Sprintf("-%d", n)); err != nil {
		return p, err
	}
	return p, nil
}

// idleControlPlaneCPU is what the control planes spend per second with no
// manager running: their own upkeep, which the start's figures include.
func (s *scaleRun) idleControlPlaneCPU(ctx context.Context) (controlPlaneCPU, error) {
	before, err := s.controlPlaneCPU()
	if err != nil {
		return before, err
	}
	// A window to measure rates over, not a wait for a state.
	select {
	case <-time.After(controlPlaneIdleWindow):
	case <-ctx.Done():
		return before, ctx.Err()
	}
	after, err := s.controlPlaneCPU()
	return after.minus(before).per(controlPlaneIdleWindow), err
}

// controlPlaneIdleWindow is how long idleControlPlaneCPU measures.
const controlPlaneIdleWindow = 5 * time.Second

// waitCopies waits until the host holds want copies of the tenants'
// bench-scale ConfigMaps.
func (s *scaleRun) waitCopies(ctx context.Context, want int) error {
	have := 0
	err := tenantrytest.Poll(ctx, time.Second, 5*time.Minute, func(ctx context.Context) (bool, error) {
		var list metav1.PartialObjectMetadataList
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
		if err := s.host.List(ctx, &list, client.MatchingLabels{syncer.LabelManagedBy: syncer.ManagedByValue}); err != nil {
			return false, err
		}
		have = 0
		for _, cm := range list.Items {
			if cm.Annotations[syncer.AnnotationTenantNamespace] == scaleNamespace {
				have++
			}
		}
		return have >= want, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d host copies (%d so far): %w", want, have, err)
	}
	return nil
}

// memoryPerObject adds objects to every tenant API server at the largest
// count, and divides the manager's live heap growth by the host copies
// they make.
func (s *scaleRun) memoryPerObject(ctx context.Context, last scalePoint) (float64, error) {
	if s.o.ScaleExtraObjects <= 0 {
		return 0, nil
	}
	for _, tenant := range s.tenants {
		if err := createConfigMaps(ctx, tenant, s.o.ScaleObjects, s.o.ScaleObjects+s.o.ScaleExtraObjects); err != nil {
			return 0, err
		}
	}
	if err := s.waitCopies(ctx, last.Tenants*(s.o.ScaleObjects+s.o.ScaleExtraObjects)); err != nil {
		return 0, err
	}
	heap, err := s.manager.liveHeap(ctx)
	if err != nil {
		return 0, err
	}
	copies := last.Tenants * s.o.ScaleExtraObjects
	return (float64(heap) - last.HeapMiB*(1<<20)) / float64(copies) / 1024, nil
}

func scaleResults(o Options, flags string, points []scalePoint, perObjectKiB float64) []result {
	first, last := points[0], points[len(points)-1]
	setup := fmt.Sprintf("bin/manager, %s, %d VirtualClusters over %d tenant API servers, every built-in syncer, %d ConfigMaps each",
		flags, last.Tenants, o.ScaleServers, o.ScaleObjects)
	var rs []result
	var starts []string
	for _, p := range points {
		rs = append(rs, result{
			Name: fmt.Sprintf("scale: %d VirtualClusters Ready after a manager start", p.Tenants), Value: p.ReadySeconds, Unit: "s",
			Note: fmt.Sprintf("process start -> every VirtualCluster Ready=True; CPU over it: manager %.1f s, %s, of %d cores x %.1f s (the control planes alone, before the start: %s per s)",
				p.StartCPUSeconds, p.StartControlPlaneCPU, runtime.NumCPU(), p.ReadySeconds, p.IdleControlPlaneCPU),
		})
		starts = append(starts, fmt.Sprintf("%d: %.1f ms", p.Tenants, 1000*p.StartCPUSeconds/float64(p.Tenants)))
	}
	if last.Tenants >= 1000 {
		rs[len(rs)-1].Target, rs[len(rs)-1].Met = "<= 20 s", ptrBool(last.ReadySeconds <= 20)
	}
	rs = append(rs, result{Name: "scale: manager CPU per tenant start", Value: round(1000*last.StartCPUSeconds/float64(last.Tenants), 1), Unit: "ms",
		Note: "manager CPU from its start to every VirtualCluster Ready, per VirtualCluster (" + strings.Join(starts, ", ") + ")"})
	perTenant := func(a, b float64) float64 {
		if last.Tenants == first.Tenants {
			return b / float64(last.Tenants)
		}
		return (b - a) / float64(last.Tenants-first.Tenants)
	}
	heap := perTenant(first.HeapMiB, last.HeapMiB)
	goroutines := perTenant(float64(first.Goroutines), float64(last.Goroutines))
	slope := fmt.Sprintf("growth from %d to %d VirtualClusters, per VirtualCluster", first.Tenants, last.Tenants)
	hostIdle := last.HostRequestsIdle / float64(last.Tenants)
	rs = append(rs,
		rssAt(last, setup),
		result{Name: "scale: manager live heap", Value: last.HeapMiB, Unit: "MiB", Note: "after a forced GC (pprof heap?gc=1)"},
		result{Name: "scale: heap per idle tenant", Value: round(heap, 2), Unit: "MiB", Target: "<= 2 MiB", Met: ptrBool(heap <= 2), Note: slope},
		result{Name: "scale: goroutines per idle tenant", Value: round(goroutines, 1), Unit: "goroutines", Target: "<= 40", Met: ptrBool(goroutines <= 40), Note: slope},
		result{Name: "scale: open connections", Value: float64(last.Connections), Unit: "sockets", Note: "of the manager process, every tenant and the host"},
		result{Name: "scale: idle host requests per tenant", Value: round(hostIdle, 4), Unit: "req/s", Target: "<= 0.01 req/s", Met: ptrBool(hostIdle <= 0.01),
			Note: fmt.Sprintf("rest_client_requests_total to the host over %s idle, all tenants %.2f req/s", o.ScaleIdleWindow, last.HostRequestsIdle)},
		result{Name: "scale: idle tenant API requests per tenant", Value: round(last.TenantRequests/float64(last.Tenants), 4), Unit: "req/s",
			Note: "health checks of the tenant API servers, and nothing else"},
	)
	if o.ScaleExtraObjects > 0 {
		rs = append(rs, result{Name: "scale: memory per synced object", Value: round(perObjectKiB, 1), Unit: "KiB",
			Note: fmt.Sprintf("live heap growth over %d host copies (%d ConfigMaps of 256 bytes more per tenant API server): the hub's host copy and the tenant cache's object",
				last.Tenants*o.ScaleExtraObjects, o.ScaleExtraObjects)})
	}
	return rs
}

// rssAt is the manager's resident memory at the largest count, measured
// against its target at 1,000 idle tenants: 1.3 GiB, 1.3 MiB a tenant.
func rssAt(last scalePoint, setup string) result {
	r := result{Name: fmt.Sprintf("scale: manager RSS at %d idle tenants", last.Tenants), Value: last.RSSMiB, Unit: "MiB", Note: setup}
	if last.Tenants >= 1000 {
		r.Target, r.Met = "<= 1331 MiB", ptrBool(last.RSSMiB <= 1331)
	}
	return r
}
