package clusterregistry

import (
	"context"
	"errors"
	"net"
	"sync"
)

// errDialerClosed is what a closed cluster's dialer answers.
var errDialerClosed = errors.New("cluster has been stopped: no new connections")

// dialer opens every connection of one cluster, tracks it, and on close cuts
// them all and refuses new ones. Refusing matters: an HTTP transport finishes
// a dial that its canceled request started and parks the connection in its
// idle pool, where it would outlive the cluster.
type dialer struct {
	dial func(ctx context.Context, network, address string) (net.Conn, error)

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

func newDialer(dial func(ctx context.Context, network, address string) (net.Conn, error)) *dialer {
	if dial == nil {
		dial = (&net.Dialer{Timeout: dialTimeout, KeepAlive: dialTimeout}).DialContext
	}
	return &dialer{dial: dial, conns: map[*trackedConn]struct{}{}}
}

// DialContext opens a tracked connection, unless the dialer is closed.
func (d *dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, errDialerClosed
	}
	conn, err := d.dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		_ = conn.Close()
		return nil, errDialerClosed
	}
	tc := &trackedConn{Conn: conn, d: d}
	d.conns[tc] = struct{}{}
	return tc, nil
}

// Close cuts every open connection and refuses new ones.
func (d *dialer) Close() {
	d.mu.Lock()
	d.closed = true
	conns := d.conns
	d.conns = map[*trackedConn]struct{}{}
	d.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	d    *dialer
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.d.mu.Lock()
		delete(c.d.conns, c)
		c.d.mu.Unlock()
	})
	return c.Conn.Close()
}
