// Package v1alpha1 is the tenantry.dev/v1alpha1 API: VirtualCluster, the
// management cluster's record of one tenant cluster.
//
// +kubebuilder:object:generate=true
// +groupName=tenantry.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API's group and version.
	GroupVersion = schema.GroupVersion{Group: "tenantry.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the API's types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
