package mcprovider_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/mcprovider"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// shared is one host and two tenants.
var shared *tenantrytest.Environment

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	env, err := tenantrytest.Start(context.Background(), tenantrytest.Options{Tenants: 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = env
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// newRegistry is a registry over the shared host, closed at the test's
// end; a cluster whose API server does not answer for a second fails.
func newRegistry(t *testing.T) *clusterregistry.RemoteClusterRegistry {
	t.Helper()
	host, err := client.New(shared.Host.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := clusterregistry.NewWithOptions(clusterregistry.Options{
		Logger:              logr.Discard(),
		ManageClient:        host,
		HealthCheckInterval: 200 * time.Millisecond,
		UnhealthyTimeout:    time.Second,
	})
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

// recorder is a multicluster.Aware that records every engagement; it
// refuses the first Engage of each name in refuse, and runs check, if
// set, on each cluster as it is engaged.
type recorder struct {
	mu      sync.Mutex
	refuse  map[string]bool
	check   func(name string, cl cluster.Cluster) error
	checked []error
	engaged []engaged
}

type engaged struct {
	name    string
	cluster cluster.Cluster
	ctx     context.Context
}

func (r *recorder) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse[name.String()] {
		delete(r.refuse, name.String())
		return errors.New("refused once")
	}
	if r.check != nil {
		r.checked = append(r.checked, r.check(name.String(), cl))
	}
	r.engaged = append(r.engaged, engaged{name: name.String(), cluster: cl, ctx: ctx})
	return nil
}

// Start makes a recorder an mcmanager.Runnable, to add to a manager.
func (r *recorder) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// checks is what check said of each cluster engaged so far.
func (r *recorder) checks() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.checked...)
}

// of is every engagement of name so far, oldest first.
func (r *recorder) of(name string) []engaged {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []engaged
	for _, e := range r.engaged {
		if e.name == name {
			out = append(out, e)
		}
	}
	return out
}

// waitEngaged waits until name has been engaged n times in all, and
// returns the last engagement.
func (r *recorder) waitEngaged(t *testing.T, name string, n int) engaged {
	t.Helper()
	tenantrytest.Eventually(t, 30*time.Second, fmt.Sprintf("%s engaged %d times", name, n), func(context.Context) (bool, error) {
		got := len(r.of(name))
		if got > n {
			return false, fmt.Errorf("engaged %d times, want %d", got, n)
		}
		return got == n, nil
	})
	all := r.of(name)
	return all[len(all)-1]
}

// waitDone waits for an engagement's context to end.
func waitDone(t *testing.T, e engaged, why string) {
	t.Helper()
	select {
	case <-e.ctx.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s's engagement still live after %s", e.name, why)
	}
}

// The provider engages what the registry runs, when it runs, with the
// registry's own cluster; disengages it when it stops or fails; engages a
// re-spawned one anew; retries an Engage that failed; and ends every
// engagement, and every goroutine of its own, when its Start ends.
func TestProviderFollowsTheRegistry(t *testing.T) {
	r := newRegistry(t)
	first, second := shared.Tenants[0], shared.Tenants[1]
	// A spawn and a stop first: the process-wide lazies of client-go and
	// controller-runtime start before the goroutine baseline.
	if err := r.Spawn(first.Name(), first.Config()); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(t.Context(), first.Name()); err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent()

	// One cluster runs before the provider starts, one after.
	if err := r.Spawn(first.Name(), first.Config()); err != nil {
		t.Fatal(err)
	}
	p := mcprovider.New(r)
	aware := &recorder{refuse: map[string]bool{second.Name(): true}}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- p.Start(ctx, aware) }()

	e1 := aware.waitEngaged(t, first.Name(), 1)
	if want, _ := r.Cluster(first.Name()); e1.cluster != want {
		t.Fatalf("engaged %s with %v, want the registry's cluster %v", first.Name(), e1.cluster, want)
	}
	if got, err := p.Get(t.Context(), multicluster.ClusterName(first.Name())); err != nil || got != e1.cluster {
		t.Fatalf("Get(%s) = %v, %v; want the engaged cluster", first.Name(), got, err)
	}
	// What is engaged is the app's own cluster: its client reads.
	if err := e1.cluster.GetClient().List(t.Context(), &corev1.NamespaceList{}); err != nil {
		t.Fatalf("listing through the engaged cluster: %v", err)
	}
	if err := e1.cluster.Start(t.Context()); err == nil {
		t.Fatal("Start of an engaged cluster succeeded; the registry runs it")
	}

	// Refused once, engaged on the retry.
	if err := r.Spawn(second.Name(), second.Config()); err != nil {
		t.Fatal(err)
	}
	e2 := aware.waitEngaged(t, second.Name(), 1)

	for _, name := range []string{"unknown", ""} {
		if _, err := p.Get(t.Context(), multicluster.ClusterName(name)); !errors.Is(err, multicluster.ErrClusterNotFound) {
			t.Fatalf("Get(%q) = %v, want ErrClusterNotFound", name, err)
		}
	}

	// Stopped: disengaged, and no longer found.
	if err := r.Stop(t.Context(), first.Name()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, e1, "its cluster stopped")
	if _, err := p.Get(t.Context(), multicluster.ClusterName(first.Name())); !errors.Is(err, multicluster.ErrClusterNotFound) || !errors.Is(err, clusterregistry.ErrNotExist) {
		t.Fatalf("Get of a stopped cluster = %v, want ErrClusterNotFound wrapping ErrNotExist", err)
	}
	if e2.ctx.Err() != nil {
		t.Fatalf("stopping %s disengaged %s", first.Name(), second.Name())
	}

	// Spawned again: engaged anew, with the new app's cluster.
	if err := r.Spawn(first.Name(), first.Config()); err != nil {
		t.Fatal(err)
	}
	e1again := aware.waitEngaged(t, first.Name(), 2)
	if e1again.cluster == e1.cluster {
		t.Fatal("the re-spawned cluster was engaged with the stopped app's cluster")
	}
	if err := e1again.cluster.GetClient().List(t.Context(), &corev1.NamespaceList{}); err != nil {
		t.Fatalf("listing through the re-engaged cluster: %v", err)
	}

	// Nothing but a new app engages a cluster again.
	if got := len(aware.of(second.Name())); got != 1 {
		t.Fatalf("%s engaged %d times, want once", second.Name(), got)
	}
	if err := p.Start(t.Context(), aware); err == nil {
		t.Fatal("a second Start succeeded")
	}

	// Failed (its API server cut off): disengaged, and not found; spawned
	// again once it answers: engaged anew.
	if err := second.Disconnect(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, e2, "its cluster failed")
	if st, _ := r.Status(second.Name()); st.State != clusterregistry.StateFailed {
		t.Fatalf("%s is %s after its API server was cut off, want Failed", second.Name(), st.State)
	}
	if _, err := p.Get(t.Context(), multicluster.ClusterName(second.Name())); !errors.Is(err, multicluster.ErrClusterNotFound) || !errors.Is(err, clusterregistry.ErrNotRunning) {
		t.Fatalf("Get of a failed cluster = %v, want ErrClusterNotFound wrapping ErrNotRunning", err)
	}
	if err := second.Reconnect(); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(t.Context(), second.Name()); err != nil {
		t.Fatal(err)
	}
	if err := r.Spawn(second.Name(), second.Config()); err != nil {
		t.Fatal(err)
	}
	e2 = aware.waitEngaged(t, second.Name(), 2)

	cancel()
	if err := <-started; err != nil {
		t.Fatalf("Start ended with %v, want nil", err)
	}
	waitDone(t, e1again, "Start ended")
	waitDone(t, e2, "Start ended")
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before,
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreAnyFunction("github.com/tenantry/tenantry/pkg/testing.(*tcpProxy).forward"),
		goleak.IgnoreAnyFunction("github.com/tenantry/tenantry/pkg/testing.pipe"))
}

// An index registered before a cluster runs, and one registered while it
// runs, both answer on it; a cluster that runs later gets both before it
// is engaged.
func TestIndexFieldOnRunningAndLaterClusters(t *testing.T) {
	r := newRegistry(t)
	first, second := shared.Tenants[0], shared.Tenants[1]
	p := mcprovider.New(r)
	color := func(o client.Object) []string { return []string{o.(*corev1.ConfigMap).Data["color"]} }
	shape := func(o client.Object) []string { return []string{o.(*corev1.ConfigMap).Data["shape"]} }

	for _, cp := range []*tenantrytest.ControlPlane{first, second} {
		c, err := client.New(cp.Config(), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "indexed-" + cp.Name()},
			Data:       map[string]string{"color": "blue", "shape": "round"},
		}
		if err := c.Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), cm) })
	}

	if err := p.IndexField(t.Context(), &corev1.ConfigMap{}, "data.color", color); err != nil {
		t.Fatalf("IndexField with no cluster running: %v", err)
	}
	if err := r.Spawn(first.Name(), first.Config()); err != nil {
		t.Fatal(err)
	}
	// Each cluster has, as it is engaged, the indexes registered by then.
	var registered []string
	aware := &recorder{check: func(name string, cl cluster.Cluster) error {
		for _, field := range registered {
			var list corev1.ConfigMapList
			if err := cl.GetCache().List(context.Background(), &list, client.MatchingFields{field: "any"}); err != nil {
				return fmt.Errorf("%s engaged without index %s: %w", name, field, err)
			}
		}
		return nil
	}}
	registered = []string{"data.color"}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- p.Start(ctx, aware) }()
	t.Cleanup(func() { cancel(); <-started })
	aware.waitEngaged(t, first.Name(), 1)

	// Registered while the first runs.
	if err := p.IndexField(t.Context(), &corev1.ConfigMap{}, "data.shape", shape); err != nil {
		t.Fatalf("IndexField with %s running: %v", first.Name(), err)
	}
	aware.mu.Lock()
	registered = append(registered, "data.shape")
	aware.mu.Unlock()
	if err := r.Spawn(second.Name(), second.Config()); err != nil {
		t.Fatal(err)
	}
	e2 := aware.waitEngaged(t, second.Name(), 1)

	for _, cp := range []*tenantrytest.ControlPlane{first, second} {
		cl, err := p.Get(t.Context(), multicluster.ClusterName(cp.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []client.MatchingFields{{"data.color": "blue"}, {"data.shape": "round"}} {
			var list corev1.ConfigMapList
			tenantrytest.Eventually(t, 10*time.Second, fmt.Sprintf("%v in %s's cache", f, cp.Name()), func(ctx context.Context) (bool, error) {
				if err := cl.GetClient().List(ctx, &list, f); err != nil {
					return false, err
				}
				return len(list.Items) == 1, nil
			})
			if got := list.Items[0].Name; got != "indexed-"+cp.Name() {
				t.Fatalf("%s: %v found %s", cp.Name(), f, got)
			}
		}
	}
	if err := aware.checks(); err != nil {
		t.Fatal(err)
	}

	// A second index of one name is refused, and not kept for later
	// clusters: each would refuse it.
	if err := p.IndexField(t.Context(), &corev1.ConfigMap{}, "data.color", color); err == nil || !strings.Contains(err.Error(), "data.color") {
		t.Fatalf("indexing one field twice = %v, want an error naming it", err)
	}
	if err := r.Stop(t.Context(), second.Name()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, e2, "its cluster stopped")
	if err := r.Spawn(second.Name(), second.Config()); err != nil {
		t.Fatal(err)
	}
	aware.waitEngaged(t, second.Name(), 2)
}

// Spawns and stops, Gets and IndexFields all at once (run with -race): once
// they settle, the running cluster is engaged as its current app, and it
// has every index, each once.
func TestConcurrentSpawnsGetsAndIndexes(t *testing.T) {
	r := newRegistry(t)
	cp := shared.Tenants[0]
	p := mcprovider.New(r)
	aware := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan error, 1)
	go func() { started <- p.Start(ctx, aware) }()
	t.Cleanup(func() { cancel(); <-started })

	// Each step of the spawns and stops lets one IndexField and one Get
	// run beside the next step.
	const cycles = 4
	steps := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(steps)
		for i := range cycles {
			if err := r.Spawn(cp.Name(), cp.Config()); err != nil {
				t.Errorf("cycle %d: Spawn: %v", i, err)
				return
			}
			steps <- struct{}{}
			if i == cycles-1 {
				return // ends running
			}
			if err := r.Stop(context.Background(), cp.Name()); err != nil {
				t.Errorf("cycle %d: Stop: %v", i, err)
				return
			}
			steps <- struct{}{}
		}
	})
	fields := 0
	for range steps {
		field := fmt.Sprintf("f%d", fields)
		fields++
		wg.Go(func() {
			// A cluster that stops meanwhile may refuse it: the index is
			// kept for the next app all the same.
			_ = p.IndexField(context.Background(), &corev1.ConfigMap{}, field, func(client.Object) []string { return []string{field} })
		})
		wg.Go(func() {
			if cl, err := p.Get(context.Background(), multicluster.ClusterName(cp.Name())); err == nil && cl == nil {
				t.Error("Get returned no cluster and no error")
			}
		})
	}
	wg.Wait()

	want, err := r.Cluster(cp.Name())
	if err != nil {
		t.Fatal(err)
	}
	tenantrytest.Eventually(t, 30*time.Second, "the last app engaged", func(context.Context) (bool, error) {
		all := aware.of(cp.Name())
		return len(all) > 0 && all[len(all)-1].cluster == want && all[len(all)-1].ctx.Err() == nil, nil
	})
	for i := range fields {
		var list corev1.ConfigMapList
		if err := want.GetCache().List(t.Context(), &list, client.MatchingFields{fmt.Sprintf("f%d", i): "none"}); err != nil {
			t.Errorf("the running app lacks index f%d: %v", i, err)
		}
	}
	for _, e := range aware.of(cp.Name()) {
		if e.cluster != want && e.ctx.Err() == nil {
			t.Errorf("an engagement of a stopped app is still live")
		}
	}
}
