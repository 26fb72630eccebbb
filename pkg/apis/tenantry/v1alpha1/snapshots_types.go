package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SnapshotsSpec schedules snapshots of a tenant whose control plane
// Tenantry runs, as `tenantry snapshot` takes them, pushed to an OCI
// registry. A snapshot that fails is recorded (status.snapshots, an
// Event, a metric) and never stops the tenant; the next is taken at the
// next time of the schedule.
type SnapshotsSpec struct {
	// Schedule is when to take one, in cron's five fields, in UTC
	// ("0 3 * * *": daily at 03:00), or a descriptor ("@daily",
	// "@every 6h").
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Schedule string `json:"schedule"`

	// Destination is the repository to push them to,
	// oci://REGISTRY/REPOSITORY. Each is tagged with the VirtualCluster's
	// name and the time it was taken (NAME-20261129T030000Z).
	// +kubebuilder:validation:Pattern=`^oci://[^/]+/[a-z0-9]+([._/-][a-z0-9]+)*$`
	// +kubebuilder:validation:MaxLength=512
	Destination string `json:"destination"`

	// Keep is how many of this VirtualCluster's snapshots to keep in the
	// repository: older ones are deleted once a new one is pushed.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +kubebuilder:default=7
	// +optional
	Keep int32 `json:"keep,omitempty"`

	// CredentialsSecretRef names a Secret of type
	// kubernetes.io/dockerconfigjson with the registry's credentials.
	// Unset: the registry is reached without any.
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`
}

// SnapshotsStatus says how the scheduled snapshots went.
type SnapshotsStatus struct {
	// LastScheduleTime is when the last one was due, and began.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// LastSuccessful is the last one pushed.
	// +optional
	LastSuccessful *SnapshotRecord `json:"lastSuccessful,omitempty"`
	// LastFailure is the last one that failed, and why.
	// +optional
	LastFailure *SnapshotFailure `json:"lastFailure,omitempty"`
}

// SnapshotRecord is a snapshot pushed.
type SnapshotRecord struct {
	// Time is when it was taken.
	Time metav1.Time `json:"time"`
	// Reference is where it is, by digest:
	// oci://REGISTRY/REPOSITORY@sha256:...; restore it with
	// `tenantry restore NAME --from` it.
	Reference string `json:"reference"`
	// Keys is how many keys it holds.
	Keys int64 `json:"keys"`
	// Size is its size in bytes, compressed.
	Size int64 `json:"size"`
	// Took is how long it took, pushed.
	Took metav1.Duration `json:"took"`
}

// SnapshotFailure is a snapshot that failed.
type SnapshotFailure struct {
	// Time is when it was due.
	Time metav1.Time `json:"time"`
	// Message says why it failed.
	Message string `json:"message"`
}
