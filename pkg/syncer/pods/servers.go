package pods

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/kubeletapi"
	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/tenantdns"
)

// The ConfigMap in which an API server publishes the CA it trusts for
// client certificates (the same that aggregated API servers read).
const (
	authenticationConfigMapNamespace = "kube-system"
	authenticationConfigMap          = "extension-apiserver-authentication"
	clientCAKey                      = "client-ca-file"
)

// clientCARefresh is how often a tenant's client CA is read again, so that
// a rotated CA is trusted within it.
const clientCARefresh = time.Minute

// kubeletExtension joins every tenant that syncs Pods to the kubelet API
// server.
type kubeletExtension struct {
	server *kubeletapi.Server
	// inClusterServer is Options.InClusterServer.
	inClusterServer string
}

// Setup joins the tenant to the kubelet API while its manager runs.
func (e *kubeletExtension) Setup(scope *syncer.TenantScope) error {
	mgr := scope.Manager()
	server, err := newTenantServer(mgr.GetConfig(), e.inClusterServer)
	if err != nil {
		return err
	}
	if err := mgr.Add(&kubeletTenant{
		server: e.server, scope: scope, tenantRead: mgr.GetAPIReader(), hostCA: server.ca,
	}); err != nil {
		return fmt.Errorf("joining the kubelet API: %w", err)
	}
	return nil
}

// kubeletTenant joins one tenant to the kubelet API server while the
// tenant's manager runs: it trusts the tenant API server's client CA, and
// lets requests reach only the host copies of the tenant's own Pods.
type kubeletTenant struct {
	server     *kubeletapi.Server
	scope      *syncer.TenantScope
	tenantRead client.Reader
	// hostCA is the CA of the tenant's kubeconfig, which the host holds.
	hostCA []byte
}

// Start registers the tenant, reads its client CA again every
// clientCARefresh, and unregisters it as the manager stops.
func (k *kubeletTenant) Start(ctx context.Context) error {
	unregister := func() {}
	defer func() { unregister() }()
	ticker := time.NewTicker(clientCARefresh)
	defer ticker.Stop()
	var last string
	for {
		ca, err := k.clientCA(ctx)
		switch {
		case err != nil:
			// Requests are refused until it can be read: logged, and the
			// next tick tries again.
			k.scope.Logger().Error(err, "cannot serve the kubelet API of the tenant's virtual nodes")
		case ca != last:
			u, err := k.server.Register(kubeletapi.Tenant{
				Name: k.scope.Cluster(), ClientCAs: []byte(ca), HostCAs: k.hostCA, Client: k.scope.Manager().GetClient(), HostPod: k.hostPod,
			})
			if err != nil {
				k.scope.Logger().Error(err, "cannot serve the kubelet API of the tenant's virtual nodes")
			} else {
				last, unregister = ca, u
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// clientCA reads the CA bundle the tenant API server trusts for client
// certificates.
func (k *kubeletTenant) clientCA(ctx context.Context) (string, error) {
	var cm corev1.ConfigMap
	key := client.ObjectKey{Namespace: authenticationConfigMapNamespace, Name: authenticationConfigMap}
	if err := k.tenantRead.Get(ctx, key, &cm); err != nil {
		return "", fmt.Errorf("reading the tenant API server's client CA (ConfigMap %s): %w", key, err)
	}
	ca := cm.Data[clientCAKey]
	if ca == "" {
		return "", fmt.Errorf("ConfigMap %s has no %s: the tenant API server authenticates no client certificate", key, clientCAKey)
	}
	return ca, nil
}

// hostPod names the host Pod that Tenantry made of the tenant's pod, if
// there is one and it runs the tenant's container (see
// kubeletapi.Tenant.HostPod).
func (k *kubeletTenant) hostPod(ctx context.Context, pod *corev1.Pod, container string) (types.NamespacedName, bool, error) {
	key := k.scope.HostKey(client.ObjectKeyFromObject(pod))
	var host corev1.Pod
	if err := k.scope.HostReader().Get(ctx, key, &host); err != nil {
		if apierrors.IsNotFound(err) {
			return key, false, nil
		}
		return key, false, fmt.Errorf("reading host Pod %s: %w", key, err)
	}
	if !k.scope.Owns(&host) || host.Annotations[syncer.AnnotationTenantUID] != string(pod.UID) {
		return key, false, nil
	}
	ephemeral := slices.ContainsFunc(pod.Spec.EphemeralContainers, func(e corev1.EphemeralContainer) bool { return e.Name == container })
	return key, !ephemeral || runsEphemeral(&host, pod, container), nil
}

// NeedLeaderElection is false: a tenant's manager runs no leader election.
func (k *kubeletTenant) NeedLeaderElection() bool { return false }

// dnsExtension joins every tenant that syncs Pods to the tenant DNS
// server.
type dnsExtension struct {
	server *tenantdns.Server
	// inClusterServer is Options.InClusterServer.
	inClusterServer string
}

// Setup joins the tenant to the DNS server while its manager runs.
func (e *dnsExtension) Setup(scope *syncer.TenantScope) error {
	mgr := scope.Manager()
	server, err := newTenantServer(mgr.GetConfig(), e.inClusterServer)
	if err != nil {
		return err
	}
	if err := mgr.Add(&dnsTenant{server: e.server, tenant: tenantdns.Tenant{
		Name: scope.Cluster(), Reader: mgr.GetClient(), APIServer: server.host,
	}, cache: mgr.GetCache()}); err != nil {
		return fmt.Errorf("joining the tenant DNS: %w", err)
	}
	return nil
}

// dnsTenant joins one tenant to the tenant DNS server while the tenant's
// manager runs, once the tenant's cache holds its Services and
// EndpointSlices, which the server answers from.
type dnsTenant struct {
	server *tenantdns.Server
	tenant tenantdns.Tenant
	cache  cache.Cache
}

func (d *dnsTenant) Start(ctx context.Context) error {
	for _, obj := range []client.Object{&corev1.Service{}, &discoveryv1.EndpointSlice{}} {
		if _, err := d.cache.GetInformer(ctx, obj); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("tenant DNS: watching the tenant's %T: %w", obj, err)
		}
	}
	unregister := d.server.Register(d.tenant)
	<-ctx.Done()
	unregister()
	return nil
}

// NeedLeaderElection is false: a tenant's manager runs no leader election.
func (d *dnsTenant) NeedLeaderElection() bool { return false }
