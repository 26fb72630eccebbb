// Package charts holds Tenantry's Helm charts: tenantry/ deploys the
// controller-manager as config/default does. Its test lints and renders the
// chart with bin/helm (make helm), holds it to config/, and installs it on a
// real API server.
package charts
