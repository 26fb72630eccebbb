package ondemand

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	// Imported for its init, which registers controller-runtime's
	// controller series: it must run before this package's, which takes
	// them over.
	_ "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The results of a reconcile, as controller-runtime labels them.
const (
	labelError        = "error"
	labelRequeueAfter = "requeue_after"
	labelRequeue      = "requeue"
	labelSuccess      = "success"
)

// controller-runtime's controller series. Its controllers register them in
// metrics.Registry; registering the same series again hands back theirs,
// so that a Controller adds to the very series a controller-runtime
// controller of the same name would, and dashboards see no difference.
var (
	reconcileTotal = reuse(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "controller_runtime_reconcile_total",
		Help: "Total number of reconciliations per controller",
	}, []string{"controller", "result"}))
	reconcileErrors = reuse(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "controller_runtime_reconcile_errors_total",
		Help: "Total number of reconciliation errors per controller",
	}, []string{"controller"}))
	terminalErrors = reuse(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "controller_runtime_terminal_reconcile_errors_total",
		Help: "Total number of terminal reconciliation errors per controller",
	}, []string{"controller"}))
	reconcilePanics = reuse(prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "controller_runtime_reconcile_panics_total",
		Help: "Total number of reconciliation panics per controller",
	}, []string{"controller"}))
	reconcileTime = reuse(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "controller_runtime_reconcile_time_seconds",
		Help: "Length of time per reconciliation per controller",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
			1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60},
	}, []string{"controller"}))
	workerCount = reuse(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "controller_runtime_max_concurrent_reconciles",
		Help: "Maximum number of concurrent reconciles per controller",
	}, []string{"controller"}))
	activeWorkers = reuse(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "controller_runtime_active_workers",
		Help: "Number of currently used workers per controller",
	}, []string{"controller"}))
)

// reuse returns the collector of c's series that controller-runtime
// registered, or registers c if it did not.
func reuse[C prometheus.Collector](c C) C {
	err := metrics.Registry.Register(c)
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing
		}
	}
	if err != nil {
		panic(err) // a series of that name but another shape: a programming error
	}
	return c
}

// controllerMetrics are one controller's series, looked up once.
type controllerMetrics struct {
	results                  map[string]prometheus.Counter // by result label
	errors, terminal, panics prometheus.Counter
	active, workers          prometheus.Gauge
	time                     prometheus.Observer
}

func (m *controllerMetrics) total(result string) prometheus.Counter { return m.results[result] }

// metricsFor returns the series of the controller name, which exist from
// then on, as a controller-runtime controller's do from its start.
func metricsFor(name string) *controllerMetrics {
	m := &controllerMetrics{
		results:  map[string]prometheus.Counter{},
		errors:   reconcileErrors.WithLabelValues(name),
		terminal: terminalErrors.WithLabelValues(name),
		panics:   reconcilePanics.WithLabelValues(name),
		active:   activeWorkers.WithLabelValues(name),
		workers:  workerCount.WithLabelValues(name),
		time:     reconcileTime.WithLabelValues(name),
	}
	for _, result := range []string{labelError, labelRequeueAfter, labelRequeue, labelSuccess} {
		m.results[result] = reconcileTotal.WithLabelValues(name, result)
	}
	return m
}
