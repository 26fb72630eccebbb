package pods

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/internal/quota"
)

var podsGVK = corev1.SchemeGroupVersion.WithKind("Pod")

func budgetPod(name, cpu string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vc-ns", Name: name, Labels: map[string]string{syncer.LabelManagedBy: syncer.ManagedByValue, syncer.LabelCluster: "vc"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
		}}}},
	}
}

// newTestBudget is a budget of Pods, counted by their syncer's usage,
// over a fake cache of host objects; limitRange is the host namespaces'
// (nil: none).
func newTestBudget(t *testing.T, limits corev1.ResourceList, limitRange *corev1.LimitRangeSpec, objs ...client.Object) (*quota.Budget, client.Client) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).Build()
	b := quota.New(quota.Options{Limits: limits, Read: c, Refuse: syncer.Refuse,
		Copies: []client.ListOption{client.MatchingLabels{syncer.LabelCluster: "vc"}}})
	b.Count(quota.Counted{
		GVK: podsGVK, Resource: "pods", NewList: func() client.ObjectList { return &corev1.PodList{} },
		Usage: func(ctx context.Context, obj client.Object, writing, creating bool) (corev1.ResourceList, error) {
			return usage(ctx, obj, syncer.UsageInput{Writing: writing, Creating: creating, Budget: limits, LimitRange: limitRange, Host: c})
		},
	})
	return b, c
}

// refused says whether err is a refusal for the tenant (syncer.Refuse),
// as the budget's are.
func refused(err error) bool {
	return err != nil && reflect.TypeOf(err) == reflect.TypeOf(syncer.Refuse(""))
}

// Concurrent syncs never take a tenant over its budget: writes admitted
// and not yet in the cache count, and the refusal names the resource.
func TestBudgetAdmitsExactlyUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	b, c := newTestBudget(t, corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10"), corev1.ResourceRequestsCPU: resource.MustParse("1")}, nil,
		budgetPod("running", "100m"))
	var (
		mu       sync.Mutex
		admitted []*corev1.Pod
		refusals []string
		wg       sync.WaitGroup
	)
	for i := range 20 {
		wg.Go(func() {
			p := budgetPod(fmt.Sprintf("p%d", i), "200m")
			settle, err := b.Admit(ctx, podsGVK, nil, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refusals = append(refusals, err.Error())
				return
			}
			settle(nil) // written; the cache does not show it yet
			admitted = append(admitted, p)
		})
	}
	wg.Wait()
	// 100m used: four of 200m fit under 1 CPU.
	if len(admitted) != 4 {
		t.Fatalf("%d Pods admitted; want 4 (1 CPU, 100m used, 200m each)", len(admitted))
	}
	if !strings.Contains(refusals[0], "requests.cpu would be 1100m, over 1") || !strings.Contains(refusals[0], "spec.hostPolicy.budget") {
		t.Errorf("refusal %q: want it to name requests.cpu, the totals and the field", refusals[0])
	}
	// The cache catches up: the same totals, from the cache now.
	for _, p := range admitted {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	used, err := b.Used(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cpu, pods := used[corev1.ResourceRequestsCPU], used[corev1.ResourcePods]; cpu.String() != "900m" || pods.String() != "5" {
		t.Errorf("used %v; want 900m CPU and 5 Pods", used)
	}
	if _, err := b.Admit(ctx, podsGVK, nil, budgetPod("sixth", "200m")); err == nil || !strings.Contains(err.Error(), "(900m used)") {
		t.Errorf("a sixth Pod: %v; want it refused, from the cache's totals", err)
	}
	// A Pod that ended frees its share; so does a failed write.
	done := admitted[0].DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	if err := c.Status().Update(ctx, done); err != nil {
		t.Fatal(err)
	}
	settle, err := b.Admit(ctx, podsGVK, nil, budgetPod("after", "200m"))
	if err != nil {
		t.Fatalf("a Pod once another ended: %v", err)
	}
	settle(fmt.Errorf("the host refused it"))
	if _, err := b.Admit(ctx, podsGVK, nil, budgetPod("again", "200m")); err != nil {
		t.Fatalf("a Pod after a failed write freed its room: %v", err)
	}
	// An update that adds nothing is never refused, even at the limit.
	running := budgetPod("running", "100m")
	if err := c.Get(ctx, client.ObjectKeyFromObject(running), running); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admit(ctx, podsGVK, running, running.DeepCopy()); err != nil {
		t.Errorf("an update that adds nothing: %v", err)
	}
}

// A Pod takes what a quota counts: its containers, or its largest init
// container with the sidecars before it, plus overhead; pod-level
// resources win.
func TestPodResources(t *testing.T) {
	cpu := func(v string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(v)}}
	}
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{"containers add up", corev1.PodSpec{Containers: []corev1.Container{{Resources: cpu("100m")}, {Resources: cpu("200m")}}}, "300m"},
		{"a larger init container wins", corev1.PodSpec{
			InitContainers: []corev1.Container{{Resources: cpu("1")}},
			Containers:     []corev1.Container{{Resources: cpu("100m")}},
		}, "1"},
		{"sidecars run beside both", corev1.PodSpec{
			InitContainers: []corev1.Container{{Resources: cpu("50m"), RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}, {Resources: cpu("500m")}},
			Containers:     []corev1.Container{{Resources: cpu("100m")}},
		}, "550m"},
		{"overhead on top", corev1.PodSpec{
			Containers: []corev1.Container{{Resources: cpu("100m")}},
			Overhead:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
		}, "110m"},
		{"pod-level resources win", corev1.PodSpec{
			Containers: []corev1.Container{{Resources: cpu("100m")}},
			Resources:  &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}},
		}, "2"},
	} {
		requests, _ := podResources(&tc.spec)
		if got := requests[corev1.ResourceCPU]; got.Cmp(resource.MustParse(tc.want)) != 0 {
			t.Errorf("%s: %s CPU; want %s", tc.name, got.String(), tc.want)
		}
	}
}

// An update is held to the budget by what the object becomes, not by what
// it adds twice: a Pod that grows within the room left is admitted.
func TestBudgetAdmitsAnUpdateByWhatItBecomes(t *testing.T) {
	ctx := context.Background()
	b, c := newTestBudget(t, corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("1")}, nil,
		budgetPod("other", "300m"), budgetPod("growing", "200m"))
	current := budgetPod("growing", "200m")
	if err := c.Get(ctx, client.ObjectKeyFromObject(current), current); err != nil {
		t.Fatal(err)
	}
	grown := current.DeepCopy()
	grown.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("700m")
	if _, err := b.Admit(ctx, podsGVK, current, grown); err != nil {
		t.Errorf("growing to 700m beside 300m under 1 CPU: %v; want it admitted", err)
	}
	grown.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("800m")
	if _, err := b.Admit(ctx, podsGVK, current, grown); err == nil || !strings.Contains(err.Error(), "requests.cpu would be 1100m") {
		t.Errorf("growing to 800m beside 300m under 1 CPU: %v; want it refused at 1100m", err)
	}
}

// A Pod counts as the host will hold it: with the defaults of the host
// namespaces' LimitRange. One that states nothing the budget counts, with
// no default to give it, is refused as ResourceQuota refuses it, not
// counted as nothing.
func TestBudgetCountsWhatTheHostWillHold(t *testing.T) {
	ctx := context.Background()
	limits := corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("1"), corev1.ResourceLimitsMemory: resource.MustParse("1Gi")}
	bare := func(name string) *corev1.Pod {
		p := budgetPod(name, "0")
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
		return p
	}

	b, _ := newTestBudget(t, limits, nil)
	_, err := b.Admit(ctx, podsGVK, nil, bare("bare"))
	if !refused(err) || !strings.Contains(err.Error(), "counts limits.memory, and container app states no limits.memory") {
		t.Errorf("a Pod stating nothing, without a LimitRange: %v; want a refusal naming what it must state", err)
	}

	b, _ = newTestBudget(t, limits, &corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type:    corev1.LimitTypeContainer,
		Default: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("400m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}}})
	for i := range 3 {
		_, err := b.Admit(ctx, podsGVK, nil, bare(fmt.Sprintf("defaulted-%d", i)))
		switch {
		case i < 2 && err != nil:
			t.Fatalf("Pod %d, given 400m and 512Mi by the LimitRange: %v; want it admitted", i, err)
		case i == 2 && (!refused(err) || !strings.Contains(err.Error(), "limits.memory would be 1536Mi")):
			t.Errorf("a third Pod, over the budget by its defaults: %v; want a refusal", err)
		}
	}
}

// A Pod of a host runtime class counts with the class's overhead, which
// the host's admission gives it: a budget cannot be passed by asking for
// a runtime class whose Pods cost more than they state.
func TestBudgetCountsRuntimeClassOverhead(t *testing.T) {
	ctx := context.Background()
	kata := &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "kata"}, Handler: "kata",
		Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}},
	}
	b, _ := newTestBudget(t, corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("1")}, nil, kata)
	of := func(name, class string) *corev1.Pod {
		p := budgetPod(name, "300m")
		p.Spec.RuntimeClassName = ptr.To(class)
		return p
	}
	if _, err := b.Admit(ctx, podsGVK, nil, of("first", "kata")); err != nil {
		t.Fatalf("a first Pod of 300m and 250m of overhead: %v; want it admitted", err)
	}
	_, err := b.Admit(ctx, podsGVK, nil, of("second", "kata"))
	if !refused(err) || !strings.Contains(err.Error(), "requests.cpu would be 1100m") {
		t.Errorf("a second Pod of 300m and 250m of overhead: %v; want a refusal counting the overhead", err)
	}
	// A class the host does not have gives no overhead (the host refuses
	// the Pod anyway).
	if _, err := b.Admit(ctx, podsGVK, nil, of("third", "missing")); err != nil {
		t.Errorf("a Pod of 300m of a class the host lacks: %v; want it admitted as 300m", err)
	}
}
