package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// The floor pipeline is the least that a syncer built on client-go and
// controller-runtime does for every object it copies down: it watches the
// tenants' ConfigMaps, creates each one's copy in the host (one request),
// and watches the copies there. It has no translation, policy, digest,
// patrol, status, Events or metrics of its own, and its clients have no
// rate limit. The sync step runs it in a process of its own, on the same
// control planes and with the same writers as bin/manager, and reads its
// CPU time as it reads the manager's: what it spends per object is the
// cost of the stack, which no work on Tenantry's own code takes off the
// manager's.

// FloorOptions says what the floor pipeline copies, from where, to where.
type FloorOptions struct {
	// HostKubeconfig is the host's kubeconfig file.
	HostKubeconfig string
	// Tenants maps a cluster name, which names its host namespaces as a
	// VirtualCluster's name does, to its kubeconfig file.
	Tenants map[string]string
	// Namespace is the tenant namespace whose ConfigMaps are copied, into
	// the host namespace that Tenantry would copy them into (which must
	// exist).
	Namespace string
	// Workers is how many of a tenant's objects are copied at once;
	// bin/manager's default per tenant and syncer when 0.
	Workers int
	// CPUProfile, if set, is a file for the pipeline's CPU profile, from
	// when it watches everything until it ends.
	CPUProfile string
}

// FloorCommand is the command of this binary that runs the floor pipeline
// (bin/tenantry-dev's, and the bench's tests' own), with the flags of
// FloorOptions.BindFlags.
const FloorCommand = "bench-floor"

// BindFlags binds o to fs, as FloorCommand reads them.
func (o *FloorOptions) BindFlags(fs *flag.FlagSet) {
	if o.Tenants == nil {
		o.Tenants = map[string]string{}
	}
	fs.StringVar(&o.HostKubeconfig, "host-kubeconfig", o.HostKubeconfig, "The host's kubeconfig file.")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "The tenant namespace whose ConfigMaps are copied.")
	fs.IntVar(&o.Workers, "workers", o.Workers, "Objects of a tenant copied at once (default: bin/manager's per tenant and syncer).")
	fs.StringVar(&o.CPUProfile, "cpu-profile", o.CPUProfile, "A file for the CPU profile, from when the pipeline watches everything until it ends.")
	fs.Func("tenant", "NAME=KUBECONFIG: a tenant, by the name of its host namespaces and its kubeconfig file; repeated.", func(v string) error {
		name, path, ok := strings.Cut(v, "=")
		if !ok || name == "" || path == "" {
			return fmt.Errorf("want NAME=KUBECONFIG, got %q", v)
		}
		o.Tenants[name] = path
		return nil
	})
}

// floorWorkers is bin/manager's workers per tenant and syncer.
const floorWorkers = 4

// FloorReady is the line the floor pipeline prints once it watches
// everything.
const FloorReady = "floor pipeline: watching"

// RunFloorPipeline runs the floor pipeline until ctx ends; it prints
// FloorReady on out once its caches are synced.
func RunFloorPipeline(ctx context.Context, o FloorOptions, out io.Writer) error {
	if o.HostKubeconfig == "" || len(o.Tenants) == 0 || o.Namespace == "" {
		return errors.New("the floor pipeline needs a host kubeconfig, one tenant at least and a namespace")
	}
	if o.Workers <= 0 {
		o.Workers = floorWorkers
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	hostCfg, err := floorConfig(o.HostKubeconfig)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(hostCfg, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		Cache: ctrlcache.Options{ByObject: map[client.Object]ctrlcache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{syncer.LabelManagedBy: syncer.ManagedByValue})},
		}},
	})
	if err != nil {
		return fmt.Errorf("the floor pipeline's host manager: %w", err)
	}
	// The copies' watch (the hub's, in Tenantry), read into the cache that
	// the reconcilers read. Its events queue nothing: neither do the
	// echoes of Tenantry's own writes.
	if _, err := mgr.GetCache().GetInformer(ctx, &corev1.ConfigMap{}); err != nil {
		return err
	}
	var tenants []cluster.Cluster
	for _, name := range slices.Sorted(maps.Keys(o.Tenants)) {
		cfg, err := floorConfig(o.Tenants[name])
		if err != nil {
			return err
		}
		tenant, err := cluster.New(cfg, func(co *cluster.Options) { co.Scheme = scheme })
		if err != nil {
			return fmt.Errorf("the floor pipeline's tenant %s: %w", name, err)
		}
		if err := mgr.Add(tenant); err != nil {
			return err
		}
		tenants = append(tenants, tenant)
		r := &floorReconciler{
			tenant: tenant.GetCache(), host: mgr.GetCache(), hostWriter: mgr.GetClient(),
			hostNamespace: syncer.HostNamespace(name, o.Namespace),
			labels:        map[string]string{syncer.LabelManagedBy: syncer.ManagedByValue, syncer.LabelCluster: name},
		}
		c, err := controller.New("floor-"+name, mgr, controller.Options{Reconciler: r, MaxConcurrentReconciles: o.Workers})
		if err != nil {
			return fmt.Errorf("the floor pipeline's controller for %s: %w", name, err)
		}
		inNamespace := predicate.NewPredicateFuncs(func(obj client.Object) bool { return obj.GetNamespace() == o.Namespace })
		if err := c.Watch(source.Kind(tenant.GetCache(), client.Object(&corev1.ConfigMap{}), &handler.EnqueueRequestForObject{}, inNamespace)); err != nil {
			return err
		}
	}
	var profile *os.File
	if o.CPUProfile != "" {
		if profile, err = os.Create(o.CPUProfile); err != nil {
			return fmt.Errorf("the floor pipeline's CPU profile: %w", err)
		}
		defer profile.Close()
	}
	started := make(chan error, 1)
	go func() {
		err := mgr.Start(ctx)
		cancel() // a manager that ends on its own ends the waits below
		started <- err
	}()
	// fail stops the manager and waits for it, for an error after its start.
	fail := func(err error) error {
		cancel()
		return errors.Join(err, <-started)
	}
	for _, c := range append([]ctrlcache.Cache{mgr.GetCache()}, cachesOf(tenants)...) {
		if !c.WaitForCacheSync(ctx) {
			return fail(errors.New("the floor pipeline's caches did not sync"))
		}
	}
	if profile != nil {
		if err := pprof.StartCPUProfile(profile); err != nil {
			return fail(fmt.Errorf("profiling the floor pipeline: %w", err))
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Fprintln(out, FloorReady)
	return <-started
}

func cachesOf(clusters []cluster.Cluster) []ctrlcache.Cache {
	caches := make([]ctrlcache.Cache, len(clusters))
	for i, c := range clusters {
		caches[i] = c.GetCache()
	}
	return caches
}

// floorConfig is a kubeconfig file's rest.Config as the floor pipeline
// uses it: no client-side rate limit and, as bin/manager's, no gzip.
func floorConfig(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	cfg.QPS = -1
	cfg.DisableCompression = true
	return cfg, nil
}

// floorReconciler copies one tenant's ConfigMaps into their host
// namespace, once: a copy that exists is left as it is.
type floorReconciler struct {
	tenant, host  client.Reader
	hostNamespace string
	labels        map[string]string
	hostWriter    client.Writer
}

func (r *floorReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var tenant corev1.ConfigMap
	if err := r.tenant.Get(ctx, req.NamespacedName, &tenant); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	key := client.ObjectKey{Namespace: r.hostNamespace, Name: tenant.Name}
	if err := r.host.Get(ctx, key, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	copied := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: r.labels},
		Data:       tenant.Data, BinaryData: tenant.BinaryData,
	}
	if err := r.hostWriter.Create(ctx, copied); err != nil && !apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, fmt.Errorf("copying %s: %w", req.NamespacedName, err)
	}
	return reconcile.Result{}, nil
}

// startFloorProcess starts the floor pipeline with o, logging to logPath,
// and waits until it watches everything.
func startFloorProcess(ctx context.Context, o FloorOptions, logPath string) (*childProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary for the floor pipeline: %w", err)
	}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{FloorCommand, "--host-kubeconfig", o.HostKubeconfig, "--namespace", o.Namespace}
	if o.CPUProfile != "" {
		args = append(args, "--cpu-profile", o.CPUProfile)
	}
	if o.Workers > 0 {
		args = append(args, "--workers", strconv.Itoa(o.Workers))
	}
	for _, name := range slices.Sorted(maps.Keys(o.Tenants)) {
		args = append(args, "--tenant", name+"="+o.Tenants[name])
	}
	cmd := exec.Command(self, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		_ = log.Close()
		return nil, err
	}
	ready := make(chan struct{})
	p, err := startChild("the floor pipeline", cmd, log, func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if lines.Text() == FloorReady {
				close(ready)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	})
	if err != nil {
		return nil, err
	}
	select {
	case <-ready:
		select {
		case <-p.exited: // ready, and gone at once
			return nil, fmt.Errorf("the floor pipeline exited once watching: %v (see %s)", p.err, logPath)
		default:
			return p, nil
		}
	case <-p.exited:
		return nil, fmt.Errorf("the floor pipeline exited: %v (see %s)", p.err, logPath)
	case <-time.After(time.Minute):
		err = fmt.Errorf("the floor pipeline was not watching within a minute (see %s)", logPath)
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = p.stop()
	return nil, err
}
