package waker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/controlplane"
)

// Headers of an aggregating proxy (the API server's --requestheader-*
// flags): the user of a held request's client certificate.
const (
	headerUser        = "X-Remote-User"
	headerGroup       = "X-Remote-Group"
	headerPrefix      = "X-Remote-"
	askAgainAfter     = 10 * time.Second
	askTimeout        = 10 * time.Second
	readyProbeTimeout = 2 * time.Second
)

// caller is who sent a request: a client certificate's user, or a
// service account's token.
type caller struct {
	user   string
	groups []string
	// token: no certificate, a bearer token, passed on as it came.
	token bool
}

func (c caller) String() string {
	if c.token {
		return strconv.Quote(c.user) + " (a token)"
	}
	return strconv.Quote(c.user)
}

// callerOf is who sent r: a client certificate of the tenant's CA
// (verified in the handshake) comes first, as in the API server, then a
// bearer token, which must be one of the tenant's service accounts'.
func (t *tenant) callerOf(r *http.Request) (caller, error) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		subject := r.TLS.VerifiedChains[0][0].Subject
		if subject.CommonName != "" {
			return caller{user: subject.CommonName, groups: subject.Organization}, nil
		}
	}
	auth := r.Header.Get("Authorization")
	if len(auth) <= len("bearer ") || !strings.EqualFold(auth[:len("bearer ")], "bearer ") {
		return caller{}, errors.New("a request with credentials (a client certificate of its CA, or a token of one of its service accounts) wakes it")
	}
	user, err := serviceAccountToken(strings.TrimSpace(auth[len("bearer "):]), t.identity().serviceAccounts, time.Now())
	if err != nil {
		return caller{}, fmt.Errorf("the request's bearer token wakes nothing: %w", err)
	}
	return caller{user: user, token: true}, nil
}

// handle holds r until the control plane answers, asking it to wake, then
// hands it over.
func (t *tenant) handle(w http.ResponseWriter, r *http.Request) {
	who, err := t.callerOf(r)
	t.mu.Lock()
	backend := t.backend
	t.mu.Unlock()
	if backend != "" {
		// Awake: the API server judges any request, as if reached
		// directly; one whose credentials would not wake it goes as it
		// came.
		if err != nil {
			who = caller{token: true}
		}
		t.proxy(w, r, who, backend)
		return
	}
	if err != nil {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, fmt.Sprintf("VirtualCluster %s is asleep: %v", t.cluster, err), 0)
		return
	}
	wake := !strings.Contains(r.UserAgent(), " "+clusterregistry.UserAgentProduct+"/")
	if !wake && t.asleep() {
		// Tenantry's own (a syncer still stopping as the tenant falls
		// asleep) is no one's wish to wake it. One that comes as it
		// wakes (woken by hand, or by a forwarded port) waits for it.
		writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			fmt.Sprintf("VirtualCluster %s is asleep: Tenantry's own requests do not wake it", t.cluster), 0)
		return
	}
	backend, err = t.await(r, who, wake)
	if err != nil {
		if r.Context().Err() == nil {
			writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, err.Error(), 5)
		}
		return
	}
	t.proxy(w, r, who, backend)
}

// await returns the address of the API server's Pod once it answers
// ready, asking the control plane to wake if wake: after holding r within
// its own context and Options.HoldTimeout.
func (t *tenant) await(r *http.Request, who caller, wake bool) (string, error) {
	heldRequests.Inc()
	defer heldRequests.Dec()
	held := time.Now()
	timeout := time.NewTimer(t.w.opts.HoldTimeout)
	defer timeout.Stop()
	// Asked again while it waits, if it sleeps again meanwhile (put to
	// sleep as it woke).
	again := time.NewTicker(askAgainAfter)
	defer again.Stop()
	for {
		t.mu.Lock()
		backend, ready := t.backend, t.ready
		t.mu.Unlock()
		if backend != "" {
			holdSeconds.Observe(time.Since(held).Seconds())
			return backend, nil
		}
		if wake {
			if err := t.askToWake(who, r); err != nil {
				return "", err
			}
		}
		t.watchPod()
		select {
		case <-ready: // answered, or asleep again: look again
		case <-again.C:
		case <-r.Context().Done():
			return "", r.Context().Err()
		case <-timeout.C:
			return "", fmt.Errorf("VirtualCluster %s was asked to wake and did not answer within %s; try again", t.cluster, t.w.opts.HoldTimeout)
		}
	}
}

// asleep: the VirtualCluster is asked to sleep, or cannot be read.
func (t *tenant) asleep() bool {
	ctx, cancel := context.WithTimeout(t.ctx, askTimeout)
	defer cancel()
	var vc tenantryv1alpha1.VirtualCluster
	return t.w.opts.Host.Get(ctx, client.ObjectKey{Name: t.cluster}, &vc) != nil || vc.Asleep()
}

// askToWake asks the VirtualCluster to wake, unless it is awake, or a
// request of this port asked a moment ago since it last fell asleep.
func (t *tenant) askToWake(who caller, r *http.Request) error {
	t.mu.Lock()
	recent := t.askedFor == t.ready && time.Since(t.askedAt) < askAgainAfter
	if !recent {
		t.askedFor, t.askedAt = t.ready, time.Now()
	}
	t.mu.Unlock()
	if recent {
		return nil
	}
	// Not the request's context: a client that gives up still woke it.
	ctx, cancel := context.WithTimeout(t.ctx, askTimeout)
	defer cancel()
	var vc tenantryv1alpha1.VirtualCluster
	err := t.w.opts.Host.Get(ctx, client.ObjectKey{Name: t.cluster}, &vc)
	if err == nil && !vc.Asleep() {
		return nil // awake already: waking, or woken by hand
	}
	if err == nil {
		err = controlplane.AskToWake(ctx, t.w.opts.Host, t.cluster)
	}
	if err != nil {
		t.mu.Lock()
		t.askedFor = nil
		t.mu.Unlock()
		t.log.Error(err, "asking the VirtualCluster to wake for a request")
		return fmt.Errorf("VirtualCluster %s is asleep, and asking it to wake failed: %w", t.cluster, err)
	}
	wakes.Inc()
	request := r.Method + " " + r.URL.Path
	t.log.Info("a request woke the control plane", "user", who.String(), "request", request)
	t.w.mu.Lock()
	woken := t.w.woken
	t.w.mu.Unlock()
	if woken != nil {
		woken(t.cluster, who.String(), request)
	}
	return nil
}

// watchPod polls the control plane's Pod, unless a poll runs already,
// until its API server answers ready: then ready is closed. A poll ends
// too once the tenant sleeps again, or after Options.HoldTimeout, when
// no request it was for still waits: the next one polls anew.
func (t *tenant) watchPod() {
	t.mu.Lock()
	if t.polling || t.backend != "" {
		t.mu.Unlock()
		return
	}
	t.polling = true
	ready := t.ready
	t.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(t.ctx, t.w.opts.HoldTimeout)
		defer cancel()
		var backend string
		err := wait.PollUntilContextCancel(ctx, readyPoll, true, func(ctx context.Context) (bool, error) {
			t.mu.Lock()
			superseded := t.ready != ready
			t.mu.Unlock()
			if superseded {
				return false, errSuperseded
			}
			addr, err := t.readyAddress(ctx)
			if err != nil {
				t.log.V(2).Info("waiting for the control plane", "reason", err.Error())
				return false, nil
			}
			backend = addr
			return true, nil
		})
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.ready != ready {
			return // asleep again: a poll of its own is the new ready's
		}
		t.polling = false
		if err == nil {
			t.backend = backend
			close(ready)
		}
	}()
}

// errSuperseded ends a poll for a wake that is over: the tenant sleeps
// again.
var errSuperseded = errors.New("asleep again")

// readyAddress is the address of one of the control plane's API servers
// whose Pod runs and that answers /readyz.
func (t *tenant) readyAddress(ctx context.Context) (string, error) {
	var pods corev1.PodList
	if err := t.w.opts.APIReader.List(ctx, &pods, client.InNamespace(controlplane.Namespace(t.cluster)),
		client.MatchingLabels(controlplane.APIServerLabels(t.cluster))); err != nil {
		return "", err
	}
	// The first one up, of several, first.
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	errs := []error{errors.New("no Pod of the control plane has an address yet")}
	for _, pod := range pods.Items {
		if pod.Status.PodIP == "" || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(t.w.apiServerPort))
		if err := t.answersReady(ctx, addr); err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", pod.Name, err))
			continue
		}
		return addr, nil
	}
	return "", errors.Join(errs...)
}

// answersReady asks the API server at addr for /readyz, anonymous, as a
// kubelet's probe does.
func (t *tenant) answersReady(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, readyProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/readyz", nil)
	if err != nil {
		return err
	}
	t.mu.Lock()
	transport := t.asItself
	t.mu.Unlock()
	resp, err := transport.RoundTrip(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %s", resp.Status)
	}
	return nil
}

// proxy hands r to the API server at backend, as who.
func (t *tenant) proxy(w http.ResponseWriter, r *http.Request, who caller, backend string) {
	t.mu.Lock()
	transport := t.asItself
	if !who.token {
		transport = t.asUser
	}
	t.mu.Unlock()
	target := &url.URL{Scheme: "https", Host: backend}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			for name := range pr.Out.Header {
				if len(name) >= len(headerPrefix) && strings.EqualFold(name[:len(headerPrefix)], headerPrefix) {
					delete(pr.Out.Header, name)
				}
			}
			if !who.token {
				pr.Out.Header.Set(headerUser, who.user)
				for _, g := range who.groups {
					pr.Out.Header.Add(headerGroup, g)
				}
			}
		},
		Transport:     transport,
		FlushInterval: -1, // watches and logs stream
		ErrorLog:      errorLog(t.log),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return
			}
			// Its Pod may be gone: the next request waits for it again.
			t.lost(backend)
			t.log.V(1).Info("handing a request to the API server failed", "error", err.Error())
			writeStatus(w, http.StatusBadGateway, metav1.StatusReasonServiceUnavailable,
				fmt.Sprintf("VirtualCluster %s woke, and handing the request to its API server failed: %v", t.cluster, err), 1)
		},
	}
	p.ServeHTTP(w, r)
}

// writeStatus answers with a Status, as an API server does; with
// Retry-After when retry > 0 (client-go retries such an answer).
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string, retry int) {
	status := metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: message,
	}
	if retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		status.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(retry)}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(status)
}
