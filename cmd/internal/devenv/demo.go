package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// demoNamespace is the tenant namespace of the sample workload.
const demoNamespace = "demo"

// demoReplicas is how many Pods the sample Deployment runs.
const demoReplicas = 2

// item is one object of the sample workload in one tenant, and how to tell
// that it converged.
type item struct {
	tenant string
	kind   string
	name   string
	where  string // the host namespace (or, for the Namespace, its host name)
	done   bool
	detail string // what was last seen: why it is done, or what it waits for
}

// Demo runs a dev environment, applies a sample workload in each tenant and
// follows it until every object converged, within timeout, or fails
// naming what did not; then it stops the environment. It is what
// `tenantry-dev demo` (and `make demo`) runs.
func Demo(ctx context.Context, o Options, timeout time.Duration, out io.Writer) error {
	return With(ctx, o, out, func(d *Env) error { return demo(ctx, d, timeout, out) })
}

// demo applies the workload in d's tenants and follows it until every
// item converged.
func demo(ctx context.Context, d *Env, timeout time.Duration, out io.Writer) error {
	fmt.Fprintln(out, "==> applying a Namespace, Deployment, Service, ConfigMap, Secret, Job and Foo in each tenant")
	var items []*item
	for _, name := range sortedKeys(d.tenants) {
		if err := applyWorkload(ctx, d.tenants[name]); err != nil {
			return fmt.Errorf("applying the workload in %s: %w", name, err)
		}
		hostNS := syncer.HostNamespace(name, demoNamespace)
		items = append(items, &item{tenant: name, kind: "Namespace", name: demoNamespace, where: hostNS})
		for _, kind := range []string{"ConfigMap", "Secret", "Service", "Deployment", "Job", "Foo"} {
			items = append(items, &item{tenant: name, kind: kind, name: workloadName(kind), where: hostNS})
		}
	}

	fmt.Fprintln(out, "==> waiting for the workload to sync and run: the Deployment's Pods and the Job's run in the host, on its nodes")
	deadline, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	live := newLiveTable(out)
	err := tenantrytest.Poll(deadline, 200*time.Millisecond, 0, func(ctx context.Context) (bool, error) {
		for _, it := range items {
			if !it.done {
				it.done, it.detail = d.converged(ctx, it)
			}
		}
		live.show(items)
		pending := notDone(items)
		return len(pending) == 0, errors.New("waiting for " + strings.Join(pending, ", "))
	})
	if err != nil {
		return fmt.Errorf("the workload did not converge within %s: %s", timeout, strings.Join(notDone(items), "; "))
	}
	if d.realNodes {
		for _, cp := range d.env.Tenants {
			if err := showRunning(deadline, cp, out); err != nil {
				return fmt.Errorf("%s: %w", cp.Name(), err)
			}
		}
	}
	fmt.Fprintln(out, "==> demo complete: everything converged")
	return nil
}

// demoImage is the image of the sample workload: the e2e suite's agnhost,
// which the kit's registry serves (nothing is pulled from the internet),
// with curl for the probe.
const demoImage = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"

// showRunning shows, on real nodes, that the tenant's workload runs: a
// Pod of the tenant fetches a page from the Deployment through the
// tenant's Service name, and a web container's log is read through the
// tenant's API server, as kubectl logs reads it.
func showRunning(ctx context.Context, cp *tenantrytest.ControlPlane, out io.Writer) error {
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		return err
	}
	url := "http://" + workloadName("Service") + "." + demoNamespace + "/hostname"
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "probe"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// A Service's first seconds: its endpoints reach kube-proxy
			// and the policy's firewall a moment after the Pods are
			// Ready; curl tries again for a while.
			Containers: []corev1.Container{{Name: "probe", Image: demoImage, Command: []string{"curl", "-sS", "--max-time", "5",
				"--retry", "20", "--retry-delay", "1", "--retry-all-errors", url}}},
		},
	}
	if _, err := cs.CoreV1().Pods(demoNamespace).Create(ctx, probe, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Pod probe: %w", err)
	}
	var phase corev1.PodPhase
	err = tenantrytest.Poll(ctx, 200*time.Millisecond, 0, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(demoNamespace).Get(ctx, probe.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, fmt.Errorf("Pod probe is %s", phase)
	})
	if err != nil {
		return fmt.Errorf("Pod probe did not end: %w", err)
	}
	answer, err := cs.CoreV1().Pods(demoNamespace).GetLogs(probe.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("reading Pod probe's log: %w", err)
	}
	if phase != corev1.PodSucceeded {
		return fmt.Errorf("Pod probe could not fetch %s: %s", url, strings.TrimSpace(string(answer)))
	}
	// The page is the last line: curl tells of the tries before on stderr.
	lines := strings.Split(strings.TrimSpace(string(answer)), "\n")
	web := strings.TrimSpace(lines[len(lines)-1]) // the Pod that answered
	fmt.Fprintf(out, "==> %s: Pod probe fetched %s through the tenant's Service: %s\n", cp.Name(), url, web)

	last, err := cs.CoreV1().Pods(demoNamespace).GetLogs(web, &corev1.PodLogOptions{TailLines: ptr.To[int64](1)}).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("reading Pod %s's log: %w", web, err)
	}
	fmt.Fprintf(out, "==> %s: kubectl logs %s --tail 1 (a real container): %s\n", cp.Name(), web, strings.TrimSpace(string(last)))
	return nil
}

func workloadName(kind string) string {
	switch kind {
	case "ConfigMap":
		return "settings"
	case "Secret":
		return "credentials"
	case "Job":
		return "migrate"
	case "Foo":
		return "frobnicator"
	}
	return "web"
}

// applyWorkload creates the sample workload in a tenant.
func applyWorkload(ctx context.Context, c client.Client) error {
	labels := map[string]string{"app": "web"}
	foo := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"replicas": int64(2)}}}
	foo.SetGroupVersionKind(fooGVK)
	foo.SetNamespace(demoNamespace)
	foo.SetName(workloadName("Foo"))
	objects := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: workloadName("ConfigMap")},
			Data: map[string]string{"greeting": "hello from the tenant"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: workloadName("Secret")},
			StringData: map[string]string{"password": "correct horse battery staple"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: workloadName("Service")},
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: workloadName("Deployment")},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](demoReplicas),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{
						Name: "web", Image: demoImage, Args: []string{"netexec", "--http-port=80"},
						EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: workloadName("ConfigMap")}}}},
					}}},
				},
			}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: workloadName("Job")},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "migrate", Image: demoImage, Command: []string{"true"}}},
			}}}},
	}
	for _, obj := range objects {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	// The Foo CRD reaches the tenant through public CRD sync: wait for it.
	err := tenantrytest.Poll(ctx, 200*time.Millisecond, 0, func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, foo)
		return err == nil || apierrors.IsAlreadyExists(err), err
	})
	if err != nil {
		return fmt.Errorf("creating Foo %s: %w", foo.GetName(), err)
	}
	return nil
}

// converged says whether an item is where it should be, and what to show.
func (d *Env) converged(ctx context.Context, it *item) (bool, string) {
	tenant := d.tenants[it.tenant]
	hostKey := client.ObjectKey{Namespace: it.where, Name: it.name}
	switch it.kind {
	case "Namespace":
		var ns corev1.Namespace
		return d.host.Get(ctx, client.ObjectKey{Name: it.where}, &ns) == nil, "host namespace"
	case "Service":
		var host, ten corev1.Service
		if d.host.Get(ctx, hostKey, &host) != nil || tenant.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: it.name}, &ten) != nil {
			return false, "no host copy yet"
		}
		ok := host.Spec.ClusterIP != "" && ten.Spec.ClusterIP == host.Spec.ClusterIP
		return ok, "cluster IP " + host.Spec.ClusterIP + " in both"
	case "Deployment":
		return d.deploymentRuns(ctx, it)
	case "Job":
		return d.jobCompleted(ctx, it)
	case "Foo":
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(fooGVK)
		return d.host.Get(ctx, hostKey, u) == nil, "custom resource"
	}
	obj := map[string]client.Object{"ConfigMap": &corev1.ConfigMap{}, "Secret": &corev1.Secret{}}[it.kind]
	return d.host.Get(ctx, hostKey, obj) == nil, ""
}

// deploymentRuns: the tenant's Deployment is fully available, and each of
// its Pods runs in the host on the node and with the IP the tenant sees.
func (d *Env) deploymentRuns(ctx context.Context, it *item) (bool, string) {
	var deploy appsv1.Deployment
	if err := d.tenants[it.tenant].Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: it.name}, &deploy); err != nil {
		return false, err.Error()
	}
	available := fmt.Sprintf("%d/%d available", deploy.Status.AvailableReplicas, demoReplicas)
	if deploy.Status.AvailableReplicas != demoReplicas {
		return false, available
	}
	var pods corev1.PodList
	if err := d.tenants[it.tenant].List(ctx, &pods, client.InNamespace(demoNamespace), client.MatchingLabels(deploy.Spec.Selector.MatchLabels)); err != nil {
		return false, err.Error()
	}
	var placed []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		var host corev1.Pod
		if err := d.host.Get(ctx, client.ObjectKey{Namespace: it.where, Name: p.Name}, &host); err != nil {
			return false, available + ", Pod " + p.Name + " not in the host"
		}
		if host.Status.Phase != corev1.PodRunning || host.Spec.NodeName != p.Spec.NodeName || host.Status.PodIP != p.Status.PodIP {
			return false, available + ", Pod " + p.Name + " not yet as in the host"
		}
		if !virtualNodeReady(ctx, d.tenants[it.tenant], p.Spec.NodeName) {
			return false, available + ", no Ready virtual node " + p.Spec.NodeName + " in the tenant yet"
		}
		placed = append(placed, fmt.Sprintf("%s %s", p.Spec.NodeName, p.Status.PodIP))
	}
	if len(placed) != demoReplicas {
		return false, fmt.Sprintf("%s, %d Pods Running", available, len(placed))
	}
	slices.Sort(placed)
	return true, available + ", Pods Running on " + strings.Join(placed, ", ") + ", nodes Ready in the tenant"
}

// virtualNodeReady says whether the tenant has a Ready virtual node named
// name.
func virtualNodeReady(ctx context.Context, tenant client.Client, name string) bool {
	var node corev1.Node
	if err := tenant.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil || node.Labels[syncer.LabelManagedBy] != syncer.ManagedByValue {
		return false
	}
	return slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	})
}

// jobCompleted: the tenant's Job is Complete, its Pod having run in the
// host.
func (d *Env) jobCompleted(ctx context.Context, it *item) (bool, string) {
	var job batchv1.Job
	if err := d.tenants[it.tenant].Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: it.name}, &job); err != nil {
		return false, err.Error()
	}
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true, fmt.Sprintf("Complete, %d Pod succeeded in the host", job.Status.Succeeded)
		}
	}
	return false, fmt.Sprintf("%d active, %d succeeded", job.Status.Active, job.Status.Succeeded)
}

// notDone names the items still waiting, with what they wait for.
func notDone(items []*item) []string {
	var pending []string
	for _, it := range items {
		if !it.done {
			what := fmt.Sprintf("%s %s of %s", it.kind, it.name, it.tenant)
			if it.detail != "" {
				what += " (" + it.detail + ")"
			}
			pending = append(pending, what)
		}
	}
	return pending
}

// liveTable redraws the table in place on a terminal, and prints it only
// when it changes elsewhere (a log, CI).
type liveTable struct {
	out      io.Writer
	terminal bool
	lines    int
	last     string
}

func newLiveTable(out io.Writer) *liveTable {
	t := &liveTable{out: out}
	if f, ok := out.(*os.File); ok {
		if info, err := f.Stat(); err == nil && info.Mode()&os.ModeCharDevice != 0 {
			t.terminal = true
		}
	}
	return t
}

func (t *liveTable) show(items []*item) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tKIND\tNAME\tHOST NAMESPACE\tSTATE")
	done := 0
	for _, it := range items {
		state := "waiting"
		if it.done {
			state, done = "done", done+1
		}
		if it.detail != "" {
			state += " (" + it.detail + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", it.tenant, it.kind, it.name, it.where, state)
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "%d/%d converged\n", done, len(items))
	table := b.String()
	if table == t.last {
		return
	}
	if t.terminal && t.lines > 0 {
		fmt.Fprintf(t.out, "\x1b[%dA\x1b[J", t.lines) // back to the table's top, and clear
	}
	fmt.Fprint(t.out, table)
	t.last, t.lines = table, strings.Count(table, "\n")
}
