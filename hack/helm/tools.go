//go:build tools

// Package tools records the package this module builds, so that go mod tidy
// keeps its requirements. See the Makefile target helm: the chart test
// (charts/) lints and renders charts/tenantry with bin/helm.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
