package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// wakes is how many times the sleep step wakes a tenant for its median.
const wakes = 5

// sleepAndWake measures the host's memory in Pods at rest with names
// awake, then with all but the first asleep (as `tenantry sleep` puts
// them), and the time from a list of Pods through the tenant's
// kubeconfig, which wakes it, to its answer, wakes times over, of
// names[1]: each time a client of its own, as a new kubectl is. It leaves
// names[1:] asleep.
func (w *managerWorld) sleepAndWake(ctx context.Context, names []string, rest time.Duration) (awake, asleep float64, woke []time.Duration, err error) {
	if len(names) < 2 {
		return 0, 0, nil, fmt.Errorf("the sleep measure needs two control planes at least, not %d", len(names))
	}
	if awake, _, _, err = w.podUsage(ctx, func(string) bool { return true }); err != nil {
		return 0, 0, nil, err
	}
	if err := w.sleep(ctx, names[1:]...); err != nil {
		return 0, 0, nil, err
	}
	if err := pause(ctx, rest); err != nil {
		return 0, 0, nil, err
	}
	if asleep, _, _, err = w.podUsage(ctx, func(string) bool { return true }); err != nil {
		return 0, 0, nil, err
	}
	for i := range wakes {
		if i > 0 {
			if err := w.sleep(ctx, names[1]); err != nil {
				return 0, 0, nil, err
			}
		}
		tenant, err := w.tenantClient(ctx, names[1], 0)
		if err != nil {
			return 0, 0, nil, err
		}
		began := time.Now()
		held, cancel := context.WithTimeout(ctx, controlPlaneBudget)
		_, err = tenant.CoreV1().Pods(metav1.NamespaceDefault).List(held, metav1.ListOptions{})
		cancel()
		if err != nil {
			return 0, 0, nil, fmt.Errorf("a request to %s asleep: %w", names[1], err)
		}
		woke = append(woke, time.Since(began))
	}
	slices.Sort(woke)
	return awake, asleep, woke, w.sleep(ctx, names[1])
}

// sleep asks each of names to sleep, and waits until each is asleep.
func (w *managerWorld) sleep(ctx context.Context, names ...string) error {
	for _, name := range names {
		if err := controlplane.AskToSleep(ctx, w.host, name); err != nil {
			return err
		}
	}
	return tenantrytest.Poll(ctx, 250*time.Millisecond, controlPlaneBudget, func(ctx context.Context) (bool, error) {
		var list tenantryv1alpha1.VirtualClusterList
		if err := w.vcs.List(ctx, &list); err != nil {
			return false, err
		}
		asleep := 0
		for _, vc := range list.Items {
			if c := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionAsleep); slices.Contains(names, vc.Name) && c != nil && c.Status == metav1.ConditionTrue {
				asleep++
			}
		}
		return asleep == len(names), nil
	})
}

// tenantClient is a client of name's tenant, through the kubeconfig
// Tenantry wrote, at qps (0: client-go's default).
func (w *managerWorld) tenantClient(ctx context.Context, name string, qps int) (kubernetes.Interface, error) {
	var secret corev1.Secret
	if err := w.host.Get(ctx, client.ObjectKey{Namespace: secretsNamespace, Name: name + "-kubeconfig"}, &secret); err != nil {
		return nil, fmt.Errorf("reading %s's kubeconfig Secret: %w", name, err)
	}
	config, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[tenantryv1alpha1.DefaultKubeconfigKey])
	if err != nil {
		return nil, fmt.Errorf("%s's kubeconfig: %w", name, err)
	}
	if qps > 0 {
		config.QPS, config.Burst = float32(qps), qps
	}
	tenant, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("a client of %s: %w", name, err)
	}
	return tenant, nil
}

// pause waits for d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
