package providers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Bounds of WaitForHost's backoff between tries.
const (
	hostWaitFirstRetry = time.Second
	hostWaitMaxRetry   = 5 * time.Second
	hostProbeTimeout   = 5 * time.Second
)

// WaitForHost returns once the host API server that opts name answers, so
// that a manager started while the host is away (a host restart, a network
// partition, a node that comes up first) waits for it instead of exiting
// into a crash loop. It tries at once, then with backoff (1 s doubling to
// 5 s, with jitter: a host that is back is seen within seconds), and logs
// each failure. Meanwhile it serves the manager's health probe address
// itself: /healthz answers ok (the process
// is alive and need not be restarted), /readyz answers 503 with the reason
// (no traffic, no rollout progress). It frees the address before it
// returns, for the manager's own probes.
//
// The host is there when its /readyz answers ok, or refuses the manager
// (401, 403: that is the manager's to report, not to wait out); a host
// that answers not ready (a 5xx while it starts), or no answer, is waited
// for. A kubeconfig that cannot be loaded, or ctx ending, is an error.
func WaitForHost(ctx context.Context, opts Options, log logr.Logger) error {
	opts.Default()
	cfg, err := NewRestConfig(opts)
	if err != nil {
		return err
	}
	probe, err := newHostProbe(cfg)
	if err != nil {
		return err
	}
	err = probe(ctx)
	if err == nil {
		return nil
	}
	status := &waitStatus{}
	stopServing, serveErr := serveWaitingProbes(opts.HealthProbeBindAddress, status)
	if serveErr != nil {
		return serveErr
	}
	defer stopServing()
	for retry := hostWaitFirstRetry; ; retry = min(2*retry, hostWaitMaxRetry) {
		status.set(err)
		wait := retry/2 + rand.N(retry/2+1) // jitter: replicas do not knock in step
		log.Info("waiting for the host API server", "host", cfg.Host, "error", err.Error(), "retryIn", wait.Round(time.Millisecond).String())
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the host API server %s (last: %v): %w", cfg.Host, err, ctx.Err())
		case <-time.After(wait):
		}
		if err = probe(ctx); err == nil {
			log.Info("the host API server answers", "host", cfg.Host)
			return nil
		}
	}
}

// newHostProbe is a check that the host API server at cfg is there: ready,
// or refusing the manager.
func newHostProbe(cfg *rest.Config) (func(context.Context) error, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = hostProbeTimeout
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("host client: %w", err)
	}
	return func(ctx context.Context) error {
		err := clientset.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		if err == nil || answered(err) {
			return nil
		}
		return err
	}, nil
}

// answered says whether err is the host's verdict on who asks (so the host
// is there): Unauthorized or Forbidden.
func answered(err error) bool {
	return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)
}

// waitStatus is why the manager is not ready yet.
type waitStatus struct {
	mu  sync.Mutex
	err error
}

func (s *waitStatus) set(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *waitStatus) get() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// serveWaitingProbes serves /healthz (ok) and /readyz (503, saying what the
// manager waits for) on addr until stop is called; "0" or "" serves
// nothing. stop returns once addr is free again.
func serveWaitingProbes(addr string, status *waitStatus) (stop func(), err error) {
	if addr == "" || addr == "0" {
		return func() {}, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serving health probes on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		msg := "waiting for the host API server"
		if err := status.get(); err != nil {
			msg += ": " + err.Error()
		}
		http.Error(w, msg, http.StatusServiceUnavailable)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l) // ErrServerClosed once stopped
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}
