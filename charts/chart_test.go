package charts

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tenantry/tenantry/controllers/controlplane"
	"github.com/tenantry/tenantry/controllers/syncers"
	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
	"github.com/tenantry/tenantry/providers"
)

const (
	// chartDir is the chart, from this package's directory.
	chartDir = "tenantry"
	// crdName is the VirtualCluster CRD's.
	crdName = "virtualclusters.tenantry.dev"
	// configNamespace is where config/ puts the manager.
	configNamespace = "tenantry-system"
	// hostPolicyArg is the --host-policy the chart gives, where it mounts
	// the policy's ConfigMap.
	hostPolicyArg = "--host-policy=/etc/tenantry/host-policy.yaml"
)

// shardedValues are the values that shard the manager.
var shardedValues = []string{"--set", "sharding.enabled=true,leaderElection.enabled=false"}

// A default host policy, as a user writes it in a values file, and another.
const (
	hostPolicyValues = `hostPolicy:
  pods:
    nodeSelector: {pool: tenants}
    tolerations: [{key: dedicated, value: tenants, effect: NoSchedule}]
  services:
    allowedTypes: [ClusterIP, ExternalName, LoadBalancer]
  resourceQuota:
    hard: {pods: "50", requests.cpu: "20", requests.memory: 64Gi}
  budget: {pods: "100"}
`
	otherHostPolicyValues = `hostPolicy:
  storage:
    allowedStorageClasses: [standard]
`
)

// variant is a set of values the chart is linted, rendered and installed with.
type variant struct {
	name string
	args []string // helm's --set and -f
}

// variants are the default values, sharding, and a host policy.
func variants(t *testing.T) []variant {
	return []variant{
		{"default", nil},
		{"sharded", shardedValues},
		{"host policy", []string{"-f", writeFile(t, "host-policy.yaml", hostPolicyValues)}},
	}
}

// TestChartLints runs helm lint --strict with each variant's values.
func TestChartLints(t *testing.T) {
	h := newHelm(t)
	for _, v := range variants(t) {
		t.Run(v.name, func(t *testing.T) {
			out, err := h.run(t, append([]string{"lint", "--strict", chartDir}, v.args...)...)
			if err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
		})
	}
}

// TestChartIsConfig holds the chart to config/: a release named tenantry in
// tenantry-system renders config/default's objects (but its Namespace,
// which the user or helm --create-namespace makes), with the same names,
// rights, CRD and Pod spec; sharded, config/sharded's Deployment.
func TestChartIsConfig(t *testing.T) {
	h := newHelm(t)
	chart := h.render(t, "tenantry", configNamespace)
	config := readKustomization(t, filepath.Join("..", "config", "default"))
	delete(config.objects, "Namespace/"+configNamespace)

	if got, want := slices.Sorted(maps.Keys(chart.objects)), slices.Sorted(maps.Keys(config.objects)); !slices.Equal(got, want) {
		t.Fatalf("the chart renders %v, config/default holds %v", got, want)
	}
	for key, o := range config.objects {
		if got := chart.objects[key].namespace; got != o.namespace {
			t.Errorf("%s: namespace %q in the chart, %q in config/", key, got, o.namespace)
		}
	}

	t.Run("CRDs", func(t *testing.T) {
		files, err := filepath.Glob(filepath.Join("..", "config", "crd", "bases", "*.yaml"))
		if err != nil || len(files) < 2 {
			t.Fatalf("config/crd/bases holds %v (%v), want the VirtualCluster and DataStore CRDs", files, err)
		}
		for _, file := range files {
			name := filepath.Base(file)
			chartCRD, err := os.ReadFile(filepath.Join(chartDir, "crds", name))
			if err != nil {
				t.Fatal(err)
			}
			configCRD, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(chartCRD, configCRD) {
				t.Errorf("charts/tenantry/crds/%s differs from config/crd/bases/%s: run make generate, which copies it", name, name)
			}
			// tenantry.dev_<plural>.yaml holds <plural>.tenantry.dev.
			group, plural, _ := strings.Cut(strings.TrimSuffix(name, ".yaml"), "_")
			var got, want apiextensionsv1.CustomResourceDefinition
			chart.decode(t, "CustomResourceDefinition", plural+"."+group, &got)
			config.decode(t, "CustomResourceDefinition", plural+"."+group, &want)
			same(t, "the rendered CRD "+name, got, want)
		}
	})

	t.Run("rights", func(t *testing.T) {
		var gotReader, wantReader rbacv1.ClusterRole
		chart.decode(t, "ClusterRole", "tenantry-manager-metrics-reader", &gotReader)
		config.decode(t, "ClusterRole", "tenantry-manager-metrics-reader", &wantReader)
		same(t, "ClusterRole tenantry-manager-metrics-reader rules", gotReader.Rules, wantReader.Rules)
		for _, name := range []string{"tenantry-manager", "tenantry-manager-custom-resources"} {
			var got, want rbacv1.ClusterRole
			chart.decode(t, "ClusterRole", name, &got)
			config.decode(t, "ClusterRole", name, &want)
			same(t, "ClusterRole "+name+" rules (copy config/rbac/ into charts/tenantry/templates/)", got.Rules, want.Rules)
			same(t, "ClusterRole "+name+" aggregation", got.AggregationRule, want.AggregationRule)

			var gotBinding, wantBinding rbacv1.ClusterRoleBinding
			chart.decode(t, "ClusterRoleBinding", name, &gotBinding)
			config.decode(t, "ClusterRoleBinding", name, &wantBinding)
			same(t, "ClusterRoleBinding "+name+" role", gotBinding.RoleRef, wantBinding.RoleRef)
			same(t, "ClusterRoleBinding "+name+" subjects", gotBinding.Subjects, wantBinding.Subjects)
		}
		var got, want rbacv1.Role
		chart.decode(t, "Role", "tenantry-leader-election", &got)
		config.decode(t, "Role", "tenantry-leader-election", &want)
		same(t, "Role tenantry-leader-election rules (copy config/rbac/leader_election_role.yaml's into charts/tenantry/templates/)", got.Rules, want.Rules)
		var gotBinding, wantBinding rbacv1.RoleBinding
		chart.decode(t, "RoleBinding", "tenantry-leader-election", &gotBinding)
		config.decode(t, "RoleBinding", "tenantry-leader-election", &wantBinding)
		same(t, "RoleBinding tenantry-leader-election role", gotBinding.RoleRef, wantBinding.RoleRef)
		same(t, "RoleBinding tenantry-leader-election subjects", gotBinding.Subjects, wantBinding.Subjects)
	})

	t.Run("Deployment", func(t *testing.T) {
		var got, want appsv1.Deployment
		chart.decode(t, "Deployment", "tenantry-manager", &got)
		config.decode(t, "Deployment", "tenantry-manager", &want)
		same(t, "replicas", got.Spec.Replicas, want.Spec.Replicas)
		samePodSpec(t, got.Spec.Template.Spec, want.Spec.Template.Spec)
		if !slices.Contains(got.Spec.Template.Spec.Containers[0].Args, "--leader-elect") {
			t.Errorf("no --leader-elect in %q", got.Spec.Template.Spec.Containers[0].Args)
		}
		if image, repository := got.Spec.Template.Spec.Containers[0].Image, "tenantry/manager:"; !strings.HasPrefix(image, repository) {
			t.Errorf("image %q, config/'s is %s...", image, repository)
		}
		selectsPods(t, got)
	})

	t.Run("metrics Service", func(t *testing.T) {
		var got, want corev1.Service
		chart.decode(t, "Service", "tenantry-manager-metrics", &got)
		config.decode(t, "Service", "tenantry-manager-metrics", &want)
		same(t, "ports", got.Spec.Ports, want.Spec.Ports)
		var deployment appsv1.Deployment
		chart.decode(t, "Deployment", "tenantry-manager", &deployment)
		same(t, "the Service's selector (the Deployment's)", got.Spec.Selector, deployment.Spec.Selector.MatchLabels)
	})

	t.Run("labels", func(t *testing.T) {
		for key, o := range chart.objects {
			if o.kind == "CustomResourceDefinition" {
				continue // crds/ is not templated
			}
			var meta struct {
				Metadata struct{ Labels map[string]string }
			}
			if err := yaml.Unmarshal(o.yaml, &meta); err != nil {
				t.Fatal(err)
			}
			for label, value := range map[string]string{
				"app.kubernetes.io/name":       "tenantry",
				"app.kubernetes.io/instance":   "tenantry",
				"app.kubernetes.io/version":    appVersion(t),
				"app.kubernetes.io/managed-by": "Helm",
				"helm.sh/chart":                "tenantry-0.1.0",
			} {
				if got := meta.Metadata.Labels[label]; got != value {
					t.Errorf("%s: label %s=%q, want %q", key, label, got, value)
				}
			}
		}
	})

	t.Run("sharded", func(t *testing.T) {
		sharded := h.render(t, "tenantry", configNamespace, shardedValues...)
		var got appsv1.Deployment
		sharded.decode(t, "Deployment", "tenantry-manager", &got)
		want := readKustomization(t, filepath.Join("..", "config", "sharded"))
		var patch appsv1.Deployment
		want.decode(t, "Deployment", "tenantry-manager", &patch)
		same(t, "sharded replicas", got.Spec.Replicas, patch.Spec.Replicas)
		args := got.Spec.Template.Spec.Containers[0].Args
		if slices.Contains(args, "--leader-elect") || !slices.Contains(args, "--shard-mode=lease") {
			t.Errorf("sharded args %q: want --shard-mode=lease and no --leader-elect", args)
		}
		// config/sharded's patch replaces the args and leaves
		// --kubelet-bind-address at its default, which is the port the
		// chart (and config/manager) give.
		same(t, "sharded args", slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "--kubelet-bind-address=:10250" }),
			patch.Spec.Template.Spec.Containers[0].Args)
		managerTakes(t, sharded, "")
	})
}

// TestChartValues checks what each value renders, and that the manager's
// own flag parsing takes the args the chart gives it.
func TestChartValues(t *testing.T) {
	h := newHelm(t)

	t.Run("image", func(t *testing.T) {
		c := h.render(t, "tenantry", configNamespace).container(t)
		if want := "tenantry/manager:" + appVersion(t); c.Image != want || c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("image %q (%s), want %q (IfNotPresent)", c.Image, c.ImagePullPolicy, want)
		}
		c = h.render(t, "tenantry", configNamespace, "--set", "image.repository=registry.example/tenantry,image.tag=dev,image.pullPolicy=Always").container(t)
		if want := "registry.example/tenantry:dev"; c.Image != want || c.ImagePullPolicy != corev1.PullAlways {
			t.Errorf("image %q (%s), want %q (Always)", c.Image, c.ImagePullPolicy, want)
		}
	})

	t.Run("replicas", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want int32
		}{
			{nil, 2}, // leader election
			{shardedValues, 3},
			{append(slices.Clone(shardedValues), "--set", "replicaCount=5"), 5},
			{[]string{"--set", "replicaCount=0"}, 0},
			{[]string{"--set", "leaderElection.enabled=false"}, 1},
		} {
			d := h.render(t, "tenantry", configNamespace, tc.args...).deployment(t)
			if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.want {
				t.Errorf("helm template %q: replicas %v, want %d", tc.args, d.Spec.Replicas, tc.want)
			}
		}
	})

	t.Run("values that do not go together fail", func(t *testing.T) {
		for _, tc := range []struct {
			set, want string
		}{
			{"sharding.enabled=true", "sharding.enabled and leaderElection.enabled exclude each other"},
			{"sharding.enabled=true,leaderElection.enabled=true", "sharding.enabled and leaderElection.enabled exclude each other"},
			{"leaderElection.enabled=false,replicaCount=2", "every replica would run every VirtualCluster"},
			{"dns.service.enabled=true", "dns.service.enabled with 2 replicas"},
			{"dns.service.enabled=true,sharding.enabled=true,leaderElection.enabled=false", "dns.service.enabled with 3 replicas"},
		} {
			out, err := h.run(t, "template", "tenantry", chartDir, "--set", tc.set)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("helm template --set %s: %v, want a failure saying %q; output:\n%s", tc.set, err, tc.want, out)
			}
		}
	})

	t.Run("DNS Service", func(t *testing.T) {
		none := h.render(t, "tenantry", configNamespace)
		if none.has("Service", "tenantry-dns") {
			t.Error("a DNS Service by default")
		}
		m := h.render(t, "tenantry", configNamespace, "--set", "dns.service.enabled=true,replicaCount=1")
		var svc corev1.Service
		m.decode(t, "Service", "tenantry-dns", &svc)
		c := m.container(t)
		if !slices.Contains(c.Args, "--dns-service="+configNamespace+"/tenantry-dns") || !slices.Contains(c.Args, "--dns-bind-address=:10053") {
			t.Errorf("args %q, want --dns-service naming the Service and --dns-bind-address=:10053", c.Args)
		}
		for _, proto := range []corev1.Protocol{corev1.ProtocolUDP, corev1.ProtocolTCP} {
			i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Protocol == proto && p.Port == 53 })
			if i < 0 {
				t.Errorf("the DNS Service has no port 53/%s: %+v", proto, svc.Spec.Ports)
				continue
			}
			target := svc.Spec.Ports[i].TargetPort.StrVal
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
				return p.Name == target && p.Protocol == proto && p.ContainerPort == 10053
			}) {
				t.Errorf("port 53/%s targets %q, which the container does not name on 10053/%s: %+v", proto, target, proto, c.Ports)
			}
		}
		if d := m.deployment(t); !maps.Equal(svc.Spec.Selector, d.Spec.Selector.MatchLabels) {
			t.Errorf("the DNS Service selects %v, the Deployment's Pods are %v", svc.Spec.Selector, d.Spec.Selector.MatchLabels)
		}
		managerTakes(t, m, "")
	})

	t.Run("host policy", func(t *testing.T) {
		none := h.render(t, "tenantry", configNamespace)
		if none.has("ConfigMap", "tenantry-host-policy") {
			t.Error("a host policy ConfigMap without hostPolicy")
		}
		d := none.deployment(t)
		if args := d.Spec.Template.Spec.Containers[0].Args; slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--host-policy") }) {
			t.Errorf("--host-policy without hostPolicy: %q", args)
		}
		if len(d.Spec.Template.Spec.Volumes) > 0 || len(d.Spec.Template.Annotations) > 0 {
			t.Errorf("volumes %v, annotations %v without hostPolicy", d.Spec.Template.Spec.Volumes, d.Spec.Template.Annotations)
		}

		with := h.render(t, "tenantry", configNamespace, "-f", writeFile(t, "policy.yaml", hostPolicyValues))
		policy := checkHostPolicy(t, with, "tenantry", hostPolicyValues)
		managerTakes(t, with, policy)

		// Another policy: another checksum on the Pod template, which rolls the Pods.
		other := h.render(t, "tenantry", configNamespace, "-f", writeFile(t, "other.yaml", otherHostPolicyValues))
		checkHostPolicy(t, other, "tenantry", otherHostPolicyValues)
		before := with.deployment(t).Spec.Template.Annotations["checksum/host-policy"]
		after := other.deployment(t).Spec.Template.Annotations["checksum/host-policy"]
		if before == "" || before == after {
			t.Errorf("checksum/host-policy %q, then %q for another policy: want two different ones", before, after)
		}
	})

	t.Run("flags", func(t *testing.T) {
		values := writeFile(t, "flags.yaml", `syncResources: [pods, services, configmaps]
syncCustomResources: [samples.tenantry.dev/v1alpha1/Foo, example.com/v1/Bar]
patrolPeriod: 30s
hostQPS: 1000000
hostBurst: 2000000
logLevel: debug
disableNetworkIsolation: true
kubelet: {port: 10251}
metrics: {port: 9090}
probes: {port: 9091}
extraArgs: [--leader-elect-lease-duration=30s, --leader-elect-renew-deadline=20s]
`)
		m := h.render(t, "tenantry", configNamespace, "-f", values)
		c := m.container(t)
		same(t, "args", c.Args, []string{
			"--leader-elect",
			"--metrics-bind-address=:9090",
			"--metrics-secure=true",
			"--health-probe-bind-address=:9091",
			"--kubelet-bind-address=:10251",
			"--control-plane-activity-bind-address=:9444",
			"--control-plane-activity-url=https://tenantry-manager-activity.tenantry-system.svc:9444",
			"--sync-resources=pods,services,configmaps",
			"--sync-custom-resources=samples.tenantry.dev/v1alpha1/Foo,example.com/v1/Bar",
			"--patrol-period=30s",
			"--host-qps=1000000",
			"--host-burst=2000000",
			"--log-level=debug",
			"--disable-network-isolation",
			"--leader-elect-lease-duration=30s",
			"--leader-elect-renew-deadline=20s",
		})
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		same(t, "container ports", ports, map[string]int32{"kubelet-api": 10251, "metrics": 9090, "probes": 9091, "activity": 9444})
		var svc corev1.Service
		m.decode(t, "Service", "tenantry-manager-metrics", &svc)
		if p := svc.Spec.Ports; len(p) != 1 || p[0].Port != 9090 || p[0].TargetPort.StrVal != "metrics" {
			t.Errorf("metrics Service ports %v, want 9090 to the port named metrics", p)
		}

		p, s := managerTakes(t, m, "")
		if !p.LeaderElection || p.LeaseDuration != 30*time.Second || p.Logger.Level != "debug" ||
			p.MetricsBindAddress != ":9090" || p.HealthProbeBindAddress != ":9091" {
			t.Errorf("the manager's options: %+v", p)
		}
		if !slices.Equal(s.Resources, []string{"pods", "services", "configmaps"}) || len(s.CustomResources) != 2 ||
			s.Syncer.PatrolPeriod != 30*time.Second || s.HostQPS != 1e6 || s.HostBurst != 2e6 ||
			!s.Syncer.DisableNetworkIsolation || s.Kubelet.BindAddress != ":10251" {
			t.Errorf("the syncers' options: %+v", s)
		}
		// The defaults give no flag the manager has a default for.
		managerTakes(t, h.render(t, "tenantry", configNamespace), "")
	})

	t.Run("release namespace and names", func(t *testing.T) {
		m := h.render(t, "acme", "acme-system")
		if strings.Contains(m.text, configNamespace) {
			t.Errorf("%s in a release in acme-system", configNamespace)
		}
		for key, o := range m.objects {
			clusterScoped := strings.HasPrefix(o.kind, "Cluster") || o.kind == "CustomResourceDefinition"
			if clusterScoped != (o.namespace == "") || !clusterScoped && o.namespace != "acme-system" {
				t.Errorf("%s: namespace %q", key, o.namespace)
			}
		}
		subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "acme-tenantry-manager", Namespace: "acme-system"}}
		for _, key := range []string{"ClusterRoleBinding/acme-tenantry-manager", "ClusterRoleBinding/acme-tenantry-manager-custom-resources", "RoleBinding/acme-tenantry-leader-election"} {
			var b rbacv1.RoleBinding // a ClusterRoleBinding's fields are the same
			kind, name, _ := strings.Cut(key, "/")
			m.decode(t, kind, name, &b)
			same(t, key+" subjects", b.Subjects, subjects)
		}
		if !m.has("ServiceAccount", "acme-tenantry-manager") || m.deployment(t).Spec.Template.Spec.ServiceAccountName != "acme-tenantry-manager" {
			t.Error("the Deployment does not run as the release's ServiceAccount acme-tenantry-manager")
		}
	})

	t.Run("no ServiceAccount, rights or Service", func(t *testing.T) {
		m := h.render(t, "tenantry", configNamespace, "--set", "serviceAccount.create=false,serviceAccount.name=mine,rbac.create=false,metrics.service.enabled=false,activity.service.enabled=false")
		got := slices.Sorted(maps.Keys(m.objects))
		if want := []string{"CustomResourceDefinition/datastores.tenantry.dev", "CustomResourceDefinition/" + crdName, "Deployment/tenantry-manager"}; !slices.Equal(got, want) {
			t.Errorf("rendered %v, want %v", got, want)
		}
		if sa := m.deployment(t).Spec.Template.Spec.ServiceAccountName; sa != "mine" {
			t.Errorf("ServiceAccount %q, want mine", sa)
		}
	})
}

// TestChartInstalls applies the rendered chart, default and sharded, to a
// real API server (server-side, as kubectl apply --server-side does: the
// CRD first, then the rest), which validates every object against its
// schema, then holds the Deployment and the ServiceAccount's rights to what
// was rendered. A third release goes in with helm install and upgrade.
func TestChartInstalls(t *testing.T) {
	h := newHelm(t)
	kubectl := tool(t, "kubectl", "envtest")
	env := tenantrytest.New(t, tenantrytest.Options{})
	kubeconfig := writeKubeconfig(t, env.Host)
	c := newClient(t, env.Host)

	for _, tc := range []struct {
		release, namespace string
		args               []string
		leaderElect        bool
	}{
		{"tenantry", configNamespace, nil, true},
		{"sharded", "tenantry-sharded", shardedValues, false},
	} {
		t.Run(tc.release, func(t *testing.T) {
			createNamespace(t, kubectl, kubeconfig, tc.namespace)
			m := h.render(t, tc.release, tc.namespace, tc.args...)
			var crds, rest []string
			for _, o := range m.docs {
				if o.kind == "CustomResourceDefinition" {
					crds = append(crds, string(o.yaml))
				} else {
					rest = append(rest, string(o.yaml))
				}
			}
			runKubectl(t, kubectl, kubeconfig, strings.Join(crds, "---\n"), "apply", "--server-side", "-f", "-")
			tenantrytest.Eventually(t, 30*time.Second, "the CRD established", func(ctx context.Context) (bool, error) {
				var crd apiextensionsv1.CustomResourceDefinition
				if err := c.Get(ctx, client.ObjectKey{Name: crdName}, &crd); err != nil {
					return false, err
				}
				for _, cond := range crd.Status.Conditions {
					if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
						return true, nil
					}
				}
				return false, errors.New("not Established")
			})
			out := runKubectl(t, kubectl, kubeconfig, strings.Join(rest, "---\n"), "apply", "--server-side", "-f", "-")
			// The namespace enforces the restricted Pod Security level, as
			// config/manager/namespace.yaml does: the Pods must meet it.
			if strings.Contains(out, "Warning") {
				t.Errorf("kubectl apply warned:\n%s", out)
			}

			rendered := m.deployment(t)
			var d appsv1.Deployment
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(&rendered), &d); err != nil {
				t.Fatalf("reading the applied Deployment back: %v", err)
			}
			args := d.Spec.Template.Spec.Containers[0].Args
			same(t, "the applied Deployment's args", args, rendered.Spec.Template.Spec.Containers[0].Args)
			same(t, "the applied Deployment's replicas", d.Spec.Replicas, rendered.Spec.Replicas)
			if slices.Contains(args, "--leader-elect") != tc.leaderElect || slices.Contains(args, "--shard-mode=lease") == tc.leaderElect {
				t.Errorf("args %q: want --leader-elect %v, --shard-mode=lease %v", args, tc.leaderElect, !tc.leaderElect)
			}
			sa := d.Spec.Template.Spec.ServiceAccountName
			if err := c.Get(t.Context(), client.ObjectKey{Namespace: tc.namespace, Name: sa}, &corev1.ServiceAccount{}); err != nil {
				t.Errorf("the Deployment's ServiceAccount %s: %v", sa, err)
			}
			checkRights(t, kubectl, kubeconfig, tc.namespace, sa)
		})
	}

	t.Run("the PodSecurity check is live", func(t *testing.T) {
		// What the test above would see of a Pod that breaks the
		// restricted level: the Deployment applies, with a warning.
		d := h.render(t, "tenantry", configNamespace).deployment(t)
		d.Spec.Template.Spec.SecurityContext = nil
		d.Spec.Template.Spec.Containers[0].SecurityContext = nil
		doc, err := yaml.Marshal(&d)
		if err != nil {
			t.Fatal(err)
		}
		out := runKubectl(t, kubectl, kubeconfig, string(doc), "apply", "--server-side", "--dry-run=server", "-f", "-")
		if !strings.Contains(out, "would violate PodSecurity") {
			t.Errorf("no PodSecurity warning for a Pod without its security context:\n%s", out)
		}
	})

	t.Run("helm install and upgrade", func(t *testing.T) {
		const release, namespace = "policy", "tenantry-policy"
		createNamespace(t, kubectl, kubeconfig, namespace)
		out, err := h.run(t, "install", release, chartDir, "--namespace", namespace, "--kubeconfig", kubeconfig,
			"-f", writeFile(t, "policy.yaml", hostPolicyValues))
		if err != nil {
			t.Fatalf("helm install: %v\n%s", err, out)
		}
		if !strings.Contains(out, "kubectl get virtualclusters -o wide") {
			t.Errorf("helm install printed no next steps:\n%s", out)
		}
		key := client.ObjectKey{Namespace: namespace, Name: "policy-tenantry-manager"}
		var d appsv1.Deployment
		if err := c.Get(t.Context(), key, &d); err != nil {
			t.Fatalf("the installed Deployment: %v", err)
		}
		if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, hostPolicyArg) {
			t.Errorf("args %q: no %s", d.Spec.Template.Spec.Containers[0].Args, hostPolicyArg)
		}
		checksum := d.Spec.Template.Annotations["checksum/host-policy"]
		checkRights(t, kubectl, kubeconfig, namespace, d.Spec.Template.Spec.ServiceAccountName)

		out, err = h.run(t, "upgrade", release, chartDir, "--namespace", namespace, "--kubeconfig", kubeconfig,
			"-f", writeFile(t, "other.yaml", otherHostPolicyValues))
		if err != nil {
			t.Fatalf("helm upgrade: %v\n%s", err, out)
		}
		if err := c.Get(t.Context(), key, &d); err != nil {
			t.Fatal(err)
		}
		if got := d.Spec.Template.Annotations["checksum/host-policy"]; got == checksum {
			t.Errorf("a new host policy left the Pod template's checksum at %s: the Pods would not roll", got)
		}
		var cm corev1.ConfigMap
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: "policy-tenantry-host-policy"}, &cm); err != nil {
			t.Fatal(err)
		}
		var policy, want tenantryv1alpha1.HostPolicy
		if err := yaml.UnmarshalStrict([]byte(cm.Data["host-policy.yaml"]), &policy); err != nil {
			t.Fatal(err)
		}
		want = valuesHostPolicy(t, otherHostPolicyValues)
		same(t, "the upgraded host policy", policy, want)

		// helm uninstall keeps the CRD (crds/ is installed, never deleted):
		// VirtualClusters outlive the release.
		if out, err := h.run(t, "uninstall", release, "--namespace", namespace, "--kubeconfig", kubeconfig); err != nil {
			t.Fatalf("helm uninstall: %v\n%s", err, out)
		}
		tenantrytest.Eventually(t, 30*time.Second, "the Deployment gone", func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, key, &appsv1.Deployment{})
			return client.IgnoreNotFound(err) == nil && err != nil, err
		})
		if err := c.Get(t.Context(), client.ObjectKey{Name: crdName}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
			t.Errorf("the CRD after helm uninstall: %v", err)
		}
	})
}

// checkRights asks the host what the manager's ServiceAccount may do: its
// ClusterRole's rights everywhere, Leases in its own namespace only.
func checkRights(t *testing.T, kubectl, kubeconfig, namespace, serviceAccount string) {
	t.Helper()
	canI(t, kubectl, kubeconfig, namespace, serviceAccount, "yes", "list", "virtualclusters.tenantry.dev")
	canI(t, kubectl, kubeconfig, namespace, serviceAccount, "yes", "patch", "virtualclusters.tenantry.dev", "--subresource=status")
	canI(t, kubectl, kubeconfig, namespace, serviceAccount, "yes", "create", "pods", "--all-namespaces")
	canI(t, kubectl, kubeconfig, namespace, serviceAccount, "yes", "create", "leases.coordination.k8s.io", "-n", namespace)
	canI(t, kubectl, kubeconfig, namespace, serviceAccount, "yes", "delete", "leases.coordination.k8s.io", "-n", namespace)
	// Checked after the grants have arrived: a right the roles do not give.
	canI(t, kubectl, kubeconfig, namespace, serviceAccount, "no", "create", "leases.coordination.k8s.io", "-n", "default")
	canI(t, kubectl, kubeconfig, namespace, serviceAccount, "no", "delete", "virtualclusters.tenantry.dev")
	canI(t, kubectl, kubeconfig, namespace, serviceAccount, "no", "update", "nodes")
}

// canI waits until kubectl auth can-i answers want for the ServiceAccount:
// the host's authorizer sees new roles and bindings a moment later.
func canI(t *testing.T, kubectl, kubeconfig, namespace, serviceAccount, want string, args ...string) {
	t.Helper()
	as := "system:serviceaccount:" + namespace + ":" + serviceAccount
	tenantrytest.Eventually(t, 30*time.Second, "can-i "+strings.Join(args, " ")+" as "+as+": "+want, func(ctx context.Context) (bool, error) {
		// yes or no on stdout (exiting 0 or 1); warnings on stderr.
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig, "auth", "can-i", "--as", as}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, _ := cmd.Output()
		if got := strings.TrimSpace(string(out)); got != want {
			return false, fmt.Errorf("%q (%s)", got, strings.TrimSpace(stderr.String()))
		}
		return true, nil
	})
}

// createNamespace makes a namespace that enforces the restricted Pod
// Security level, as config/manager/namespace.yaml does.
func createNamespace(t *testing.T, kubectl, kubeconfig, name string) {
	t.Helper()
	runKubectl(t, kubectl, kubeconfig, `apiVersion: v1
kind: Namespace
metadata:
  name: `+name+`
  labels:
    pod-security.kubernetes.io/enforce: restricted
`, "apply", "--server-side", "-f", "-")
}

// checkHostPolicy checks a render with the host policy in values: the
// ConfigMap holds it as the manager reads it, mounted where --host-policy
// names it, with a checksum on the Pod template. It returns the file.
func checkHostPolicy(t *testing.T, m manifest, release, values string) string {
	t.Helper()
	var cm corev1.ConfigMap
	m.decode(t, "ConfigMap", release+"-host-policy", &cm)
	file := cm.Data["host-policy.yaml"]
	var policy tenantryv1alpha1.HostPolicy
	if err := yaml.UnmarshalStrict([]byte(file), &policy); err != nil {
		t.Fatalf("the ConfigMap's host-policy.yaml is no host policy: %v\n%s", err, file)
	}
	same(t, "the ConfigMap's host policy", policy, valuesHostPolicy(t, values))

	d := m.deployment(t)
	pod := d.Spec.Template.Spec
	if !slices.Contains(pod.Containers[0].Args, hostPolicyArg) {
		t.Errorf("args %q: no %s", pod.Containers[0].Args, hostPolicyArg)
	}
	same(t, "volumes", pod.Volumes, []corev1.Volume{{Name: "host-policy", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}},
	}}})
	same(t, "volume mounts", pod.Containers[0].VolumeMounts, []corev1.VolumeMount{{Name: "host-policy", MountPath: "/etc/tenantry", ReadOnly: true}})
	if d.Spec.Template.Annotations["checksum/host-policy"] == "" {
		t.Error("no checksum/host-policy annotation on the Pod template")
	}
	return file
}

// valuesHostPolicy is the hostPolicy of a values file.
func valuesHostPolicy(t *testing.T, values string) tenantryv1alpha1.HostPolicy {
	t.Helper()
	var v struct {
		HostPolicy tenantryv1alpha1.HostPolicy `json:"hostPolicy"`
	}
	if err := yaml.UnmarshalStrict([]byte(values), &v); err != nil {
		t.Fatal(err)
	}
	return v.HostPolicy
}

// managerTakes parses the rendered Deployment's args as bin/manager does
// (the flags of providers and syncers, which cmd/manager binds, then their
// validation), with the host policy file in place of the mounted one, and
// fails the test if the manager would refuse them.
func managerTakes(t *testing.T, m manifest, hostPolicy string) (providers.Options, syncers.Options) {
	t.Helper()
	args := slices.Clone(m.container(t).Args)
	if i := slices.Index(args, hostPolicyArg); i >= 0 {
		args[i] = "--host-policy=" + writeFile(t, "host-policy.yaml", hostPolicy)
	}
	var p providers.Options
	var s syncers.Options
	var cp controlplane.Options
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	p.BindFlags(fs)
	s.BindFlags(fs)
	cp.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("the manager refuses the chart's args %q: %v", args, err)
	}
	if fs.NArg() > 0 {
		t.Fatalf("the manager would refuse the arguments %q", fs.Args())
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("the manager refuses the chart's args %q: %v", args, err)
	}
	p.Logger.Output = io.Discard
	if _, err := providers.NewLogger(p.Logger); err != nil {
		t.Fatalf("the manager refuses the chart's --log-level: %v", err)
	}
	return p, s
}

// samePodSpec compares the chart's manager Pod with config/'s, but for the
// image, which the chart names with its own tag.
func samePodSpec(t *testing.T, got, want corev1.PodSpec) {
	t.Helper()
	same(t, "serviceAccountName", got.ServiceAccountName, want.ServiceAccountName)
	same(t, "terminationGracePeriodSeconds", got.TerminationGracePeriodSeconds, want.TerminationGracePeriodSeconds)
	same(t, "the Pod's securityContext", got.SecurityContext, want.SecurityContext)
	if len(got.Containers) != 1 || len(want.Containers) != 1 {
		t.Fatalf("%d containers in the chart, %d in config/: want one each", len(got.Containers), len(want.Containers))
	}
	g, w := got.Containers[0], want.Containers[0]
	same(t, "container name", g.Name, w.Name)
	same(t, "args", g.Args, w.Args)
	same(t, "env", g.Env, w.Env)
	same(t, "ports", g.Ports, w.Ports)
	same(t, "livenessProbe", g.LivenessProbe, w.LivenessProbe)
	same(t, "readinessProbe", g.ReadinessProbe, w.ReadinessProbe)
	same(t, "resources", g.Resources, w.Resources)
	same(t, "the container's securityContext", g.SecurityContext, w.SecurityContext)
}

// selectsPods checks that the Deployment's selector selects its own Pods.
func selectsPods(t *testing.T, d appsv1.Deployment) {
	t.Helper()
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the selector's %s=%s is not on the Pod template (%v)", k, v, d.Spec.Template.Labels)
		}
	}
}

// same fails the test if got and want differ, showing both.
func same(t *testing.T, what string, got, want any) {
	t.Helper()
	if !equality.Semantic.DeepEqual(got, want) {
		g, _ := yaml.Marshal(got)
		w, _ := yaml.Marshal(want)
		t.Errorf("%s differ:\nthe chart's:\n%s\nwant:\n%s", what, g, w)
	}
}

// object is one object of a manifest.
type object struct {
	kind, name, namespace string
	yaml                  []byte
}

// manifest is a set of objects, as helm template renders them or as
// config/ holds them.
type manifest struct {
	text    string
	docs    []object          // in order
	objects map[string]object // by Kind/name
}

// parseManifest splits YAML documents into objects.
func parseManifest(t *testing.T, text string) manifest {
	t.Helper()
	m := manifest{text: text, objects: map[string]object{}}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading YAML: %v", err)
		}
		var meta struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		if meta.Kind == "" {
			continue // empty, or comments only
		}
		o := object{kind: meta.Kind, name: meta.Metadata.Name, namespace: meta.Metadata.Namespace, yaml: doc}
		key := o.kind + "/" + o.name
		if _, dup := m.objects[key]; dup {
			t.Fatalf("%s twice", key)
		}
		m.objects[key] = o
		m.docs = append(m.docs, o)
	}
	return m
}

func (m manifest) has(kind, name string) bool {
	_, ok := m.objects[kind+"/"+name]
	return ok
}

// decode decodes the object strictly (no field its type does not know)
// into into.
func (m manifest) decode(t *testing.T, kind, name string, into any) {
	t.Helper()
	o, ok := m.objects[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s %s among %v", kind, name, slices.Sorted(maps.Keys(m.objects)))
	}
	if err := yaml.UnmarshalStrict(o.yaml, into); err != nil {
		t.Fatalf("%s %s: %v", kind, name, err)
	}
}

// deployment is the manifest's one Deployment.
func (m manifest) deployment(t *testing.T) appsv1.Deployment {
	t.Helper()
	var found []string
	for _, o := range m.docs {
		if o.kind == "Deployment" {
			found = append(found, o.name)
		}
	}
	if len(found) != 1 {
		t.Fatalf("Deployments %v: want one", found)
	}
	var d appsv1.Deployment
	m.decode(t, "Deployment", found[0], &d)
	return d
}

// container is the manager's container.
func (m manifest) container(t *testing.T) corev1.Container {
	t.Helper()
	d := m.deployment(t)
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers: want one", n)
	}
	return d.Spec.Template.Spec.Containers[0]
}

// readKustomization reads the resources of a kustomization directory,
// following directories among them, and applies none of its
// transformations but one patch's (config/sharded's), which it returns in
// place of the object it patches.
func readKustomization(t *testing.T, dir string) manifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string
		Patches   []struct{ Path string }
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	var text strings.Builder
	for _, r := range k.Resources {
		path := filepath.Join(dir, r)
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.IsDir() {
			text.WriteString(readKustomization(t, path).text)
			text.WriteString("\n---\n")
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text.Write(data)
		text.WriteString("\n---\n")
	}
	m := parseManifest(t, text.String())
	for _, p := range k.Patches {
		data, err := os.ReadFile(filepath.Join(dir, p.Path))
		if err != nil {
			t.Fatal(err)
		}
		patch := parseManifest(t, string(data))
		for key, o := range patch.objects {
			if _, ok := m.objects[key]; !ok {
				t.Fatalf("%s patches %s, which %s does not hold", p.Path, key, dir)
			}
			m.objects[key] = o
		}
	}
	return m
}

// appVersion is the chart's appVersion.
func appVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("no appVersion in Chart.yaml: %v", err)
	}
	return c.AppVersion
}

// helmCmd runs bin/helm with homes of its own, so that the test neither
// reads nor writes the user's Helm configuration, repositories or cache.
type helmCmd struct {
	path, home string
}

func newHelm(t *testing.T) *helmCmd {
	return &helmCmd{path: tool(t, "helm", "helm"), home: t.TempDir()}
}

// run runs helm and returns its output, stdout then stderr.
func (h *helmCmd) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	stdout, stderr, err := h.output(t, args...)
	return stdout + stderr, err
}

func (h *helmCmd) output(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.path, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(h.home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.home, "config"),
		"HELM_DATA_HOME="+filepath.Join(h.home, "data"),
		"KUBECONFIG="+filepath.Join(h.home, "no-kubeconfig"), // only --kubeconfig reaches a cluster
	)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// render runs helm template with the CRDs and parses what it prints.
func (h *helmCmd) render(t *testing.T, release, namespace string, args ...string) manifest {
	t.Helper()
	all := append([]string{"template", release, chartDir, "--namespace", namespace, "--include-crds"}, args...)
	stdout, stderr, err := h.output(t, all...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(all, " "), err, stderr)
	}
	return parseManifest(t, stdout)
}

// tool finds a program that make builds into bin/: in $KUBEBUILDER_ASSETS
// (which the Makefile exports as bin/), else in the repository's bin/.
func tool(t *testing.T, name, target string) string {
	t.Helper()
	var tried []string
	if dir := os.Getenv(tenantrytest.AssetsEnv); dir != "" {
		tried = append(tried, filepath.Join(dir, name))
	}
	tried = append(tried, filepath.Join("..", "bin", name))
	for _, path := range tried {
		if info, err := os.Stat(path); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			abs, err := filepath.Abs(path)
			if err != nil {
				t.Fatal(err)
			}
			return abs
		}
	}
	t.Fatalf("no %s at %s: run `make %s`, which builds it into bin/ (the Makefile exports %s=bin)",
		name, strings.Join(tried, " or "), target, tenantrytest.AssetsEnv)
	return ""
}

// runKubectl runs kubectl with stdin and fails the test if it fails.
func runKubectl(t *testing.T, kubectl, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	return tenantrytest.Kubectl{Path: kubectl}.MustRun(t, kubeconfig, stdin, args...)
}

// writeKubeconfig writes the control plane's admin kubeconfig to a file.
func writeKubeconfig(t *testing.T, cp *tenantrytest.ControlPlane) string {
	t.Helper()
	path, err := cp.KubeconfigFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// writeFile writes a file in a directory of the test's and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// newClient is a client of the control plane that knows the built-in
// types and CRDs.
func newClient(t *testing.T, cp *tenantrytest.ControlPlane) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
