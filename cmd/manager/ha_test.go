package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
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
// on an etcd of three members (storage Etcd) keeps the tenant's API
// answering while one of its API server Pods is deleted, while its etcd's
// leader is, and through a rolling version change: a client that writes
// and reads every 100 ms through the tenant's kubeconfig, with
// client-go's default retry, sees no failed request, every write is
// kept, and the tenant stays Ready (its syncers ride through).
func TestHighlyAvailableControlPlane(t *testing.T) {
	tenantrytest.RequireRealNodes(t)
	env := tenantrytest.New(t, tenantrytest.Options{
		HostKubelets:          2,
		HostCRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
	})
	host := newHostClient(t, env.Host)
	startProvisioningManager(t, env, "--control-plane-versions", previousVersion)
	ctx := t.Context()
	vc := &tenantryv1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "ha"},
		Spec: tenantryv1alpha1.VirtualClusterSpec{
			KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "default", Name: "ha-kubeconfig"},
			ControlPlane: &tenantryv1alpha1.ControlPlaneSpec{
				Version:  previousVersion,
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
			describeRestarts(t, env.Host.Config(), controlplane.Namespace(vc.Name))
		}
	})
	ns := controlplane.Namespace(vc.Name)
	// settled: three of each ready, none to replace, and the version
	// taken for the one it runs (the etcd's members all voting).
	settled := func(what, version string) {
		t.Helper()
		eventually(t, 5*time.Minute, what, func(ctx context.Context) (bool, error) {
			for _, name := range []string{controlplane.WorkloadName, controlplane.EtcdName} {
				var sts appsv1.StatefulSet
				if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &sts); err != nil {
					return false, err
				}
				if sts.Status.ReadyReplicas != 3 || sts.Status.CurrentRevision != sts.Status.UpdateRevision {
					return false, fmt.Errorf("%s: %d of 3 ready, revision %s of %s", name, sts.Status.ReadyReplicas, sts.Status.CurrentRevision, sts.Status.UpdateRevision)
				}
			}
			var members corev1.ConfigMap
			if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: controlplane.EtcdConfigMapName}, &members); err != nil {
				return false, err
			}
			if voters := members.Annotations["tenantry.dev/etcd-voting-members"]; voters != "3" {
				return false, fmt.Errorf("%s of 3 etcd members voting", voters)
			}
			if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
				return false, err
			}
			cond := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionControlPlaneReady)
			return vc.Status.ControlPlane != nil && vc.Status.ControlPlane.Version == version, fmt.Errorf("ControlPlaneReady %+v", cond)
		})
	}
	began := time.Now()
	settled("three API servers on an etcd of three members", previousVersion)
	t.Logf("three API servers on an etcd of three members, ready in %s", time.Since(began).Round(time.Second))
	for _, component := range []string{"control-plane", "etcd"} {
		var pods corev1.PodList
		if err := host.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{controlplane.LabelControlPlane: vc.Name, "app.kubernetes.io/component": component}); err != nil {
			t.Fatal(err)
		}
		var nodes []string
		for _, p := range pods.Items {
			nodes = append(nodes, p.Name+"@"+p.Spec.NodeName)
		}
		t.Logf("%s: %v", component, nodes)
	}
	expectEtcdMembers(t, env, host, vc)

	expectReadyWithin(t, host, vc.Name, time.Minute)
	load := steadyClient(t, tenantKubeconfig(t, host, vc.Name))
	notReady := watchReady(t, host, vc.Name)
	// disrupt runs do under the client's load, and waits until the
	// control plane has settled again.
	disrupt := func(what string, do func(), version string) {
		t.Helper()
		load.start(ctx)
		before := load.count()
		eventually(t, 30*time.Second, "the client at work", func(context.Context) (bool, error) {
			return load.count() >= before+10, nil
		})
		began := time.Now()
		do()
		settled("settled after "+what, version)
		written, failed := load.stop()
		t.Logf("%s: settled in %s; %d writes and reads every 100 ms so far, %d failed", what, time.Since(began).Round(time.Second), written, len(failed))
		for _, err := range failed {
			t.Errorf("a request failed as %s: %v", what, err)
		}
	}
	deletePod := func(name string) {
		pod := &corev1.Pod{}
		if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
			t.Fatal(err)
		}
		gone := pod.UID
		if err := host.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
		eventually(t, 4*time.Minute, name+" replaced, and ready", func(ctx context.Context) (bool, error) {
			if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
				return false, err
			}
			return pod.UID != gone && podIsReady(pod), fmt.Errorf("UID %s, phase %s", pod.UID, pod.Status.Phase)
		})
	}
	disrupt("API server Pod "+controlplane.WorkloadName+"-0 is deleted", func() { deletePod(controlplane.WorkloadName + "-0") }, previousVersion)
	leader := etcdLeader(t, env, host, vc)
	disrupt("etcd's leader "+leader+" is deleted", func() { deletePod(leader) }, previousVersion)
	// A member's volume lost: it leaves the cluster, and joins again
	// anew, taking the data from the others.
	lost := controlplane.EtcdMemberName(2)
	disrupt("etcd member "+lost+"'s volume is lost", func() {
		claim := &corev1.PersistentVolumeClaim{}
		if err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: controlplane.DataVolumeName + "-" + lost}, claim); err != nil {
			t.Fatal(err)
		}
		gone := claim.UID
		if err := host.Delete(ctx, claim); err != nil {
			t.Fatal(err)
		}
		deletePod(lost)
		eventually(t, 4*time.Minute, lost+" on a claim anew", func(ctx context.Context) (bool, error) {
			err := host.Get(ctx, client.ObjectKey{Namespace: ns, Name: controlplane.DataVolumeName + "-" + lost}, claim)
			return err == nil && claim.UID != gone, err
		})
	}, previousVersion)
	disrupt("the version changes from "+previousVersion+" to "+controlplane.PinnedVersion, func() {
		patch := client.MergeFrom(vc.DeepCopy())
		vc.Spec.ControlPlane.Version = controlplane.PinnedVersion
		if err := host.Patch(ctx, vc, patch); err != nil {
			t.Fatal(err)
		}
	}, controlplane.PinnedVersion)
	load.expectKept(t)
	expectEtcdMembers(t, env, host, vc)
	if n := notReady(); len(n) > 0 {
		t.Errorf("the VirtualCluster was not Ready meanwhile: %v", n)
	}
}

// expectEtcdMembers: vc's etcd has three members, etcd-0 to etcd-2, each
// expectEtcdMembers: vc's etcd has three members, etcd-0 to etcd-2, each
// voting.
func expectEtcdMembers(t *testing.T, env *tenantrytest.Environment, host client.Client, vc *tenantryv1alpha1.VirtualCluster) {
	t.Helper()
	members, _ := etcdMembership(t, env, host, vc)
	var names []string
	for _, m := range members {
		if m.IsLearner {
			t.Errorf("etcd member %s is a learner", m.Name)
		}
		names = append(names, m.Name)
	}
	slices.Sort(names)
	if want := []string{"etcd-0", "etcd-1", "etcd-2"}; !slices.Equal(names, want) {
		t.Errorf("etcd's members %v, want %v", names, want)
	}
}

// etcdLeader is the Pod of the leader of vc's etcd.
func etcdLeader(t *testing.T, env *tenantrytest.Environment, host client.Client, vc *tenantryv1alpha1.VirtualCluster) string {
	t.Helper()
	members, leader := etcdMembership(t, env, host, vc)
	for _, m := range members {
		if m.ID == leader {
			return m.Name
		}
	}
	t.Fatalf("etcd's leader %x is none of its members", leader)
	return ""
}

// etcdMembership is the members of vc's etcd, and its leader's ID, read
// as a snapshot reads it.
func etcdMembership(t *testing.T, env *tenantrytest.Environment, host client.Client, vc *tenantryv1alpha1.VirtualCluster) ([]*etcdserverpb.Member, uint64) {
	t.Helper()
	storage, err := controlplane.OpenStorage(t.Context(), env.Host.Config(), host, vc)
	if err != nil {
		t.Fatal(err)
	}
	defer storage.Close()
	status, err := storage.Client.Status(t.Context(), storage.Client.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	list, err := storage.Client.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return list.Members, status.Leader
}

// watchReady samples VirtualCluster name's Ready condition until the test
// ends, and returns what says when it was not True.
func watchReady(t *testing.T, host client.Client, name string) func() []string {
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var vc tenantryv1alpha1.VirtualCluster
			if err := host.Get(ctx, client.ObjectKey{Name: name}, &vc); err == nil {
				if c := meta.FindStatusCondition(vc.Status.Conditions, tenantryv1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
					mu.Lock()
					seen = append(seen, fmt.Sprintf("%s: %+v", time.Now().Format(time.TimeOnly), c))
					mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() []string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
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
