package testing

import (
	"net"
	"testing"
)

// Ports handed out for other processes' listeners are free, never handed
// twice, and below the kernel's ephemeral range, where no port the kernel
// picks (a proxy's reservation, an outgoing connection) can be one of them.
func TestFreePortsAreNeverTheKernelsNorHandedTwice(t *testing.T) {
	floor := ephemeralFloor()
	seen := map[int]bool{}
	for range 300 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
		if floor >= 4096 && (port < floor/2 || port >= floor) {
			t.Fatalf("port %d is outside [%d, %d), below the ephemeral range", port, floor/2, floor)
		}
		if !bindable(net.IPv4(127, 0, 0, 1), port) {
			t.Fatalf("port %d is not free", port)
		}
	}
}
