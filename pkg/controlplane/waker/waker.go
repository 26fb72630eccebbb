// Package waker answers for the API servers of sleeping control planes,
// so that the first request to one wakes it and is answered.
//
// Asleep, a control plane runs no Pod, and its API server's Service
// selects none. Hold gives that Service an EndpointSlice of its own (one
// that the host's EndpointSlice controller leaves alone), to a port of
// this replica: a client of the tenant's kubeconfig, which dials the
// Service's cluster IP, reaches the Waker there. The Waker
//
//   - completes the TLS handshake as the API server would, with its serving
//     certificate (the client's trust holds, and no client gives up on a
//     handshake while the control plane starts), and asks for a client
//     certificate of the tenant's CA;
//   - asks the VirtualCluster to wake (controlplane.AskToWake) for a
//     request that carries the tenant's credentials: a client certificate
//     of its CA, or a token of one of its service accounts (signed with its
//     key, in its time; whether the service account still exists only the
//     API server can say, once it runs). Any other request is answered
//     401 at once and wakes nothing;
//   - holds each request until the control plane's Pod is ready, within the
//     request's own context and at most Options.HoldTimeout (then 503, with
//     Retry-After);
//   - and hands it to the API server as an aggregating proxy does: a
//     certificate's user in X-Remote-User and X-Remote-Group under the
//     control plane's front-proxy client certificate, a bearer token as it
//     came. Headers of that kind that the client sent are dropped.
//
// Release takes the EndpointSlice away once the control plane answers
// again, and closes the port a little later (ReleaseGrace), once no proxy
// can still send a new connection to it.
package waker

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/controlplane"
)

// EndpointSliceName is the EndpointSlice, beside the API server's
// Service, that sends its clients to the Waker while the control plane
// sleeps.
const EndpointSliceName = controlplane.ServiceName + "-waker"

// ManagedBy is the EndpointSlice's endpointslice.kubernetes.io/managed-by:
// no controller of the host's takes it for its own.
const ManagedBy = "waker.tenantry.dev"

// Defaults of Options.
const (
	DefaultHoldTimeout = 3 * time.Minute
	// ReleaseGrace is how long a released port still answers: a node's
	// proxy may send it new connections until it has seen the
	// EndpointSlice go.
	ReleaseGrace = 30 * time.Second
	// readyPoll is how often the control plane's Pod is read while
	// requests wait for it.
	readyPoll = 250 * time.Millisecond
)

// Options configure a Waker.
type Options struct {
	// Address is the IP of this replica that the host's nodes reach (its
	// Pod IP): the Waker listens there, and the EndpointSlices name it.
	// Required.
	Address string
	// HoldTimeout bounds how long a request is held while its control
	// plane wakes. Default DefaultHoldTimeout.
	HoldTimeout time.Duration
	// Host is the host cluster's client: it reads the control plane's
	// Service, certificates and Pod, writes the EndpointSlice, and asks
	// VirtualClusters to wake. Reads of Services, Secrets and Pods go to
	// APIReader.
	Host client.Client
	// APIReader reads the host uncached.
	APIReader client.Reader
	// Logger logs with the key cluster.
	Logger logr.Logger
}

// Waker answers for sleeping control planes' API servers. It is a
// manager.Runnable: Start runs until its context ends, then closes every
// port and connection.
type Waker struct {
	opts Options

	mu      sync.Mutex
	tenants map[string]*tenant
	// draining are released ports whose requests go on.
	draining map[*tenant]bool
	// released are the clusters whose EndpointSlice this Waker deleted
	// (or found gone) since it last held them: Release asks the host
	// nothing more of them.
	released map[string]bool
	// ctx ends when the Waker stops.
	ctx    context.Context
	cancel context.CancelFunc
	// woken is told of each wake a request asked for.
	woken func(cluster, user, request string)
	// apiServerPort is where the API server listens in its Pod.
	apiServerPort int
}

// New returns a Waker; it listens once started, and for a control plane
// once told to Hold it.
func New(opts Options) (*Waker, error) {
	if net.ParseIP(opts.Address) == nil {
		return nil, fmt.Errorf("waker: address %q is not an IP: an EndpointSlice names an IP", opts.Address)
	}
	if opts.HoldTimeout <= 0 {
		opts.HoldTimeout = DefaultHoldTimeout
	}
	if opts.Host == nil || opts.APIReader == nil {
		return nil, errors.New("waker: no host client")
	}
	w := &Waker{opts: opts, tenants: map[string]*tenant{}, draining: map[*tenant]bool{}, released: map[string]bool{}, apiServerPort: controlplane.APIServerPort}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w, nil
}

// OnWake has f told each time a request asks a VirtualCluster to wake
// (for an Event): who asked, and what. Set it before Start.
func (w *Waker) OnWake(f func(cluster, user, request string)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.woken = f
}

// NeedLeaderElection is false: a Waker answers only for the control
// planes its replica holds, as its reconciler says.
func (w *Waker) NeedLeaderElection() bool { return false }

// Start runs the Waker until ctx ends, then closes every port and every
// connection it holds. It may be told to Hold before it starts.
func (w *Waker) Start(ctx context.Context) error {
	<-ctx.Done()
	w.cancel()
	w.mu.Lock()
	tenants := slices.Collect(maps.Values(w.tenants))
	tenants = append(tenants, slices.Collect(maps.Keys(w.draining))...)
	w.tenants, w.draining = map[string]*tenant{}, map[*tenant]bool{}
	w.mu.Unlock()
	for _, t := range tenants {
		t.close()
	}
	return nil
}

// Hold answers, from now on, for the API server of VirtualCluster
// cluster's control plane: it reads its certificates (again, when it
// already answers for it, so that renewed ones serve), listens on a port
// of its own for it, and applies the EndpointSlice that sends the
// Service's clients there. A release under way is called off.
func (w *Waker) Hold(ctx context.Context, cluster string) error {
	id, owner, err := w.identity(ctx, cluster)
	if err != nil {
		return err
	}
	t, err := w.hold(cluster, id)
	if err != nil {
		return err
	}
	if err := w.applyEndpointSlice(ctx, cluster, owner, t.port); err != nil {
		return fmt.Errorf("waker: %w", err)
	}
	return nil
}

// hold has cluster's port, a new one unless one is open, take id.
func (w *Waker) hold(cluster string, id *identity) (*tenant, error) {
	for {
		w.mu.Lock()
		if w.ctx.Err() != nil {
			w.mu.Unlock()
			return nil, errors.New("waker: stopped")
		}
		t := w.tenants[cluster]
		if t == nil {
			var err error
			if t, err = w.listen(cluster, id); err != nil {
				w.mu.Unlock()
				return nil, err
			}
			w.tenants[cluster] = t
		}
		delete(w.released, cluster)
		w.mu.Unlock()
		if t.hold(id) {
			return t, nil
		}
		// Released a moment ago, and closing: a port anew.
		w.mu.Lock()
		if w.tenants[cluster] == t {
			delete(w.tenants, cluster)
		}
		w.mu.Unlock()
	}
}

// Release stops answering for cluster's API server: it deletes the
// EndpointSlice at once (one that another replica left, too), and closes
// the port after ReleaseGrace, unless Hold comes first. Requests already
// held or proxied go on. Once the EndpointSlice is known gone, Release
// asks the host nothing until the next Hold: it is cheap to call on every
// reconcile of a control plane that is awake.
func (w *Waker) Release(ctx context.Context, cluster string) error {
	w.mu.Lock()
	t, released := w.tenants[cluster], w.released[cluster]
	w.mu.Unlock()
	if released {
		return nil
	}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: controlplane.Namespace(cluster), Name: EndpointSliceName}}
	if err := w.opts.Host.Delete(ctx, slice); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("waker: deleting EndpointSlice %s/%s: %w", slice.Namespace, slice.Name, err)
	}
	w.mu.Lock()
	if w.tenants[cluster] == t {
		w.released[cluster] = true
	}
	w.mu.Unlock()
	if t != nil {
		t.release(ReleaseGrace, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.tenants[cluster] == t {
				delete(w.tenants, cluster)
			}
			w.draining[t] = true
		}, func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			delete(w.draining, t)
		})
	}
	return nil
}

// Holds says whether the Waker holds cluster: told to Hold it, and not
// to Release it since.
func (w *Waker) Holds(cluster string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tenants[cluster] != nil && !w.released[cluster]
}

// Forget releases cluster's port at once, and forgets what it knew of
// its EndpointSlice: cluster is gone, or another replica holds it now,
// whose Hold writes the EndpointSlice anew.
func (w *Waker) Forget(cluster string) {
	w.mu.Lock()
	t := w.tenants[cluster]
	delete(w.tenants, cluster)
	delete(w.released, cluster)
	w.mu.Unlock()
	if t != nil {
		t.close()
	}
}

// identity reads what the Waker needs to stand in for cluster's API
// server, and its Service (the EndpointSlice's owner).
func (w *Waker) identity(ctx context.Context, cluster string) (*identity, *corev1.Service, error) {
	ns := controlplane.Namespace(cluster)
	var svc corev1.Service
	if err := w.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: controlplane.ServiceName}, &svc); err != nil {
		return nil, nil, fmt.Errorf("waker: reading the API server's Service: %w", err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil, nil, fmt.Errorf("waker: Service %s/%s has no cluster IP", ns, svc.Name)
	}
	var secret corev1.Secret
	if err := w.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: controlplane.PKISecretName}, &secret); err != nil {
		return nil, nil, fmt.Errorf("waker: reading the control plane's certificates: %w", err)
	}
	id, err := identityOf(secret.Data, svc.Spec.ClusterIP)
	if err != nil {
		return nil, nil, fmt.Errorf("waker: the certificates of Secret %s/%s: %w", ns, secret.Name, err)
	}
	return id, &svc, nil
}

// identityOf is what the PKI Secret's data say of the API server of the
// Service at serviceIP.
func identityOf(data map[string][]byte, serviceIP string) (*identity, error) {
	serving, err := tls.X509KeyPair(data[controlplane.KeyServingCert], data[controlplane.KeyServingKey])
	if err != nil {
		return nil, fmt.Errorf("the serving certificate: %w", err)
	}
	frontProxy, err := tls.X509KeyPair(data[controlplane.KeyFrontProxyClientCert], data[controlplane.KeyFrontProxyClientKey])
	if err != nil {
		return nil, fmt.Errorf("the front-proxy client certificate: %w", err)
	}
	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(data[controlplane.KeyCACert]) {
		return nil, fmt.Errorf("no CA certificate in %s", controlplane.KeyCACert)
	}
	keys, err := keyutil.ParsePublicKeysPEM(data[controlplane.KeyServiceAccountPublic])
	if err != nil {
		return nil, fmt.Errorf("the service-account key: %w", err)
	}
	serviceAccounts, ok := keys[0].(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("the service-account key is a %T, not ECDSA", keys[0])
	}
	return &identity{serving: serving, frontProxy: frontProxy, ca: ca, caPEM: data[controlplane.KeyCACert], serverName: serviceIP, serviceAccounts: serviceAccounts}, nil
}

// applyEndpointSlice sends the clients of cluster's API server Service
// (owner) to port of this replica. Owned by the Service, it goes with it.
func (w *Waker) applyEndpointSlice(ctx context.Context, cluster string, owner *corev1.Service, port int32) error {
	labels := controlplane.Labels(cluster)
	labels[discoveryv1.LabelServiceName] = owner.Name
	labels[discoveryv1.LabelManagedBy] = ManagedBy
	slice := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: discoveryv1.SchemeGroupVersion.String(), Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: owner.Namespace, Name: EndpointSliceName, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: owner.Name, UID: owner.UID}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{w.opts.Address},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(owner.Spec.Ports[0].Name), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}},
	}
	if net.ParseIP(w.opts.Address).To4() == nil {
		slice.AddressType = discoveryv1.AddressTypeIPv6
	}
	//nolint:staticcheck // a typed object, applied whole: every field set is the Waker's.
	err := w.opts.Host.Patch(ctx, slice, client.Apply, client.FieldOwner("tenantry-waker"), client.ForceOwnership)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("the control plane's namespace %s is gone: %w", owner.Namespace, err)
	}
	if err != nil {
		return fmt.Errorf("applying EndpointSlice %s/%s: %w", owner.Namespace, EndpointSliceName, err)
	}
	return nil
}

// listen opens cluster's port, for id. Called with w.mu held.
func (w *Waker) listen(cluster string, id *identity) (*tenant, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(w.opts.Address, "0"))
	if err != nil {
		return nil, fmt.Errorf("waker: listening on %s: %w", w.opts.Address, err)
	}
	t := newTenant(w, cluster, int32(ln.Addr().(*net.TCPAddr).Port), id)
	t.serve(w.ctx, ln)
	return t, nil
}

// errorLog is the http.Server's log of what it cannot tell a client (a
// failed handshake), at a verbosity where it does not flood.
func errorLog(log logr.Logger) *stdlog.Logger {
	return slog.NewLogLogger(logr.ToSlogHandler(log.V(2)), slog.LevelInfo)
}
