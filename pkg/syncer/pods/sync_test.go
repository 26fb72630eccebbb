package pods_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

func TestPodSync(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	name := unique("web")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "default",
			ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "registry"}},
			Containers: []corev1.Container{{
				Name: "web", Image: "nginx:1",
				Env: []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{
					SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"},
				}}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "config", MountPath: "/config"},
					{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}},
			},
		},
	}
	if err := tenant.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}

	var hostPod corev1.Pod
	hostKey := client.ObjectKey{Namespace: hostNS("tenant-1", "default"), Name: name}
	eventually(t, 10*time.Second, "host Pod", func(ctx context.Context) (bool, error) {
		err := shared.Host.Get(ctx, hostKey, &hostPod)
		return err == nil, err
	})
	spec := hostPod.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("host Pod mounts a service account token")
	}
	if len(spec.Volumes) != 2 || spec.Volumes[0].ConfigMap == nil || spec.Volumes[0].ConfigMap.Name != "web-config" {
		t.Errorf("host Pod volumes = %+v, want the ConfigMap volume, by the same name, and the token's", spec.Volumes)
	}
	// The token is the tenant's, from the Pod's API access Secret; never
	// one the host would issue (apiaccess_test.go shows it works).
	if sources := spec.Volumes[1].Projected.Sources; len(sources) != 1 || sources[0].Secret == nil || sources[0].Secret.Name != name+"-tenantry-api-access" {
		t.Errorf("host Pod's token volume projects %+v, want the API access Secret", sources)
	}
	if len(spec.Containers[0].VolumeMounts) != 2 {
		t.Errorf("host Pod mounts = %+v, want both", spec.Containers[0].VolumeMounts)
	}
	for _, e := range spec.Containers[0].Env {
		if e.Name == "PASSWORD" && e.ValueFrom.SecretKeyRef.Name != "db" {
			t.Errorf("env Secret reference = %q", e.ValueFrom.SecretKeyRef.Name)
		}
	}
	if hostPod.Labels["app"] != "web" {
		t.Errorf("host Pod labels = %v", hostPod.Labels)
	}

	// The host's scheduler binds it to a node and kwok runs it there: the
	// tenant Pod takes the node, the IP and the Ready condition.
	var running corev1.Pod
	eventually(t, 30*time.Second, "host Pod scheduled and Running", func(ctx context.Context) (bool, error) {
		if err := shared.Host.Get(ctx, hostKey, &running); err != nil {
			return false, err
		}
		ok := running.Spec.NodeName != "" && running.Status.Phase == corev1.PodRunning && running.Status.PodIP != ""
		return ok, fmt.Errorf("node %q phase %q ip %q", running.Spec.NodeName, running.Status.Phase, running.Status.PodIP)
	})
	if !strings.HasPrefix(running.Spec.NodeName, tenantrytest.NodeNamePrefix) {
		t.Errorf("host Pod runs on %q, not on a kwok node", running.Spec.NodeName)
	}
	eventually(t, 10*time.Second, "tenant Pod bound to the host Pod's node, with its status (Running, Ready, IP)", func(ctx context.Context) (bool, error) {
		var p corev1.Pod
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return false, err
		}
		// The host node's address is hidden: the default Options show
		// no node addresses.
		want := *running.Status.DeepCopy()
		want.HostIP, want.HostIPs = "", nil
		ok := p.Spec.NodeName == running.Spec.NodeName && equality.Semantic.DeepEqual(p.Status, want)
		return ok, fmt.Errorf("node %q phase %q ip %q conditions %v", p.Spec.NodeName, p.Status.Phase, p.Status.PodIP, p.Status.Conditions)
	})

	t.Run("a host Pod whose labels someone took off is not taken for gone", func(t *testing.T) {
		var hp corev1.Pod
		if err := shared.Host.Get(ctx, hostKey, &hp); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(hp.DeepCopy())
		delete(hp.Labels, syncer.LabelManagedBy)
		if err := shared.Host.Patch(ctx, &hp, patch); err != nil {
			t.Fatal(err)
		}
		eventually(t, 20*time.Second, "the host Pod's label restored", func(ctx context.Context) (bool, error) {
			err := shared.Host.Get(ctx, hostKey, &hp)
			return err == nil && hp.Labels[syncer.LabelManagedBy] == syncer.ManagedByValue, fmt.Errorf("labels %v (%v)", hp.Labels, err)
		})
		var p corev1.Pod
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("tenant Pod: %v, phase %s; want it Running still", err, p.Status.Phase)
		}
	})

	t.Run("a tenant Pod's deletion is mirrored, and completed once the host Pod is gone", func(t *testing.T) {
		if err := tenant.Delete(ctx, pod); err != nil { // graceful: no kubelet ends it in the tenant
			t.Fatal(err)
		}
		// The host's kubelet (kwok) ends the host Pod; the tenant Pod follows.
		shared.ExpectHostGone(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: hostKey.Namespace, Name: hostKey.Name}})
		eventually(t, 10*time.Second, "tenant Pod gone", func(ctx context.Context) (bool, error) {
			err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
			return apierrors.IsNotFound(err), err
		})
	})
}

// A tenant Pod can only name objects in its own host namespace: a Secret
// that exists only in another tenant, or only in the host, is not there.
func TestPodCannotReachOthersSecrets(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	secretName := unique("elsewhere")
	secret := func(ns string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName}, StringData: map[string]string{"k": "v"}}
	}
	if err := shared.Tenants["tenant-2"].Create(ctx, secret("default")); err != nil {
		t.Fatal(err)
	}
	if err := shared.Host.Create(ctx, secret("default")); err != nil {
		t.Fatal(err)
	}
	shared.ExpectHostCopy(t, &corev1.Secret{}, "tenant-2", "default", secretName) // tenant-2's copy is in tenant-2's host namespace

	name := unique("thief")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: secretName}}}},
		},
	}
	if err := shared.Tenants["tenant-1"].Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	hostPod := shared.ExpectHostCopy(t, &corev1.Pod{}, "tenant-1", "default", name).(*corev1.Pod)
	if hostPod.Namespace != hostNS("tenant-1", "default") {
		t.Fatalf("host Pod in %s", hostPod.Namespace)
	}
	if got := hostPod.Spec.Volumes[0].Secret.SecretName; got != secretName {
		t.Fatalf("secret volume names %q", got)
	}
	// The kubelet looks the Secret up in the Pod's namespace: it is not there.
	err := shared.Host.Get(ctx, client.ObjectKey{Namespace: hostPod.Namespace, Name: secretName}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("Secret %s in tenant-1's host namespace: %v, want NotFound", secretName, err)
	}
}

// A Pod that the host's Pod Security level refuses is explained to the
// tenant: a Warning Event with the host's message, and PodScheduled=False,
// as for a Pod no scheduler can place.
func TestRefusedPodIsExplained(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("privileged")},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "root", Image: "busybox",
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
		}}},
	}
	if err := tenant.Create(ctx, pod); err != nil { // the tenant's own level allows it
		t.Fatal(err)
	}
	event := syncertest.ExpectHostRejected(t, tenant, pod.Namespace, pod.Name, "PodSecurity")
	eventually(t, 10*time.Second, "PodScheduled=False with reason HostRejected", func(ctx context.Context) (bool, error) {
		var p corev1.Pod
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				ok := c.Status == corev1.ConditionFalse && c.Reason == syncer.ReasonHostRejected && strings.Contains(c.Message, "privileged")
				return ok, fmt.Errorf("PodScheduled %s, %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		return false, fmt.Errorf("no PodScheduled condition in %v", p.Status.Conditions)
	})
	t.Logf("tenant event: %s", event.Note)
	expectNoHostCopy(t, "tenant-1", pod)
}

// The host scheduler's verdicts on a tenant Pod reach the tenant as a
// cluster's scheduler tells them: a Warning Event FailedScheduling, named
// after the Pod, with the scheduler's message while no host node fits it,
// and a Normal Event Scheduled once it is placed.
func TestSchedulerVerdictsReachTheTenant(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	eventOf := func(pod *corev1.Pod, reason string) corev1.Event {
		var found corev1.Event
		eventually(t, 30*time.Second, "Event "+reason+" of tenant Pod "+pod.Name, func(ctx context.Context) (bool, error) {
			var events corev1.EventList
			if err := tenant.List(ctx, &events, client.InNamespace(pod.Namespace)); err != nil {
				return false, err
			}
			var seen []string
			for _, e := range events.Items {
				if e.InvolvedObject.Name == pod.Name {
					seen = append(seen, e.Reason)
				}
				if strings.HasPrefix(e.Name, pod.Name) && e.InvolvedObject.UID == pod.UID && e.Reason == reason {
					found = e
					return true, nil
				}
			}
			return false, fmt.Errorf("the Pod's Events are %v", seen)
		})
		return found
	}

	unplaceable := createPausePod(t, tenant, unique("unplaceable"), map[string]string{"tenantry.test/no-such-node": "x"})
	if e := eventOf(unplaceable, "FailedScheduling"); e.Type != corev1.EventTypeWarning || !strings.Contains(e.Message, "nodes are available") {
		t.Errorf("FailedScheduling Event: type %s, message %q; want a Warning with the scheduler's message", e.Type, e.Message)
	}

	placed := createPausePod(t, tenant, unique("placed"), nil)
	e := eventOf(placed, "Scheduled")
	var bound corev1.Pod
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(placed), &bound); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("Successfully assigned default/%s to %s", placed.Name, bound.Spec.NodeName); e.Type != corev1.EventTypeNormal || e.Message != want {
		t.Errorf("Scheduled Event: type %s, message %q; want a Normal one, %q", e.Type, e.Message, want)
	}
}
