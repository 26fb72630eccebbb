package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionControlPlaneReady is the condition that says whether the
// control plane Tenantry runs for a VirtualCluster (spec.controlPlane)
// answers: its API server ready, its controller-manager running.
const ConditionControlPlaneReady = "ControlPlaneReady"

// Reasons of the ControlPlaneReady condition, and of Ready while the
// control plane is not ready.
const (
	// ReasonControlPlaneRunning: the API server answers ready, and the
	// controller-manager runs (ControlPlaneReady=True).
	ReasonControlPlaneRunning = "Running"
	// ReasonControlPlaneProvisioning: its workloads are made, and not all
	// of them run yet.
	ReasonControlPlaneProvisioning = "Provisioning"
	// ReasonUnknownVersion: spec.controlPlane.version is not one this
	// manager can run.
	ReasonUnknownVersion = "UnknownVersion"
	// ReasonVersionSkew: spec.controlPlane.version skips a minor version,
	// or goes back one, from the version that runs: Kubernetes moves one
	// minor version at a time, forward.
	ReasonVersionSkew = "VersionSkew"
	// ReasonStorageRefused: the storage asked for is not one the host
	// allows (a storage class the host policy does not list).
	ReasonStorageRefused = "StorageRefused"
	// ReasonSecretTaken: the kubeconfig Secret that spec.kubeconfigSecretRef
	// names exists, and is not one Tenantry wrote for this VirtualCluster.
	ReasonSecretTaken = "SecretTaken"
	// ReasonDataStoreUnavailable: the DataStore that
	// spec.controlPlane.storage names does not exist, does not answer, or
	// cannot be used (its Secret, its root certificate, authentication
	// off), or refused the tenant's etcd user; the message says which.
	ReasonDataStoreUnavailable = "DataStoreUnavailable"
	// ReasonControlPlaneFailed: a workload of the control plane failed
	// (the message says which, and how).
	ReasonControlPlaneFailed = "ControlPlaneFailed"
	// ReasonRestoring: a snapshot is being restored into the control
	// plane's storage (AnnotationRestoring): its storage runs alone, and
	// its API server starts once every key is loaded.
	ReasonRestoring = "Restoring"
	// ReasonControlPlaneNotReady (of Ready): the control plane Tenantry
	// runs for the VirtualCluster is not ready yet (its ControlPlaneReady
	// condition says why); syncing starts once it is.
	ReasonControlPlaneNotReady = "ControlPlaneNotReady"
)

// AnnotationRestoring marks a VirtualCluster that `tenantry restore`
// makes from a snapshot, until the snapshot's keys are all in its
// storage; its value is the Kubernetes version the snapshot was taken
// at, which spec.controlPlane.version must be able to run (one minor
// version on at most). Meanwhile its control plane runs its storage
// alone (ControlPlaneReady=False, reason Restoring, once the storage
// answers), and nothing of it is synced. It counts only on a control
// plane that has not run yet: on one that runs, it is ignored.
const AnnotationRestoring = "tenantry.dev/restoring"

// ControlPlaneSpec asks Tenantry to run the tenant's control plane in the
// host: its kube-apiserver, its kube-controller-manager and its storage,
// as workloads in a host namespace of the VirtualCluster. An empty object
// selects every default.
// +kubebuilder:validation:XValidation:rule="!has(self.replicas) || self.replicas == 1 || self.storage.type != 'Embedded'",message="spec.controlPlane.replicas above 1 needs storage.type Etcd or DataStore: an Embedded etcd is one member, inside the API server's Pod"
type ControlPlaneSpec struct {
	// Version is the Kubernetes version of the control plane, as v1.37.2.
	// Empty: the release this manager is built with. A change rolls the
	// control plane, with its data kept, one minor version at a time.
	// +kubebuilder:validation:Pattern=`^v1\.[0-9]+\.[0-9]+$`
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Version string `json:"version,omitempty"`

	// Replicas is how many API servers run, each with a
	// kube-controller-manager beside it (leader-elected), spread over the
	// host's nodes, behind the tenant's one Service: with more than one,
	// losing a Pod or a node, or a rolling version change, leaves the
	// tenant's API answering. More than one needs storage Etcd or
	// DataStore.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Storage is where the control plane keeps the tenant's objects.
	// Defaulted, so that its type is always there to compare: it cannot
	// change.
	// +kubebuilder:default={"type":"Embedded"}
	// +optional
	Storage ControlPlaneStorage `json:"storage,omitempty"`

	// APIServer sets the resources of the tenant's kube-apiserver. Unset:
	// the manager's defaults.
	// +optional
	APIServer ComponentSpec `json:"apiServer,omitempty"`

	// Etcd sets the resources of the tenant's etcd (storage types
	// Embedded and Etcd).
	// +optional
	Etcd ComponentSpec `json:"etcd,omitempty"`

	// ControllerManager sets the resources of the tenant's
	// kube-controller-manager.
	// +optional
	ControllerManager ComponentSpec `json:"controllerManager,omitempty"`

	// RetainData keeps the control plane's data (its PersistentVolumeClaim,
	// or its keys in a DataStore) when the VirtualCluster is deleted.
	// Default: deleted with it.
	// +optional
	RetainData bool `json:"retainData,omitempty"`
}

// ControlPlaneStorage is where a provisioned control plane keeps its data.
// +kubebuilder:validation:XValidation:rule="self.type == oldSelf.type",message="storage.type cannot change: the data would stay behind"
// +kubebuilder:validation:XValidation:rule="has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storage.storageClassName cannot change: the data's claim is made"
// +kubebuilder:validation:XValidation:rule="has(self.size) == has(oldSelf.size) && (!has(self.size) || self.size == oldSelf.size)",message="storage.size cannot change: the data's claim is made"
// +kubebuilder:validation:XValidation:rule="has(self.dataStore) == has(oldSelf.dataStore) && (!has(self.dataStore) || self.dataStore == oldSelf.dataStore)",message="storage.dataStore cannot change: the data would stay behind"
// +kubebuilder:validation:XValidation:rule="(self.type == 'DataStore') == has(self.dataStore)",message="storage.dataStore names the DataStore of type DataStore, and is set for no other type"
// +kubebuilder:validation:XValidation:rule="self.type != 'DataStore' || (!has(self.storageClassName) && !has(self.size))",message="storage.storageClassName and storage.size are of a claim, which a control plane on a DataStore has none of"
type ControlPlaneStorage struct {
	// Type of storage:
	// Embedded (the default): an etcd in the API server's Pod, on its
	// loopback only, with no database server to run apart;
	// Etcd: an etcd of the tenant's own in a Pod of its own, reached over
	// TLS with a client certificate, which restarts apart from the API
	// server and has resources of its own;
	// DataStore: the shared DataStore that dataStore names, under a key
	// prefix of the tenant's own.
	// +kubebuilder:validation:Enum=Embedded;Etcd;DataStore
	// +kubebuilder:default=Embedded
	// +optional
	Type StorageType `json:"type,omitempty"`

	// DataStore is the name of the DataStore (type DataStore).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	DataStore string `json:"dataStore,omitempty"`

	// StorageClassName is the class of the data's PersistentVolumeClaim
	// (types Embedded and Etcd). Empty: the host's default class. The
	// VirtualCluster's host policy (storage.allowedStorageClasses) must
	// allow it, as it must a tenant's own claims.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// Size of the data's PersistentVolumeClaim (types Embedded and
	// Etcd). Default: 1Gi.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`
}

// StorageType is the kind of storage of a provisioned control plane.
type StorageType string

const (
	// StorageEmbedded: etcd in the API server's Pod, on its loopback.
	StorageEmbedded StorageType = "Embedded"
	// StorageEtcd: an etcd of the tenant's own, in a Pod of its own.
	StorageEtcd StorageType = "Etcd"
	// StorageDataStore: a shared DataStore, under the tenant's prefix.
	StorageDataStore StorageType = "DataStore"
)

// ComponentSpec sets what one component of a provisioned control plane
// runs with.
type ComponentSpec struct {
	// Resources are the container's requests and limits.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// ControlPlaneStatus is what Tenantry observed of the control plane it
// runs for a VirtualCluster.
type ControlPlaneStatus struct {
	// Version is the Kubernetes version that runs (the last one rolled out
	// in full).
	// +optional
	Version string `json:"version,omitempty"`

	// Namespace is the host namespace of the control plane's workloads.
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Endpoint is the URL at which the host's Pods (and the manager) reach
	// the tenant API server: its host Service.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// CertificatesExpire is when the first of the serving and client
	// certificates expires; Tenantry renews them well before.
	// +optional
	CertificatesExpire *metav1.Time `json:"certificatesExpire,omitempty"`
}
