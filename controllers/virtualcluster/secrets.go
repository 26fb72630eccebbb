package virtualcluster

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/clusterregistry"
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
	// source digests what of the kubeconfig decides a re-spawn: its
	// identity where the certificate can be renewed in place
	// (kubeconfigIdentity), else its data. Computed once per version:
	// re-encoding the kubeconfig on every reconcile was a tenth of the
	// manager's CPU in a start of 1,000 clusters.
	source [sha256.Size]byte
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
// once per version of the Secret, and the digest of what of it decides a
// re-spawn; the config returned is the caller's own.
func (s *kubeconfigSecrets) config(secret *corev1.Secret, key string) (*rest.Config, [sha256.Size]byte, error) {
	pk := parsedKey{secret: client.ObjectKeyFromObject(secret), key: key, resourceVersion: secret.ResourceVersion}
	s.mu.Lock()
	p, ok := s.parsed[pk]
	s.mu.Unlock()
	if !ok {
		data := secret.Data[key]
		p.config, p.err = RESTConfigFromKubeconfig(data)
		if p.err == nil {
			if identity := kubeconfigIdentity(data, p.config); identity != nil {
				// A renewed client certificate of the same identity is
				// swapped in place (clientCertificates), not re-spawned.
				data = identity
			}
			p.source = sha256.Sum256(data)
		}
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
		return nil, [sha256.Size]byte{}, p.err
	}
	return rest.CopyConfig(p.config), p.source, nil
}

// kubeconfig is what loadKubeconfig found: a config and its digest, or
// why not.
type kubeconfig struct {
	config *rest.Config
	digest [sha256.Size]byte
	bad    *readiness
}

// readKubeconfig is loadKubeconfig's outcome as one value.
func (r *Reconciler) readKubeconfig(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) kubeconfig {
	config, digest, bad := r.loadKubeconfig(ctx, vc)
	return kubeconfig{config: config, digest: digest, bad: bad}
}

// loadKubeconfig reads and checks the kubeconfig that vc points at. A
// problem comes back as the readiness to report.
func (r *Reconciler) loadKubeconfig(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster) (*rest.Config, [sha256.Size]byte, *readiness) {
	ref := vc.Spec.KubeconfigSecretRef
	key := ref.KubeconfigKey()
	secret, err := r.secrets.get(ctx, r.Client, r.APIReader, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name})
	if err != nil {
		if apierrors.IsNotFound(err) {
			msg := fmt.Sprintf("Secret %s/%s does not exist.", ref.Namespace, ref.Name)
			out := notReady(tenantryv1alpha1.ReasonSecretNotFound, msg, errors.New(msg))
			return nil, [sha256.Size]byte{}, &out
		}
		out := notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Reading Secret %s/%s: %v", ref.Namespace, ref.Name, err),
			fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err))
		// Any failure but NotFound says nothing about the kubeconfig: a
		// host that throttles, times out or restarts, or a lapse in the
		// manager's own rights (Forbidden, Unauthorized) must not stop
		// every running tenant.
		out.transient = true
		return nil, [sha256.Size]byte{}, &out
	}
	if len(secret.Data[key]) == 0 {
		msg := fmt.Sprintf("Secret %s/%s has no data under key %q.", ref.Namespace, ref.Name, key)
		out := notReady(tenantryv1alpha1.ReasonSecretKeyNotFound, msg, errors.New(msg))
		return nil, [sha256.Size]byte{}, &out
	}
	config, source, err := r.secrets.config(secret, key)
	if err != nil {
		msg := fmt.Sprintf("Secret %s/%s key %q: %v", ref.Namespace, ref.Name, key, err)
		out := notReady(tenantryv1alpha1.ReasonInvalidKubeconfig, msg, errors.New(msg))
		return nil, [sha256.Size]byte{}, &out
	}
	r.limit(config, vc.Name)
	spec, err := respawnInputs(vc.Spec)
	if err != nil {
		out := notReady(tenantryv1alpha1.ReasonFailed, fmt.Sprintf("Reading spec: %v", err), fmt.Errorf("encoding the spec of %s: %w", vc.Name, err))
		return nil, [sha256.Size]byte{}, &out
	}
	h := sha256.New()
	h.Write(source[:])
	h.Write(spec)
	var digest [sha256.Size]byte
	h.Sum(digest[:0])
	return config, digest, nil
}

// limit sets the client-side limit of config, a tenant's: one token
// bucket for every client built from it (without one, each resource
// type's REST client would get a bucket of its own); and Tenantry's user
// agent (clusterregistry.UserAgent), which tells its requests from
// people's.
func (r *Reconciler) limit(config *rest.Config, cluster string) {
	if config.UserAgent == "" {
		config.UserAgent = clusterregistry.UserAgent(cluster)
	}
	if config.QPS == 0 {
		config.QPS = float32(cmp.Or(r.TenantQPS, DefaultTenantQPS))
	}
	if config.Burst == 0 {
		config.Burst = cmp.Or(r.TenantBurst, DefaultTenantBurst)
	}
	if config.RateLimiter == nil {
		config.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(config.QPS, config.Burst)
	}
}
