package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// The real-pods step's names.
const (
	realCluster     = "real-1"
	realNamespace   = "bench-real"      // in the tenant
	realHostDirect  = "bench-real-host" // in the host, for Pods created there
	realImage       = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	realDNSName     = "web." + realNamespace + ".svc.cluster.local."
	realStartBudget = 3 * time.Minute
)

// runRealPods measures, on real nodes (pkg/testing's HostKubelets) and
// through bin/manager with default flags (the tenant DNS on the kit
// network, which real nodes need), what a Pod's start costs through
// Tenantry against the same Pod created in the host, both to a running
// container, side by side in one run; and the latency of the tenant DNS as
// a container sees it.
func runRealPods(ctx context.Context, o Options, out io.Writer) (_ []result, retErr error) {
	if o.RealPodSamples < 1 || o.RealPodRate <= 0 || o.RealDNSQueries < 1 {
		return nil, fmt.Errorf("--real-pod-samples (%d), --real-pod-rate (%g) and --real-dns-queries (%d) must be positive",
			o.RealPodSamples, o.RealPodRate, o.RealDNSQueries)
	}
	if err := tenantrytest.RealNodesSupported(o.Assets); err != nil {
		return nil, err
	}
	w, err := startManagerWorldWith(ctx, o, "real-pods", tenantrytest.Options{Tenants: 1, HostKubelets: 2, TenantControllerManager: true}, out)
	if err != nil {
		return nil, err
	}
	defer func() { retErr = w.close(retErr) }()
	kitIP := w.env.KitIP()
	vc := &tenantryv1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: realCluster},
		Spec: tenantryv1alpha1.VirtualClusterSpec{
			KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: secretsNamespace, Name: w.secrets[0]},
			InClusterServer:     "https://" + w.env.Tenants[0].Address(),
		},
	}
	if err := w.host.Create(ctx, vc); err != nil {
		return nil, err
	}
	// Tenant Pods reach the DNS server on the kit network; no name is
	// forwarded off this machine (port 9 of loopback: nothing answers).
	args := append([]string{"--dns-bind-address", net.JoinHostPort(kitIP, "53"), "--dns-nameserver", kitIP, "--dns-upstream", "127.0.0.1:9"}, w.o.ManagerArgs...)
	if w.manager, err = startManagerProcess(ctx, w.binary, w.kubeconfig, args, filepath.Join(w.dir, "manager.log")); err != nil {
		return nil, err
	}
	if err := w.waitReady(ctx, 1, time.Minute); err != nil {
		return nil, err
	}
	tenant := w.tenants[0]
	for _, ns := range []struct {
		c    client.Client
		name string
	}{{tenant, realNamespace}, {w.host, realHostDirect}} {
		if err := ns.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.name}}); err != nil {
			return nil, err
		}
	}
	hostNS := syncer.HostNamespace(realCluster, realNamespace)
	if err := tenant.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: realNamespace, Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}); err != nil {
		return nil, err
	}
	for _, sa := range []struct {
		c   client.Client
		key client.ObjectKey
	}{
		{tenant, client.ObjectKey{Namespace: realNamespace, Name: "default"}},
		{w.host, client.ObjectKey{Namespace: realHostDirect, Name: "default"}},
		{w.host, client.ObjectKey{Namespace: hostNS, Name: "default"}},
	} {
		if err := waitGet(ctx, sa.c, sa.key, &corev1.ServiceAccount{}); err != nil {
			return nil, fmt.Errorf("ServiceAccount %s: %w", sa.key, err)
		}
	}

	// The image on every node first: the figures are of starts, not pulls.
	warm := map[string]time.Time{}
	for i := 1; i <= 2; i++ {
		pod := realPod(realHostDirect, fmt.Sprintf("warm-%d", i))
		pod.Spec.NodeName = tenantrytest.KubeletNamePrefix + strconv.Itoa(i)
		if err := w.host.Create(ctx, pod); err != nil {
			return nil, err
		}
		warm[pod.Name] = time.Now()
	}
	running := func(o client.Object) bool { return containerRunning(o.(*corev1.Pod)) }
	hostRunning, stopHost, err := watchArrivals(ctx, w.env.Host.Config(), &corev1.Pod{}, []string{realHostDirect}, running)
	if err != nil {
		return nil, err
	}
	defer stopHost()
	if _, err := hostRunning.wait(ctx, warm, realStartBudget); err != nil {
		return nil, fmt.Errorf("pulling the image on every node: %w", err)
	}
	tenantRunning, stopTenant, err := watchArrivals(ctx, w.env.Tenants[0].Config(), &corev1.Pod{}, []string{realNamespace}, running)
	if err != nil {
		return nil, err
	}
	defer stopTenant()

	fmt.Fprintf(out, "    %d Pods in the tenant and %d in the host, one of each at a time, %g pairs/s\n", o.RealPodSamples, o.RealPodSamples, o.RealPodRate)
	hostCreated, tenantCreated := map[string]time.Time{}, map[string]time.Time{}
	tick := time.NewTicker(time.Duration(float64(time.Second) / o.RealPodRate))
	defer tick.Stop()
	for i := range o.RealPodSamples {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// Each goes first every other time.
		sides := []struct {
			c       client.Client
			ns      string
			created map[string]time.Time
		}{{w.host, realHostDirect, hostCreated}, {tenant, realNamespace, tenantCreated}}
		if i%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, side := range sides {
			pod := realPod(side.ns, fmt.Sprintf("pod-%d", i))
			if err := side.c.Create(ctx, pod); err != nil {
				return nil, err
			}
			side.created[pod.Name] = time.Now()
		}
	}
	hostStart, err := hostRunning.wait(ctx, hostCreated, realStartBudget)
	if err != nil {
		return nil, fmt.Errorf("host Pods running: %w", err)
	}
	tenantStart, err := tenantRunning.wait(ctx, tenantCreated, realStartBudget)
	if err != nil {
		return nil, fmt.Errorf("tenant Pods running: %w", err)
	}

	fmt.Fprintf(out, "    %d DNS queries from a tenant container\n", o.RealDNSQueries)
	dns, err := dnsFromContainer(ctx, w, o.RealDNSQueries)
	if err != nil {
		return nil, fmt.Errorf("DNS from a container: %w", err)
	}

	n := fmt.Sprintf("%d Pods each side on 2 real nodes (kubelet, containerd, runc), a container running, %g pairs/s, image present; bin/manager %s",
		o.RealPodSamples, o.RealPodRate, w.managerFlags())
	return append([]result{
		ms("real Pod start p50, tenant (create in the tenant -> container running, seen in the tenant)", percentile(tenantStart, 50), "", n),
		ms("real Pod start p50, host (create in the host -> container running)", percentile(hostStart, 50), "", n),
		ms("real Pod start p99, tenant", percentile(tenantStart, 99), "", n),
		ms("real Pod start p99, host", percentile(hostStart, 99), "", n),
		ms("real Pod start overhead p50 (tenant p50 - host p50)", percentile(tenantStart, 50)-percentile(hostStart, 50), "", n),
	}, dns...), nil
}

// realPod is a Pod of the kit's agnhost image that runs until deleted.
func realPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "app", Image: realImage, Args: []string{"pause"}}},
		},
	}
}

// containerRunning says whether a Pod's containers all run.
func containerRunning(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return true
}

// dnsScript resolves realDNSName n times with one dig process, and prints
// the time it took (from /proc/uptime, 10 ms resolution), the answers it
// got, and dig's time of each query (1 ms resolution).
func dnsScript(n int) string {
	return fmt.Sprintf(`i=0; while [ $i -lt %[1]d ]; do echo "%[2]s A +tries=1 +time=2 +noall +answer +stats"; i=$((i+1)); done > /tmp/q
s=$(cut -d' ' -f1 /proc/uptime)
dig -f /tmp/q > /tmp/out
e=$(cut -d' ' -f1 /proc/uptime)
echo "elapsed $s $e"
echo "answers $(grep -c '^%[2]s' /tmp/out)"
grep 'Query time' /tmp/out | while read -r _ _ _ ms _; do echo "query $ms"; done`, n, realDNSName)
}

// dnsFromContainer runs dnsScript in a tenant Pod and reads its log
// through the tenant's API server.
func dnsFromContainer(ctx context.Context, w *managerWorld, queries int) ([]result, error) {
	pod := realPod(realNamespace, "dns")
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Containers[0].Args = nil
	pod.Spec.Containers[0].Command = []string{"sh", "-c", dnsScript(queries)}
	if err := w.tenants[0].Create(ctx, pod); err != nil {
		return nil, err
	}
	var phase corev1.PodPhase
	if err := tenantrytest.Poll(ctx, 100*time.Millisecond, realStartBudget, func(ctx context.Context) (bool, error) {
		var p corev1.Pod
		if err := w.tenants[0].Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, fmt.Errorf("phase %s", phase)
	}); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(w.env.Tenants[0].Config())
	if err != nil {
		return nil, err
	}
	log, err := cs.CoreV1().Pods(realNamespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading its log: %w", err)
	}
	if phase != corev1.PodSucceeded {
		return nil, fmt.Errorf("the Pod ended %s: %s", phase, log)
	}
	var (
		elapsed float64
		answers int
		times   []time.Duration
	)
	scan := bufio.NewScanner(strings.NewReader(string(log)))
	for scan.Scan() {
		f := strings.Fields(scan.Text())
		switch {
		case len(f) == 3 && f[0] == "elapsed":
			s, err1 := strconv.ParseFloat(f[1], 64)
			e, err2 := strconv.ParseFloat(f[2], 64)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("unreadable line %q", scan.Text())
			}
			elapsed = e - s
		case len(f) == 2 && f[0] == "answers":
			answers, _ = strconv.Atoi(f[1])
		case len(f) == 2 && f[0] == "query":
			q, err := strconv.Atoi(f[1])
			if err != nil {
				return nil, fmt.Errorf("unreadable line %q", scan.Text())
			}
			times = append(times, time.Duration(q)*time.Millisecond)
		}
	}
	if answers != queries || len(times) != queries {
		return nil, fmt.Errorf("%d answers and %d query times of %d queries:\n%s", answers, len(times), queries, log)
	}
	n := fmt.Sprintf("%d A queries of a tenant Service's name by one dig process in a tenant container on a real node, sequential", queries)
	mean := time.Duration(elapsed / float64(queries) * float64(time.Second))
	return []result{
		ms("DNS from a container, mean per query (dig's own work included; the clock's resolution 10 ms over the run)", mean, "", n),
		ms("DNS from a container p50 (dig's query time, 1 ms resolution)", percentile(times, 50), "", n),
		ms("DNS from a container p99 (dig's query time, 1 ms resolution)", percentile(times, 99), "", n),
	}, nil
}
