package controlplane

import (
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/controlplane"
)

// A version is one the manager runs, one minor version on from the one
// that runs, or the same.
func TestCheckVersion(t *testing.T) {
	r := &Reconciler{opts: Options{Version: "v1.37.2", Versions: []string{"v1.36.4", "v1.37.2", "v1.38.0", "v1.39.1"}}}
	for _, tc := range []struct {
		want, running, reason string
	}{
		{"v1.37.2", "", ""},
		{"v1.37.2", "v1.37.2", ""},
		{"v1.38.0", "v1.37.2", ""},
		{"v1.39.1", "v1.37.2", tenantryv1alpha1.ReasonVersionSkew},
		{"v1.36.4", "v1.37.2", tenantryv1alpha1.ReasonVersionSkew},
		{"v1.40.0", "v1.37.2", tenantryv1alpha1.ReasonUnknownVersion},
		{"v1.35.0", "", tenantryv1alpha1.ReasonUnknownVersion},
	} {
		out, ok := r.checkVersion(tc.want, tc.running)
		if ok != (tc.reason == "") || out.reason != tc.reason {
			t.Errorf("%s from %q: ok %v, reason %q, want %q", tc.want, tc.running, ok, out.reason, tc.reason)
		}
		if !ok && (!out.warn || !strings.Contains(out.message, tc.want)) {
			t.Errorf("%s from %q: message %q, warn %v: want a Warning naming the version", tc.want, tc.running, out.message, out.warn)
		}
	}
}

func TestManagerPeers(t *testing.T) {
	r := &Reconciler{opts: Options{ManagerNamespace: "tenantry-system", ManagerCIDRs: []string{"10.0.0.0/24"}}}
	peers := r.managerPeers()
	if len(peers) != 2 || peers[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "tenantry-system" || peers[1].IPBlock.CIDR != "10.0.0.0/24" {
		t.Errorf("peers %+v", peers)
	}
	if peers := (&Reconciler{}).managerPeers(); len(peers) != 0 {
		t.Errorf("no manager namespace nor CIDRs: peers %+v", peers)
	}
}

// --control-plane-resources sets the components it names over the
// built-in defaults, and refuses a file it cannot read whole.
func TestResourcesFlag(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var o Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--control-plane-resources", write("good.yaml", "apiServer:\n  requests: {cpu: 250m, memory: 512Mi}\n  limits: {memory: 2Gi}\n")}); err != nil {
		t.Fatal(err)
	}
	def := controlplane.DefaultResources()
	if got := o.Resources.APIServer.Requests[corev1.ResourceMemory]; got.String() != "512Mi" {
		t.Errorf("the API server's memory request %s, want 512Mi", got.String())
	}
	if !equality.Semantic.DeepEqual(o.Resources.Etcd, def.Etcd) || !equality.Semantic.DeepEqual(o.Resources.ControllerManager, def.ControllerManager) {
		t.Errorf("components the file leaves out: %+v, want the defaults", o.Resources)
	}
	for name, data := range map[string]string{"typo.yaml": "apiServr: {}\n", "bad.yaml": "etcd: {requests: {cpu: lots}}\n"} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.BindFlags(fs)
		if err := fs.Parse([]string{"--control-plane-resources", write(name, data)}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming the file", name, err)
		}
	}
}

// The readiness probe is Tenantry's own request: one that reaches a
// control plane just put to sleep (the manager's waker) wakes nothing.
func TestProbeReadyIsTenantrys(t *testing.T) {
	agents := make(chan string, 1)
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents <- r.UserAgent()
		_, _ = io.WriteString(w, "ok")
	}))
	defer server.Close()
	kubeconfig, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"t": {Server: server.URL, InsecureSkipTLSVerify: true}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"t": {}},
		Contexts:       map[string]*clientcmdapi.Context{"t": {Cluster: "t", AuthInfo: "t"}},
		CurrentContext: "t",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := probeReady(t.Context(), "alpha", kubeconfig); err != nil {
		t.Fatal(err)
	}
	if agent := <-agents; agent != clusterregistry.UserAgent("alpha") {
		t.Errorf("the probe's user agent %q, want Tenantry's for alpha, %q", agent, clusterregistry.UserAgent("alpha"))
	}
}
