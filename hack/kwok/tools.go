//go:build tools

// Package tools records the package this module builds, so that go mod tidy
// keeps its requirements. See the Makefile target envtest.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
