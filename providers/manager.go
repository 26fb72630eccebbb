package providers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// errLeaderElectionLost is the error with which controller-runtime's
// manager stops when it loses its leader Lease.
const errLeaderElectionLost = "leader election lost"

// exitProcess ends the process; tests replace it.
var exitProcess = os.Exit

// readyzSyncTimeout bounds how long /readyz waits for the cache.
const readyzSyncTimeout = 2 * time.Second

type managerParams struct {
	fx.In

	Lifecycle  fx.Lifecycle
	Shutdowner fx.Shutdowner
	Config     *rest.Config
	Scheme     *runtime.Scheme
	Options    Options
	Logger     logr.Logger
}

// Secure metrics serving asks the host who a caller is and what it may do.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// newManager builds the management cluster's controller-runtime manager,
// with metrics, health probes and optional leader election, and runs it for
// the life of the app. If it stops on its own (a failed runnable), the app
// shuts down with exit code 1. If it loses the leader Lease, the process
// exits with code 1 at once, without stopping the tenants' apps: draining
// them would let their writes land while another replica already leads.
func newManager(p managerParams) (manager.Manager, error) {
	o := p.Options
	var lock resourcelock.Interface
	if o.LeaderElection {
		if err := o.validateLeaderElection(); err != nil {
			return nil, err
		}
		var err error
		if lock, err = newLeaderLock(p.Config, o); err != nil {
			return nil, err
		}
	}
	metrics := metricsserver.Options{BindAddress: o.MetricsBindAddress}
	if !o.InsecureMetrics {
		metrics.SecureServing, metrics.CertDir = true, o.MetricsCertDir
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	mgr, err := manager.New(p.Config, manager.Options{
		Scheme:                  p.Scheme,
		Logger:                  p.Logger,
		Metrics:                 metrics,
		HealthProbeBindAddress:  o.HealthProbeBindAddress,
		PprofBindAddress:        o.PprofBindAddress,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        o.LeaderElectionID,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		LeaseDuration:           ptr.To(o.LeaseDuration),
		RenewDeadline:           ptr.To(o.RenewDeadline),
		RetryPeriod:             ptr.To(o.RetryPeriod),
		// Given up by releaseLeaderLease on a clean shutdown only.
		LeaderElectionResourceLockInterface: lock,
		GracefulShutdownTimeout:             ptr.To(o.GracefulShutdownTimeout),
	})
	if err != nil {
		return nil, fmt.Errorf("building management manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding healthz check: %w", err)
	}
	if err := mgr.AddReadyzCheck("cache-synced", cacheSynced(mgr)); err != nil {
		return nil, fmt.Errorf("adding readyz check: %w", err)
	}

	var (
		cancel context.CancelFunc
		exited = make(chan struct{})
	)
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ctx, c := context.WithCancel(context.Background())
			cancel = c
			go func() {
				defer close(exited)
				if err := mgr.Start(ctx); err != nil {
					if strings.Contains(err.Error(), errLeaderElectionLost) {
						p.Logger.Error(err, "lost the leader Lease: exiting now, without draining the tenants, so that no write of theirs lands after another replica leads")
						exitProcess(1)
						return
					}
					p.Logger.Error(err, "management manager stopped")
					_ = p.Shutdowner.Shutdown(fx.ExitCode(1))
					return
				}
				if ctx.Err() == nil {
					p.Logger.Info("management manager stopped on its own")
					_ = p.Shutdowner.Shutdown(fx.ExitCode(1))
				}

			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			cancel()
			select {
			case <-exited:
			case <-ctx.Done():
				return fmt.Errorf("management manager did not stop in time: %w", ctx.Err())
			}
			if lock != nil {
				// The tenants' apps (stopped before, as they were started
				// after) and the manager's controllers have stopped: no
				// write of ours lands after another replica leads.
				if err := releaseLeaderLease(lock); err != nil {
					p.Logger.Error(err, "could not give the leader Lease up; another replica leads once it expires")
				}
			}
			return nil
		},
	})
	return mgr, nil
}

// cacheSynced is ready once the manager's informers have synced.
func cacheSynced(mgr manager.Manager) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), readyzSyncTimeout)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("informer caches have not synced")
		}
		return nil
	}
}

// newManageClient is the host cluster's cached client, tagged
// `name:"manage-client"`.
var newManageClient = fx.Annotate(
	func(mgr manager.Manager) client.Client { return mgr.GetClient() },
	fx.ResultTags(clusterregistry.ManageClientTag),
)
