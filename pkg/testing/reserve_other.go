//go:build !unix

package testing

import (
	"net"
)

// portReservation, where sockets cannot share a port, only remembers the
// address a first listener got; listening again may then find the port
// taken, which listenAgain retries.
type portReservation struct {
	addr string
}

func reservePort(ip net.IP) (*portReservation, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	return &portReservation{addr: addr}, nil
}

func (r *portReservation) release() {}

func (r *portReservation) listen() (net.Listener, error) { return net.Listen("tcp", r.addr) }
