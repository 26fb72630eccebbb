package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons of a DataStore's Ready condition.
const (
	// ReasonDataStoreReachable: Tenantry reached the etcd as its root
	// user, and etcd authenticates its clients (Ready=True).
	ReasonDataStoreReachable = "Reachable"
	// ReasonDataStoreUnreachable: no endpoint answered.
	ReasonDataStoreUnreachable = "Unreachable"
	// ReasonDataStoreInvalid: its Secret is missing or not usable, its
	// client certificate is not etcd's root user, or etcd runs without
	// authentication (which would not keep its tenants apart).
	ReasonDataStoreInvalid = "Invalid"
	// ReasonDataStoreInUse: it is deleted, and control planes still keep
	// their data in it: it goes once they are deleted.
	ReasonDataStoreInUse = "InUse"
)

// DataStore is a shared etcd that a host admin declares once, for the
// control planes of several VirtualClusters (spec.controlPlane.storage
// of type DataStore). Each tenant's API server keeps its objects under a
// key prefix of its own, as an etcd user whose one role grants that
// prefix alone: one tenant's API server cannot read another's keys.
//
// The etcd must serve TLS, authenticate its clients by certificate and
// have authentication enabled (a root user, then etcdctl auth enable);
// Tenantry refuses one that does not. It must compact itself
// (--auto-compaction-retention): the tenants' API servers do not, as a
// compaction is of every tenant's keys at once. Run it where the host's
// Pods are not (outside the Pod network): Tenantry denies every tenant's
// Pods its endpoints' addresses, and lets its control planes in.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=tenantry
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Control-Planes",type=integer,JSONPath=`.status.controlPlanes`
// +kubebuilder:printcolumn:name="Endpoints",type=string,JSONPath=`.spec.etcd.endpoints`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DataStore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DataStoreSpec   `json:"spec"`
	Status DataStoreStatus `json:"status,omitempty"`
}

// DataStoreSpec says where a shared datastore is and how Tenantry signs
// in to it.
type DataStoreSpec struct {
	// Etcd is an etcd cluster.
	Etcd EtcdDataStore `json:"etcd"`
}

// EtcdDataStore is an etcd cluster shared by control planes.
type EtcdDataStore struct {
	// Endpoints are its members' client URLs, https://ADDRESS:PORT. An
	// address is an IP, or a name the manager and the host's nodes
	// resolve alike.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=7
	// +kubebuilder:validation:items:Pattern=`^https://[^/?#@]+:[0-9]+$`
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	Endpoints []string `json:"endpoints"`

	// SecretRef names the host Secret that holds, under ca.crt and
	// ca.key, the CA that signs etcd's serving certificate and that etcd
	// trusts for its clients (Tenantry signs each tenant's client
	// certificate with it), and under tls.crt and tls.key a client
	// certificate of etcd's root user. Only the manager reads it.
	SecretRef SecretReference `json:"secretRef"`
}

// SecretReference names a Secret of the host.
type SecretReference struct {
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
}

// DataStoreStatus is what Tenantry last found of a DataStore.
type DataStoreStatus struct {
	// Conditions: Ready says whether control planes can use it, and if
	// not, why (Reachable, Unreachable, Invalid).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation the conditions are of.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// ControlPlanes counts the VirtualClusters whose control planes keep
	// their data in it.
	// +optional
	ControlPlanes int32 `json:"controlPlanes"`
}

// DataStoreList is a list of DataStores.
//
// +kubebuilder:object:root=true
type DataStoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DataStore `json:"items"`
}

func init() {
	SchemeBuilder.Register(&DataStore{}, &DataStoreList{})
}
