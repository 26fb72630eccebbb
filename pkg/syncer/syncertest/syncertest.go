// Package syncertest tests syncers, two ways:
//
//   - without API servers: Up shows what a syncer writes back to a tenant
//     object, on a fake tenant client (Syncer.HostCopy shows the host copy
//     it makes);
//   - against real ones: NewWorld starts a host and tenant control planes
//     (package testing), a Hub, and a registry that runs the syncers in
//     every tenant, as the controller-manager does; Share starts one that
//     a package's tests share. World.ExpectHostCopy, ExpectHostRejected
//     and the other Expect helpers wait for what syncing makes.
package syncertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/kubeletapi"
	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
	"github.com/tenantry/tenantry/pkg/tenantdns"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// Up runs s's Up for host and tenant on a fake tenant client that holds
// tenant, and returns the tenant object as the client then has it, and
// whether Up changed it. scheme must know the type (nil: client-go's).
func Up(ctx context.Context, s syncer.Syncer, scheme *runtime.Scheme, host, tenant client.Object) (client.Object, bool, error) {
	if s.Up == nil {
		return tenant, false, nil
	}
	if scheme == nil {
		scheme = clientgoscheme.Scheme
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tenant).WithStatusSubresource(tenant).Build()
	stored := tenant.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(tenant), stored); err != nil {
		return nil, false, err
	}
	changed, err := s.Up(ctx, c, host, stored)
	if err != nil {
		return nil, changed, err
	}
	after := tenant.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(tenant), after); err != nil {
		return nil, changed, err
	}
	return after, changed, nil
}

// WorldOptions configure NewWorld.
type WorldOptions struct {
	// Tenants is how many tenant control planes to start. Defaults to 1.
	Tenants int
	// HostNodes and TenantControllerManager make the clusters run
	// workloads, as the same options of package testing do: a host that
	// schedules and runs Pods on that many simulated nodes, and tenants that
	// run their own kube-controller-manager.
	HostNodes               int
	TenantControllerManager bool
	// Scheme knows every synced type; defaults to client-go's types plus
	// CustomResourceDefinitions.
	Scheme *runtime.Scheme
	// Syncers run in every tenant.
	Syncers []syncer.Syncer
	// Syncer tunes them; a short patrol period by default.
	Syncer syncer.Options
	// Pods, if set, is how every tenant syncs Pods: pods.Syncer(*Pods),
	// with the World's KubeletAPI and DNS, in place of the syncer named
	// "pods" among Syncers (such as builtin.All's), or after them.
	Pods *pods.Options
	// HostCRDDirectoryPaths are installed into the host before the tenants
	// spawn.
	HostCRDDirectoryPaths []string
	// Logger receives the registry's and tenants' logs. Default: none, or,
	// when the environment sets TENANTRY_TEST_LOG, standard error at
	// verbosity 1.
	Logger logr.Logger
	// KubeletAPI serves the kubelet API of the tenants' virtual nodes on a
	// loopback port (World.KubeletAPI), as the controller-manager does.
	// It needs Pods.
	KubeletAPI bool
	// KwokConfig are more kwok configuration documents for the host's
	// simulated nodes (see package testing's Options.KwokConfig).
	KwokConfig []string
	// DNS serves the tenants' DNS on a loopback port (World.DNS), asking
	// DNSUpstream for other names, as the controller-manager does. It
	// needs Pods, whose DNSConfig points host Pods at it.
	DNS         bool
	DNSUpstream []string
}

// World is a host and tenants, synced.
type World struct {
	Env      *tenantrytest.Environment
	Host     client.Client
	Tenants  map[string]client.Client // by name: tenant-1, tenant-2, ...
	Hub      *syncer.Hub
	Registry *clusterregistry.RemoteClusterRegistry
	// KubeletAPI is set with WorldOptions.KubeletAPI, DNS with
	// WorldOptions.DNS.
	KubeletAPI *kubeletapi.Server
	DNS        *tenantdns.Server
}

// NewWorld starts a World for a test and stops it when the test ends.
func NewWorld(t testing.TB, opts WorldOptions) *World {
	t.Helper()
	w, stop, err := StartWorld(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting a synced world: %v", err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stopping the synced world: %v", err)
		}
	})
	return w
}

// StartWorld starts a World; stop tears it down. For TestMain and other
// places with no testing.TB.
func StartWorld(ctx context.Context, opts WorldOptions) (_ *World, stop func() error, err error) {
	if opts.Tenants <= 0 {
		opts.Tenants = 1
	}
	if opts.Scheme == nil {
		opts.Scheme = runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(opts.Scheme); err != nil {
			return nil, nil, err
		}
		if err := apiextensionsv1.AddToScheme(opts.Scheme); err != nil {
			return nil, nil, err
		}
	}
	if opts.Syncer.PatrolPeriod == 0 {
		opts.Syncer.PatrolPeriod = 300 * time.Millisecond
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
		if os.Getenv("TENANTRY_TEST_LOG") != "" {
			opts.Logger = funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: 1})
		}
	}
	if (opts.KubeletAPI || opts.DNS) && opts.Pods == nil {
		return nil, nil, errors.New("the kubelet API and DNS serve the tenants' Pods: set WorldOptions.Pods")
	}
	env, err := tenantrytest.Start(ctx, tenantrytest.Options{
		Tenants:                 opts.Tenants,
		HostNodes:               opts.HostNodes,
		TenantControllerManager: opts.TenantControllerManager,
		HostCRDDirectoryPaths:   opts.HostCRDDirectoryPaths,
		KwokConfig:              opts.KwokConfig,
	})
	if err != nil {
		return nil, nil, err
	}
	hubCtx, cancelHub := context.WithCancel(context.Background())
	hubDone, kubeletDone, dnsDone := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	w := &World{Env: env, Tenants: map[string]client.Client{}}
	stop = func() error {
		var errs []error
		if w.Registry != nil {
			errs = append(errs, w.Registry.Close(context.Background()))
		}
		cancelHub()
		if w.Hub != nil {
			errs = append(errs, <-hubDone)
		}
		if w.KubeletAPI != nil {
			errs = append(errs, <-kubeletDone)
		}
		if w.DNS != nil {
			errs = append(errs, <-dnsDone)
		}
		errs = append(errs, env.Stop())
		return errors.Join(errs...)
	}
	fail := func(err error) (*World, func() error, error) {
		_ = stop()
		return nil, nil, err
	}

	if w.Host, err = client.New(env.Host.Config(), client.Options{Scheme: opts.Scheme}); err != nil {
		return fail(err)
	}
	if w.Hub, err = syncer.NewHub(env.Host.Config(), syncer.HubOptions{Scheme: opts.Scheme, Indexes: []syncer.HubIndex{pods.IPIndex}}); err != nil {
		return fail(err)
	}
	go func() { hubDone <- w.Hub.Start(hubCtx) }()
	if opts.KubeletAPI {
		if w.KubeletAPI, err = kubeletapi.New(kubeletapi.Options{
			BindAddress: "127.0.0.1:0", Host: env.Host.Config(), Logger: opts.Logger.WithName("kubelet-api"),
		}); err != nil {
			return fail(err)
		}
		go func() { kubeletDone <- w.KubeletAPI.Start(hubCtx) }()
	}
	if opts.DNS {
		if w.DNS, err = tenantdns.New(tenantdns.Options{
			BindAddress: "127.0.0.1:0", ClusterOf: pods.Addresses{Hub: w.Hub}.PodCluster, PodOf: pods.Addresses{Hub: w.Hub}.PodAt,
			Upstream: opts.DNSUpstream,
			Logger:   opts.Logger.WithName("dns"),
		}); err != nil {
			return fail(err)
		}
		go func() { dnsDone <- w.DNS.Start(hubCtx) }()
	}
	syncers := opts.Syncers
	if opts.Pods != nil {
		podOpts := *opts.Pods
		podOpts.KubeletAPI, podOpts.DNS = w.KubeletAPI, w.DNS
		syncers = withPods(syncers, pods.Syncer(podOpts))
	}
	w.Registry = clusterregistry.NewWithOptions(clusterregistry.Options{
		Logger: opts.Logger, ManageClient: w.Host, Scheme: opts.Scheme,
	}, syncer.TenantModule(w.Hub, opts.Syncer, syncers...))
	for _, cp := range env.Tenants {
		if w.Tenants[cp.Name()], err = client.New(cp.Config(), client.Options{Scheme: opts.Scheme}); err != nil {
			return fail(err)
		}
		if err := w.Registry.Spawn(cp.Name(), cp.Config()); err != nil {
			return fail(fmt.Errorf("spawning %s: %w", cp.Name(), err))
		}
	}
	return w, stop, nil
}

// withPods is syncers with podSyncer in place of the one of its name, or
// after them.
func withPods(syncers []syncer.Syncer, podSyncer syncer.Syncer) []syncer.Syncer {
	out := slices.Clone(syncers)
	if i := slices.IndexFunc(out, func(s syncer.Syncer) bool { return s.Name == podSyncer.Name }); i >= 0 {
		out[i] = podSyncer
		return out
	}
	return append(out, podSyncer)
}

// HostKey is where the host copy of tenant object namespace/name of
// cluster lives.
func (w *World) HostKey(cluster, namespace, name string) client.ObjectKey {
	return client.ObjectKey{Namespace: syncer.HostNamespace(cluster, namespace), Name: name}
}
