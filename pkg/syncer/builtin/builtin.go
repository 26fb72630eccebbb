// Package builtin declares Tenantry's syncers for Kubernetes' built-in
// types: ConfigMaps, Secrets, ServiceAccounts, Services,
// PersistentVolumeClaims and Pods. (Namespaces are synced by the framework
// itself, for every tenant.) Each is a plain syncer.Syncer value; pick
// them by name with ByName.
package builtin

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// All returns every built-in syncer, in an order where a type comes after
// the types its objects refer to.
func All() []syncer.Syncer { return all(PodPolicy{}) }

// all is All with Pods under policy.
func all(policy PodPolicy) []syncer.Syncer {
	return []syncer.Syncer{ConfigMaps(), Secrets(), ServiceAccounts(), PersistentVolumeClaims(), Services(), PodsWith(policy)}
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
// Pods under policy. An unknown name is an error that lists the known ones.
func ByName(names []string, policy PodPolicy) ([]syncer.Syncer, error) {
	var picked []syncer.Syncer
	known := Names()
	for _, n := range names {
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("unknown syncer %q: known are %s", n, strings.Join(known, ", "))
		}
	}
	for _, s := range all(policy) {
		if slices.Contains(names, s.Name) {
			picked = append(picked, s)
		}
	}
	return picked, nil
}
