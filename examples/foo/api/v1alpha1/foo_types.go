package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// FooSpec is what a tenant asks for.
type FooSpec struct {
	// Replicas is how many replicas of the Foo to run.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
}

// FooStatus is what the host reports.
type FooStatus struct {
	// ObservedReplicas is how many replicas the host runs.
	// +optional
	ObservedReplicas int32 `json:"observedReplicas,omitempty"`
}

// Foo is the example custom resource: a tenant creates one, the host runs
// it and reports back.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Observed",type=integer,JSONPath=`.status.observedReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Foo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FooSpec   `json:"spec,omitempty"`
	Status FooStatus `json:"status,omitempty"`
}

// FooList is a list of Foos.
//
// +kubebuilder:object:root=true
type FooList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Foo `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Foo{}, &FooList{})
}
