//go:build tools

// Package previous records the packages this module builds, so that go mod
// tidy keeps their requirements. See the Makefile's kit images.
package previous

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
