// Package syncer keeps tenant clusters and the host in sync: tenant objects
// flow down into the host, what the host fills in flows back up, deletions
// go both ways, and a patroller repairs drift.
//
// # Declaring a syncer
//
// A Syncer is declared once per type and runs for every tenant. It says
// only what is particular to the type:
//
//	var ConfigMaps = syncer.Syncer{
//		Name:             "configmaps",
//		Object:           func() client.Object { return &corev1.ConfigMap{} },
//		CopyUserMetadata: true,
//		Down: func(tenant, host client.Object) error { // spec and data go down
//			host.(*corev1.ConfigMap).Data = tenant.(*corev1.ConfigMap).Data
//			return nil
//		},
//	}
//
// Up (often StatusUp of CopyStatus) brings status and host-allocated fields up;
// Filter skips objects; OnlyExisting and ClusterScoped cover the rarer
// cases. Object may return an *unstructured.Unstructured with its
// apiVersion and kind, for types with no Go struct. Package builtin declares
// the syncers of Kubernetes' own types, and package pods the Pod syncer.
//
// # What the framework does for every syncer
//
//   - Names: a tenant object in namespace NS of cluster VC lives in the host
//     in namespace HostNamespace(VC, NS), under its own name. Host
//     namespaces are created on demand, enforce a Pod Security level, and are
//     deleted with their tenant namespace. Every object a Pod names (and
//     every reference inside any namespaced object) is looked up in that
//     namespace, which holds only copies of that tenant namespace's objects:
//     a tenant cannot reach another tenant's objects or the host's.
//   - Metadata: host copies carry tenantry.dev/managed-by and
//     tenantry.dev/cluster labels, and tenantry.dev/tenant-namespace,
//     -name and -uid annotations. A tenant's own tenantry.dev/ labels and
//     annotations are dropped.
//   - Ownership: only objects with Tenantry's labels are ever changed or
//     deleted in the host. An object in the way without them is left alone
//     and reported (an event on the tenant object, a metric). A copy made
//     for an earlier tenant object of the same name (another UID) is
//     replaced, never merged into.
//   - Other writers: a field that a host controller or webhook adds to a
//     copy is kept. A copy records (AnnotationSyncedDigest) what its tenant
//     object asked for at the last write; while that is unchanged and the
//     copy still holds it, a sync changes only metadata. A change in the
//     tenant is written whole, so what the tenant removed goes.
//   - Deletion: deleting a tenant object deletes its copy (by UID, with the
//     tenant's grace period); a copy whose tenant object is gone is deleted;
//     a copy deleted or edited by hand is restored.
//   - Refusals: a copy the host refuses (Pod Security, quota, admission,
//     validation), or that a syncer refuses to make (Refuse), gives the
//     tenant object a Warning Event with reason ReasonHostRejected, once per
//     message, and is retried with a backoff from 200ms to 5 minutes; a
//     changed tenant object is tried at once. What a syncer leaves out of a
//     copy (Syncer.Stripped) is told once with a Normal Event, reason
//     ReasonHostStripped.
//   - Labels and annotations: a tenant object's own are copied, but for
//     keys that steer host add-ons (DefaultDeniedMetadataPrefixes); a key
//     removed in the tenant goes from the copy, a key the host added stays.
//   - Host namespace policy: every host namespace gets the NetworkPolicy
//     IsolationPolicyName, admitting only its VirtualCluster's Pods and the
//     host's own, and, when Options set them, the ResourceQuota QuotaName
//     and the LimitRange LimitRangeName; all are made with the namespace,
//     before anything goes in it, and restored when changed by hand.
//     TenantModulePerCluster chooses Options (and syncers) per cluster.
//   - Concurrency: every write carries the resourceVersion it was computed
//     from; a conflict is retried, a newer object never blindly
//     overwritten.
//   - Fairness: each tenant syncs through its own queues (one per type, in
//     its own manager), and its host client waits for its turn in the Hub's
//     host budget (HubOptions.HostQPS), which the tenants that have work
//     share by fair queuing: a tenant that creates thousands of objects
//     waits behind its own requests, and a tenant alone gets the whole
//     budget.
//   - Budget: with Options.Budget, a write of a host copy that would take
//     the tenant over it, over all its host namespaces, is refused. Each
//     copy counts as count/<resource>[.<group>], and as what its syncer
//     declares (Syncer.Usage, in ResourceQuota's names: builtin declares
//     Services', claims', ConfigMaps' and Secrets', package pods the Pods'
//     compute).
//
// # Extending a syncer
//
// Two fields let a syncer go beyond copies, as the Pod syncer (package
// pods) does:
//
//   - Lifecycle takes part where a plain copy does not say enough: a copy
//     never made twice (a Pod that ran), a refusal reported on the tenant
//     object itself, a deletion of its own (an eviction), a deletion the
//     tenant cannot complete alone. Nil: a plain copy.
//   - Extensions add to every tenant what the type needs beside its
//     copies (the Pod syncer's virtual nodes, Pods' API access Secrets, the
//     kubelet API and DNS). Each Extension's Setup runs once per tenant, as
//     the syncer starts there, with a TenantScope: the tenant's manager,
//     logger and host client, the hub's host reader and its sources of
//     host events and host node names, the framework's names (HostKey,
//     TenantKey, Owns, Excluded), controllers that run as the syncers' own
//     (RunController), the writes metric, and the quiet retry of transient
//     states.
//
// # Running
//
// A Hub runs in the management process: one informer per type on the
// host, seeing only Tenantry's objects, shared by all tenants and routing
// each event to its tenant by the tenantry.dev/cluster label. TenantModule
// is the fx module to spawn every tenant with (see package clusterregistry):
// it runs, in the tenant's manager, one controller per syncer fed by the
// tenant's own watch, the hub and the patroller.
//
// The machinery has packages of its own, internal to this one: the host
// cache behind the Hub (internal/hostcache), the fair request budget
// (internal/fairqueue), the budget's accounting (internal/quota) and the
// tenants' on-demand controllers (internal/ondemand).
//
// A tenant's controllers keep no goroutine while idle: each starts its
// workers (Options.Workers at most) as work arrives and ends them when
// none is left, waits out its delays and retries on timers, and one
// runnable of the tenant's manager runs them all. A thousand idle tenants
// so cost their informers and little else.
//
// # Testing a syncer
//
// Syncer.HostCopy is the host copy that a syncer makes of a tenant object,
// framework metadata included, with no API server. Package syncertest runs
// a syncer's Up on a fake tenant client, and starts a host and tenants with
// syncers running, for tests against real API servers.
//
// # Metrics
//
// tenantry_syncer_drift_found_total and tenantry_syncer_drift_repaired_total
// (by cluster and resource) count what the patroller found out of sync and
// what was then repaired; tenantry_syncer_writes_total counts writes by
// direction and verb; tenantry_syncer_conflicts_total counts conflicts;
// tenantry_syncer_host_rejections_total counts the host's refusals by API
// reason. A stopped cluster's series are deleted. controller-runtime's
// reconcile series name a tenant's controllers by what they do, such as
// configmaps-syncer, the same in every tenant, and so add up over the
// tenants (but its worker gauges, which each controller sets as it
// starts): per-tenant series there would grow with the number of tenants
// and could not be deleted. Tenants' work queues report no metrics; the
// tenant's lag (SyncReport.Lag) times each change from its event.
package syncer
