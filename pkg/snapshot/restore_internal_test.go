package snapshot

import (
	"encoding/json"
	"errors"
	"testing"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
)

// A restore takes the snapshot's spec, with the version and storage it is
// asked for; its kubeconfig Secret is the new name's; it is marked as
// restoring with the snapshot's version, and keeps no data until done.
func TestTheRestoredVirtualCluster(t *testing.T) {
	spec, err := json.Marshal(tenantryv1alpha1.VirtualClusterSpec{
		KubeconfigSecretRef: tenantryv1alpha1.SecretKeyReference{Namespace: "tenants", Name: "shop-kubeconfig", Key: "value"},
		ControlPlane:        &tenantryv1alpha1.ControlPlaneSpec{Version: "v1.36.3", RetainData: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{Cluster: "shop", KubernetesVersion: "v1.36.3", Spec: spec}

	vc, retain, err := restoredVirtualCluster(m, RestoreOptions{Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if ref := vc.Spec.KubeconfigSecretRef; ref.Name != "shop-kubeconfig" || ref.Namespace != "tenants" || ref.Key != "value" {
		t.Errorf("restored under its own name, the kubeconfig Secret is %+v", ref)
	}
	if !retain || vc.Spec.ControlPlane.RetainData || vc.Annotations[tenantryv1alpha1.AnnotationRestoring] != "v1.36.3" {
		t.Errorf("retain %v, retainData %v, annotations %v: want the data let go until done, and the snapshot's version marked",
			retain, vc.Spec.ControlPlane.RetainData, vc.Annotations)
	}

	store := tenantryv1alpha1.ControlPlaneStorage{Type: tenantryv1alpha1.StorageDataStore, DataStore: "shared"}
	vc, _, err = restoredVirtualCluster(m, RestoreOptions{Name: "copy", Version: "v1.37.2", Storage: &store})
	if err != nil {
		t.Fatal(err)
	}
	if cp := vc.Spec.ControlPlane; cp.Version != "v1.37.2" || cp.Storage != store || vc.Spec.KubeconfigSecretRef.Name != "copy-kubeconfig" || vc.Name != "copy" {
		t.Errorf("restored as copy at v1.37.2 on the DataStore: %+v, %+v", vc.ObjectMeta, vc.Spec)
	}

	if _, _, err := restoredVirtualCluster(m, RestoreOptions{Name: "copy", Version: "v1.38.0"}); !errors.Is(err, controlplane.ErrVersionSkew) {
		t.Errorf("two minor versions on: %v, want ErrVersionSkew", err)
	}
	m.Spec = []byte(`{"kubeconfigSecretRef":{"namespace":"a","name":"b"}}`)
	if _, _, err := restoredVirtualCluster(m, RestoreOptions{Name: "copy"}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a spec without a control plane: %v, want ErrCorrupt", err)
	}
}
