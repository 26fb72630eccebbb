package syncers

import (
	"fmt"
	"os"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
)

// readHostPolicy reads the manager's default host policy from a YAML or
// JSON file holding a VirtualCluster's spec.hostPolicy.
func readHostPolicy(path string) (tenantryv1alpha1.HostPolicy, error) {
	var p tenantryv1alpha1.HostPolicy
	data, err := os.ReadFile(path)
	if err != nil {
		return p, fmt.Errorf("reading the host policy: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return p, fmt.Errorf("host policy %s: %w", path, err)
	}
	if err := validateHostPolicy(p); err != nil {
		return p, fmt.Errorf("host policy %s: %w", path, err)
	}
	if p.Network != nil && len(p.Network.ControlPlaneCIDRs) > 0 {
		// A default is every tenant's: each tenant's API server would
		// reach every tenant's Pods.
		return p, fmt.Errorf("host policy %s: network.controlPlaneCIDRs belongs to one VirtualCluster's control plane: set it in that VirtualCluster's spec.hostPolicy, never in the default", path)
	}
	return p, nil
}

// podSecurityLevels are Pod Security Admission's levels.
var podSecurityLevels = []string{"restricted", "baseline", "privileged"}

// validateHostPolicy checks, for the default policy, what the CRD's schema
// checks of a VirtualCluster's.
func validateHostPolicy(p tenantryv1alpha1.HostPolicy) error {
	if p.Pods != nil {
		for _, t := range p.Pods.AllowedVolumeTypes {
			if !slices.Contains(optionalVolumeTypes, t) {
				return fmt.Errorf("pods.allowedVolumeTypes: %q is not one of %s", t, strings.Join(optionalVolumeTypes, ", "))
			}
		}
		if l := p.Pods.PodSecurityLevel; l != "" && !slices.Contains(podSecurityLevels, l) {
			return fmt.Errorf("pods.podSecurityLevel: %q is not one of %s", l, strings.Join(podSecurityLevels, ", "))
		}
	}
	if p.Services != nil {
		for _, t := range p.Services.AllowedTypes {
			if !slices.Contains(serviceTypes, t) {
				return fmt.Errorf("services.allowedTypes: %q is not one of ClusterIP, ExternalName, NodePort, LoadBalancer", t)
			}
		}
	}
	if p.Storage != nil {
		for _, c := range append(slices.Clone(p.Storage.AllowedStorageClasses), p.Storage.AllowedVolumeAttributesClasses...) {
			if errs := validation.IsDNS1123Subdomain(c); c != "" && len(errs) > 0 {
				return fmt.Errorf("storage: class %q: %s", c, strings.Join(errs, "; "))
			}
		}
		if slices.Contains(p.Storage.AllowedVolumeAttributesClasses, "") {
			return fmt.Errorf(`storage.allowedVolumeAttributesClasses: "" names no class`)
		}
	}
	if p.Network != nil {
		if _, err := syncer.CanonicalCIDRs(p.Network.DeniedEgressCIDRs); err != nil {
			return fmt.Errorf("network.deniedEgressCIDRs: %w", err)
		}
		if _, err := syncer.CanonicalCIDRs(p.Network.ControlPlaneCIDRs); err != nil {
			return fmt.Errorf("network.controlPlaneCIDRs: %w", err)
		}
	}
	if err := syncer.ValidateBudget(p.Budget); err != nil {
		return fmt.Errorf("budget: %w", err)
	}
	if c := p.Cache; c != nil {
		if c.MaxObjects != nil && *c.MaxObjects < 1 {
			return fmt.Errorf("cache.maxObjects: %d is not a positive number", *c.MaxObjects)
		}
		if c.MaxBytes != nil && c.MaxBytes.Cmp(resource.MustParse("1Mi")) < 0 {
			return fmt.Errorf("cache.maxBytes: %s is less than 1Mi", c.MaxBytes)
		}
	}
	if p.Metadata != nil {
		for _, prefix := range append(slices.Clone(p.Metadata.DeniedPrefixes), p.Metadata.AllowedPrefixes...) {
			if err := checkPrefix(prefix); err != nil {
				return fmt.Errorf("metadata: %w (in lower case)", err)
			}
		}
	}
	return nil
}

// serviceTypes are the types of Service a host policy may allow.
var serviceTypes = []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeExternalName, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}

// optionalVolumeTypes are the volume types a host policy may allow, as the
// CRD's enum lists them.
var optionalVolumeTypes = []string{"hostPath", "nfs", "csi", "iscsi"}

// overDefault is the policy of a VirtualCluster whose spec.hostPolicy is
// vc: each field vc sets replaces def's, but metadata.deniedPrefixes and
// network.deniedEgressCIDRs, which add to def's.
func overDefault(def tenantryv1alpha1.HostPolicy, vc *tenantryv1alpha1.HostPolicy) tenantryv1alpha1.HostPolicy {
	if vc == nil {
		vc = &tenantryv1alpha1.HostPolicy{}
	}
	out := def
	pods := tenantryv1alpha1.PodPolicy{}
	if def.Pods != nil {
		pods = *def.Pods
	}
	if p := vc.Pods; p != nil {
		pods.AllowedPriorityClasses = either(p.AllowedPriorityClasses, pods.AllowedPriorityClasses)
		pods.AllowedSchedulerNames = either(p.AllowedSchedulerNames, pods.AllowedSchedulerNames)
		pods.AllowedRuntimeClasses = either(p.AllowedRuntimeClasses, pods.AllowedRuntimeClasses)
		pods.AllowedVolumeTypes = either(p.AllowedVolumeTypes, pods.AllowedVolumeTypes)
		pods.Tolerations = either(p.Tolerations, pods.Tolerations)
		pods.KeepImagePullPolicy = pods.KeepImagePullPolicy || p.KeepImagePullPolicy
		if p.PodSecurityLevel != "" {
			pods.PodSecurityLevel = p.PodSecurityLevel
		}
		if len(p.NodeSelector) > 0 {
			pods.NodeSelector = p.NodeSelector
		}
	}
	out.Pods = &pods
	metadata := tenantryv1alpha1.MetadataPolicy{}
	if def.Metadata != nil {
		metadata = *def.Metadata
	}
	if m := vc.Metadata; m != nil {
		// Denials add up: a VirtualCluster takes entries off only through
		// allowedPrefixes.
		metadata.DeniedPrefixes = append(slices.Clone(metadata.DeniedPrefixes), m.DeniedPrefixes...)
		metadata.AllowedPrefixes = either(m.AllowedPrefixes, metadata.AllowedPrefixes)
		metadata.CopyUnprefixedPodAnnotations = metadata.CopyUnprefixedPodAnnotations || m.CopyUnprefixedPodAnnotations
	}
	out.Metadata = &metadata
	if def.Network != nil || vc.Network != nil {
		network := tenantryv1alpha1.NetworkPolicy{}
		if def.Network != nil {
			network = *def.Network
		}
		// The control plane's addresses are the VirtualCluster's own,
		// never a default's, which every tenant would share.
		network.ControlPlaneCIDRs = nil
		if n := vc.Network; n != nil {
			// Denials add up, as metadata's do.
			network.DeniedEgressCIDRs = append(slices.Clone(network.DeniedEgressCIDRs), n.DeniedEgressCIDRs...)
			network.ControlPlaneCIDRs = n.ControlPlaneCIDRs
			if n.TranslatePolicies != nil {
				network.TranslatePolicies = n.TranslatePolicies
			}
		}
		out.Network = &network
	}
	if vc.ResourceQuota != nil {
		out.ResourceQuota = vc.ResourceQuota
	}
	if vc.LimitRange != nil {
		out.LimitRange = vc.LimitRange
	}
	if vc.Storage != nil {
		storage := tenantryv1alpha1.StoragePolicy{}
		if def.Storage != nil {
			storage = *def.Storage
		}
		storage.AllowedStorageClasses = either(vc.Storage.AllowedStorageClasses, storage.AllowedStorageClasses)
		storage.AllowedVolumeAttributesClasses = either(vc.Storage.AllowedVolumeAttributesClasses, storage.AllowedVolumeAttributesClasses)
		out.Storage = &storage
	}
	if vc.Services != nil && len(vc.Services.AllowedTypes) > 0 {
		out.Services = vc.Services
	}
	if len(vc.Budget) > 0 {
		out.Budget = vc.Budget
	}
	if c := vc.Cache; c != nil {
		cache := tenantryv1alpha1.CachePolicy{}
		if def.Cache != nil {
			cache = *def.Cache
		}
		if c.MaxObjects != nil {
			cache.MaxObjects = c.MaxObjects
		}
		if c.MaxBytes != nil {
			cache.MaxBytes = c.MaxBytes
		}
		out.Cache = &cache
	}
	return out
}

// cacheLimits are the bounds p sets on what the manager holds of the
// tenant; 0 where it sets none (the registry's default).
func cacheLimits(p tenantryv1alpha1.HostPolicy) clusterregistry.CacheLimits {
	var l clusterregistry.CacheLimits
	if p.Cache == nil {
		return l
	}
	if p.Cache.MaxObjects != nil {
		l.Objects = *p.Cache.MaxObjects
	}
	if p.Cache.MaxBytes != nil {
		l.Bytes = p.Cache.MaxBytes.Value()
	}
	return l
}

// either is a when it is set, else b.
func either[T any](a, b []T) []T {
	if len(a) > 0 {
		return a
	}
	return b
}

// StoragePolicyOf is the storage policy of vc: its host policy over the
// manager's default (Options.HostPolicy), as its claims meet it.
func (o *Options) StoragePolicyOf(vc *tenantryv1alpha1.VirtualCluster) pods.StoragePolicy {
	return storagePolicy(overDefault(o.HostPolicy, vc.Spec.HostPolicy))
}

// storagePolicy is the claims' side of p.
func storagePolicy(p tenantryv1alpha1.HostPolicy) pods.StoragePolicy {
	if p.Storage == nil {
		return pods.StoragePolicy{}
	}
	return pods.StoragePolicy{
		AllowedStorageClasses:          p.Storage.AllowedStorageClasses,
		AllowedVolumeAttributesClasses: p.Storage.AllowedVolumeAttributesClasses,
	}
}

// podPolicy is the Pod syncer's side of p.
func podPolicy(p tenantryv1alpha1.HostPolicy) pods.Policy {
	if p.Pods == nil {
		return pods.Policy{Storage: storagePolicy(p)}
	}
	return pods.Policy{
		Storage:                storagePolicy(p),
		AllowedPriorityClasses: p.Pods.AllowedPriorityClasses,
		AllowedSchedulerNames:  p.Pods.AllowedSchedulerNames,
		AllowedRuntimeClasses:  p.Pods.AllowedRuntimeClasses,
		AllowedVolumeTypes:     p.Pods.AllowedVolumeTypes,
		NodeSelector:           p.Pods.NodeSelector,
		Tolerations:            p.Pods.Tolerations,
		KeepImagePullPolicy:    p.Pods.KeepImagePullPolicy,
	}
}

// metadataPrefixes are the denied and allowed key prefixes of a tenant
// whose policy is p, given the manager's lists (nil: the defaults): p's
// denied prefixes join the denied and leave the allowed, its allowed ones
// the other way round.
func metadataPrefixes(denied, allowed []string, p tenantryv1alpha1.HostPolicy) (outDenied, outAllowed []string) {
	if denied == nil {
		denied = syncer.DefaultDeniedMetadataPrefixes
	}
	if allowed == nil {
		allowed = syncer.DefaultAllowedMetadataPrefixes
	}
	if p.Metadata == nil {
		return denied, allowed
	}
	return moved(denied, p.Metadata.DeniedPrefixes, p.Metadata.AllowedPrefixes),
		moved(allowed, p.Metadata.AllowedPrefixes, p.Metadata.DeniedPrefixes)
}

// moved is base with in added and out taken off, without repeats.
func moved(base, in, out []string) []string {
	list := []string{}
	for _, prefix := range append(slices.Clone(base), in...) {
		if !slices.Contains(out, prefix) && !slices.Contains(list, prefix) {
			list = append(list, prefix)
		}
	}
	return list
}
