package testing

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Ports for the listeners of other processes (an API server, etcd, the
// manager's metrics) are taken below the kernel's ephemeral range, where
// the kernel hands out no port of its own. Asked for port 0, the kernel
// would answer from that range, and once the probe closed, hand the same
// port to the next socket bound to port 0 (a proxy's reservation) before
// the process it was meant for had bound it: two listeners, one port.
var (
	portsMu sync.Mutex
	// given are the ports this process has handed out, never handed again.
	given = map[int]bool{}
)

// ephemeralFloor is the first port of the kernel's ephemeral range, or 0
// where it cannot be read.
func ephemeralFloor() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return 0
	}
	floor, err := strconv.Atoi(fields[0])
	if err != nil {
		return 0
	}
	return floor
}

// freePortOn is a port of ip free now, that this process has not handed
// out before: below the kernel's ephemeral range where it has room (the
// upper half of what lies under it), else the kernel's choice.
func freePortOn(ip net.IP) (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	if floor := ephemeralFloor(); floor >= 4096 {
		low := floor / 2
		for range 200 {
			port := low + rand.IntN(floor-low)
			if given[port] || !bindable(ip, port) {
				continue
			}
			given[port] = true
			return port, nil
		}
	}
	for range 20 {
		l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		if err != nil {
			return 0, fmt.Errorf("finding a free port of %s: %w", ip, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !given[port] {
			given[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("finding a free port of %s: every port tried was taken", ip)
}

// bindable says whether a listener could take ip:port now.
func bindable(ip net.IP, port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
