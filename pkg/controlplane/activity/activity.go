// Package activity receives what the API servers of provisioned control
// planes report of their requests (an audit webhook:
// controlplane.Spec.Activity), and tells people's requests from the rest,
// for spec.sleep.afterInactivity.
//
// An API server reports, by its audit policy, what may be people's: not
// its own controllers' (service accounts, its controller-manager), its
// nodes', nor health checks. The Receiver drops, of what is left,
// Tenantry's own requests: those whose user agent carries
// clusterregistry.UserAgentProduct. A user who sends Tenantry's user agent
// only lets their tenant sleep sooner.
//
// Every control plane reports to the same address. It names
// controlplane.ActivityServerName of its cluster in the TLS handshake: the
// Receiver serves it the certificate that the control plane controller
// issued for that name, from the control plane's PKI Secret, and takes
// only a client certificate of that control plane's CA for
// controlplane.ActivityClientUser. No state is shared between replicas of
// the manager, nor kept across restarts: any replica takes any report.
package activity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
	"github.com/tenantry/tenantry/pkg/controlplane"
)

// DefaultBindAddress is where the Receiver listens unless told otherwise.
const DefaultBindAddress = ":9444"

// identityTTL is how long a control plane's certificates are used before
// they are read again (they renew in place), and a server name that named
// none is refused without a read.
const identityTTL = time.Minute

// Reads of PKI Secrets for handshakes, at most, per second: a client
// that names one made-up server name after another (anyone who reaches
// the port can) costs the host no more. refusedNames bounds what is
// remembered of them.
const (
	secretReads  = 10
	refusedNames = 1000
)

// maxReport bounds a report's body: a batch of at most a hundred events
// of metadata (controlplane's --audit-webhook-batch-max-size).
const maxReport = 8 << 20

var reported = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "tenantry_activity_reported_requests_total",
	Help: "Requests that provisioned control planes' API servers reported to the manager, by whose: people's (activity, for spec.sleep.afterInactivity) or Tenantry's own.",
}, []string{"by"})

func init() {
	metrics.Registry.MustRegister(reported)
	for _, by := range []string{"people", "tenantry"} {
		reported.WithLabelValues(by)
	}
}

// Options configure a Receiver.
type Options struct {
	// BindAddress is the host:port the Receiver listens on; port 0 picks
	// a free one. Default DefaultBindAddress.
	BindAddress string
	// URL is where control planes reach the Receiver, https://HOST:PORT
	// (a Service in front of the manager's replicas). Default: the bound
	// address, with Address as its host when it binds every interface.
	URL string
	// Address is this replica's IP, for the default URL.
	Address string
	// APIReader reads control planes' PKI Secrets from the host. Required.
	APIReader client.Reader
	// Logger logs with the key cluster.
	Logger logr.Logger
}

// Receiver takes control planes' reports. It is a manager.Runnable, run
// on every replica.
type Receiver struct {
	opts Options
	ln   net.Listener
	url  string

	mu         sync.Mutex
	identities map[string]*identity // by control plane namespace
	// refused are the server names that named no control plane, when:
	// they are not read again for identityTTL.
	refused    map[string]time.Time
	reads      flowcontrol.RateLimiter
	onActivity func(cluster string, at time.Time)
}

// identity is what a control plane's PKI Secret says of its reports.
type identity struct {
	cluster string
	serving tls.Certificate
	ca      *x509.CertPool
	read    time.Time
}

// New listens at opts.BindAddress; the Receiver serves once started.
func New(opts Options) (*Receiver, error) {
	if opts.APIReader == nil {
		return nil, errors.New("activity: no host reader")
	}
	if opts.BindAddress == "" {
		opts.BindAddress = DefaultBindAddress
	}
	ln, err := net.Listen("tcp", opts.BindAddress)
	if err != nil {
		return nil, fmt.Errorf("activity: listening on %s: %w", opts.BindAddress, err)
	}
	url := opts.URL
	if url == "" {
		addr := ln.Addr().(*net.TCPAddr)
		host := addr.IP.String()
		if addr.IP.IsUnspecified() {
			host = opts.Address
		}
		if net.ParseIP(host) == nil {
			_ = ln.Close()
			return nil, fmt.Errorf("activity: listening on every interface (%s) and no address of this replica given for the URL", ln.Addr())
		}
		url = "https://" + net.JoinHostPort(host, fmt.Sprint(addr.Port))
	}
	return &Receiver{opts: opts, ln: ln, url: url, identities: map[string]*identity{}, refused: map[string]time.Time{},
		reads: flowcontrol.NewTokenBucketRateLimiter(secretReads, 2*secretReads)}, nil
}

// URL is where control planes report to.
func (r *Receiver) URL() string { return r.url }

// OnActivity has f told of people's requests to a cluster: when the latest
// of a report was (never later than when it came). Set it before Start.
func (r *Receiver) OnActivity(f func(cluster string, at time.Time)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onActivity = f
}

// NeedLeaderElection is false: every replica takes reports.
func (r *Receiver) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (r *Receiver) Start(ctx context.Context) error {
	server := &http.Server{
		Handler: http.HandlerFunc(r.handle),
		TLSConfig: &tls.Config{
			MinVersion:         tls.VersionTLS12,
			GetConfigForClient: r.tlsConfig,
		},
		ReadHeaderTimeout: 30 * time.Second,
		// What it cannot tell a client (a failed handshake), quietly.
		ErrorLog:    slog.NewLogLogger(logr.ToSlogHandler(r.opts.Logger.V(2)), slog.LevelInfo),
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	served := make(chan error, 1)
	go func() { served <- server.ServeTLS(r.ln, "", "") }()
	select {
	case err := <-served:
		return fmt.Errorf("activity: serving: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = server.Shutdown(shutdown)
	<-served
	return nil
}

// tlsConfig serves the control plane that the client names the
// certificate issued for that name, and takes only its CA's client
// certificates.
func (r *Receiver) tlsConfig(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	id, err := r.identity(hello.Context(), hello.ServerName)
	if err != nil {
		r.opts.Logger.V(1).Info("refused a report", "serverName", hello.ServerName, "reason", err.Error())
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"},
		Certificates: []tls.Certificate{id.serving}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: id.ca,
	}, nil
}

// identity is what the PKI Secret of the control plane that serverName
// names says of its reports.
func (r *Receiver) identity(ctx context.Context, serverName string) (*identity, error) {
	namespace, ok := strings.CutSuffix(serverName, controlplane.ActivityServerNameSuffix)
	if !ok || namespace == "" {
		return nil, fmt.Errorf("server name %q is no control plane's", serverName)
	}
	r.mu.Lock()
	id, refused := r.identities[namespace], r.refused[serverName]
	r.mu.Unlock()
	if id != nil && time.Since(id.read) < identityTTL {
		return id, nil
	}
	if time.Since(refused) < identityTTL {
		return nil, fmt.Errorf("server name %q named no control plane a moment ago", serverName)
	}
	if !r.reads.TryAccept() {
		return nil, errors.New("too many handshakes of control planes not known yet; try again")
	}
	id, err := r.read(ctx, namespace, serverName)
	if err != nil {
		r.mu.Lock()
		if len(r.refused) >= refusedNames {
			clear(r.refused)
		}
		r.refused[serverName] = time.Now()
		r.mu.Unlock()
		return nil, err
	}
	r.mu.Lock()
	r.identities[namespace] = id
	delete(r.refused, serverName)
	r.mu.Unlock()
	return id, nil
}

// read reads the identity of the control plane in namespace from its PKI
// Secret.
func (r *Receiver) read(ctx context.Context, namespace, serverName string) (*identity, error) {
	var secret corev1.Secret
	if err := r.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: controlplane.PKISecretName}, &secret); err != nil {
		return nil, fmt.Errorf("reading the certificates of %s: %w", namespace, err)
	}
	cluster := secret.Labels[controlplane.LabelControlPlane]
	if cluster == "" || controlplane.ActivityServerName(cluster) != serverName {
		return nil, fmt.Errorf("secret %s/%s is no control plane's of %s", namespace, secret.Name, serverName)
	}
	serving, err := tls.X509KeyPair(secret.Data[controlplane.KeyActivityServingCert], secret.Data[controlplane.KeyActivityServingKey])
	if err != nil {
		return nil, fmt.Errorf("the activity certificate of %s (has it spec.sleep?): %w", cluster, err)
	}
	ca := x509.NewCertPool()
	if !ca.AppendCertsFromPEM(secret.Data[controlplane.KeyCACert]) {
		return nil, fmt.Errorf("no CA of %s", cluster)
	}
	return &identity{cluster: cluster, serving: serving, ca: ca, read: time.Now()}, nil
}

// handle takes one report.
func (r *Receiver) handle(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "reports are POSTed", http.StatusMethodNotAllowed)
		return
	}
	r.mu.Lock()
	id := r.identities[strings.TrimSuffix(req.TLS.ServerName, controlplane.ActivityServerNameSuffix)]
	onActivity := r.onActivity
	r.mu.Unlock()
	if id == nil || len(req.TLS.VerifiedChains) == 0 || req.TLS.VerifiedChains[0][0].Subject.CommonName != controlplane.ActivityClientUser {
		http.Error(w, "not a control plane's report", http.StatusForbidden)
		return
	}
	var events EventList
	if err := json.NewDecoder(io.LimitReader(req.Body, maxReport)).Decode(&events); err != nil {
		r.opts.Logger.Info("a report that does not read", "cluster", id.cluster, "error", err.Error())
		http.Error(w, "not an audit EventList", http.StatusBadRequest)
		return
	}
	at, people := Latest(events.Items, time.Now())
	reported.WithLabelValues("people").Add(float64(people))
	reported.WithLabelValues("tenantry").Add(float64(len(events.Items) - people))
	if people > 0 && onActivity != nil {
		onActivity(id.cluster, at)
	}
	w.WriteHeader(http.StatusOK)
}

// EventList is what the Receiver reads of an audit.k8s.io/v1 EventList.
type EventList struct {
	Items []Event `json:"items"`
}

// Event is what the Receiver reads of an audit event.
type Event struct {
	User           UserInfo         `json:"user"`
	UserAgent      string           `json:"userAgent"`
	StageTimestamp metav1.MicroTime `json:"stageTimestamp"`
}

// UserInfo is the user of an audit event.
type UserInfo struct {
	Username string   `json:"username"`
	Groups   []string `json:"groups"`
}

// People says whether e is a request of people or their tools: not
// Tenantry's (its user agent), nor of a system user (a service account,
// a node, a component), whatever the policy let through.
func People(e Event) bool {
	if strings.Contains(e.UserAgent, " "+clusterregistry.UserAgentProduct+"/") {
		return false
	}
	if strings.HasPrefix(e.User.Username, "system:") {
		return false
	}
	for _, g := range e.User.Groups {
		if g == "system:serviceaccounts" || g == "system:nodes" {
			return false
		}
	}
	return true
}

// Latest is when the latest of events that are people's was, never later
// than now, and how many of them are.
func Latest(events []Event, now time.Time) (time.Time, int) {
	var latest time.Time
	n := 0
	for _, e := range events {
		if !People(e) {
			continue
		}
		n++
		if e.StageTimestamp.After(latest) {
			latest = e.StageTimestamp.Time
		}
	}
	if latest.After(now) {
		latest = now
	}
	return latest, n
}
