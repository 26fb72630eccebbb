package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
	"github.com/tenantry/tenantry/pkg/snapshot"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// restoreSnapshot restores data as `tenantry restore` does, waits until
// the tenant is Ready, and returns it with a file of its kubeconfig.
func restoreSnapshot(t *testing.T, hostConfig *rest.Config, host client.Client, data []byte, opts snapshot.RestoreOptions) (*tenantryv1alpha1.VirtualCluster, string) {
	t.Helper()
	opts.Progress = func(step string) { t.Logf("restoring %s: %s", opts.Name, step) }
	t.Cleanup(func() {
		if t.Failed() {
			describeNamespace(t, host, controlplane.Namespace(opts.Name))
		}
	})
	restored, err := snapshot.Restore(t.Context(), hostConfig, host, openBytes(data), opts)
	if err != nil {
		t.Fatalf("restoring %s: %v", opts.Name, err)
	}
	t.Logf("restored %s from a snapshot of %s (%s storage): %d keys loaded in %s", opts.Name, restored.Manifest.Cluster, restored.Manifest.Storage,
		restored.Keys, restored.Loading)
	if restored.Keys != restored.Manifest.Keys {
		t.Errorf("%d keys loaded, the snapshot holds %d", restored.Keys, restored.Manifest.Keys)
	}
	vc := restored.VirtualCluster
	awaitControlPlaneReady(t, host, vc, opts.Name+"'s restored control plane ready")
	if _, ok := vc.Annotations[tenantryv1alpha1.AnnotationRestoring]; ok {
		t.Errorf("%s is still marked %s once Ready", opts.Name, tenantryv1alpha1.AnnotationRestoring)
	}
	var secret corev1.Secret
	ref := vc.Spec.KubeconfigSecretRef
	if err := host.Get(t.Context(), client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &secret); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), opts.Name+".kubeconfig")
	if err := os.WriteFile(kubeconfig, secret.Data[ref.KubeconfigKey()], 0o600); err != nil {
		t.Fatal(err)
	}
	return vc, kubeconfig
}

func openBytes(data []byte) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
}

// expectRestoreRefused restores data with opts, expects err (by
// errors.Is) and that nothing of opts.Name is made.
func expectRestoreRefused(t *testing.T, hostConfig *rest.Config, host client.Client, data []byte, opts snapshot.RestoreOptions, want error) {
	t.Helper()
	existed := host.Get(t.Context(), client.ObjectKey{Name: opts.Name}, &tenantryv1alpha1.VirtualCluster{}) == nil
	_, err := snapshot.Restore(t.Context(), hostConfig, host, openBytes(data), opts)
	if !errors.Is(err, want) {
		t.Fatalf("restoring %s: %v, want %v", opts.Name, err, want)
	}
	t.Logf("restoring %s refused: %v", opts.Name, err)
	if existed {
		return
	}
	if err := host.Get(t.Context(), client.ObjectKey{Name: opts.Name}, &tenantryv1alpha1.VirtualCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused restore made virtualcluster/%s: %v", opts.Name, err)
	}
	if err := host.Get(t.Context(), client.ObjectKey{Name: controlplane.Namespace(opts.Name)}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused restore made namespace %s: %v", controlplane.Namespace(opts.Name), err)
	}
}

// expectCorruptRefused: a snapshot cut short or changed is refused,
// saying so, and makes nothing.
func expectCorruptRefused(t *testing.T, hostConfig *rest.Config, host client.Client, data []byte, name string) {
	t.Helper()
	changed := bytes.Clone(data)
	changed[len(changed)/2] ^= 0xff
	for _, bad := range [][]byte{data[:len(data)*3/4], changed} {
		expectRestoreRefused(t, hostConfig, host, bad, snapshot.RestoreOptions{Name: name, Timeout: time.Minute}, snapshot.ErrCorrupt)
	}
}

// withServer is a copy of kubeconfig's file that reaches server: a
// forwarded port, or a restored tenant's new address.
func withServer(t *testing.T, kubeconfig, server string) string {
	t.Helper()
	config, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range config.Clusters {
		c.Server = server
	}
	out := filepath.Join(t.TempDir(), "moved.kubeconfig")
	if err := clientcmd.WriteToFile(*config, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// widgetCRD is a custom resource definition of the tenant's own.
const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
`

const widget = `apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: default}
spec: {size: 7}
`

// kubectlApply applies manifest through kubeconfig.
func kubectlApply(t *testing.T, kubectl tenantrytest.Kubectl, kubeconfig, manifest string) {
	t.Helper()
	eventually(t, time.Minute, "kubectl apply", func(ctx context.Context) (bool, error) {
		out, err := kubectl.Run(ctx, kubeconfig, manifest, "apply", "-f", "-")
		return err == nil, fmt.Errorf("%q: %v", out, err)
	})
}

// expectTenantHolds reads each of want (kubectl get's arguments, and the
// output wanted) through kubeconfig.
func expectTenantHolds(t *testing.T, kubectl tenantrytest.Kubectl, kubeconfig string, want map[string]string) {
	t.Helper()
	for args, value := range want {
		eventually(t, time.Minute, "kubectl get "+args, func(ctx context.Context) (bool, error) {
			out, err := kubectl.Run(ctx, kubeconfig, "", append([]string{"get"}, strings.Fields(args)...)...)
			return err == nil && out == value, fmt.Errorf("%q, want %q: %v", out, value, err)
		})
	}
}

// throughRegistry pushes data to an OCI registry of the test's own, as
// `tenantry snapshot --out oci://...` does, and returns what a pull of it
// gives, as `tenantry restore --from oci://...` reads.
func throughRegistry(t *testing.T, data []byte) []byte {
	t.Helper()
	file := filepath.Join(t.TempDir(), "snapshot.tar.gz")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ref := snapshot.OCIScheme + tenantrytest.NewRegistry(t) + "/snapshots/tenant:latest"
	digest, err := snapshot.Push(t.Context(), file, ref)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pushed the snapshot to %s (%s)", ref, digest)
	var pulled bytes.Buffer
	if err := snapshot.Pull(t.Context(), ref, &pulled); err != nil {
		t.Fatal(err)
	}
	return pulled.Bytes()
}

// expectScheduledSnapshots: spec.snapshots every 5 s to a registry,
// keeping 2, takes them and prunes the older ones; each restores. Pushed
// to a registry that refuses, each fails, said in status and an Event,
// and the tenant runs on.
func expectScheduledSnapshots(t *testing.T, host client.Client, vc *tenantryv1alpha1.VirtualCluster) {
	t.Helper()
	ctx := t.Context()
	repository := snapshot.OCIScheme + tenantrytest.NewRegistry(t) + "/snapshots"
	setSnapshots := func(spec *tenantryv1alpha1.SnapshotsSpec) {
		t.Helper()
		patch := client.MergeFrom(vc.DeepCopy())
		vc.Spec.Snapshots = spec
		if err := host.Patch(ctx, vc, patch); err != nil {
			t.Fatal(err)
		}
	}
	setSnapshots(&tenantryv1alpha1.SnapshotsSpec{Schedule: "@every 5s", Destination: repository, Keep: 2})
	taken := map[string]bool{}
	var last *tenantryv1alpha1.SnapshotRecord
	eventually(t, 2*time.Minute, "three scheduled snapshots of "+vc.Name, func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return false, err
		}
		s := vc.Status.Snapshots
		if s == nil || s.LastSuccessful == nil {
			return false, fmt.Errorf("status.snapshots %+v", s)
		}
		last = s.LastSuccessful
		taken[last.Reference] = true
		return len(taken) >= 3, fmt.Errorf("%d taken; last failure %+v", len(taken), s.LastFailure)
	})
	t.Logf("scheduled snapshots of %s: the last %s, %d keys, %d bytes, in %s", vc.Name, last.Reference, last.Keys, last.Size, last.Took.Duration)
	var pulled bytes.Buffer
	if err := snapshot.Pull(ctx, last.Reference, &pulled); err != nil {
		t.Fatal(err)
	}
	r, err := snapshot.Open(&pulled)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Each(func(_, _ []byte) error { return nil }); err != nil || r.Manifest.Cluster != vc.Name || int64(r.Manifest.Keys) != last.Keys {
		t.Errorf("the last scheduled snapshot: cluster %s, %d keys of %d: %v", r.Manifest.Cluster, r.Manifest.Keys, last.Keys, err)
	}
	// Two kept: the older ones' manifests are gone.
	gone := 0
	for reference := range taken {
		if snapshot.Pull(ctx, reference, &bytes.Buffer{}) != nil {
			gone++
		}
	}
	if gone < len(taken)-2 {
		t.Errorf("%d of %d snapshots pruned, want all but 2", gone, len(taken))
	}

	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"errors":[{"code":"DENIED","message":"quota exceeded"}]}`, http.StatusForbidden)
	}))
	defer refusing.Close()
	setSnapshots(&tenantryv1alpha1.SnapshotsSpec{Schedule: "@every 5s", Destination: snapshot.OCIScheme + strings.TrimPrefix(refusing.URL, "http://") + "/snapshots", Keep: 2})
	eventually(t, time.Minute, "a scheduled snapshot refused by its registry", func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return false, err
		}
		f := vc.Status.Snapshots.LastFailure
		return f != nil && strings.Contains(f.Message, "DENIED: quota exceeded"), fmt.Errorf("last failure %+v", f)
	})
	expectEvent(t, host, vc.Name, "SnapshotFailed")
	awaitControlPlaneReady(t, host, vc, vc.Name+"'s control plane running on")
	setSnapshots(nil)
}
