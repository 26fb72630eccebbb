package testing

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// ClusterDNSImage is the host's cluster DNS with real nodes: CoreDNS at the
// version kubeadm of the pinned release installs, with the plugins a
// cluster's DNS uses (hack/coredns; its go.mod pins the same version,
// which `make node` tags the image with).
const ClusterDNSImage = "registry.k8s.io/coredns/coredns:v1.14.6"

// ClusterDomain is the DNS domain of the host's Services and Pods.
const ClusterDomain = "cluster.local"

// The host's cluster DNS objects, named as kubeadm names them.
const (
	clusterDNSName    = "coredns"
	clusterDNSService = "kube-dns"
	clusterDNSRole    = "system:coredns"
	clusterDNSApp     = "kube-dns" // the k8s-app label
)

// clusterDNSCorefile serves the cluster's zone and its reverse zones from
// the API, as kubeadm's does, and nothing else: there is no forward, since
// nothing of the kit sends outside this machine (other names get SERVFAIL).
const clusterDNSCorefile = `.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes ` + ClusterDomain + ` in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
    loop
    loadbalance
}
`

// ClusterDNSIP is the cluster IP of the host's DNS Service (kube-system/kube-dns),
// which the real nodes' kubelets give the host's Pods: the tenth address
// of the Service range, as kubeadm picks. Empty without real nodes.
func (e *Environment) ClusterDNSIP() string {
	if e.kit == nil {
		return ""
	}
	return e.kit.clusterDNSIP()
}

// deployClusterDNS makes the host's cluster DNS as kubeadm does: CoreDNS's
// ServiceAccount and role, its Corefile, a Deployment and the kube-dns
// Service at the kit's DNS address. It runs once the real nodes are
// Ready; waitForClusterDNS waits for it.
func (c *ControlPlane) deployClusterDNS(ctx context.Context, clientset kubernetes.Interface) error {
	ns := metav1.NamespaceSystem
	labels := map[string]string{"k8s-app": clusterDNSApp}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: clusterDNSRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: clusterDNSRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterDNSRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: clusterDNSName}},
	}
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterDNSName}}
	config := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterDNSName},
		Data:       map[string]string{"Corefile": clusterDNSCorefile},
	}
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterDNSName, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       clusterDNSPod(),
			},
		},
	}
	service := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterDNSService, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector:  labels,
			ClusterIP: c.kit.clusterDNSIP(),
			Ports: []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	creates := []struct {
		what   string
		create func() error
	}{
		{"ClusterRole " + role.Name, func() error {
			_, err := clientset.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
			return err
		}},
		{"ClusterRoleBinding " + binding.Name, func() error {
			_, err := clientset.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
			return err
		}},
		{"ServiceAccount " + ns + "/" + account.Name, func() error {
			_, err := clientset.CoreV1().ServiceAccounts(ns).Create(ctx, account, metav1.CreateOptions{})
			return err
		}},
		{"ConfigMap " + ns + "/" + config.Name, func() error {
			_, err := clientset.CoreV1().ConfigMaps(ns).Create(ctx, config, metav1.CreateOptions{})
			return err
		}},
		{"Service " + ns + "/" + service.Name, func() error {
			_, err := clientset.CoreV1().Services(ns).Create(ctx, service, metav1.CreateOptions{})
			return err
		}},
		{"Deployment " + ns + "/" + deployment.Name, func() error {
			_, err := clientset.AppsV1().Deployments(ns).Create(ctx, deployment, metav1.CreateOptions{})
			return err
		}},
	}
	for _, c := range creates {
		// The cluster's data outlives an API server restart: what a start
		// made before is kept.
		if err := c.create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("cluster DNS: creating %s: %w", c.what, err)
		}
	}
	return nil
}

// clusterDNSPod runs CoreDNS as kubeadm's manifest does: as a non-root
// user, with its Corefile mounted, ready when its ready plugin says so. It
// binds port 53 through the namespaced sysctl that lets any user bind low
// ports, as the upstream image does with a file capability.
func clusterDNSPod() corev1.PodSpec {
	return corev1.PodSpec{
		ServiceAccountName: clusterDNSName,
		DNSPolicy:          corev1.DNSDefault,
		PriorityClassName:  "system-cluster-critical",
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot: ptr.To(true),
			RunAsUser:    ptr.To[int64](65532),
			Sysctls:      []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "53"}},
		},
		Containers: []corev1.Container{{
			Name:  clusterDNSName,
			Image: ClusterDNSImage,
			Args:  []string{"-conf", "/etc/coredns/Corefile"},
			Ports: []corev1.ContainerPort{
				{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
				{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}},
				PeriodSeconds: 1,
			},
			LivenessProbe: &corev1.Probe{
				ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8080)}},
				PeriodSeconds:    10,
				FailureThreshold: 5,
			},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				ReadOnlyRootFilesystem:   ptr.To(true),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
		}},
		Volumes: []corev1.Volume{{
			Name: "config-volume",
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: clusterDNSName},
			}},
		}},
	}
}

// waitForClusterDNS waits until the kube-dns Service has a ready endpoint:
// the host's Pods then resolve names as in a cluster of their own.
func (c *ControlPlane) waitForClusterDNS(ctx context.Context, clientset kubernetes.Interface, timeout time.Duration) error {
	why := "not looked at yet"
	selector := "k8s-app=" + clusterDNSApp
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := clientset.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			why = err.Error()
			return false, nil
		}
		if len(pods.Items) == 0 {
			why = "no Pod yet"
			return false, nil
		}
		var states []string
		for _, p := range pods.Items {
			if podReady(&p) {
				return true, nil
			}
			states = append(states, p.Name+": "+podState(&p))
		}
		why = strings.Join(states, "; ")
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("control plane %q: the cluster DNS (kube-system/%s) is not ready (%s): %w", c.name, clusterDNSName, why, err)
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podState says what a Pod that is not ready is at: its phase, and each
// waiting or ended container's reason and message.
func podState(p *corev1.Pod) string {
	parts := []string{string(p.Status.Phase)}
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			parts = append(parts, fmt.Sprintf("%s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message))
		case cs.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("%s ended: %s (exit %d) %s", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode, cs.State.Terminated.Message))
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Status != corev1.ConditionTrue && cond.Message != "" {
			parts = append(parts, fmt.Sprintf("%s: %s", cond.Type, cond.Message))
		}
	}
	return strings.Join(parts, ", ")
}
