package pods_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer/syncertest"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// A Pod reaches its own tenant's API server as an in-cluster client: its
// host copy names the tenant API server in KUBERNETES_SERVICE_HOST and
// _PORT, and mounts the tenant's CA, the tenant namespace and a token the
// tenant issued for the Pod's ServiceAccount, which authenticates as that
// ServiceAccount, bound to the Pod, until the Pod goes.
func TestPodReachesItsTenantAPIServer(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("operator")},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "operator",
			Env: []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"},
			}}},
		}}},
	}
	if err := tenant.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	expectPodRunning(t, tenant, pod, "")

	hostKey := shared.HostKey("tenant-1", pod.Namespace, pod.Name)
	var hostPod corev1.Pod
	if err := shared.Host.Get(ctx, hostKey, &hostPod); err != nil {
		t.Fatal(err)
	}
	secretName := pod.Name + "-tenantry-api-access"
	env := map[string]corev1.EnvVar{}
	for _, e := range hostPod.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	for _, name := range []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
		if ref := env[name].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != secretName {
			t.Errorf("host Pod's %s = %+v, want it from Secret %s", name, env[name], secretName)
		}
	}
	if ref := env["POD_NAMESPACE"].ValueFrom; ref == nil || ref.FieldRef.FieldPath != "metadata.annotations['tenantry.dev/tenant-namespace']" {
		t.Errorf("host Pod's POD_NAMESPACE = %+v, want the tenant namespace", env["POD_NAMESPACE"])
	}
	mounted := false
	for _, m := range hostPod.Spec.Containers[0].VolumeMounts {
		mounted = mounted || m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount"
	}
	for _, v := range hostPod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil || s.ConfigMap != nil {
				t.Errorf("host Pod's volume %s projects %+v: a host token or the host's CA", v.Name, s)
			}
		}
	}
	if !mounted || hostPod.Spec.AutomountServiceAccountToken == nil || *hostPod.Spec.AutomountServiceAccountToken {
		t.Errorf("host Pod: service account directory mounted %v, automount %v; want the tenant's mounted and no host token",
			mounted, hostPod.Spec.AutomountServiceAccountToken)
	}

	var secret corev1.Secret
	eventually(t, 20*time.Second, "the Pod's API access Secret in the host", func(ctx context.Context) (bool, error) {
		err := shared.Host.Get(ctx, client.ObjectKey{Namespace: hostKey.Namespace, Name: secretName}, &secret)
		return err == nil, err
	})
	if len(secret.OwnerReferences) != 1 || secret.OwnerReferences[0].UID != hostPod.UID {
		t.Errorf("API access Secret owned by %v, want the host Pod %s", secret.OwnerReferences, hostPod.UID)
	}
	// The namespace file comes from the downward API, which reads the
	// tenant namespace off the host Pod's annotation.
	namespaceFile := ""
	for _, v := range hostPod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.DownwardAPI != nil {
				for _, item := range src.DownwardAPI.Items {
					if item.Path == "namespace" {
						namespaceFile = item.FieldRef.FieldPath
					}
				}
			}
		}
	}
	if namespaceFile != "metadata.annotations['tenantry.dev/tenant-namespace']" || hostPod.Annotations["tenantry.dev/tenant-namespace"] != pod.Namespace {
		t.Errorf("namespace file from %q, tenant namespace annotation %q; want %q", namespaceFile, hostPod.Annotations["tenantry.dev/tenant-namespace"], pod.Namespace)
	}
	token := string(secret.Data["token"])
	for _, o := range []client.Object{&secret, &hostPod} {
		for k, v := range o.GetAnnotations() {
			if token != "" && strings.Contains(v, token) {
				t.Errorf("the token is in annotation %s of %T", k, o)
			}
		}
	}

	// What an in-cluster client in the Pod builds, from the Pod's files
	// and variables.
	inCluster := &rest.Config{
		Host:            "https://" + string(secret.Data["kubernetes-service-host"]) + ":" + string(secret.Data["kubernetes-service-port"]),
		TLSClientConfig: rest.TLSClientConfig{CAData: secret.Data["ca.crt"]},
		BearerToken:     token,
	}
	whoAmI := func(ctx context.Context) (*authenticationv1.SelfSubjectReview, error) {
		cs, err := kubernetes.NewForConfig(inCluster)
		if err != nil {
			return nil, err
		}
		return cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	}
	review, err := whoAmI(ctx)
	if err != nil {
		t.Fatalf("the Pod's token at its tenant API server %s: %v", inCluster.Host, err)
	}
	user := review.Status.UserInfo
	if want := "system:serviceaccount:default:default"; user.Username != want {
		t.Fatalf("the Pod's token authenticates as %q, want %q", user.Username, want)
	}
	if got := user.Extra["authentication.kubernetes.io/pod-name"]; len(got) != 1 || got[0] != pod.Name {
		t.Errorf("the token is bound to Pod %v, want %s", got, pod.Name)
	}
	t.Logf("the Pod's token authenticates at %s as %s, bound to Pod %v", inCluster.Host, user.Username, user.Extra["authentication.kubernetes.io/pod-name"])

	// The Pod gone, its token and its Secret go too.
	if err := tenant.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the API access Secret gone with its Pod", func(ctx context.Context) (bool, error) {
		err := shared.Host.Get(ctx, client.ObjectKeyFromObject(&secret), &corev1.Secret{})
		return apierrors.IsNotFound(err), err
	})
	eventually(t, 30*time.Second, "the token refused", func(ctx context.Context) (bool, error) {
		_, err := whoAmI(ctx)
		return apierrors.IsUnauthorized(err), fmt.Errorf("still accepted: %v", err)
	})
}

// A Pod cannot read another Pod's token through its API access Secret, and
// a tenant Secret cannot pose as one: both are refused, and the tenant is
// told.
func TestPodCannotReadAnotherPodsToken(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]
	stolen := unique("victim") + "-tenantry-api-access"
	thief := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: unique("thief")},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "app",
			Env: []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: stolen}, Key: "token",
			}}}},
		}}},
	}
	poser := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: stolen}, StringData: map[string]string{"token": "forged"}}
	for _, o := range []client.Object{thief, poser} {
		if err := tenant.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tenant.Delete(context.Background(), o) })
	}
	syncertest.ExpectHostRejected(t, tenant, "default", thief.Name, "reserved for Pods' API access")
	syncertest.ExpectHostRejected(t, tenant, "default", poser.Name, "reserved for Pods' API access")
	expectNoHostCopy(t, "tenant-2", thief)
	expectNoHostCopy(t, "tenant-2", poser)
}

// A tenant is not watched for ClusterTrustBundles until a Pod projects
// one: an idle tenant costs the manager no watch of a kind few use. The
// first such Pod starts the watch, and a bundle created after it reaches
// the Pod's API access Secret.
func TestTrustBundlesAreWatchedFromTheFirstPodThatReadsThem(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-1"]
	clientset, err := kubernetes.NewForConfig(shared.Env.Tenants[0].Config())
	if err != nil {
		t.Fatal(err)
	}
	// The API server's own watch and the tenant controller-manager's.
	before := bundleWatches(t, clientset)

	name := unique("late-root")
	pod := createPod(t, tenant, unique("reads-bundle"), corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "trust", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: &name, Path: "ca.pem", Optional: ptr.To(true)}}},
		}}}},
	})
	eventually(t, 30*time.Second, "the manager's watch of the tenant's ClusterTrustBundles", func(context.Context) (bool, error) {
		return bundleWatches(t, clientset) == before+1, nil
	})

	ca, err := tenantrytest.CACertificatePEM("late root")
	if err != nil {
		t.Fatal(err)
	}
	bundle := &certificatesv1.ClusterTrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certificatesv1.ClusterTrustBundleSpec{TrustBundle: string(ca)},
	}
	if err := tenant.Create(ctx, bundle); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.Delete(context.Background(), bundle) })
	hostKey := shared.HostKey("tenant-1", pod.Namespace, pod.Name)
	eventually(t, 30*time.Second, "the new bundle in the Pod's API access Secret", func(ctx context.Context) (bool, error) {
		var secret corev1.Secret
		err := shared.Host.Get(ctx, client.ObjectKey{Namespace: hostKey.Namespace, Name: pod.Name + "-tenantry-api-access"}, &secret)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		for key, value := range secret.Data {
			if strings.HasPrefix(key, "clustertrustbundle-") && len(value) > 0 {
				return true, nil
			}
		}
		return false, err
	})
}

// bundleWatches counts the watches of ClusterTrustBundles that the tenant
// API server of clientset serves now.
func bundleWatches(t *testing.T, clientset kubernetes.Interface) int {
	t.Helper()
	body, err := clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("reading the tenant API server's metrics: %v", err)
	}
	n := 0
	for line := range strings.Lines(string(body)) {
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `resource="clustertrustbundles"`) ||
			!strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		n += int(v)
	}
	return n
}
