package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// What names metrics: the dashboard's and the alerting rules' expressions,
// and the text of the README, of every page under docs/ and of the bench's
// README (docPaths).
var (
	dashboardPath = filepath.Join("..", "..", "config", "monitoring", "grafana-dashboard.json")
	rulesPath     = filepath.Join("..", "..", "config", "monitoring", "prometheus-rules.yaml")
	repoRoot      = filepath.Join("..", "..")
)

// exprMetric finds the metric names in a PromQL expression: those of the
// manager's own metrics and of the libraries it serves metrics of
// (controller-runtime, client-go, the Go and process collectors), and up.
// hack/monitoring's tests parse every expression with Prometheus's parser
// and refuse a metric name of any other form, so none escapes this check.
var exprMetric = regexp.MustCompile(`\b(?:(?:tenantry|controller_runtime|workqueue|rest_client|process|go|leader_election)_[a-z0-9_]+|up)\b`)

// readmeName is a metric a doc names: a whole name, or `..._<rest>`
// (submatch 1) after a whole name of the same subsystem in the same file.
var readmeName = regexp.MustCompile("tenantry_[a-z_]+|`\\.\\.\\.(_[a-z_]+)`")

// prometheusMade are series Prometheus makes itself for each target: no
// process serves them.
var prometheusMade = map[string]bool{"up": true}

// targetLabels are the labels Prometheus gives every series of a target:
// an expression may match and group by them beside the series' own.
var targetLabels = map[string]bool{"job": true, "instance": true}

// An expression's label matchers, and its by/without/on/ignoring lists.
var (
	selectorMatchers = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	matcherLabel     = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	groupingLabels   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
)

// TestMonitoring runs the manager as a process, makes it produce every
// series it can (a tenant spawned, paused and failed; a ConfigMap synced,
// one in the way of a host object, a Service the host policy refuses, a
// host copy drifted out of the events' sight that the patroller finds, a Pod
// whose logs are asked for through the tenant's API server, a DNS query;
// then a sharded replica), scrapes its metrics endpoint, and fails for
// each metric that the dashboard (config/monitoring/grafana-dashboard.json),
// the alerting rules (config/monitoring/prometheus-rules.yaml) or the docs
// (README.md, docs/**/*.md, bench/README.md) name but no scrape served, saying where it is named; and for each
// label an expression matches or groups by that the metric does not carry.
func TestMonitoring(t *testing.T) {
	exprs := monitoringExprs(t)
	named := namedMetrics(t, exprs)

	env := tenantrytest.New(t, tenantrytest.Options{
		Tenants:                 1,
		HostNodes:               1,
		TenantControllerManager: true,
		HostCRDDirectoryPaths:   []string{filepath.Join("..", "..", "config", "crd", "bases")},
	})
	ctx := t.Context()
	host := newHostClient(t, env.Host)
	tenant := newHostClient(t, env.Tenants[0])
	hostKubeconfig, err := env.Host.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	// The manager reaches the tenant through a path of its own, cut to
	// make the tenant fail.
	tenantPath, err := env.Tenants[0].NewPath()
	if err != nil {
		t.Fatal(err)
	}
	tenantKubeconfig, err := tenantPath.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	createSecret(t, host, "mon-kubeconfig", tenantKubeconfig)
	createVC(t, host, "mon", "mon-kubeconfig")
	served := families{}
	// The metrics are served over HTTPS to a caller the host allows get on
	// /metrics: a scraper bound to the shipped ClusterRole.
	token := metricsReaderToken(t, env.Host, host, "scraper", true)

	t.Run("a leader-elected manager", func(t *testing.T) {
		metricsAddr, dnsAddr := freeAddr(t), freeAddr(t)
		// startManager turns the metrics endpoint off: later flags win.
		m := startManager(t, hostKubeconfig,
			"--metrics-bind-address", metricsAddr, "--dns-bind-address", dnsAddr,
			"--leader-elect", "--leader-election-namespace", "default",
			"--patrol-period", "2s", "--cluster-health-interval", "200ms", "--cluster-unhealthy-timeout", "2s")
		defer func() {
			_ = m.cmd.Process.Kill()
			<-m.done
		}()
		s := &scraper{addr: metricsAddr, token: token, into: served}
		expectReady(t, host, "mon", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
		// Anyone else who reaches the endpoint (a tenant Pod) reads
		// nothing: no token, or a token the role is not bound to.
		for who, token := range map[string]string{"no token": "", "a token of no reader": metricsReaderToken(t, env.Host, host, "stranger", false)} {
			intruder := &scraper{addr: metricsAddr, token: token, into: families{}}
			err := intruder.scrape(ctx)
			want := map[bool]string{true: "401 Unauthorized", false: "403 Forbidden"}[token == ""]
			if err == nil || !strings.Contains(err.Error(), want) || len(intruder.into) > 0 {
				t.Errorf("%s: %v, %d families; want %s and nothing read", who, err, len(intruder.into), want)
			}
		}
		s.waitServed(t, "the tenant spawned", "tenantry_registry_clusters", "tenantry_registry_cluster_state",
			"tenantry_registry_spawn_duration_seconds", "leader_election_master_status", "workqueue_depth")

		hostNS := syncer.HostNamespace("mon", "default")
		synced := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "synced"}, Data: map[string]string{"k": "v"}}
		if err := tenant.Create(ctx, synced); err != nil {
			t.Fatal(err)
		}
		hostCopy := &corev1.ConfigMap{}
		eventually(t, 30*time.Second, "the ConfigMap's host copy", func(ctx context.Context) (bool, error) {
			err := host.Get(ctx, client.ObjectKey{Namespace: hostNS, Name: "synced"}, hostCopy)
			return err == nil, err
		})
		s.waitServed(t, "a ConfigMap synced", "tenantry_syncer_writes_total", "controller_runtime_reconcile_time_seconds")

		// A host object of someone else's where a copy goes.
		if err := host.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: hostNS, Name: "taken"}}); err != nil {
			t.Fatal(err)
		}
		if err := tenant.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "taken"}}); err != nil {
			t.Fatal(err)
		}
		expectTenantEvent(t, tenant, "default", "taken", "HostConflict", "")
		s.waitServed(t, "a host object in the way", "tenantry_syncer_conflicts_total")

		// A Service type the default host policy refuses.
		nodePort := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nodeport"},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}},
		}
		if err := tenant.Create(ctx, nodePort); err != nil {
			t.Fatal(err)
		}
		expectTenantEvent(t, tenant, "default", "nodeport", syncer.ReasonHostRejected, "")
		s.waitServed(t, "a Service refused", "tenantry_syncer_host_rejections_total")

		// Drift that the patroller finds and a sync repairs. Events would
		// repair a host copy edited or deleted before a patrol round sees
		// it; so the copy loses its cluster label, and its update is routed
		// to no tenant, and its data changes. The patroller finds it
		// missing from the tenant's copies (drift found); the sync it
		// queues knows the copy by its annotations, gives the label back
		// and writes the data back (drift repaired).
		patch := []byte(`{"metadata":{"labels":{"` + syncer.LabelCluster + `":null}},"data":{"k":"drifted"}}`)
		if err := host.Patch(ctx, hostCopy, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err)
		}
		s.waitServed(t, "drift found", "tenantry_syncer_drift_found_total")
		eventually(t, 30*time.Second, "the host copy's label and data repaired", func(ctx context.Context) (bool, error) {
			if err := host.Get(ctx, client.ObjectKeyFromObject(hostCopy), hostCopy); err != nil {
				return false, err
			}
			return hostCopy.Labels[syncer.LabelCluster] == "mon" && hostCopy.Data["k"] == "v", fmt.Errorf("labels %v, data %v", hostCopy.Labels, hostCopy.Data)
		})
		s.waitServed(t, "drift repaired", "tenantry_syncer_drift_repaired_total")

		// A Pod, and its logs through the tenant's API server: the kubelet
		// API of its virtual node answers.
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		eventually(t, 30*time.Second, "the tenant Pod created", func(ctx context.Context) (bool, error) {
			err := tenant.Create(ctx, pod)
			return err == nil, err
		})
		eventually(t, 60*time.Second, "the tenant Pod running", func(ctx context.Context) (bool, error) {
			if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return false, err
			}
			return pod.Status.Phase == corev1.PodRunning && pod.Spec.NodeName != "", fmt.Errorf("phase %s on %q", pod.Status.Phase, pod.Spec.NodeName)
		})
		clientset, err := kubernetes.NewForConfig(env.Tenants[0].Config())
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "a kubelet API request counted", func(ctx context.Context) (bool, error) {
			_, logsErr := clientset.CoreV1().Pods("default").GetLogs("web", &corev1.PodLogOptions{Container: "app"}).DoRaw(ctx)
			if err := s.scrape(ctx); err != nil {
				return false, err
			}
			return served.has("tenantry_kubelet_api_requests_total") && served.has("tenantry_kubelet_api_request_duration_seconds"),
				fmt.Errorf("logs: %v", logsErr)
		})

		// A DNS query; from no tenant Pod's address, so refused, and counted.
		eventually(t, 30*time.Second, "a DNS query counted", func(ctx context.Context) (bool, error) {
			c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
			_, _, dnsErr := c.ExchangeContext(ctx, new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA), dnsAddr)
			if err := s.scrape(ctx); err != nil {
				return false, err
			}
			return served.has("tenantry_dns_queries_total") && served.has("tenantry_dns_query_duration_seconds"), fmt.Errorf("query: %v", dnsErr)
		})

		// A VirtualCluster with scheduled snapshots: its series, at 0
		// before its first (its control plane never runs here).
		scheduled := &tenantryv1alpha1.VirtualCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "scheduled"},
			Spec: tenantryv1alpha1.VirtualClusterSpec{
				KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: "scheduled-kubeconfig"},
				ControlPlane:        &tenantryv1alpha1.ControlPlaneSpec{},
				Snapshots:           &tenantryv1alpha1.SnapshotsSpec{Schedule: "@daily", Destination: "oci://127.0.0.1:9/snapshots"},
			},
		}
		if err := host.Create(ctx, scheduled); err != nil {
			t.Fatal(err)
		}
		s.waitServed(t, "a VirtualCluster with scheduled snapshots", "tenantry_snapshot_last_success_timestamp_seconds", "tenantry_snapshots_total")

		// Stopped (paused), then spawned again.
		setPaused(t, host, "mon", true)
		expectReady(t, host, "mon", metav1.ConditionFalse, tenantryv1alpha1.ReasonPaused)
		s.waitServed(t, "the tenant stopped", "tenantry_registry_stop_duration_seconds")
		setPaused(t, host, "mon", false)
		expectReady(t, host, "mon", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)

		// The tenant's API server stops answering the manager: it fails.
		if err := tenantPath.Disconnect(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tenantPath.Reconnect() }()
		s.waitServed(t, "the tenant failed", "tenantry_registry_cluster_failures_total")
		if err := s.scrape(ctx); err != nil {
			t.Error(err)
		}
	})

	t.Run("a sharded replica", func(t *testing.T) {
		metricsAddr := freeAddr(t)
		m := startManager(t, hostKubeconfig, "--metrics-bind-address", metricsAddr,
			"--shard-mode", "lease", "--shard-namespace", "default")
		defer func() {
			_ = m.cmd.Process.Kill()
			<-m.done
		}()
		s := &scraper{addr: metricsAddr, token: token, into: served}
		s.waitServed(t, "the replica took the VirtualCluster's Lease",
			"tenantry_sharding_keys_held", "tenantry_sharding_live_peers", "tenantry_sharding_handovers_total")
	})

	// Every metric named, served: by family (a histogram's _bucket, _sum
	// and _count series are its family's).
	namedFamilies := map[string][]string{}
	for name, where := range named {
		if !prometheusMade[name] {
			f, _ := served.family(name)
			namedFamilies[f] = append(namedFamilies[f], where...)
		}
	}
	var missing []string
	for _, f := range slicesSortedKeys(namedFamilies) {
		if !served.has(f) {
			missing = append(missing, f)
			t.Errorf("%s is not served by a running manager; it is named by:\n\t%s", f, strings.Join(slicesCompact(namedFamilies[f]), "\n\t"))
		}
	}
	// Every label an expression matches on or groups by, carried.
	for _, e := range exprs {
		checkExprLabels(t, served, e)
	}
	t.Logf("%d metric families checked (dashboard, alerting rules, docs), %d served families seen, %d missing: %v", len(namedFamilies), len(served), len(missing), missing)
}

// namedMetrics are the metric names that exprs (the dashboard's and the
// alerting rules') and the docs name, each with where (file:line).
func namedMetrics(t *testing.T, exprs []monitoringExpr) map[string][]string {
	t.Helper()
	named := map[string][]string{}
	for _, e := range exprs {
		for _, name := range exprMetric.FindAllString(e.expr, -1) {
			named[name] = append(named[name], e.where)
		}
	}
	for _, path := range docPaths(t) {
		docMetrics(t, path, named)
	}
	return named
}

// docPaths are the docs that may name metrics, relative to the
// repository's root: README.md, every Markdown file under docs/, and
// bench/README.md.
func docPaths(t *testing.T) []string {
	t.Helper()
	paths := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		rel, err := filepath.Rel(repoRoot, path)
		paths = append(paths, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "bench", "README.md")); err == nil {
		paths = append(paths, "bench/README.md")
	}
	return paths
}

// docMetrics adds the metric names that the doc at path (relative to the
// repository's root) names to named, each with where (path:line).
func docMetrics(t *testing.T, path string, named map[string][]string) {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	// `..._rest` stands for the subsystem (tenantry_<subsystem>_) of the
	// whole name before it in the same file, on its line or an earlier one.
	subsystem := ""
	for n := 1; scanner.Scan(); n++ {
		where := fmt.Sprintf("%s:%d", path, n)
		for _, m := range readmeName.FindAllStringSubmatch(scanner.Text(), -1) {
			if m[1] == "" {
				named[m[0]] = append(named[m[0]], where)
				if parts := strings.SplitN(m[0], "_", 3); len(parts) == 3 {
					subsystem = parts[0] + "_" + parts[1]
				}
				continue
			}
			if subsystem == "" {
				t.Fatalf("%s: `...%s` follows no whole metric name", where, m[1])
			}
			name := subsystem + m[1]
			named[name] = append(named[name], where+" (as `..."+m[1]+"`)")
		}
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
}

// monitoringExpr is one PromQL expression of the dashboard or the rules.
type monitoringExpr struct {
	where string
	expr  string
	// label is what a label_values() variable lists.
	label string
}

// monitoringExprs are the dashboard's and the alerting rules' expressions.
func monitoringExprs(t *testing.T) []monitoringExpr {
	t.Helper()
	var out []monitoringExpr
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			_ = json.Unmarshal(v.Query, &q.Query) // a plain string
		}
		e := monitoringExpr{where: fmt.Sprintf("grafana-dashboard.json variable %s", v.Name), expr: q.Query}
		if m := labelValues.FindStringSubmatch(q.Query); m != nil {
			e.expr, e.label = m[1], m[2]
		}
		out = append(out, e)
	}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, monitoringExpr{where: fmt.Sprintf("grafana-dashboard.json panel %q (%s)", p.Title, tg.RefID), expr: tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)

	data, err = os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string `json:"alert"`
				Record string `json:"record"`
				Expr   string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatalf("%s: %v", rulesPath, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, monitoringExpr{where: fmt.Sprintf("prometheus-rules.yaml alert %s%s", r.Alert, r.Record), expr: r.Expr})
		}
	}
	if len(out) == 0 {
		t.Fatal("no expression in the dashboard or the rules")
	}
	return out
}

type dashboardPanel struct {
	Title   string           `json:"title"`
	Panels  []dashboardPanel `json:"panels"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// checkExprLabels fails for each label that e matches on, groups by, or
// lists (label_values), that none of its metrics carries.
func checkExprLabels(t *testing.T, served families, e monitoringExpr) {
	t.Helper()
	carried := map[string]bool{"le": true} // histograms' buckets
	for l := range targetLabels {
		carried[l] = true
	}
	known := false
	for _, name := range exprMetric.FindAllString(e.expr, -1) {
		if f, ok := served.family(name); ok {
			known = true
			for l := range served[f].labels {
				carried[l] = true
			}
		}
	}
	if !known {
		return // no metric served: reported as missing
	}
	for _, m := range selectorMatchers.FindAllStringSubmatch(e.expr, -1) {
		f, ok := served.family(m[1])
		if !ok {
			continue
		}
		for _, l := range matcherLabel.FindAllStringSubmatch(m[2], -1) {
			if !served[f].labels[l[1]] && !targetLabels[l[1]] {
				t.Errorf("%s: %s has no label %s (it has %v)", e.where, f, l[1], slicesSortedKeys(served[f].labels))
			}
		}
	}
	var used []string
	for _, m := range groupingLabels.FindAllStringSubmatch(e.expr, -1) {
		for l := range strings.SplitSeq(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				used = append(used, l)
			}
		}
	}
	if e.label != "" {
		used = append(used, e.label)
	}
	for _, l := range used {
		if !carried[l] {
			t.Errorf("%s: groups by or lists label %s, which none of its metrics carries (they carry %v)", e.where, l, slicesSortedKeys(carried))
		}
	}
}

// family is one metric family the manager served: its type and the labels
// of its series.
type family struct {
	typ    string
	labels map[string]bool
}

// families are the metric families seen in any scrape, by name.
type families map[string]*family

// family is the family that name (a family's, or a histogram's or
// summary's series name) belongs to, if served; else the name's family as
// it would be called.
func (fs families) family(name string) (string, bool) {
	if _, ok := fs[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if f, ok := fs[base]; ok && (f.typ == "histogram" || f.typ == "summary") {
			return base, true
		}
		if suffix == "_bucket" {
			return base, false
		}
	}
	return name, false
}

func (fs families) has(name string) bool {
	_, ok := fs.family(name)
	return ok
}

// scraper reads a manager's metrics endpoint into a set of families, over
// HTTPS with a bearer token, as Prometheus does.
type scraper struct {
	addr  string
	token string
	into  families
}

// metricsClient trusts the manager's self-signed serving certificate.
var metricsClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the manager's self-signed certificate
}}

// scrape reads the endpoint once. A family with no series is not served:
// the text format leaves it out.
func (s *scraper) scrape(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+s.addr+"/metrics", nil)
	if err != nil {
		return err
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("GET /metrics: %s: %s", resp.Status, body)
	}
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(nil, 1<<20)
	types := map[string]string{}
	for scanner.Scan() {
		line := scanner.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if name, typ, ok := strings.Cut(rest, " "); ok {
				types[name] = typ
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels := parseSeries(line)
		f := name
		if _, ok := types[f]; !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, suffix); ok && types[base] != "" {
					f = base
					break
				}
			}
		}
		if s.into[f] == nil {
			s.into[f] = &family{typ: types[f], labels: map[string]bool{}}
		}
		for _, l := range labels {
			s.into[f].labels[l] = true
		}
	}
	return scanner.Err()
}

// parseSeries is the name and label names of one series line of the text
// format: name{label="value",...} value.
func parseSeries(line string) (name string, labels []string) {
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return line, nil
	}
	name = line[:i]
	if line[i] != '{' {
		return name, nil
	}
	rest := line[i+1:]
	for {
		rest = strings.TrimLeft(rest, ", ")
		if rest == "" || rest[0] == '}' {
			return name, labels
		}
		eq := strings.IndexByte(rest, '=')
		if eq < 0 || eq+1 >= len(rest) || rest[eq+1] != '"' {
			return name, labels
		}
		labels = append(labels, rest[:eq])
		rest = rest[eq+2:]
		// The quoted value, with its escapes.
		for j := 0; j < len(rest); j++ {
			if rest[j] == '\\' {
				j++
				continue
			}
			if rest[j] == '"' {
				rest = rest[j+1:]
				break
			}
		}
	}
}

// waitServed scrapes until every one of names is served, for a while; it
// does not fail, as the check at the end reports what never was.
func (s *scraper) waitServed(t *testing.T, what string, names ...string) {
	t.Helper()
	var missing []string
	err := tenantrytest.Poll(t.Context(), 200*time.Millisecond, 30*time.Second, func(ctx context.Context) (bool, error) {
		if err := s.scrape(ctx); err != nil {
			return false, err
		}
		missing = slices.DeleteFunc(slices.Clone(names), s.into.has)
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Logf("%s: not served within 30s: %v (%v)", what, missing, err)
	}
}

func slicesSortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func slicesCompact(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// metricsReaderToken is a token of a new host ServiceAccount default/name,
// bound, if reader, to the ClusterRole that config/rbac ships for metrics
// scrapers.
func metricsReaderToken(t *testing.T, cp *tenantrytest.ControlPlane, host client.Client, name string, reader bool) string {
	t.Helper()
	ctx := t.Context()
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	if err := host.Create(ctx, account); err != nil {
		t.Fatal(err)
	}
	if reader {
		data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "metrics_reader_role.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal(data, &role); err != nil {
			t.Fatal(err)
		}
		if err := host.Create(ctx, &role); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-metrics-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: name}},
		}
		if err := host.Create(ctx, binding); err != nil {
			t.Fatal(err)
		}
	}
	clientset, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	req, err := clientset.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return req.Status.Token
}
