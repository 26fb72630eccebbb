package pods

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// StoragePolicy is which host storage a tenant's claims may ask for: the
// claim syncer (package builtin) checks claims with it, the Pod syncer
// the claim templates of Pods' ephemeral volumes. The zero StoragePolicy
// is the safe default: a claim gets the host's default StorageClass, and
// names no class and no VolumeAttributesClass.
type StoragePolicy struct {
	// AllowedStorageClasses are the host StorageClasses a claim may name.
	// "" stands for a claim that names the empty class, which the host
	// binds to any pre-made volume of no class that fits: another
	// tenant's data, or the host's.
	AllowedStorageClasses []string
	// AllowedVolumeAttributesClasses are the host VolumeAttributesClasses
	// a claim may name.
	AllowedVolumeAttributesClasses []string
}

// Check refuses (syncer.Refuse) a claim spec that names a StorageClass or
// a VolumeAttributesClass that p does not allow; what names the claim in
// the refusal ("claim", "volume data's claim template").
func (p StoragePolicy) Check(what string, spec *corev1.PersistentVolumeClaimSpec) error {
	if c := spec.StorageClassName; c != nil && !slices.Contains(p.AllowedStorageClasses, *c) {
		name := "StorageClass " + strconv.Quote(*c)
		if *c == "" {
			name = `the empty StorageClass "" (binding to a pre-made host volume)`
		}
		return syncer.Refuse("%s names %s, which the host does not allow: %s; leave storageClassName unset for the host's default class, "+
			"or allow it in the VirtualCluster's spec.hostPolicy.storage.allowedStorageClasses", what, name, allowedList(p.AllowedStorageClasses))
	}
	if c := spec.VolumeAttributesClassName; c != nil && *c != "" && !slices.Contains(p.AllowedVolumeAttributesClasses, *c) {
		return syncer.Refuse("%s names VolumeAttributesClass %q, which the host does not allow: %s; "+
			"allow it in the VirtualCluster's spec.hostPolicy.storage.allowedVolumeAttributesClasses", what, *c, allowedList(p.AllowedVolumeAttributesClasses))
	}
	return nil
}

// allowedList says which names are allowed, in words.
func allowedList(names []string) string {
	if len(names) == 0 {
		return "none is allowed"
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	return fmt.Sprintf("allowed are %s", strings.Join(quoted, ", "))
}
