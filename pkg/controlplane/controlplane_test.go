package controlplane_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/syncer"
)

func TestNamespace(t *testing.T) {
	long := strings.Repeat("a", 63)
	if controlplane.Namespace("team.a") == controlplane.Namespace("team-a") {
		t.Error("team.a and team-a share a namespace")
	}
	for _, cluster := range []string{"alpha", "team.a", long, long[:62] + "b"} {
		ns := controlplane.Namespace(cluster)
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			t.Errorf("%s: namespace %q: %v", cluster, ns, errs)
		}
	}
	if controlplane.Namespace("alpha") != "tenantry-cp-alpha" {
		t.Errorf("alpha's namespace is %q", controlplane.Namespace("alpha"))
	}
	if controlplane.Namespace(long) == controlplane.Namespace(long[:62]+"b") {
		t.Error("two long names share a namespace")
	}
}

// The control plane is the platform's: never marked as the tenant's, so
// that its budget, sync and host namespace cleanup leave it alone; only its
// own tenant's host namespaces (and the manager) reach it.
func TestControlPlaneObjectsAreThePlatforms(t *testing.T) {
	s := controlplane.Spec{Cluster: "alpha", ServiceCIDR: "10.96.0.0/16", ClusterDomain: "cluster.local", DataSize: controlplane.DefaultDataSize,
		Images: controlplane.UpstreamImages(controlplane.PinnedVersion, controlplane.PinnedEtcdImage), Resources: controlplane.DefaultResources()}
	sts := s.StatefulSet()
	for _, labels := range []map[string]string{s.NamespaceObject().Labels, s.Service().Labels, sts.Labels, sts.Spec.VolumeClaimTemplates[0].Labels} {
		if _, ok := labels[syncer.LabelCluster]; ok || labels[syncer.LabelControlPlane] != "alpha" {
			t.Errorf("labels %v: want %s=alpha and no %s", labels, syncer.LabelControlPlane, syncer.LabelCluster)
		}
	}
	from := s.NetworkPolicy().Spec.Ingress[0].From
	if len(from) != 1 || from[0].NamespaceSelector.MatchLabels[syncer.LabelCluster] != "alpha" {
		t.Errorf("ingress from %+v, want alpha's host namespaces only", from)
	}
	pod := sts.Spec.Template.Spec
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil {
		t.Errorf("Pod security context %+v: want non-root, with a seccomp profile", sc)
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s: security context %+v, want restricted", c.Name, sc)
		}
	}
	// etcd, then the API server, as native sidecars: the
	// controller-manager starts once the API server's startup probe
	// passed.
	var order []string
	for _, c := range pod.InitContainers {
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Errorf("init container %s: want a native sidecar", c.Name)
		}
		order = append(order, c.Name)
	}
	for _, c := range pod.Containers {
		order = append(order, c.Name)
	}
	if want := []string{"etcd", "kube-apiserver", "kube-controller-manager"}; !slices.Equal(order, want) {
		t.Errorf("containers in order %v, want %v", order, want)
	}
	if p := pod.InitContainers[1].StartupProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/livez" {
		t.Errorf("the API server's startup probe %+v, want /livez", p)
	}
	if c := sts.Spec.Template.Annotations["kubectl.kubernetes.io/default-container"]; c != "kube-apiserver" {
		t.Errorf("kubectl's default container %q, want the API server", c)
	}
	for _, arg := range pod.InitContainers[0].Command {
		if strings.HasPrefix(arg, "--listen-") && !strings.Contains(arg, "127.0.0.1") {
			t.Errorf("etcd listens beyond the Pod's loopback: %s", arg)
		}
	}
}

// While a snapshot is restored, the storage runs alone, on the claim the
// whole control plane takes up after, and no API server runs to write to
// it or cache what it held.
func TestARestoringControlPlaneRunsItsStorageAlone(t *testing.T) {
	for _, tc := range []struct {
		storage tenantryv1alpha1.StorageType
		want    []string // StatefulSet/container, in order
	}{
		{tenantryv1alpha1.StorageEmbedded, []string{"control-plane/etcd"}},
		{tenantryv1alpha1.StorageEtcd, []string{"etcd/etcd"}},
		{tenantryv1alpha1.StorageDataStore, nil},
	} {
		s := controlplane.Spec{Cluster: "alpha", ServiceCIDR: "10.96.0.0/16", ClusterDomain: "cluster.local", DataSize: controlplane.DefaultDataSize,
			Images: controlplane.UpstreamImages(controlplane.PinnedVersion, controlplane.PinnedEtcdImage), Resources: controlplane.DefaultResources(),
			Storage: tc.storage, Restoring: true}
		var got []string
		for _, sts := range s.StatefulSets() {
			pod := sts.Spec.Template.Spec
			for _, c := range append(pod.InitContainers, pod.Containers...) {
				got = append(got, sts.Name+"/"+c.Name)
			}
			s.Restoring = false
			if whole := s.StatefulSets()[0]; sts.Name == whole.Name && (!equality.Semantic.DeepEqual(sts.Spec.Selector, whole.Spec.Selector) ||
				!equality.Semantic.DeepEqual(sts.Spec.VolumeClaimTemplates, whole.Spec.VolumeClaimTemplates)) {
				t.Errorf("%s: the restoring %s's selector or claims differ from the whole control plane's, which takes them up", tc.storage, sts.Name)
			}
			s.Restoring = true
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: restoring runs %v, want %v", tc.storage, got, tc.want)
		}
	}
}

// A control plane's data move one minor version forward at a time.
func TestCheckVersionChange(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		skew     bool
	}{
		{"v1.37.2", "v1.37.2", false},
		{"v1.37.2", "v1.37.0", false},
		{"v1.36.3", "v1.37.2", false},
		{"v1.36.3", "v1.38.0", true},
		{"v1.37.2", "v1.36.3", true},
	} {
		err := controlplane.CheckVersionChange(tc.from, tc.to)
		if errors.Is(err, controlplane.ErrVersionSkew) != tc.skew || !tc.skew && err != nil {
			t.Errorf("%s to %s: %v, want skew %v", tc.from, tc.to, err, tc.skew)
		}
	}
	if err := controlplane.CheckVersionChange("1.37", "v1.37.2"); err == nil || !strings.Contains(err.Error(), `"1.37"`) {
		t.Errorf("a malformed version: %v, want an error naming it", err)
	}
}

// An etcd of storage Etcd has a member per API server, made odd; its
// members are known by their names alone.
func TestEtcdMembers(t *testing.T) {
	for _, tc := range []struct {
		storage    tenantryv1alpha1.StorageType
		apiServers int32
		want       int
	}{
		{tenantryv1alpha1.StorageEtcd, 0, 1},
		{tenantryv1alpha1.StorageEtcd, 1, 1},
		{tenantryv1alpha1.StorageEtcd, 2, 3},
		{tenantryv1alpha1.StorageEtcd, 3, 3},
		{tenantryv1alpha1.StorageEtcd, 4, 5},
		{tenantryv1alpha1.StorageEtcd, 5, 5},
		{tenantryv1alpha1.StorageEmbedded, 1, 0},
		{tenantryv1alpha1.StorageDataStore, 3, 0},
	} {
		s := controlplane.Spec{Storage: tc.storage, APIServers: tc.apiServers}
		if got := s.EtcdMembers(); got != tc.want {
			t.Errorf("%s with %d API servers: %d etcd members, want %d", tc.storage, tc.apiServers, got, tc.want)
		}
		if got := len(s.EtcdMemberServices()); got != tc.want {
			t.Errorf("%s with %d API servers: %d member Services, want %d", tc.storage, tc.apiServers, got, tc.want)
		}
	}
	for name, want := range map[string]int{"etcd-0": 0, "etcd-12": 12, "etcd-": -1, "etcd-01": -1, "etcd--1": -1, "alpha": -1, "etcd-x": -1} {
		got, ok := controlplane.EtcdMemberOrdinal(name)
		if ok != (want >= 0) || ok && got != want {
			t.Errorf("EtcdMemberOrdinal(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
	// A member that leaves keeps its Service until it is gone.
	s := controlplane.Spec{Storage: tenantryv1alpha1.StorageEtcd, APIServers: 1, EtcdPods: 3}
	if got := len(s.EtcdMemberServices()); got != 3 {
		t.Errorf("3 members running, 1 wanted: %d member Services, want 3", got)
	}
}

// Every component of a control plane collects its heap at a quarter's
// growth, and harder near its memory limit.
func TestControlPlaneGoRuntime(t *testing.T) {
	for _, storage := range []tenantryv1alpha1.StorageType{tenantryv1alpha1.StorageEmbedded, tenantryv1alpha1.StorageEtcd} {
		s := controlplane.Spec{Cluster: "alpha", ServiceCIDR: "10.96.0.0/16", ClusterDomain: "cluster.local", DataSize: controlplane.DefaultDataSize,
			Images: controlplane.UpstreamImages(controlplane.PinnedVersion, controlplane.PinnedEtcdImage), Resources: controlplane.DefaultResources(),
			Storage: storage, EtcdMemberIPs: []string{"10.96.0.20"}}
		for _, sts := range s.StatefulSets() {
			pod := sts.Spec.Template.Spec
			for _, c := range append(pod.InitContainers, pod.Containers...) {
				env := map[string]string{}
				for _, e := range c.Env {
					env[e.Name] = e.Value
				}
				limit := c.Resources.Limits.Memory().Value()
				if env["GOGC"] != "25" || env["GOMEMLIMIT"] != strconv.FormatInt(limit/10*9, 10) {
					t.Errorf("%s: container %s: GOGC %q, GOMEMLIMIT %q; want 25, and nine tenths of its limit %d", storage, c.Name, env["GOGC"], env["GOMEMLIMIT"], limit)
				}
			}
		}
	}
}

// Control planes built from one set of defaults share none of its maps:
// an apply decodes its answer into the objects built from them, and
// control planes are reconciled at once.
func TestFromVirtualClusterCopiesTheDefaults(t *testing.T) {
	defaults := controlplane.DefaultResources()
	vc := &tenantryv1alpha1.VirtualCluster{Spec: tenantryv1alpha1.VirtualClusterSpec{ControlPlane: &tenantryv1alpha1.ControlPlaneSpec{}}}
	a := controlplane.FromVirtualCluster(vc, controlplane.PinnedVersion, defaults)
	b := controlplane.FromVirtualCluster(vc, controlplane.PinnedVersion, defaults)
	a.Resources.APIServer.Requests[corev1.ResourceCPU] = resource.MustParse("7")
	a.Resources.ControllerManager.Limits[corev1.ResourceMemory] = resource.MustParse("7Gi")
	a.Resources.Etcd.Requests[corev1.ResourceMemory] = resource.MustParse("7Gi")
	for name, r := range map[string]controlplane.Resources{"the defaults": defaults, "another control plane": b.Resources} {
		if r.APIServer.Requests.Cpu().String() == "7" || r.ControllerManager.Limits.Memory().String() == "7Gi" || r.Etcd.Requests.Memory().String() == "7Gi" {
			t.Errorf("a change to one control plane's resources reached %s: %+v", name, r)
		}
	}
}
