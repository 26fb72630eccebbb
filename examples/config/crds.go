// Package config embeds the examples' generated CRDs (Foo), for the demo.
package config

import (
	"embed"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/tenantry/tenantry/pkg/crdfile"
)

//go:embed crd/*.yaml
var crdFiles embed.FS

// CRDs returns the examples' CustomResourceDefinitions.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return crdfile.Read(crdFiles, "crd/*.yaml")
}
