package providers

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/sharding"
)

// Sharding shares the VirtualClusters among replicas (Options.ShardMode
// ShardModeLease). It provides the replica's *sharding.Coordinator, run by
// the management manager, whose ownership the VirtualCluster controller
// follows, and a clusterregistry.Fence on its Leases, which the registry
// and the syncers' Hub ask before every request they send for a tenant.
// Add it beside Module.
var Sharding = fx.Module("sharding", fx.Provide(newCoordinator, newShardFence))

type coordinatorParams struct {
	fx.In

	Config  *rest.Config
	Manager manager.Manager
	Options Options
	Logger  logr.Logger
}

// newCoordinator builds this replica's Coordinator and adds it to the
// management manager, which runs it. If the replica cannot renew its Lease
// for the renew deadline, the process exits with code 1 at once: its
// tenants' requests are fenced from then on, and other replicas take them
// once the Lease has run out.
func newCoordinator(p coordinatorParams) (*sharding.Coordinator, error) {
	o := p.Options
	if err := o.Validate(); err != nil {
		return nil, err
	}
	namespace, err := namespaceOr(o.ShardNamespace, "shard-namespace")
	if err != nil {
		return nil, fmt.Errorf("the shard namespace: %w", err)
	}
	// Uncached: a stale read could take a Lease that a peer holds.
	c, err := client.New(rest.AddUserAgent(rest.CopyConfig(p.Config), "sharding"), client.Options{Scheme: p.Manager.GetScheme()})
	if err != nil {
		return nil, fmt.Errorf("the sharding client: %w", err)
	}
	log := p.Logger.WithName("sharding")
	co, err := sharding.New(c, sharding.Options{
		Namespace:     namespace,
		Group:         o.ShardGroup,
		LeaseDuration: o.ShardLeaseDuration,
		RenewDeadline: o.ShardRenewDeadline,
		RenewPeriod:   o.ShardRenewPeriod,
		Logger:        log,
	})
	if err != nil {
		return nil, err
	}
	log.Info("sharding VirtualClusters over the live replicas", "replica", co.Identity(), "namespace", namespace, "group", o.ShardGroup)
	if err := p.Manager.Add(coordinatorRunnable{co: co, log: log}); err != nil {
		return nil, fmt.Errorf("adding the sharding coordinator: %w", err)
	}
	// Ready once the replica has read its peers, and no more once lost.
	if err := p.Manager.AddReadyzCheck("sharding", func(*http.Request) error {
		if len(co.Live()) == 0 {
			return errors.New("the live replicas are not known: not read yet, or this replica lost its Lease")
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("adding the sharding readyz check: %w", err)
	}
	return co, nil
}

// coordinatorRunnable runs a Coordinator in the management manager, on
// every replica.
type coordinatorRunnable struct {
	co  *sharding.Coordinator
	log logr.Logger
}

func (r coordinatorRunnable) Start(ctx context.Context) error {
	err := r.co.Run(ctx)
	if ctx.Err() != nil {
		return nil // a clean stop: the tenants have stopped, the peer Lease is gone
	}
	r.log.Error(err, "this replica lost its Lease: exiting now, without draining its tenants, whose requests are fenced; the other replicas take them over")
	exitProcess(1)
	return err
}

func (coordinatorRunnable) NeedLeaderElection() bool { return false }

// newShardFence fences each tenant on its VirtualCluster's Lease: requests
// for it are sent only while this replica holds that Lease and has renewed
// its own within the renew deadline.
func newShardFence(co *sharding.Coordinator) clusterregistry.Fence {
	return func(cluster string) error {
		if co.Holds(cluster) {
			return nil
		}
		return fmt.Errorf("%w: replica %s does not hold VirtualCluster %s's Lease", clusterregistry.ErrFenced, co.Identity(), cluster)
	}
}
