package kubeletapi

import (
	"net"
	"sync"
	"time"
)

// The kubelet API's bounds. Every tenant Pod can open a connection to it
// (a virtual node's address is the manager's), so none of them may hold
// more than its share of the server; a tenant's own API server calls it
// from one address, a few requests at a time, each stream as long as a
// user keeps it open.
const (
	// maxConnections bounds the open connections, of every source.
	maxConnections = 1024
	// maxConnectionsPerSource bounds one source address's open
	// connections: a tenant API server's streams (logs -f, exec,
	// port-forward) of all its users, one connection each, as many as
	// maxRequestsPerTenant; or a Pod trying its luck.
	maxConnectionsPerSource = maxRequestsPerTenant
	// maxRequestsPerTenant bounds the requests (streams included) that
	// one tenant's API server has open at once: beyond, 429.
	maxRequestsPerTenant = 256

	// readHeaderTimeout bounds a request's TLS handshake and headers;
	// readTimeout its body (an upgraded stream is no longer read under
	// it); idleTimeout a kept-alive connection between requests.
	readHeaderTimeout = 10 * time.Second
	readTimeout       = time.Minute
	idleTimeout       = 90 * time.Second
)

// limitListener accepts at most total connections at once, and at most
// perSource from one source address, and none from an address that
// refused names: a connection beyond, or refused, is closed at once,
// before its TLS handshake.
type limitListener struct {
	net.Listener
	total, perSource int
	refused          func(source string) bool

	mu       sync.Mutex
	open     int
	bySource map[string]int
}

func newLimitListener(l net.Listener, total, perSource int, refused func(source string) bool) *limitListener {
	return &limitListener{Listener: l, total: total, perSource: perSource, refused: refused, bySource: map[string]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		source := sourceOf(c.RemoteAddr())
		if l.refused != nil && l.refused(source) {
			refusedConnections.WithLabelValues(reasonTenantPod).Inc()
			_ = c.Close()
			continue
		}
		l.mu.Lock()
		admitted := l.open < l.total && l.bySource[source] < l.perSource
		if admitted {
			l.open++
			l.bySource[source]++
		}
		l.mu.Unlock()
		if !admitted {
			refusedConnections.WithLabelValues(reasonTooMany).Inc()
			_ = c.Close()
			continue
		}
		return &limitedConn{Conn: c, release: func() { l.release(source) }}, nil
	}
}

func (l *limitListener) release(source string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.bySource[source]--; l.bySource[source] <= 0 {
		delete(l.bySource, source)
	}
}

// limitedConn gives its place back once closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// The reasons of tenantry_kubelet_api_refused_connections_total.
const (
	reasonTooMany   = "too-many"
	reasonTenantPod = "tenant-pod"
)

func sourceOf(a net.Addr) string {
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}
