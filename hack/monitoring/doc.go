// Package monitoring holds the checks of config/monitoring, in its tests:
// every PromQL expression of the Grafana dashboard and of the alerting
// rules parses, the rules load as Prometheus loads them, each alert says
// how bad it is, what happened and where to read on, and the
// PrometheusRule (prometheusrule.yaml) holds the same groups as the rule
// file. That every metric they name is served is cmd/manager's
// TestMonitoring.
//
//	cd hack/monitoring && go test ./...
//	go test ./... -run TestPrometheusRule -update # rewrite prometheusrule.yaml
package monitoring
