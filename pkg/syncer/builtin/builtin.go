// Package builtin declares Tenantry's syncers for Kubernetes' built-in
// types: ConfigMaps, Secrets, ServiceAccounts, Services, the EndpointSlices
// a tenant makes itself and PersistentVolumeClaims here, and Pods, with what a tenant's Pods need
// beside their copies, in package pods. (Namespaces are synced by the
// framework itself, for every tenant.) Each is a plain syncer.Syncer
// value; pick them by name with ByName.
package builtin

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
)

// Options tune the built-in syncers for one tenant. The zero Options are
// the safe default.
type Options struct {
	// Pods tunes the Pod syncer; its Policy.Storage applies to claims too.
	Pods pods.Options
	// ServiceTypes are the types of Service the host serves for the
	// tenant; nil: DefaultServiceTypes.
	ServiceTypes []corev1.ServiceType
	// PodCluster says whose Pod an address is, for EndpointSlices; nil:
	// every EndpointSlice is refused.
	PodCluster PodClusterFunc
	// HostServiceRanges are the host's service ranges, in which a
	// Service's host copy may ask for the tenant Service's own cluster IP
	// (see Services); nil: the host picks every IP.
	HostServiceRanges []netip.Prefix
}

// All returns every built-in syncer under the default Options, in an
// order where a type comes after the types its objects refer to.
func All() []syncer.Syncer { return all(Options{}) }

// all is All under opts.
func all(opts Options) []syncer.Syncer {
	return []syncer.Syncer{ConfigMaps(), Secrets(), ServiceAccounts(),
		PersistentVolumeClaims(opts.Pods.Policy.Storage), Services(opts.ServiceTypes, opts.HostServiceRanges), pods.Syncer(opts.Pods),
		EndpointSlices(opts.PodCluster)}
}

// Names lists the built-in syncers' names.
func Names() []string {
	var names []string
	for _, s := range All() {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	return names
}

// ByName returns the built-in syncers with the given names, in All's order,
// under opts. An unknown name is an error that lists the known ones.
func ByName(names []string, opts Options) ([]syncer.Syncer, error) {
	var picked []syncer.Syncer
	known := Names()
	for _, n := range names {
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("unknown syncer %q: known are %s", n, strings.Join(known, ", "))
		}
	}
	for _, s := range all(opts) {
		if slices.Contains(names, s.Name) {
			picked = append(picked, s)
		}
	}
	return picked, nil
}
