package testing

import (
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/cert"
)

// The binaries of the components beside kube-apiserver and etcd, looked up
// in Options.BinaryAssetsDirectory like those.
const (
	binaryControllerManager = "kube-controller-manager"
	binaryScheduler         = "kube-scheduler"
	binaryKwok              = "kwok"
)

// NodeNamePrefix starts the name of every simulated host node:
// kwok-node-1, kwok-node-2, ... (Options.HostNodes).
const NodeNamePrefix = "kwok-node-"

// kwokNodeAnnotation marks the nodes kwok manages; it leaves others alone.
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// tenantDisabledControllers are kube-controller-manager's controllers a
// tenant does not run. Storage is bound, attached and expanded in the host,
// where the volumes are: a tenant's own volume binder would find a claim
// that the host bound (its status synced up) bound to a volume the tenant
// does not have, and mark it Lost.
var tenantDisabledControllers = []string{
	"persistentvolume-binder-controller",
	"persistentvolume-attach-detach-controller",
	"persistentvolume-expander-controller",
}

//go:embed kwok-stages.yaml
var kwokStages []byte

// componentSpec is one component to run beside a cluster's API server.
type componentSpec struct {
	name string
	// path is the program to run; empty, the binary named name in
	// Options.BinaryAssetsDirectory.
	path string
	args []string
	env  []string
	// cleanup, if set, removes what the component leaves behind once its
	// process has ended.
	cleanup func() error
	// kill stops the component with SIGKILL at once, not SIGTERM first:
	// for a process that does not end on SIGTERM and whose end takes its
	// children with it (a node's unshare).
	kill bool
	// ready says why the component is not ready yet, or nil once it is.
	ready func(context.Context) error
}

// components are what a cluster runs besides etcd and kube-apiserver: for
// the host with nodes, kube-controller-manager, kube-scheduler and kwok; for
// a tenant, kube-controller-manager if asked for.
func (c *ControlPlane) components(ctx context.Context, opts *Options) ([]componentSpec, error) {
	runsNodes := c.isHost() && opts.hostRunsPods()
	if !runsNodes && !c.runsControllerManager(opts) {
		return nil, nil // bare API servers pay nothing
	}
	kubeconfig := filepath.Join(c.dir, "admin.kubeconfig")
	data, err := c.Kubeconfig()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		return nil, fmt.Errorf("control plane %q: writing the components' kubeconfig: %w", c.name, err)
	}
	clientset, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		return nil, fmt.Errorf("control plane %q: %w", c.name, err)
	}

	var specs []componentSpec
	if c.runsControllerManager(opts) {
		specs = append(specs, c.controllerManager(kubeconfig, clientset))
	}
	if runsNodes {
		scheduler, err := c.scheduler(kubeconfig)
		if err != nil {
			return nil, err
		}
		specs = append(specs, scheduler)
	}
	if c.isHost() && opts.HostNodes > 0 {
		kwok, err := c.kwok(kubeconfig, clientset, opts.HostNodes, opts.KwokConfig)
		if err != nil {
			return nil, err
		}
		specs = append(specs, kwok)
	}
	if c.isHost() && opts.HostKubelets > 0 {
		if err := grantNodeComponents(ctx, clientset); err != nil {
			return nil, fmt.Errorf("control plane %q: %w", c.name, err)
		}
		// Its Pod schedules once a node is Ready; startControlPlane waits.
		if err := c.deployClusterDNS(ctx, clientset); err != nil {
			return nil, fmt.Errorf("control plane %q: %w", c.name, err)
		}
		registry, addr, err := c.registry(opts)
		if err != nil {
			return nil, err
		}
		specs = append(specs, registry)
		for i := 1; i <= opts.HostKubelets; i++ {
			node, err := c.realNode(opts, i, addr, clientset)
			if err != nil {
				return nil, errors.Join(err, cleanUp(specs))
			}
			specs = append(specs, node)
		}
	}
	return specs, nil
}

func (c *ControlPlane) isHost() bool { return c.name == hostName }

// runsControllerManager says whether opts give this cluster a
// kube-controller-manager.
func (c *ControlPlane) runsControllerManager(opts *Options) bool {
	if c.isHost() {
		return opts.hostRunsPods()
	}
	return opts.TenantControllerManager
}

// controllerManager runs every default controller, without leader
// election (a lost lease would end the process when a test stops the API
// server) and without a serving port (it would be one more port to
// allocate). It is ready once its service account controller has given the
// default namespace its ServiceAccount: its controllers run.
func (c *ControlPlane) controllerManager(kubeconfig string, clientset kubernetes.Interface) componentSpec {
	controllers := "*"
	if !c.isHost() {
		controllers += ",-" + strings.Join(tenantDisabledControllers, ",-")
	}
	return componentSpec{
		name: binaryControllerManager,
		args: []string{
			"--kubeconfig=" + kubeconfig,
			"--leader-elect=false",
			"--secure-port=0",
			"--controllers=" + controllers,
			// Signs the tokens of service account token Secrets, with the
			// key the API server verifies them with.
			"--service-account-private-key-file=" + filepath.Join(c.dir, "sa-signer.key"),
		},
		ready: func(ctx context.Context) error {
			_, err := clientset.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("no default ServiceAccount yet: %w", err)
			}
			return nil
		},
	}
}

// scheduler runs kube-scheduler without leader election, serving its
// health endpoints on a free loopback port: it is ready when /readyz says
// its informers and handlers have synced.
func (c *ControlPlane) scheduler(kubeconfig string) (componentSpec, error) {
	port, err := freePort()
	if err != nil {
		return componentSpec{}, fmt.Errorf("control plane %q: a port for %s: %w", c.name, binaryScheduler, err)
	}
	readyz := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/readyz"
	probe := &http.Client{
		Timeout: 2 * time.Second,
		// The scheduler serves with a certificate it made itself; the probe
		// reads nothing secret.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec
	}
	return componentSpec{
		name: binaryScheduler,
		args: []string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + filepath.Join(c.dir, binaryScheduler),
		},
		ready: httpReady(probe, readyz),
	}, nil
}

// httpReady is a component's readiness: GET url answers 200.
func httpReady(probe *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := probe.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		probe.CloseIdleConnections()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", req.URL.Path, resp.Status)
		}
		return nil
	}
}

// KwokLogLines are what every container on the kit's simulated nodes
// logs (kubectl logs), unless Options.KwokConfig says otherwise.
var KwokLogLines = []string{"kwok: container started", "kwok: serving"}

// kwok runs kwok with the stages of kwok-stages.yaml for the nodes made
// by createNodes, which it manages, and serves their kubelet API on a
// loopback port with a certificate of its own: the logs, exec, attach and
// port-forward of kubeletDebugging. It is ready when every node is Ready
// and carries no taint that keeps Pods away.
func (c *ControlPlane) kwok(kubeconfig string, clientset kubernetes.Interface, nodes int, extra []string) (componentSpec, error) {
	port, err := freePort()
	if err != nil {
		return componentSpec{}, fmt.Errorf("control plane %q: a port for %s: %w", c.name, binaryKwok, err)
	}
	debugging, err := c.kubeletDebugging()
	if err != nil {
		return componentSpec{}, err
	}
	config := append(append([]byte{}, kwokStages...), debugging...)
	for _, doc := range extra {
		config = append(append(config, "\n---\n"...), doc...)
	}
	stages := filepath.Join(c.dir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, config, 0o600); err != nil {
		return componentSpec{}, fmt.Errorf("control plane %q: writing kwok's configuration: %w", c.name, err)
	}
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"})
	if err != nil {
		return componentSpec{}, fmt.Errorf("control plane %q: kwok's serving certificate: %w", c.name, err)
	}
	certFile, keyFile := filepath.Join(c.dir, "kwok-serving.crt"), filepath.Join(c.dir, "kwok-serving.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return componentSpec{}, fmt.Errorf("control plane %q: %w", c.name, err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return componentSpec{}, fmt.Errorf("control plane %q: %w", c.name, err)
	}
	var once sync.Once
	var createErr error
	c.mu.Lock()
	c.nodes, c.kubeletPort = nodes, int32(port)
	c.mu.Unlock()
	return componentSpec{
		name: binaryKwok,
		args: []string{
			"--kubeconfig=" + kubeconfig,
			"--config=" + stages,
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=fake",
			"--node-lease-duration-seconds=40",
			// Loopback only: exec runs commands on this machine.
			"--server-address=" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			"--tls-cert-file=" + certFile,
			"--tls-private-key-file=" + keyFile,
		},
		// kwok reads ~/.kwok/kwok.yaml besides --config unless its work
		// directory is elsewhere: a developer's own settings stay out.
		env: []string{"KWOK_WORKDIR=" + filepath.Join(c.dir, "kwok")},
		ready: func(ctx context.Context) error {
			once.Do(func() { createErr = createNodes(ctx, clientset, nodes, int32(port)) })
			if createErr != nil {
				return createErr
			}
			return nodesReady(ctx, clientset, nodes)
		},
	}, nil
}

// kubeletDebugging is the kwok configuration of what its kubelet API
// answers for every Pod: the logs of KwokLogLines (attach streams the
// same), exec of the command on this machine in a scratch directory, and
// a port-forward to any port that echoes what it receives.
func (c *ControlPlane) kubeletDebugging() ([]byte, error) {
	logs := filepath.Join(c.dir, "kwok-container.log")
	var b strings.Builder
	stamp := time.Now().UTC()
	for i, line := range KwokLogLines {
		// The CRI log format that kwok reads: time, stream, tag, line.
		fmt.Fprintf(&b, "%s stdout F %s\n", stamp.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), line)
	}
	if err := os.WriteFile(logs, []byte(b.String()), 0o600); err != nil {
		return nil, fmt.Errorf("control plane %q: writing the containers' log: %w", c.name, err)
	}
	scratch := filepath.Join(c.dir, "kwok-exec")
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return nil, fmt.Errorf("control plane %q: %w", c.name, err)
	}
	return fmt.Appendf(nil, `
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: kit-logs
spec:
  logs:
  - logsFile: %[1]q
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterAttach
metadata:
  name: kit-attach
spec:
  attaches:
  - logsFile: %[1]q
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata:
  name: kit-exec
spec:
  execs:
  - local:
      workDir: %[2]q
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterPortForward
metadata:
  name: kit-port-forward
spec:
  forwards:
  - command: ["cat"]
`, logs, scratch), nil
}

// createNodes registers the simulated nodes, as kubelets would.
func createNodes(ctx context.Context, clientset kubernetes.Interface, n int, kubeletPort int32) error {
	for i := 1; i <= n; i++ {
		if err := registerNode(ctx, clientset, NodeNamePrefix+strconv.Itoa(i), i, kubeletPort); err != nil {
			return err
		}
	}
	return nil
}

// registerNode registers one simulated node, the i-th, for kwok to run:
// with its own pod CIDR (kwok gives Pods IPs from it) and address. Its
// kubelet is kwok's server on kubeletPort: the host API server, which
// prefers a node's InternalDNS address, reaches it at localhost.
func registerNode(ctx context.Context, clientset kubernetes.Interface, name string, i int, kubeletPort int32) error {
	cidr := fmt.Sprintf("10.244.%d.0/24", i)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				corev1.LabelHostname: name,
				corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64",
				"type": "kwok",
			},
			Annotations: map[string]string{kwokNodeAnnotation: "fake"},
		},
		Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
	}
	if _, err := clientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("registering node %s: %w", name, err)
	}
	// A node's status cannot be set on create. kwok keeps an address that
	// is there, whether this lands before its first status or after.
	patch := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":"10.240.%d.%d"},{"type":"InternalDNS","address":"localhost"},{"type":"Hostname","address":%q}],"daemonEndpoints":{"kubeletEndpoint":{"Port":%d}}}}`,
		i/250, i%250, name, kubeletPort)
	if _, err := clientset.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("setting the address of node %s: %w", name, err)
	}
	return nil
}

// AddNode registers one more simulated node, named name, on a host started
// with Options.HostNodes, and waits until it is Ready to take Pods. Delete
// it as any Node; kwok then forgets it.
func (c *ControlPlane) AddNode(ctx context.Context, name string) error {
	c.mu.Lock()
	if c.nodes == 0 {
		c.mu.Unlock()
		return fmt.Errorf("control plane %q runs no nodes (Options.HostNodes)", c.name)
	}
	c.nodes++
	i, port := c.nodes, c.kubeletPort
	c.mu.Unlock()
	clientset, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		return fmt.Errorf("control plane %q: %w", c.name, err)
	}
	if err := registerNode(ctx, clientset, name, i, port); err != nil {
		return fmt.Errorf("control plane %q: %w", c.name, err)
	}
	var why string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		node, err := clientset.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			why = err.Error()
			return false, nil
		}
		why = notSchedulable(node)
		return why == "", nil
	})
	if err != nil {
		return fmt.Errorf("control plane %q: node %s not ready (%s): %w", c.name, name, why, err)
	}
	return nil
}

// nodesReady says which of the n nodes cannot take Pods yet.
func nodesReady(ctx context.Context, clientset kubernetes.Interface, n int) error {
	list, err := clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var waiting []string
	ready := 0
	for _, node := range list.Items {
		if why := notSchedulable(&node); why != "" {
			waiting = append(waiting, node.Name+": "+why)
			continue
		}
		ready++
	}
	if ready < n {
		return fmt.Errorf("%d of %d nodes ready (%s)", ready, n, strings.Join(waiting, "; "))
	}
	return nil
}

// notSchedulable says why a node cannot take Pods, or "" if it can.
func notSchedulable(node *corev1.Node) string {
	readyStatus := corev1.ConditionUnknown
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			readyStatus = c.Status
		}
	}
	if readyStatus != corev1.ConditionTrue {
		return "Ready is " + string(readyStatus)
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return "tainted " + t.Key
		}
	}
	return ""
}

// startComponents starts every component in parallel and waits until each
// is ready. On failure, the ones started are stopped again.
func (c *ControlPlane) startComponents(ctx context.Context, opts *Options, specs []componentSpec) error {
	logs := make([]*processLog, len(specs))
	for i, spec := range specs {
		var err error
		if logs[i], err = c.openLog(opts, spec.name); err != nil {
			return err
		}
	}
	procs := make([]*process, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, spec := range specs {
		wg.Go(func() {
			procs[i], errs[i] = c.startComponent(ctx, opts, spec, logs[i])
		})
	}
	wg.Wait()
	for _, p := range procs {
		if p != nil {
			c.processes = append(c.processes, p)
		}
	}
	return errors.Join(errs...)
}

func (c *ControlPlane) startComponent(ctx context.Context, opts *Options, spec componentSpec, log *processLog) (*process, error) {
	path := spec.path
	if path == "" {
		path = filepath.Join(opts.BinaryAssetsDirectory, spec.name)
	}
	p, err := startProcess(c.name, spec.name, path, spec.args, spec.env, log)
	if err != nil {
		return nil, errors.Join(err, cleanUp([]componentSpec{spec}))
	}
	p.cleanup, p.kill = spec.cleanup, spec.kill
	if err := p.waitReady(ctx, opts.startTimeout(), spec.ready); err != nil {
		return p, err
	}
	return p, nil
}

// cleanUp runs the cleanup of components that never ran.
func cleanUp(specs []componentSpec) error {
	var errs []error
	for _, spec := range specs {
		if spec.cleanup != nil {
			errs = append(errs, spec.cleanup())
		}
	}
	return errors.Join(errs...)
}

// FreeAddress is a free loopback address (host:port) for a listener of a
// test's own, that this process has not handed out before, below the
// kernel's ephemeral range (see freePortOn). Another process may take it
// before the listener does, as with envtest's own ports; the listener then
// fails, naming the address.
func FreeAddress() (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// freePort is a free loopback port (see freePortOn).
func freePort() (int, error) { return freePortOn(net.IPv4(127, 0, 0, 1)) }
