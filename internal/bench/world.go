package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryconfig "github.com/tenantry/tenantry/config"
	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
	"github.com/tenantry/tenantry/providers"
)

// managerProcess is bin/manager run by the bench as a user runs it: default
// flags, but for its listeners' addresses and a pprof listener from which
// the bench reads the live heap.
type managerProcess struct {
	*childProcess
	started             time.Time
	metricsURL, heapURL string
	pprofURL            string // the pprof listener's /debug/pprof/
}

// childProcess is a process the bench started, logging to a file of its
// own, whose end is awaited in the background.
type childProcess struct {
	what   string // for errors: "bin/manager"
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // once exited is closed
	log    *os.File
}

// startChild starts cmd, its output to log unless cmd has its own, and
// awaits its end in the background, after beforeWait (which reads what
// cmd's pipes give, if any). what names it in errors.
func startChild(what string, cmd *exec.Cmd, log *os.File, beforeWait func()) (*childProcess, error) {
	if cmd.Stdout == nil {
		cmd.Stdout = log
	}
	if cmd.Stderr == nil {
		cmd.Stderr = log
	}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting %s: %w", what, err)
	}
	c := &childProcess{what: what, cmd: cmd, exited: make(chan struct{}), log: log}
	go func() {
		if beforeWait != nil {
			beforeWait()
		}
		c.err = cmd.Wait()
		_ = log.Close()
		close(c.exited)
	}()
	return c, nil
}

// stop ends the process with SIGTERM, as a kubelet does, and kills it if
// it has not exited in a minute. A process that exits with an error, or
// had before, says so.
func (c *childProcess) stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		if c.err != nil {
			return fmt.Errorf("%s: %w (log: %s)", c.what, c.err, c.log.Name())
		}
		return nil
	case <-time.After(time.Minute):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("%s did not exit within a minute of SIGTERM (log: %s)", c.what, c.log.Name())
	}
}

func startManagerProcess(ctx context.Context, binary, kubeconfig string, extraArgs []string, logPath string) (*managerProcess, error) {
	return startManagerProcessIn(ctx, "", binary, kubeconfig, extraArgs, logPath)
}

// startManagerProcessIn is startManagerProcess in the cgroup whose
// cgroup.procs file is procs (none: ""), from its first instruction on,
// as in a container: the manager reads its memory limit as it starts.
func startManagerProcessIn(ctx context.Context, procs, binary, kubeconfig string, extraArgs []string, logPath string) (*managerProcess, error) {
	var addrs [3]string
	for i := range addrs {
		var err error
		if addrs[i], err = tenantrytest.FreeAddress(); err != nil {
			return nil, err
		}
	}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	m := &managerProcess{
		metricsURL: "http://" + addrs[0] + "/metrics",
		heapURL:    "http://" + addrs[2] + "/debug/pprof/heap?gc=1&debug=1",
		pprofURL:   "http://" + addrs[2] + "/debug/pprof/",
	}
	args := []string{"--kubeconfig", kubeconfig,
		"--metrics-bind-address", addrs[0], "--health-probe-bind-address", addrs[1], "--pprof-bind-address", addrs[2],
		// Replicas share this machine: each its own loopback ports (its
		// tenants' virtual nodes give its kubelet API's).
		"--kubelet-bind-address", "127.0.0.1:0", "--dns-bind-address", "127.0.0.1:0", "--control-plane-activity-bind-address", "127.0.0.1:0",
		// The bench reads the metrics on loopback, over plain HTTP: no
		// token to make, and no TokenReview in the figures.
		"--metrics-secure=false"}
	m.started = time.Now()
	cmd := exec.Command(binary, append(args, extraArgs...)...)
	if procs != "" {
		cmd = exec.Command("sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, procs, binary}, append(args, extraArgs...)...)...)
	}
	if m.childProcess, err = startChild("bin/manager", cmd, log, nil); err != nil {
		return nil, err
	}
	readyz := "http://" + addrs[1] + "/readyz"
	if err := tenantrytest.Poll(ctx, 100*time.Millisecond, time.Minute, func(ctx context.Context) (bool, error) {
		select {
		case <-m.exited:
			return false, fmt.Errorf("bin/manager exited: %v (see %s)", m.err, logPath)
		default:
		}
		_, err := m.get(ctx, readyz)
		return err == nil, nil
	}); err != nil {
		_ = m.stop()
		return nil, fmt.Errorf("waiting for bin/manager to be ready: %w", err)
	}
	return m, nil
}

func (m *managerProcess) get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, nil
}

// scrape is one reading of the manager's metrics endpoint.
type scrape map[string]*dto.MetricFamily

func (m *managerProcess) metrics(ctx context.Context) (scrape, error) {
	body, err := m.get(ctx, m.metricsURL)
	if err != nil {
		return nil, err
	}
	return parseScrape("bin/manager", body)
}

func parseScrape(what string, body []byte) (scrape, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("parsing %s's metrics: %w", what, err)
	}
	return families, nil
}

// value is the first series of a gauge or a counter, or 0.
func (s scrape) value(name string) float64 {
	f := s[name]
	if f == nil || len(f.GetMetric()) == 0 {
		return 0
	}
	m := f.GetMetric()[0]
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}

// requests sums client-go's request counter over the API servers host
// selects.
func (s scrape) requests(host func(string) bool) float64 {
	sum := 0.0
	for _, m := range s["rest_client_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "host" && host(l.GetValue()) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// liveHeap is the manager's heap in use right after a garbage collection,
// read from the runtime statistics at the end of pprof's text heap profile.
func (m *managerProcess) liveHeap(ctx context.Context) (uint64, error) {
	body, err := m.get(ctx, m.heapURL)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapInuse = "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no HeapInuse in bin/manager's heap profile")
}

// profile saves the manager's pprof profile named query (for example
// "heap?gc=1") to path.
func (m *managerProcess) profile(ctx context.Context, query, path string) error {
	body, err := m.get(ctx, m.pprofURL+query)
	if err != nil {
		return fmt.Errorf("reading bin/manager's %s profile: %w", query, err)
	}
	return os.WriteFile(path, body, 0o644)
}

// profileCPU starts a CPU profile of the manager over the next window
// into file name of the Profiles directory, if one is set; wait waits for
// it and says whether it was saved.
func (w *managerWorld) profileCPU(ctx context.Context, name string, window time.Duration) (wait func() error) {
	m := w.manager
	return w.profileInBackground(name, func(path string) error {
		return m.profile(ctx, fmt.Sprintf("profile?seconds=%d", int(window.Seconds())), path)
	})
}

// profileServerCPU is profileCPU of the API server that server talks to.
func (w *managerWorld) profileServerCPU(ctx context.Context, server rest.Interface, name string, window time.Duration) (wait func() error) {
	return w.profileInBackground(name, func(path string) error {
		body, err := server.Get().AbsPath("/debug/pprof/profile").Param("seconds", fmt.Sprint(int(window.Seconds()))).DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("reading an API server's CPU profile for %s: %w", name, err)
		}
		return os.WriteFile(path, body, 0o644)
	})
}

// controlPlaneCPU is the CPU time the world's control planes have spent.
type controlPlaneCPU struct {
	HostAPIServer    float64 `json:"hostAPIServerSeconds"`
	TenantAPIServers float64 `json:"tenantAPIServersSeconds"` // all of them
	Etcd             float64 `json:"etcdSeconds"`             // the host's and the tenants'
}

func (c controlPlaneCPU) minus(before controlPlaneCPU) controlPlaneCPU {
	return controlPlaneCPU{
		HostAPIServer:    round(c.HostAPIServer-before.HostAPIServer, 2),
		TenantAPIServers: round(c.TenantAPIServers-before.TenantAPIServers, 2),
		Etcd:             round(c.Etcd-before.Etcd, 2),
	}
}

// per is c spent over d, per second.
func (c controlPlaneCPU) per(d time.Duration) controlPlaneCPU {
	return controlPlaneCPU{
		HostAPIServer:    round(c.HostAPIServer/d.Seconds(), 2),
		TenantAPIServers: round(c.TenantAPIServers/d.Seconds(), 2),
		Etcd:             round(c.Etcd/d.Seconds(), 2),
	}
}

func (c controlPlaneCPU) String() string {
	return fmt.Sprintf("host API server %.2f s, tenant API servers %.2f s, etcd %.2f s", c.HostAPIServer, c.TenantAPIServers, c.Etcd)
}

// controlPlaneCPU reads the control planes' CPU time from /proc.
func (w *managerWorld) controlPlaneCPU() (controlPlaneCPU, error) {
	var c controlPlaneCPU
	read := func(find func() (int, error), into *float64) error {
		pid, err := find()
		if err != nil {
			return err
		}
		cpu, err := tenantrytest.ProcessCPU(pid)
		*into += cpu.Seconds()
		return err
	}
	if err := read(w.env.Host.APIServerPID, &c.HostAPIServer); err != nil {
		return c, err
	}
	if err := read(w.env.Host.EtcdPID, &c.Etcd); err != nil {
		return c, err
	}
	for _, cp := range w.env.Tenants {
		if err := read(cp.APIServerPID, &c.TenantAPIServers); err != nil {
			return c, err
		}
		if err := read(cp.EtcdPID, &c.Etcd); err != nil {
			return c, err
		}
	}
	return c, nil
}

// profileInBackground runs save, with file name of the Profiles directory,
// if one is set; wait waits for it.
func (w *managerWorld) profileInBackground(name string, save func(path string) error) (wait func() error) {
	if w.o.Profiles == "" {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() { done <- save(filepath.Join(w.o.Profiles, name)) }()
	return func() error { return <-done }
}

// saveProfiles saves the manager's heap, goroutines and metrics, with
// suffix, to the Profiles directory if one is set.
func (w *managerWorld) saveProfiles(ctx context.Context, suffix string) error {
	if w.o.Profiles == "" {
		return nil
	}
	if err := w.manager.profile(ctx, "heap?gc=1", filepath.Join(w.o.Profiles, "heap"+suffix)); err != nil {
		return err
	}
	if err := w.manager.profile(ctx, "goroutine?debug=1", filepath.Join(w.o.Profiles, "goroutines"+suffix+".txt")); err != nil {
		return err
	}
	metrics, err := w.manager.get(ctx, w.manager.metricsURL)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(w.o.Profiles, "metrics"+suffix+".txt"), metrics, 0o644)
}

// sockets counts the open sockets of the manager process.
func (m *managerProcess) sockets() int {
	dir := fmt.Sprintf("/proc/%d/fd", m.cmd.Process.Pid)
	entries, _ := os.ReadDir(dir)
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}

// secretsNamespace holds, in the host of a run with bin/manager, the
// tenants' kubeconfig Secrets and the sharded replicas' Leases: the
// namespace bin/manager is deployed to (config/manager).
const secretsNamespace = "tenantry-system"

// managerWorld is where the bench runs bin/manager as users run it: a host
// with Tenantry's CRDs, tenant API servers with a kubeconfig Secret each in
// the host, and the manager process, started and stopped by the steps.
type managerWorld struct {
	o          Options
	env        *tenantrytest.Environment
	host       client.Client   // the bench's own client, not the manager's
	vcs        ctrlcache.Cache // the VirtualClusters, watched: polling a thousand would load the host
	stopVCs    func()
	tenants    []client.Client // one per tenant API server
	secrets    []string        // a kubeconfig Secret per tenant API server
	hostURL    string          // host of the host API server, as client-go's metrics label it
	hostREST   rest.Interface  // for the host API server's own metrics and profiles
	tenantREST []rest.Interface
	dir        string // logs and the host kubeconfig
	kubeconfig string
	binary     string
	manager    *managerProcess
	// managerCgroup is the cgroup.procs file of the cgroup the manager
	// runs in; "": the bench's own.
	managerCgroup string
}

// startManagerWorld starts a host and servers tenant API servers for the
// step named step, with their kubeconfig Secrets in the host.
func startManagerWorld(ctx context.Context, o Options, step string, servers int, out io.Writer) (*managerWorld, error) {
	return startManagerWorldWith(ctx, o, step, tenantrytest.Options{Tenants: servers}, out)
}

// startManagerWorldWith is startManagerWorld on an Environment of env's
// tenants and nodes.
func startManagerWorldWith(ctx context.Context, o Options, step string, env tenantrytest.Options, out io.Writer) (_ *managerWorld, retErr error) {
	servers := env.Tenants
	binary := o.ManagerBinary
	if binary == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding bin/manager: %w", err)
		}
		binary = filepath.Join(filepath.Dir(self), "manager")
	}
	if _, err := os.Stat(binary); err != nil {
		return nil, fmt.Errorf("this step needs bin/manager (make build): %w", err)
	}
	dir, err := os.MkdirTemp("", "tenantry-"+step+"-")
	if err != nil {
		return nil, err
	}
	w := &managerWorld{o: o, dir: dir, binary: binary}
	defer func() {
		if retErr != nil {
			retErr = w.close(retErr)
		}
	}()
	crds, err := tenantryconfig.CRDs()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "    a host and %d tenant API servers (logs: %s)\n", servers, dir)
	env.HostCRDs, env.BinaryAssetsDirectory, env.LogDirectory = crds, o.Assets, dir
	w.env, err = tenantrytest.Start(ctx, env)
	if err != nil {
		return nil, err
	}
	w.hostURL = strings.TrimPrefix(w.env.Host.Config().Host, "https://")
	hostSet, err := kubernetes.NewForConfig(unthrottled(w.env.Host.Config()))
	if err != nil {
		return nil, err
	}
	w.hostREST = hostSet.CoreV1().RESTClient()
	scheme, err := providers.NewScheme()
	if err != nil {
		return nil, err
	}
	if w.host, err = client.New(unthrottled(w.env.Host.Config()), client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	if w.vcs, err = ctrlcache.New(unthrottled(w.env.Host.Config()), ctrlcache.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	if _, err := w.vcs.GetInformer(ctx, &tenantryv1alpha1.VirtualCluster{}, ctrlcache.BlockUntilSynced(false)); err != nil {
		return nil, err
	}
	vcsCtx, stopVCs := context.WithCancel(context.Background())
	vcsDone := make(chan struct{})
	go func() { defer close(vcsDone); _ = w.vcs.Start(vcsCtx) }()
	w.stopVCs = func() { stopVCs(); <-vcsDone }
	if !w.vcs.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("watching VirtualClusters: the cache did not sync")
	}
	kubeconfig, err := w.env.Host.Kubeconfig()
	if err != nil {
		return nil, err
	}
	w.kubeconfig = filepath.Join(dir, "host.kubeconfig")
	if err := os.WriteFile(w.kubeconfig, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	if err := w.host.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: secretsNamespace}}); err != nil {
		return nil, err
	}
	for _, cp := range w.env.Tenants {
		data, err := cp.Kubeconfig()
		if err != nil {
			return nil, err
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: secretsNamespace, Name: cp.Name() + "-kubeconfig"},
			Data:       map[string][]byte{tenantryv1alpha1.DefaultKubeconfigKey: data},
		}
		if err := w.host.Create(ctx, secret); err != nil {
			return nil, err
		}
		w.secrets = append(w.secrets, secret.Name)
		tenant, err := client.New(unthrottled(cp.Config()), client.Options{})
		if err != nil {
			return nil, err
		}
		w.tenants = append(w.tenants, tenant)
		tenantSet, err := kubernetes.NewForConfig(unthrottled(cp.Config()))
		if err != nil {
			return nil, err
		}
		w.tenantREST = append(w.tenantREST, tenantSet.CoreV1().RESTClient())
	}
	return w, nil
}

// unthrottled is cfg for the bench's own clients, which must never be what
// limits a figure.
func unthrottled(cfg *rest.Config) *rest.Config {
	cfg.QPS, cfg.Burst = 5000, 10000
	// Nor cost the API servers gzip: the bench's watches are the same in
	// the runs it compares, but their compression is not what it measures.
	cfg.DisableCompression = true
	return cfg
}

// close stops the manager and the clusters; it keeps the logs when err is
// not nil, and says where.
func (w *managerWorld) close(err error) error {
	_ = w.stopManager()
	if w.stopVCs != nil {
		w.stopVCs()
	}
	if w.env != nil {
		_ = w.env.Stop()
	}
	if err != nil {
		return fmt.Errorf("%w (logs kept in %s)", err, w.dir)
	}
	_ = os.RemoveAll(w.dir)
	return nil
}

// startManager starts bin/manager with default flags (and the bench's
// --manager-args), logging to logName in the world's directory.
func (w *managerWorld) startManager(ctx context.Context, logName string) error {
	m, err := startManagerProcessIn(ctx, w.managerCgroup, w.binary, w.kubeconfig, w.o.ManagerArgs, filepath.Join(w.dir, logName))
	if err != nil {
		return err
	}
	w.manager = m
	return nil
}

func (w *managerWorld) stopManager() error {
	if w.manager == nil {
		return nil
	}
	err := w.manager.stop()
	w.manager = nil
	return err
}

// ensureVirtualClusters makes the VirtualClusters name(0)..name(n-1),
// spread over the tenant API servers, and clears the status of those that
// exist, so that the manager about to start is seen to make each Ready.
func (w *managerWorld) ensureVirtualClusters(ctx context.Context, n int, name func(int) string) error {
	return parallel(16, n, func(i int) error {
		var vc tenantryv1alpha1.VirtualCluster
		err := w.host.Get(ctx, client.ObjectKey{Name: name(i)}, &vc)
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		if err != nil {
			vc = tenantryv1alpha1.VirtualCluster{
				ObjectMeta: metav1.ObjectMeta{Name: name(i)},
				Spec: tenantryv1alpha1.VirtualClusterSpec{KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{
					Namespace: secretsNamespace, Name: w.secrets[i%len(w.secrets)],
				}},
			}
			return w.host.Create(ctx, &vc)
		}
		vc.Status = tenantryv1alpha1.VirtualClusterStatus{}
		return w.host.Status().Update(ctx, &vc)
	})
}

// readyCount counts the VirtualClusters Ready for their generation, as
// the watch has them.
func (w *managerWorld) readyCount(ctx context.Context) (int, error) {
	var list tenantryv1alpha1.VirtualClusterList
	if err := w.vcs.List(ctx, &list); err != nil {
		return 0, err
	}
	ready := 0
	for _, vc := range list.Items {
		c := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady)
		if c != nil && c.Status == metav1.ConditionTrue && vc.Status.ObservedGeneration == vc.Generation {
			ready++
		}
	}
	return ready, nil
}

// waitReady waits until n VirtualClusters are Ready.
func (w *managerWorld) waitReady(ctx context.Context, n int, timeout time.Duration) error {
	ready := 0
	err := tenantrytest.Poll(ctx, 250*time.Millisecond, timeout, func(ctx context.Context) (bool, error) {
		var err error
		ready, err = w.readyCount(ctx)
		return ready >= n, err
	})
	if err != nil {
		return fmt.Errorf("waiting for %d VirtualClusters to be Ready (%d are): %w", n, ready, err)
	}
	return nil
}

// managerFlags says which flags bin/manager runs with.
func (w *managerWorld) managerFlags() string {
	if len(w.o.ManagerArgs) == 0 {
		return "default flags"
	}
	return "flags " + strings.Join(w.o.ManagerArgs, " ")
}
