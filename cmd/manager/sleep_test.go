package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/controlplane/waker"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// expectSleepAndWake puts vc, with a Deployment "web" of two Pods and
// its Service, to sleep: no Pod of its control plane nor of its
// workloads runs in the host, and it says so. Woken, it is Ready again,
// its Service kept its cluster IP, and its Deployment's Pods run again.
func expectSleepAndWake(t *testing.T, host client.Client, kubectl tenantrytest.Kubectl, vc *tenantryv1alpha1.VirtualCluster, kubeconfig string) {
	t.Helper()
	clusterIP := kubectl.MustRun(t, kubeconfig, "", "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
	hostPods := func(ctx context.Context) ([]string, error) {
		var pods corev1.PodList
		if err := host.List(ctx, &pods); err != nil {
			return nil, err
		}
		var of []string
		for _, p := range pods.Items {
			if p.Namespace == controlplane.Namespace(vc.Name) || strings.HasPrefix(p.Namespace, vc.Name+"-") {
				of = append(of, p.Namespace+"/"+p.Name)
			}
		}
		return of, nil
	}
	condition := func(ctx context.Context, kind string) (*metav1.Condition, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return nil, err
		}
		c := meta.FindStatusCondition(vc.Status.Conditions, kind)
		if c == nil {
			return nil, fmt.Errorf("no condition %s", kind)
		}
		return c, nil
	}

	if err := controlplane.AskToSleep(t.Context(), host, vc.Name); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	eventually(t, 2*time.Minute, vc.Name+" asleep, no Pod of it in the host", func(ctx context.Context) (bool, error) {
		asleep, err := condition(ctx, tenantryv1alpha1.ConditionAsleep)
		if err != nil {
			return false, err
		}
		pods, err := hostPods(ctx)
		if err != nil {
			return false, err
		}
		return asleep.Status == metav1.ConditionTrue && len(pods) == 0, fmt.Errorf("Asleep %s/%s: %s; Pods %v", asleep.Status, asleep.Reason, asleep.Message, pods)
	})
	t.Logf("%s fell asleep in %s", vc.Name, time.Since(began).Round(100*time.Millisecond))
	expectReady(t, host, vc.Name, metav1.ConditionFalse, tenantryv1alpha1.ReasonSleepRequested)

	// Asleep, its API server's Service sends clients to the manager,
	// which refuses a request without credentials at once, waking
	// nothing.
	expectAnonymousRefused(t, kubeconfig)
	if asleep, err := condition(t.Context(), tenantryv1alpha1.ConditionAsleep); err != nil || asleep.Status != metav1.ConditionTrue {
		t.Fatalf("after a request without credentials, condition Asleep %+v: %v", asleep, err)
	}
	// kubectl through the kubeconfig wakes it, held until it answers.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	began = time.Now()
	out, err := kubectl.Run(ctx, kubeconfig, "", "get", "pods", "-l", "app=web", "-o", "name")
	if err != nil {
		t.Fatalf("kubectl get pods, asleep: %v", err)
	}
	t.Logf("kubectl get pods woke %s and was answered in %s", vc.Name, time.Since(began).Round(100*time.Millisecond))
	if n := strings.Count(out, "pod/web-"); n != 2 {
		t.Errorf("kubectl get pods, woken: %d Pods of web, want 2:\n%s", n, out)
	}
	expectEvent(t, host, vc.Name, "WakeRequested")
	expectReadyWithin(t, host, vc.Name, 3*time.Minute)
	t.Logf("%s woke, Ready, in %s", vc.Name, time.Since(began).Round(100*time.Millisecond))
	eventually(t, time.Minute, "the waker's EndpointSlice gone", func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKey{Namespace: controlplane.Namespace(vc.Name), Name: waker.EndpointSliceName}, &discoveryv1.EndpointSlice{})
		return apierrors.IsNotFound(err), err
	})
	if asleep, err := condition(t.Context(), tenantryv1alpha1.ConditionAsleep); err != nil || asleep.Status != metav1.ConditionFalse {
		t.Errorf("awake, condition Asleep %+v: %v", asleep, err)
	}
	if got := kubectl.MustRun(t, kubeconfig, "", "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"); got != clusterIP {
		t.Errorf("the Service's cluster IP is %s after a sleep, was %s", got, clusterIP)
	}
	expectRunningInHost(t, host, vc.Name, "app=web", 2)
}

// expectRunningInHost waits until want Pods labelled selector run in
// cluster's host namespaces.
func expectRunningInHost(t *testing.T, host client.Client, cluster, selector string, want int) {
	t.Helper()
	labels, err := metav1.ParseToLabelSelector(selector)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, fmt.Sprintf("%d Pods %s of %s running in the host", want, selector, cluster), func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := host.List(ctx, &pods, client.MatchingLabels(labels.MatchLabels)); err != nil {
			return false, err
		}
		running := 0
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Namespace, cluster+"-") && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == want, fmt.Errorf("%d running", running)
	})
}

// expectAnonymousRefused sends a request without credentials to the API
// server of kubeconfig, trusting its CA: it is refused with 401 and a
// message that says the tenant sleeps.
func expectAnonymousRefused(t *testing.T, kubeconfig string) {
	t.Helper()
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	anonymous := rest.AnonymousClientConfig(config)
	anonymous.Timeout = 30 * time.Second
	c, err := kubernetes.NewForConfig(anonymous)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) || !strings.Contains(err.Error(), "is asleep") {
		t.Errorf("a request without credentials to a sleeping tenant: %v, want 401 saying it sleeps", err)
	}
}

// afterInactivity is the spec.sleep.afterInactivity of the tests' idle
// tenants.
const afterInactivity = time.Minute

// createIdleTenant makes VirtualCluster name with a control plane that
// sleeps after a minute of no one's requests.
func createIdleTenant(t *testing.T, host client.Client, name string) *tenantryv1alpha1.VirtualCluster {
	t.Helper()
	vc := &tenantryv1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: tenantryv1alpha1.VirtualClusterSpec{
			KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: name + "-kubeconfig"},
			ControlPlane:        &tenantryv1alpha1.ControlPlaneSpec{},
			Sleep:               &tenantryv1alpha1.SleepSpec{AfterInactivity: metav1.Duration{Duration: afterInactivity}},
		},
	}
	if err := host.Create(t.Context(), vc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			describeNamespace(t, host, controlplane.Namespace(name))
		}
	})
	return vc
}

// idleTenant is a tenant of createIdleTenant that people last used at
// lastRequest, through kubeconfig.
type idleTenant struct {
	vc          *tenantryv1alpha1.VirtualCluster
	kubeconfig  string
	lastRequest time.Time
}

// useIdleTenant waits until vc is Ready, and has people use it: a
// Deployment, whose Pod Tenantry then keeps in sync (its status, its
// node) while no one else asks anything. Its reports note the activity.
func useIdleTenant(t *testing.T, host client.Client, kubectl tenantrytest.Kubectl, vc *tenantryv1alpha1.VirtualCluster) idleTenant {
	t.Helper()
	expectReadyWithin(t, host, vc.Name, 3*time.Minute)
	idle := idleTenant{vc: vc, kubeconfig: tenantKubeconfig(t, host, vc.Name)}
	kubectl.MustRun(t, idle.kubeconfig, "", "create", "deployment", "web", "--image="+agnhostImage, "--", "/agnhost", "netexec", "--http-port=8080")
	kubectl.MustRun(t, idle.kubeconfig, "", "get", "deployment", "web")
	idle.lastRequest = time.Now()
	expectRunningInHost(t, host, vc.Name, "app=web", 1)
	eventually(t, 30*time.Second, "status.sleep.lastActivityTime from the reports", func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return false, err
		}
		s := vc.Status.Sleep
		return s != nil && s.LastActivityTime != nil, fmt.Errorf("status.sleep %+v", s)
	})
	return idle
}

// expectSleptWhenIdle: the idle tenant fell asleep a minute after
// people's last request, although Tenantry synced its Deployment's Pod
// all the while (its own requests are not activity); and tenantry
// connect's forwarded port wakes it.
func expectSleptWhenIdle(t *testing.T, env *tenantrytest.Environment, host client.Client, kubectl tenantrytest.Kubectl, idle idleTenant) {
	t.Helper()
	ctx := t.Context()
	vc := idle.vc
	eventually(t, afterInactivity+2*time.Minute, vc.Name+" asleep after a minute of no one's requests", func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(vc.Status.Conditions, tenantryv1alpha1.ConditionAsleep), fmt.Errorf("conditions %+v", vc.Status.Conditions)
	})
	asked, err := time.Parse(time.RFC3339Nano, vc.Annotations[tenantryv1alpha1.AnnotationSleepRequestedAt])
	if err != nil {
		t.Fatal(err)
	}
	noted := vc.Status.Sleep.LastActivityTime.Time
	t.Logf("%s: last request at %s, last activity noted %s, asked to sleep at %s (%s after the last request)", vc.Name,
		idle.lastRequest.UTC().Format(time.TimeOnly), noted.UTC().Format(time.TimeOnly), asked.UTC().Format(time.TimeOnly), asked.Sub(idle.lastRequest).Round(time.Second))
	// Tenantry's syncing after the last request counted for nothing: the
	// noted time is, within a second's rounding, a request of people's.
	if noted.After(idle.lastRequest.Add(time.Second)) {
		t.Errorf("activity noted at %s, after the last request of people's at %s: Tenantry's own requests count", noted, idle.lastRequest)
	}
	if gap := asked.Sub(noted); gap < afterInactivity {
		t.Errorf("asked to sleep %s after the last activity, before spec.sleep.afterInactivity %s", gap, afterInactivity)
	}
	expectEvent(t, host, vc.Name, "Inactive")

	// tenantry connect's port wakes it.
	began := time.Now()
	server, _, err := controlplane.Forward(ctx, env.Host.Config(), vc.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if out := kubectl.MustRun(t, withServer(t, idle.kubeconfig, server), "", "get", "deployment", "web", "-o", "name"); strings.TrimSpace(out) != "deployment.apps/web" {
		t.Errorf("through the forwarded port, woken: %q", out)
	}
	t.Logf("a forwarded port woke %s and was answered in %s", vc.Name, time.Since(began).Round(100*time.Millisecond))
	expectRunningInHost(t, host, vc.Name, "app=web", 1)
}
