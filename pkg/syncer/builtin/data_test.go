package builtin

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
)

// What each data syncer's Down copies to a host copy, on create (an empty
// host object) and on update (one the host has stored), what it leaves out,
// and which tenant objects its Filter keeps from syncing.
func TestDataSyncersDown(t *testing.T) {
	stored := func(o client.Object) client.Object { o.SetResourceVersion("7"); return o }
	claimSpec := func() corev1.PersistentVolumeClaimSpec {
		return corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}
	}
	for _, tc := range []struct {
		name         string
		syncer       syncer.Syncer
		tenant, host client.Object
		want         client.Object // the host object after Down
		refused      bool
	}{
		{
			name:   "ConfigMap: data, binary data and immutability",
			syncer: ConfigMaps(),
			tenant: &corev1.ConfigMap{Data: map[string]string{"a": "1"}, BinaryData: map[string][]byte{"b": {2}}, Immutable: ptr.To(true)},
			host:   &corev1.ConfigMap{Data: map[string]string{"stale": "x"}},
			want:   &corev1.ConfigMap{Data: map[string]string{"a": "1"}, BinaryData: map[string][]byte{"b": {2}}, Immutable: ptr.To(true)},
		},
		{
			name:   "Secret created: data, type",
			syncer: Secrets(),
			tenant: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls"}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": {1}}},
			host:   &corev1.Secret{},
			want:   &corev1.Secret{Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": {1}}},
		},
		{
			name:   "Secret updated: data only, the type being immutable",
			syncer: Secrets(),
			tenant: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"k": {3}}},
			host:   stored(&corev1.Secret{Type: corev1.SecretTypeTLS}),
			want:   stored(&corev1.Secret{Type: corev1.SecretTypeTLS, Data: map[string][]byte{"k": {3}}}),
		},
		{
			name:    "Secret posing as a Pod's API access: refused",
			syncer:  Secrets(),
			tenant:  &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "web-0" + pods.APIAccessSecretSuffix}},
			host:    &corev1.Secret{},
			refused: true,
		},
		{
			name:   "ServiceAccount: pull secrets and token automount, nothing of the host's token",
			syncer: ServiceAccounts(),
			tenant: &corev1.ServiceAccount{
				ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}}, AutomountServiceAccountToken: ptr.To(false),
				Secrets: []corev1.ObjectReference{{Name: "legacy-token"}},
			},
			host: &corev1.ServiceAccount{},
			want: &corev1.ServiceAccount{ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}}, AutomountServiceAccountToken: ptr.To(false)},
		},
		{
			name:   "claim created: no volume, selector or foreign data source picked",
			syncer: PersistentVolumeClaims(pods.StoragePolicy{}),
			tenant: &corev1.PersistentVolumeClaim{Spec: func() corev1.PersistentVolumeClaimSpec {
				s := claimSpec()
				s.VolumeName, s.Selector = "someone-elses", &metav1.LabelSelector{}
				s.DataSourceRef = &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "theirs", Namespace: ptr.To("other")}
				return s
			}()},
			host: &corev1.PersistentVolumeClaim{},
			want: &corev1.PersistentVolumeClaim{Spec: claimSpec()},
		},
		{
			name:   "claim updated: only the requested size",
			syncer: PersistentVolumeClaims(pods.StoragePolicy{}),
			tenant: &corev1.PersistentVolumeClaim{Spec: func() corev1.PersistentVolumeClaimSpec {
				s := claimSpec()
				s.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
				s.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
				return s
			}()},
			host: stored(&corev1.PersistentVolumeClaim{Spec: func() corev1.PersistentVolumeClaimSpec { s := claimSpec(); s.VolumeName = "pv-1"; return s }()}),
			want: stored(&corev1.PersistentVolumeClaim{Spec: func() corev1.PersistentVolumeClaimSpec {
				s := claimSpec()
				s.VolumeName = "pv-1"
				s.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
				return s
			}()}),
		},
	} {
		err := tc.syncer.Down(tc.tenant, tc.host)
		if tc.refused {
			if err == nil || !strings.Contains(err.Error(), "reserved for Pods' API access") {
				t.Errorf("%s: %v; want a refusal saying why", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !equality.Semantic.DeepEqual(tc.host, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, tc.host, tc.want)
		}
	}
}

func TestDataSyncersFilters(t *testing.T) {
	for _, tc := range []struct {
		syncer syncer.Syncer
		object client.Object
		synced bool
	}{
		{ConfigMaps(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}}, false},
		{ConfigMaps(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, true},
		{Secrets(), &corev1.Secret{Type: corev1.SecretTypeServiceAccountToken}, false},
		{Secrets(), &corev1.Secret{Type: corev1.SecretTypeDockerConfigJson}, true},
		{ServiceAccounts(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, false},
		{ServiceAccounts(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder"}}, true},
	} {
		if got := tc.syncer.Filter(tc.object); got != tc.synced {
			t.Errorf("%s Filter(%s %+v) = %v, want %v", tc.syncer.Name, tc.object.GetName(), tc.object, got, tc.synced)
		}
	}
}
