package testing

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ControlPlane is one running Kubernetes control plane (etcd and
// kube-apiserver) of an Environment.
//
// Clients reach it through a TCP proxy whose address never changes, so a
// *rest.Config or kubeconfig handed out once keeps working after the API
// server is stopped and started again, or after a network cut is healed.
// All methods are safe for concurrent use.
type ControlPlane struct {
	name   string
	dir    string // certificates, kubeconfigs and component files
	env    *envtest.Environment
	proxy  *tcpProxy
	config *rest.Config
	// processes are the components beside the API server, and logs every
	// process's output, the API server's and etcd's included.
	processes []*process
	logs      []*processLog

	mu           sync.Mutex
	apiServerUp  bool
	disconnected bool
	stopped      bool
	// nodes is how many simulated nodes kwok runs here, or has run, and
	// kubeletPort the port of kwok's kubelet API.
	nodes       int
	kubeletPort int32
	// paths are the network paths of single clients (NewPath).
	paths []*tcpProxy

	// kit is the network of the host's real nodes, or nil; with it, every
	// control plane listens on an address of its own there.
	kit *kitNetwork
	// ip is the address the API server and its proxies listen at.
	ip net.IP
	// storage provisions the volumes of a host with real nodes.
	storage *kitStorage
}

// hostName is the host control plane's name.
const hostName = "host"

// startControlPlane starts etcd and kube-apiserver behind a new proxy,
// installs the CRDs found in crdPaths and crds, then starts the components
// that opts ask this cluster to run and waits until they are ready.
func startControlPlane(ctx context.Context, name string, ip net.IP, opts *Options, kit *kitNetwork, crdPaths []string, crds []*apiextensionsv1.CustomResourceDefinition) (_ *ControlPlane, retErr error) {
	// A certificate directory of our own survives an API server restart, so
	// the serving certificate and the client CA stay the same: clients built
	// before the restart still trust the server, and the server them.
	dir, err := os.MkdirTemp("", "tenantry-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("control plane %q: creating its directory: %w", name, err)
	}
	cp := &ControlPlane{name: name, dir: dir, kit: kit, ip: ip}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, cp.stop())
		}
	}()

	if cp.proxy, err = newTCPProxy(cp.ip); err != nil {
		return nil, fmt.Errorf("control plane %q: %w", name, err)
	}
	etcdLog, err := cp.openLog(opts, "etcd")
	if err != nil {
		return nil, err
	}
	apiServerLog, err := cp.openLog(opts, "kube-apiserver")
	if err != nil {
		return nil, err
	}

	cp.env = &envtest.Environment{
		BinaryAssetsDirectory:    opts.BinaryAssetsDirectory,
		CRDDirectoryPaths:        crdPaths,
		CRDs:                     deepCopyCRDs(crds),
		ErrorIfCRDPathMissing:    true,
		UseExistingCluster:       ptr.To(false),
		ControlPlaneStartTimeout: opts.StartTimeout,
		ControlPlaneStopTimeout:  opts.StopTimeout,
	}
	cp.env.ControlPlane.Etcd = &envtest.Etcd{Out: etcdLog, Err: etcdLog}
	apiServer := &envtest.APIServer{CertDir: dir, Out: apiServerLog, Err: apiServerLog}
	if apiServer.Authn, err = newClientCertAuthn(); err != nil {
		return nil, fmt.Errorf("control plane %q: %w", name, err)
	}
	apiServer.Configure().Set("service-account-issuer", "https://"+cp.proxy.Addr())
	if kit != nil {
		// Pods and nodes reach the API server on the kit network, and
		// envtest's serving certificate names the address it listens at.
		if err := cp.listenOnKit(apiServer); err != nil {
			return nil, err
		}
		if err := cp.writeServingCertificates(apiServer); err != nil {
			return nil, err
		}
	}
	if cp.isHost() && opts.hostRunsPods() {
		// kwok's kubelet API answers at each node's InternalDNS address,
		// localhost (see registerNode); a real kubelet at its InternalIP.
		apiServer.Configure().Set("kubelet-preferred-address-types", "InternalDNS,InternalIP,Hostname,ExternalDNS,ExternalIP")
	}
	if kit != nil {
		// Service IPs come from the kit's range, in the host and in every
		// tenant alike, as a virtual cluster is set up: a tenant Service
		// then takes its host copy's cluster IP, which kube-proxy serves.
		apiServer.Configure().Set("service-cluster-ip-range", kit.serviceCIDR())
	}
	if !cp.isHost() && kit != nil && cp.runsControllerManager(opts) {
		// A tenant API server runs outside the host's network, as one
		// elsewhere would: it reaches a webhook's or an aggregated API's
		// Service at its endpoints, the Pods, from this machine's address
		// (KitIP), which the VirtualCluster's
		// hostPolicy.network.controlPlaneCIDRs then lets in. Through a
		// cluster IP, a node's kube-proxy would put the node's address in
		// place of its own. Its controller-manager makes the endpoints.
		apiServer.Configure().Set("enable-aggregator-routing", "true")
	}
	if cp.isHost() && kit != nil {
		// As a real cluster: the host's Pods reach it at the kit address
		// (the kubernetes Service), and kubelets are held to their own
		// Node and Pods.
		apiServer.Configure().Set("advertise-address", cp.ip.String())
		apiServer.Configure().Set("authorization-mode", "Node,RBAC")
		apiServer.Configure().Set("enable-admission-plugins", "NodeRestriction")
	}
	if cp.isHost() && opts.HostAuditLog {
		flags, err := cp.auditFlags()
		if err != nil {
			return nil, err
		}
		for name, value := range flags {
			apiServer.Configure().Set(name, value)
		}
	}
	if cp.runsControllerManager(opts) {
		// envtest turns the ServiceAccount admission plugin off because no
		// controller makes the default ServiceAccounts it requires; a
		// controller-manager does, so the cluster admits Pods as a real one.
		apiServer.Configure().Disable("disable-admission-plugins")
	}
	cp.env.ControlPlane.APIServer = apiServer

	cfg, err := cp.env.Start()
	if err != nil {
		return nil, fmt.Errorf("control plane %q: starting etcd and kube-apiserver: %w\n%s\n%s", name, err, etcdLog.tailReport(), apiServerLog.tailReport())
	}
	cp.apiServerUp = true
	cp.config = rest.CopyConfig(cfg)
	cp.config.Host = "https://" + cp.proxy.Addr()
	if err := cp.routeLocked(); err != nil {
		return nil, err
	}
	if err := cp.waitForKubernetesService(ctx, opts.startTimeout()); err != nil {
		return nil, err
	}
	if err := cp.bindKubeletClient(ctx); err != nil {
		return nil, err
	}

	specs, err := cp.components(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := cp.startComponents(ctx, opts, specs); err != nil {
		return nil, err
	}
	if cp.isHost() && opts.HostKubelets > 0 {
		clientset, err := kubernetes.NewForConfig(cp.Config())
		if err != nil {
			return nil, fmt.Errorf("control plane %q: %w", name, err)
		}
		if err := cp.waitForClusterDNS(ctx, clientset, opts.startTimeout()); err != nil {
			return nil, err
		}
		if cp.storage, err = startKitStorage(ctx, clientset, filepath.Join(cp.dir, "volumes")); err != nil {
			return nil, fmt.Errorf("control plane %q: %w", name, err)
		}
	}
	return cp, nil
}

// waitForKubernetesService waits until the API server has published
// itself as a cluster does: the Service default/kubernetes and an
// EndpointSlice that names an address of it. The API server makes both
// shortly after it first reports ready, and a client that starts at once
// (a manager reading the host API server's addresses for its isolation
// policy) must find them, as it would in any running cluster.
func (c *ControlPlane) waitForKubernetesService(ctx context.Context, timeout time.Duration) error {
	clientset, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		return fmt.Errorf("control plane %q: %w", c.name, err)
	}
	why := "not read yet"
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if _, err := clientset.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
			why = "Service: " + err.Error()
			return false, nil
		}
		slices, err := clientset.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=kubernetes",
		})
		if err != nil {
			why = "EndpointSlices: " + err.Error()
			return false, nil
		}
		for _, es := range slices.Items {
			for _, e := range es.Endpoints {
				if len(e.Addresses) > 0 {
					return true, nil
				}
			}
		}
		why = "no EndpointSlice names an address yet"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("control plane %q: the API server did not publish the Service default/kubernetes (%s): %w", c.name, why, err)
	}
	return nil
}

// bindKubeletClient lets the API server's kubelet client
// (kubeletClientUser) do what it must on kubelets, as a kubeadm cluster
// does: the ClusterRole system:kubelet-api-admin, which the API server
// makes at its start.
func (c *ControlPlane) bindKubeletClient(ctx context.Context) error {
	clientset, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		return fmt.Errorf("control plane %q: %w", c.name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: kubeletClientBinding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: kubeletClientUser.Name}},
	}
	if _, err := clientset.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("control plane %q: binding its kubelet client %s to system:kubelet-api-admin: %w", c.name, kubeletClientUser.Name, err)
	}
	return nil
}

// openLog opens the log of one of the control plane's processes (see
// Options.LogDirectory); attached output goes to this process's stderr.
func (c *ControlPlane) openLog(opts *Options, process string) (*processLog, error) {
	var attach io.Writer
	if opts.attachOutput() {
		attach = os.Stderr
	}
	l, err := newProcessLog(c.name, process, opts.LogDirectory, attach)
	if err != nil {
		return nil, err
	}
	c.logs = append(c.logs, l)
	return l, nil
}

// Name is the control plane's name: "host", or "tenant-<i>" for the i-th
// tenant, counting from 1.
func (c *ControlPlane) Name() string { return c.name }

// Address is the stable host:port where the control plane's API server
// answers, through its proxy.
func (c *ControlPlane) Address() string { return c.proxy.Addr() }

// Config returns a new copy of a cluster-admin *rest.Config for the control
// plane. Callers may change their copy freely.
func (c *ControlPlane) Config() *rest.Config { return rest.CopyConfig(c.config) }

// Kubeconfig returns a self-contained kubeconfig with the same credentials
// as Config, with one cluster, user and context, each named after the control
// plane, and that context current.
func (c *ControlPlane) Kubeconfig() ([]byte, error) {
	return c.kubeconfig(c.config.Host)
}

// kubeconfig is Kubeconfig with another server URL.
func (c *ControlPlane) kubeconfig(server string) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[c.name] = &clientcmdapi.Cluster{
		Server:                   server,
		CertificateAuthorityData: c.config.CAData,
	}
	kc.AuthInfos[c.name] = &clientcmdapi.AuthInfo{
		ClientCertificateData: c.config.CertData,
		ClientKeyData:         c.config.KeyData,
	}
	kc.Contexts[c.name] = &clientcmdapi.Context{Cluster: c.name, AuthInfo: c.name}
	kc.CurrentContext = c.name
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("control plane %q: writing kubeconfig: %w", c.name, err)
	}
	return data, nil
}

// AddUser returns a *rest.Config that authenticates as user name, in
// groups, with a client certificate of the control plane's client CA.
func (c *ControlPlane) AddUser(name string, groups ...string) (*rest.Config, error) {
	u, err := c.env.ControlPlane.AddUser(envtest.User{Name: name, Groups: groups}, c.Config())
	if err != nil {
		return nil, fmt.Errorf("control plane %q: adding user %s: %w", c.name, name, err)
	}
	return u.Config(), nil
}

// StopAPIServer stops the kube-apiserver process; etcd, and so every stored
// object, stays. Until StartAPIServer, connecting to Address is refused and
// open connections are cut, as with a crashed server.
func (c *ControlPlane) StopAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return fmt.Errorf("control plane %q: %w", c.name, ErrStopped)
	}
	if !c.apiServerUp {
		return nil
	}
	c.apiServerUp = false
	if err := c.routeLocked(); err != nil {
		return err
	}
	if err := c.env.ControlPlane.APIServer.Stop(); err != nil {
		return fmt.Errorf("control plane %q: stopping kube-apiserver: %w", c.name, err)
	}
	return nil
}

// StartAPIServer starts the kube-apiserver that StopAPIServer stopped, on the
// same etcd and with the same certificates, and returns once it is healthy.
// It serves at the same Address, so clients built before the stop work again.
func (c *ControlPlane) StartAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return fmt.Errorf("control plane %q: %w", c.name, ErrStopped)
	}
	if c.apiServerUp {
		return nil
	}
	// The process listens on a fresh port behind the proxy, so nothing that
	// took the old port in the meantime can stand in its way.
	s := c.env.ControlPlane.APIServer
	s.SecureServing.Port = ""
	s.SecurePort = 0
	if c.kit != nil {
		if err := c.listenOnKit(s); err != nil {
			return err
		}
	}
	if err := s.Start(); err != nil {
		return fmt.Errorf("control plane %q: restarting kube-apiserver: %w", c.name, err)
	}
	c.apiServerUp = true
	return c.routeLocked()
}

// Disconnect partitions the control plane from its clients while it keeps
// running: open connections are cut, and new ones are accepted but never
// answered, so clients wait until their own timeouts, as when a network
// drops packets. Use StopAPIServer to model a crash instead.
func (c *ControlPlane) Disconnect() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return fmt.Errorf("control plane %q: %w", c.name, ErrStopped)
	}
	c.disconnected = true
	return c.routeLocked()
}

// Reconnect heals a partition made by Disconnect.
func (c *ControlPlane) Reconnect() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return fmt.Errorf("control plane %q: %w", c.name, ErrStopped)
	}
	c.disconnected = false
	return c.routeLocked()
}

// Path is a network path of its own to a control plane's API server, for
// one client: disconnecting it partitions that client alone while every
// other client goes on, as when one replica of a controller loses its
// network. It follows the API server through restarts, as Address does.
type Path struct {
	cp    *ControlPlane
	proxy *tcpProxy
}

// NewPath opens a new network path to the control plane's API server. It
// closes with the control plane.
func (c *ControlPlane) NewPath() (*Path, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, fmt.Errorf("control plane %q: %w", c.name, ErrStopped)
	}
	proxy, err := newTCPProxy(c.ip)
	if err != nil {
		return nil, fmt.Errorf("control plane %q: %w", c.name, err)
	}
	if err := proxy.set(forward, c.proxy.Addr()); err != nil {
		proxy.close()
		return nil, fmt.Errorf("control plane %q: %w", c.name, err)
	}
	c.paths = append(c.paths, proxy)
	return &Path{cp: c, proxy: proxy}, nil
}

// Config is the control plane's Config, through the path.
func (p *Path) Config() *rest.Config {
	config := p.cp.Config()
	config.Host = "https://" + p.proxy.Addr()
	return config
}

// Kubeconfig is the control plane's Kubeconfig, through the path.
func (p *Path) Kubeconfig() ([]byte, error) {
	return p.cp.kubeconfig("https://" + p.proxy.Addr())
}

// Disconnect partitions the path's client, as ControlPlane.Disconnect does
// all of them: open connections are cut, new ones never answered.
func (p *Path) Disconnect() error {
	return p.proxy.set(blackhole, "")
}

// Reconnect heals the path's partition.
func (p *Path) Reconnect() error {
	return p.proxy.set(forward, p.cp.proxy.Addr())
}

// routeLocked points the proxy where the control plane's state says: a
// partition wins over everything, then a stopped API server.
func (c *ControlPlane) routeLocked() error {
	var err error
	switch {
	case c.disconnected:
		err = c.proxy.set(blackhole, "")
	case !c.apiServerUp:
		err = c.proxy.set(refuse, "")
	default:
		err = c.proxy.set(forward, c.apiServerAddr())
	}
	if err != nil {
		return fmt.Errorf("control plane %q: %w", c.name, err)
	}
	return nil
}

// stop tears the control plane down for good and removes its files: the
// components first, so that they do not fight a vanishing API server, then
// the proxy, the API server and etcd. It also cleans up after a start that
// failed halfway.
func (c *ControlPlane) stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	if c.storage != nil {
		c.storage.close()
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, p := range c.processes {
		wg.Go(func() {
			if err := p.stop(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, p := range c.paths {
		p.close()
	}
	if c.proxy != nil {
		c.proxy.close()
	}
	if c.env != nil {
		if err := c.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("control plane %q: stopping etcd and kube-apiserver: %w", c.name, err))
		}
	}
	errs = append(errs, closeLogs(c.logs...))
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, fmt.Errorf("control plane %q: removing its directory: %w", c.name, err))
	}
	return errors.Join(errs...)
}

// processStopTimeout bounds how long a component may take to end on
// SIGTERM before it is killed.
const processStopTimeout = 10 * time.Second

// listenOnKit makes the API server listen at a free port of its address
// on the kit network.
func (c *ControlPlane) listenOnKit(s *envtest.APIServer) error {
	port, err := freePortOn(c.ip)
	if err != nil {
		return fmt.Errorf("control plane %q: %w", c.name, err)
	}
	s.SecureServing.Address = c.ip.String()
	s.SecureServing.Port = strconv.Itoa(port)
	s.SecurePort = port
	return nil
}

// writeServingCertificates writes the API server's serving certificate and
// service account key, in place of envtest's, for a control plane on the
// kit network: the certificate names the kit address, and for the host
// also what its Pods reach it at (the kubernetes Service's cluster IP and
// names), as a real cluster's does.
func (c *ControlPlane) writeServingCertificates(s *envtest.APIServer) error {
	ips := []net.IP{net.IPv4(127, 0, 0, 1), c.ip}
	dns := []string{"localhost"}
	if c.isHost() {
		_, svc, err := net.ParseCIDR(c.kit.serviceCIDR())
		if err != nil {
			return err
		}
		first := append(net.IP{}, svc.IP.To4()...)
		first[3]++
		ips = append(ips, first)
		dns = append(dns, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
	}
	chain, key, err := cert.GenerateSelfSignedCertKey(c.ip.String(), ips, dns)
	if err != nil {
		return fmt.Errorf("control plane %q: serving certificate: %w", c.name, err)
	}
	// The chain is the serving certificate, then the CA that signed it.
	leaf, rest := pem.Decode(chain)
	ca, _ := pem.Decode(rest)
	if leaf == nil || ca == nil {
		return fmt.Errorf("control plane %q: serving certificate: no CA in the chain", c.name)
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("control plane %q: service account key: %w", c.name, err)
	}
	saPEM := pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey))
	for name, data := range map[string][]byte{
		"apiserver.crt": pem.EncodeToMemory(leaf),
		"apiserver.key": key,
		// The API server reads the public key from the private one.
		"sa-signer.crt": saPEM,
		"sa-signer.key": saPEM,
	} {
		if err := os.WriteFile(filepath.Join(c.dir, name), data, 0o600); err != nil {
			return fmt.Errorf("control plane %q: %w", c.name, err)
		}
	}
	s.SecureServing.CA = pem.EncodeToMemory(ca)
	return nil
}

// apiServerAddr is where the kube-apiserver process itself listens.
func (c *ControlPlane) apiServerAddr() string {
	l := c.env.ControlPlane.APIServer.SecureServing.ListenAddr
	return net.JoinHostPort(l.Address, l.Port)
}

// deepCopyCRDs keeps the caller's CRDs apart from what envtest writes into
// them while installing.
func deepCopyCRDs(crds []*apiextensionsv1.CustomResourceDefinition) []*apiextensionsv1.CustomResourceDefinition {
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(crds))
	for _, c := range crds {
		out = append(out, c.DeepCopy())
	}
	return out
}
