package netpol

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// A tenant's namespace selector, translated, selects the host namespaces
// of the tenant namespaces it selects in the tenant, and no namespace of
// another tenant or of the host, whatever labels those carry.
func TestNamespaceSelector(t *testing.T) {
	own := map[string]string{"tenantry.dev/cluster": "alpha"}
	hostNamespace := func(cluster string, tenantLabels map[string]string) labels.Set {
		l := labels.Set(NamespaceLabels(tenantLabels))
		l["tenantry.dev/cluster"] = cluster
		return l
	}
	db := map[string]string{"kubernetes.io/metadata.name": "db", "team": "data"}
	web := map[string]string{"kubernetes.io/metadata.name": "web", "team": "front"}
	namespaces := map[string]labels.Set{
		"alpha/db":  hostNamespace("alpha", db),
		"alpha/web": hostNamespace("alpha", web),
		"beta/db":   hostNamespace("beta", db),
		// A host namespace that carries the tenant's keys as written.
		"host": {"kubernetes.io/metadata.name": "db", "team": "data"},
	}
	for _, tc := range []struct {
		selector metav1.LabelSelector
		want     []string
	}{
		{metav1.LabelSelector{}, []string{"alpha/db", "alpha/web"}},
		{metav1.LabelSelector{MatchLabels: map[string]string{"team": "data"}}, []string{"alpha/db"}},
		{metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"db"}},
		}}, []string{"alpha/web"}},
		{metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "missing", Operator: metav1.LabelSelectorOpExists},
		}}, nil},
	} {
		translated := NamespaceSelector(tc.selector, own)
		sel, err := metav1.LabelSelectorAsSelector(translated)
		if err != nil {
			t.Fatalf("%+v: %v", translated, err)
		}
		var got []string
		for _, name := range []string{"alpha/db", "alpha/web", "beta/db", "host"} {
			if sel.Matches(namespaces[name]) {
				got = append(got, name)
			}
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("namespace selector %+v selects %v, want %v", tc.selector, got, tc.want)
		}
	}
	for _, key := range []string{"a", "example.com/" + strings.Repeat("x", 63), "kubernetes.io/metadata.name"} {
		if errs := validation.IsQualifiedName(NamespaceLabelKey(key)); len(errs) > 0 {
			t.Errorf("NamespaceLabelKey(%q) = %q: %v", key, NamespaceLabelKey(key), errs)
		}
	}
}
