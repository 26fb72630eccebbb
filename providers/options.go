package providers

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/sharding"
)

// Options configure the management app. Bind them to flags with BindFlags;
// the zero value, after Default, is a manager that reads the usual
// kubeconfig, serves metrics on :8080 and probes on :8081, and elects no
// leader.
type Options struct {
	// Kubeconfig is the host cluster's kubeconfig file. Empty follows
	// client-go's rules: $KUBECONFIG, the in-cluster service account when
	// $KUBECONFIG is unset, then ~/.kube/config.
	Kubeconfig string
	// KubeContext picks a context of the kubeconfig; empty uses its current
	// context.
	KubeContext string

	// MetricsBindAddress serves Prometheus metrics; "0" turns them off.
	MetricsBindAddress string
	// InsecureMetrics serves them over plain HTTP to anyone who reaches
	// the address. Off by default: they are served over HTTPS, to callers
	// the host authenticates (a bearer token, by TokenReview) and allows
	// get on the non-resource URL /metrics (SubjectAccessReview), as
	// controller-runtime's secure serving does: the metrics name every
	// tenant and its activity, and tenant Pods reach the manager's Pod.
	InsecureMetrics bool
	// MetricsCertDir holds the metrics server's tls.crt and tls.key;
	// empty: a self-signed certificate made at start.
	MetricsCertDir string
	// HealthProbeBindAddress serves /healthz and /readyz; "0" turns them off.
	HealthProbeBindAddress string
	// PprofBindAddress serves Go's profiles (net/http/pprof) under
	// /debug/pprof/; empty or "0", the default, serves none.
	PprofBindAddress string

	// HostAPIQPS and HostAPIBurst limit the management manager's own
	// requests to the host: VirtualClusters, their status and kubeconfig
	// Secrets, events, leader election. The syncers' requests have a
	// budget of their own (the syncers' --host-qps). Default:
	// DefaultHostAPIQPS and DefaultHostAPIBurst.
	HostAPIQPS   float64
	HostAPIBurst int

	// LeaderElection makes replicas elect one leader that reconciles; the
	// others wait. LeaderElectionNamespace holds the Lease (defaults to the
	// pod's namespace in-cluster), LeaderElectionID names it.
	LeaderElection          bool
	LeaderElectionNamespace string
	LeaderElectionID        string
	// LeaseDuration is how long replicas that do not lead wait, from when
	// they last saw the Lease renewed, before they take it: the longest a
	// dead leader's tenants go unserved. RenewDeadline is how long the
	// leader keeps trying to renew before it gives up and exits;
	// RetryPeriod how often every replica tries to acquire or renew.
	// Default: DefaultLeaseDuration, DefaultRenewDeadline,
	// DefaultRetryPeriod (controller-runtime's and Kubernetes' own).
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration

	// ShardMode says how replicas share the VirtualClusters: ShardModeNone
	// (the default: this replica runs them all, or, with LeaderElection,
	// the leader does) or ShardModeLease (every replica runs; each
	// VirtualCluster runs on one live replica, fenced by a Lease of its
	// own; see pkg/sharding). ShardNamespace holds the Leases (defaults to
	// the pod's namespace in-cluster), ShardGroup names the replicas that
	// share VirtualClusters and prefixes their Leases.
	ShardMode      string
	ShardNamespace string
	ShardGroup     string
	// ShardLeaseDuration is how long a replica that stopped renewing its
	// Lease still counts live: the longest its VirtualClusters go unserved
	// when it dies. ShardRenewDeadline is how long a replica tries to renew
	// before it stops writing and exits; ShardRenewPeriod how often it
	// renews and reads its peers. Default: sharding.DefaultLeaseDuration,
	// DefaultRenewDeadline, DefaultRenewPeriod.
	ShardLeaseDuration time.Duration
	ShardRenewDeadline time.Duration
	ShardRenewPeriod   time.Duration

	// GracefulShutdownTimeout bounds how long the management manager, and
	// each tenant manager, waits for its controllers to drain.
	GracefulShutdownTimeout time.Duration

	// SpawnTimeout, ClusterHealthInterval and ClusterUnhealthyTimeout
	// configure the cluster registry (see clusterregistry.Options).
	SpawnTimeout            time.Duration
	ClusterHealthInterval   time.Duration
	ClusterUnhealthyTimeout time.Duration

	// CacheBudget bounds the bytes every tenant's cache holds together
	// (clusterregistry.Options.CacheBudget). 0 takes DefaultCacheBudget
	// of the container's memory limit (none without one); negative: none.
	CacheBudget int64

	// Logger configures the process logger.
	Logger LoggerOptions
}

// The management manager's default limits on its requests to the host:
// enough to make 1,000 VirtualClusters Ready (a kubeconfig read, a
// finalizer and a status write each) in seconds, where client-go's default
// of 5 per second would take ten minutes.
const (
	DefaultHostAPIQPS   = 100
	DefaultHostAPIBurst = 200
)

// Leader election's default timing, as Kubernetes' own controllers have it.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// The values of Options.ShardMode.
const (
	ShardModeNone  = "none"
	ShardModeLease = "lease"
)

// Default fills in unset fields.
func (o *Options) Default() {
	if o.MetricsBindAddress == "" {
		o.MetricsBindAddress = ":8443"
	}
	if o.HealthProbeBindAddress == "" {
		o.HealthProbeBindAddress = ":8081"
	}
	if o.HostAPIQPS <= 0 {
		o.HostAPIQPS = DefaultHostAPIQPS
	}
	if o.HostAPIBurst <= 0 {
		o.HostAPIBurst = DefaultHostAPIBurst
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewDeadline <= 0 {
		o.RenewDeadline = DefaultRenewDeadline
	}
	if o.RetryPeriod <= 0 {
		o.RetryPeriod = DefaultRetryPeriod
	}
	if o.LeaderElectionID == "" {
		o.LeaderElectionID = "tenantry-manager.tenantry.dev"
	}
	if o.ShardMode == "" {
		o.ShardMode = ShardModeNone
	}
	if o.ShardGroup == "" {
		o.ShardGroup = "tenantry"
	}
	if o.ShardLeaseDuration <= 0 {
		o.ShardLeaseDuration = sharding.DefaultLeaseDuration
	}
	if o.ShardRenewDeadline <= 0 {
		o.ShardRenewDeadline = sharding.DefaultRenewDeadline
	}
	if o.ShardRenewPeriod <= 0 {
		o.ShardRenewPeriod = sharding.DefaultRenewPeriod
	}
	if o.GracefulShutdownTimeout <= 0 {
		o.GracefulShutdownTimeout = clusterregistry.DefaultGracefulShutdownTimeout
	}
	if o.SpawnTimeout <= 0 {
		o.SpawnTimeout = clusterregistry.DefaultSpawnTimeout
	}
	if o.ClusterHealthInterval == 0 {
		o.ClusterHealthInterval = clusterregistry.DefaultHealthCheckInterval
	}
	if o.ClusterUnhealthyTimeout <= 0 {
		o.ClusterUnhealthyTimeout = clusterregistry.DefaultUnhealthyTimeout
	}
	if o.CacheBudget == 0 {
		o.CacheBudget = -1
		if limit, ok := ContainerMemoryLimit(); ok {
			o.CacheBudget = DefaultCacheBudget(limit)
		}
	}
}

// BindFlags registers the options' flags on fs, with their defaults.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	o.Default()
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig,
		"Host cluster kubeconfig. Default: $KUBECONFIG, else in-cluster, else ~/.kube/config.")
	fs.StringVar(&o.KubeContext, "context", o.KubeContext, "Kubeconfig context to use (default: its current context).")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, `Address of the Prometheus metrics endpoint; "0" turns it off.`)
	fs.BoolFunc("metrics-secure", "Serve metrics over HTTPS to callers the host authenticates and allows get on /metrics (default true); false serves plain HTTP to anyone who reaches the address.", func(v string) error {
		secure, err := strconv.ParseBool(v)
		o.InsecureMetrics = !secure
		return err
	})
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", o.MetricsCertDir, "Directory holding the metrics server's tls.crt and tls.key (default: a self-signed certificate).")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, `Address of /healthz and /readyz; "0" turns them off.`)
	fs.StringVar(&o.PprofBindAddress, "pprof-bind-address", o.PprofBindAddress,
		`Address of Go's profiles (/debug/pprof/); empty or "0", the default, serves none. They show the process's memory and code: keep it local.`)
	fs.Func("cache-budget", fmt.Sprintf("The most bytes every tenant's cache may hold together, as encoded (such as 256Mi): past it, the tenant that holds the most is stopped with CacheLimitExceeded. Default: %d%% of the container's memory limit (here %s); 0: none.",
		int(cacheBudgetShare*100), budgetText(o.CacheBudget)), func(v string) error {
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() < 0 {
			return fmt.Errorf("%q is not a size in bytes, such as 256Mi", v)
		}
		o.CacheBudget = q.Value()
		if o.CacheBudget == 0 {
			o.CacheBudget = -1
		}
		return nil
	})
	fs.Float64Var(&o.HostAPIQPS, "kube-api-qps", o.HostAPIQPS,
		"Requests per second of the management manager's own host client (VirtualClusters, their Secrets and status, events); the syncers' have --host-qps.")
	fs.IntVar(&o.HostAPIBurst, "kube-api-burst", o.HostAPIBurst, "Burst of the management manager's own host client.")
	fs.BoolVar(&o.LeaderElection, "leader-elect", o.LeaderElection, "Elect a leader among replicas; only the leader reconciles.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace,
		"Namespace of the leader election Lease (default: the pod's namespace; required out of cluster).")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "Name of the leader election Lease.")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration,
		"How long replicas wait, from the Lease's last renewal they saw, before they take it from a leader that stopped renewing: the longest failover.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline,
		"How long the leader tries to renew its Lease before it gives up and exits; shorter than the lease duration.")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod,
		"How often replicas try to acquire or renew the Lease.")
	fs.Func("shard-mode", `How replicas share the VirtualClusters: "none" (this replica runs them all; with --leader-elect, the leader does) or "lease" (every replica runs, each VirtualCluster on one live replica, fenced by a Lease). Default: none.`,
		func(v string) error {
			if v != ShardModeNone && v != ShardModeLease {
				return fmt.Errorf(`%q is not a shard mode: "none" or "lease"`, v)
			}
			o.ShardMode = v
			return nil
		})
	fs.StringVar(&o.ShardNamespace, "shard-namespace", o.ShardNamespace,
		"Namespace of the replicas' and VirtualClusters' Leases with --shard-mode=lease (default: the pod's namespace; required out of cluster).")
	fs.StringVar(&o.ShardGroup, "shard-group", o.ShardGroup, "Name of the group of replicas that share VirtualClusters, and prefix of their Leases.")
	fs.DurationVar(&o.ShardLeaseDuration, "shard-lease-duration", o.ShardLeaseDuration,
		"How long a replica that stopped renewing its Lease still counts live: the longest a dead replica's VirtualClusters go unserved.")
	fs.DurationVar(&o.ShardRenewDeadline, "shard-renew-deadline", o.ShardRenewDeadline,
		"How long a replica tries to renew its Lease before it stops writing and exits; shorter than the lease duration.")
	fs.DurationVar(&o.ShardRenewPeriod, "shard-renew-period", o.ShardRenewPeriod, "How often a replica renews its Lease and reads its peers'.")
	fs.DurationVar(&o.GracefulShutdownTimeout, "graceful-shutdown-timeout", o.GracefulShutdownTimeout,
		"How long managers wait for their controllers to drain on shutdown.")
	fs.DurationVar(&o.SpawnTimeout, "spawn-timeout", o.SpawnTimeout,
		"How long starting a tenant cluster's controllers may take, API server probe and cache sync included.")
	fs.DurationVar(&o.ClusterHealthInterval, "cluster-health-interval", o.ClusterHealthInterval,
		"How often each tenant API server is checked; negative turns checks off.")
	fs.DurationVar(&o.ClusterUnhealthyTimeout, "cluster-unhealthy-timeout", o.ClusterUnhealthyTimeout,
		"How long a tenant API server may fail its checks before its cluster is reported Failed and re-spawned.")
	o.Logger.BindFlags(fs)
}

// Validate checks that the options go together, with the flags' names: the
// modes, and the timing of leader election and of the shard Leases.
func (o Options) Validate() error {
	o.Default()
	if o.ShardMode != ShardModeNone && o.ShardMode != ShardModeLease {
		return fmt.Errorf(`--shard-mode %q: want "none" or "lease"`, o.ShardMode)
	}
	if o.LeaderElection {
		if o.ShardMode == ShardModeLease {
			return fmt.Errorf("--shard-mode=lease and --leader-elect exclude each other: every sharded replica runs")
		}
		return o.validateLeaderElection()
	}
	if o.ShardMode == ShardModeLease {
		return o.validateSharding()
	}
	return nil
}

// validateSharding checks the shard Leases' timing as pkg/sharding would,
// with the flags' names.
func (o Options) validateSharding() error {
	if o.ShardRenewDeadline >= o.ShardLeaseDuration {
		return fmt.Errorf("--shard-renew-deadline (%s) must be shorter than --shard-lease-duration (%s)", o.ShardRenewDeadline, o.ShardLeaseDuration)
	}
	if margin := o.ShardLeaseDuration - o.ShardRenewDeadline; o.ShardRenewPeriod >= margin {
		return fmt.Errorf("--shard-renew-period (%s) must be shorter than --shard-lease-duration less --shard-renew-deadline (%s): a replica that cannot renew must stop writing before its peers count it dead",
			o.ShardRenewPeriod, margin)
	}
	return nil
}

// validateLeaderElection checks the leader election timing as client-go's
// elector would, with the flags' names: the renew deadline must leave
// room within the lease, and retries within the renew deadline.
func (o Options) validateLeaderElection() error {
	if o.RenewDeadline >= o.LeaseDuration {
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be shorter than --leader-elect-lease-duration (%s)", o.RenewDeadline, o.LeaseDuration)
	}
	// client-go's elector retries with a jitter of up to 1.2 periods.
	if limit := time.Duration(float64(o.RetryPeriod) * 1.2); o.RenewDeadline <= limit {
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be longer than 1.2 times --leader-elect-retry-period (%s)", o.RenewDeadline, o.RetryPeriod)
	}
	return nil
}

// budgetText says what a cache budget is, for the flag's help.
func budgetText(budget int64) string {
	if budget <= 0 {
		return "none: no container limit"
	}
	return resource.NewQuantity(budget, resource.BinarySI).String()
}
