package testing

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metric returns the series of the metric name whose labels include every
// one of labels, from controller-runtime's registry (where Tenantry's
// metrics are, beside controller-runtime's own), or nil when there is none
// yet: a nil series' getters return zeros, so
// Metric(t, name, labels).GetCounter().GetValue() is 0 for a counter that
// has not counted.
func Metric(t testing.TB, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m.GetLabel(), labels) {
				return m
			}
		}
	}
	return nil
}

func hasLabels(have []*dto.LabelPair, want map[string]string) bool {
	n := 0
	for _, l := range have {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
