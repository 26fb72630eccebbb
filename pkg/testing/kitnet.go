package testing

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// The kit's network, for an Environment with real nodes
// (Options.HostKubelets). Each Environment takes a kit index N, free
// machine-wide (a lock file of /run/tenantry-kit), and with it the network
// 10.(200+N).0.0/16, all its own:
//
//	10.a.255.1/24    the kit bridge tkit<N> in this machine's network
//	                 namespace: the kit's registry and anything else the
//	                 test process serves to Pods listen here (KitIP)
//	10.a.255.2       the host's API server, on the bridge too
//	10.a.255.(2+i)   tenant i's API server: each its own address, so that
//	                 a policy that denies the host API server's does not
//	                 deny a tenant's
//	10.a.255.(100+k) node k's address (eth0 of its network namespace
//	                 tenantry-kit<N>-node<k>, plugged into the bridge)
//	10.a.k.0/24      node k's pod CIDR, on its bridge cni0
//	10.a.128.0/20    the Service cluster IPs (kube-proxy, per node)
//	169.254.254.169  on the bridge too: an address of the link-local
//	                 range where clouds serve instance metadata
//	                 (CloudMetadataIP), for tests of policies that must
//	                 keep Pods from it; 169.254.169.254 itself stays this
//	                 machine's, whose own cloud may serve it
//
// Every route stays inside these: no node namespace has a default route,
// so no packet of a node or of a Pod leaves the machine; sent anywhere
// else, it is unroutable. Should a node get one (a privileged Pod with the
// node's network can add it), this machine drops what the bridge would
// forward elsewhere.
//
// The kubelets set a few of the kernel's settings (vm.overcommit_memory,
// kernel.panic, ...), which are the machine's, not a node's: the first kit
// records them, and the last one to stop puts them back (kernelSettings).
const (
	kitBaseOctet = 200
	kitMaxIndex  = 40
	kitLockDir   = "/run/tenantry-kit"
	// kitNodeOffset is added to a node's number for the last octet of its
	// address.
	kitNodeOffset = 100
	// kitMaxNodes bounds Options.HostKubelets: node addresses end below
	// .255 and pod CIDRs below the Service range.
	kitMaxNodes = 100
	// kitMaxTenants bounds Options.Tenants beside real nodes: their API
	// servers' addresses end below the nodes'.
	kitMaxTenants = kitNodeOffset - 3
	// cloudMetadataIP stands for where clouds serve instance metadata
	// (169.254.169.254): in the link-local range that the isolation
	// policy denies, and never used by a cloud itself.
	cloudMetadataIP = "169.254.254.169"
)

// kitNetwork is one Environment's share of the machine's network.
type kitNetwork struct {
	index   int
	lock    *os.File
	nodes   int
	tenants int
}

// octet is the second octet of the kit's addresses.
func (k *kitNetwork) octet() int { return kitBaseOctet + k.index }

// bridge is the kit bridge's name.
func (k *kitNetwork) bridge() string { return fmt.Sprintf("tkit%d", k.index) }

// GatewayIP is the address of this machine on the kit network.
func (k *kitNetwork) gatewayIP() string { return fmt.Sprintf("10.%d.255.1", k.octet()) }

// apiServerIP is the address of control plane i's API server: 0 for the
// host, i for tenant-i.
func (k *kitNetwork) apiServerIP(i int) string { return fmt.Sprintf("10.%d.255.%d", k.octet(), 2+i) }

// extraIP is an address of this machine on the kit network apart from
// the gateway, for a server that stands outside the Pod network as a
// shared datastore would (Environment.ExtraIP).
func (k *kitNetwork) extraIP() string { return fmt.Sprintf("10.%d.255.254", k.octet()) }

// nodeIP is node i's address (counting from 1).
func (k *kitNetwork) nodeIP(i int) string {
	return fmt.Sprintf("10.%d.255.%d", k.octet(), kitNodeOffset+i)
}

// podCIDR is node i's pod CIDR.
func (k *kitNetwork) podCIDR(i int) string { return fmt.Sprintf("10.%d.%d.0/24", k.octet(), i) }

// clusterCIDR holds every node's pod CIDR.
func (k *kitNetwork) clusterCIDR() string { return fmt.Sprintf("10.%d.0.0/17", k.octet()) }

// serviceCIDR is the host's Service cluster IP range.
func (k *kitNetwork) serviceCIDR() string { return fmt.Sprintf("10.%d.128.0/20", k.octet()) }

// clusterDNSIP is the host's kube-dns Service's cluster IP, in serviceCIDR.
func (k *kitNetwork) clusterDNSIP() string { return fmt.Sprintf("10.%d.128.10", k.octet()) }

// netns is node i's network namespace.
func (k *kitNetwork) netns(i int) string { return fmt.Sprintf("tenantry-kit%d-node%d", k.index, i) }

// veth is the machine's end of node i's link to the bridge.
func (k *kitNetwork) veth(i int) string { return fmt.Sprintf("tk%dn%d", k.index, i) }

// newKitNetwork takes a free kit index and builds the bridge and one
// network namespace per node. What a crashed run left behind at that index
// is removed first: the index's lock says nobody else holds it.
func newKitNetwork(nodes, tenants int) (_ *kitNetwork, retErr error) {
	if nodes > kitMaxNodes {
		return nil, fmt.Errorf("at most %d real nodes, got %d", kitMaxNodes, nodes)
	}
	if tenants > kitMaxTenants {
		return nil, fmt.Errorf("at most %d tenants beside real nodes, got %d", kitMaxTenants, tenants)
	}
	if err := os.MkdirAll(kitLockDir, 0o755); err != nil {
		return nil, fmt.Errorf("kit network: %w", err)
	}
	k := &kitNetwork{index: -1, nodes: nodes, tenants: tenants}
	for i := range kitMaxIndex {
		f, err := os.OpenFile(filepath.Join(kitLockDir, fmt.Sprintf("%d.lock", i)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("kit network: %w", err)
		}
		if err := tryLock(f); err != nil {
			_ = f.Close()
			continue
		}
		k.index, k.lock = i, f
		break
	}
	if k.lock == nil {
		return nil, fmt.Errorf("kit network: all %d kit networks are in use on this machine", kitMaxIndex)
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, k.teardown())
		}
	}()
	k.removeLeftovers()
	if err := recordKernelSettings(); err != nil {
		return nil, fmt.Errorf("kit network %d: %w", k.index, err)
	}

	br, gw := k.bridge(), k.gatewayIP()
	steps := [][]string{
		{"ip", "link", "add", br, "type", "bridge"},
		{"ip", "addr", "add", gw + "/24", "dev", br},
		{"ip", "addr", "add", cloudMetadataIP + "/32", "dev", br},
		{"ip", "addr", "add", k.extraIP() + "/32", "dev", br},
	}
	for i := 0; i <= tenants; i++ {
		steps = append(steps, []string{"ip", "addr", "add", k.apiServerIP(i) + "/32", "dev", br})
	}
	steps = append(steps, []string{"ip", "link", "set", br, "up"}, k.forwardDrop("-I"))
	for i := 1; i <= nodes; i++ {
		ns, veth := k.netns(i), k.veth(i)
		steps = append(steps,
			[]string{"ip", "netns", "add", ns},
			[]string{"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"ip", "link", "set", veth, "master", br, "up"},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"},
			[]string{"ip", "-n", ns, "addr", "add", k.nodeIP(i) + "/24", "dev", "eth0"},
			[]string{"ip", "-n", ns, "link", "set", "eth0", "up"},
			// The Service range needs a route for connections the node
			// itself opens; kube-proxy rewrites them before they leave.
			[]string{"ip", "-n", ns, "route", "add", k.serviceCIDR(), "via", gw},
			[]string{"ip", "-n", ns, "route", "add", cloudMetadataIP + "/32", "via", gw},
			[]string{"ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
			// Pods of one node talk over its bridge: iptables must see
			// that traffic too (kube-proxy's replies, NetworkPolicy).
			[]string{"ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"},
			// This machine reaches node i's Pods through it.
			[]string{"ip", "route", "add", k.podCIDR(i), "via", k.nodeIP(i)},
		)
		for j := 1; j <= nodes; j++ {
			if j != i {
				steps = append(steps, []string{"ip", "-n", ns, "route", "add", k.podCIDR(j), "via", k.nodeIP(j)})
			}
		}
	}
	if nodes > 0 {
		// The test process reaches cluster IPs through node 1's kube-proxy.
		steps = append(steps, []string{"ip", "route", "add", k.serviceCIDR(), "via", k.nodeIP(1)})
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return nil, fmt.Errorf("kit network %d: %w", k.index, err)
		}
	}
	return k, nil
}

// forwardDrop is the iptables command that inserts (-I) or deletes (-D)
// this machine's rule dropping what the kit's bridge would forward
// elsewhere.
func (k *kitNetwork) forwardDrop(op string) []string {
	return []string{"iptables", "-w", op, "FORWARD", "-i", k.bridge(), "!", "-o", k.bridge(), "-j", "DROP",
		"-m", "comment", "--comment", "tenantry kit " + strconv.Itoa(k.index)}
}

// removeLeftovers deletes what a run that held this index and died left.
func (k *kitNetwork) removeLeftovers() {
	for run(k.forwardDrop("-D")...) == nil {
	}
	// A node's veth first, at once and with its peer: deleting its
	// namespace frees them only as the kernel gets round to it, after a
	// new one of the same name may be wanted.
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	vethPrefix := fmt.Sprintf("tk%dn", k.index)
	for _, line := range strings.Split(string(links), "\n") {
		// "237: tk0n1@if2: <...>"
		if f := strings.Fields(line); len(f) > 1 {
			if name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@"); strings.HasPrefix(name, vethPrefix) {
				_ = run("ip", "link", "del", name)
			}
		}
	}
	_ = run("ip", "link", "del", k.bridge())
	out, _ := exec.Command("ip", "netns", "list").Output()
	prefix := fmt.Sprintf("tenantry-kit%d-node", k.index)
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			_ = run("ip", "netns", "del", f[0])
		}
	}
}

// teardown removes the namespaces and the bridge (and with them every
// route through them) and frees the index.
func (k *kitNetwork) teardown() error {
	if k == nil || k.lock == nil {
		return nil
	}
	var errs []error
	for i := 1; i <= k.nodes; i++ {
		if err := run("ip", "netns", "del", k.netns(i)); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
	}
	if err := run("ip", "link", "del", k.bridge()); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		errs = append(errs, err)
	}
	_ = run(k.forwardDrop("-D")...) // absent when the start failed before it
	errs = append(errs, restoreKernelSettings(k.index))
	_ = k.lock.Close() // releases the lock
	k.lock = nil
	return errors.Join(errs...)
}

// kernelSettings are the machine's settings that a kubelet sets when it
// starts (its setupKernelTunables, unless protectKernelDefaults, which
// would refuse to start on a machine whose values differ).
var kernelSettings = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// kernelSettingsFile holds the machine's values from before the first kit.
var kernelSettingsFile = filepath.Join(kitLockDir, "kernel-settings")

// recordKernelSettings writes the machine's values, unless a kit running
// already did (they are the kubelets' values now).
func recordKernelSettings() error {
	if _, err := os.Stat(kernelSettingsFile); err == nil {
		return nil
	}
	var b strings.Builder
	for _, name := range kernelSettings {
		v, err := os.ReadFile(filepath.Join("/proc/sys", name))
		if err != nil {
			continue // not on this kernel: the kubelet leaves it too
		}
		fmt.Fprintf(&b, "%s %s\n", name, strings.TrimSpace(string(v)))
	}
	if err := os.WriteFile(kernelSettingsFile, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("recording the kernel's settings: %w", err)
	}
	return nil
}

// restoreKernelSettings puts the machine's values back when no kit but
// self (holding index mine) runs any more: it takes every other kit's
// lock for the moment it writes them.
func restoreKernelSettings(mine int) error {
	var held []*os.File
	defer func() {
		for _, f := range held {
			_ = f.Close()
		}
	}()
	for i := range kitMaxIndex {
		if i == mine {
			continue
		}
		f, err := os.OpenFile(filepath.Join(kitLockDir, fmt.Sprintf("%d.lock", i)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return fmt.Errorf("restoring the kernel's settings: %w", err)
		}
		if err := tryLock(f); err != nil {
			_ = f.Close()
			return nil // another kit runs: the last one restores them
		}
		held = append(held, f)
	}
	data, err := os.ReadFile(kernelSettingsFile)
	if err != nil {
		return nil // recorded by nobody
	}
	var errs []error
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if err := os.WriteFile(filepath.Join("/proc/sys", name), []byte(value), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", name, err))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, os.Remove(kernelSettingsFile))
	}
	return errors.Join(errs...)
}

// run runs a command, its output going into the error when it fails.
func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// kitIP parses the gateway address, for listeners.
func (k *kitNetwork) kitIP() net.IP { return net.ParseIP(k.gatewayIP()).To4() }
