package controlplane

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

// The etcd of storage Etcd is a cluster of its own, apart from the API
// servers: a StatefulSet of one Pod per member, each member with its own
// volume and its own Service (etcd-0, etcd-1, ...), whose cluster IP is
// its address for its peers and for the API servers. A member reads its
// configuration from a file of the ConfigMap EtcdConfigMapName named for
// its Pod: the controller writes each as it adds the member, for the
// membership it then joins. The cluster starts with one member; the
// controller adds the others one at a time, each as a learner until it
// has caught up.

const (
	// EtcdPeerPort is the port etcd's members reach each other at.
	EtcdPeerPort = 2380
	// EtcdMetricsPort serves etcd's health (/readyz, /livez) and metrics,
	// in plain text, to the kubelet's probes.
	EtcdMetricsPort = 2381
	// EtcdConfigMapName holds each member's configuration file.
	EtcdConfigMapName = "etcd-members"
	// etcdConfigDir is where a member's Pod mounts EtcdConfigMapName.
	etcdConfigDir = "/etc/etcd"
	// etcdPeerCommonName is the subject of the members' peer certificate,
	// and the only one a member lets in as a peer.
	etcdPeerCommonName = "etcd-peer"
)

// EtcdMembers is how many members the etcd of storage Etcd has: one per
// API server, made odd (four members tolerate no more losses than three,
// and need one more to agree); 0 for other storage.
func (s Spec) EtcdMembers() int {
	if s.Storage != tenantryv1alpha1.StorageEtcd {
		return 0
	}
	n := int(max(s.APIServers, 1))
	return n | 1
}

// EtcdMemberName is the name of etcd member ordinal: its Pod's, its
// Service's, and its name in the cluster.
func EtcdMemberName(ordinal int) string {
	return EtcdName + "-" + strconv.Itoa(ordinal)
}

// EtcdMemberOrdinal is the ordinal of the member of name, if it is one
// of EtcdMemberName's.
func EtcdMemberOrdinal(name string) (int, bool) {
	n, ok := strings.CutPrefix(name, EtcdName+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil && i >= 0 && strconv.Itoa(i) == n
}

// EtcdPeerURL is where the peers of the member at ip reach it.
func EtcdPeerURL(ip string) string {
	return "https://" + net.JoinHostPort(ip, strconv.Itoa(EtcdPeerPort))
}

// etcdClientURL is where the API servers reach the member at ip.
func etcdClientURL(ip string) string {
	return "https://" + net.JoinHostPort(ip, strconv.Itoa(EtcdPort))
}

// EtcdService is the client Service of the etcd of storage Etcd: at any
// of its ready members; nil for other storage.
func (s Spec) EtcdService() *corev1.Service {
	if s.Storage != tenantryv1alpha1.StorageEtcd {
		return nil
	}
	return s.clusterIPService(EtcdName, etcdPodLabels(s.Cluster), servicePort("client", EtcdPort, EtcdPort))
}

// EtcdMemberServices are the Services of each of the etcd's members
// (storage Etcd), by ordinal, of those wanted and of those that still
// run: its fixed address, ready or not (a member that joins is not ready
// before its peers reach it).
func (s Spec) EtcdMemberServices() []*corev1.Service {
	var services []*corev1.Service
	if s.EtcdMembers() == 0 {
		return nil
	}
	for i := range max(s.EtcdMembers(), int(s.EtcdPods)) {
		name := EtcdMemberName(i)
		selector := etcdPodLabels(s.Cluster)
		selector[appsv1.StatefulSetPodNameLabel] = name
		svc := s.clusterIPService(name, selector, servicePort("client", EtcdPort, EtcdPort), servicePort("peer", EtcdPeerPort, EtcdPeerPort))
		svc.Spec.PublishNotReadyAddresses = true
		services = append(services, svc)
	}
	return services
}

// EtcdNetworkPolicy admits, to the etcd of storage Etcd, its client port
// from the API servers' Pods alone and its peer port from its members
// alone, and lets it connect to its members' peer port and nowhere else;
// nil for other storage.
func (s Spec) EtcdNetworkPolicy() *networkingv1.NetworkPolicy {
	if s.Storage != tenantryv1alpha1.StorageEtcd {
		return nil
	}
	port := func(p int32) []networkingv1.NetworkPolicyPort {
		return []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(p))}}
	}
	members := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: etcdPodLabels(s.Cluster)}}}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: s.meta(EtcdName),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: etcdPodLabels(s.Cluster)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{Ports: port(EtcdPort), From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: podLabels(s.Cluster)}}}},
				{Ports: port(EtcdPeerPort), From: members},
			},
			Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: port(EtcdPeerPort), To: members}},
		},
	}
}

// EtcdPodDisruptionBudget keeps all but one of the etcd's members up
// through a node's drain (storage Etcd): a cluster of three keeps its
// quorum; one alone goes (a drain is never stuck on a tenant).
func (s Spec) EtcdPodDisruptionBudget() *policyv1.PodDisruptionBudget {
	if s.Storage != tenantryv1alpha1.StorageEtcd {
		return nil
	}
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: s.meta(EtcdName),
		Spec: policyv1.PodDisruptionBudgetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: etcdPodLabels(s.Cluster)},
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		},
	}
}

// PodDisruptionBudgets are the control plane's: its API servers', and
// its etcd's (storage Etcd).
func (s Spec) PodDisruptionBudgets() []*policyv1.PodDisruptionBudget {
	return present(s.PodDisruptionBudget(), s.EtcdPodDisruptionBudget())
}

// EtcdStatefulSet is the etcd of storage Etcd: s.EtcdPods members, each
// in a Pod of its own with its data on a claim of its own, serving TLS
// to clients of its own CA alone (the API servers) and to its peers; nil
// for other storage. Its Pods start side by side, not one after
// another: a member is ready once the cluster has a leader, which a
// cluster of three that wakes has once two of them run.
func (s Spec) EtcdStatefulSet() *appsv1.StatefulSet {
	if s.Storage != tenantryv1alpha1.StorageEtcd {
		return nil
	}
	probe := func(path string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(EtcdMetricsPort), Scheme: corev1.URISchemeHTTP}},
			PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 5,
		}
	}
	etcd := corev1.Container{
		Name:    "etcd",
		Image:   s.Images.Etcd,
		Command: []string{"/usr/local/bin/etcd", "--config-file=" + etcdConfigDir + "/$(POD_NAME).json"},
		Env: append([]corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
		}}}, goRuntime(s.Resources.Etcd)...),
		Ports: []corev1.ContainerPort{
			{Name: "client", ContainerPort: EtcdPort, Protocol: corev1.ProtocolTCP},
			{Name: "peer", ContainerPort: EtcdPeerPort, Protocol: corev1.ProtocolTCP},
		},
		Resources: s.Resources.Etcd,
		// Ready: it has a leader, and answers a read that the leader
		// confirms: a rolling change goes on to the next member once
		// this one is back in the cluster.
		ReadinessProbe:  probe("/readyz", 2, 3),
		StartupProbe:    probe("/livez", 2, 90),
		LivenessProbe:   probe("/livez", 10, 6),
		SecurityContext: nonRoot(),
		VolumeMounts: []corev1.VolumeMount{
			{Name: "tls", MountPath: pkiDir, ReadOnly: true},
			{Name: "config", MountPath: etcdConfigDir, ReadOnly: true},
			{Name: DataVolumeName, MountPath: dataDir},
		},
	}
	pod := corev1.PodSpec{
		Containers: []corev1.Container{etcd},
		Volumes: []corev1.Volume{{
			Name: "tls",
			// Its own certificates and its CA's, and nothing else of the
			// control plane's.
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: PKISecretName, DefaultMode: ptr.To[int32](0o440),
				Items: []corev1.KeyToPath{
					{Key: KeyEtcdCACert, Path: KeyEtcdCACert},
					{Key: KeyEtcdServerCert, Path: KeyEtcdServerCert},
					{Key: KeyEtcdServerKey, Path: KeyEtcdServerKey},
					{Key: KeyEtcdPeerCert, Path: KeyEtcdPeerCert},
					{Key: KeyEtcdPeerKey, Path: KeyEtcdPeerKey},
				},
			}},
		}, {
			Name: "config",
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: EtcdConfigMapName},
			}},
		}},
	}
	// Spread, as they can be, however many: a count that changes does
	// not change the Pods' template, nor restart the members there are.
	pod.Affinity = spread(etcdPodLabels(s.Cluster))
	sts := s.statefulSet(EtcdName, EtcdName, etcdPodLabels(s.Cluster), pod, []corev1.PersistentVolumeClaim{s.dataClaim()}, s.etcdPods())
	sts.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	return sts
}

// etcdPods is how many Pods of the etcd of storage Etcd run: none
// asleep; otherwise those the controller has configured, at least one.
func (s Spec) etcdPods() int32 {
	if s.Asleep {
		return 0
	}
	return max(s.EtcdPods, 1)
}

// EtcdConfigMap is the ConfigMap of the members' configuration files
// (storage Etcd), files keyed by EtcdConfigFile; nil for other storage.
func (s Spec) EtcdConfigMap(files map[string]string) *corev1.ConfigMap {
	if s.Storage != tenantryv1alpha1.StorageEtcd {
		return nil
	}
	return &corev1.ConfigMap{ObjectMeta: s.meta(EtcdConfigMapName), Data: maps.Clone(files)}
}

// EtcdConfigFile is the key, in EtcdConfigMapName, of the configuration
// of member ordinal.
func EtcdConfigFile(ordinal int) string {
	return EtcdMemberName(ordinal) + ".json"
}

// EtcdConfig is the configuration file of member ordinal, at s.EtcdMemberIPs
// of its ordinal, that joins cluster (each member's name and peer URL,
// its own among them): a cluster that runs (existing), or one it starts
// (the first member, once). Its data dir, once it has one, holds its
// membership since, and etcd then reads none of this but its addresses
// and settings.
func (s Spec) EtcdConfig(ordinal int, cluster map[string]string, existing bool) (string, error) {
	if ordinal >= len(s.EtcdMemberIPs) {
		return "", fmt.Errorf("etcd member %s has no Service address", EtcdMemberName(ordinal))
	}
	ip := s.EtcdMemberIPs[ordinal]
	var initial []string
	for _, name := range slices.Sorted(maps.Keys(cluster)) {
		initial = append(initial, name+"="+cluster[name])
	}
	state := "new"
	if existing {
		state = "existing"
	}
	type security struct {
		CertFile      string   `json:"cert-file"`
		KeyFile       string   `json:"key-file"`
		TrustedCAFile string   `json:"trusted-ca-file"`
		CertAuth      bool     `json:"client-cert-auth"`
		AllowedCNs    []string `json:"allowed-cn,omitempty"`
		// SkipSANCheck: a peer connects from its Pod's address, which
		// its certificate (of its Service's) does not name; its subject
		// (AllowedCNs) and CA say who it is.
		SkipSANCheck bool `json:"skip-client-san-verification,omitempty"`
	}
	file := func(key string) string { return pkiDir + "/" + key }
	config := struct {
		Name                string   `json:"name"`
		DataDir             string   `json:"data-dir"`
		ListenClientURLs    string   `json:"listen-client-urls"`
		AdvertiseClientURLs string   `json:"advertise-client-urls"`
		ListenPeerURLs      string   `json:"listen-peer-urls"`
		AdvertisePeerURLs   string   `json:"initial-advertise-peer-urls"`
		InitialCluster      string   `json:"initial-cluster"`
		InitialClusterState string   `json:"initial-cluster-state"`
		InitialClusterToken string   `json:"initial-cluster-token"`
		ListenMetricsURLs   string   `json:"listen-metrics-urls"`
		SnapshotCount       uint64   `json:"snapshot-count"`
		QuotaBackendBytes   int64    `json:"quota-backend-bytes"`
		ClientSecurity      security `json:"client-transport-security"`
		PeerSecurity        security `json:"peer-transport-security"`
	}{
		Name:                EtcdMemberName(ordinal),
		DataDir:             dataDir + "/data",
		ListenClientURLs:    fmt.Sprintf("https://0.0.0.0:%d", EtcdPort),
		AdvertiseClientURLs: etcdClientURL(ip),
		ListenPeerURLs:      fmt.Sprintf("https://0.0.0.0:%d", EtcdPeerPort),
		AdvertisePeerURLs:   EtcdPeerURL(ip),
		InitialCluster:      strings.Join(initial, ","),
		InitialClusterState: state,
		InitialClusterToken: Namespace(s.Cluster),
		ListenMetricsURLs:   fmt.Sprintf("http://0.0.0.0:%d", EtcdMetricsPort),
		SnapshotCount:       10000,
		QuotaBackendBytes:   quotaBytes(s.DataSize),
		ClientSecurity: security{
			CertFile: file(KeyEtcdServerCert), KeyFile: file(KeyEtcdServerKey), TrustedCAFile: file(KeyEtcdCACert), CertAuth: true,
		},
		PeerSecurity: security{
			CertFile: file(KeyEtcdPeerCert), KeyFile: file(KeyEtcdPeerKey), TrustedCAFile: file(KeyEtcdCACert), CertAuth: true,
			AllowedCNs: []string{etcdPeerCommonName}, SkipSANCheck: true,
		},
	}
	out, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return "", fmt.Errorf("etcd member %s's configuration: %w", EtcdMemberName(ordinal), err)
	}
	return string(out) + "\n", nil
}

// etcdServers are the API server's etcd endpoints (storage Etcd): every
// member's, by its Service; the etcd's client Service if none is known.
func (s Spec) etcdServers() string {
	if len(s.EtcdMemberIPs) == 0 {
		return etcdClientURL(s.EtcdServiceIP)
	}
	urls := make([]string, 0, len(s.EtcdMemberIPs))
	for _, ip := range s.EtcdMemberIPs {
		urls = append(urls, etcdClientURL(ip))
	}
	return strings.Join(urls, ",")
}

// spread prefers the Pods of labels each on a node of its own.
func spread(labels map[string]string) *corev1.Affinity {
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
				TopologyKey:   corev1.LabelHostname,
			},
		}},
	}}
}
