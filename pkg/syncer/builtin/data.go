package builtin

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
)

// rootCAConfigMap is the ConfigMap that every namespace gets from its own
// cluster's controller-manager: the host writes its own; the tenant's stays.
const rootCAConfigMap = "kube-root-ca.crt"

// ConfigMaps syncs data and binaryData down.
func ConfigMaps() syncer.Syncer {
	return syncer.Syncer{
		Name:             "configmaps",
		Usage:            countedAs(corev1.ResourceConfigMaps),
		Object:           func() client.Object { return &corev1.ConfigMap{} },
		CopyUserMetadata: true,
		Filter:           func(t client.Object) bool { return t.GetName() != rootCAConfigMap },
		Down: func(t, h client.Object) error {
			tenant, host := t.(*corev1.ConfigMap), h.(*corev1.ConfigMap)
			host.Data, host.BinaryData, host.Immutable = tenant.Data, tenant.BinaryData, tenant.Immutable
			return nil
		},
	}
}

// Secrets syncs data and type down. Service account token Secrets are not
// synced: in the host, a token Secret is filled with a token of the host's
// own service account, which tenant Pods must never get. Names ending in
// pods.APIAccessSecretSuffix are refused: they belong to Pods' API access.
func Secrets() syncer.Syncer {
	return syncer.Syncer{
		Name:             "secrets",
		Usage:            countedAs(corev1.ResourceSecrets),
		Object:           func() client.Object { return &corev1.Secret{} },
		CopyUserMetadata: true,
		Filter: func(t client.Object) bool {
			return t.(*corev1.Secret).Type != corev1.SecretTypeServiceAccountToken
		},
		Down: func(t, h client.Object) error {
			tenant, host := t.(*corev1.Secret), h.(*corev1.Secret)
			if strings.HasSuffix(tenant.Name, pods.APIAccessSecretSuffix) {
				return syncer.Refuse("Secret names ending in %q are reserved for Pods' API access", pods.APIAccessSecretSuffix)
			}
			host.Data, host.Immutable = tenant.Data, tenant.Immutable
			if host.ResourceVersion == "" { // type is immutable
				host.Type = tenant.Type
			}
			return nil
		},
	}
}

// defaultServiceAccount is the ServiceAccount every namespace gets from its
// own cluster; the host's is used, the tenant's stays.
const defaultServiceAccount = "default"

// ServiceAccounts syncs ServiceAccounts down, so that tenant Pods run as a
// host ServiceAccount of the same name. No host token comes with them: Pods
// get their tenant's (see pods.APIAccess).
func ServiceAccounts() syncer.Syncer {
	return syncer.Syncer{
		Name:             "serviceaccounts",
		Object:           func() client.Object { return &corev1.ServiceAccount{} },
		CopyUserMetadata: true,
		Filter:           func(t client.Object) bool { return t.GetName() != defaultServiceAccount },
		Down: func(t, h client.Object) error {
			tenant, host := t.(*corev1.ServiceAccount), h.(*corev1.ServiceAccount)
			host.ImagePullSecrets = tenant.ImagePullSecrets
			host.AutomountServiceAccountToken = tenant.AutomountServiceAccountToken
			return nil
		},
	}
}
