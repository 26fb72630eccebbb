package testing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// ErrStopped is returned by a ControlPlane whose Environment was stopped.
var ErrStopped = errors.New("control plane has been stopped")

// AssetsEnv is the environment variable naming the directory that holds the
// control-plane binaries (envtest's convention). `make envtest` builds them
// into bin/, and the Makefile exports this variable for tests.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// attachEnv, set to "true", attaches the control planes' output as
// Options.AttachControlPlaneOutput does (envtest's convention).
const attachEnv = "KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT"

// Options configure an Environment. The zero value starts a host and no
// tenants, with the binaries from $KUBEBUILDER_ASSETS.
type Options struct {
	// Tenants is how many tenant control planes to start besides the host.
	Tenants int

	// HostNodes, when greater than zero, makes the host a cluster that runs
	// Pods: it also runs kube-scheduler, kube-controller-manager and kwok,
	// and has that many Ready simulated nodes, named kwok-node-1, ... (see
	// NodeNamePrefix). A Pod created in the host is scheduled, runs (Running
	// and Ready, with an IP from its node's pod CIDR), and a Pod of a Job
	// succeeds a second later; a deleted Pod is removed at once. kwok also
	// answers for the nodes' kubelets, on a loopback port, with TLS: the
	// logs of every container are KwokLogLines, exec runs the command on
	// this machine (in a scratch directory), attach streams the logs, and
	// a port-forward to any port echoes what it receives.
	HostNodes int

	// HostKubelets, when greater than zero, gives the host that many real
	// nodes, named kit-node-1, ... (KubeletNamePrefix), beside any of
	// HostNodes: each a kubelet with its own containerd and runc, a
	// kube-proxy and CNI networking (a bridge and pod CIDR per node), in a
	// network namespace of its own on a network of the kit's (see
	// kitnet.go), with the host's kube-scheduler and
	// kube-controller-manager. Pods on them run real containers, from the
	// images of the kit's own registry (registry.k8s.io and docker.io
	// names; nothing is pulled from the internet). The API servers then
	// listen on the kit network's address, so that Pods reach them, and
	// Address names it. It needs root and the programs of `make node`:
	// RealNodesSupported says what is missing, RequireRealNodes skips a
	// test without them.
	HostKubelets int

	// KwokConfig are more kwok configuration documents (YAML), given to
	// kwok with the kit's own: Logs, Exec, Attach or PortForward objects
	// for particular host Pods, for example, which take precedence over
	// the kit's cluster-wide ones.
	KwokConfig []string

	// TenantControllerManager runs a kube-controller-manager in every
	// tenant, as a real virtual cluster does: Deployments, ReplicaSets,
	// Jobs, StatefulSets, garbage collection, namespace deletion, PodGC and
	// the rest, but not the storage controllers (the host binds volumes).
	// Tenants have no scheduler and no nodes: their Pods run in the host.
	TenantControllerManager bool

	// HostCRDDirectoryPaths are files or directories of CustomResourceDefinition
	// manifests installed into the host before Start returns. A missing path
	// is an error.
	HostCRDDirectoryPaths []string

	// TenantCRDDirectoryPaths are installed into every tenant likewise.
	TenantCRDDirectoryPaths []string

	// HostCRDs are installed into the host too, from objects rather than
	// files (for example, CRDs a binary embeds).
	HostCRDs []*apiextensionsv1.CustomResourceDefinition

	// HostAuditLog makes the host API server keep an audit log of every
	// request (who, verb, resource, response code; no bodies), read with
	// Host.AuditEvents: what a component really asked of the host, for
	// example to hold its RBAC role to the rights it uses.
	HostAuditLog bool

	// BinaryAssetsDirectory holds kube-apiserver and etcd, and
	// kube-controller-manager, kube-scheduler and kwok when the options
	// above ask for them. Defaults to $KUBEBUILDER_ASSETS.
	BinaryAssetsDirectory string

	// StartTimeout bounds the start of each process until it is ready (for
	// kwok, until every node is Ready), and StopTimeout the stop of etcd and
	// kube-apiserver. Default to envtest's 60s each.
	StartTimeout time.Duration
	StopTimeout  time.Duration

	// AttachControlPlaneOutput copies the processes' output to this
	// process's stderr, to debug a control plane that does not start; so
	// does $KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT=true.
	AttachControlPlaneOutput bool

	// LogDirectory, if set, receives the output of every process as
	// <cluster>-<process>.log (host-kube-scheduler.log, tenant-1-etcd.log,
	// ...), appended across API server restarts; it is created if missing
	// and kept after Stop. Whatever the options, a process that fails to
	// start is reported with its last lines of output.
	LogDirectory string
}

// startTimeout is StartTimeout or its default.
func (o *Options) startTimeout() time.Duration {
	if o.StartTimeout > 0 {
		return o.StartTimeout
	}
	return 60 * time.Second
}

// attachOutput says whether the processes' output goes to this process's.
func (o *Options) attachOutput() bool {
	return o.AttachControlPlaneOutput || os.Getenv(attachEnv) == "true"
}

// binaries are the programs that opts need.
func (o *Options) binaries() []string {
	bins := []string{"kube-apiserver", "etcd"}
	if o.hostRunsPods() || o.TenantControllerManager {
		bins = append(bins, binaryControllerManager)
	}
	if o.hostRunsPods() {
		bins = append(bins, binaryScheduler)
	}
	if o.HostNodes > 0 {
		bins = append(bins, binaryKwok)
	}
	return bins
}

// hostRunsPods says whether the host has nodes, simulated or real.
func (o *Options) hostRunsPods() bool { return o.HostNodes > 0 || o.HostKubelets > 0 }

// Environment is a host control plane and any number of tenant control
// planes, each a real etcd and kube-apiserver on loopback, all run by one
// process. Start one with Start, or with New inside a test.
type Environment struct {
	// Host is the management cluster.
	Host *ControlPlane
	// Tenants are the tenant clusters, named tenant-1, tenant-2, ...
	Tenants []*ControlPlane

	// kit is the network of the real nodes, or nil.
	kit *kitNetwork
}

// Start starts the host and opts.Tenants tenant control planes in parallel,
// each with the components opts ask for, and returns once all of them serve
// and every component is ready. If any fails to start, the ones that did are
// stopped again and the error names the cluster and the process that
// failed, with its last lines of output. Starting etcd or kube-apiserver
// cannot be interrupted (StartTimeout bounds it); if ctx ends meanwhile,
// Start stops what it started and returns ctx's error.
func Start(ctx context.Context, opts Options) (*Environment, error) {
	if opts.Tenants < 0 {
		return nil, fmt.Errorf("tenant count must not be negative, got %d", opts.Tenants)
	}
	if opts.HostNodes < 0 {
		return nil, fmt.Errorf("host node count must not be negative, got %d", opts.HostNodes)
	}
	if opts.HostKubelets < 0 {
		return nil, fmt.Errorf("host kubelet count must not be negative, got %d", opts.HostKubelets)
	}
	if opts.BinaryAssetsDirectory == "" {
		opts.BinaryAssetsDirectory = os.Getenv(AssetsEnv)
	}
	if err := checkAssets(opts.BinaryAssetsDirectory, opts.binaries()); err != nil {
		return nil, err
	}
	if opts.LogDirectory != "" {
		if err := os.MkdirAll(opts.LogDirectory, 0o755); err != nil {
			return nil, fmt.Errorf("creating the log directory: %w", err)
		}
	}
	var kit *kitNetwork
	if opts.HostKubelets > 0 {
		if err := RealNodesSupported(opts.BinaryAssetsDirectory); err != nil {
			return nil, err
		}
		var err error
		if kit, err = newKitNetwork(opts.HostKubelets, opts.Tenants); err != nil {
			return nil, err
		}
	}

	names := []string{hostName}
	for i := 1; i <= opts.Tenants; i++ {
		names = append(names, fmt.Sprintf("tenant-%d", i))
	}
	ip := func(i int) net.IP {
		if kit == nil {
			return net.IPv4(127, 0, 0, 1)
		}
		return net.ParseIP(kit.apiServerIP(i)).To4()
	}

	planes := make([]*ControlPlane, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		crdPaths, crds := opts.TenantCRDDirectoryPaths, []*apiextensionsv1.CustomResourceDefinition(nil)
		if i == 0 {
			crdPaths, crds = opts.HostCRDDirectoryPaths, opts.HostCRDs
		}
		wg.Go(func() {
			planes[i], errs[i] = startControlPlane(ctx, name, ip(i), &opts, kit, crdPaths, crds)
		})
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("starting control planes: %w", context.Cause(ctx))
	}

	env := &Environment{Host: planes[0], Tenants: planes[1:], kit: kit}
	if err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	return env, nil
}

// New starts an Environment for a test and stops it when the test and its
// subtests end. It fails the test at once if the control planes cannot start,
// saying how to get the binaries when they are missing.
func New(t testing.TB, opts Options) *Environment {
	t.Helper()
	env, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("starting test control planes: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping test control planes: %v", err)
		}
	})
	return env
}

// KitIP is this machine's address on the real nodes' network
// (Options.HostKubelets), where the kit's registry listens, and where any
// server of the test's own that Pods reach should (a DNS server, for
// example). The API servers listen on addresses of their own there
// (ControlPlane.Address), but connect to Pods from this one, like every
// process of this machine (see ControlPlaneCIDRs). Empty without real
// nodes.
func (e *Environment) KitIP() string {
	if e.kit == nil {
		return ""
	}
	return e.kit.gatewayIP()
}

// ExtraIP is a second address of this machine on the real nodes'
// network, apart from KitIP: for a server of the test's that stands
// outside the host's Pod network as a shared datastore or a database
// would, which a NetworkPolicy may deny Pods (an ipBlock except) without
// denying them the kit's registry and DNS at KitIP. Empty without real
// nodes.
func (e *Environment) ExtraIP() string {
	if e.kit == nil {
		return ""
	}
	return e.kit.extraIP()
}

// ControlPlaneCIDRs are where the kit's API servers connect to Pods from
// (KitIP, as a CIDR of one address), for a VirtualCluster's
// hostPolicy.network.controlPlaneCIDRs. Every API server of the kit shares
// it: a tenant's reaches every tenant's Pods that let it in. Empty without
// real nodes.
func (e *Environment) ControlPlaneCIDRs() []string {
	if e.kit == nil {
		return nil
	}
	return []string{netip.PrefixFrom(netip.MustParseAddr(e.kit.gatewayIP()), 32).String()}
}

// KitNetworkCIDR is the real nodes' network (Options.HostKubelets): the
// nodes' addresses, this machine's (KitIP) and the kit's API servers'. A
// process of this machine that reaches a Pod through a cluster IP comes
// from a node's address there, once kube-proxy has masqueraded it. Empty
// without real nodes.
func (e *Environment) KitNetworkCIDR() string {
	if e.kit == nil {
		return ""
	}
	return netip.PrefixFrom(netip.MustParseAddr(e.kit.gatewayIP()), 24).Masked().String()
}

// CloudMetadataIP stands for where clouds serve instance metadata: an
// address of the link-local range (169.254.0.0/16) on this machine's side
// of the real nodes' network, where a server of the test's that listens
// is reached by Pods unless a policy stops them, as a cloud's would be.
// It is not 169.254.169.254 itself, which this machine's own cloud may
// serve while a kit runs. Empty without real nodes.
func (e *Environment) CloudMetadataIP() string {
	if e.kit == nil {
		return ""
	}
	return cloudMetadataIP
}

// ControlPlanes returns the host followed by the tenants.
func (e *Environment) ControlPlanes() []*ControlPlane {
	return append([]*ControlPlane{e.Host}, e.Tenants...)
}

// Stop stops every control plane and removes its data. It is safe to call
// more than once; later calls do nothing.
func (e *Environment) Stop() error {
	var wg sync.WaitGroup
	planes := e.ControlPlanes()
	errs := make([]error, len(planes))
	for i, cp := range planes {
		if cp == nil {
			continue
		}
		wg.Go(func() { errs[i] = cp.stop() })
	}
	wg.Wait()
	// The nodes' processes have ended: their network can go.
	errs = append(errs, e.kit.teardown())
	return errors.Join(errs...)
}

// checkAssets fails early, and says what to do, when binaries are missing.
func checkAssets(dir string, binaries []string) error {
	if dir == "" {
		return fmt.Errorf("no control plane binaries: set %s to a directory holding %s (run `make envtest`, which builds them into bin/)", AssetsEnv, strings.Join(binaries, ", "))
	}
	for _, bin := range binaries {
		path := filepath.Join(dir, bin)
		info, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("control plane binary %s: %w (run `make envtest`, or point %s at a directory holding it)", path, err, AssetsEnv)
		}
		if info.IsDir() || info.Mode()&0o111 == 0 {
			return fmt.Errorf("control plane binary %s is not an executable file", path)
		}
	}
	return nil
}
