package testing

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenantry/tenantry/pkg/controlplane/datastore"
	"github.com/tenantry/tenantry/pkg/controlplane/pki"
)

// EtcdDataStore is an etcd of the test's own, made as a host admin makes
// one for a DataStore that several provisioned control planes share: TLS
// with client certificates, authentication on, a root user. Start one
// with StartEtcdDataStore.
type EtcdDataStore struct {
	// Endpoint is its client URL, https://IP:PORT.
	Endpoint string
	// Secret is the data of the DataStore's Secret (datastore.KeyCACert
	// and the others): its CA with the CA's key, and a client certificate
	// of its root user.
	Secret map[string][]byte

	proc *process
	dir  string
}

// NewEtcdDataStore is StartEtcdDataStore on ip for test t, stopped when it
// ends; t is skipped where $KUBEBUILDER_ASSETS is not set.
func NewEtcdDataStore(t testing.TB, ip string) *EtcdDataStore {
	t.Helper()
	if os.Getenv(AssetsEnv) == "" {
		t.Skip("no etcd: run make envtest, or set " + AssetsEnv)
	}
	store, err := StartEtcdDataStore(t.Context(), "", ip)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := store.Stop(); err != nil {
			t.Error(err)
		}
	})
	return store
}

// StartEtcdDataStore starts an etcd (from $KUBEBUILDER_ASSETS, or
// assets) listening on ip: Environment.KitIP where control planes run in
// Pods of the kit's real nodes, or 127.0.0.1. Stop it when done.
func StartEtcdDataStore(ctx context.Context, assets, ip string) (_ *EtcdDataStore, retErr error) {
	if assets == "" {
		assets = os.Getenv(AssetsEnv)
	}
	dir, err := os.MkdirTemp("", "tenantry-datastore-")
	if err != nil {
		return nil, err
	}
	d := &EtcdDataStore{dir: dir}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, d.Stop())
		}
	}()
	now := time.Now()
	ca, err := pki.NewCA("tenantry-test-datastore-ca", now)
	if err != nil {
		return nil, err
	}
	serving, err := ca.Issue(pki.Leaf{CommonName: "etcd", IPs: []net.IP{net.ParseIP(ip)}, Usage: pki.Server}, now)
	if err != nil {
		return nil, err
	}
	root, err := ca.Issue(pki.Leaf{CommonName: "root", Usage: pki.Client}, now)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"ca.crt": ca.CertPEM, "server.crt": serving.CertPEM, "server.key": serving.KeyPEM}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	port, err := freePortOn(net.ParseIP(ip))
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	d.Endpoint = "https://" + net.JoinHostPort(ip, strconv.Itoa(port))
	peer := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))
	log, err := newProcessLog("datastore", "etcd", dir, nil)
	if err != nil {
		return nil, err
	}
	d.proc, err = startProcess("datastore", "etcd", filepath.Join(assets, "etcd"), []string{
		"--name=datastore", "--data-dir=" + filepath.Join(dir, "data"),
		"--listen-client-urls=" + d.Endpoint, "--advertise-client-urls=" + d.Endpoint,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer, "--initial-cluster=datastore=" + peer,
		"--cert-file=" + filepath.Join(dir, "server.crt"), "--key-file=" + filepath.Join(dir, "server.key"),
		"--trusted-ca-file=" + filepath.Join(dir, "ca.crt"), "--client-cert-auth",
		// Tenants' API servers do not compact a shared store: it does.
		"--auto-compaction-mode=periodic", "--auto-compaction-retention=5m",
		"--listen-metrics-urls=http://127.0.0.1:0",
	}, nil, log)
	if err != nil {
		return nil, err
	}
	d.Secret = map[string][]byte{
		datastore.KeyCACert: ca.CertPEM, datastore.KeyCAKey: ca.KeyPEM,
		datastore.KeyRootCert: root.CertPEM, datastore.KeyRootKey: root.KeyPEM,
	}
	// The root user, then authentication on, as etcdctl user add root and
	// etcdctl auth enable would.
	client, err := d.client(root, ca)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	err = d.proc.waitReady(ctx, 30*time.Second, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := client.Status(ctx, d.Endpoint)
		return err
	})
	if err != nil {
		return nil, d.proc.failure(err)
	}
	if _, err := client.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		return nil, fmt.Errorf("datastore: adding the root user: %w", err)
	}
	if _, err := client.UserGrantRole(ctx, "root", "root"); err != nil {
		return nil, fmt.Errorf("datastore: granting root the root role: %w", err)
	}
	if _, err := client.AuthEnable(ctx); err != nil {
		return nil, fmt.Errorf("datastore: enabling authentication: %w", err)
	}
	return d, nil
}

// Client is a client of the store as whoever cert is (signed by its CA),
// for a test to see what that user may do. Close it.
func (d *EtcdDataStore) Client(certPEM, keyPEM []byte) (*clientv3.Client, error) {
	ca, err := pki.Parse(d.Secret[datastore.KeyCACert], d.Secret[datastore.KeyCAKey], nil)
	if err != nil {
		return nil, err
	}
	kp, err := pki.Parse(certPEM, keyPEM, ca)
	if err != nil {
		return nil, err
	}
	return d.client(kp, ca)
}

func (d *EtcdDataStore) client(kp, ca *pki.KeyPair) (*clientv3.Client, error) {
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return clientv3.New(clientv3.Config{
		Endpoints: []string{d.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	})
}

// Host is the store's address, IP:PORT.
func (d *EtcdDataStore) Host() string {
	u, err := url.Parse(d.Endpoint)
	if err != nil {
		return ""
	}
	return u.Host
}

// Stop ends the store and removes its data.
func (d *EtcdDataStore) Stop() error {
	var err error
	if d.proc != nil {
		err = d.proc.stop()
	}
	return errors.Join(err, os.RemoveAll(d.dir))
}
