// Package crdfile reads CustomResourceDefinitions from YAML files, such as
// the ones controller-gen writes, including from an embedded file system.
package crdfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Read returns every CRD in the YAML files of fsys that match pattern.
func Read(fsys fs.FS, pattern string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	paths, err := fs.Glob(fsys, pattern)
	if err != nil {
		return nil, fmt.Errorf("listing CRD files %s: %w", pattern, err)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, p := range paths {
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := decoder.Decode(&crd); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("decoding %s: %w", p, err)
			}
			if crd.Name != "" {
				crds = append(crds, &crd)
			}
		}
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("no CRD in %s", pattern)
	}
	return crds, nil
}
