package testing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeletNamePrefix starts the name of every real host node: kit-node-1,
// kit-node-2, ... (Options.HostKubelets).
const KubeletNamePrefix = "kit-node-"

// The programs a real node runs, looked up in Options.BinaryAssetsDirectory
// (`make node` builds them into bin/), and the images directory beside them.
const (
	binaryKubelet     = "kubelet"
	binaryKubeProxy   = "kube-proxy"
	binaryContainerd  = "containerd"
	binaryShim        = "containerd-shim-runc-v2"
	binaryRunc        = "runc"
	binaryKitRegistry = "kitregistry"
	binaryKubeRouter  = "kube-router"
	cniDirectory      = "cni"
	imagesDirectory   = "kit-images"
)

// realNodeBinaries are what Options.HostKubelets needs beside the
// control planes' programs.
var realNodeBinaries = []string{binaryKubelet, binaryKubeProxy, binaryContainerd, binaryShim, binaryRunc, binaryKitRegistry, binaryKubeRouter,
	cniDirectory + "/bridge", cniDirectory + "/host-local", cniDirectory + "/loopback", cniDirectory + "/portmap"}

// realNodeCommands are this machine's programs a real node needs.
var realNodeCommands = []string{"ip", "nsenter", "unshare", "mount", "iptables", "ipset", "conntrack", "sh"}

// SandboxImage is the Pod sandbox image of the kit's nodes, served by the
// kit's registry.
const SandboxImage = "registry.k8s.io/pause:3.10.2"

// RealNodesSupported says why this machine cannot run real nodes
// (Options.HostKubelets), or nil if it can: it needs root, the programs of
// `make node` in dir (the binaries directory), this machine's ip, nsenter,
// unshare, iptables, ipset and conntrack, and cgroups.
func RealNodesSupported(dir string) error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (real nodes create network namespaces, mounts and cgroups)")
	}
	for _, c := range realNodeCommands {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, "the command "+c+" (Debian: iproute2, util-linux, iptables, ipset, conntrack)")
		}
	}
	if dir == "" {
		dir = os.Getenv(AssetsEnv)
	}
	if err := checkAssets(dir, realNodeBinaries); err != nil {
		missing = append(missing, err.Error()+"; `make node` builds them")
	}
	if _, err := os.Stat(filepath.Join(dir, imagesDirectory, "index.json")); err != nil {
		missing = append(missing, "the kit's images in "+filepath.Join(dir, imagesDirectory)+" (`make node` builds them)")
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		missing = append(missing, "cgroups at /sys/fs/cgroup")
	}
	if len(missing) > 0 {
		return fmt.Errorf("this machine cannot run real nodes; missing: %s", strings.Join(missing, "; "))
	}
	return nil
}

// RequireRealNodes skips the test, saying why, when this machine cannot
// run real nodes, or fails it when $CI is true: CI must run every test.
func RequireRealNodes(t testing.TB) {
	t.Helper()
	err := RealNodesSupported("")
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%v", err)
	}
	t.Skipf("%v", err)
}

// WhoAmIScript is a shell script (for the kit's agnhost image, which has
// curl) that asks a Pod's API server who the Pod is, as an in-cluster
// client would: with the mounted token and CA (verified), at
// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT. It prints the
// SelfSubjectReview, JSON.
const WhoAmIScript = `sa=/var/run/secrets/kubernetes.io/serviceaccount
curl -sS --fail-with-body --cacert $sa/ca.crt -H "Authorization: Bearer $(cat $sa/token)" \
  -H 'Content-Type: application/json' -X POST \
  -d '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}' \
  https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/apis/authentication.k8s.io/v1/selfsubjectreviews`

// registry is the kit's image registry: kitregistry serving the images
// of `make node` at the kit's address, for every node's containerd as
// registry.k8s.io and docker.io.
func (c *ControlPlane) registry(opts *Options) (componentSpec, string, error) {
	port, err := freePortOn(c.kit.kitIP())
	if err != nil {
		return componentSpec{}, "", fmt.Errorf("control plane %q: a port for the kit's registry: %w", c.name, err)
	}
	addr := net.JoinHostPort(c.kit.gatewayIP(), strconv.Itoa(port))
	return componentSpec{
		name:  binaryKitRegistry,
		args:  []string{"serve", "--layout", filepath.Join(opts.BinaryAssetsDirectory, imagesDirectory), "--listen", addr},
		ready: httpReady(&http.Client{Timeout: 2 * time.Second}, "http://"+addr+"/kit/ready"),
	}, addr, nil
}

// realNode is the component of the i-th real node: containerd, kube-proxy
// and the kubelet, in the node's network namespace, and in a PID and mount
// namespace of their own, so that every process and mount of the node
// (containers and their shims, volume mounts, Pod network namespaces) ends
// with it, whatever state it is stopped in. It is ready when its Node is
// Ready.
func (c *ControlPlane) realNode(opts *Options, i int, registry string, clientset kubernetes.Interface) (componentSpec, error) {
	name := KubeletNamePrefix + strconv.Itoa(i)
	dir := filepath.Join(c.dir, name)
	bin := opts.BinaryAssetsDirectory
	k := c.kit
	for _, d := range []string{"containerd", "state", "cni/net.d", "cni/ipam", "certs.d", "kubelet", "pki", "pod-logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return componentSpec{}, fmt.Errorf("node %s: %w", name, err)
		}
	}
	cgroupRoot := fmt.Sprintf("/tenantry/kit%d-%s", k.index, name)
	fail := func(err error) (componentSpec, error) {
		return componentSpec{}, errors.Join(fmt.Errorf("node %s: %w", name, err), removeCgroup(cgroupRoot))
	}
	if err := makeCgroup(cgroupRoot); err != nil {
		return fail(err)
	}
	server := "https://" + c.proxy.Addr()
	kubeletConfig, err := c.AddUser("system:node:"+name, "system:nodes")
	if err != nil {
		return fail(err)
	}
	proxyConfig, err := c.AddUser("system:kube-proxy")
	if err != nil {
		return fail(err)
	}
	routerConfig, err := c.AddUser(kubeRouterUser)
	if err != nil {
		return fail(err)
	}
	files := map[string]string{}
	if files["kubelet.kubeconfig"], err = kubeconfigFor(name, server, kubeletConfig); err != nil {
		return fail(err)
	}
	if files["kube-proxy.kubeconfig"], err = kubeconfigFor(name, server, proxyConfig); err != nil {
		return fail(err)
	}
	if files["kube-router.kubeconfig"], err = kubeconfigFor(name, server, routerConfig); err != nil {
		return fail(err)
	}
	sock := filepath.Join(dir, "containerd.sock")
	files["containerd.toml"] = fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q
[ttrpc]
  address = %[10]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  use_local_image_pull = true
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[5]q
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = %[6]q
[plugins."io.containerd.cri.v1.runtime"]
  # Root here may lack CAP_SYS_RESOURCE: a Pod sandbox's negative
  # oom_score_adj would be refused.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = %[9]q
      SystemdCgroup = false
`, filepath.Join(dir, "containerd"), filepath.Join(dir, "state"), sock, filepath.Join(dir, "opt"),
		SandboxImage, filepath.Join(dir, "certs.d"), filepath.Join(bin, cniDirectory), filepath.Join(dir, "cni/net.d"),
		filepath.Join(bin, binaryRunc), sock+".ttrpc")
	// The kit's registry is the only host of both registries: nothing is
	// pulled from elsewhere, and a missing image fails at once.
	for _, upstream := range []string{"registry.k8s.io", "docker.io"} {
		files["certs.d/"+upstream+"/hosts.toml"] = fmt.Sprintf("server = \"http://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", registry, registry)
	}
	files["cni/net.d/10-kit.conflist"] = fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "kit",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, k.podCIDR(i), filepath.Join(dir, "cni/ipam"))
	files["kubelet.yaml"] = fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[2]q}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://%[3]s
cgroupDriver: cgroupfs
cgroupRoot: %[4]s
# This machine's kernel has cgroup v1, which kubelet keeps until 1.38.
failCgroupV1: false
failSwapOn: false
podCIDR: %[5]s
podLogsDir: %[6]q
resolvConf: ""
clusterDNS: [%[7]s]
clusterDomain: %[8]s
registerNode: true
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
syncFrequency: 10s
fileCheckFrequency: 5s
nodeStatusReportFrequency: 10s
shutdownGracePeriod: 0s
`, k.nodeIP(i), filepath.Join(c.dir, "client-ca.crt"), sock, cgroupRoot, k.podCIDR(i), filepath.Join(dir, "pod-logs"), k.clusterDNSIP(), ClusterDomain)
	files["kube-proxy.yaml"] = fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]q
hostnameOverride: %[2]s
mode: iptables
clusterCIDR: %[3]s
bindAddress: %[4]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  # nf_conntrack_max is the machine's, not the node's: leave it.
  maxPerCore: 0
`, filepath.Join(dir, "kube-proxy.kubeconfig"), name, k.clusterCIDR(), k.nodeIP(i))
	for rel, content := range files {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fail(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return fail(err)
		}
	}

	// The node's first process mounts what must be its own over the
	// machine's (/run/netns, where containerd keeps Pods' network
	// namespaces), starts containerd, kube-proxy and kube-router's
	// firewall (NetworkPolicy, with iptables and ipset; nothing else of
	// kube-router's), and becomes the kubelet.
	// Every value is a positional parameter, quoted where it is used.
	script := `set -e
dir=$1 bin=$2 sock=$3 name=$4 ip=$5 services=$6
# The machine's paths that containerd, runc, the CNI plugins and the
# kubelet write to whatever their configuration says: the node's own.
for d in /run/netns /run/containerd /var/lib/cni /var/log/containers; do
  mkdir -p "$d"
  mount -t tmpfs tmpfs "$d"
done
PATH="$bin:$PATH"
export PATH
"$bin/containerd" --config "$dir/containerd.toml" &
i=0
while [ ! -S "$sock" ]; do
  i=$((i+1)); [ $i -lt 600 ] || { echo "containerd did not start"; exit 1; }
  sleep 0.1
done
"$bin/kube-proxy" --config "$dir/kube-proxy.yaml" &
# kube-router ends when its Node is not registered yet: run it again, as
# a DaemonSet's Pod would be.
until "$bin/kube-router" --kubeconfig "$dir/kube-router.kubeconfig" --hostname-override "$name" \
  --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
  --service-cluster-ip-range "$services" --health-port 0 --metrics-port 0 --enable-ipv6=false; do
  sleep 1
done &
exec "$bin/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubelet.kubeconfig" \
  --hostname-override "$name" --node-ip "$ip" --root-dir "$dir/kubelet" --cert-dir "$dir/pki" \
  --node-labels tenantry.dev/kit-node=true
`
	return componentSpec{
		name: name,
		path: "nsenter",
		args: []string{"--net=/run/netns/" + k.netns(i), "--",
			"unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private", "--mount-proc", "--",
			"sh", "-c", script, "sh", dir, bin, sock, name, k.nodeIP(i), k.serviceCIDR()},
		// unshare holds SIGTERM while it waits; its end takes the node.
		kill: true,
		ready: func(ctx context.Context) error {
			node, err := clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("not registered: %w", err)
			}
			if node.Spec.PodCIDR == "" {
				// As kube-controller-manager's IPAM would: the kubelet's
				// own, which clients of the host read off the Node (the
				// host's Pod networks).
				patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%[1]q]}}`, k.podCIDR(i))
				if _, err := clientset.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					return fmt.Errorf("setting its pod CIDR: %w", err)
				}
			}
			if why := notSchedulable(node); why != "" {
				return errors.New(why)
			}
			return nil
		},
		cleanup: func() error { return removeCgroup(cgroupRoot) },
	}, nil
}

// kubeRouterUser is the identity of the nodes' kube-router, which
// grantNodeComponents gives what its firewall reads.
const kubeRouterUser = "system:tenantry-kit:kube-router"

// grantNodeComponents gives the nodes' components what the Node
// authorizer and the default roles do not: kube-router's firewall reads
// Pods, namespaces, nodes and NetworkPolicies, and records Events.
func grantNodeComponents(ctx context.Context, clientset kubernetes.Interface) error {
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "tenantry-kit:kube-router"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "namespaces", "nodes", "services", "endpoints"}, Verbs: read},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: read},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: kubeRouterUser}},
	}
	if _, err := clientset.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("ClusterRole %s: %w", role.Name, err)
	}
	if _, err := clientset.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("ClusterRoleBinding %s: %w", binding.Name, err)
	}
	return nil
}

// kubeconfigFor writes a kubeconfig for a node's component.
func kubeconfigFor(name, server string, cfg *rest.Config) (string, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return "", err
	}
	return string(data), nil
}

// cgroupMounts are the cgroup hierarchies of this machine: the v1
// controllers' mount points, or the one v2 mount.
func cgroupMounts() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		sep := -1
		for j, f := range fields {
			if f == "-" {
				sep = j
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) {
			continue
		}
		switch fields[sep+1] {
		case "cgroup", "cgroup2":
			out = append(out, fields[4])
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	return out, nil
}

// makeCgroup creates a cgroup in every hierarchy: a kubelet's cgroupRoot
// must exist.
func makeCgroup(path string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := os.MkdirAll(filepath.Join(m, path), 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", path, err)
		}
	}
	return nil
}

// removeCgroup removes a cgroup and every cgroup under it, deepest first,
// in every hierarchy; its processes must have ended.
func removeCgroup(path string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		root := filepath.Join(m, path)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for j := len(dirs) - 1; j >= 0; j-- {
			if err := removeEmptyCgroup(dirs[j]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeEmptyCgroup removes one cgroup, waiting a moment for the kernel to
// release the processes that were killed in it.
func removeEmptyCgroup(dir string) error {
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		last = os.Remove(dir)
		return last == nil || errors.Is(last, os.ErrNotExist), nil
	})
	if err != nil {
		return fmt.Errorf("removing cgroup %s: %w", dir, errors.Join(err, last))
	}
	return nil
}
