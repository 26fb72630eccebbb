//go:build unix

package testing

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// portReservation holds a port for the life of a proxy: a socket
// bound to it, never listening. Nothing else can bind the port, nor take it
// for an outgoing connection, yet with no listener a connection attempt is
// refused, as a stopped server's is. The proxy's listener shares the port
// (SO_REUSEPORT), so it can close and listen again at will.
type portReservation struct {
	fd   int
	addr string
}

// reservePort reserves a free port of ip, an IPv4 address of this machine
// (127.0.0.1, or the kit network's address).
func reservePort(ip net.IP) (*portReservation, error) {
	ip4 := ip.To4()
	if ip4 == nil {
		return nil, fmt.Errorf("reserving a port: %s is not an IPv4 address", ip)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reserving a port: %w", err)
	}
	if err := shareAddress(uintptr(fd)); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte(ip4)}); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("reserving a port: %w", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("reserving a port: %w", err)
	}
	port := sa.(*unix.SockaddrInet4).Port
	return &portReservation{fd: fd, addr: net.JoinHostPort(ip4.String(), strconv.Itoa(port))}, nil
}

func (r *portReservation) release() { _ = unix.Close(r.fd) }

// listenShared listens on the reserved address.
func (r *portReservation) listen() (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var opErr error
		if err := c.Control(func(fd uintptr) { opErr = shareAddress(fd) }); err != nil {
			return err
		}
		return opErr
	}}
	return lc.Listen(context.Background(), "tcp", r.addr)
}

func shareAddress(fd uintptr) error {
	for _, opt := range []int{unix.SO_REUSEADDR, unix.SO_REUSEPORT} {
		if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, 1); err != nil {
			return fmt.Errorf("setting socket option %d: %w", opt, err)
		}
	}
	return nil
}
