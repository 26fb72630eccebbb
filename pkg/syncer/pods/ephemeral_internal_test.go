package pods

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// An ephemeral container goes down as the Pod's own containers did: the
// image pulled as the policy says, the tenant API server in its
// variables; one that targets or mounts what is not the tenant Pod's is
// refused.
func TestEphemeralDown(t *testing.T) {
	tenant := tenantPod(func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	})
	debugger := func(mutate func(*corev1.EphemeralContainer)) corev1.EphemeralContainer {
		e := corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debugger", Image: "busybox", Command: []string{"sh"}, ImagePullPolicy: corev1.PullIfNotPresent,
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				Env: []corev1.EnvVar{
					{Name: "ROLE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['role']"}}},
					{Name: "NODE_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
				},
			},
			TargetContainerName: "web",
		}
		if mutate != nil {
			mutate(&e)
		}
		return e
	}

	down, stripped, err := ephemeralDown(tenant, debugger(nil), "alpha", Policy{}, func() string { return "10.0.0.1" })
	if err != nil {
		t.Fatal(err)
	}
	if down.Name != "debugger" || down.TargetContainerName != "web" || !slices.Equal(down.Command, []string{"sh"}) || len(down.VolumeMounts) != 1 {
		t.Errorf("host copy %+v, want the tenant's container", down)
	}
	if down.ImagePullPolicy != corev1.PullAlways || len(stripped) != 1 || !strings.Contains(stripped[0], "imagePullPolicy of debugger") {
		t.Errorf("pull policy %s, stripped %q: want Always, and said", down.ImagePullPolicy, stripped)
	}
	secret := apiAccessSecretName(tenant.Name)
	vars, values := map[string]*corev1.EnvVarSource{}, map[string]string{}
	for _, e := range down.Env {
		vars[e.Name], values[e.Name] = e.ValueFrom, e.Value
	}
	if host := vars["KUBERNETES_SERVICE_HOST"]; host == nil || host.SecretKeyRef == nil || host.SecretKeyRef.Name != secret {
		t.Errorf("KUBERNETES_SERVICE_HOST from %+v, want the Pod's API access Secret", host)
	}
	if role := vars["ROLE"]; role == nil || role.SecretKeyRef == nil || role.SecretKeyRef.Name != secret {
		t.Errorf("ROLE from %+v, want the tenant Pod's annotation from the API access Secret", role)
	}
	if ip := vars["NODE_IP"]; ip != nil || values["NODE_IP"] != "10.0.0.1" {
		t.Errorf("NODE_IP %q from %+v, want the virtual node's address, never the host node's", values["NODE_IP"], ip)
	}
	if got := fieldPaths(&corev1.PodSpec{EphemeralContainers: []corev1.EphemeralContainer{debugger(nil)}}, true); !slices.Equal(got, []string{"metadata.annotations['role']", "status.hostIP"}) {
		t.Errorf("field paths %q, want the ephemeral container's (for the Secret's keys)", got)
	}

	for name, tc := range map[string]struct {
		mutate func(*corev1.EphemeralContainer)
		want   string
	}{
		"a target the host added": {func(e *corev1.EphemeralContainer) { e.TargetContainerName = "istio-proxy" }, "target container istio-proxy is not one of the Pod's"},
		"a volume the host added": {func(e *corev1.EphemeralContainer) { e.VolumeMounts[0].Name = "istio-token" }, "mounts volume istio-token, which is not one of the Pod's"},
		"another Pod's credentials": {func(e *corev1.EphemeralContainer) {
			e.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db" + APIAccessSecretSuffix}}}}
		}, "reserved for Pods' API access"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := ephemeralDown(tenant, debugger(tc.mutate), "alpha", Policy{}, func() string { return "10.0.0.1" })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
}

// The kubelet API and the status reach an ephemeral container only as the
// host runs it for the tenant: one of the same name the host added is the
// host's.
func TestRunsEphemeral(t *testing.T) {
	ephemeral := func(name, image string) corev1.EphemeralContainer {
		return corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: name, Image: image, Command: []string{"sh"}}}
	}
	tenant := tenantPod(func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{ephemeral("debugger", "busybox"), ephemeral("admin", "busybox"), ephemeral("pending", "busybox")}
	})
	tenant.Spec.EphemeralContainers = append(tenant.Spec.EphemeralContainers, ephemeral("copycat", "busybox"))
	host := tenantPod(func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{ephemeral("debugger", "busybox"), ephemeral("admin", "host-tools"), ephemeral("copycat", "busybox")}
		// Made by Tenantry as the policy says: the tenant API server in
		// its variables.
		p.Spec.EphemeralContainers[0].ImagePullPolicy = corev1.PullAlways
		p.Spec.EphemeralContainers[0].Env = serviceEnv(apiAccessSecretName(p.Name), nil)
	})
	// copycat is a host admin's, whose name, image and command the tenant
	// copied: still the host's.
	for name, want := range map[string]bool{"debugger": true, "admin": false, "copycat": false, "pending": false, "web": false} {
		if got := runsEphemeral(host, tenant, name); got != want {
			t.Errorf("runsEphemeral(%s) = %v, want %v", name, got, want)
		}
	}
}
