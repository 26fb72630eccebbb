// Package controlplane describes the control plane that Tenantry runs in
// the host for a VirtualCluster with spec.controlPlane: the host namespace
// it runs in, the workload (kube-apiserver and kube-controller-manager,
// with embedded etcd beside them, an etcd of its own in a Pod apart, or
// none: a shared DataStore), the Services tenant Pods and the manager
// reach it at, the NetworkPolicies that keep everyone else out, and the
// Secrets of its certificates and kubeconfigs (see Certificates).
//
// What it returns are objects to apply; the controller in
// controllers/controlplane applies them, and says how they stand.
package controlplane

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane/datastore"
	"github.com/tenantry/tenantry/pkg/controlplane/pki"
)

// LabelControlPlane marks the host objects of a VirtualCluster's control
// plane, its namespace first; its value is the VirtualCluster's name.
const LabelControlPlane = tenantryv1alpha1.LabelControlPlane

// Names of a control plane's host objects, in its namespace.
const (
	// ServiceName is the API server's Service.
	ServiceName = "kube-apiserver"
	// WorkloadName is the StatefulSet of the control plane's Pod.
	WorkloadName = "control-plane"
	// PKISecretName holds the control plane's certificates, keys and its
	// components' kubeconfigs.
	PKISecretName = "control-plane-pki"
	// NetworkPolicyName admits the API server's port alone, and only to
	// the VirtualCluster's own host namespaces and the manager.
	NetworkPolicyName = "control-plane"
	// DataVolumeName is the volume, and the claim template, of the data.
	DataVolumeName = "data"
	// EtcdName is the StatefulSet, the Service and the NetworkPolicy of
	// the etcd of storage type Etcd.
	EtcdName = "etcd"
)

// Ports of the API server: in its Pod, and at its Service; and etcd's.
const (
	APIServerPort = 6443
	ServicePort   = 443
	EtcdPort      = 2379
)

// DefaultDataSize is the size of the data's claim unless
// spec.controlPlane.storage.size says otherwise.
var DefaultDataSize = resource.MustParse("1Gi")

// Images are the container images of a control plane.
type Images struct {
	APIServer         string
	ControllerManager string
	Etcd              string
}

// UpstreamImages are the upstream images of Kubernetes version (v1.37.2),
// with etcd's image etcd.
func UpstreamImages(version, etcd string) Images {
	return Images{
		APIServer:         "registry.k8s.io/kube-apiserver:" + version,
		ControllerManager: "registry.k8s.io/kube-controller-manager:" + version,
		Etcd:              etcd,
	}
}

// Resources are the requests and limits of each component.
type Resources struct {
	APIServer         corev1.ResourceRequirements `json:"apiServer"`
	ControllerManager corev1.ResourceRequirements `json:"controllerManager"`
	Etcd              corev1.ResourceRequirements `json:"etcd"`
}

// DefaultResources are what a control plane's components ask for unless
// the VirtualCluster or the manager's flags say otherwise: enough for a
// small tenant at rest, with room to grow under load.
func DefaultResources() Resources {
	return Resources{
		APIServer: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		},
		ControllerManager: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		},
		Etcd: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		},
	}
}

// Spec is what a control plane is made of, resolved from a VirtualCluster
// and the manager's settings.
type Spec struct {
	// Cluster is the VirtualCluster's name.
	Cluster string
	// Version is the Kubernetes version to run.
	Version string
	Images  Images
	// ServiceCIDR is the tenant's Service range: the host's, so that a
	// tenant Service keeps its cluster IP in the host.
	ServiceCIDR string
	// ClusterDomain is the tenant's DNS domain (cluster.local).
	ClusterDomain string
	// Resources of the components.
	Resources Resources
	// Storage is where the data is: Embedded (default), Etcd or
	// DataStore.
	Storage tenantryv1alpha1.StorageType
	// StorageClassName and DataSize are those of the data's claim.
	StorageClassName *string
	DataSize         resource.Quantity
	// EtcdServiceIP is the cluster IP of the etcd's client Service
	// (storage Etcd).
	EtcdServiceIP string
	// EtcdMemberIPs are the cluster IPs of the Services of the etcd's
	// members (storage Etcd; EtcdMemberServices), by ordinal: where its
	// peers and the API servers reach each.
	EtcdMemberIPs []string
	// EtcdPods is how many of the etcd's members run (storage Etcd):
	// those the controller has configured (EtcdConfigMap), its members
	// and the one that joins, if one does; 0 counts as 1.
	EtcdPods int32
	// DataStore is the shared store of storage DataStore.
	DataStore *DataStoreAccess
	// Restoring runs the storage alone, empty, for a snapshot's keys to
	// be loaded into (tenantry restore): no API server nor
	// controller-manager writes to it meanwhile, and none has cached
	// what it held before.
	Restoring bool
	// Asleep runs no Pod: every workload at zero replicas, the data's
	// claim kept, to start again as it was.
	Asleep bool
	// APIServers is how many API servers run (spec.controlPlane.replicas;
	// 0 counts as 1), each with a controller-manager beside it.
	APIServers int32
	// ManagerPeers are who, besides the VirtualCluster's own host
	// namespaces, may reach the API server: the manager's Pods (its
	// namespace), or its addresses.
	ManagerPeers []networkingv1.NetworkPolicyPeer
	// Activity, if set, has the API server report its requests (an
	// audit webhook) to the manager, which tells people's from Tenantry's
	// for spec.sleep.afterInactivity.
	Activity *Activity
	// Egress are where the control plane may connect: those of its
	// tenant's Pods (the syncers' isolation). A tenant's admin points its
	// API server at addresses of its choosing (webhooks, aggregated APIs,
	// Node addresses for nodes/proxy), which must not reach what its Pods
	// may not. Nil: anywhere.
	Egress []networkingv1.NetworkPolicyEgressRule
}

// Activity is where the API server reports its requests: the manager's
// activity receiver (package activity).
type Activity struct {
	// URL is the receiver's, https://HOST:PORT. The API server names
	// ActivityServerName of its cluster in the handshake, and presents a
	// client certificate of its CA.
	URL string
}

// ActivityServerName is the name that cluster's API server asks for
// (TLS server name) when it reports its requests, and that the activity
// receiver's certificate for it serves: a name of no DNS zone, by which
// the receiver tells one control plane from another.
func ActivityServerName(cluster string) string {
	return Namespace(cluster) + ActivityServerNameSuffix
}

// ActivityServerNameSuffix ends every ActivityServerName.
const ActivityServerNameSuffix = ".activity.tenantry.internal"

// ActivityClientUser is the user of the client certificate with which an
// API server reports its requests.
const ActivityClientUser = "tenantry:audit-webhook"

// DataStoreAccess is how a control plane reaches a shared DataStore.
type DataStoreAccess struct {
	// Endpoints are etcd's client URLs.
	Endpoints []string
	// CA is the store's CA, which etcd's serving certificate is of and
	// which signs the API server's client certificate.
	CA *pki.KeyPair
}

// Namespace is the host namespace of VirtualCluster cluster's control
// plane: tenantry-cp-<cluster>, or, for a name that does not fit as it is
// (a dot, more than 51 characters), that shortened and a hash of the name:
// two VirtualClusters never share one.
func Namespace(cluster string) string {
	const prefix, limit = "tenantry-cp-", 63
	name := prefix + cluster
	if len(name) <= limit && !strings.Contains(cluster, ".") {
		return name
	}
	sum := sha256.Sum256([]byte(cluster))
	hash := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:]))[:10]
	name = strings.ReplaceAll(name, ".", "-")
	return strings.TrimRight(name[:min(len(name), limit-len(hash)-1)], "-") + "-" + hash
}

// Labels are the labels of every host object of cluster's control plane:
// Tenantry's, and its control plane's. Not tenantry.dev/cluster, which
// marks the tenant's copies and host namespaces: the control plane is the
// platform's, not the tenant's, and not counted in its budget.
func Labels(cluster string) map[string]string {
	return map[string]string{
		tenantryv1alpha1.LabelManagedBy: tenantryv1alpha1.ManagedByValue,
		LabelControlPlane:               cluster,
	}
}

// APIServerLabels select the Pods of cluster's API servers.
func APIServerLabels(cluster string) map[string]string { return podLabels(cluster) }

// podLabels select the control plane's Pods.
func podLabels(cluster string) map[string]string {
	return map[string]string{LabelControlPlane: cluster, "app.kubernetes.io/component": "control-plane"}
}

// etcdPodLabels select the Pod of its etcd (storage Etcd).
func etcdPodLabels(cluster string) map[string]string {
	return map[string]string{LabelControlPlane: cluster, "app.kubernetes.io/component": "etcd"}
}

// NamespaceObject is the control plane's namespace, under the restricted
// Pod Security level: the control plane needs no privilege.
func (s Spec) NamespaceObject() *corev1.Namespace {
	labels := Labels(s.Cluster)
	labels["pod-security.kubernetes.io/enforce"] = "restricted"
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace(s.Cluster), Labels: labels}}
}

// Service is the API server's Service: cluster IP, port 443.
func (s Spec) Service() *corev1.Service {
	return s.clusterIPService(ServiceName, podLabels(s.Cluster), servicePort("https", ServicePort, APIServerPort))
}

// clusterIPService is a Service of the control plane at a cluster IP, for
// the Pods of selector.
func (s Spec) clusterIPService(name string, selector map[string]string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: s.meta(name),
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: selector, Ports: ports},
	}
}

// servicePort is a Service's TCP port, to the Pods' target.
func servicePort(name string, port, target int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(target)}
}

// Services are the control plane's Services: the API server's, and its
// etcd's and each of its members' (storage Etcd).
func (s Spec) Services() []*corev1.Service {
	return append(present(s.Service(), s.EtcdService()), s.EtcdMemberServices()...)
}

// NetworkPolicy admits, to the control plane's Pod, the API server's port
// alone, and only from the VirtualCluster's own host namespaces (its
// Pods, its webhooks' callers) and from ManagerPeers: another tenant's
// Pods cannot reach it, nor anyone its storage. Its connections go only
// where Egress lets them.
func (s Spec) NetworkPolicy() *networkingv1.NetworkPolicy {
	peers := append([]networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
			tenantryv1alpha1.LabelManagedBy: tenantryv1alpha1.ManagedByValue, tenantryv1alpha1.LabelCluster: s.Cluster,
		}},
	}}, s.ManagerPeers...)
	policy := &networkingv1.NetworkPolicy{
		ObjectMeta: s.meta(NetworkPolicyName),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: podLabels(s.Cluster)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(APIServerPort))}},
				From:  peers,
			}},
		},
	}
	if s.Egress != nil {
		policy.Spec.PolicyTypes = append(policy.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		policy.Spec.Egress = s.Egress
	}
	return policy
}

// NetworkPolicies are the control plane's NetworkPolicies.
func (s Spec) NetworkPolicies() []*networkingv1.NetworkPolicy {
	return present(s.NetworkPolicy(), s.EtcdNetworkPolicy())
}

// Paths in the control plane's containers.
const (
	pkiDir  = "/etc/kubernetes/pki"
	dataDir = "/var/lib/etcd"
)

// gcPercent is the GOGC of every component of a control plane: a heap
// that grows by a quarter of what it holds before it is collected, where
// Go's default lets it double. It takes a third off a control plane's
// memory at rest (from 248 to 185 MiB of the Pod, measured: the design
// note control-plane-memory.md has the table of what each lever saved),
// for a few millicores of CPU.
const gcPercent = "25"

// goRuntime is the environment of a component, written in Go, of
// resources: its GOGC, and, under a memory limit, a soft limit of nine
// tenths of it (GOMEMLIMIT), so that it collects harder, not gets killed,
// as it nears the limit.
func goRuntime(resources corev1.ResourceRequirements) []corev1.EnvVar {
	env := []corev1.EnvVar{{Name: "GOGC", Value: gcPercent}}
	if limit, ok := resources.Limits[corev1.ResourceMemory]; ok && limit.Value() > 0 {
		env = append(env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: strconv.FormatInt(limit.Value()/10*9, 10)})
	}
	return env
}

// nonRoot is the security context of every container of a control
// plane: no privilege, nothing written but to its volumes.
func nonRoot() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// etcdArgs are the flags of an etcd of one member whose peer URL is on
// its loopback, its data on the data volume.
func (s Spec) etcdArgs(clientURL string) []string {
	return []string{
		"--name=" + s.Cluster,
		"--data-dir=" + dataDir + "/data",
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=" + s.Cluster + "=http://127.0.0.1:2380",
		"--listen-metrics-urls=http://127.0.0.1:2381",
		"--snapshot-count=10000",
		"--quota-backend-bytes=" + fmt.Sprint(quotaBytes(s.DataSize)),
	}
}

// StatefulSet is the control plane's workload: one Pod of
// kube-apiserver and kube-controller-manager, and for storage Embedded of
// etcd too (a native sidecar, on the Pod's loopback) with its data on a
// claim of its own that outlives the Pod (and a version change). It runs
// as nobody, with no privilege.
//
// The API server is a native sidecar too, so that the controller-manager
// starts only once the API server's start is through (its startup
// probe, /livez, which waits for its post-start hooks, RBAC's bootstrap
// among them): a controller-manager that cannot reach a healthy API
// server within its first seconds exits, and the kubelet then starts it
// again after a back-off that doubles. Twenty control planes made at
// once on two cores lost minutes to that back-off.
func (s Spec) StatefulSet() *appsv1.StatefulSet {
	pkiMount := corev1.VolumeMount{Name: "pki", MountPath: pkiDir, ReadOnly: true}
	apiServer := corev1.Container{
		Name:    "kube-apiserver",
		Image:   s.Images.APIServer,
		Command: append([]string{"/usr/local/bin/kube-apiserver"}, s.apiServerArgs()...),
		Env: append([]corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"},
		}}}, goRuntime(s.Resources.APIServer)...),
		Ports:     []corev1.ContainerPort{{Name: "https", ContainerPort: APIServerPort, Protocol: corev1.ProtocolTCP}},
		Resources: s.Resources.APIServer,
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(APIServerPort), Scheme: corev1.URISchemeHTTPS}},
			PeriodSeconds: 2, FailureThreshold: 3, TimeoutSeconds: 5,
		},
		// Up to five minutes: on a host whose CPU many starts share, a
		// start can take minutes, and a kill starts it over.
		StartupProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromInt32(APIServerPort), Scheme: corev1.URISchemeHTTPS}},
			PeriodSeconds: 2, FailureThreshold: 150, TimeoutSeconds: 5,
		},
		LivenessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromInt32(APIServerPort), Scheme: corev1.URISchemeHTTPS}},
			PeriodSeconds: 10, FailureThreshold: 6, TimeoutSeconds: 5,
		},
		SecurityContext: nonRoot(),
		VolumeMounts:    []corev1.VolumeMount{pkiMount},
	}
	controllerManager := corev1.Container{
		Name:            "kube-controller-manager",
		Image:           s.Images.ControllerManager,
		Command:         append([]string{"/usr/local/bin/kube-controller-manager"}, s.controllerManagerArgs()...),
		Env:             goRuntime(s.Resources.ControllerManager),
		Resources:       s.Resources.ControllerManager,
		SecurityContext: nonRoot(),
		VolumeMounts:    []corev1.VolumeMount{pkiMount},
	}
	apiServer.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	pod := corev1.PodSpec{
		InitContainers: []corev1.Container{apiServer},
		Containers:     []corev1.Container{controllerManager},
		Volumes: []corev1.Volume{{
			Name: "pki",
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: PKISecretName, DefaultMode: ptr.To[int32](0o440),
			}},
		}},
	}
	var claims []corev1.PersistentVolumeClaim
	if s.embedded() {
		etcd := s.embeddedEtcd()
		etcd.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		pod.InitContainers = []corev1.Container{etcd, apiServer}
		claims = []corev1.PersistentVolumeClaim{s.dataClaim()}
	}
	// Asleep or not, the same Pod template: waking changes the replicas
	// alone.
	// Spread over the host's nodes, as they can be, however many: a
	// count that changes does not restart the one there is.
	pod.Affinity = spread(podLabels(s.Cluster))
	// One Pod after another, each once the one before is ready (the
	// StatefulSet's default, which cannot change once it is made): the
	// first serves as soon as one alone would.
	sts := s.statefulSet(WorkloadName, ServiceName, podLabels(s.Cluster), pod, claims, s.apiServers())
	// kubectl logs and exec go to the API server unless told otherwise,
	// as they did while it was the Pod's first container.
	sts.Spec.Template.Annotations = map[string]string{defaultContainerAnnotation: apiServer.Name}
	return sts
}

// defaultContainerAnnotation names the container that kubectl takes when
// none is named.
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// PodDisruptionBudget keeps all but one of the API servers' Pods up
// through a node's drain: with one, it lets it go (a drain is never
// stuck on a tenant), with more, the others serve meanwhile.
func (s Spec) PodDisruptionBudget() *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: s.meta(WorkloadName),
		Spec: policyv1.PodDisruptionBudgetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: podLabels(s.Cluster)},
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		},
	}
}

func (s Spec) embedded() bool {
	return s.Storage == "" || s.Storage == tenantryv1alpha1.StorageEmbedded
}

// embeddedEtcd is the etcd of storage Embedded, on the Pod's loopback,
// its data on the data volume.
func (s Spec) embeddedEtcd() corev1.Container {
	return corev1.Container{
		Name:  "etcd",
		Image: s.Images.Etcd,
		Command: append([]string{"/usr/local/bin/etcd", "--listen-client-urls=http://127.0.0.1:2379"},
			s.etcdArgs("http://127.0.0.1:2379")...),
		Env:             goRuntime(s.Resources.Etcd),
		Resources:       s.Resources.Etcd,
		SecurityContext: nonRoot(),
		VolumeMounts:    []corev1.VolumeMount{{Name: DataVolumeName, MountPath: dataDir}},
	}
}

// storageAlone is the control plane's workload while a snapshot is
// restored (Restoring), for storage Embedded: its Pod runs the embedded
// etcd alone, on the data's claim, which the whole Pod takes up after.
// Nil for other storage, whose own etcd (or DataStore) runs apart.
func (s Spec) storageAlone() *appsv1.StatefulSet {
	if !s.embedded() {
		return nil
	}
	pod := corev1.PodSpec{Containers: []corev1.Container{s.embeddedEtcd()}}
	return s.statefulSet(WorkloadName, ServiceName, podLabels(s.Cluster), pod, []corev1.PersistentVolumeClaim{s.dataClaim()}, s.storageReplicas())
}

// StatefulSets are the control plane's workloads, its API server's
// first. While Restoring, its storage's alone: no API server runs.
func (s Spec) StatefulSets() []*appsv1.StatefulSet {
	if s.Restoring {
		return present(s.storageAlone(), s.EtcdStatefulSet())
	}
	return present(s.StatefulSet(), s.EtcdStatefulSet())
}

// present are the objects of items that are there: a storage's own
// objects are nil for the others.
func present[T any](items ...*T) []*T {
	return slices.DeleteFunc(items, func(o *T) bool { return o == nil })
}

// dataClaim is the claim template of etcd's data.
func (s Spec) dataClaim() corev1.PersistentVolumeClaim {
	return corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: DataVolumeName, Labels: Labels(s.Cluster)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: s.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: s.DataSize}},
		},
	}
}

// statefulSet is a StatefulSet of replicas Pods of a control plane,
// labelled labels, that run as nobody with no privilege.
func (s Spec) statefulSet(name, service string, labels map[string]string, pod corev1.PodSpec, claims []corev1.PersistentVolumeClaim, replicas int32) *appsv1.StatefulSet {
	pod.AutomountServiceAccountToken = ptr.To(false)
	pod.EnableServiceLinks = ptr.To(false)
	pod.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](65532),
		RunAsGroup:     ptr.To[int64](65532),
		FSGroup:        ptr.To[int64](65532),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	pod.TerminationGracePeriodSeconds = ptr.To[int64](30)
	return &appsv1.StatefulSet{
		ObjectMeta: s.meta(name),
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(replicas),
			ServiceName: service,
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			// The claim stays when the StatefulSet goes: the controller
			// deletes it with the namespace, unless spec.controlPlane says
			// to keep the data.
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       pod,
			},
			VolumeClaimTemplates: claims,
		},
	}
}

// replicas is how many Pods each workload runs: one, none asleep.
// apiServers is how many API servers run: none asleep.
func (s Spec) apiServers() int32 {
	if s.Asleep {
		return 0
	}
	return max(s.APIServers, 1)
}

// storageReplicas is how many Pods of its storage run: one etcd member,
// none asleep.
func (s Spec) storageReplicas() int32 {
	if s.Asleep {
		return 0
	}
	return 1
}

// quotaBytes is etcd's backend quota for a volume of size: most of it,
// with room for the write-ahead log and snapshots.
func quotaBytes(size resource.Quantity) int64 {
	return size.Value() * 3 / 4
}

func (s Spec) apiServerArgs() []string {
	return slices.Concat(s.etcdClientArgs(), []string{
		"--advertise-address=$(POD_IP)",
		"--secure-port=" + fmt.Sprint(APIServerPort),
		"--allow-privileged=true",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--client-ca-file=" + pkiDir + "/" + KeyCACert,
		"--tls-cert-file=" + pkiDir + "/" + KeyServingCert,
		"--tls-private-key-file=" + pkiDir + "/" + KeyServingKey,
		"--kubelet-client-certificate=" + pkiDir + "/" + KeyKubeletClientCert,
		"--kubelet-client-key=" + pkiDir + "/" + KeyKubeletClientKey,
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--service-account-issuer=https://kubernetes.default.svc." + s.ClusterDomain,
		"--service-account-key-file=" + pkiDir + "/" + KeyServiceAccountPublic,
		"--service-account-signing-key-file=" + pkiDir + "/" + KeyServiceAccountPrivate,
		"--service-cluster-ip-range=" + s.ServiceCIDR,
		"--requestheader-client-ca-file=" + pkiDir + "/" + KeyFrontProxyCACert,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--proxy-client-cert-file=" + pkiDir + "/" + KeyFrontProxyClientCert,
		"--proxy-client-key-file=" + pkiDir + "/" + KeyFrontProxyClientKey,
		// Webhooks and aggregated APIs are reached at their Pods: the API
		// server runs in a Pod of its own namespace, under its own policy.
		"--enable-aggregator-routing=true",
		"--profiling=false",
	}, s.replicaArgs(), s.activityArgs())
}

// replicaArgs let one of several API servers go without a failed
// request: told to stop, it answers on (its readiness failing) for as
// long as the host takes to take it out of its Service's endpoints, and
// asks the requests that come later to come again (429, Retry-After),
// which client-go does, to another.
func (s Spec) replicaArgs() []string {
	if s.APIServers <= 1 {
		return nil
	}
	return []string{"--shutdown-delay-duration=" + shutdownDelay.String(), "--shutdown-send-retry-after=true"}
}

// shutdownDelay is how long an API server of several answers on once it
// is told to stop: longer than the host's proxies take to see its
// endpoint go.
const shutdownDelay = 5 * time.Second

// activityArgs report the API server's requests to the manager, in
// batches of a few seconds (Activity), never holding a request up: a
// batch the manager does not take is dropped.
func (s Spec) activityArgs() []string {
	if s.Activity == nil {
		return nil
	}
	return []string{
		"--audit-policy-file=" + pkiDir + "/" + KeyAuditPolicy,
		"--audit-webhook-config-file=" + pkiDir + "/" + KeyAuditWebhookKubeconfig,
		"--audit-webhook-mode=batch",
		"--audit-webhook-batch-max-wait=5s",
		"--audit-webhook-batch-max-size=100",
		"--audit-webhook-batch-buffer-size=1000",
		"--audit-webhook-batch-throttle-qps=2",
		"--audit-webhook-batch-throttle-burst=4",
		"--audit-webhook-initial-backoff=5s",
	}
}

// etcdClientArgs are the API server's flags of its storage.
func (s Spec) etcdClientArgs() []string {
	file := func(key string) string { return pkiDir + "/" + key }
	var flags map[string]string
	switch s.Storage {
	case tenantryv1alpha1.StorageEtcd:
		flags = map[string]string{
			"etcd-servers":  s.etcdServers(),
			"etcd-cafile":   file(KeyEtcdCACert),
			"etcd-certfile": file(KeyEtcdClientCert),
			"etcd-keyfile":  file(KeyEtcdClientKey),
		}
	case tenantryv1alpha1.StorageDataStore:
		var endpoints []string
		if s.DataStore != nil {
			endpoints = s.DataStore.Endpoints
		}
		flags = datastore.APIServerFlags(s.Cluster, endpoints, file(KeyEtcdCACert), file(KeyEtcdClientCert), file(KeyEtcdClientKey))
	default:
		flags = map[string]string{"etcd-servers": "http://127.0.0.1:2379"}
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(flags)) {
		out = append(out, "--"+name+"="+flags[name])
	}
	return out
}

func (s Spec) controllerManagerArgs() []string {
	kubeconfig := pkiDir + "/" + KeyControllerManagerKubeconfig
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		// One of several leads; one alone need not wait for its own
		// lease from before a restart to run out.
		fmt.Sprintf("--leader-elect=%t", s.APIServers > 1),
		"--secure-port=0",
		"--controllers=*," + strings.Join(disabledControllers, ","),
		"--use-service-account-credentials=true",
		"--root-ca-file=" + pkiDir + "/" + KeyCACert,
		"--service-account-private-key-file=" + pkiDir + "/" + KeyServiceAccountPrivate,
		"--cluster-signing-cert-file=" + pkiDir + "/" + KeyCACert,
		"--cluster-signing-key-file=" + pkiDir + "/" + KeyCAKey,
		"--requestheader-client-ca-file=" + pkiDir + "/" + KeyFrontProxyCACert,
		"--profiling=false",
	}
}

// disabledControllers are kube-controller-manager's controllers a tenant
// does not run, as --controllers names them. Storage is bound, attached
// and expanded in the host, where the volumes are: a tenant's own volume
// binder would find a claim that the host bound (its status synced up)
// bound to a volume the tenant does not have, and mark it Lost. Nodes are
// the host's: their lifecycle (heartbeats, NotReady taints, evictions) is
// the host's node lifecycle controller's, whose outcome Tenantry syncs up
// to the virtual nodes, and their Pod ranges the host's.
var disabledControllers = []string{
	"-persistentvolume-binder-controller",
	"-persistentvolume-attach-detach-controller",
	"-persistentvolume-expander-controller",
	"-node-lifecycle-controller",
	"-node-ipam-controller",
}

func (s Spec) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: Namespace(s.Cluster), Name: name, Labels: Labels(s.Cluster)}
}

// FromVirtualCluster resolves the parts of a Spec that
// spec.controlPlane sets over defaults (the version and the resources
// the manager gives, its storage).
func FromVirtualCluster(vc *tenantryv1alpha1.VirtualCluster, defaultVersion string, defaults Resources) Spec {
	cp := vc.Spec.ControlPlane
	if cp == nil {
		cp = &tenantryv1alpha1.ControlPlaneSpec{}
	}
	// The defaults' maps copied: an apply decodes its answer into the
	// objects built from them, and control planes are reconciled at once.
	defaults = Resources{APIServer: *defaults.APIServer.DeepCopy(), ControllerManager: *defaults.ControllerManager.DeepCopy(), Etcd: *defaults.Etcd.DeepCopy()}
	s := Spec{Cluster: vc.Name, Version: cp.Version, ClusterDomain: "cluster.local", Resources: defaults, DataSize: DefaultDataSize, Storage: cp.Storage.Type,
		APIServers: ptr.Deref(cp.Replicas, 1)}
	if s.Version == "" {
		s.Version = defaultVersion
	}
	if s.Storage == "" {
		s.Storage = tenantryv1alpha1.StorageEmbedded
	}
	if r := cp.Etcd.Resources; r != nil {
		s.Resources.Etcd = *r.DeepCopy()
	}
	if r := cp.APIServer.Resources; r != nil {
		s.Resources.APIServer = *r.DeepCopy()
	}
	if r := cp.ControllerManager.Resources; r != nil {
		s.Resources.ControllerManager = *r.DeepCopy()
	}
	s.StorageClassName = cp.Storage.StorageClassName
	if cp.Storage.Size != nil {
		s.DataSize = cp.Storage.Size.DeepCopy()
	}
	return s
}

// The pinned releases: of Kubernetes (hack/tools/go.mod's k8s.io/kubernetes)
// and of etcd, whose images a control plane runs by default.
const (
	PinnedVersion   = "v1.37.2"
	PinnedEtcdImage = "registry.k8s.io/etcd:3.7.0-0"
)
