package monitoring

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite prometheusrule.yaml from prometheus-rules.yaml")

var (
	monitoringDir  = filepath.Join("..", "..", "config", "monitoring")
	rulesFile      = filepath.Join(monitoringDir, "prometheus-rules.yaml")
	ruleCRFile     = filepath.Join(monitoringDir, "prometheusrule.yaml")
	dashboardFile  = filepath.Join(monitoringDir, "grafana-dashboard.json")
	kustomizeFile  = filepath.Join(monitoringDir, "kustomization.yaml")
	repoRoot       = filepath.Join("..", "..")
	docsURL        = "https://github.com/tenantry/tenantry/blob/main/"
	rulesJob       = "tenantry-manager-metrics" // the job the rules select
	dashboardJob   = "$job"                     // the dashboard's job variable
	severities     = []string{"critical", "warning", "info"}
	promParser     = parser.NewParser(parser.Options{})
	labelsTemplate = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
)

// servedName is the pattern by which cmd/manager's TestMonitoring finds the
// metric names in the dashboard's and the rules' expressions (and checks
// that a running manager serves each); up is made by Prometheus. A name
// that it would not find would go unchecked: the tests here refuse it.
var servedName = regexp.MustCompile(`^(?:(?:tenantry|controller_runtime|workqueue|rest_client|process|go|leader_election)_[a-z0-9_]+|up)$`)

// grafanaVariables stand in for the dashboard's time variables, which
// Grafana replaces before Prometheus sees an expression.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

func TestRules(t *testing.T) {
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.LegacyValidation, promParser, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, err := range errs {
		t.Errorf("%s", err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	anchors := docAnchors{}
	names := map[string]bool{}
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			where := fmt.Sprintf("group %s, alert %s", g.Name, r.Alert)
			if r.Alert == "" {
				t.Errorf("group %s: rule %q is no alert (only alerting rules here)", g.Name, r.Record)
				continue
			}
			alerts++
			if names[r.Alert] {
				t.Errorf("%s: the alert name is taken twice", where)
			}
			names[r.Alert] = true
			if time.Duration(r.For) <= 0 {
				t.Errorf("%s: no `for`: it would fire on one evaluation", where)
			}
			if !slices.Contains(severities, r.Labels["severity"]) {
				t.Errorf("%s: labels.severity %q, want one of %v", where, r.Labels["severity"], severities)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no annotations.%s", where, a)
				}
			}
			if url := r.Annotations["runbook_url"]; url != "" {
				if err := anchors.check(url); err != nil {
					t.Errorf("%s: runbook_url %s: %v", where, url, err)
				}
			}
			expr, err := promParser.ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			checkSelectors(t, where, expr, labels.MatchEqual, rulesJob)
			// A template that names a label the alert does not carry
			// renders "<no value>".
			if out, known := outputLabels(expr); known {
				for k, v := range r.Annotations {
					for _, m := range labelsTemplate.FindAllStringSubmatch(v, -1) {
						if !out[m[1]] {
							t.Errorf("%s: annotations.%s names $labels.%s, which the expression's result does not carry (it has %v)", where, k, m[1], keys(out))
						}
					}
				}
			}
		}
	}
	if alerts == 0 {
		t.Fatal("no alert at all")
	}
	t.Logf("%d alerts in %d groups", alerts, len(groups.Groups))
}

// The PrometheusRule holds the rule file's groups, as they are.
func TestPrometheusRule(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	want := prometheusRule(t, rules)
	if *update {
		if err := os.WriteFile(ruleCRFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	have, err := os.ReadFile(ruleCRFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Fatalf("%s does not hold %s's groups as they are: run `go test ./... -run TestPrometheusRule -update` in hack/monitoring", ruleCRFile, rulesFile)
	}
	// And the groups it holds are the same, read as YAML.
	var cr struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Spec       yaml.Node
	}
	if err := yaml.Unmarshal(have, &cr); err != nil {
		t.Fatal(err)
	}
	if cr.APIVersion != "monitoring.coreos.com/v1" || cr.Kind != "PrometheusRule" {
		t.Fatalf("%s is a %s %s", ruleCRFile, cr.APIVersion, cr.Kind)
	}
	var fromCR, fromFile rulefmt.RuleGroups
	if err := cr.Spec.Decode(&fromCR); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(rules, &fromFile); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(fromCR)
	b, _ := json.Marshal(fromFile)
	if !bytes.Equal(a, b) || len(fromFile.Groups) == 0 {
		t.Fatalf("the PrometheusRule's groups differ from the rule file's")
	}
}

// prometheusRule is rules (a rule file) as a PrometheusRule: its groups,
// from the line `groups:` on, under spec.
func prometheusRule(t *testing.T, rules []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	out.WriteString(`# Generated from prometheus-rules.yaml by hack/monitoring's tests
# (go test ./... -run TestPrometheusRule -update): edit that file, not this.
# The same alerting rules as a PrometheusRule, for prometheus-operator; add
# the labels your Prometheus's ruleSelector selects (kube-prometheus-stack:
# release: <its release name>).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: tenantry-manager
  namespace: tenantry-system
  labels:
    app.kubernetes.io/name: tenantry
    app.kubernetes.io/component: monitoring
spec:
`)
	started := false
	scanner := bufio.NewScanner(bytes.NewReader(rules))
	for scanner.Scan() {
		line := scanner.Text()
		if line == "groups:" {
			started = true
		}
		if !started {
			continue
		}
		if line == "" {
			out.WriteString("\n")
			continue
		}
		out.WriteString("  " + line + "\n")
	}
	if !started {
		t.Fatalf("%s has no line `groups:`", rulesFile)
	}
	return out.Bytes()
}

// dashboard is the part of a Grafana dashboard that the checks read.
type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	UID           string  `json:"uid"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource *datasource     `json:"datasource"`
	Panels     []panel         `json:"panels"`
	Targets    []target        `json:"targets"`
	GridPos    json.RawMessage `json:"gridPos"`
}

type target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *datasource `json:"datasource"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// labelValues is Grafana's label_values(<selector>, <label>) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

func TestDashboard(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.SchemaVersion < 36 || d.UID == "" {
		t.Errorf("schemaVersion %d, uid %q: want a current schema (>= 36) and a fixed uid", d.SchemaVersion, d.UID)
	}

	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Errorf("variable %s: query %s: %v", v.Name, v.Query, err)
			continue
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is no label_values(<selector>, <label>)", v.Name, q.Query)
			continue
		}
		expr, err := promParser.ParseExpr(m[1])
		if err != nil {
			t.Errorf("variable %s: %q: %v", v.Name, m[1], err)
			continue
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok && !servedName.MatchString(vs.Name) {
				t.Errorf("variable %s: metric %q is not of the names cmd/manager's TestMonitoring checks (%s)", v.Name, vs.Name, servedName)
			}
			return nil
		})
	}
	if vars["datasource"] != "datasource" {
		t.Errorf("no datasource variable of type datasource (variables: %v)", vars)
	}
	for _, v := range []string{"job", "instance", "cluster"} {
		if vars[v] != "query" {
			t.Errorf("no query variable %s (variables: %v)", v, vars)
		}
	}

	ids := map[int]string{}
	queries := 0
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if other, taken := ids[p.ID]; taken || p.ID == 0 {
				t.Errorf("%s: id taken by %q too, or none", where, other)
			}
			ids[p.ID] = p.Title
			if len(p.GridPos) == 0 {
				t.Errorf("%s: no gridPos", where)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no query", where)
			}
			if !fromVariable(p.Datasource) {
				t.Errorf("%s: datasource %+v, want the ${datasource} variable", where, p.Datasource)
			}
			for _, tg := range p.Targets {
				queries++
				where := fmt.Sprintf("%s, query %s", where, tg.RefID)
				if !fromVariable(tg.Datasource) {
					t.Errorf("%s: datasource %+v, want the ${datasource} variable", where, tg.Datasource)
				}
				expr, err := promParser.ParseExpr(grafanaVariables.Replace(tg.Expr))
				if err != nil {
					t.Errorf("%s: %v\n%s", where, err, tg.Expr)
					continue
				}
				checkSelectors(t, where, expr, labels.MatchRegexp, dashboardJob)
			}
		}
	}
	walk(d.Panels)
	if queries == 0 {
		t.Fatal("no query at all")
	}
	t.Logf("%d panels, %d queries", len(ids), queries)
}

func fromVariable(d *datasource) bool {
	return d != nil && d.Type == "prometheus" && (d.UID == "${datasource}" || d.UID == "$datasource")
}

// checkSelectors checks every series selector of expr: a metric name that
// cmd/manager's TestMonitoring checks, and the manager's job.
func checkSelectors(t *testing.T, where string, expr parser.Expr, jobMatch labels.MatchType, job string) {
	t.Helper()
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if !servedName.MatchString(vs.Name) {
			t.Errorf("%s: metric %q is not of the names cmd/manager's TestMonitoring checks (%s)", where, vs.Name, servedName)
		}
		if !slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
			return m.Name == "job" && m.Type == jobMatch && m.Value == job
		}) {
			t.Errorf("%s: %s selects no job%s%q: it would mix in other jobs' series", where, vs, jobMatch, job)
		}
		return nil
	})
}

// outputLabels are the labels that every series of expr's result carries,
// when they can be told without the series (known).
func outputLabels(expr parser.Expr) (out map[string]bool, known bool) {
	switch e := expr.(type) {
	case *parser.ParenExpr:
		return outputLabels(e.Expr)
	case *parser.StepInvariantExpr:
		return outputLabels(e.Expr)
	case *parser.NumberLiteral:
		return map[string]bool{}, true
	case *parser.AggregateExpr:
		switch {
		case e.Without:
			return nil, false
		case e.Op == parser.TOPK || e.Op == parser.BOTTOMK || e.Op == parser.LIMITK || e.Op == parser.LIMIT_RATIO:
			return outputLabels(e.Expr)
		}
		out := map[string]bool{}
		for _, l := range e.Grouping {
			out[l] = true
		}
		return out, true
	case *parser.BinaryExpr:
		lhs, lknown := outputLabels(e.LHS)
		if e.Op == parser.LOR {
			rhs, rknown := outputLabels(e.RHS)
			if !lknown || !rknown {
				return nil, false
			}
			for l := range lhs {
				if !rhs[l] {
					delete(lhs, l)
				}
			}
			return lhs, true
		}
		if e.LHS.Type() == parser.ValueTypeScalar {
			return outputLabels(e.RHS)
		}
		if !lknown {
			return nil, false
		}
		if e.VectorMatching != nil {
			for _, l := range e.VectorMatching.Include {
				lhs[l] = true
			}
		}
		return lhs, true
	case *parser.Call:
		switch e.Func.Name {
		case "absent", "absent_over_time", "vector", "scalar", "time":
			return map[string]bool{}, true // absent: none unless on a plain selector, not used here
		case "histogram_quantile":
			out, known := outputLabels(e.Args[1])
			delete(out, "le")
			return out, known
		}
		for _, a := range e.Args {
			if t := a.Type(); t == parser.ValueTypeVector || t == parser.ValueTypeMatrix {
				return outputLabels(a)
			}
		}
		return nil, false
	case *parser.SubqueryExpr:
		return outputLabels(e.Expr)
	case *parser.MatrixSelector:
		return outputLabels(e.VectorSelector)
	}
	return nil, false // a selector: every label of its series, unknown here
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// docAnchors are, by path in the repository, the anchors GitHub gives
// each Markdown file's headings, read once.
type docAnchors map[string]map[string]bool

// check says why url is not a section of a Markdown file of the
// repository: docsURL, the file's path, '#' and the anchor of one of its
// headings.
func (d docAnchors) check(url string) error {
	rest, ok := strings.CutPrefix(url, docsURL)
	if !ok {
		return fmt.Errorf("not under %s", docsURL)
	}
	path, anchor, ok := strings.Cut(rest, "#")
	if !ok || anchor == "" || !strings.HasSuffix(path, ".md") {
		return fmt.Errorf("not %s<file>.md#<anchor>", docsURL)
	}
	anchors, ok := d[path]
	if !ok {
		data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(path)))
		if err != nil {
			return fmt.Errorf("no such file in the repository: %w", err)
		}
		anchors = headingAnchors(data)
		d[path] = anchors
	}
	if !anchors[anchor] {
		return fmt.Errorf("%s has no heading with the anchor #%s", path, anchor)
	}
	return nil
}

// headingAnchors are the anchors GitHub gives a Markdown file's headings.
func headingAnchors(data []byte) map[string]bool {
	anchors := map[string]bool{}
	fenced := false
	scanner := bufio.NewScanner(bytes.NewReader(data))
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var slug strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				slug.WriteRune(r)
			}
		}
		anchors[slug.String()] = true
	}
	return anchors
}

func TestKustomization(t *testing.T) {
	data, err := os.ReadFile(kustomizeFile)
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		ConfigMapGenerator []struct {
			Name    string   `yaml:"name"`
			Files   []string `yaml:"files"`
			Options struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"options"`
		} `yaml:"configMapGenerator"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	for _, g := range k.ConfigMapGenerator {
		for _, f := range g.Files {
			if strings.HasSuffix(f, "="+filepath.Base(dashboardFile)) && g.Options.Labels["grafana_dashboard"] == "1" {
				return
			}
		}
	}
	t.Fatalf("%s makes no ConfigMap of %s labelled grafana_dashboard: \"1\"", kustomizeFile, filepath.Base(dashboardFile))
}
