package netpol

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NamespaceLabelPrefix is the prefix of the labels under which a host
// namespace carries its tenant namespace's labels: keys of Tenantry's own,
// which no tenant writes and no host component reads, so that a tenant's
// namespace selectors select its host namespaces and nothing else.
const NamespaceLabelPrefix = "nsl.tenantry.dev/"

// NamespaceLabelKey is the key under which a host namespace carries its
// tenant namespace's label key: the prefix and a hash of the key, which
// fits a label name whatever the tenant's key is.
func NamespaceLabelKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return NamespaceLabelPrefix + hex.EncodeToString(sum[:20])
}

// NamespaceLabels are the labels a host namespace carries for its tenant
// namespace's labels, values as they are.
func NamespaceLabels(tenant map[string]string) map[string]string {
	out := make(map[string]string, len(tenant))
	for k, v := range tenant {
		out[NamespaceLabelKey(k)] = v
	}
	return out
}

// NamespaceSelector translates a tenant's namespace selector into one of
// host namespaces: its keys those of NamespaceLabels, and ANDed with own,
// the labels that every host namespace of the tenant, and no other
// namespace, carries. An empty selector is every namespace of the tenant.
func NamespaceSelector(tenant metav1.LabelSelector, own map[string]string) *metav1.LabelSelector {
	out := &metav1.LabelSelector{MatchLabels: maps.Clone(own)}
	if out.MatchLabels == nil {
		out.MatchLabels = map[string]string{}
	}
	for k, v := range tenant.MatchLabels {
		out.MatchLabels[NamespaceLabelKey(k)] = v
	}
	for _, r := range tenant.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: NamespaceLabelKey(r.Key), Operator: r.Operator, Values: append([]string(nil), r.Values...),
		})
	}
	return out
}
