package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultKubeconfigKey is the Secret key read when
// spec.kubeconfigSecretRef.key is not set.
const DefaultKubeconfigKey = "kubeconfig"

// Finalizer holds a VirtualCluster until Tenantry has stopped syncing it.
const Finalizer = "tenantry.dev/virtualcluster"

// ConditionReady is the condition that says whether Tenantry is syncing the
// tenant cluster.
const ConditionReady = "Ready"

// Reasons of the Ready condition.
const (
	// ReasonSpawned: the tenant cluster's controllers run (Ready=True).
	ReasonSpawned = "Spawned"
	// ReasonPaused: spec.paused is set; nothing runs, nothing was deleted.
	ReasonPaused = "Paused"
	// ReasonSecretNotFound: the kubeconfig Secret does not exist.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonSecretKeyNotFound: the Secret has no data under the key.
	ReasonSecretKeyNotFound = "SecretKeyNotFound"
	// ReasonInvalidKubeconfig: the Secret's data is not a usable kubeconfig.
	ReasonInvalidKubeconfig = "InvalidKubeconfig"
	// ReasonHostCluster: the kubeconfig reaches the management cluster
	// itself, which would copy its own copies without end; nothing runs.
	ReasonHostCluster = "HostCluster"
	// ReasonUnreachable: the tenant API server did not answer.
	ReasonUnreachable = "Unreachable"
	// ReasonFailed: the tenant cluster's controllers failed to start, or
	// stopped on their own; Tenantry retries with backoff.
	ReasonFailed = "Failed"
	// ReasonCacheLimitExceeded: the tenant cluster holds more objects, or
	// more bytes of them, than the manager may hold of it
	// (spec.hostPolicy.cache); it is not synced, and Tenantry retries with
	// backoff, and at once when the policy changes.
	ReasonCacheLimitExceeded = "CacheLimitExceeded"
)

// SecretKeyReference names one key of a Secret in the management cluster.
type SecretKeyReference struct {
	// Namespace of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`

	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// Key of the Secret's data that holds the kubeconfig.
	// +kubebuilder:default=kubeconfig
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// VirtualClusterSpec says where the tenant cluster is and whether to sync it.
// +kubebuilder:validation:XValidation:rule="has(self.controlPlane) == has(oldSelf.controlPlane)",message="spec.controlPlane can be neither added to nor removed from a VirtualCluster"
// +kubebuilder:validation:XValidation:rule="!has(self.snapshots) || has(self.controlPlane)",message="spec.snapshots needs spec.controlPlane: Tenantry holds no storage of a tenant whose control plane runs elsewhere"
// +kubebuilder:validation:XValidation:rule="!has(self.sleep) || has(self.controlPlane)",message="spec.sleep needs spec.controlPlane: Tenantry can neither stop nor start a control plane that runs elsewhere"
type VirtualClusterSpec struct {
	// KubeconfigSecretRef names the Secret, in the management cluster, whose
	// key holds the tenant cluster's kubeconfig. The kubeconfig must carry
	// its credentials inline: file paths, exec plugins and auth-provider
	// plugins are refused, since they would run or read on the manager's
	// host. A change of the Secret's content re-spawns the tenant cluster.
	KubeconfigSecretRef SecretKeyReference `json:"kubeconfigSecretRef"`

	// InClusterServer is the URL at which the tenant's Pods, running in the
	// host, reach the tenant API server: their KUBERNETES_SERVICE_HOST and
	// KUBERNETES_SERVICE_PORT. Empty: the kubeconfig's server, which suits
	// when the manager and the host's Pods reach the tenant the same way. A
	// change re-spawns the tenant cluster.
	// +kubebuilder:validation:Pattern=`^https://[^/?#]+/?$`
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	InClusterServer string `json:"inClusterServer,omitempty"`

	// Paused stops syncing the tenant cluster without deleting anything, in
	// the tenant or in the host. Unpausing resumes where it stopped.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// NodeSync says which host nodes the tenant sees as Nodes: Used (the
	// default), those that run its Pods; All, every host node that its host
	// policy's pods.nodeSelector allows, so that DaemonSets and clients
	// that count nodes work. A change re-spawns the tenant cluster.
	// +kubebuilder:validation:Enum=Used;All
	// +kubebuilder:default=Used
	// +optional
	NodeSync NodeSync `json:"nodeSync,omitempty"`

	// HostPolicy is what the host lets this tenant cluster ask of it, over
	// the manager's default policy (its --host-policy file). A change
	// re-spawns the tenant cluster.
	// +optional
	HostPolicy *HostPolicy `json:"hostPolicy,omitempty"`

	// ControlPlane, when set, has Tenantry run the tenant's control plane
	// in the host (see ControlPlaneSpec) and write its kubeconfig, an
	// admin credential, to the Secret that kubeconfigSecretRef names.
	// Unset: the Secret holds the kubeconfig of a control plane run
	// elsewhere. It can be neither added to nor removed from a
	// VirtualCluster.
	// +optional
	ControlPlane *ControlPlaneSpec `json:"controlPlane,omitempty"`

	// Snapshots schedules snapshots of the tenant (spec.controlPlane
	// only: Tenantry holds no storage of a tenant run elsewhere).
	// +optional
	Snapshots *SnapshotsSpec `json:"snapshots,omitempty"`

	// Sleep puts the tenant to sleep on its own (see ConditionAsleep):
	// after a time in which no one but Tenantry used its API server. Only
	// a control plane that Tenantry runs sleeps.
	// +optional
	Sleep *SleepSpec `json:"sleep,omitempty"`
}

// NodeSync says which host nodes a tenant cluster sees.
type NodeSync string

const (
	// NodeSyncUsed shows the host nodes that run the tenant's Pods, and no
	// other.
	NodeSyncUsed NodeSync = "Used"
	// NodeSyncAll shows every host node that the tenant's Pods may run on.
	NodeSyncAll NodeSync = "All"
)

// HostPolicy is what the host lets a tenant cluster ask of it. Each field
// set here (within pods and metadata, each of theirs) replaces the field of
// the same name in the manager's default policy, but metadata's
// deniedPrefixes, which add to the default's; an empty list counts as not
// set.
type HostPolicy struct {
	// Pods: what the tenant's Pods may ask of the host's scheduler and
	// nodes. A Pod field the policy does not allow is left out of the host
	// Pod (the tenant Pod gets a Normal HostStripped Event); a volume of a
	// type not allowed refuses the Pod (a Warning HostRejected Event).
	// +optional
	Pods *PodPolicy `json:"pods,omitempty"`

	// Metadata: which label and annotation keys of tenant objects reach
	// their host copies.
	// +optional
	Metadata *MetadataPolicy `json:"metadata,omitempty"`

	// ResourceQuota is kept, as the ResourceQuota "tenantry-quota", in every
	// host namespace of the tenant cluster: the host's budget for each
	// tenant namespace. Unset: no quota of Tenantry's.
	// +optional
	ResourceQuota *corev1.ResourceQuotaSpec `json:"resourceQuota,omitempty"`

	// LimitRange is kept, as the LimitRange "tenantry-limits", in every host
	// namespace of the tenant cluster: the defaults and bounds of each
	// tenant Pod's resources. Unset: no LimitRange of Tenantry's.
	// +optional
	LimitRange *corev1.LimitRangeSpec `json:"limitRange,omitempty"`

	// Storage: which host storage the tenant's claims may ask for.
	// +optional
	Storage *StoragePolicy `json:"storage,omitempty"`

	// Services: which types of Service the host serves for the tenant.
	// +optional
	Services *ServicePolicy `json:"services,omitempty"`

	// Network: what the tenant's Pods may reach, beyond the tenantry-isolation
	// NetworkPolicy's defaults.
	// +optional
	Network *NetworkPolicy `json:"network,omitempty"`

	// Budget is the most the tenant cluster may have in the host, over
	// all its host namespaces together, in ResourceQuota's names: pods,
	// services, persistentvolumeclaims, configmaps, secrets,
	// requests.cpu, requests.memory, limits.cpu, limits.memory,
	// requests.storage, services.nodeports, services.loadbalancers and
	// count/<resource>[.<group>]. A copy that would take the tenant over
	// a total is not made: the tenant object gets a HostRejected Event
	// naming the resource, and the copy is made once room is free. Unset:
	// no budget beyond ResourceQuota's per namespace.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['pods', 'services', 'persistentvolumeclaims', 'configmaps', 'secrets', 'services.nodeports', 'services.loadbalancers', 'requests.storage', 'cpu', 'memory', 'ephemeral-storage', 'requests.cpu', 'requests.memory', 'requests.ephemeral-storage', 'limits.cpu', 'limits.memory', 'limits.ephemeral-storage'] || (k.startsWith('count/') && size(k) > 6))",message="a budget counts pods, services, persistentvolumeclaims, configmaps, secrets, services.nodeports, services.loadbalancers, requests.storage, cpu, memory, ephemeral-storage, requests.* and limits.* of cpu, memory and ephemeral-storage, and count/<resource>[.<group>]"
	// +optional
	Budget corev1.ResourceList `json:"budget,omitempty"`

	// Cache bounds what the manager holds in memory of this tenant
	// cluster, which is shared by every tenant: the tenant's objects of
	// every type Tenantry watches in it. Unset fields take the manager's
	// default policy, else 50000 objects and 64Mi.
	// +optional
	Cache *CachePolicy `json:"cache,omitempty"`
}

// CachePolicy bounds what the manager holds of one tenant cluster. A
// tenant past a bound is not synced: its Ready condition turns False with
// reason CacheLimitExceeded, a Warning Event says by how much and of
// which type, and it is tried again with backoff, or at once when the
// policy changes. The manager never reads much more of it than the
// bounds: it lists in pages, and stops at the page that goes over.
// +kubebuilder:validation:XValidation:rule="!has(self.maxBytes) || quantity(string(self.maxBytes)).compareTo(quantity('1Mi')) >= 0",message="maxBytes must be at least 1Mi"
type CachePolicy struct {
	// MaxObjects is the most objects the manager holds of the tenant,
	// of every watched type together.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxObjects *int64 `json:"maxObjects,omitempty"`

	// MaxBytes is the most bytes of the tenant's objects the manager
	// holds, counted as they are encoded (protobuf for built-in types),
	// without managed fields; they take about two to three times as much
	// of the manager's memory.
	// +optional
	MaxBytes *resource.Quantity `json:"maxBytes,omitempty"`
}

// NetworkPolicy says what the tenant's Pods may reach, and what may reach
// them. The tenantry-isolation
// NetworkPolicy of every host namespace always denies egress to the host
// API server and to where the major clouds serve instance metadata and
// credentials (IPv4 169.254.0.0/16, 100.100.100.200 and 168.63.129.16;
// IPv6 fe80::/10, fd00:ec2::254, fd00:ec2::23 and fd20:ce::254).
type NetworkPolicy struct {
	// DeniedEgressCIDRs are more addresses, IPv4 or IPv6 in CIDR
	// notation, that the tenant's Pods may not reach (a metadata service
	// of the host's own, an internal network). They add to the defaults
	// and to the manager's default policy; none can be taken off.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) && cidr(self).prefixLength() > 0",message="must be an IPv4 or IPv6 CIDR narrower than all addresses, such as 10.0.0.0/8 or fd00::/8"
	// +optional
	DeniedEgressCIDRs []string `json:"deniedEgressCIDRs,omitempty"`

	// ControlPlaneCIDRs are the addresses, IPv4 or IPv6 in CIDR notation,
	// that the tenant's own API server connects from when it calls into
	// the tenant's Pods: admission and conversion webhooks, aggregated
	// APIs, and the pods/proxy and services/proxy subresources. The
	// tenant's Pods take traffic from them. Without them the isolation
	// policy admits only the VirtualCluster's own Pods and the host's, and
	// those calls fail.
	//
	// A tenant commands its API server (a webhook's URL, an APIService, a
	// Pod's status), so list only addresses that this tenant's control
	// plane alone connects from: another tenant's API server connecting
	// from one of them would reach this tenant's Pods. An API server run
	// outside the cluster's network should reach Services at their
	// endpoints (kube-apiserver's --enable-aggregator-routing), not
	// through a node's kube-proxy, which would hide its address behind
	// the node's. The manager's default policy cannot set it.
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self) && cidr(self).prefixLength() > 0",message="must be an IPv4 or IPv6 CIDR narrower than all addresses, such as 10.0.0.5/32 or fd00::5/128"
	// +optional
	ControlPlaneCIDRs []string `json:"controlPlaneCIDRs,omitempty"`

	// TranslatePolicies says whether the tenant's own NetworkPolicies
	// are translated into its host namespaces and enforced there, each
	// confined to the tenant (a namespace selector over its own
	// namespaces only; an ipBlock never admitting what the isolation
	// policy keeps out, nor another tenant's Pods). Unset: true. False:
	// they are not enforced, and each gets a Warning Event NotEnforced.
	// +optional
	TranslatePolicies *bool `json:"translatePolicies,omitempty"`
}

// StoragePolicy says which host storage a tenant's claims may ask for. A
// claim that names no class gets the host's default class.
type StoragePolicy struct {
	// AllowedStorageClasses are the host StorageClasses a claim (or a Pod's
	// ephemeral claim template) may name. "" stands for no class at all,
	// which binds a claim to a pre-made host volume: allow it only to a
	// trusted tenant.
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$`
	// +optional
	AllowedStorageClasses []string `json:"allowedStorageClasses,omitempty"`

	// AllowedVolumeAttributesClasses are the host VolumeAttributesClasses
	// a claim may name.
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	AllowedVolumeAttributesClasses []string `json:"allowedVolumeAttributesClasses,omitempty"`
}

// ServicePolicy says which Services the host serves for a tenant.
type ServicePolicy struct {
	// AllowedTypes are the types of Service the tenant may make. NodePort
	// and LoadBalancer take ports on every host node and the host's load
	// balancers. Default: ClusterIP and ExternalName.
	// +listType=set
	// +kubebuilder:validation:items:Enum=ClusterIP;ExternalName;NodePort;LoadBalancer
	// +optional
	AllowedTypes []corev1.ServiceType `json:"allowedTypes,omitempty"`
}

// PodPolicy says what a tenant's Pods may ask of the host. By default a
// tenant Pod gets the host's default priority, the default scheduler, no
// runtime class, only the not-ready and unreachable tolerations every Pod
// has, no node selector on node roles, and the volume types whose data come
// from its own namespace or node scratch space.
type PodPolicy struct {
	// AllowedPriorityClasses are the host PriorityClasses a tenant Pod may
	// name.
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	AllowedPriorityClasses []string `json:"allowedPriorityClasses,omitempty"`

	// AllowedSchedulerNames are the host schedulers a tenant Pod may name,
	// besides default-scheduler.
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	AllowedSchedulerNames []string `json:"allowedSchedulerNames,omitempty"`

	// AllowedRuntimeClasses are the host RuntimeClasses a tenant Pod may
	// name.
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	AllowedRuntimeClasses []string `json:"allowedRuntimeClasses,omitempty"`

	// AllowedVolumeTypes are volume types a tenant Pod may use besides
	// configMap, secret, emptyDir, projected, downwardAPI,
	// persistentVolumeClaim, ephemeral and image. Each reaches the host's
	// machines or storage directly: allow one only to a trusted tenant.
	// gitRepo is never allowed.
	// +listType=set
	// +kubebuilder:validation:items:Enum=hostPath;nfs;csi;iscsi
	// +optional
	AllowedVolumeTypes []string `json:"allowedVolumeTypes,omitempty"`

	// PodSecurityLevel is the Pod Security level enforced on the tenant's
	// host namespaces: restricted, baseline or privileged. Empty: the
	// manager's --host-pod-security-level (baseline by default). privileged
	// lets the tenant's Pods use the host's network, ports, processes and
	// devices, where no NetworkPolicy holds them: grant it only to a tenant
	// the host trusts as itself.
	// +kubebuilder:validation:Enum=restricted;baseline;privileged
	// +optional
	PodSecurityLevel string `json:"podSecurityLevel,omitempty"`

	// NodeSelector is put on every host Pod, over the tenant's own keys of
	// the same name: the nodes the host gives this tenant.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations are added to every host Pod: the taints of the nodes the
	// host gives this tenant.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// KeepImagePullPolicy keeps each container's imagePullPolicy as the
	// tenant wrote it. Off by default: every host container gets Always,
	// because an image a node holds is every tenant's to run with
	// IfNotPresent or Never, another tenant's private image among them,
	// without its pull credentials. Turn it on only where the host's
	// kubelets check a Pod's credentials for the images they hold
	// (the kubelet's imagePullCredentialsVerificationPolicy), or where
	// no tenant has private images.
	// +optional
	KeepImagePullPolicy bool `json:"keepImagePullPolicy,omitempty"`
}

// MetadataPolicy says which label and annotation keys of tenant objects
// are copied to their host copies. Tenantry's own tenantry.dev/ keys never
// are.
type MetadataPolicy struct {
	// DeniedPrefixes are key prefixes added to the manager's deny list
	// (--denied-metadata-prefixes, and the default policy's deniedPrefixes)
	// and taken off its allowed list: keys with them, or in a subdomain of
	// theirs, are not copied. An entry without a slash names one key that
	// has no prefix (keys without a prefix are copied otherwise, but Pod
	// annotations': host Services select host Pods by such labels).
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/|[a-z0-9]([-a-z0-9_]{0,61}[a-z0-9])?)$`
	// +optional
	DeniedPrefixes []string `json:"deniedPrefixes,omitempty"`

	// AllowedPrefixes are taken off the manager's deny list and copied
	// although a shorter denied prefix covers them (for example
	// "linkerd.io/" for a tenant that the host's mesh may serve, which
	// also lets config.linkerd.io/ keys through). An entry without a
	// slash names one key that has no prefix, such as aadpodidbinding.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/|[a-z0-9]([-a-z0-9_]{0,61}[a-z0-9])?)$`
	// +optional
	AllowedPrefixes []string `json:"allowedPrefixes,omitempty"`

	// CopyUnprefixedPodAnnotations copies Pod annotations whose keys have
	// no prefix. Off by default: container runtimes act on some
	// (io.kubernetes.cri-o.Devices, io.katacontainers.*).
	// +optional
	CopyUnprefixedPodAnnotations bool `json:"copyUnprefixedPodAnnotations,omitempty"`
}

// VirtualClusterStatus is what Tenantry observed of the tenant cluster.
type VirtualClusterStatus struct {
	// Conditions: "Ready" says whether the tenant cluster is being synced,
	// and if not, why (see its reason).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation of the spec that the status
	// describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Replica is the manager replica that runs the tenant cluster's
	// controllers: with --shard-mode=lease, the one that holds the
	// VirtualCluster's Lease; otherwise the manager's host name (its Pod's
	// name in a cluster).
	// +optional
	Replica string `json:"replica,omitempty"`

	// Budget is what the tenant cluster takes of its host policy's budget.
	// +optional
	Budget *BudgetStatus `json:"budget,omitempty"`

	// Sync is what the tenant cluster's syncers have in the host and did
	// lately, as the replica that runs them last saw it: looked at every
	// 10 seconds, written when it changed, at most once a minute unless
	// an error or a refusal starts or ends. It stays as it was
	// while the cluster is paused or not running.
	// +optional
	Sync *SyncStatus `json:"sync,omitempty"`

	// ControlPlane is what Tenantry observed of the control plane it runs
	// for the VirtualCluster (spec.controlPlane).
	// +optional
	ControlPlane *ControlPlaneStatus `json:"controlPlane,omitempty"`

	// Snapshots says how the scheduled snapshots (spec.snapshots) went.
	// +optional
	Snapshots *SnapshotsStatus `json:"snapshots,omitempty"`
	// Sleep says when people last used the tenant (spec.sleep).
	// +optional
	Sleep *SleepStatus `json:"sleep,omitempty"`
}

// SyncStatus is what a tenant cluster's syncers have in the host and did
// lately.
type SyncStatus struct {
	// Objects counts the tenant's host copies by syncer ("configmaps",
	// "pods", "foos.samples.example.com"; host namespaces as
	// "namespaces").
	// +optional
	Objects map[string]int32 `json:"objects,omitempty"`

	// Total is the sum of Objects, for the printer column.
	Total int32 `json:"total"`

	// HostNamespaces are the tenant cluster's namespaces in the host, the
	// first 50 by name (Objects["namespaces"] counts them all).
	// +optional
	HostNamespaces []string `json:"hostNamespaces,omitempty"`

	// Refusals counts the tenant objects whose copies were refused (by
	// the host, or by the host policy) in the last hour.
	Refusals int32 `json:"refusals"`

	// LastError is the last sync that failed, kept across the manager's
	// restarts; its message cut to 1 KiB, with what does not print on a
	// terminal blanked.
	// +optional
	LastError *SyncError `json:"lastError,omitempty"`

	// LastWriteTime is when a host copy was last written, to within a
	// minute.
	// +optional
	LastWriteTime *metav1.Time `json:"lastWriteTime,omitempty"`

	// Lag is the longest that a change of a tenant object waited, from
	// its event until its sync ended, in the last report's 10 seconds, in
	// whole seconds: "0s" while the syncers keep up. Retries of a failed
	// or refused sync are not counted (see Refusals and LastError).
	Lag metav1.Duration `json:"lag"`
}

// SyncError is one sync that failed.
type SyncError struct {
	// Time is when it failed.
	Time metav1.Time `json:"time"`
	// Resource is the syncer's ("configmaps").
	Resource string `json:"resource"`
	// Object is the tenant object's namespace/name.
	Object string `json:"object"`
	// Message says why.
	Message string `json:"message"`
}

// BudgetStatus is what a tenant cluster takes of its budget.
type BudgetStatus struct {
	// Used are the totals, over all host namespaces of the tenant cluster,
	// of the resources its budget names.
	// +optional
	Used corev1.ResourceList `json:"used,omitempty"`

	// Pods is "used/allowed" for the budget's pods, as the printer column
	// shows it.
	// +optional
	Pods string `json:"pods,omitempty"`
}

// VirtualCluster is one tenant cluster that Tenantry syncs with the
// management cluster. Deleting it stops the syncing and deletes the host
// namespaces Tenantry made for it; the tenant cluster keeps its objects.
// Its name is at most 63 characters, checked on create only, so that one
// made before the check can still be updated and deleted.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=vc,categories=tenantry
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Replica",type=string,JSONPath=`.status.replica`
// +kubebuilder:printcolumn:name="Pods",type=string,JSONPath=`.status.budget.pods`
// +kubebuilder:printcolumn:name="Synced",type=integer,JSONPath=`.status.sync.total`
// +kubebuilder:printcolumn:name="Lag",type=string,JSONPath=`.status.sync.lag`,priority=1
// +kubebuilder:printcolumn:name="Refusals",type=integer,JSONPath=`.status.sync.refusals`,priority=1
// +kubebuilder:printcolumn:name="Host-Namespaces",type=string,JSONPath=`.status.sync.hostNamespaces`,priority=1
// +kubebuilder:printcolumn:name="Last-Error",type=string,JSONPath=`.status.sync.lastError.message`,priority=1
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.paused`,priority=1
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.spec.kubeconfigSecretRef.name`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || size(self.metadata.name) <= 63",optionalOldSelf=true,message="a VirtualCluster's name is at most 63 characters: it is the value of the tenantry.dev/cluster label on every host object made for it"
type VirtualCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VirtualClusterSpec   `json:"spec"`
	Status VirtualClusterStatus `json:"status,omitempty"`
}

// VirtualClusterList is a list of VirtualClusters.
//
// +kubebuilder:object:root=true
type VirtualClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&VirtualCluster{}, &VirtualClusterList{})
}

// KubeconfigKey is the Secret key that holds the kubeconfig, defaulted.
func (r SecretKeyReference) KubeconfigKey() string {
	if r.Key == "" {
		return DefaultKubeconfigKey
	}
	return r.Key
}
