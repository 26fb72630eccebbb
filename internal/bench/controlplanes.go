package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/snapshot"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// controlPlaneBudget is how long the control planes of one round may take
// to be ready.
const controlPlaneBudget = 10 * time.Minute

// runControlPlanes measures, on real nodes and through bin/manager, the
// control planes Tenantry runs (spec.controlPlane): how long one takes to
// be ready, then how long each of o.ControlPlanes created at once takes,
// and what one costs at rest (memory, CPU), read from the kubelets'
// summaries, hence how many fit in a GiB of the host's memory.
func runControlPlanes(ctx context.Context, o Options, out io.Writer) (_ []result, retErr error) {
	if o.ControlPlanes < 1 {
		return nil, fmt.Errorf("--control-planes (%d) must be positive", o.ControlPlanes)
	}
	if err := tenantrytest.RealNodesSupported(o.Assets); err != nil {
		return nil, err
	}
	w, err := startManagerWorldWith(ctx, o, "control-planes", tenantrytest.Options{HostKubelets: 2}, out)
	if err != nil {
		return nil, err
	}
	defer func() { retErr = w.close(retErr) }()
	kitIP := w.env.KitIP()
	args := append([]string{"--dns-bind-address", net.JoinHostPort(kitIP, "53"), "--dns-nameserver", kitIP, "--dns-upstream", "127.0.0.1:9",
		"--control-plane-manager-cidrs", w.env.KitNetworkCIDR(), "--control-plane-wake-address", kitIP,
		"--control-plane-activity-bind-address", net.JoinHostPort(kitIP, "0")}, w.o.ManagerArgs...)
	if w.manager, err = startManagerProcess(ctx, w.binary, w.kubeconfig, args, w.dir+"/manager.log"); err != nil {
		return nil, err
	}

	fmt.Fprintln(out, "    one control plane")
	one, err := w.controlPlanesReady(ctx, []string{"cp-one"})
	if err != nil {
		return nil, err
	}
	names := make([]string, o.ControlPlanes)
	for i := range names {
		names[i] = fmt.Sprintf("cp-%02d", i+1)
	}
	fmt.Fprintf(out, "    %d control planes at once\n", len(names))
	many, err := w.controlPlanesReady(ctx, names)
	if err != nil {
		return nil, err
	}
	slices.Sort(many)
	// At rest: the summaries average the last few seconds.
	rest := 30 * time.Second
	fmt.Fprintf(out, "    at rest for %s\n", rest)
	if err := pause(ctx, rest); err != nil {
		return nil, err
	}
	memory, cpu, err := w.controlPlaneUsage(ctx, append(names, "cp-one"))
	if err != nil {
		return nil, err
	}
	var awakeMemory, asleepMemory float64
	var woke []time.Duration
	if len(names) > 1 {
		fmt.Fprintf(out, "    %d of the %d asleep, at rest for %s; one woken %d times\n", len(names)-1, len(names), rest, wakes)
		if awakeMemory, asleepMemory, woke, err = w.sleepAndWake(ctx, names, rest); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(out, "    under a sync load: %d ConfigMaps/s for %s\n", syncLoadRate, syncLoadFor)
	loadMemory, loadCPU, written, err := w.controlPlaneUnderLoad(ctx, "cp-one")
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(out, "    a snapshot of it, restored")
	file := filepath.Join(w.dir, "cp-one.snapshot.tar.gz")
	took, taken, err := w.snapshotOf(ctx, "cp-one", file)
	if err != nil {
		return nil, err
	}
	restoring, loaded, err := w.restore(ctx, file, "cp-restored")
	if err != nil {
		return nil, err
	}
	note := fmt.Sprintf("real nodes, bin/manager with %s; default resources", w.managerFlags())
	loadNote := fmt.Sprintf("%s; ConfigMaps asked at %d/s in the tenant for %s (%d made) and synced to the host, read while they are", note, syncLoadRate, syncLoadFor, written)
	snapshotNote := fmt.Sprintf("%s; of the tenant under the sync load, once it ended: %d keys (%d ConfigMaps made), %s storage, through the host's pods/portforward, as tenantry snapshot takes it", note, taken.Manifest.Keys, written, taken.Manifest.Storage)
	perGiB := float64(1<<30) / memory
	var sleepResults []result
	if len(woke) > 0 {
		sleepNote := fmt.Sprintf("%s; every Pod of the host (the %d control planes made at once, cp-one, the kit's own), working sets summed from the kubelets' summaries, after %s at rest", note, len(names), rest)
		sleepResults = []result{
			{Name: fmt.Sprintf("host: memory in Pods, %d control planes awake", len(names)), Value: round(awakeMemory/(1<<20), 1), Unit: "MiB", Note: sleepNote},
			{Name: fmt.Sprintf("host: memory in Pods, %d of them asleep", len(names)-1), Value: round(asleepMemory/(1<<20), 1), Unit: "MiB", Note: sleepNote + "; asleep as tenantry sleep puts them"},
			ms(fmt.Sprintf("tenant: wake, median of %d", len(woke)), woke[len(woke)/2], "", fmt.Sprintf(
				"%s; from a list of Pods through its kubeconfig while it sleeps (which wakes it, held by the manager) to its answer, a new client each time; all %d: %v", note, len(woke), woke)),
		}
	}
	return append(sleepResults, []result{
		ms("control plane: snapshot time", took, "", snapshotNote),
		ms("control plane: restore time", restoring, "", snapshotNote+fmt.Sprintf(
			"; restored as tenantry restore does, under another name on the same storage type, from the command to ControlPlaneReady=True (%s of it loading the keys)", loaded.Round(time.Millisecond))),
		{Name: "control plane: snapshot size", Value: round(float64(taken.Size)/(1<<20), 2), Unit: "MiB", Note: snapshotNote + fmt.Sprintf("; compressed, of %.2f MiB of keys and values", float64(taken.Manifest.Bytes)/(1<<20))},
		ms("control plane: Ready (one)", one[0], "", note+"; created to ControlPlaneReady=True"),
		ms(fmt.Sprintf("control plane: Ready, median of %d at once", len(many)), many[len(many)/2], "", note),
		ms(fmt.Sprintf("control plane: Ready, last of %d at once", len(many)), many[len(many)-1], "", note),
		{Name: "control plane: memory at rest", Value: round(memory/(1<<20), 1), Unit: "MiB", Note: note + "; working set of its Pod, mean of all"},
		{Name: "control plane: CPU at rest", Value: round(cpu*1000, 1), Unit: "millicores", Note: note + "; mean of all"},
		{Name: "control planes per GiB of host memory", Value: round(perGiB, 1), Unit: "control planes", Note: note + "; 1 GiB over the memory at rest"},
		{Name: "control plane: memory under a sync load", Value: round(loadMemory/(1<<20), 1), Unit: "MiB", Note: loadNote},
		{Name: "control plane: CPU under a sync load", Value: round(loadCPU*1000, 1), Unit: "millicores", Note: loadNote},
	}...), nil
}

// snapshotOf takes a snapshot of VirtualCluster name as `tenantry
// snapshot` does, into file, and says how long it took.
func (w *managerWorld) snapshotOf(ctx context.Context, name, file string) (time.Duration, snapshot.Taken, error) {
	var vc tenantryv1alpha1.VirtualCluster
	if err := w.host.Get(ctx, client.ObjectKey{Name: name}, &vc); err != nil {
		return 0, snapshot.Taken{}, fmt.Errorf("reading VirtualCluster %s: %w", name, err)
	}
	f, err := os.Create(file)
	if err != nil {
		return 0, snapshot.Taken{}, err
	}
	defer f.Close()
	began := time.Now()
	taken, err := snapshot.OfVirtualCluster(ctx, w.env.Host.Config(), w.host, &vc, f, w.dir)
	if err != nil {
		return 0, snapshot.Taken{}, err
	}
	return time.Since(began), taken, f.Close()
}

// restore makes VirtualCluster name from the snapshot file as `tenantry
// restore` does, and says how long it took until its control plane was
// ready, and how long of it loading the keys.
func (w *managerWorld) restore(ctx context.Context, file, name string) (took, loading time.Duration, err error) {
	began := time.Now()
	restored, err := snapshot.Restore(ctx, w.env.Host.Config(), w.host, func() (io.ReadCloser, error) { return os.Open(file) },
		snapshot.RestoreOptions{Name: name, Timeout: controlPlaneBudget})
	if err != nil {
		return 0, 0, err
	}
	ready, err := w.awaitControlPlanes(ctx, []string{name}, began)
	if err != nil {
		return 0, 0, err
	}
	return ready[0], restored.Loading, nil
}

// The sync load on one control plane: ConfigMaps created in its tenant
// at this rate, for this long, each copied to the host by the manager.
const (
	syncLoadRate = 50
	syncLoadFor  = 40 * time.Second
)

// controlPlaneUnderLoad creates ConfigMaps in name's tenant, through the
// kubeconfig Tenantry wrote, at syncLoadRate for syncLoadFor, then reads
// its control plane Pod's working set and CPU while the load goes on.
func (w *managerWorld) controlPlaneUnderLoad(ctx context.Context, name string) (memory, cpu float64, written int, err error) {
	tenant, err := w.tenantClient(ctx, name, 2*syncLoadRate)
	if err != nil {
		return 0, 0, 0, err
	}
	loadCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		tick := time.NewTicker(time.Second / syncLoadRate)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-loadCtx.Done():
				done <- nil
				return
			case <-tick.C:
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%05d", i)}, Data: map[string]string{"n": fmt.Sprint(i)}}
			if _, err := tenant.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(loadCtx, cm, metav1.CreateOptions{}); err != nil {
				if loadCtx.Err() != nil {
					done <- nil
				} else {
					done <- fmt.Errorf("creating ConfigMap %d in %s: %w", i, name, err)
				}
				return
			}
			written = i + 1
		}
	}()
	select {
	case <-ctx.Done():
		stop()
		<-done
		return 0, 0, 0, ctx.Err()
	case err := <-done:
		stop()
		return 0, 0, 0, err
	case <-time.After(syncLoadFor):
	}
	memory, cpu, err = w.controlPlaneUsage(ctx, []string{name})
	stop()
	if loadErr := <-done; err == nil {
		err = loadErr
	}
	return memory, cpu, written, err
}

// controlPlanesReady creates a VirtualCluster with spec.controlPlane for
// each name at once, and says how long each took to be ready.
func (w *managerWorld) controlPlanesReady(ctx context.Context, names []string) ([]time.Duration, error) {
	start := time.Now()
	for _, name := range names {
		vc := &tenantryv1alpha1.VirtualCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: tenantryv1alpha1.VirtualClusterSpec{
				KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: secretsNamespace, Name: name + "-kubeconfig"},
				ControlPlane:        &tenantryv1alpha1.ControlPlaneSpec{},
			},
		}
		if err := w.host.Create(ctx, vc); err != nil {
			return nil, err
		}
	}
	return w.awaitControlPlanes(ctx, names, start)
}

// awaitControlPlanes says how long after start each of names was ready.
func (w *managerWorld) awaitControlPlanes(ctx context.Context, names []string, start time.Time) ([]time.Duration, error) {
	took := map[string]time.Duration{}
	err := tenantrytest.Poll(ctx, 500*time.Millisecond, controlPlaneBudget, func(ctx context.Context) (bool, error) {
		var list tenantryv1alpha1.VirtualClusterList
		if err := w.vcs.List(ctx, &list); err != nil {
			return false, err
		}
		for _, vc := range list.Items {
			c := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionControlPlaneReady)
			if _, seen := took[vc.Name]; !seen && slices.Contains(names, vc.Name) && c != nil && c.Status == metav1.ConditionTrue {
				took[vc.Name] = time.Since(start)
			}
		}
		return len(took) == len(names), nil
	})
	if err != nil {
		return nil, fmt.Errorf("%d of %d control planes ready: %w", len(took), len(names), err)
	}
	out := make([]time.Duration, 0, len(took))
	for _, d := range took {
		out = append(out, d)
	}
	return out, nil
}

// controlPlaneUsage is the mean working set (bytes) and CPU (cores) of the
// control planes' Pods, from the real kubelets' summaries.
func (w *managerWorld) controlPlaneUsage(ctx context.Context, names []string) (memory, cpu float64, err error) {
	namespaces := map[string]bool{}
	for _, name := range names {
		namespaces[controlplane.Namespace(name)] = true
	}
	memory, cpu, n, err := w.podUsage(ctx, func(namespace string) bool { return namespaces[namespace] })
	if err != nil {
		return 0, 0, err
	}
	if n != len(names) {
		return 0, 0, fmt.Errorf("the kubelets report %d of %d control planes' Pods", n, len(names))
	}
	return memory / float64(n), cpu / float64(n), nil
}

// podUsage is the working set (bytes) and CPU (cores) of the host's Pods
// in the namespaces that in keeps, summed, and how many there are, from
// the real kubelets' summaries.
func (w *managerWorld) podUsage(ctx context.Context, in func(namespace string) bool) (memory, cpu float64, n int, err error) {
	var nodes corev1.NodeList
	if err := w.host.List(ctx, &nodes); err != nil {
		return 0, 0, 0, err
	}
	for _, node := range nodes.Items {
		if !strings.HasPrefix(node.Name, tenantrytest.KubeletNamePrefix) {
			continue
		}
		body, err := w.hostREST.Get().AbsPath("/api/v1/nodes", node.Name, "proxy/stats/summary").DoRaw(ctx)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("node %s's summary: %w", node.Name, err)
		}
		var summary struct {
			Pods []struct {
				PodRef struct{ Namespace string } `json:"podRef"`
				CPU    struct {
					UsageNanoCores uint64 `json:"usageNanoCores"`
				} `json:"cpu"`
				Memory struct {
					WorkingSetBytes uint64 `json:"workingSetBytes"`
				} `json:"memory"`
			} `json:"pods"`
		}
		if err := json.Unmarshal(body, &summary); err != nil {
			return 0, 0, 0, fmt.Errorf("node %s's summary: %w", node.Name, err)
		}
		for _, p := range summary.Pods {
			if in(p.PodRef.Namespace) {
				memory += float64(p.Memory.WorkingSetBytes)
				cpu += float64(p.CPU.UsageNanoCores) / 1e9
				n++
			}
		}
	}
	return memory, cpu, n, nil
}
