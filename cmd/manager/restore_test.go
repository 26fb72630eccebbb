package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
