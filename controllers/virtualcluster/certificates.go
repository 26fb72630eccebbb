package virtualcluster

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

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

// clientCertificate is one cluster's: the transport of its clients, made
// anew for each certificate so that no connection opened with the old
// one is used for a request after the swap (an API server checks a
// client certificate's validity at each request).
type clientCertificate struct {
	certPEM   []byte
	transport atomic.Pointer[http.Transport]
}

// RoundTrip sends req on the transport of the current certificate.
func (c *clientCertificate) RoundTrip(req *http.Request) (*http.Response, error) {
	return c.transport.Load().RoundTrip(req)
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
	// The transport client-go builds from the config is set aside: every
	// request goes through the cluster's own.
	config.WrapTransport = func(http.RoundTripper) http.RoundTripper { return cert }
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
	if cert == nil || !rotatable(config) || bytes.Equal(cert.certPEM, config.CertData) {
		return false, nil
	}
	return true, cert.use(config)
}

// drop forgets cluster's certificate, its app stopped.
func (c *clientCertificates) drop(cluster string) {
	c.mu.Lock()
	cert := c.byCluster[cluster]
	delete(c.byCluster, cluster)
	c.mu.Unlock()
	if cert != nil {
		cert.transport.Load().CloseIdleConnections()
	}
}

// use makes a transport for config's certificate, and sends every new
// request on it; the old transport's idle connections are closed, its
// busy ones end with their requests.
func (c *clientCertificate) use(config *rest.Config) error {
	pair, err := tls.X509KeyPair(config.CertData, config.KeyData)
	if err != nil {
		return fmt.Errorf("the kubeconfig's client certificate: %w", err)
	}
	noCert := rest.CopyConfig(config)
	noCert.CertData, noCert.KeyData = nil, nil
	tlsConfig, err := rest.TLSConfigFor(noCert)
	if err != nil {
		return fmt.Errorf("the kubeconfig's TLS settings: %w", err)
	}
	if tlsConfig == nil {
		return errors.New("the kubeconfig's server is not reached over TLS")
	}
	tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	proxy := http.ProxyFromEnvironment
	if config.Proxy != nil {
		proxy = config.Proxy
	}
	// As client-go's own transports: HTTP/2, and its timeouts.
	t := utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               proxy,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	})
	c.certPEM = bytes.Clone(config.CertData)
	if old := c.transport.Swap(t); old != nil {
		old.CloseIdleConnections()
	}
	return nil
}
