package syncer

import (
	"context"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer/internal/quota"
	"github.com/tenantry/tenantry/pkg/syncer/netpol"
)

// labelPodSecurityEnforce is Pod Security Admission's enforce label, which
// Tenantry sets on every host namespace.
const labelPodSecurityEnforce = "pod-security.kubernetes.io/enforce"

// DefaultPodSecurityLevel is the Pod Security level enforced on host
// namespaces unless configured otherwise: tenants' Pods run on host nodes,
// so host-level privileges (host network, host paths, privileged
// containers) are refused.
const DefaultPodSecurityLevel = "baseline"

// namespaceSyncerName names the syncer of host namespaces.
const namespaceSyncerName = "namespaces"

// namespaceSyncer syncs tenant Namespaces to their host namespaces. Tenant
// labels and annotations are not copied as they are: on a host namespace
// they would speak to the host (Pod Security levels, network policy
// selectors), which a tenant must not. The tenant's labels go under keys
// of Tenantry's own (netpol.NamespaceLabels), which only the translation
// of that tenant's NetworkPolicies reads. The host namespace enforces
// podSecurityLevel.
func namespaceSyncer(podSecurityLevel string) Syncer {
	if podSecurityLevel == "" {
		podSecurityLevel = DefaultPodSecurityLevel
	}
	return Syncer{
		Name:          namespaceSyncerName,
		Object:        func() client.Object { return &corev1.Namespace{} },
		ClusterScoped: true,
		OnlyExisting:  true,
		Down: func(tenant, host client.Object) error {
			labels := host.GetLabels()
			for k := range labels {
				if strings.HasPrefix(k, netpol.NamespaceLabelPrefix) {
					delete(labels, k)
				}
			}
			maps.Copy(labels, netpol.NamespaceLabels(tenant.GetLabels()))
			labels[labelPodSecurityEnforce] = podSecurityLevel
			host.SetLabels(labels)
			return nil
		},
	}
}

// hostNamespaces creates a tenant namespace's host namespace on demand,
// before the first object that goes in it.
type hostNamespaces struct {
	syncer     Syncer
	translator translator
	tenant     client.Reader
	hostRead   client.Reader
	host       client.Client
	// policies go in each host namespace before anything else does.
	policies *namespacePolicies
	// budget, if set, is asked before a host namespace is made
	// (count/namespaces).
	budget *quota.Budget
	// created are the host namespaces this tenant created that the cache
	// may not show yet.
	created recentCreates
}

// ensure makes the host namespace of tenantNamespace, with its policy
// objects (a quota, a LimitRange, the isolation NetworkPolicy), so that
// they hold from the namespace's first object on; errPolicyPending says to
// come back once they are all there and the quota is in force, whichever
// sync made them. For a namespace that exists, it only reads the cache:
// the namespace policy controller keeps them.
func (n *hostNamespaces) ensure(ctx context.Context, tenantNamespace string) error {
	created, err := n.ensureNamespace(ctx, tenantNamespace)
	if err != nil {
		return err
	}
	hostNS := HostNamespace(n.translator.Cluster, tenantNamespace)
	if created {
		if _, err := n.policies.keep(ctx, hostNS, tenantNamespace); err != nil {
			return err
		}
	}
	ready, err := n.policies.ready(ctx, hostNS)
	if err == nil && !ready {
		return errPolicyPending
	}
	return err
}

// ensureNamespace makes the host namespace of tenantNamespace, and says
// whether it made it.
func (n *hostNamespaces) ensureNamespace(ctx context.Context, tenantNamespace string) (created bool, err error) {
	key := n.translator.hostKey(client.ObjectKey{Name: tenantNamespace}, true)
	if found, err := n.cached(ctx, key); err != nil || found {
		if found {
			n.created.seen(key.Name)
		}
		return false, err
	}
	n.created.Lock()
	defer n.created.Unlock()
	if n.created.has(key.Name) {
		return false, nil // made a moment ago by another sync of this tenant
	}
	// It may have come into the cache while this waited for the lock.
	if found, err := n.cached(ctx, key); err != nil || found {
		return false, err
	}

	var tenantNS corev1.Namespace
	if err := n.tenant.Get(ctx, client.ObjectKey{Name: tenantNamespace}, &tenantNS); err != nil {
		return false, fmt.Errorf("reading tenant namespace %s: %w", tenantNamespace, err)
	}
	if !tenantNS.DeletionTimestamp.IsZero() {
		return false, fmt.Errorf("tenant namespace %s is being deleted", tenantNamespace)
	}
	desired, err := n.syncer.hostCopy(n.translator, &tenantNS, nil)
	if err != nil {
		return false, err
	}
	if err := n.budget.AdmitNamespace(ctx, n.created.keys()); err != nil {
		return false, err
	}
	err = n.host.Create(ctx, desired)
	if apierrors.IsAlreadyExists(err) {
		var found corev1.Namespace
		if err := n.host.Get(ctx, key, &found); err != nil {
			return false, fmt.Errorf("reading host namespace %s: %w", key.Name, err)
		}
		if !n.translator.owns(&found) {
			return false, fmt.Errorf("host namespace %s exists and is not managed by Tenantry for this cluster", key.Name)
		}
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("creating host namespace %s: %w", key.Name, err)
	}
	n.created.add(key.Name)
	writes.WithLabelValues(n.translator.Cluster, n.syncer.Name, "down", "create").Inc()
	return true, nil
}

// cached says whether the cache holds host namespace key, and fails for
// one being deleted.
func (n *hostNamespaces) cached(ctx context.Context, key client.ObjectKey) (bool, error) {
	var existing corev1.Namespace
	err := n.hostRead.Get(ctx, key, &existing)
	switch {
	case err == nil && !existing.DeletionTimestamp.IsZero():
		return false, fmt.Errorf("host namespace %s is being deleted; waiting", key.Name)
	case err == nil:
		return true, nil
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("reading host namespace %s: %w", key.Name, err)
	}
	return false, nil
}
