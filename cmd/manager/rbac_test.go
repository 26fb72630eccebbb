package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	examplesconfig "github.com/tenantry/tenantry/examples/config"
	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// The manager's identity as config/rbac makes it.
const (
	managerNamespace      = "tenantry-system"
	managerServiceAccount = "tenantry-manager"
	managerUser           = "system:serviceaccount:" + managerNamespace + ":" + managerServiceAccount
)

// fooGVK is the example custom resource, public in the host.
var fooGVK = schema.GroupVersionKind{Group: "samples.tenantry.dev", Version: "v1alpha1", Kind: "Foo"}

// TestLeastPrivilege installs config/ as docs/install.md does (kubectl apply
// -k), runs bin/manager as its ServiceAccount with nothing but those
// rights, and holds the role to the rights the manager uses, both ways:
//
//   - with every built-in syncer, a public CRD and its custom-resource
//     syncer, the kubelet API (logs, exec, attach, port-forward, eviction),
//     leader election with a failover, then sharding, the host answers no
//     request of the manager's with 403 Forbidden;
//   - every verb on every resource that config/rbac grants (and the
//     sample role for the custom resource) shows in the host's audit log
//     as asked by the manager: a right nothing uses fails the test.
func TestLeastPrivilege(t *testing.T) {
	kubectl, err := tenantrytest.FindKubectl()
	if err != nil {
		t.Fatal(err)
	}
	crds, err := examplesconfig.HostCRDs()
	if err != nil {
		t.Fatal(err)
	}
	env := tenantrytest.New(t, tenantrytest.Options{
		Tenants:                 1,
		HostNodes:               1,
		TenantControllerManager: true,
		HostAuditLog:            true,
		HostCRDs:                crds,
	})
	ctx := t.Context()
	host := newHostClient(t, env.Host)
	adminKubeconfig := kubeconfigFile(t, env.Host)

	// Install as a user does; the sharded variant must apply too.
	kubectl.MustRun(t, adminKubeconfig, "", "apply", "--server-side", "-k", repoPath("config", "default"))
	kubectl.MustRun(t, adminKubeconfig, "", "apply", "--server-side", "--dry-run=server", "-k", repoPath("config", "sharded"))
	kubectl.MustRun(t, adminKubeconfig, "", "apply", "--server-side", "-f", repoPath("config", "samples", "custom_resource_role.yaml"))
	// The host's ClusterRole aggregation fills the custom-resource role.
	eventually(t, 30*time.Second, "the Foo rights aggregated into tenantry-manager-custom-resources", func(ctx context.Context) (bool, error) {
		var role rbacv1.ClusterRole
		if err := host.Get(ctx, client.ObjectKey{Name: "tenantry-manager-custom-resources"}, &role); err != nil {
			return false, err
		}
		return len(role.Rules) > 0, nil
	})
	grants := readGrants(t, host)

	managerKubeconfig := serviceAccountKubeconfig(t, env.Host)
	// A quota and limits for its host namespaces, and a budget over a
	// Pod of a runtime class whose overhead it counts, to use those
	// rights.
	runtimeClass := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: leastRuntimeClass}, Handler: "runc",
		Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}
	if err := host.Create(ctx, runtimeClass); err != nil {
		t.Fatal(err)
	}
	registerTenant(t, host, "least", env.Tenants[0], &tenantryv1alpha1.HostPolicy{
		Budget:        corev1.ResourceList{corev1.ResourcePods: resource.MustParse("50")},
		Pods:          &tenantryv1alpha1.PodPolicy{AllowedRuntimeClasses: []string{leastRuntimeClass}},
		ResourceQuota: &corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("50")}},
		LimitRange: &corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type:    corev1.LimitTypeContainer,
			Default: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
		}}},
	})
	tenant := newHostClient(t, env.Tenants[0])
	tenantKubeconfig := kubeconfigFile(t, env.Tenants[0])

	// Leader election: two replicas, every syncer, the kubelet API.
	args := []string{
		"--sync-custom-resources", fooGVK.Group + "/" + fooGVK.Version + "/" + fooGVK.Kind,
		"--kubelet-advertise-address", "127.0.0.1",
		// Soon enough for the test: the patrol finds host copies whose
		// labels were taken off by hand.
		"--patrol-period", "2s",
	}
	elected := append([]string{"--leader-elect", "--leader-election-namespace", managerNamespace}, args...)
	replicas := []*managerProcess{startManager(t, managerKubeconfig, elected...), startManager(t, managerKubeconfig, elected...)}
	expectReady(t, host, "least", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
	leader := waitLeader(t, replicas)

	t.Run("every syncer, and a person's kubectl", func(t *testing.T) {
		exerciseTenant(t, host, tenant, env.Host, env.Tenants[0], kubectl, tenantKubeconfig)
	})

	t.Run("failover", func(t *testing.T) {
		if err := leader.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-leader.done
		next := replicas[0]
		if next == leader {
			next = replicas[1]
		}
		waitLeader(t, []*managerProcess{next})
		probeSync(t, host, tenant, "after-failover")
		stopGracefully(t, next)
	})

	t.Run("sharded", func(t *testing.T) {
		sharded := append([]string{"--shard-mode=lease", "--shard-namespace", managerNamespace}, args...)
		a := startManager(t, managerKubeconfig, sharded...)
		b := startManager(t, managerKubeconfig, sharded...)
		probeSync(t, host, tenant, "sharded")
		// A replica that leaves gives its Leases back.
		stopGracefully(t, a)
		stopGracefully(t, b)
	})

	// Isolation turned off: the isolation NetworkPolicies go. A pause and
	// a resume, twice: the second Spawned event patches the first's
	// series. Then the VirtualCluster's deletion: its host namespaces go.
	metricsAddr := freeAddr(t)
	last := startManager(t, managerKubeconfig, append([]string{"--disable-network-isolation", "--metrics-bind-address", metricsAddr}, args...)...)
	// Its metrics, to a scraper the host authenticates (TokenReview) and
	// allows (SubjectAccessReview).
	scrape := &scraper{addr: metricsAddr, token: metricsReaderToken(t, env.Host, host, "least-scraper", true), into: families{}}
	eventually(t, time.Minute, "the manager's metrics, read with a token", func(ctx context.Context) (bool, error) {
		err := scrape.scrape(ctx)
		return err == nil && len(scrape.into) > 0, err
	})
	eventually(t, time.Minute, "the isolation NetworkPolicy deleted", func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKey{Namespace: syncer.HostNamespace("least", "default"), Name: syncer.IsolationPolicyName}, &networkingv1.NetworkPolicy{})
		return apierrors.IsNotFound(err), err
	})
	for range 2 {
		setPaused(t, host, "least", true)
		expectReady(t, host, "least", metav1.ConditionFalse, tenantryv1alpha1.ReasonPaused)
		setPaused(t, host, "least", false)
		expectReady(t, host, "least", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
	}
	// The kubeconfig Secret changed again and again: the tenant is
	// re-spawned each time, and a Respawning Event like the one before on
	// an unchanged VirtualCluster becomes a series, which the manager
	// patches. (A status write in between, as a re-spawn that meets the
	// tenant still starting, makes the next Event a new one: so up to five
	// changes.)
	patched := countRequests(t, env.Host, "patch", "events")
	for i := 0; countRequests(t, env.Host, "patch", "events") == patched; i++ {
		if i == 5 {
			t.Fatal("five re-spawns and no Event series patched")
		}
		created := countRequests(t, env.Host, "create", "events")
		path, err := env.Tenants[0].NewPath()
		if err != nil {
			t.Fatal(err)
		}
		kubeconfig, err := path.Kubeconfig()
		if err != nil {
			t.Fatal(err)
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "least-kubeconfig"}}
		patch := fmt.Appendf(nil, `{"data":{"kubeconfig":%q}}`, base64.StdEncoding.EncodeToString(kubeconfig))
		if err := host.Patch(ctx, secret, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "an Event of the re-spawn, created or patched", func(context.Context) (bool, error) {
			return countRequests(t, env.Host, "create", "events") > created || countRequests(t, env.Host, "patch", "events") > patched, nil
		})
		expectReady(t, host, "least", metav1.ConditionTrue, tenantryv1alpha1.ReasonSpawned)
	}
	provisionControlPlane(t, host)
	vc := &tenantryv1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "least"}}
	if err := host.Delete(ctx, vc); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the VirtualCluster and its host namespaces gone", func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc)
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("VirtualCluster: %v", err)
		}
		var namespaces corev1.NamespaceList
		if err := host.List(ctx, &namespaces, client.MatchingLabels{syncer.LabelCluster: "least"}); err != nil {
			return false, err
		}
		for _, ns := range namespaces.Items {
			if ns.DeletionTimestamp == nil {
				return false, fmt.Errorf("host namespace %s not deleted", ns.Name)
			}
		}
		return true, nil
	})
	stopGracefully(t, last)

	events, err := env.Host.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	used := map[grant]bool{}
	for _, e := range events {
		if e.User.Username != managerUser || e.ObjectRef == nil {
			continue
		}
		if e.Code() == 403 {
			t.Errorf("the host refused the manager: %s %s: %s", e.Verb, e.RequestURI, e.ResponseStatus.Message)
		}
		for _, g := range grants {
			if g.covers(e) {
				used[g] = true
			}
		}
	}
	var unused []string
	for _, g := range grants {
		if !used[g] && !notExercised(g) {
			unused = append(unused, g.String())
		}
	}
	if len(unused) > 0 {
		sort.Strings(unused)
		t.Errorf("rights granted to the manager that it never used (remove them from config/rbac, or show their use here):\n  %s", strings.Join(unused, "\n  "))
	}
	for _, m := range append(replicas, last) {
		for _, l := range m.lines(t) {
			if strings.Contains(strings.ToLower(l.Msg), "forbidden") {
				t.Errorf("a manager logged a refusal: %s", l.Msg)
			}
		}
	}
}

// provisionControlPlane has the manager provision a control plane (which
// never comes up on simulated nodes), then delete it, keeping its data:
// its workloads go, by name. A DataStore that does not answer gets its
// status.
func provisionControlPlane(t *testing.T, host client.Client) {
	ctx := t.Context()
	store := &tenantryv1alpha1.DataStore{ObjectMeta: metav1.ObjectMeta{Name: "nowhere"}, Spec: tenantryv1alpha1.DataStoreSpec{Etcd: tenantryv1alpha1.EtcdDataStore{
		Endpoints: []string{"https://127.0.0.1:1"}, SecretRef: tenantryv1alpha1.SecretReference{Namespace: "default", Name: "nowhere-etcd"},
	}}}
	if err := host.Create(ctx, store); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the DataStore's status", func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(store), store); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(store.Status.Conditions, tenantryv1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse, fmt.Errorf("condition %+v", c)
	})
	vc := &tenantryv1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "provisioned"},
		Spec: tenantryv1alpha1.VirtualClusterSpec{
			KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: "provisioned-kubeconfig"},
			ControlPlane:        &tenantryv1alpha1.ControlPlaneSpec{RetainData: true},
		},
	}
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	ns := controlplane.Namespace(vc.Name)
	eventually(t, time.Minute, "the control plane's StatefulSet and kubeconfig", func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: controlplane.WorkloadName}, &appsv1.StatefulSet{}); err != nil {
			return false, err
		}
		err := host.Get(ctx, client.ObjectKey{Namespace: "default", Name: "provisioned-kubeconfig"}, &corev1.Secret{})
		return err == nil, err
	})
	if err := host.Delete(ctx, vc); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the VirtualCluster gone, its workload too, its data kept", func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("VirtualCluster: %v", err)
		}
		if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: controlplane.WorkloadName}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("StatefulSet: %v", err)
		}
		err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: controlplane.PKISecretName}, &corev1.Secret{})
		return err == nil, fmt.Errorf("the certificates: %v", err)
	})
}

// notExercised are the rights the manager needs that no request of this
// test can make it use: the kubelet API relays a tenant API server's
// request with its method, and a tenant API server that speaks WebSocket
// to kubelets upgrades a GET (get pods/exec) where this one's SPDY POSTs
// (create pods/exec).
func notExercised(g grant) bool {
	switch g.resource {
	case "pods/exec", "pods/attach", "pods/portforward":
		return g.apiGroup == "" && g.verb == "get"
	}
	return false
}

// grant is one verb on one resource (with its subresource), in one
// namespace for a Role's, as a role gives it.
type grant struct {
	role      string
	apiGroup  string
	resource  string // "pods" or "pods/log"
	verb      string
	namespace string // "" for a ClusterRole's: any
}

func (g grant) String() string {
	where := "cluster-wide"
	if g.namespace != "" {
		where = "in " + g.namespace
	}
	group := g.apiGroup
	if group == "" {
		group = "core"
	}
	return fmt.Sprintf("%s %s.%s %s (%s)", g.verb, g.resource, group, where, g.role)
}

// covers says whether the request e used this grant.
func (g grant) covers(e tenantrytest.AuditEvent) bool {
	ref := e.ObjectRef
	resource := ref.Resource
	if ref.Subresource != "" {
		resource += "/" + ref.Subresource
	}
	verb := e.Verb
	// An informer's streaming list (a watch that sends the initial
	// objects) stands for its list: client-go lists instead when the host
	// does not stream (before Kubernetes 1.32), so the right stays needed.
	if verb == "watch" && g.verb == "list" && strings.Contains(e.RequestURI, "sendInitialEvents=true") {
		verb = "list"
	}
	// A server-side apply that makes the object is authorized as a create
	// too (the API server asks its authorizer again, which the audit log
	// does not show): it answers 201.
	if verb == "patch" && g.verb == "create" && e.Code() == http.StatusCreated {
		verb = "create"
	}
	return verb == g.verb && ref.APIGroup == g.apiGroup && resource == g.resource &&
		(g.namespace == "" || ref.Namespace == g.namespace)
}

// readGrants expands the roles bound to the manager's ServiceAccount into
// single grants.
func readGrants(t *testing.T, host client.Client) []grant {
	t.Helper()
	ctx := t.Context()
	var out []grant
	add := func(role, namespace string, rules []rbacv1.PolicyRule) {
		for _, r := range rules {
			if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
				t.Fatalf("%s: a rule the check does not read: %+v", role, r)
			}
			for _, group := range r.APIGroups {
				for _, res := range r.Resources {
					for _, verb := range r.Verbs {
						if group == "*" || res == "*" || verb == "*" {
							t.Fatalf("%s grants a wildcard: %+v", role, r)
						}
						out = append(out, grant{role: role, apiGroup: group, resource: res, verb: verb, namespace: namespace})
					}
				}
			}
		}
	}
	subject := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == managerNamespace && s.Name == managerServiceAccount
		})
	}
	var bindings rbacv1.ClusterRoleBindingList
	if err := host.List(ctx, &bindings); err != nil {
		t.Fatal(err)
	}
	for _, b := range bindings.Items {
		if !subject(b.Subjects) {
			continue
		}
		var role rbacv1.ClusterRole
		if err := host.Get(ctx, client.ObjectKey{Name: b.RoleRef.Name}, &role); err != nil {
			t.Fatal(err)
		}
		add("ClusterRole "+role.Name, "", role.Rules)
	}
	var roleBindings rbacv1.RoleBindingList
	if err := host.List(ctx, &roleBindings); err != nil {
		t.Fatal(err)
	}
	for _, b := range roleBindings.Items {
		if !subject(b.Subjects) {
			continue
		}
		if b.RoleRef.Kind != "Role" {
			t.Fatalf("RoleBinding %s/%s binds a %s: the check reads Roles", b.Namespace, b.Name, b.RoleRef.Kind)
		}
		var role rbacv1.Role
		if err := host.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.RoleRef.Name}, &role); err != nil {
			t.Fatal(err)
		}
		add("Role "+role.Namespace+"/"+role.Name, role.Namespace, role.Rules)
	}
	if len(out) == 0 {
		t.Fatal("no role is bound to the manager's ServiceAccount")
	}
	return out
}

// exerciseTenant makes the manager use each of its rights: a tenant
// namespace with a quota and limits, an object of every synced type
// created, changed and deleted, a Pod that a person reads the logs of,
// execs into, attaches to, port-forwards to and evicts, and a public
// custom resource.
// leastRuntimeClass is the host RuntimeClass that TestLeastPrivilege's
// tenant may name.
const leastRuntimeClass = "least-class"

func exerciseTenant(t *testing.T, host, tenant client.Client, hostCP, tenantCP *tenantrytest.ControlPlane, kubectl tenantrytest.Kubectl, tenantKubeconfig string) {
	ctx := t.Context()
	const ns = "app"
	hostNS := syncer.HostNamespace("least", ns)
	if err := tenant.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	foo := &unstructured.Unstructured{}
	foo.SetGroupVersionKind(fooGVK)
	foo.SetNamespace(ns)
	foo.SetName("foo")
	objects := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "config"}, Data: map[string]string{"k": "v"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secret"}, StringData: map[string]string{"k": "v"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "robot"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}},
		}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-policy"}},
		foo,
	}
	eventually(t, 30*time.Second, "the Foo CRD in the tenant", func(ctx context.Context) (bool, error) {
		err := tenant.Create(ctx, foo.DeepCopy())
		return err == nil || apierrors.IsAlreadyExists(err), err
	})
	for _, o := range objects[:len(objects)-1] {
		if err := tenant.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	// The tenant's own RuntimeClass of the name, for its admission.
	if err := tenant.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: leastRuntimeClass}, Handler: "runc"}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{RuntimeClassName: ptr.To(leastRuntimeClass),
			Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := tenant.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the tenant Pod running", func(ctx context.Context) (bool, error) {
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		return pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "", fmt.Errorf("phase %s, IP %q", pod.Status.Phase, pod.Status.PodIP)
	})
	// A Service without a selector, and the EndpointSlice the tenant
	// makes for it, naming the Pod.
	manual := []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "manual"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
		&discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "manual-1", Labels: map[string]string{discoveryv1.LabelServiceName: "manual"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{pod.Status.PodIP}}},
			Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}},
		},
	}
	for _, o := range manual {
		if err := tenant.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	objects = append(objects, manual...)
	// A Pod resized: so is its host copy. (One that no node takes: kwok
	// reports no container resources, and the API takes that for a node
	// that cannot resize a running Pod.)
	sized := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sized"},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"least.example.com/pool": "none"},
			Containers: []corev1.Container{{Name: "app", Image: "app", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			}}}},
	}
	if err := tenant.Create(ctx, sized); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the sized Pod's host copy", func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKey{Namespace: hostNS, Name: sized.Name}, &corev1.Pod{})
		return err == nil, err
	})
	eventually(t, 30*time.Second, "the tenant Pod resized", func(ctx context.Context) (bool, error) {
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(sized), sized); err != nil {
			return false, err
		}
		sized.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("200m")
		err := tenant.SubResource("resize").Update(ctx, sized)
		return err == nil, err // a conflict: Tenantry wrote its status meanwhile
	})
	eventually(t, 30*time.Second, "the host Pod resized", func(ctx context.Context) (bool, error) {
		var hostPod corev1.Pod
		if err := host.Get(ctx, client.ObjectKey{Namespace: hostNS, Name: sized.Name}, &hostPod); err != nil {
			return false, err
		}
		cpu := hostPod.Spec.Containers[0].Resources.Requests.Cpu()
		return cpu.Cmp(resource.MustParse("200m")) == 0, fmt.Errorf("CPU request %s", cpu)
	})
	// An ephemeral container (kubectl debug) added: so it is to the host
	// Pod.
	eventually(t, 30*time.Second, "an ephemeral container added to the tenant Pod", func(ctx context.Context) (bool, error) {
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(sized), sized); err != nil {
			return false, err
		}
		sized.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: "busybox", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent,
		}}}
		err := tenant.SubResource("ephemeralcontainers").Update(ctx, sized)
		return err == nil, err // a conflict: Tenantry wrote its status meanwhile
	})
	eventually(t, 30*time.Second, "the ephemeral container added to the host Pod", func(ctx context.Context) (bool, error) {
		var hostPod corev1.Pod
		if err := host.Get(ctx, client.ObjectKey{Namespace: hostNS, Name: sized.Name}, &hostPod); err != nil {
			return false, err
		}
		e := hostPod.Spec.EphemeralContainers
		return len(e) == 1 && e[0].Name == "debugger", fmt.Errorf("ephemeral containers %+v", e)
	})
	// The tenant's NetworkPolicy, translated into the host.
	eventually(t, 30*time.Second, "the tenant NetworkPolicy's host copy", func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKey{Namespace: hostNS, Name: "tenant-policy"}, &networkingv1.NetworkPolicy{})
		return err == nil, err
	})
	for _, kind := range []client.ObjectList{&corev1.ConfigMapList{}, &corev1.SecretList{}, &corev1.ServiceAccountList{},
		&corev1.ServiceList{}, &corev1.PersistentVolumeClaimList{}, &corev1.ResourceQuotaList{}, &corev1.LimitRangeList{}} {
		eventually(t, 30*time.Second, fmt.Sprintf("%T in %s", kind, hostNS), func(ctx context.Context) (bool, error) {
			if err := host.List(ctx, kind, client.InNamespace(hostNS)); err != nil {
				return false, err
			}
			return len(mustItems(t, kind)) > 0, nil
		})
	}

	// Host objects whose labels someone took off: the manager reads them
	// from the host and gives them back.
	hostObjects := []client.Object{
		&corev1.ConfigMap{}, &corev1.Secret{}, &corev1.ServiceAccount{}, &corev1.Service{}, &corev1.PersistentVolumeClaim{},
		&corev1.Pod{}, &corev1.ResourceQuota{}, &corev1.LimitRange{}, &networkingv1.NetworkPolicy{}, hostFoo(),
		&discoveryv1.EndpointSlice{},
	}
	names := map[string]string{"EndpointSlice": "manual-1", "ConfigMap": "config", "Secret": "secret", "ServiceAccount": "robot", "Service": "web",
		"PersistentVolumeClaim": "data", "Pod": "web", "ResourceQuota": syncer.QuotaName, "LimitRange": syncer.LimitRangeName,
		"NetworkPolicy": syncer.IsolationPolicyName, "Foo": "foo"}
	for _, o := range hostObjects {
		kind := kindOf(t, host, o)
		key := client.ObjectKey{Namespace: hostNS, Name: names[kind]}
		// The wait above holds once any object of the kind is there (a
		// host namespace's kube-root-ca.crt, say): wait for this one.
		eventually(t, 30*time.Second, fmt.Sprintf("host %s %s", kind, key), func(ctx context.Context) (bool, error) {
			err := host.Get(ctx, key, o)
			return err == nil, err
		})
		patch := []byte(`{"metadata":{"labels":{"` + syncer.LabelManagedBy + `":null,"` + syncer.LabelCluster + `":null}}}`)
		if err := host.Patch(ctx, o, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range hostObjects {
		kind := kindOf(t, host, o)
		if policy := kind == "ResourceQuota" || kind == "LimitRange" || kind == "NetworkPolicy"; policy {
			// A namespace policy without Tenantry's labels is someone
			// else's, left alone once read; the admin puts them back.
			eventually(t, time.Minute, fmt.Sprintf("the manager reading host %s %s", kind, o.GetName()), func(context.Context) (bool, error) {
				events, err := hostCP.AuditEvents()
				return slices.ContainsFunc(events, func(e tenantrytest.AuditEvent) bool {
					return e.User.Username == managerUser && e.Verb == "get" && e.ObjectRef != nil &&
						e.ObjectRef.Namespace == hostNS && e.ObjectRef.Name == o.GetName()
				}), err
			})
			patch := []byte(`{"metadata":{"labels":{"` + syncer.LabelManagedBy + `":"` + syncer.ManagedByValue + `","` + syncer.LabelCluster + `":"least"}}}`)
			if err := host.Patch(ctx, o, client.RawPatch("application/merge-patch+json", patch)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		eventually(t, time.Minute, fmt.Sprintf("the labels back on host %s %s", kind, o.GetName()), func(ctx context.Context) (bool, error) {
			if err := host.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return false, err
			}
			return o.GetLabels()[syncer.LabelCluster] == "least", nil
		})
	}

	// The host namespace's Pod Security level lowered by hand is put back
	// (an update).
	var hostNamespace corev1.Namespace
	if err := host.Get(ctx, client.ObjectKey{Name: hostNS}, &hostNamespace); err != nil {
		t.Fatal(err)
	}
	enforce := hostNamespace.Labels["pod-security.kubernetes.io/enforce"]
	patch := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged"}}}`)
	if err := host.Patch(ctx, &hostNamespace, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "host namespace "+hostNS+"'s Pod Security level put back", func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKey{Name: hostNS}, &hostNamespace); err != nil {
			return false, err
		}
		return hostNamespace.Labels["pod-security.kubernetes.io/enforce"] == enforce, fmt.Errorf("labels %v", hostNamespace.Labels)
	})

	// The isolation policy edited in the host is put back.
	var isolation networkingv1.NetworkPolicy
	if err := host.Get(ctx, client.ObjectKey{Namespace: hostNS, Name: syncer.IsolationPolicyName}, &isolation); err != nil {
		t.Fatal(err)
	}
	isolation.Spec.Ingress = append(isolation.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
	if err := host.Update(ctx, &isolation); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the isolation policy restored", func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(&isolation), &isolation); err != nil {
			return false, err
		}
		return !slices.ContainsFunc(isolation.Spec.Ingress, func(r networkingv1.NetworkPolicyIngressRule) bool { return len(r.From) == 0 }), nil
	})

	// A person's kubectl, through the virtual node's kubelet API.
	if out := kubectl.MustRun(t, tenantKubeconfig, "", "-n", ns, "logs", "web"); !strings.Contains(out, tenantrytest.KwokLogLines[0]) {
		t.Errorf("kubectl logs = %q, want the container's lines", out)
	}
	if out := kubectl.MustRun(t, tenantKubeconfig, "", "-n", ns, "exec", "web", "--", "echo", "hello"); !strings.Contains(out, "hello") {
		t.Errorf("kubectl exec = %q, want hello", out)
	}
	attach(t, kubectl, tenantKubeconfig, hostCP, ns, "web")
	portForward(t, kubectl, tenantKubeconfig, ns, "web")

	// Changes go down; deletions remove the host copies.
	for _, o := range append(objects, pod, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) {
		patch := []byte(`{"metadata":{"labels":{"changed":"yes"}}}`)
		if err := tenant.Patch(ctx, o, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatalf("changing %T %s: %v", o, o.GetName(), err)
		}
	}
	var vc tenantryv1alpha1.VirtualCluster
	if err := host.Get(ctx, client.ObjectKey{Name: "least"}, &vc); err != nil {
		t.Fatal(err)
	}
	// Patches, not updates: the manager writes the status meanwhile.
	before := vc.DeepCopy()
	vc.Spec.HostPolicy.ResourceQuota.Hard[corev1.ResourcePods] = resource.MustParse("40")
	vc.Spec.HostPolicy.LimitRange.Limits[0].Default[corev1.ResourceCPU] = resource.MustParse("400m")
	if err := host.Patch(ctx, &vc, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the changed quota in "+hostNS, func(ctx context.Context) (bool, error) {
		var q corev1.ResourceQuotaList
		if err := host.List(ctx, &q, client.InNamespace(hostNS)); err != nil || len(q.Items) == 0 {
			return false, err
		}
		return q.Items[0].Spec.Hard.Pods().Value() == 40, nil
	})

	// The quota and limits taken out of the policy: they go.
	if err := host.Get(ctx, client.ObjectKey{Name: "least"}, &vc); err != nil {
		t.Fatal(err)
	}
	before = vc.DeepCopy()
	vc.Spec.HostPolicy.ResourceQuota, vc.Spec.HostPolicy.LimitRange = nil, nil
	if err := host.Patch(ctx, &vc, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "no quota and no limits in "+hostNS, func(ctx context.Context) (bool, error) {
		var q corev1.ResourceQuotaList
		var l corev1.LimitRangeList
		if err := host.List(ctx, &q, client.InNamespace(hostNS)); err != nil {
			return false, err
		}
		if err := host.List(ctx, &l, client.InNamespace(hostNS)); err != nil {
			return false, err
		}
		return len(q.Items)+len(l.Items) == 0, nil
	})

	// A Pod deleted in the tenant goes from the host; another is evicted.
	if err := tenant.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the host Pod deleted", func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKey{Namespace: hostNS, Name: pod.Name}, &corev1.Pod{})
		return apierrors.IsNotFound(err), err
	})
	pod = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "evicted"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := tenant.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the second tenant Pod running", func(ctx context.Context) (bool, error) {
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		return pod.Status.Phase == corev1.PodRunning, fmt.Errorf("phase %s", pod.Status.Phase)
	})
	clientset, err := kubernetes.NewForConfig(tenantCP.Config())
	if err != nil {
		t.Fatal(err)
	}
	eviction := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}
	if err := clientset.PolicyV1().Evictions(ns).Evict(ctx, eviction); err != nil {
		t.Fatalf("evicting the tenant Pod: %v", err)
	}
	eventually(t, time.Minute, "the host Pod evicted", func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKey{Namespace: hostNS, Name: pod.Name}, &corev1.Pod{})
		return apierrors.IsNotFound(err), err
	})
	for _, o := range objects {
		if err := tenant.Delete(ctx, o); err != nil {
			t.Fatalf("deleting %T %s: %v", o, o.GetName(), err)
		}
	}
	eventually(t, 30*time.Second, "the host copies gone", func(ctx context.Context) (bool, error) {
		for _, kind := range []client.ObjectList{&corev1.ConfigMapList{}, &corev1.SecretList{}, &corev1.ServiceList{}, &corev1.PersistentVolumeClaimList{}} {
			if err := host.List(ctx, kind, client.InNamespace(hostNS), client.MatchingLabels{syncer.LabelCluster: "least"}); err != nil {
				return false, err
			}
			if n := len(mustItems(t, kind)); n > 0 {
				return false, fmt.Errorf("%d %T left", n, kind)
			}
		}
		return true, nil
	})
	// The tenant namespace's deletion deletes its host namespace.
	if err := tenant.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "host namespace "+hostNS+" deleted", func(ctx context.Context) (bool, error) {
		var n corev1.Namespace
		err := host.Get(ctx, client.ObjectKey{Name: hostNS}, &n)
		return apierrors.IsNotFound(err) || (err == nil && n.DeletionTimestamp != nil), err
	})
}

// attach runs kubectl attach until the host's audit log shows the
// manager's attach to the host Pod, then stops it (attach streams until
// the container ends).
func attach(t *testing.T, kubectl tenantrytest.Kubectl, kubeconfig string, hostCP *tenantrytest.ControlPlane, ns, pod string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl.Path, "--kubeconfig", kubeconfig, "-n", ns, "attach", pod)
	var out tenantrytest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	// The kubelet API relays the attach to the host Pod: the host's audit
	// log shows the manager's request.
	eventually(t, 30*time.Second, "the manager's attach to the host Pod", func(context.Context) (bool, error) {
		events, err := hostCP.AuditEvents()
		return slices.ContainsFunc(events, func(e tenantrytest.AuditEvent) bool {
			return e.User.Username == managerUser && e.ObjectRef != nil && e.ObjectRef.Resource == "pods" && e.ObjectRef.Subresource == "attach"
		}), fmt.Errorf("%v (kubectl: %s)", err, out.String())
	})
}

// portForward forwards a local port to the tenant Pod and reads back what
// kwok's echo returns.
func portForward(t *testing.T, kubectl tenantrytest.Kubectl, kubeconfig, ns, pod string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, port, _ := strings.Cut(freeAddr(t), ":")
	cmd := exec.CommandContext(ctx, kubectl.Path, "--kubeconfig", kubeconfig, "-n", ns, "port-forward", "pod/"+pod, port+":8080")
	var out tenantrytest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	eventually(t, 30*time.Second, "an echo through kubectl port-forward", func(context.Context) (bool, error) {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 5*time.Second)
		if err != nil {
			return false, fmt.Errorf("%w (kubectl: %s)", err, out.String())
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte("ping\n")); err != nil {
			return false, err
		}
		got, err := bufio.NewReader(conn).ReadString('\n')
		return got == "ping\n", fmt.Errorf("echo %q: %v (kubectl: %s)", got, err, out.String())
	})
}

// probeSync creates a ConfigMap in the tenant and waits for its host copy.
func probeSync(t *testing.T, host, tenant client.Client, name string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	if err := tenant.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the host copy of "+name, func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKey{Namespace: syncer.HostNamespace("least", "default"), Name: name}, &corev1.ConfigMap{})
		return err == nil, err
	})
}

// waitLeader returns the replica that acquired the leader election Lease.
func waitLeader(t *testing.T, replicas []*managerProcess) *managerProcess {
	t.Helper()
	var leader *managerProcess
	eventually(t, time.Minute, "a leader", func(context.Context) (bool, error) {
		for _, m := range replicas {
			for _, l := range m.lines(t) {
				if strings.Contains(l.Msg, "acquired lease") {
					leader = m
					return true, nil
				}
			}
		}
		return false, nil
	})
	return leader
}

// stopGracefully sends SIGTERM and waits for the replica to exit.
func stopGracefully(t *testing.T, m *managerProcess) {
	t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.done:
	case <-time.After(time.Minute):
		t.Fatal("a replica still runs a minute after SIGTERM")
	}
}

// registerTenant writes the kubeconfig Secret of the tenant cluster cp
// and a VirtualCluster name with policy.
func registerTenant(t *testing.T, host client.Client, name string, cp *tenantrytest.ControlPlane, policy *tenantryv1alpha1.HostPolicy) {
	t.Helper()
	kubeconfig, err := cp.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	createSecret(t, host, name+"-kubeconfig", kubeconfig)
	vc := &tenantryv1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: tenantryv1alpha1.VirtualClusterSpec{
			KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: name + "-kubeconfig"},
			HostPolicy:          policy,
		},
	}
	if err := host.Create(t.Context(), vc); err != nil {
		t.Fatal(err)
	}
}

// serviceAccountKubeconfig is a kubeconfig that authenticates to the host
// as the manager's ServiceAccount, with a token the host issues for it.
func serviceAccountKubeconfig(t *testing.T, cp *tenantrytest.ControlPlane) []byte {
	t.Helper()
	clientset, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		t.Fatal(err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	token, err := clientset.CoreV1().ServiceAccounts(managerNamespace).CreateToken(t.Context(), managerServiceAccount, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for %s: %v", managerUser, err)
	}
	cfg := cp.Config()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["host"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["manager"] = &clientcmdapi.AuthInfo{Token: token.Status.Token}
	kc.Contexts["manager"] = &clientcmdapi.Context{Cluster: "host", AuthInfo: "manager"}
	kc.CurrentContext = "manager"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// kubeconfigFile writes the control plane's admin kubeconfig to a file of
// the test's.
func kubeconfigFile(t *testing.T, cp *tenantrytest.ControlPlane) string {
	t.Helper()
	path, err := cp.KubeconfigFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// repoPath is a path in the repository, from this package's directory.
func repoPath(elem ...string) string {
	return filepath.Join(append([]string{"..", ".."}, elem...)...)
}

// countRequests counts the manager's requests to the host of verb on
// resource so far.
func countRequests(t *testing.T, host *tenantrytest.ControlPlane, verb, resource string) int {
	t.Helper()
	events, err := host.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		if e.User.Username == managerUser && e.Verb == verb && e.ObjectRef != nil && e.ObjectRef.Resource == resource && e.Stage == "ResponseComplete" {
			n++
		}
	}
	return n
}

// hostFoo is an empty Foo to read a host copy into.
func hostFoo() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(fooGVK)
	return u
}

// kindOf is o's Kind.
func kindOf(t *testing.T, c client.Client, o client.Object) string {
	t.Helper()
	gvk, err := c.GroupVersionKindFor(o)
	if err != nil {
		t.Fatal(err)
	}
	return gvk.Kind
}

// mustItems are the items of a typed list.
func mustItems(t *testing.T, list client.ObjectList) []runtime.Object {
	t.Helper()
	items, err := meta.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	return items
}
