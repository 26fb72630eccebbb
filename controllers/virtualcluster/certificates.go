package virtualcluster

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
)

// clientCertificates hold, per cluster spawned from a kubeconfig with a
// client certificate, the certificate its clients present. A kubeconfig
// Secret that brings a renewed certificate of the same identity for the
// same server (a provisioned control plane's, renewed well before it
// expires) swaps it in place: the cluster's controllers run on, and their
// next connections present the new one (renew). Any other change to the
// kubeconfig re-spawns the cluster, as before.
type clientCertificates struct {
	mu        sync.Mutex
	byCluster map[string]*clientCertificate
}

// clientCertificate is one cluster's: its certificate, and the transport
// of its clients, made anew for each certificate so that no connection
// opened with the old one is used for a request after the swap (an API
// server checks a client certificate's validity at each request). Each
// transport dials and is set up as the one client-go builds for the
// cluster's config (base): through the registry's dialer of the cluster,
// whose connections are cut when the cluster stops, and with its
// compression setting.
type clientCertificate struct {
	mu        sync.Mutex
	certPEM   []byte
	tlsConfig *tls.Config
	base      *http.Transport
	transport atomic.Pointer[http.Transport]
}

// RoundTrip sends req on the transport of the current certificate.
func (c *clientCertificate) RoundTrip(req *http.Request) (*http.Response, error) {
	t := c.transport.Load()
	if t == nil {
		return nil, errors.New("the cluster's client certificate has no transport yet")
	}
	return t.RoundTrip(req)
}

// wrap is the config's WrapTransport: it takes the transport client-go
// built as the base of the cluster's own, and sends every request
// through the one of the current certificate.
func (c *clientCertificate) wrap(rt http.RoundTripper) http.RoundTripper {
	base := httpTransport(rt)
	if base == nil {
		// Not a transport whose certificate can be swapped: client-go's,
		// with the certificate the cluster was spawned with.
		return rt
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.base == nil {
		c.base = base
		c.renewTransport()
	}
	return c
}

// httpTransport is the *http.Transport under client-go's wrappers of rt,
// or nil.
func httpTransport(rt http.RoundTripper) *http.Transport {
	for rt != nil {
		switch t := rt.(type) {
		case *http.Transport:
			return t
		case utilnet.RoundTripperWrapper:
			rt = t.WrappedRoundTripper()
		default:
			return nil
		}
	}
	return nil
}

// renewTransport makes the transport of the current certificate, and
// closes the idle connections of the one before; its busy ones end with
// their requests. Called with c.mu held, once a base is known.
func (c *clientCertificate) renewTransport() {
	tlsConfig := c.tlsConfig.Clone()
	t := utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               c.base.Proxy,
		DialContext:         c.base.DialContext,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: c.base.TLSHandshakeTimeout,
		MaxIdleConnsPerHost: c.base.MaxIdleConnsPerHost,
		IdleConnTimeout:     c.base.IdleConnTimeout,
		DisableCompression:  c.base.DisableCompression,
	})
	if old := c.transport.Swap(t); old != nil {
		old.CloseIdleConnections()
	}
}

// rotatable says whether config authenticates with a client certificate
// given as data and nothing that would bypass the transport it is given.
func rotatable(config *rest.Config) bool {
	return len(config.CertData) > 0 && len(config.KeyData) > 0 && config.CertFile == "" && config.KeyFile == "" &&
		config.ExecProvider == nil && config.AuthProvider == nil && config.Transport == nil && config.WrapTransport == nil &&
		config.Dial == nil && config.TLSClientConfig.NextProtos == nil
}

// kubeconfigIdentity is what of a kubeconfig with a client certificate
// decides whether its cluster must be re-spawned: the kubeconfig without
// the certificate and key, and the certificate's subject (who it
// authenticates). Nil where the certificate cannot be renewed in place.
func kubeconfigIdentity(data []byte, config *rest.Config) []byte {
	if !rotatable(config) {
		return nil
	}
	certs, err := certutil.ParseCertsPEM(config.CertData)
	if err != nil {
		return nil
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil
	}
	for _, user := range kc.AuthInfos {
		user.ClientCertificateData, user.ClientKeyData = nil, nil
	}
	out, err := clientcmd.Write(*kc)
	if err != nil {
		return nil
	}
	return append(append(out, 0), certs[0].Subject.String()...)
}

// spawnConfig is config for cluster's app: where its certificate can be
// renewed in place, its clients' transport is the cluster's, presenting
// the current certificate.
func (c *clientCertificates) spawnConfig(cluster string, config *rest.Config) (*rest.Config, error) {
	c.drop(cluster)
	if !rotatable(config) {
		return config, nil
	}
	cert := &clientCertificate{}
	if err := cert.use(config); err != nil {
		return nil, err
	}
	config = rest.CopyConfig(config)
	config.WrapTransport = cert.wrap
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byCluster == nil {
		c.byCluster = map[string]*clientCertificate{}
	}
	c.byCluster[cluster] = cert
	return config, nil
}

// renew swaps in config's certificate for cluster's running app, if it
// differs from the one it runs with. It says whether it did.
func (c *clientCertificates) renew(cluster string, config *rest.Config) (bool, error) {
	c.mu.Lock()
	cert := c.byCluster[cluster]
	c.mu.Unlock()
	if cert == nil || !rotatable(config) {
		return false, nil
	}
	cert.mu.Lock()
	same := bytes.Equal(cert.certPEM, config.CertData)
	cert.mu.Unlock()
	if same {
		return false, nil
	}
	return true, cert.use(config)
}

// drop forgets cluster's certificate, its app stopped (whose dialer has
// cut its connections).
func (c *clientCertificates) drop(cluster string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byCluster, cluster)
}

// use takes config's certificate: the TLS settings of config (its CA, its
// server name), presenting that certificate; once client-go has built
// the cluster's transport, a transport of its own.
func (c *clientCertificate) use(config *rest.Config) error {
	pair, err := tls.X509KeyPair(config.CertData, config.KeyData)
	if err != nil {
		return fmt.Errorf("the kubeconfig's client certificate: %w", err)
	}
	tlsConfig, err := rest.TLSConfigFor(config)
	if err != nil {
		return fmt.Errorf("the kubeconfig's TLS settings: %w", err)
	}
	if tlsConfig == nil {
		return errors.New("the kubeconfig's server is not reached over TLS")
	}
	tlsConfig.Certificates = nil
	tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	c.mu.Lock()
	defer c.mu.Unlock()
	c.certPEM, c.tlsConfig = bytes.Clone(config.CertData), tlsConfig
	if c.base != nil {
		c.renewTransport()
	}
	return nil
}
