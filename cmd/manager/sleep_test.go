package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
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

	if err := controlplane.AskToWake(t.Context(), host, vc.Name); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	expectReadyWithin(t, host, vc.Name, 3*time.Minute)
	t.Logf("%s woke, Ready, in %s", vc.Name, time.Since(began).Round(100*time.Millisecond))
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
