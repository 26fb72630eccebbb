package clusterregistry_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"go.uber.org/fx"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

func newRegistry(t testing.TB, opts clusterregistry.Options, modules ...fx.Option) *clusterregistry.RemoteClusterRegistry {
	t.Helper()
	if opts.ManageClient == nil {
		opts.ManageClient = newClient(t, shared.Host)
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	r := clusterregistry.NewWithOptions(opts, modules...)
	t.Cleanup(func() {
		for _, s := range r.List() {
			if err := r.Stop(context.Background(), s.Name); err != nil && !errors.Is(err, clusterregistry.ErrNotExist) {
				t.Errorf("stopping %s at cleanup: %v", s.Name, err)
			}
		}
	})
	return r
}

// Two tenants copy their ConfigMaps into the host; stopping one stops only
// its copying, and re-spawning it picks up what it missed.
func TestSpawnStopRespawn(t *testing.T) {
	host := newClient(t, shared.Host)
	ensureNamespace(t, host, copiesNamespace)
	r := newRegistry(t, clusterregistry.Options{}, copyModule)
	t1, t2 := shared.Tenants[0], shared.Tenants[1]
	c1, c2 := newClient(t, t1), newClient(t, t2)
	name1, name2 := unique("respawn"), unique("respawn")
	a, b := unique("a"), unique("b")

	if err := r.Spawn(name1, t1.Config()); err != nil {
		t.Fatalf("Spawn %s: %v", name1, err)
	}
	if err := r.Spawn(name2, t2.Config()); err != nil {
		t.Fatalf("Spawn %s: %v", name2, err)
	}
	createLabelled(t, c1, a, "one")
	createLabelled(t, c2, a, "two")
	expectCopy(t, host, name1, a, "one")
	expectCopy(t, host, name2, a, "two")

	if err := r.Stop(t.Context(), name1); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	createLabelled(t, c1, b, "one")
	createLabelled(t, c2, b, "two")
	// The second cluster still copies; once its copy is there, the first's
	// would have been too had it still been running.
	expectCopy(t, host, name2, b, "two")
	if hasCopy(t, host, name1, b) {
		t.Fatal("a stopped cluster still copies")
	}
	if err := r.WithClient(name1, func(client.Client) error { return nil }); !errors.Is(err, clusterregistry.ErrNotExist) {
		t.Fatalf("WithClient of a stopped cluster = %v, want ErrNotExist", err)
	}

	if err := r.Spawn(name1, t1.Config()); err != nil {
		t.Fatalf("re-Spawn: %v", err)
	}
	expectCopy(t, host, name1, b, "one")
}

func TestSpawnStopErrors(t *testing.T) {
	r := newRegistry(t, clusterregistry.Options{SpawnTimeout: 3 * time.Second})
	cfg := shared.Tenants[0].Config()

	if err := r.Spawn("errors", cfg); err != nil {
		t.Fatal(err)
	}
	if err := r.Spawn("errors", cfg); !errors.Is(err, clusterregistry.ErrAlreadyExist) {
		t.Fatalf("second Spawn = %v, want ErrAlreadyExist", err)
	}
	if err := r.Stop(t.Context(), "nobody"); !errors.Is(err, clusterregistry.ErrNotExist) {
		t.Fatalf("Stop of an unknown name = %v, want ErrNotExist", err)
	}
	called := false
	err := r.WithClient("nobody", func(client.Client) error { called = true; return nil })
	if !errors.Is(err, clusterregistry.ErrNotExist) || called {
		t.Fatalf("WithClient of an unknown name = %v (callback ran: %v), want ErrNotExist", err, called)
	}
	if err := r.Spawn("Not_A_DNS_Name", cfg); err == nil || !strings.Contains(err.Error(), "Not_A_DNS_Name") {
		t.Fatalf("Spawn with a bad name = %v, want an error naming it", err)
	}
	if err := r.Spawn("nil-config", nil); err == nil {
		t.Fatal("Spawn accepted a nil config")
	}
	if got := names(r.List()); got != "errors" {
		t.Fatalf("clusters after failed spawns = %q, want only %q", got, "errors")
	}
}

func TestSpawnUnreachableLeavesNothing(t *testing.T) {
	before := goleak.IgnoreCurrent()
	r := newRegistry(t, clusterregistry.Options{SpawnTimeout: 2 * time.Second})

	closed := closedPortConfig(t)
	began := time.Now()
	err := r.Spawn("closed-port", closed)
	if !errors.Is(err, clusterregistry.ErrUnreachable) {
		t.Fatalf("Spawn against a closed port = %v, want ErrUnreachable", err)
	}
	if elapsed := time.Since(began); elapsed > 3*time.Second {
		t.Fatalf("Spawn took %s, beyond its 2s timeout", elapsed)
	}

	// An address that accepts connections but never answers: only the
	// timeout ends the Spawn.
	silentAddr, closeSilent := blackhole(t)
	silent := shared.Tenants[0].Config()
	silent.Host = "https://" + silentAddr
	began = time.Now()
	if err := r.Spawn("silent", silent); !errors.Is(err, clusterregistry.ErrUnreachable) {
		t.Fatalf("Spawn against a silent server = %v, want ErrUnreachable", err)
	}
	if elapsed := time.Since(began); elapsed > 3*time.Second {
		t.Fatalf("Spawn took %s, beyond its 2s timeout", elapsed)
	}

	if list := r.List(); len(list) != 0 {
		t.Fatalf("failed spawns left %v in the registry", list)
	}
	if _, err := r.Status("closed-port"); !errors.Is(err, clusterregistry.ErrNotExist) {
		t.Fatalf("Status after a failed spawn = %v, want ErrNotExist", err)
	}
	closeSilent()
	goleak.VerifyNone(t, before)
}

func TestSpawnStopCyclesLeakNoGoroutine(t *testing.T) {
	r := newRegistry(t, clusterregistry.Options{HealthCheckInterval: 50 * time.Millisecond}, copyModule)
	cfg := shared.Tenants[0].Config()
	// Warm up process-wide lazies (client-go's and controller-runtime's
	// global workers) before taking the goroutine baseline.
	if err := r.Spawn("cycle", cfg); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(t.Context(), "cycle"); err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent()

	for i := range 50 {
		if err := r.Spawn("cycle", cfg); err != nil {
			t.Fatalf("cycle %d: Spawn: %v", i, err)
		}
		if err := r.WithClient("cycle", func(c client.Client) error {
			return c.List(t.Context(), &corev1.ConfigMapList{})
		}); err != nil {
			t.Fatalf("cycle %d: WithClient: %v", i, err)
		}
		if err := r.Stop(t.Context(), "cycle"); err != nil {
			t.Fatalf("cycle %d: Stop: %v", i, err)
		}
	}
	// client-go keeps one pool of connections per TLS config for the whole
	// process (its transport cache), which outlives every cluster's app: a
	// connection it opened during the cycles stays pooled, with its end in
	// the test harness's proxy. Anything of a cluster's own (informers,
	// queues, controllers) still shows.
	goleak.VerifyNone(t, before,
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreAnyFunction("github.com/tenantry/tenantry/pkg/testing.(*tcpProxy).forward"),
		goleak.IgnoreAnyFunction("github.com/tenantry/tenantry/pkg/testing.pipe"))
}

// A cluster talks to its API server over one connection: the first check,
// the REST mapper's discovery, the cache's watches, the client's requests
// and the manager's API reader share it.
func TestAClusterOpensOneConnection(t *testing.T) {
	var dials atomic.Int64
	cfg := rest.CopyConfig(shared.Tenants[0].Config())
	var d net.Dialer
	cfg.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, address)
	}
	managers := make(chan manager.Manager, 1)
	r := newRegistry(t, clusterregistry.Options{}, copyModule, fx.Invoke(func(m manager.Manager) { managers <- m }))
	if err := r.Spawn("one-connection", cfg); err != nil {
		t.Fatal(err)
	}
	if err := r.WithClient("one-connection", func(c client.Client) error {
		return c.List(t.Context(), &corev1.ConfigMapList{})
	}); err != nil {
		t.Fatal(err)
	}
	mgr := <-managers
	if err := mgr.GetAPIReader().List(t.Context(), &corev1.SecretList{}); err != nil {
		t.Fatal(err)
	}
	resp, err := mgr.GetHTTPClient().Get(mgr.GetConfig().Host + "/version")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if n := dials.Load(); n != 1 {
		t.Errorf("the cluster dialled its API server %d times; want once", n)
	}
	if err := r.Stop(t.Context(), "one-connection"); err != nil {
		t.Fatal(err)
	}
}

// The module gets every value the package promises, built for its cluster.
func TestModuleInjection(t *testing.T) {
	var (
		mu   sync.Mutex
		logs []string
	)
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		logs = append(logs, args)
		mu.Unlock()
	}, funcr.Options{})
	manage := newClient(t, shared.Host)
	tenantCfg := shared.Tenants[1].Config()

	type injected struct {
		fx.In
		Manager manager.Manager
		Client  client.Client
		Manage  client.Client `name:"manage-client"`
		Name    string        `name:"cluster-name"`
		Config  *rest.Config
		Log     logr.Logger
	}
	got := make(chan injected, 1)
	typed := make(chan clusterregistry.Tenant, 1)
	r := newRegistry(t, clusterregistry.Options{Logger: logger, ManageClient: manage},
		fx.Invoke(func(in injected, tenant clusterregistry.Tenant) {
			in.Log.Info("module invoked")
			got <- in
			typed <- tenant
		}))

	if err := r.Spawn("injection", tenantCfg); err != nil {
		t.Fatal(err)
	}
	in := <-got
	if in.Name != "injection" {
		t.Errorf("cluster-name = %q", in.Name)
	}
	// The parameter object asks for the same values.
	if tenant := <-typed; tenant.Manager != in.Manager || tenant.Client != in.Client || tenant.ManageClient != in.Manage ||
		tenant.ClusterName != in.Name || tenant.Config != in.Config {
		t.Errorf("clusterregistry.Tenant = %+v; want the values asked for by tag %+v", tenant, in)
	}
	if in.Manage != manage {
		t.Error("manage-client is not the client given to the registry")
	}
	if in.Config.Host != tenantCfg.Host {
		t.Errorf("rest.Config host = %q, want the tenant's %q", in.Config.Host, tenantCfg.Host)
	}
	if !in.Config.DisableCompression {
		t.Error("the cluster's config asks for compressed responses: every watch would hold a decompressor")
	}
	if in.Client != in.Manager.GetClient() {
		t.Error("the unnamed client is not the manager's")
	}
	// The client reaches the tenant, not the host: a namespace made in the
	// tenant alone is visible to it.
	ensureNamespace(t, newClient(t, shared.Tenants[1]), "only-in-tenant-2")
	eventually(t, 10*time.Second, "tenant namespace visible", func(ctx context.Context) (bool, error) {
		err := in.Client.Get(ctx, client.ObjectKey{Name: "only-in-tenant-2"}, &corev1.Namespace{})
		return err == nil, err
	})
	mu.Lock()
	defer mu.Unlock()
	found := false
	for _, l := range logs {
		if strings.Contains(l, `"module invoked"`) && strings.Contains(l, `"cluster"="injection"`) {
			found = true
		}
	}
	if !found {
		t.Errorf("module's log line lacks cluster=injection: %q", logs)
	}
}

func TestCallerConfigUnchanged(t *testing.T) {
	r := newRegistry(t, clusterregistry.Options{})
	cfg := shared.Tenants[0].Config()
	want := rest.CopyConfig(cfg)
	if err := r.Spawn("config-unchanged", cfg); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("Spawn changed the caller's rest.Config:\n got %+v\nwant %+v", cfg, want)
	}
}

// A module that fails or panics fails its Spawn, and only that.
func TestModuleErrorsFailSpawn(t *testing.T) {
	cfg := shared.Tenants[0].Config()
	for name, module := range map[string]fx.Option{
		"invoke-error": fx.Invoke(func() error { return errors.New("module refuses") }),
		"invoke-panic": fx.Invoke(func() { panic("module panics") }),
		"webhook":      fx.Invoke(func(m manager.Manager) { m.GetWebhookServer().Register("/validate", nil) }),
	} {
		t.Run(name, func(t *testing.T) {
			r := newRegistry(t, clusterregistry.Options{}, module)
			err := r.Spawn(name, cfg)
			if err == nil {
				t.Fatal("Spawn succeeded")
			}
			t.Log(err)
			if len(r.List()) != 0 {
				t.Fatalf("failed Spawn left %v", r.List())
			}
		})
	}
}

// A manager that dies on its own is reported Failed, and the other cluster
// keeps running.
func TestManagerExitIsReported(t *testing.T) {
	die := make(chan struct{})
	dying := fx.Invoke(fx.Annotate(func(m manager.Manager, name string) error {
		if !strings.HasPrefix(name, "dies") {
			return nil
		}
		return m.Add(manager.RunnableFunc(func(ctx context.Context) error {
			select {
			case <-die:
				return errors.New("runnable gave up")
			case <-ctx.Done():
				return nil
			}
		}))
	}, fx.ParamTags(``, clusterregistry.ClusterNameTag)))

	r := newRegistry(t, clusterregistry.Options{}, dying)
	events := subscribe(t, r)
	for _, name := range []string{"dies", "lives"} {
		if err := r.Spawn(name, shared.Tenants[0].Config()); err != nil {
			t.Fatal(err)
		}
	}
	close(die)
	s := events.waitFor(t, "dies", clusterregistry.StateFailed)
	if s.Err == nil || !strings.Contains(s.Err.Error(), "runnable gave up") {
		t.Fatalf("Failed status error = %v, want the runnable's error", s.Err)
	}
	if err := r.WithClient("dies", func(client.Client) error { return nil }); !errors.Is(err, clusterregistry.ErrNotRunning) {
		t.Fatalf("WithClient of a failed cluster = %v, want ErrNotRunning", err)
	}
	if st, _ := r.Status("lives"); st.State != clusterregistry.StateRunning {
		t.Fatalf("other cluster is %s", st.State)
	}
	if err := r.Spawn("dies", shared.Tenants[0].Config()); !errors.Is(err, clusterregistry.ErrAlreadyExist) {
		t.Fatalf("Spawn over a failed cluster = %v, want ErrAlreadyExist until Stop", err)
	}
	if err := r.Stop(t.Context(), "dies"); err != nil {
		t.Fatalf("Stop of a failed cluster: %v", err)
	}
	events.waitFor(t, "dies", clusterregistry.StateStopped)
}

// A Spawn racing a Stop of the same name ends in one well-defined state:
// the Stop came first (ErrNotExist, and the cluster runs), the Spawn won and
// the Stop then removed the cluster, or the Stop cut the Spawn short
// (ErrStopped). Never anything in between.
func TestSpawnStopRace(t *testing.T) {
	r := newRegistry(t, clusterregistry.Options{}, copyModule)
	cfg := shared.Tenants[0].Config()
	before := goleak.IgnoreCurrent()
	outcomes := map[string]int{}
	for i := range 30 {
		spawned, stopped := make(chan error, 1), make(chan error, 1)
		go func() { spawned <- r.Spawn("race", cfg) }()
		go func() { stopped <- r.Stop(t.Context(), "race") }()
		spawnErr, stopErr := <-spawned, <-stopped
		_, statusErr := r.Status("race")
		switch {
		case spawnErr == nil && errors.Is(stopErr, clusterregistry.ErrNotExist) && statusErr == nil:
			outcomes["stop first"]++
			if err := r.Stop(t.Context(), "race"); err != nil {
				t.Fatalf("round %d: cleanup Stop: %v", i, err)
			}
		case spawnErr == nil && stopErr == nil && statusErr != nil:
			outcomes["spawned, then stopped"]++
		case errors.Is(spawnErr, clusterregistry.ErrStopped) && stopErr == nil && statusErr != nil:
			outcomes["stopped while starting"]++
		default:
			t.Fatalf("round %d: Spawn = %v, Stop = %v, then Status = %v", i, spawnErr, stopErr, statusErr)
		}
	}
	t.Logf("outcomes: %v", outcomes)
	goleak.VerifyNone(t, before)
}

// A Stop while a module's start hook runs cancels the hook's context and
// makes the Spawn fail with ErrStopped, leaving nothing behind.
func TestStopDuringStart(t *testing.T) {
	entered := make(chan struct{})
	hookErr := make(chan error, 1)
	slowStart := fx.Invoke(func(lc fx.Lifecycle) {
		lc.Append(fx.Hook{OnStart: func(ctx context.Context) error {
			close(entered)
			<-ctx.Done()
			hookErr <- ctx.Err()
			return ctx.Err()
		}})
	})
	r := newRegistry(t, clusterregistry.Options{SpawnTimeout: time.Minute}, slowStart)
	spawned := make(chan error, 1)
	go func() { spawned <- r.Spawn("slow", shared.Tenants[0].Config()) }()
	<-entered
	if err := r.Stop(t.Context(), "slow"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := <-spawned; !errors.Is(err, clusterregistry.ErrStopped) {
		t.Fatalf("Spawn = %v, want ErrStopped", err)
	}
	if err := <-hookErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("hook context ended with %v, want canceled", err)
	}
	if len(r.List()) != 0 {
		t.Fatalf("registry holds %v", r.List())
	}
}

// Many clusters, many goroutines; a WithClient callback that waits on
// another cluster's Spawn proves that no lock is held across it.
func TestConcurrentUse(t *testing.T) {
	// namespaceCounter's controller takes its default name, "namespace", in
	// every cluster: the same module must run for all of them.
	var reconciled sync.Map
	namespaceCounter := fx.Invoke(fx.Annotate(func(mgr manager.Manager, cluster string) error {
		return builder.ControllerManagedBy(mgr).For(&corev1.Namespace{}).
			Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
				reconciled.Store(cluster, true)
				return reconcile.Result{}, nil
			}))
	}, fx.ParamTags(``, clusterregistry.ClusterNameTag)))
	r := newRegistry(t, clusterregistry.Options{}, copyModule, namespaceCounter)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, 3*n)
	for i := range n {
		wg.Go(func() {
			cp := shared.Tenants[i%2]
			name := fmt.Sprintf("concurrent-%d", i)
			if err := r.Spawn(name, cp.Config()); err != nil {
				errs <- err
				return
			}
			errs <- r.WithClient(name, func(c client.Client) error {
				return c.List(context.Background(), &corev1.NamespaceList{})
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := len(r.List()); got != n {
		t.Fatalf("%d clusters running, want %d", got, n)
	}
	for i := range n {
		name := fmt.Sprintf("concurrent-%d", i)
		eventually(t, 10*time.Second, name+" reconciles namespaces", func(context.Context) (bool, error) {
			_, ok := reconciled.Load(name)
			return ok, nil
		})
	}

	inside := make(chan struct{})
	spawned := make(chan error, 1)
	err := r.WithClient("concurrent-0", func(client.Client) error {
		go func() {
			<-inside
			spawned <- r.Spawn("concurrent-late", shared.Tenants[0].Config())
		}()
		close(inside)
		select {
		case err := <-spawned:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("Spawn blocked while a WithClient callback ran")
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, s := range r.List() {
		wg.Go(func() {
			if err := r.Stop(context.Background(), s.Name); err != nil {
				t.Errorf("Stop %s: %v", s.Name, err)
			}
		})
	}
	wg.Wait()
	if len(r.List()) != 0 {
		t.Fatalf("after stopping all: %v", r.List())
	}
}

// A tenant whose API server goes away for good is reported Failed; the
// other keeps reconciling.
func TestDeadAPIServerIsReported(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{Tenants: 2})
	host := newClient(t, env.Host)
	ensureNamespace(t, host, copiesNamespace)
	r := newRegistry(t, clusterregistry.Options{
		ManageClient:        host,
		HealthCheckInterval: 100 * time.Millisecond,
		UnhealthyTimeout:    time.Second,
	}, copyModule)
	events := subscribe(t, r)
	for _, cp := range env.Tenants {
		if err := r.Spawn(cp.Name(), cp.Config()); err != nil {
			t.Fatal(err)
		}
	}
	failuresBefore := failures(t, "tenant-1")
	survivor := newClient(t, env.Tenants[1])
	createLabelled(t, survivor, "before", "x")
	expectCopy(t, host, "tenant-2", "before", "x")

	if err := env.Tenants[0].StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	s := events.waitFor(t, "tenant-1", clusterregistry.StateFailed)
	if !errors.Is(s.Err, clusterregistry.ErrUnreachable) {
		t.Fatalf("failure = %v, want ErrUnreachable", s.Err)
	}
	if st, _ := r.Status("tenant-2"); st.State != clusterregistry.StateRunning {
		t.Fatalf("tenant-2 is %s after tenant-1 failed", st.State)
	}
	createLabelled(t, survivor, "after", "y")
	expectCopy(t, host, "tenant-2", "after", "y")
	if n := failures(t, "tenant-1") - failuresBefore; n != 1 {
		t.Fatalf("tenantry_registry_cluster_failures_total{cluster=tenant-1} grew by %v, want 1", n)
	}

	// The owner re-spawns once the API server is back.
	if err := r.Stop(t.Context(), "tenant-1"); err != nil {
		t.Fatal(err)
	}
	if err := env.Tenants[0].StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := r.Spawn("tenant-1", env.Tenants[0].Config()); err != nil {
		t.Fatalf("re-Spawn after the API server came back: %v", err)
	}
	// A running cluster keeps its failures; one gone for good does not.
	r.Forget("tenant-1")
	if tenantrytest.Metric(t, "tenantry_registry_cluster_failures_total", map[string]string{"cluster": "tenant-1"}) == nil {
		t.Fatal("Forget dropped the failures of a running cluster")
	}
	if err := r.Stop(t.Context(), "tenant-1"); err != nil {
		t.Fatal(err)
	}
	r.Forget("tenant-1")
	if m := tenantrytest.Metric(t, "tenantry_registry_cluster_failures_total", map[string]string{"cluster": "tenant-1"}); m != nil {
		t.Fatalf("failures of a forgotten cluster: %v; want the series gone", m)
	}
}

func TestMetrics(t *testing.T) {
	r := newRegistry(t, clusterregistry.Options{})
	if err := r.Spawn("metrics", shared.Tenants[0].Config()); err != nil {
		t.Fatal(err)
	}
	if v := gauge(t, "tenantry_registry_cluster_state", map[string]string{"cluster": "metrics", "state": "Running"}); v != 1 {
		t.Fatalf("cluster_state{metrics,Running} = %v, want 1", v)
	}
	if v := gauge(t, "tenantry_registry_clusters", map[string]string{"state": "Running"}); v < 1 {
		t.Fatalf("clusters{Running} = %v, want at least 1", v)
	}
	if err := r.Stop(t.Context(), "metrics"); err != nil {
		t.Fatal(err)
	}
	if v := gauge(t, "tenantry_registry_cluster_state", map[string]string{"cluster": "metrics", "state": "Running"}); v != 0 {
		t.Fatalf("cluster_state{metrics,Running} after Stop = %v, want the series gone", v)
	}
	if n := histogramCount(t, "tenantry_registry_spawn_duration_seconds", map[string]string{"result": "success"}); n == 0 {
		t.Fatal("no successful spawn recorded")
	}
}

// events records what a registry reports to subscribers.
type events struct {
	mu   sync.Mutex
	seen []clusterregistry.Status
}

func subscribe(t testing.TB, r *clusterregistry.RemoteClusterRegistry) *events {
	e := &events{}
	t.Cleanup(r.Subscribe(func(s clusterregistry.Status) {
		e.mu.Lock()
		e.seen = append(e.seen, s)
		e.mu.Unlock()
	}))
	return e
}

func (e *events) waitFor(t testing.TB, name string, state clusterregistry.State) clusterregistry.Status {
	t.Helper()
	var found clusterregistry.Status
	eventually(t, 30*time.Second, fmt.Sprintf("%s reported %s", name, state), func(context.Context) (bool, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, s := range e.seen {
			if s.Name == name && s.State == state {
				found = s
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// unique returns prefix with a random suffix, so that tests sharing control
// planes, or run with -count, never meet each other's objects.
func unique(prefix string) string {
	return prefix + "-" + utilrand.String(5)
}

func names(list []clusterregistry.Status) string {
	var s []string
	for _, c := range list {
		s = append(s, c.Name)
	}
	return strings.Join(s, ",")
}

// closedPortConfig is a config for an address where nothing listens.
func closedPortConfig(t testing.TB) *rest.Config {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	cfg := shared.Tenants[0].Config()
	cfg.Host = "https://" + addr
	return cfg
}

// blackhole listens and accepts connections but never answers them, until
// the returned function (also run at cleanup) closes everything.
func blackhole(t testing.TB) (string, func()) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	closeAll := sync.OnceFunc(func() {
		_ = l.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	t.Cleanup(closeAll)
	return l.Addr().String(), closeAll
}

func failures(t testing.TB, cluster string) float64 {
	return metricValue(t, "tenantry_registry_cluster_failures_total", map[string]string{"cluster": cluster})
}

func gauge(t testing.TB, name string, labels map[string]string) float64 {
	return metricValue(t, name, labels)
}

func histogramCount(t testing.TB, name string, labels map[string]string) uint64 {
	return tenantrytest.Metric(t, name, labels).GetHistogram().GetSampleCount()
}

func metricValue(t testing.TB, name string, labels map[string]string) float64 {
	m := tenantrytest.Metric(t, name, labels)
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return m.GetCounter().GetValue()
}

func TestCloseStopsAllAndRefusesSpawns(t *testing.T) {
	r := newRegistry(t, clusterregistry.Options{}, copyModule)
	for _, name := range []string{"close-a", "close-b"} {
		if err := r.Spawn(name, shared.Tenants[0].Config()); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if list := r.List(); len(list) != 0 {
		t.Fatalf("after Close: %v", list)
	}
	if err := r.Spawn("close-c", shared.Tenants[0].Config()); !errors.Is(err, clusterregistry.ErrClosed) {
		t.Fatalf("Spawn after Close = %v, want ErrClosed", err)
	}
}

// Tenant caches hold objects without their managed fields, unless asked
// to keep them; the API server's stay either way.
func TestTenantCachesDropManagedFields(t *testing.T) {
	tenant := newClient(t, shared.Tenants[0])
	ns := &corev1.Namespace{}
	ns.Name = "managed-fields-" + utilrand.String(5)
	if err := tenant.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	for _, keep := range []bool{false, true} {
		got := make(chan client.Client, 1)
		r := newRegistry(t, clusterregistry.Options{KeepManagedFields: keep},
			fx.Invoke(func(c client.Client) { got <- c }))
		name := fmt.Sprintf("fields-%t", keep)
		if err := r.Spawn(name, shared.Tenants[0].Config()); err != nil {
			t.Fatal(err)
		}
		cached := <-got
		var read corev1.Namespace
		eventually(t, 10*time.Second, "the namespace in the tenant cache", func(ctx context.Context) (bool, error) {
			err := cached.Get(ctx, client.ObjectKeyFromObject(ns), &read)
			return err == nil, err
		})
		if kept := len(read.ManagedFields) > 0; kept != keep {
			t.Errorf("KeepManagedFields %t: the cached namespace has %d managed fields", keep, len(read.ManagedFields))
		}
		if err := r.Stop(t.Context(), name); err != nil {
			t.Fatal(err)
		}
	}
	var server corev1.Namespace
	if err := tenant.Get(t.Context(), client.ObjectKeyFromObject(ns), &server); err != nil || len(server.ManagedFields) == 0 {
		t.Errorf("the API server's namespace: %d managed fields, %v", len(server.ManagedFields), err)
	}
}

// Cluster hands out the running app's own cluster.Cluster: the manager
// its modules get, one value while the app runs and a new one after a
// re-spawn; its Start refuses, and a cluster that does not run is an
// error the caller can tell apart.
func TestClusterIsTheAppsOwn(t *testing.T) {
	var inApp manager.Manager
	r := newRegistry(t, clusterregistry.Options{}, fx.Populate(&inApp))
	cfg := shared.Tenants[0].Config()
	if _, err := r.Cluster("cluster"); !errors.Is(err, clusterregistry.ErrNotExist) {
		t.Fatalf("Cluster of an unknown name = %v, want ErrNotExist", err)
	}
	if err := r.Spawn("cluster", cfg); err != nil {
		t.Fatal(err)
	}
	cl, err := r.Cluster("cluster")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := r.Cluster("cluster"); again != cl {
		t.Fatal("Cluster handed out two values for one app")
	}
	if cl.GetCache() != inApp.GetCache() || cl.GetClient() != inApp.GetClient() || cl.GetHTTPClient() != inApp.GetHTTPClient() {
		t.Fatal("Cluster's cache, client or HTTP client is not the app's own")
	}
	if err := cl.GetClient().List(t.Context(), &corev1.ConfigMapList{}); err != nil {
		t.Fatalf("listing through Cluster's client: %v", err)
	}
	if err := cl.Start(t.Context()); err == nil {
		t.Fatal("Start of a registry's cluster succeeded")
	}
	if err := r.Stop(t.Context(), "cluster"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Cluster("cluster"); !errors.Is(err, clusterregistry.ErrNotExist) {
		t.Fatalf("Cluster after Stop = %v, want ErrNotExist", err)
	}
	if err := r.Spawn("cluster", cfg); err != nil {
		t.Fatal(err)
	}
	if again, err := r.Cluster("cluster"); err != nil || again == cl {
		t.Fatalf("Cluster after a re-spawn = %v, %v; want the new app's", again, err)
	}
}
