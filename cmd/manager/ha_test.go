package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// TestHighlyAvailableControlPlane: a control plane of three API servers
// (storage Etcd) keeps the tenant's API answering while one of its API
// server Pods is deleted: a client that writes and reads every 100 ms
// through the tenant's kubeconfig, with client-go's default retry, sees
// no failed request, and every write is kept.
func TestHighlyAvailableControlPlane(t *testing.T) {
	tenantrytest.RequireRealNodes(t)
	env := tenantrytest.New(t, tenantrytest.Options{
		HostKubelets:          2,
		HostCRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
	})
	host := newHostClient(t, env.Host)
	startProvisioningManager(t, env)
	ctx := t.Context()
	vc := &tenantryv1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "ha"},
		Spec: tenantryv1alpha1.VirtualClusterSpec{
			KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: "ha-kubeconfig"},
			ControlPlane: &tenantryv1alpha1.ControlPlaneSpec{
				Replicas: ptr.To[int32](3),
				Storage:  tenantryv1alpha1.ControlPlaneStorage{Type: tenantryv1alpha1.StorageEtcd},
			},
		},
	}
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			describeNamespace(t, host, controlplane.Namespace(vc.Name))
		}
	})
	ns := controlplane.Namespace(vc.Name)
	allReady := func(what string) {
		t.Helper()
		eventually(t, 4*time.Minute, what, func(ctx context.Context) (bool, error) {
			var sts appsv1.StatefulSet
			if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: controlplane.WorkloadName}, &sts); err != nil {
				return false, err
			}
			return sts.Status.ReadyReplicas == 3 && sts.Status.CurrentRevision == sts.Status.UpdateRevision,
				fmt.Errorf("%d of 3 ready, revision %s of %s", sts.Status.ReadyReplicas, sts.Status.CurrentRevision, sts.Status.UpdateRevision)
		})
	}
	began := time.Now()
	allReady("three API servers ready")
	t.Logf("three API servers ready in %s", time.Since(began).Round(time.Second))
	var nodes []string
	var pods corev1.PodList
	if err := host.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{controlplane.LabelControlPlane: vc.Name, "app.kubernetes.io/component": "control-plane"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		nodes = append(nodes, p.Spec.NodeName)
	}
	t.Logf("API servers on nodes %v", nodes)

	load := steadyClient(t, tenantKubeconfig(t, host, vc.Name))

	// The Pod that serves the client's connection, or any: each goes in
	// turn.
	for _, victim := range []string{controlplane.WorkloadName + "-0", controlplane.WorkloadName + "-2"} {
		load.start(ctx)
		before := load.count()
		eventually(t, 30*time.Second, "the client at work", func(context.Context) (bool, error) {
			return load.count() >= before+10, nil
		})
		pod := &corev1.Pod{}
		if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: victim}, pod); err != nil {
			t.Fatal(err)
		}
		gone := pod.UID
		if err := host.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
		eventually(t, 4*time.Minute, victim+" replaced, and ready", func(ctx context.Context) (bool, error) {
			if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: victim}, pod); err != nil {
				return false, err
			}
			return pod.UID != gone && podIsReady(pod), fmt.Errorf("UID %s, phase %s", pod.UID, pod.Status.Phase)
		})
		allReady("three API servers ready again")
		written, failed := load.stop()
		t.Logf("%s deleted: %d writes and reads every 100 ms, %d failed", victim, written, len(failed))
		for _, err := range failed {
			t.Errorf("a request failed while %s went: %v", victim, err)
		}
	}
	load.expectKept(t)
}

// steady writes a ConfigMap and reads it back every 100 ms through a
// kubeconfig, with client-go's defaults, and keeps what failed.
type steady struct {
	c       kubernetes.Interface
	mu      sync.Mutex
	next    int
	written []string
	failed  []error
	cancel  context.CancelFunc
	done    chan struct{}
}

// steadyClient is a steady client of kubeconfig.
func steadyClient(t *testing.T, kubeconfig string) *steady {
	t.Helper()
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	return &steady{c: c}
}

func (s *steady) start(ctx context.Context) {
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s.mu.Lock()
			// Of its own each time: one cut short as the client stopped
			// may have been made.
			s.next++
			name := fmt.Sprintf("steady-%d", s.next)
			s.mu.Unlock()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": name}}
			_, err := s.c.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx, cm, metav1.CreateOptions{})
			if err == nil {
				_, err = s.c.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
			}
			s.mu.Lock()
			switch {
			case ctx.Err() != nil:
			case err != nil:
				s.failed = append(s.failed, fmt.Errorf("%s: %w", name, err))
			default:
				s.written = append(s.written, name)
			}
			s.mu.Unlock()
		}
	}()
}

// count is how many writes succeeded.
func (s *steady) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.written)
}

// stop stops the client, and says how many it wrote in all and what
// failed since it started.
func (s *steady) stop() (int, []error) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	failed := s.failed
	s.failed = nil
	return len(s.written), failed
}

// expectKept: every write the client saw succeed is there.
func (s *steady) expectKept(t *testing.T) {
	t.Helper()
	list, err := s.c.CoreV1().ConfigMaps(metav1.NamespaceDefault).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, cm := range list.Items {
		have[cm.Name] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range s.written {
		if !have[name] {
			t.Errorf("ConfigMap %s, written, is gone", name)
		}
	}
}
