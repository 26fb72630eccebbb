package syncer

import (
	"crypto/sha256"
	"encoding/base32"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

// The labels and annotations that Tenantry puts on every host object and
// host namespace it creates (ARCHITECTURE.md, "Sync model"). The labels
// are the API's (tenantryv1alpha1), shared with the control planes.
const (
	// LabelManagedBy marks an object as Tenantry's; nothing without it is
	// ever changed or deleted in the host.
	LabelManagedBy = tenantryv1alpha1.LabelManagedBy
	// ManagedByValue is LabelManagedBy's value.
	ManagedByValue = tenantryv1alpha1.ManagedByValue
	// LabelCluster names the VirtualCluster an object belongs to; host
	// events are routed to tenants by it.
	LabelCluster = tenantryv1alpha1.LabelCluster
	// LabelControlPlane names the VirtualCluster whose control plane an
	// object is part of, where Tenantry runs it (spec.controlPlane).
	LabelControlPlane = tenantryv1alpha1.LabelControlPlane

	// AnnotationTenantNamespace, AnnotationTenantName and
	// AnnotationTenantUID identify the tenant object a host object copies.
	AnnotationTenantNamespace = "tenantry.dev/tenant-namespace"
	AnnotationTenantName      = "tenantry.dev/tenant-name"
	AnnotationTenantUID       = "tenantry.dev/tenant-uid"

	// reservedPrefix is the key prefix that only Tenantry may set on host
	// objects: tenants' labels and annotations with it are dropped, so that
	// a tenant cannot pose as another.
	reservedPrefix = "tenantry.dev/"
)

const (
	// maxNamespaceLength is a DNS-1123 label's limit.
	maxNamespaceLength = 63
	// hashLength is how many base32 characters (5 bits each) of
	// SHA-256(cluster, namespace) a host namespace carries: 60 bits, so that
	// finding two pairs with one hash, which long (shortened) names would
	// otherwise make a matter of trying names, is out of reach.
	hashLength = 12
)

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// HostNamespace is the host namespace that holds the objects of tenant
// namespace ns of cluster: "<cluster>-<hash>-<ns>", where the hash is taken
// over both names, shortened (cluster first, then ns) to a valid DNS-1123
// label of at most 63 characters. It is deterministic, and distinct pairs
// get distinct namespaces.
func HostNamespace(cluster, ns string) string {
	sum := sha256.Sum256([]byte(cluster + "/" + ns))
	hash := lowerBase32.EncodeToString(sum[:])[:hashLength]
	c := strings.ReplaceAll(cluster, ".", "-") // a cluster name may be a DNS subdomain
	if len(c)+len(ns)+hashLength+2 <= maxNamespaceLength {
		return c + "-" + hash + "-" + ns
	}
	// Shorten: each name keeps up to half the room, and what the other
	// does not need.
	room := maxNamespaceLength - hashLength - 2
	keepC := min(len(c), max(room/2, room-len(ns)))
	keepN := min(len(ns), room-keepC)
	c = strings.TrimRight(c[:keepC], "-")
	n := strings.TrimRight(ns[:keepN], "-")
	return c + "-" + hash + "-" + n
}

// translator maps one tenant cluster's object keys to the host's.
type translator struct {
	// Cluster is the VirtualCluster's name.
	Cluster string
	// DeniedMetadataPrefixes are the label and annotation key prefixes not
	// copied to the host, each covering its domain and subdomains; nil
	// means DefaultDeniedMetadataPrefixes.
	DeniedMetadataPrefixes []string
	// AllowedMetadataPrefixes are copied although a denied prefix covers
	// them, where they are the longer; nil means
	// DefaultAllowedMetadataPrefixes.
	AllowedMetadataPrefixes []string
	// DenyUnprefixedAnnotations keeps annotation keys without a prefix off
	// host copies (see Syncer.DenyUnprefixedAnnotations).
	DenyUnprefixedAnnotations bool
}

// hostKey is where the host copy of the tenant object key lives: same name,
// in the tenant namespace's host namespace. A cluster-scoped Namespace maps
// to its host namespace's name.
func (t translator) hostKey(tenant types.NamespacedName, clusterScoped bool) types.NamespacedName {
	if clusterScoped {
		return types.NamespacedName{Name: HostNamespace(t.Cluster, tenant.Name)}
	}
	return types.NamespacedName{Namespace: HostNamespace(t.Cluster, tenant.Namespace), Name: tenant.Name}
}

// tenantKey reads the tenant object key off a host object's annotations;
// ok is false when the object is not a copy made for this cluster.
func (t translator) tenantKey(host client.Object) (key types.NamespacedName, ok bool) {
	if !t.owns(host) {
		return types.NamespacedName{}, false
	}
	a := host.GetAnnotations()
	name, hasName := a[AnnotationTenantName]
	if !hasName {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: a[AnnotationTenantNamespace], Name: name}, true
}

// owns says whether host is Tenantry's copy for this cluster.
func (t translator) owns(host client.Object) bool {
	l := host.GetLabels()
	return l[LabelManagedBy] == ManagedByValue && l[LabelCluster] == t.Cluster
}

// hostMetadata sets the host object's identity from the tenant object's:
// name and namespace, Tenantry's labels and annotations, and, when
// copyUserMetadata is set, the tenant's own labels and annotations, except
// reserved ones and those the translator denies (see DeniedMetadataPrefixes).
// A key copied before and now gone from the tenant object (or now denied)
// goes from the host object too: the host copy records, in the annotations
// AnnotationCopiedLabels and AnnotationCopiedAnnotations, which keys came
// from the tenant. Keys that the host added are left alone.
func (t translator) hostMetadata(tenant, host client.Object, clusterScoped, copyUserMetadata bool) {
	key := t.hostKey(client.ObjectKeyFromObject(tenant), clusterScoped)
	host.SetNamespace(key.Namespace)
	host.SetName(key.Name)

	labels := maps.Clone(host.GetLabels())
	if labels == nil {
		labels = map[string]string{}
	}
	annotations := maps.Clone(host.GetAnnotations())
	if annotations == nil {
		annotations = map[string]string{}
	}
	if copyUserMetadata {
		labelsRecord, annotationsRecord := annotations[AnnotationCopiedLabels], annotations[AnnotationCopiedAnnotations]
		if host.GetResourceVersion() != "" && annotations[AnnotationSyncedDigest] == "" {
			// Written before Tenantry kept records: what the tenant has
			// now is presumed copied, so that keys now denied go.
			labelsRecord = orRecord(labelsRecord, tenant.GetLabels())
			annotationsRecord = orRecord(annotationsRecord, tenant.GetAnnotations())
		}
		annotationDenied := t.denied
		if t.DenyUnprefixedAnnotations {
			annotationDenied = func(key string) bool { return !strings.Contains(key, "/") || t.denied(key) }
		}
		copiedLabels := copyAllowed(labels, tenant.GetLabels(), labelsRecord, t.denied)
		copiedAnnotations := copyAllowed(annotations, tenant.GetAnnotations(), annotationsRecord, annotationDenied)
		setRecord(annotations, AnnotationCopiedLabels, copiedLabels)
		setRecord(annotations, AnnotationCopiedAnnotations, copiedAnnotations)
	}
	labels[LabelManagedBy] = ManagedByValue
	labels[LabelCluster] = t.Cluster
	annotations[AnnotationTenantNamespace] = tenant.GetNamespace()
	annotations[AnnotationTenantName] = tenant.GetName()
	annotations[AnnotationTenantUID] = string(tenant.GetUID())
	host.SetLabels(labels)
	host.SetAnnotations(annotations)
}

// Annotations of a host copy that record which of its label and annotation
// keys came from the tenant object (comma-separated, sorted), so that a key
// removed in the tenant is removed in the host, and only such keys.
const (
	AnnotationCopiedLabels      = "tenantry.dev/copied-labels"
	AnnotationCopiedAnnotations = "tenantry.dev/copied-annotations"
)

// DefaultDeniedMetadataPrefixes are the label and annotation key prefixes
// that are not copied from tenant objects to the host by default: keys that
// the host's own add-ons act on, with which a tenant could steer them. A
// prefix covers its domain and every subdomain ("kubernetes.io/" covers
// "volume.kubernetes.io/" and "scheduler.alpha.kubernetes.io/"), so that a
// family of keys is denied whole, the ones yet to come with it. An entry
// without a slash names one key that has no prefix.
//
// Other keys without a prefix are copied: labels such as app are what
// host Services select host Pods by. Pod annotations without a prefix are
// not (see Syncer.DenyUnprefixedAnnotations).
var DefaultDeniedMetadataPrefixes = []string{
	// Kubernetes' own: storage binding, scheduling, load balancers, proxies,
	// the autoscaler, Pod Security, external DNS.
	"kubernetes.io/", "k8s.io/",
	// Networks and network policy.
	"cni.cncf.io/", "multus-cni.io/", "projectcalico.org/", "cilium.io/", "io.cilium/", "metallb.universe.tf/", "metallb.io/",
	// Cloud identities, load balancers and node pools.
	"amazonaws.com/", "azure.workload.identity/", "azure.com/", "gke.io/", "cloud.google.com/", "karpenter.sh/",
	// Meshes, sidecar and agent injection.
	"istio.io/", "linkerd.io/", "kuma.io/", "hashicorp.com/", "dapr.io/", "opentelemetry.io/", "datadoghq.com/", "fluentbit.io/",
	// Certificates, GitOps, backups, admission exemptions, platforms.
	"cert-manager.io/", "argoproj.io/", "fluxcd.io/", "velero.io/", "kyverno.io/", "gatekeeper.sh/", "openshift.io/",
	// The host's monitoring: scrape targets and their ports.
	"prometheus.io/",
	// Kubernetes SIG projects, which act on Pods of the whole host:
	// queueing (kueue.x-k8s.io/), gang scheduling (scheduling.x-k8s.io/),
	// cluster autoscaling.
	"x-k8s.io/",
	// Keys without a prefix: AAD Pod Identity's binding of a Pod to a
	// cloud identity, and Istio's namespace injection switch.
	"aadpodidbinding", "istio-injection",
}

// DefaultAllowedMetadataPrefixes are copied although a denied prefix covers
// them: Kubernetes' keys that describe a workload rather than steer the
// host (the recommended app labels, and the labels and annotations of Jobs'
// and StatefulSets' Pods, which selectors and the downward API read).
var DefaultAllowedMetadataPrefixes = []string{
	"app.kubernetes.io/", "batch.kubernetes.io/", "apps.kubernetes.io/", "statefulset.kubernetes.io/", "kubectl.kubernetes.io/",
}

// denied says whether the translator keeps key from host copies: a key in
// Tenantry's own domain always; else the longest prefix, denied or
// allowed, that covers the key's domain decides, a denied one on a tie; a
// key no prefix covers is copied. A key without a prefix is kept only when
// the denied list names it and the allowed list does not. Keys compare
// without case: the API server accepts annotation keys in any case.
func (t translator) denied(key string) bool {
	denied, allowed := t.DeniedMetadataPrefixes, t.AllowedMetadataPrefixes
	if denied == nil {
		denied = DefaultDeniedMetadataPrefixes
	}
	if allowed == nil {
		allowed = DefaultAllowedMetadataPrefixes
	}
	domain, _, prefixed := strings.Cut(strings.ToLower(key), "/")
	if !prefixed {
		return namesKey(denied, domain) && !namesKey(allowed, domain)
	}
	if covers(strings.TrimSuffix(reservedPrefix, "/"), domain) {
		return true
	}
	return longestCover(denied, domain) >= max(0, longestCover(allowed, domain))
}

// namesKey says whether entries name key, a key without a prefix.
func namesKey(entries []string, key string) bool {
	return slices.ContainsFunc(entries, func(e string) bool { return strings.EqualFold(e, key) })
}

// longestCover is the length of the longest of prefixes that covers domain,
// or -1. Entries without a slash name keys, and cover no domain.
func longestCover(prefixes []string, domain string) int {
	longest := -1
	for _, p := range prefixes {
		d, isPrefix := strings.CutSuffix(strings.ToLower(p), "/")
		if isPrefix && covers(d, domain) {
			longest = max(longest, len(d))
		}
	}
	return longest
}

// covers says whether domain is d or a subdomain of it.
func covers(d, domain string) bool {
	return domain == d || strings.HasSuffix(domain, "."+d)
}

// copyAllowed copies the keys of src that denied allows into dst, removes
// from dst the keys of record (those copied before) that src no longer
// gives, or that are denied now, and returns the keys now copied, sorted.
func copyAllowed(dst, src map[string]string, record string, denied func(key string) bool) []string {
	var copied []string
	for k, v := range src {
		if !denied(k) {
			dst[k] = v
			copied = append(copied, k)
		}
	}
	for _, k := range strings.Split(record, ",") {
		if _, still := src[k]; k != "" && (!still || denied(k)) && !strings.HasPrefix(k, reservedPrefix) {
			delete(dst, k)
		}
	}
	slices.Sort(copied)
	return copied
}

// orRecord is record, or when there is none, the keys of src.
func orRecord(record string, src map[string]string) string {
	if record != "" {
		return record
	}
	return strings.Join(slices.Sorted(maps.Keys(src)), ",")
}

// setRecord stores keys under the record annotation name, or removes it
// when there are none.
func setRecord(annotations map[string]string, name string, keys []string) {
	if len(keys) == 0 {
		delete(annotations, name)
		return
	}
	annotations[name] = strings.Join(keys, ",")
}
