// Package config embeds the generated CRDs of Tenantry's API, for binaries
// that install them themselves (tenantry dev). The kustomize bases beside
// this file are the way to deploy.
package config

import (
	"embed"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/tenantry/tenantry/pkg/crdfile"
)

//go:embed crd/bases/*.yaml
var crdFiles embed.FS

// CRDs returns Tenantry's CustomResourceDefinitions.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return crdfile.Read(crdFiles, "crd/bases/*.yaml")
}
