package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryconfig "github.com/tenantry/tenantry/config"
	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/snapshot"
	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
	"github.com/tenantry/tenantry/providers"
)

// What an operator does with the CLI against a real host and tenant, with
// the manager running: register a tenant and wait for it, see the fleet
// with `tenantry list` and `kubectl get virtualclusters -o wide`, and
// hear why a tenant that cannot be reached is not Ready.
func TestRegisterAndList(t *testing.T) {
	crds, err := tenantryconfig.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	env := tenantrytest.New(t, tenantrytest.Options{Tenants: 1, HostCRDs: crds})
	ctx := t.Context()
	dir := t.TempDir()
	hostKubeconfig, err := env.Host.KubeconfigFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	tenantKubeconfig, err := env.Tenants[0].KubeconfigFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	startManager(t, hostKubeconfig)

	cli := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := run(append(args, "--host-kubeconfig", hostKubeconfig), &out, &out)
		return code, out.String()
	}

	// Register, and wait for Ready.
	if code, out := cli("register", "shop", "--kubeconfig", tenantKubeconfig, "--wait", "--timeout", "1m"); code != 0 || !strings.Contains(out, "virtualcluster/shop is Ready") {
		t.Fatalf("tenantry register --wait: exit %d:\n%s", code, out)
	}
	host := newClient(t, env.Host)
	var secret corev1.Secret
	if err := host.Get(ctx, client.ObjectKey{Namespace: "default", Name: "shop-kubeconfig"}, &secret); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(tenantKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(secret.Data[tenantryv1alpha1.DefaultKubeconfigKey], want) {
		t.Errorf("the Secret holds %q, want the kubeconfig file", secret.Data)
	}
	// Again: it applies, and nothing breaks.
	if code, out := cli("register", "shop", "--kubeconfig", tenantKubeconfig); code != 0 {
		t.Fatalf("tenantry register, a second time: exit %d:\n%s", code, out)
	}

	// A registered tenant has no storage of Tenantry's to snapshot, and a
	// destination that is not a file is refused: each says so, and
	// leaves nothing behind.
	snapshots := t.TempDir()
	for args, want := range map[[2]string]string{
		{"shop", filepath.Join(snapshots, "shop.tar.gz")}: "runs elsewhere (tenantry register)",
		{"shop", "s3://bucket/shop.tar.gz"}:               "a destination is a file or oci://REGISTRY/REPOSITORY:TAG",
	} {
		code, out := cli("snapshot", args[0], "--out", args[1])
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("tenantry snapshot %s --out %s: exit %d, %q; want a failure saying %q", args[0], args[1], code, out, want)
		}
	}
	if left, err := os.ReadDir(snapshots); err != nil || len(left) != 0 {
		t.Errorf("failed snapshots left %v (%v)", left, err)
	}

	// A registered tenant can neither sleep nor wake: Tenantry does not
	// run its control plane.
	for _, verb := range []string{"sleep", "wake"} {
		if code, out := cli(verb, "shop"); code == 0 || !strings.Contains(out, "runs elsewhere (tenantry register)") {
			t.Errorf("tenantry %s shop: exit %d, %q; want a refusal saying it runs elsewhere", verb, code, out)
		}
	}

	// A restore is refused before it makes anything: into a name that
	// exists, from a snapshot cut short, from a source that is neither a
	// file nor an OCI artifact, from a registry that refuses, with
	// storage flags that do not go together.
	good, cut := filepath.Join(snapshots, "old.tar.gz"), filepath.Join(snapshots, "cut.tar.gz")
	writeSnapshot(t, good, cut)
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"errors":[{"code":"DENIED","message":"no pulls today"}]}`, http.StatusForbidden)
	}))
	defer refusing.Close()
	for args, want := range map[string]string{
		"shop --from " + good:                 "virtualcluster/shop exists: restore under another name, or replace it",
		"fresh --from " + cut:                 "the snapshot is corrupt or truncated",
		"fresh --from s3://bucket/old.tar.gz": "a source is a file or oci://REGISTRY/REPOSITORY:TAG",
		"fresh --from oci://" + strings.TrimPrefix(refusing.URL, "http://") + "/tenants/old:1": "DENIED: no pulls today",
		"fresh": "--from is required",
		"fresh --from " + good + " --storage Other":   `--storage "Other": want Embedded, Etcd or DataStore`,
		"fresh --from " + good + " --version v1.39.0": "cannot run at v1.39.0: a control plane moves one minor version at a time, forward",
	} {
		code, out := cli(append([]string{"restore"}, strings.Fields(args)...)...)
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("tenantry restore %s: exit %d, %q; want a failure saying %q", args, code, out, want)
		}
	}
	for _, o := range []client.Object{&tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controlplane.Namespace("fresh")}}} {
		if err := host.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("a refused restore made %s: %v", o.GetName(), err)
		}
	}

	// A ConfigMap synced, and a NodePort Service the default policy refuses.
	tenant := newClient(t, env.Tenants[0])
	for _, o := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "public"}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}},
		}},
	} {
		if err := tenant.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	hostNS := syncer.HostNamespace("shop", "default")
	var vc tenantryv1alpha1.VirtualCluster
	tenantrytest.Eventually(t, time.Minute, "status.sync of shop", func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKey{Name: "shop"}, &vc); err != nil {
			return false, err
		}
		s := vc.Status.Sync
		if s == nil {
			return false, fmt.Errorf("no status.sync")
		}
		ok := s.Objects["configmaps"] == 1 && s.Objects["namespaces"] == 1 && s.Total == 2 && s.Refusals == 1 &&
			slices.Equal(s.HostNamespaces, []string{hostNS}) && s.LastWriteTime != nil
		return ok, fmt.Errorf("status.sync = %+v", *s)
	})

	code, out := cli("list")
	if code != 0 {
		t.Fatalf("tenantry list: exit %d:\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("tenantry list printed %d lines, want a header and shop:\n%s", len(lines), out)
	}
	for _, header := range []string{"NAME", "READY", "REASON", "REPLICA", "HOST NAMESPACES", "SYNCED", "REFUSALS (1H)", "LAG", "LAST WRITE", "LAST ERROR", "AGE"} {
		if !strings.Contains(lines[0], header) {
			t.Errorf("tenantry list: no column %s in %q", header, lines[0])
		}
	}
	row := strings.Fields(lines[1])
	if len(row) < 8 || row[0] != "shop" || row[1] != "True" || row[2] != "Spawned" ||
		row[3] != vc.Status.Replica || row[4] != "1" || row[5] != "configmaps=1,namespaces=1" || row[6] != "1" {
		t.Fatalf("tenantry list: row %q, want shop True Spawned %s 1 configmaps=1,namespaces=1 1 ...", lines[1], vc.Status.Replica)
	}
	// Two objects synced at once: the lag is a few seconds at most.
	if lag, err := time.ParseDuration(row[7]); err != nil || lag > 30*time.Second || lag != vc.Status.Sync.Lag.Duration {
		t.Errorf("tenantry list: lag %q (%v), want status.sync.lag %s, under 30s", row[7], err, vc.Status.Sync.Lag.Duration)
	}

	// kubectl shows the same through the printer columns.
	kubectl, err := tenantrytest.FindKubectl()
	if err != nil {
		t.Fatal(err)
	}
	wide := kubectl.MustRun(t, hostKubeconfig, "", "get", "virtualclusters", "-o", "wide")
	rows := strings.Split(strings.TrimSpace(wide), "\n")
	if len(rows) != 2 || !strings.Contains(rows[0], "SYNCED") || !strings.Contains(rows[0], "REFUSALS") || !strings.Contains(rows[0], "HOST-NAMESPACES") || !strings.Contains(rows[0], "LAG") ||
		!strings.Contains(rows[1], hostNS) || !slices.Contains(strings.Fields(rows[1]), "2") {
		t.Errorf("kubectl get virtualclusters -o wide:\n%s\nwant SYNCED 2, REFUSALS 1 and the host namespace %s", wide, hostNS)
	}

	// A tenant that does not answer: --wait says why it is not Ready.
	unreachable := filepath.Join(dir, "unreachable.kubeconfig")
	kc, err := clientcmd.Load(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.Server = "https://127.0.0.1:1"
	}
	if err := clientcmd.WriteToFile(*kc, unreachable); err != nil {
		t.Fatal(err)
	}
	code, out = cli("register", "gone", "--kubeconfig", unreachable, "--wait", "--timeout", "30s")
	if code != 1 || !strings.Contains(out, "virtualcluster/gone is not Ready") || !strings.Contains(out, tenantryv1alpha1.ReasonUnreachable) {
		t.Errorf("tenantry register --wait of an unreachable tenant: exit %d:\n%s\nwant exit 1 and reason %s", code, out, tenantryv1alpha1.ReasonUnreachable)
	}

	// A kubeconfig whose server is the host itself: no retry mends that,
	// and --wait says so at once.
	hostData, err := os.ReadFile(hostKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	itself := filepath.Join(dir, "itself.kubeconfig")
	if err := os.WriteFile(itself, hostData, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out = cli("register", "itself", "--kubeconfig", itself, "--wait", "--timeout", "1m")
	if code != 1 || !strings.Contains(out, "is not Ready, reason "+tenantryv1alpha1.ReasonHostCluster) || strings.Contains(out, "after 1m") {
		t.Errorf("tenantry register --wait of the host itself: exit %d:\n%s\nwant exit 1 with reason %s, without waiting out --timeout",
			code, out, tenantryv1alpha1.ReasonHostCluster)
	}

	// tenantry connect: a registered tenant's kubeconfig, as it is.
	connected := filepath.Join(dir, "shop.kubeconfig")
	if code, out := cli("connect", "shop", "--no-forward", "--out", connected); code != 0 || !strings.Contains(out, "wrote "+connected) {
		t.Errorf("tenantry connect --no-forward: exit %d:\n%s", code, out)
	}
	if got, err := os.ReadFile(connected); err != nil || !bytes.Equal(got, want) {
		t.Errorf("tenantry connect wrote %q (%v), want the tenant's kubeconfig", got, err)
	}
	if info, err := os.Stat(connected); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("tenantry connect's file: %v, %v; want mode 0600, a credential", info.Mode(), err)
	}
	// tenantry create of a version the manager does not run: --wait says
	// why at once.
	code, out = cli("create", "future", "--version", "v1.99.0", "--wait", "--timeout", "1m")
	if code != 1 || !strings.Contains(out, "control plane is not Ready, reason "+tenantryv1alpha1.ReasonUnknownVersion) || strings.Contains(out, "after 1m") {
		t.Errorf("tenantry create --version v1.99.0 --wait: exit %d:\n%s\nwant exit 1 with reason %s, without waiting out --timeout",
			code, out, tenantryv1alpha1.ReasonUnknownVersion)
	}
	if err := host.Get(ctx, client.ObjectKey{Name: "future"}, &vc); err != nil || vc.Spec.ControlPlane == nil || vc.Spec.ControlPlane.Version != "v1.99.0" ||
		vc.Spec.KubeconfigSecretRef.Name != "future-kubeconfig" {
		t.Errorf("tenantry create applied %+v (%v)", vc.Spec, err)
	}
	// On a shared DataStore: --datastore implies --storage DataStore; a
	// claim's flags with it are refused, and create nothing.
	if code, out := cli("create", "shared", "--datastore", "etcd-1"); code != 0 {
		t.Errorf("tenantry create --datastore: exit %d:\n%s", code, out)
	}
	if err := host.Get(ctx, client.ObjectKey{Name: "shared"}, &vc); err != nil || vc.Spec.ControlPlane == nil ||
		vc.Spec.ControlPlane.Storage.Type != tenantryv1alpha1.StorageDataStore || vc.Spec.ControlPlane.Storage.DataStore != "etcd-1" {
		t.Errorf("tenantry create --datastore applied %+v (%v)", vc.Spec.ControlPlane, err)
	}
	for _, args := range [][]string{
		{"create", "bad-1", "--storage", "DataStore"},
		{"create", "bad-2", "--storage", "Etcd", "--datastore", "etcd-1"},
		{"create", "bad-3", "--datastore", "etcd-1", "--storage-size", "2Gi"},
		{"create", "bad-4", "--storage", "Postgres"},
	} {
		if code, out := cli(args...); code == 0 || !strings.Contains(out, "--") {
			t.Errorf("tenantry %s: exit %d:\n%s\nwant refused, naming the flag", strings.Join(args, " "), code, out)
		}
		if err := host.Get(ctx, client.ObjectKey{Name: args[1]}, &vc); !apierrors.IsNotFound(err) {
			t.Errorf("tenantry %s created VirtualCluster %s (%v)", strings.Join(args, " "), args[1], err)
		}
	}
}

// startManager builds bin/manager and runs it, with its default flags and
// no listeners, against the host until the test ends: a process of its
// own, as in a cluster (one management app per process: the demo's runs
// in this one).
func startManager(t *testing.T, hostKubeconfig string) {
	t.Helper()
	manager := filepath.Join(t.TempDir(), "manager")
	if out, err := exec.Command("go", "build", "-o", manager, "github.com/tenantry/tenantry/cmd/manager").CombinedOutput(); err != nil {
		t.Fatalf("building bin/manager: %v\n%s", err, out)
	}
	cmd := exec.Command(manager, "--kubeconfig", hostKubeconfig, "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--kubelet-bind-address", "127.0.0.1:0", "--dns-bind-address", "0", "--control-plane-activity-bind-address", "0")
	var log tenantrytest.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("bin/manager after SIGTERM: %v", err)
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			t.Errorf("bin/manager still runs a minute after SIGTERM")
		}
		if t.Failed() {
			t.Logf("bin/manager's log:\n%s", log.String())
		}
	})
}

func newClient(t *testing.T, cp *tenantrytest.ControlPlane) client.Client {
	t.Helper()
	scheme, err := providers.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writeSnapshot writes a snapshot of a provisioned tenant "old" of a few
// keys to file, and the same cut short to cut.
func writeSnapshot(t *testing.T, file, cut string) {
	t.Helper()
	w, err := snapshot.NewWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 100 {
		if err := w.Add(fmt.Appendf(nil, "configmaps/default/cm-%d", i), bytes.Repeat([]byte{byte(i)}, 512)); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := json.Marshal(tenantryv1alpha1.VirtualClusterSpec{
		KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: "old-kubeconfig"},
		ControlPlane:        &tenantryv1alpha1.ControlPlaneSpec{},
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, _, err := w.Write(&out, snapshot.Manifest{Cluster: "old", KubernetesVersion: controlplane.PinnedVersion, Storage: "Embedded", Spec: spec}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cut, out.Bytes()[:out.Len()/2], 0o600); err != nil {
		t.Fatal(err)
	}
}
