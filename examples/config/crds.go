// Package config embeds the examples' generated CRDs (Foo), for the demo.
package config

import (
	"embed"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	tenantryconfig "github.com/tenantry/tenantry/config"
	"github.com/tenantry/tenantry/pkg/crdfile"
	"github.com/tenantry/tenantry/pkg/syncer"
)

//go:embed crd/*.yaml
var crdFiles embed.FS

// CRDs returns the examples' CustomResourceDefinitions.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return crdfile.Read(crdFiles, "crd/*.yaml")
}

// HostCRDs returns what a host needs to run the examples' custom resources
// in its tenants: Tenantry's CustomResourceDefinitions, and the examples'
// labelled public (syncer.LabelPublicCRD), so that the host copies them
// into every tenant.
func HostCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	crds, err := tenantryconfig.CRDs()
	if err != nil {
		return nil, err
	}
	examples, err := CRDs()
	if err != nil {
		return nil, err
	}
	for _, crd := range examples {
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		crd.Labels[syncer.LabelPublicCRD] = "true"
	}
	return append(crds, examples...), nil
}
