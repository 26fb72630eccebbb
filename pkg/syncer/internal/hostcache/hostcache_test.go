package hostcache

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// A tenant's host request that the fence let go, and that the host does
// not answer, ends within RequestTimeout: it cannot land after another
// replica took the tenant.
func TestHostRequestsTimeOutWithinTheFencingMargin(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api":
			_ = json.NewEncoder(w).Encode(metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
		case "/apis":
			gv := metav1.GroupVersionForDiscovery{GroupVersion: "apiextensions.k8s.io/v1", Version: "v1"}
			_ = json.NewEncoder(w).Encode(metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
				Groups: []metav1.APIGroup{{Name: "apiextensions.k8s.io", Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}}})
		case "/apis/apiextensions.k8s.io/v1":
			_ = json.NewEncoder(w).Encode(metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "apiextensions.k8s.io/v1",
				APIResources: []metav1.APIResource{{Name: "customresourcedefinitions", Kind: "CustomResourceDefinition", Verbs: []string{"get", "list", "watch"}}}})
		case "/api/v1":
			_ = json.NewEncoder(w).Encode(metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "v1",
				APIResources: []metav1.APIResource{
					{Name: "configmaps", Namespaced: true, Kind: "ConfigMap", Verbs: []string{"get", "create"}},
					{Name: "nodes", Kind: "Node", Verbs: []string{"get", "list", "watch"}},
				}})
		default:
			select { // a host that does not answer
			case <-hang:
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	defer close(hang)
	hub, err := New(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, Options{
		Scheme: clientgoscheme.Scheme, RequestTimeout: 300 * time.Millisecond, HostQPS: 100, HostBurst: 100,
		Fence: func(string) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := hub.ClientFor("tenant")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go hub.requests.Run(ctx)
	start := time.Now()
	err = c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}})
	if took := time.Since(start); err == nil || took > 3*time.Second {
		t.Fatalf("a request the host does not answer: %v after %s; want it to fail within the request timeout", err, took)
	}
}
