package waker

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// identity is what the Waker needs to stand in for a control plane's API
// server, read from its PKI Secret.
type identity struct {
	// serving is the API server's serving certificate.
	serving tls.Certificate
	// frontProxy is the client certificate under which a held request of a
	// certificate's user reaches the API server.
	frontProxy tls.Certificate
	// ca is the tenant's CA: of its users' client certificates, and of the
	// API server's serving certificate; caPEM is it as read.
	ca    *x509.CertPool
	caPEM []byte
	// serverName is what the serving certificate names: the Service's IP.
	serverName string
	// serviceAccounts is the key that signs the tenant's service
	// accounts' tokens.
	serviceAccounts *ecdsa.PublicKey
}

func (id *identity) equal(o *identity) bool {
	return o != nil && bytes.Equal(id.serving.Certificate[0], o.serving.Certificate[0]) &&
		bytes.Equal(id.frontProxy.Certificate[0], o.frontProxy.Certificate[0]) && id.serverName == o.serverName &&
		bytes.Equal(id.caPEM, o.caPEM) && id.serviceAccounts.Equal(o.serviceAccounts)
}

// tenant is one control plane's port, and what it knows of the control
// plane.
type tenant struct {
	w       *Waker
	cluster string
	port    int32
	log     logr.Logger
	server  *http.Server
	// ctx ends when the port is closed for good (the tenant is forgotten,
	// the Waker stops): every request of it ends then.
	ctx    context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	id *identity
	// asUser sends a request under the front-proxy certificate, with its
	// user in headers; asItself sends it as it came (a bearer token).
	asUser, asItself *http.Transport
	// backend is the address of the API server's Pod once it is ready;
	// ready is closed then, or when the tenant sleeps again meanwhile
	// (waiters look again). polling says a poll of the Pod runs for
	// ready.
	backend string
	ready   chan struct{}
	polling bool
	// askedFor is the ready channel that a request of this port last
	// asked to wake for, at askedAt: the wake since the tenant last fell
	// asleep.
	askedFor chan struct{}
	askedAt  time.Time
	// releasing drains the port once it fires; closed says it fired.
	releasing *time.Timer
	closed    bool
}

func newTenant(w *Waker, cluster string, port int32, id *identity) *tenant {
	return &tenant{w: w, cluster: cluster, port: port, ready: make(chan struct{}),
		id: id, asUser: id.transport(&id.frontProxy), asItself: id.transport(nil),
		log: w.opts.Logger.WithValues("cluster", cluster, "port", port)}
}

// serve answers on ln until the tenant closes or ctx ends.
func (t *tenant) serve(ctx context.Context, ln net.Listener) {
	t.ctx, t.cancel = context.WithCancel(ctx)
	t.server = &http.Server{
		Handler: http.HandlerFunc(t.handle),
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// Asked, not required: a bearer token's request has none.
			ClientAuth: tls.VerifyClientCertIfGiven,
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				id := t.identity()
				return &tls.Config{
					MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"},
					Certificates: []tls.Certificate{id.serving}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: id.ca,
				}, nil
			},
		},
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          errorLog(t.log),
		// Every request, upgraded ones too, ends when the port closes for
		// good.
		BaseContext: func(net.Listener) context.Context { return t.ctx },
	}
	go func() {
		if err := t.server.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.log.Error(err, "the waker's port stopped")
		}
	}()
}

// close closes the port and every connection and request of it.
func (t *tenant) close() {
	t.mu.Lock()
	t.closed = true
	if t.releasing != nil {
		t.releasing.Stop()
	}
	t.mu.Unlock()
	t.cancel()
	_ = t.server.Close()
	t.closeIdle()
}

// drain closes the port to new connections, and lets the requests it
// holds or proxies (a watch, an exec session that woke the tenant) go on
// to their end, or until the port closes for good; then calls done.
func (t *tenant) drain(done func()) {
	go func() {
		defer done()
		t.server.SetKeepAlivesEnabled(false)
		if err := t.server.Shutdown(t.ctx); err != nil {
			_ = t.server.Close()
		}
		t.closeIdle()
	}()
}

func (t *tenant) closeIdle() {
	t.mu.Lock()
	transports := []*http.Transport{t.asUser, t.asItself}
	t.mu.Unlock()
	for _, tr := range transports {
		tr.CloseIdleConnections()
	}
}

// hold takes id as the control plane's, and calls a release off; false
// if too late: the port is closing. A control plane that had answered, or
// was being waited for, is waited for anew: it is asleep again.
func (t *tenant) hold(id *identity) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.releasing != nil && !t.releasing.Stop() {
		return false
	}
	t.releasing = nil
	switch {
	case t.backend != "":
		t.backend, t.ready = "", make(chan struct{})
	case t.polling:
		close(t.ready) // its waiters look again
		t.ready = make(chan struct{})
	}
	t.polling = false
	if !id.equal(t.id) {
		t.id = id
		for _, tr := range []*http.Transport{t.asUser, t.asItself} {
			tr.CloseIdleConnections()
		}
		t.asUser, t.asItself = id.transport(&id.frontProxy), id.transport(nil)
	}
	return true
}

// release drains the port after grace: gone is called first, then done
// once the requests it holds are over.
func (t *tenant) release(grace time.Duration, gone, done func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.releasing != nil || t.closed {
		return
	}
	t.releasing = time.AfterFunc(grace, func() {
		t.mu.Lock()
		t.closed = true
		t.mu.Unlock()
		gone()
		t.drain(done)
	})
}

// lost forgets backend, which did not answer: the next request waits for
// the control plane again.
func (t *tenant) lost(backend string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.backend == backend {
		t.backend, t.ready = "", make(chan struct{})
	}
}

func (t *tenant) identity() *identity {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.id
}

// transport reaches the API server's Pod, which it checks by the name its
// Service serves under; with cert, as that client.
func (id *identity) transport(cert *tls.Certificate) *http.Transport {
	config := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: id.ca, ServerName: id.serverName,
		// HTTP/1.1: an upgraded request (exec, port-forward) needs it.
		NextProtos: []string{"http/1.1"}}
	if cert != nil {
		config.Certificates = []tls.Certificate{*cert}
	}
	return &http.Transport{
		TLSClientConfig:     config,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		MaxIdleConnsPerHost: 10,
	}
}
