package virtualcluster

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kubeconfigSecrets reads kubeconfig Secrets from the API server once per
// version: the manager's cache of Secrets' metadata (which the controller
// watches to notice a changed Secret) tells the version, and a Secret read
// before at that version is not read again. At a manager start every
// VirtualCluster is reconciled twice (its nodes kept alive first), and
// VirtualClusters may share a Secret: without it, the start of 1,000
// clusters sent the host 2,000 reads of a few Secrets.
//
// Only Secrets that VirtualClusters name are held, and only the contents
// the clusters' configs are built from anyway; a Secret found gone is
// dropped.
type kubeconfigSecrets struct {
	mu   sync.Mutex
	read map[types.NamespacedName]*corev1.Secret
	// parsed holds the config parsed from a Secret's key, at the version
	// read: parsing a kubeconfig was a tenth of the manager's CPU in a
	// start of many clusters.
	parsed map[parsedKey]parsedConfig
}

// parsedKey names a kubeconfig: a Secret's key, at a version.
type parsedKey struct {
	secret          types.NamespacedName
	key             string
	resourceVersion string
}

type parsedConfig struct {
	config *rest.Config
	err    error
}

// get returns the Secret key, read through direct unless metadata, the
// cached reader of Secrets' metadata, has the version read last. The
// Secret returned is shared: it must not be changed.
func (s *kubeconfigSecrets) get(ctx context.Context, metadata, direct client.Reader, key types.NamespacedName) (*corev1.Secret, error) {
	if metadata != nil {
		var m metav1.PartialObjectMetadata
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		if err := metadata.Get(ctx, key, &m); err == nil {
			s.mu.Lock()
			last := s.read[key]
			s.mu.Unlock()
			if last != nil && last.ResourceVersion == m.ResourceVersion {
				return last, nil
			}
		}
	}
	var secret corev1.Secret
	if err := direct.Get(ctx, key, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			s.mu.Lock()
			delete(s.read, key)
			for k := range s.parsed {
				if k.secret == key {
					delete(s.parsed, k)
				}
			}
			s.mu.Unlock()
		}
		return nil, err
	}
	s.mu.Lock()
	if s.read == nil {
		s.read = map[types.NamespacedName]*corev1.Secret{}
	}
	s.read[key] = &secret
	s.mu.Unlock()
	return &secret, nil
}

// config is RESTConfigFromKubeconfig of secret's data under key, parsed
// once per version of the Secret; the config returned is the caller's own.
func (s *kubeconfigSecrets) config(secret *corev1.Secret, key string) (*rest.Config, error) {
	pk := parsedKey{secret: client.ObjectKeyFromObject(secret), key: key, resourceVersion: secret.ResourceVersion}
	s.mu.Lock()
	p, ok := s.parsed[pk]
	s.mu.Unlock()
	if !ok {
		p.config, p.err = RESTConfigFromKubeconfig(secret.Data[key])
		s.mu.Lock()
		if s.parsed == nil {
			s.parsed = map[parsedKey]parsedConfig{}
		}
		for k := range s.parsed {
			if k.secret == pk.secret && k.key == key {
				delete(s.parsed, k) // an older version's
			}
		}
		s.parsed[pk] = p
		s.mu.Unlock()
	}
	if p.err != nil {
		return nil, p.err
	}
	return rest.CopyConfig(p.config), nil
}
