package testing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// proxyMode is how the proxy treats clients.
type proxyMode int

const (
	// forward pipes every connection to the backend.
	forward proxyMode = iota
	// refuse closes the listening socket, so that connecting fails with
	// "connection refused", as with a stopped server.
	refuse
	// blackhole accepts connections and never answers them, as a network
	// partition that drops packets: clients wait until their own timeouts.
	blackhole
)

// tcpProxy gives an API server an address that outlives the process behind
// it: a stopped, restarted (on another port) or cut-off API server is reached
// at the same host:port throughout. TLS passes through untouched; the API
// server's serving certificate names the address the proxy listens at
// (127.0.0.1, or the kit network's address where real nodes run).
type tcpProxy struct {
	addr    string
	reserve *portReservation

	mu       sync.Mutex
	listener net.Listener // nil while refusing
	mode     proxyMode
	backend  string
	conns    map[net.Conn]struct{}
	closed   bool

	wg sync.WaitGroup
}

// relistenTimeout bounds how long the proxy tries to take its port back when
// it stops refusing.
const relistenTimeout = 10 * time.Second

// newTCPProxy reserves a free port of ip (loopback, or the kit network's
// address), refusing connections until set names a backend.
func newTCPProxy(ip net.IP) (*tcpProxy, error) {
	r, err := reservePort(ip)
	if err != nil {
		return nil, fmt.Errorf("the API server proxy: %w", err)
	}
	return &tcpProxy{addr: r.addr, reserve: r, conns: map[net.Conn]struct{}{}, mode: refuse}, nil
}

// Addr is the stable host:port that clients connect to.
func (p *tcpProxy) Addr() string { return p.addr }

// set switches the proxy to mode, forwarding to backend in mode forward.
// Every switch cuts the connections open at the time: they belonged to a
// process or a network path that is no longer there.
func (p *tcpProxy) set(mode proxyMode, backend string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("proxy is closed")
	}
	p.cutLocked()
	p.mode, p.backend = mode, backend
	if mode == refuse {
		if p.listener != nil {
			_ = p.listener.Close()
			p.listener = nil
		}
		return nil
	}
	if p.listener != nil {
		return nil
	}
	l, err := listenAgain(p.reserve)
	if err != nil {
		return err
	}
	p.listener = l
	p.wg.Add(1)
	go p.serve(l)
	return nil
}

// listenAgain listens on the proxy's reserved address again. Where ports
// cannot be shared, another socket may hold it for a moment; keep trying
// for a while.
func listenAgain(r *portReservation) (net.Listener, error) {
	var (
		l       net.Listener
		lastErr error
	)
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, relistenTimeout, true,
		func(context.Context) (bool, error) {
			l, lastErr = r.listen()
			return lastErr == nil, nil
		})
	if err != nil {
		return nil, fmt.Errorf("listening again at %s: %w", r.addr, errors.Join(err, lastErr))
	}
	return l, nil
}

// close stops listening, cuts every connection and waits for the proxy's
// goroutines to end.
func (p *tcpProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.cutLocked()
	if p.listener != nil {
		_ = p.listener.Close()
		p.listener = nil
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.reserve.release()
}

func (p *tcpProxy) cutLocked() {
	for c := range p.conns {
		reset(c)
	}
	clear(p.conns)
}

func (p *tcpProxy) serve(l net.Listener) {
	defer p.wg.Done()
	for {
		client, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		mode, backend := p.mode, p.backend
		if mode == blackhole && !p.closed {
			p.conns[client] = struct{}{} // held silent until the next switch
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		if mode != forward {
			reset(client)
			continue
		}
		p.wg.Add(1)
		go p.forward(client, backend)
	}
}

// forward pipes client to a new connection to backend until either side ends
// or the proxy cuts them.
func (p *tcpProxy) forward(client net.Conn, backend string) {
	defer p.wg.Done()
	server, err := net.Dial("tcp", backend)
	if err != nil {
		reset(client)
		return
	}
	if !p.track(backend, client, server) {
		reset(client)
		reset(server)
		return
	}
	var pipes sync.WaitGroup
	pipes.Go(func() { pipe(server, client) })
	pipes.Go(func() { pipe(client, server) })
	pipes.Wait()
	p.untrack(client, server)
}

// track registers a connection pair, unless the proxy switched away from
// backend while it was being dialled.
func (p *tcpProxy) track(backend string, conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode != forward || p.backend != backend {
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *tcpProxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
		_ = c.Close()
	}
}

// pipe copies until src ends, then closes dst so that the other direction
// ends too.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
}

// reset closes c with an RST rather than a FIN, so that the peer sees the
// connection fail rather than end cleanly.
func reset(c net.Conn) {
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = c.Close()
}
