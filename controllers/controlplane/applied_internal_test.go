package controlplane

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// What was applied is taken as unchanged only while it is: an object of
// a watched kind while the cache holds the version the apply answered,
// another for reapplyAfter; a new digest, or a forgotten namespace,
// applies again.
func TestAppliedObjects(t *testing.T) {
	var a appliedObjects
	now := time.Now()
	nsKind := corev1.SchemeGroupVersion.WithKind("Namespace")
	policyKind := networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy")
	serviceKind := corev1.SchemeGroupVersion.WithKind("Service")

	policy := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "cp", Name: "control-plane"}}
	digest, err := digestOf(policy)
	if err != nil {
		t.Fatal(err)
	}
	a.record(policyKind, policy, digest, now)
	cache := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	ctx := t.Context()
	if !a.unchanged(ctx, cache, policyKind, policy, digest, now.Add(reapplyAfter/2)) {
		t.Error("an unwatched object applied just before is applied again")
	}
	if a.unchanged(ctx, cache, policyKind, policy, digest, now.Add(reapplyAfter)) {
		t.Error("an unwatched object is taken as applied past reapplyAfter")
	}
	changed := policy.DeepCopy()
	changed.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	other, err := digestOf(changed)
	if err != nil {
		t.Fatal(err)
	}
	if other == digest || a.unchanged(ctx, cache, policyKind, changed, other, now) {
		t.Error("a changed object is taken as applied")
	}

	// A Service, watched: unchanged while the cache holds its version,
	// and filled from it.
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "cp", Name: "kube-apiserver"}}
	if err := cache.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "cp", Name: "kube-apiserver"}, Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.7"}}); err != nil {
		t.Fatal(err)
	}
	var held corev1.Service
	if err := cache.Get(ctx, client.ObjectKeyFromObject(svc), &held); err != nil {
		t.Fatal(err)
	}
	svcDigest, err := digestOf(svc)
	if err != nil {
		t.Fatal(err)
	}
	answered := svc.DeepCopy()
	answered.ResourceVersion = held.ResourceVersion
	a.record(serviceKind, answered, svcDigest, now)
	want := svc.DeepCopy()
	if !a.unchanged(ctx, cache, serviceKind, want, svcDigest, now.Add(time.Hour)) || want.Spec.ClusterIP != "10.0.0.7" {
		t.Errorf("a watched object the cache holds as applied: unchanged false, or not filled (%+v)", want.Spec)
	}
	held.Spec.ClusterIP = "10.0.0.8"
	if err := cache.Update(ctx, &held); err != nil {
		t.Fatal(err)
	}
	if a.unchanged(ctx, cache, serviceKind, svc.DeepCopy(), svcDigest, now) {
		t.Error("a watched object changed since it was applied is taken as applied")
	}

	// A StatefulSet, watched: unchanged while its generation and labels
	// are those answered, whatever its status; filled from the cache.
	stsKind := appsv1.SchemeGroupVersion.WithKind("StatefulSet")
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "cp", Name: "control-plane", Labels: map[string]string{"app": "cp"}}}
	stsDigest, err := digestOf(sts)
	if err != nil {
		t.Fatal(err)
	}
	stored := sts.DeepCopy()
	stored.Generation = 1
	if err := cache.Create(ctx, stored); err != nil {
		t.Fatal(err)
	}
	a.record(stsKind, stored, stsDigest, now)
	stored.Status.ReadyReplicas = 1
	if err := cache.Status().Update(ctx, stored); err != nil {
		t.Fatal(err)
	}
	wantSTS := sts.DeepCopy()
	if !a.unchanged(ctx, cache, stsKind, wantSTS, stsDigest, now) || wantSTS.Status.ReadyReplicas != 1 {
		t.Errorf("a StatefulSet whose status alone changed: unchanged false, or not filled (%+v)", wantSTS.Status)
	}
	for what, change := range map[string]func(*appsv1.StatefulSet){
		"its spec":   func(s *appsv1.StatefulSet) { s.Generation = 2 },
		"its labels": func(s *appsv1.StatefulSet) { s.Labels["app"] = "other" },
	} {
		var held appsv1.StatefulSet
		if err := cache.Get(ctx, client.ObjectKeyFromObject(sts), &held); err != nil {
			t.Fatal(err)
		}
		change(&held)
		if err := cache.Update(ctx, &held); err != nil {
			t.Fatal(err)
		}
		if a.unchanged(ctx, cache, stsKind, sts.DeepCopy(), stsDigest, now) {
			t.Errorf("a StatefulSet whose %s changed is taken as applied", what)
		}
		a.record(stsKind, &held, stsDigest, now) // applied again
	}

	// Forgetting a namespace forgets what is in it, and it.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cp"}}
	nsDigest, err := digestOf(ns)
	if err != nil {
		t.Fatal(err)
	}
	a.record(nsKind, ns, nsDigest, now)
	elsewhere := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "control-plane"}}
	a.record(policyKind, elsewhere, digest, now)
	a.forget("cp")
	if a.unchanged(ctx, cache, nsKind, ns, nsDigest, now) || a.unchanged(ctx, cache, policyKind, policy, digest, now) {
		t.Error("a forgotten namespace's objects are taken as applied")
	}
	if !a.unchanged(ctx, cache, policyKind, elsewhere, digest, now) {
		t.Error("forgetting one namespace forgot another's")
	}
}
