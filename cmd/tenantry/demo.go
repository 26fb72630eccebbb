package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
)

var demoCommand = command{
	name: "demo",
	summary: "Run the dev environment, apply a sample workload in each tenant, show what syncs where, " +
		"write a status to a host Pod and show it arrive in the tenant, then exit (non-zero naming what did not converge).",
	flags: func(fs *flag.FlagSet) func(context.Context) error {
		o := bindDevFlags(fs)
		timeout := fs.Duration("timeout", 2*time.Minute, "How long the workload may take to converge.")
		return func(ctx context.Context) error { return runDemo(ctx, *o, *timeout, os.Stdout) }
	},
}

// demoNamespace is the tenant namespace of the sample workload.
const demoNamespace = "demo"

// item is one object of the sample workload in one tenant, and how to tell
// that it arrived where it should.
type item struct {
	tenant string
	kind   string
	name   string
	where  string // the host namespace (or, for the Namespace, its host name)
	done   bool
	detail string
}

func runDemo(ctx context.Context, o devOptions, timeout time.Duration, out io.Writer) error {
	return withDev(ctx, o, out, func(d *devEnv) error { return demo(ctx, d, timeout, out) })
}

// demo applies the workload in d's tenants and follows it.
func demo(ctx context.Context, d *devEnv, timeout time.Duration, out io.Writer) error {

	fmt.Fprintln(out, "==> applying a Namespace, ConfigMap, Secret, Service, Pod and Foo in each tenant")
	var items []*item
	for _, name := range sortedKeys(d.tenants) {
		if err := applyWorkload(ctx, d.tenants[name]); err != nil {
			return fmt.Errorf("applying the workload in %s: %w", name, err)
		}
		hostNS := syncer.HostNamespace(name, demoNamespace)
		items = append(items, &item{tenant: name, kind: "Namespace", name: demoNamespace, where: hostNS})
		for _, kind := range []string{"ConfigMap", "Secret", "Service", "Pod", "Foo"} {
			items = append(items, &item{tenant: name, kind: kind, name: workloadName(kind), where: hostNS})
		}
	}

	fmt.Fprintln(out, "==> waiting for every object to reach the host")
	deadline, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	live := newLiveTable(out)
	if err := poll(deadline, 200*time.Millisecond, 0, func(ctx context.Context) (bool, error) {
		for _, it := range items {
			if !it.done {
				it.done, it.detail = d.arrived(ctx, it)
			}
		}
		live.show(items)
		pending := notDone(items)
		return len(pending) == 0, errors.New("waiting for " + strings.Join(pending, ", "))
	}); err != nil {
		return fmt.Errorf("did not reach the host within %s: %w", timeout, err)
	}

	fmt.Fprintln(out, "==> the host schedules each Pod and reports it Running; the tenants see it")
	for i, name := range sortedKeys(d.tenants) {
		node, ip := fmt.Sprintf("demo-node-%d", i+1), fmt.Sprintf("10.244.%d.10", i+1)
		if err := d.runHostPod(deadline, name, node, ip); err != nil {
			return err
		}
		pod, err := d.waitTenantPod(deadline, name, node, ip)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "    %s: Pod %s/web is %s on %s with IP %s (written in the host, read in the tenant)\n",
			name, demoNamespace, pod.Status.Phase, pod.Spec.NodeName, pod.Status.PodIP)
	}
	fmt.Fprintln(out, "==> demo complete: everything converged")
	return nil
}

func workloadName(kind string) string {
	switch kind {
	case "ConfigMap":
		return "settings"
	case "Secret":
		return "credentials"
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
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "web"},
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "web", Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}},
	}
	for _, obj := range objects {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	// The Foo CRD reaches the tenant through public CRD sync: wait for it.
	err := poll(ctx, 200*time.Millisecond, 0, func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, foo)
		return err == nil || apierrors.IsAlreadyExists(err), err
	})
	if err != nil {
		return fmt.Errorf("creating Foo %s: %w", foo.GetName(), err)
	}
	return nil
}

// arrived says whether an item's host copy is there, and what to show.
func (d *devEnv) arrived(ctx context.Context, it *item) (bool, string) {
	switch it.kind {
	case "Namespace":
		var ns corev1.Namespace
		err := d.host.Get(ctx, client.ObjectKey{Name: it.where}, &ns)
		return err == nil, "host namespace"
	case "Service":
		var host, tenant corev1.Service
		key := client.ObjectKey{Namespace: demoNamespace, Name: it.name}
		if d.host.Get(ctx, client.ObjectKey{Namespace: it.where, Name: it.name}, &host) != nil ||
			d.tenants[it.tenant].Get(ctx, key, &tenant) != nil {
			return false, ""
		}
		ok := host.Spec.ClusterIP != "" && tenant.Spec.ClusterIP == host.Spec.ClusterIP
		return ok, "cluster IP " + host.Spec.ClusterIP + " in both"
	case "Foo":
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(fooGVK)
		err := d.host.Get(ctx, client.ObjectKey{Namespace: it.where, Name: it.name}, u)
		return err == nil, "custom resource"
	}
	obj := map[string]client.Object{"ConfigMap": &corev1.ConfigMap{}, "Secret": &corev1.Secret{}, "Pod": &corev1.Pod{}}[it.kind]
	err := d.host.Get(ctx, client.ObjectKey{Namespace: it.where, Name: it.name}, obj)
	return err == nil, ""
}

// runHostPod does, in the host, what a scheduler and a kubelet would: bind
// the Pod to a node and report it Running with an IP.
func (d *devEnv) runHostPod(ctx context.Context, tenant, node, ip string) error {
	key := client.ObjectKey{Namespace: syncer.HostNamespace(tenant, demoNamespace), Name: "web"}
	var pod corev1.Pod
	if err := d.host.Get(ctx, key, &pod); err != nil {
		return fmt.Errorf("reading the host Pod of %s: %w", tenant, err)
	}
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := d.host.SubResource("binding").Create(ctx, &pod, binding); err != nil {
		return fmt.Errorf("binding the host Pod of %s: %w", tenant, err)
	}
	if err := d.host.Get(ctx, key, &pod); err != nil {
		return err
	}
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	pod.Status.StartTime = &now
	if err := d.host.Status().Update(ctx, &pod); err != nil {
		return fmt.Errorf("writing the host Pod status of %s: %w", tenant, err)
	}
	return nil
}

func (d *devEnv) waitTenantPod(ctx context.Context, tenant, node, ip string) (*corev1.Pod, error) {
	var pod corev1.Pod
	err := poll(ctx, 100*time.Millisecond, 0, func(ctx context.Context) (bool, error) {
		if err := d.tenants[tenant].Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: "web"}, &pod); err != nil {
			return false, err
		}
		ok := pod.Spec.NodeName == node && pod.Status.PodIP == ip && pod.Status.Phase == corev1.PodRunning
		return ok, fmt.Errorf("node %q, IP %q, phase %q", pod.Spec.NodeName, pod.Status.PodIP, pod.Status.Phase)
	})
	if err != nil {
		return nil, fmt.Errorf("the host Pod's status did not reach %s's Pod: %w", tenant, err)
	}
	return &pod, nil
}

func notDone(items []*item) []string {
	var pending []string
	for _, it := range items {
		if !it.done {
			pending = append(pending, fmt.Sprintf("%s %s of %s", it.kind, it.name, it.tenant))
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
	fmt.Fprintln(tw, "TENANT\tKIND\tNAME\tHOST NAMESPACE\tSYNCED\t")
	done := 0
	for _, it := range items {
		mark := "waiting"
		if it.done {
			mark, done = "yes", done+1
			if it.detail != "" {
				mark += " (" + it.detail + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", it.tenant, it.kind, it.name, it.where, mark)
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "%d/%d synced\n", done, len(items))
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
