//go:build tools

// Package tools records the program this module builds, so that go mod
// tidy keeps its requirements. See the Makefile target node.
package tools

import (
	_ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
)
