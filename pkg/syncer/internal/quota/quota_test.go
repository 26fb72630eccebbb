package quota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

var errNoRoom = errors.New("no room")

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errNoRoom, fmt.Sprintf(format, args...))
}

// A type counts as ResourceQuota counts it, by its plural resource and
// group (count/widgets.example.com); a core type without its group.
func TestCountsByResourceName(t *testing.T) {
	widget := Counted{GVK: schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, Resource: "widgets"}
	if got := widget.countName(); got != "count/widgets.example.com" {
		t.Errorf("a custom resource counts as %s, want count/widgets.example.com", got)
	}
	cm := Counted{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Resource: "configmaps"}
	if got := cm.countName(); got != "count/configmaps" {
		t.Errorf("a core type counts as %s, want count/configmaps", got)
	}
	b := New(Options{Limits: corev1.ResourceList{"count/widgets.example.com": resource.MustParse("1")}})
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(widget.GVK)
	got, err := b.usage(context.Background(), widget, w, false, false)
	if q, ok := got["count/widgets.example.com"]; err != nil || !ok || q.Value() != 1 || len(got) != 1 {
		t.Errorf("a widget's usage %v (%v), want count/widgets.example.com: 1", got, err)
	}
}

// What a syncer's Usage declares counts, its own count among it, and its
// error refuses the write; names the budget does not hold are left out.
func TestUsageIsTheSyncers(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	b := New(Options{Read: c, Refuse: refuse, Limits: corev1.ResourceList{
		"count/configmaps": resource.MustParse("5"), corev1.ResourceConfigMaps: resource.MustParse("1"),
	}})
	veto := errors.New("state what you count")
	b.Count(Counted{
		GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Resource: "configmaps",
		NewList: func() client.ObjectList { return &corev1.ConfigMapList{} },
		Usage: func(_ context.Context, obj client.Object, writing, creating bool) (corev1.ResourceList, error) {
			switch obj.GetName() {
			case "vetoed":
				return nil, veto
			case "uncounted":
				return corev1.ResourceList{"count/configmaps": {}, "secrets": resource.MustParse("9")}, nil
			}
			return corev1.ResourceList{corev1.ResourceConfigMaps: resource.MustParse("1")}, nil
		},
	})
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	cm := func(name string) *corev1.ConfigMap {
		o := &corev1.ConfigMap{}
		o.Name, o.Namespace = name, "ns"
		return o
	}
	if _, err := b.Admit(ctx, gvk, nil, cm("vetoed")); !errors.Is(err, veto) {
		t.Errorf("a write its Usage refuses: %v; want its error", err)
	}
	settle, err := b.Admit(ctx, gvk, nil, cm("first"))
	if err != nil {
		t.Fatalf("a first ConfigMap: %v", err)
	}
	settle(nil)
	if _, err := b.Admit(ctx, gvk, nil, cm("second")); !errors.Is(err, errNoRoom) || !strings.Contains(err.Error(), "configmaps would be 2, over 1 (1 used)") {
		t.Errorf("a second ConfigMap over configmaps: 1: %v; want a refusal naming the totals", err)
	}
	if _, err := b.Admit(ctx, gvk, nil, cm("uncounted")); err != nil {
		t.Errorf("a ConfigMap whose Usage counts nothing the budget holds: %v; want it admitted", err)
	}
	used, err := b.Used(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, cms := used["count/configmaps"], used[corev1.ResourceConfigMaps]; n.Value() != 1 || cms.Value() != 1 || len(used) != 2 {
		t.Errorf("used %v; want count/configmaps 1 and configmaps 1, nothing else", used)
	}
}

// A nil Budget admits everything.
func TestNilBudgetAdmits(t *testing.T) {
	var b *Budget
	if _, err := b.Admit(context.Background(), schema.GroupVersionKind{}, nil, &corev1.Pod{}); err != nil {
		t.Error(err)
	}
	if err := b.AdmitNamespace(context.Background(), nil); err != nil {
		t.Error(err)
	}
}
