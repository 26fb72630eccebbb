package providers

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/fx"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// A leader that loses its Lease exits at once: it does not drain its
// tenants' apps, whose writes would land while another replica leads.
func TestLostLeaseExitsAtOnce(t *testing.T) {
	exited := make(chan int, 1)
	exitProcess = func(code int) { exited <- code }
	t.Cleanup(func() { exitProcess = os.Exit })
	const id = "tenantry-test"
	_, leases := startLeader(t, id)

	// Another replica takes the Lease over, as after a partition.
	var stolen time.Time
	tenantrytest.Eventually(t, 10*time.Second, "the Lease taken over", func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		stolen = time.Now()
		l.Spec = coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("usurper"), LeaseDurationSeconds: ptr.To[int32](60),
			AcquireTime: &metav1.MicroTime{Time: stolen}, RenewTime: &metav1.MicroTime{Time: stolen},
		}
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err == nil, err
	})
	select {
	case code := <-exited:
		if code != 1 {
			t.Fatalf("exit code %d, want 1", code)
		}
		t.Logf("exited %s after the Lease was taken over", time.Since(stolen).Round(100*time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatalf("still running %s after losing the Lease", time.Since(stolen).Round(time.Second))
	}
}

// A leader that shuts down cleanly gives its Lease up, so that the next
// one need not wait for it to expire.
func TestCleanShutdownReleasesTheLease(t *testing.T) {
	const id = "tenantry-release-test"
	app, leases := startLeader(t, id)
	if err := app.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	l, err := leases.Get(t.Context(), id, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 1 {
		t.Fatalf("after a clean shutdown the Lease is held by %q for %ds; want given up", h, ptr.Deref(l.Spec.LeaseDurationSeconds, 0))
	}
}

// startLeader starts the management app with leader election on a new
// host, and waits until it holds the Lease id; it returns the app and the
// host's Leases.
func startLeader(t *testing.T, id string) (*fx.App, typedcoordinationv1.LeaseInterface) {
	t.Helper()
	env := tenantrytest.New(t, tenantrytest.Options{})
	opts := quietOptions(t, env)
	opts.LeaderElection, opts.LeaderElectionNamespace, opts.LeaderElectionID = true, "default", id
	app := fx.New(fx.Supply(opts), Module, fx.Invoke(func(manager.Manager) {}), fx.NopLogger)
	if err := app.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	leases := kubernetes.NewForConfigOrDie(env.Host.Config()).CoordinationV1().Leases("default")
	tenantrytest.Eventually(t, 30*time.Second, "the manager holds the Lease", func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return ptr.Deref(l.Spec.HolderIdentity, "") != "", nil
	})
	return app, leases
}

// quietOptions are Options for an app on env's host, with no listeners
// and no logs.
func quietOptions(t *testing.T, env *tenantrytest.Environment) Options {
	t.Helper()
	kubeconfig, err := env.Host.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "host.kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return Options{
		Kubeconfig: path, MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		Logger: LoggerOptions{Output: io.Discard},
	}
}
