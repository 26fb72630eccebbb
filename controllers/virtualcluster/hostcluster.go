package virtualcluster

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// reachesHost says whether config reaches the management cluster itself:
// both answer with the same kube-system namespace, the UID that names a
// cluster. It fails closed: a tenant that does not answer is an error
// wrapping clusterregistry.ErrUnreachable, and one that answers with an
// error (throttled, failing, refusing to say: Tenantry needs far more
// rights in a tenant than reading kube-system) is an error too, so that
// nothing is spawned on a kubeconfig not known to be a tenant's. Only a
// cluster without kube-system is not the host for sure.
func (r *Reconciler) reachesHost(ctx context.Context, config *rest.Config) (bool, error) {
	hostID, err := r.hostID(ctx)
	if err != nil {
		return false, err
	}
	cfg := rest.CopyConfig(config)
	cfg.Timeout = clusterIDTimeout
	tenant, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("tenant client: %w", err)
	}
	ns, err := tenant.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	var status apierrors.APIStatus
	switch {
	case apierrors.IsNotFound(err):
		return false, nil // the host has one
	case err != nil && !errors.As(err, &status):
		return false, fmt.Errorf("%w: reading its kube-system namespace, to tell it from the host: %w", clusterregistry.ErrUnreachable, err)
	case err != nil:
		return false, fmt.Errorf("reading the tenant's kube-system namespace, to tell the tenant from the host: %w", err)
	}
	return ns.UID == hostID, nil
}

// hostID is the UID of the host's kube-system namespace, read once.
func (r *Reconciler) hostID(ctx context.Context) (types.UID, error) {
	r.hostUIDMu.Lock()
	defer r.hostUIDMu.Unlock()
	if r.hostUID != "" {
		return r.hostUID, nil
	}
	var ns corev1.Namespace
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, &ns); err != nil {
		return "", fmt.Errorf("reading the host's kube-system namespace: %w", err)
	}
	r.hostUID = ns.UID
	return r.hostUID, nil
}
