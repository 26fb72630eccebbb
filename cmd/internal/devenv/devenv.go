// Package devenv is Tenantry's local development environment, which
// `tenantry-dev up` (and so `tenantry dev`), `tenantry-dev demo` and
// `tenantry-dev conformance` run: a host cluster whose nodes run Pods
// (real ones where this machine can, else kwok's), tenant clusters with
// their own kube-controller-manager, all started by pkg/testing, and
// Tenantry's controller-manager in this process with every built-in
// syncer and a VirtualCluster per tenant. Demo applies a sample workload
// in it and follows it until it converged.
//
// It is a development tool, not the library: bin/tenantry-dev links it,
// bin/tenantry and bin/manager do not.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/cmd/internal/managerapp"
	"github.com/tenantry/tenantry/controllers/controlplane"
	examplesconfig "github.com/tenantry/tenantry/examples/config"
	"github.com/tenantry/tenantry/examples/configmapcount"
	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/kubeletapi"
	"github.com/tenantry/tenantry/pkg/syncer/builtin"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
	"github.com/tenantry/tenantry/providers"
)

// fooGVK is the example custom resource the dev environment syncs.
var fooGVK = schema.GroupVersionKind{Group: "samples.tenantry.dev", Version: "v1alpha1", Kind: "Foo"}

// secretsNamespace holds the tenants' kubeconfig Secrets in the host.
const secretsNamespace = "tenantry-system"

// readyTimeout bounds the wait for every VirtualCluster to be Ready.
const readyTimeout = 2 * time.Minute

// HostName is the host's name among the clusters of a dev environment
// (the tenants are tenant-1, tenant-2, ...).
const HostName = "host"

// Options configure a dev environment.
type Options struct {
	Tenants int
	// Provisioned tenants have their control planes run by Tenantry, as
	// host Pods on the real nodes (spec.controlPlane), beside Tenants.
	Provisioned int
	Nodes       int // host nodes
	// SimulatedNodes keeps kwok's nodes where real ones could run.
	SimulatedNodes         bool
	Dir                    string // kubeconfigs and logs; "" for a new temporary one
	Assets                 string // the control-plane binaries; "" for DefaultAssets
	MetricsBindAddress     string
	HealthProbeBindAddress string
	Logger                 providers.LoggerOptions
	// ControlPlanesOnly starts the clusters alone: no CRDs, no manager,
	// no VirtualClusters (to run bin/manager by hand against them).
	ControlPlanesOnly bool
	// ExampleConfigMapCount also runs the multicluster-runtime example
	// controller examples/configmapcount in the manager, over every tenant.
	ExampleConfigMapCount bool
	// TenantPods, if set, is the pods part of each tenant VirtualCluster's
	// spec.hostPolicy: what the host grants its tenants here beyond the
	// default (TrustedPods, say).
	TenantPods *tenantryv1alpha1.PodPolicy
}

// TrustedPods is the Pod policy a host grants a tenant it trusts as
// itself: Pod Security privileged (the host's network, ports, processes)
// and hostPath volumes. Never the default.
func TrustedPods() *tenantryv1alpha1.PodPolicy {
	return &tenantryv1alpha1.PodPolicy{PodSecurityLevel: "privileged", AllowedVolumeTypes: []string{"hostPath"}}
}

// Env is a running dev environment: a host whose scheduler and
// controller-manager run Pods on its nodes (real ones, or kwok's), tenants that run
// their own controller-manager, Tenantry's controller-manager in this
// process with every built-in syncer and the Foo example type, and a
// VirtualCluster per tenant.
type Env struct {
	dir         string
	ownDir      bool
	env         *tenantrytest.Environment
	app         *fx.App
	scheme      *runtime.Scheme
	host        client.Client
	tenants     map[string]client.Client
	kubeconfigs map[string]string // cluster name -> file
	// realNodes says the host's nodes are real: Pods run containers.
	realNodes bool
	// provisioned are the tenants whose control planes Tenantry runs.
	provisioned []string
	logFile     *os.File
	log         logr.Logger // into logFile
}

// Kubeconfig is the kubeconfig file of the named cluster (HostName, or a
// tenant's name), and whether the environment has that cluster.
func (d *Env) Kubeconfig(cluster string) (string, bool) {
	path, ok := d.kubeconfigs[cluster]
	return path, ok
}

// start brings a dev environment up, or nothing at all.
func start(ctx context.Context, o Options, progress func(string)) (_ *Env, retErr error) {
	d := &Env{dir: o.Dir, tenants: map[string]client.Client{}, kubeconfigs: map[string]string{}}
	defer func() {
		if retErr != nil {
			retErr = d.finish(retErr)
		}
	}()
	if d.dir == "" {
		dir, err := os.MkdirTemp("", "tenantry-dev-")
		if err != nil {
			return nil, fmt.Errorf("creating a directory for kubeconfigs: %w", err)
		}
		d.dir, d.ownDir = dir, true
	} else if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", d.dir, err)
	}
	if o.Nodes < 1 {
		return nil, fmt.Errorf("--nodes must be at least 1, got %d: the host needs a node to run the tenants' Pods", o.Nodes)
	}
	var err error
	if d.scheme, err = providers.NewScheme(); err != nil {
		return nil, err
	}

	var crds []*apiextensionsv1.CustomResourceDefinition
	if !o.ControlPlanesOnly {
		if crds, err = examplesconfig.HostCRDs(); err != nil {
			return nil, err
		}
		// The manager's logger first: a bad --log-level fails before
		// anything starts.
		if d.logFile, err = os.Create(filepath.Join(d.dir, "manager.log")); err != nil {
			return nil, fmt.Errorf("creating the manager log: %w", err)
		}
		o.Logger.Output = d.logFile
		if d.log, err = providers.NewLogger(o.Logger); err != nil {
			return nil, err
		}
	}
	envOpts := tenantrytest.Options{
		Tenants:                 o.Tenants,
		TenantControllerManager: true,
		BinaryAssetsDirectory:   o.Assets,
		HostCRDs:                crds,
		LogDirectory:            d.dir,
	}
	switch why := tenantrytest.RealNodesSupported(o.Assets); {
	case o.SimulatedNodes:
		envOpts.HostNodes = o.Nodes
		progress(fmt.Sprintf("%d simulated nodes (kwok), as --simulated-nodes asks: Pods run, but nothing runs in them", o.Nodes))
	case why != nil:
		envOpts.HostNodes = o.Nodes
		progress(fmt.Sprintf("%d simulated nodes (kwok), since %v", o.Nodes, why))
	default:
		envOpts.HostKubelets = o.Nodes
		d.realNodes = true
		progress(fmt.Sprintf("%d real nodes (kubelet, containerd, runc, kube-proxy): Pods run containers (--simulated-nodes for kwok's)", o.Nodes))
	}
	progress(fmt.Sprintf("starting a host with %d nodes and %d tenants, each with its controller-manager (logs: %s)", o.Nodes, o.Tenants, d.dir))
	d.env, err = tenantrytest.Start(ctx, envOpts)
	if err != nil {
		return nil, err
	}
	for _, cp := range d.env.ControlPlanes() {
		path, err := cp.KubeconfigFile(d.dir)
		if err != nil {
			return nil, err
		}
		d.kubeconfigs[cp.Name()] = path
		c, err := client.New(cp.Config(), client.Options{Scheme: d.scheme})
		if err != nil {
			return nil, err
		}
		if cp == d.env.Host {
			d.host = c
		} else {
			d.tenants[cp.Name()] = c
		}
	}

	if o.ControlPlanesOnly {
		return d, nil
	}
	progress("starting Tenantry's controller-manager (log: " + filepath.Join(d.dir, "manager.log") + ")")
	// client-go and controller-runtime log through process-wide loggers:
	// into the manager's log too, not onto the terminal.
	providers.SetProcessLoggers(d.log)
	opts := managerapp.Options{
		Options: providers.Options{
			Kubeconfig:         d.kubeconfigs[HostName],
			MetricsBindAddress: o.MetricsBindAddress,
			// A development environment's metrics, on the address its
			// user gives (off by default), over plain HTTP.
			InsecureMetrics:        true,
			HealthProbeBindAddress: o.HealthProbeBindAddress,
			Logger:                 o.Logger,
		},
	}
	opts.ControlPlane = controlplane.DefaultOptions()
	// Control planes run on real nodes alone, which reach this process
	// on the kit network (below).
	opts.ControlPlane.ActivityBindAddress = "127.0.0.1:0"
	opts.Syncers.Resources = builtin.Names()
	opts.Syncers.CustomResources = []schema.GroupVersionKind{fooGVK}
	// kubectl logs, exec, attach and port-forward reach the virtual
	// nodes' kubelet API, served by this process. On simulated nodes
	// every tenant API server runs on this machine: loopback.
	opts.Syncers.Kubelet = kubeletapi.Options{BindAddress: "127.0.0.1:0", AdvertiseAddress: "127.0.0.1"}
	if d.realNodes {
		// On real nodes a tenant's API server may run in a host Pod (a
		// control plane Tenantry runs), where this machine's loopback is
		// the Pod's own: the kit network's address, which this
		// machine's tenant API servers reach too.
		kitIP := d.env.KitIP()
		opts.Syncers.Kubelet = kubeletapi.Options{BindAddress: net.JoinHostPort(kitIP, "0")}
		// Tenant Pods ask the tenant DNS on the kit network, where they
		// reach this process. It forwards other names to the host's
		// cluster DNS, as a manager run in a Pod of the host does: not to
		// this machine's resolvers, since nothing of the kit sends
		// elsewhere.
		opts.Syncers.DNS.BindAddress = net.JoinHostPort(kitIP, "53")
		opts.Syncers.DNSNameserver = kitIP
		opts.Syncers.DNS.Upstream = []string{net.JoinHostPort(d.env.ClusterDNSIP(), "53")}
		// This process reaches the control planes Tenantry runs from the
		// kit network, through a node's kube-proxy.
		opts.ControlPlane.ManagerCIDRs = []string{d.env.KitNetworkCIDR()}
		// And answers for sleeping control planes there, and takes the
		// reports of their API servers.
		opts.ControlPlane.WakeAddress = kitIP
		opts.ControlPlane.ActivityBindAddress = net.JoinHostPort(kitIP, "0")
	}
	if o.Provisioned > 0 && !d.realNodes {
		return nil, fmt.Errorf("--provisioned %d: control planes run as host Pods, which need real nodes", o.Provisioned)
	}
	var extra []fx.Option
	if o.ExampleConfigMapCount {
		extra = append(extra, configmapcount.Module)
	}
	d.app = managerapp.New(opts, extra...)
	if err := d.app.Err(); err != nil {
		return nil, err
	}
	if err := d.app.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting the controller-manager: %w", err)
	}

	progress("creating a VirtualCluster and its kubeconfig Secret per tenant")
	if o.Provisioned > 0 {
		progress(fmt.Sprintf("and %d VirtualClusters whose control planes Tenantry runs as host Pods", o.Provisioned))
	}
	if err := d.registerTenants(ctx, o); err != nil {
		return nil, err
	}
	return d, nil
}

// registerTenants creates a Secret and a VirtualCluster per tenant, each
// seeing every host node (nodeSync: All), and waits until all are Ready.
func (d *Env) registerTenants(ctx context.Context, o Options) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: secretsNamespace}}
	if err := d.host.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", secretsNamespace, err)
	}
	for _, cp := range d.env.Tenants {
		data, err := cp.Kubeconfig()
		if err != nil {
			return err
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: secretsNamespace, Name: cp.Name() + "-kubeconfig"},
			Data:       map[string][]byte{tenantryv1alpha1.DefaultKubeconfigKey: data},
		}
		vc := &tenantryv1alpha1.VirtualCluster{
			ObjectMeta: metav1.ObjectMeta{Name: cp.Name()},
			Spec: tenantryv1alpha1.VirtualClusterSpec{
				KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: secretsNamespace, Name: secret.Name},
				// The tenant API server's address, which its Pods reach
				// too (on the kit network where nodes are real).
				InClusterServer: "https://" + cp.Address(),
				// A tenant sees every node it may use, as on a cluster of
				// its own: DaemonSets run, and tools that wait for a
				// schedulable node find one.
				NodeSync: tenantryv1alpha1.NodeSyncAll,
				// The dev host is the tenants' own: NodePort and
				// LoadBalancer Services too, which a shared host allows
				// only by choice.
				HostPolicy: &tenantryv1alpha1.HostPolicy{Services: &tenantryv1alpha1.ServicePolicy{AllowedTypes: []corev1.ServiceType{
					corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer,
				}}},
			},
		}
		if o.TenantPods != nil {
			vc.Spec.HostPolicy.Pods = o.TenantPods.DeepCopy()
		}
		if cidrs := d.env.ControlPlaneCIDRs(); len(cidrs) > 0 {
			// The tenant API server calls its Pods (webhooks, aggregated
			// APIs, pods/proxy) from this machine's address. Every
			// tenant's does: on this dev machine one tenant's API server
			// reaches every tenant's Pods, as a shared host must not let
			// it (see docs/host-policy.md).
			vc.Spec.HostPolicy.Network = &tenantryv1alpha1.NetworkPolicy{ControlPlaneCIDRs: cidrs}
		}
		for _, o := range []client.Object{secret, vc} {
			if err := d.host.Create(ctx, o); err != nil {
				return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
			}
		}
	}
	deadline, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for _, cp := range d.env.Tenants {
		if err := d.waitReady(deadline, cp.Name()); err != nil {
			return err
		}
	}
	return d.provision(ctx, o.Provisioned)
}

// provisionedTimeout bounds the wait for the control planes Tenantry runs.
const provisionedTimeout = 5 * time.Minute

// provision creates n VirtualClusters whose control planes Tenantry runs
// (provisioned-1, ...), waits until they are Ready, and writes their
// kubeconfigs.
func (d *Env) provision(ctx context.Context, n int) error {
	var names []string
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("provisioned-%d", i)
		names = append(names, name)
		vc := &tenantryv1alpha1.VirtualCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: tenantryv1alpha1.VirtualClusterSpec{
				KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: secretsNamespace, Name: name + "-kubeconfig"},
				NodeSync:            tenantryv1alpha1.NodeSyncAll,
				ControlPlane:        &tenantryv1alpha1.ControlPlaneSpec{},
			},
		}
		if err := d.host.Create(ctx, vc); err != nil {
			return fmt.Errorf("creating VirtualCluster %s: %w", name, err)
		}
	}
	deadline, cancel := context.WithTimeout(ctx, provisionedTimeout)
	defer cancel()
	for _, name := range names {
		if err := d.waitReady(deadline, name); err != nil {
			return err
		}
		var secret corev1.Secret
		if err := d.host.Get(ctx, client.ObjectKey{Namespace: secretsNamespace, Name: name + "-kubeconfig"}, &secret); err != nil {
			return err
		}
		path := filepath.Join(d.dir, name+".kubeconfig")
		if err := os.WriteFile(path, secret.Data[tenantryv1alpha1.DefaultKubeconfigKey], 0o600); err != nil {
			return err
		}
		d.kubeconfigs[name] = path
		d.provisioned = append(d.provisioned, name)
	}
	return nil
}

func (d *Env) waitReady(ctx context.Context, name string) error {
	err := tenantrytest.Poll(ctx, 100*time.Millisecond, 0, func(ctx context.Context) (bool, error) {
		var vc tenantryv1alpha1.VirtualCluster
		if err := d.host.Get(ctx, client.ObjectKey{Name: name}, &vc); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady)
		if c == nil {
			return false, errors.New("no Ready condition yet")
		}
		return c.Status == metav1.ConditionTrue, errors.New(c.Reason + ": " + c.Message)
	})
	if err != nil {
		return fmt.Errorf("VirtualCluster %s did not become Ready: %w", name, err)
	}
	return nil
}

// finish stops d once its work returned err. After a failure, a temporary
// directory that holds logs is kept, and err says where.
func (d *Env) finish(err error) error {
	keep := err != nil && d.ownDir && hasLogs(d.dir)
	if serr := d.stop(keep); serr != nil {
		err = errors.Join(err, fmt.Errorf("stopping: %w", serr))
	}
	if keep {
		err = fmt.Errorf("%w\n(the logs of the manager and of every control-plane process are kept in %s)", err, d.dir)
	}
	return err
}

// hasLogs says whether dir holds a log with something in it.
func hasLogs(dir string) bool {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, l := range logs {
		if info, err := os.Stat(l); err == nil && info.Size() > 0 {
			return true
		}
	}
	return false
}

// stop stops the manager (every tenant's controllers first), then the
// control planes, and removes a temporary directory unless keepDir asks to
// keep its logs.
func (d *Env) stop(keepDir bool) error {
	var errs []error
	if d.app != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		errs = append(errs, d.app.Stop(ctx))
		cancel()
	}
	if d.env != nil {
		errs = append(errs, d.env.Stop())
	}
	if d.logFile != nil {
		errs = append(errs, d.logFile.Close())
	}
	if d.ownDir && !keepDir {
		errs = append(errs, os.RemoveAll(d.dir))
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
