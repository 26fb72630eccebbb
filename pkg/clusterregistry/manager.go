package clusterregistry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcluster "sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// tenantManager is the manager.Manager that modules get. It behaves as
// the manager it wraps, but remembers every runnable that warms up (each
// controller, with warm-up on), so that Spawn can wait until their sources
// have synced, and it reaches the cluster through the cluster's one HTTP
// client (GetHTTPClient, GetAPIReader), as its cache and client do.
type tenantManager struct {
	manager.Manager
	httpClient *http.Client
	apiReader  client.Reader

	mu      sync.Mutex
	warmups []<-chan struct{}
}

// GetHTTPClient is the cluster's one HTTP client.
func (m *tenantManager) GetHTTPClient() *http.Client { return m.httpClient }

// GetAPIReader reads straight from the API server, through the cluster's
// one HTTP client.
func (m *tenantManager) GetAPIReader() client.Reader { return m.apiReader }

// warmupRunnable is what controller-runtime's manager calls Warmup on before
// it starts a runnable.
type warmupRunnable interface {
	Warmup(ctx context.Context) error
}

// Add implements manager.Manager.
func (m *tenantManager) Add(r manager.Runnable) error {
	if w, ok := r.(warmupRunnable); ok {
		done := make(chan struct{})
		m.mu.Lock()
		m.warmups = append(m.warmups, done)
		m.mu.Unlock()
		r = &trackedWarmup{Runnable: r, warmup: w, done: done}
	}
	return m.Manager.Add(r)
}

// waitReady returns once every runnable added so far has warmed up and the
// cache has synced, or with an error when ctx ends first.
func (m *tenantManager) waitReady(ctx context.Context) error {
	m.mu.Lock()
	warmups := slices.Clone(m.warmups)
	m.mu.Unlock()
	for _, done := range warmups {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("controllers did not sync: %w", ctx.Err())
		}
	}
	if !m.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("cache did not sync: %w", ctx.Err())
	}
	return nil
}

// trackedWarmup signals done when its runnable's warm-up returns. It keeps
// the runnable's leader-election choice, so the manager files it in the same
// group as the runnable itself.
type trackedWarmup struct {
	manager.Runnable
	warmup warmupRunnable
	done   chan struct{}
	once   sync.Once
}

func (t *trackedWarmup) Warmup(ctx context.Context) error {
	defer t.once.Do(func() { close(t.done) })
	return t.warmup.Warmup(ctx)
}

func (t *trackedWarmup) NeedLeaderElection() bool {
	if le, ok := t.Runnable.(manager.LeaderElectionRunnable); ok {
		return le.NeedLeaderElection()
	}
	return true
}

// noWebhookServer stands in for the webhook server of a tenant manager:
// admission webhooks are served by the management manager, which owns the
// process's listeners. Registering a webhook on a tenant manager is a
// programming error and says so.
type noWebhookServer struct{}

var errNoWebhooks = errors.New("tenant managers serve no webhooks: register webhooks with the management manager")

func (noWebhookServer) NeedLeaderElection() bool { return false }

func (noWebhookServer) Register(path string, _ http.Handler) {
	panic(fmt.Sprintf("registering webhook %q: %v", path, errNoWebhooks))
}

func (noWebhookServer) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (noWebhookServer) StartedChecker() healthz.Checker {
	return func(*http.Request) error { return errNoWebhooks }
}

func (noWebhookServer) WebhookMux() *http.ServeMux { return http.NewServeMux() }

// appCluster is a cluster's manager as Cluster hands it out: a
// cluster.Cluster whose getters are the app's own. The registry starts
// and stops the app, so Start refuses.
type appCluster struct {
	ctrlcluster.Cluster
}

// errStartedByRegistry is what appCluster's Start returns.
var errStartedByRegistry = errors.New("the registry starts and stops a cluster's app: Start is not for callers")

// Start implements cluster.Cluster: it returns an error at once.
func (*appCluster) Start(context.Context) error { return errStartedByRegistry }
