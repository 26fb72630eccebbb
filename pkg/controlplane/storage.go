package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane/datastore"
)

// ErrNotProvisioned is a VirtualCluster whose control plane Tenantry does
// not run (registered with a kubeconfig): Tenantry holds none of its
// storage.
var ErrNotProvisioned = errors.New("its control plane runs elsewhere (tenantry register): Tenantry holds none of its storage")

// Storage is a client of a provisioned tenant's storage, reached from
// outside the host as its API server reaches it: the embedded etcd and
// the tenant's own etcd through the host's pods/portforward, a DataStore
// at its endpoints, as the tenant's own etcd user. Close it.
type Storage struct {
	// Client is the etcd client.
	Client *clientv3.Client
	// Prefix is the prefix of the tenant's keys, with its trailing slash:
	// its API server's --etcd-prefix and "/".
	Prefix string
	// Type is the storage's type.
	Type tenantryv1alpha1.StorageType

	cancel context.CancelFunc
	// forwarded gives how the forwarding ended, once it has; nil for a
	// DataStore, reached at its endpoints.
	forwarded <-chan error
}

// Close closes the client, ends the forwarding and waits for it.
func (s *Storage) Close() error {
	err := s.Client.Close()
	s.cancel()
	if s.forwarded != nil {
		<-s.forwarded
	}
	return err
}

// OpenStorage opens the storage of vc, whose control plane Tenantry runs,
// through the host (host's config, reader c).
func OpenStorage(ctx context.Context, host *rest.Config, c client.Reader, vc *tenantryv1alpha1.VirtualCluster) (_ *Storage, retErr error) {
	cp := vc.Spec.ControlPlane
	if cp == nil {
		return nil, fmt.Errorf("VirtualCluster %s: %w", vc.Name, ErrNotProvisioned)
	}
	storage := cp.Storage.Type
	if storage == "" {
		storage = tenantryv1alpha1.StorageEmbedded
	}
	var secret corev1.Secret
	if storage != tenantryv1alpha1.StorageEmbedded {
		key := client.ObjectKey{Namespace: Namespace(vc.Name), Name: PKISecretName}
		if err := c.Get(ctx, key, &secret); err != nil {
			return nil, fmt.Errorf("VirtualCluster %s: reading its control plane's certificates (Secret %s): %w", vc.Name, key, err)
		}
	}
	forwarding, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var forwarded <-chan error
	defer func() {
		if retErr != nil {
			cancel()
			if forwarded != nil {
				<-forwarded
			}
		}
	}()
	cfg := clientv3.Config{DialTimeout: 10 * time.Second, Logger: zap.NewNop(), Context: forwarding}
	prefix := "/registry/"
	switch storage {
	case tenantryv1alpha1.StorageEmbedded:
		// On the Pod's loopback, in plain text: the Pod's own network is
		// its only way in.
		addr, done, err := ForwardPort(forwarding, host, Namespace(vc.Name), WorkloadName+"-0", 2379, 0)
		forwarded = done
		if err != nil {
			return nil, fmt.Errorf("VirtualCluster %s: reaching its embedded etcd: %w", vc.Name, err)
		}
		cfg.Endpoints = []string{"http://" + addr}
	case tenantryv1alpha1.StorageEtcd:
		member, err := readyEtcdMember(ctx, c, vc.Name)
		if err != nil {
			return nil, fmt.Errorf("VirtualCluster %s: %w", vc.Name, err)
		}
		addr, done, err := ForwardPort(forwarding, host, Namespace(vc.Name), member, EtcdPort, 0)
		forwarded = done
		if err != nil {
			return nil, fmt.Errorf("VirtualCluster %s: reaching its etcd: %w", vc.Name, err)
		}
		cfg.Endpoints = []string{"https://" + addr}
		// Its serving certificate names localhost, where it is forwarded.
		if cfg.TLS, err = etcdClientTLS(&secret, "localhost"); err != nil {
			return nil, fmt.Errorf("VirtualCluster %s: %w", vc.Name, err)
		}
	case tenantryv1alpha1.StorageDataStore:
		var ds tenantryv1alpha1.DataStore
		if err := c.Get(ctx, client.ObjectKey{Name: cp.Storage.DataStore}, &ds); err != nil {
			return nil, fmt.Errorf("VirtualCluster %s: reading its DataStore %q: %w", vc.Name, cp.Storage.DataStore, err)
		}
		cfg.Endpoints = ds.Spec.Etcd.Endpoints
		var err error
		if cfg.TLS, err = etcdClientTLS(&secret, ""); err != nil {
			return nil, fmt.Errorf("VirtualCluster %s: %w", vc.Name, err)
		}
		prefix = datastore.Prefix(vc.Name) + "registry/"
	default:
		return nil, fmt.Errorf("VirtualCluster %s: storage %q is not one Tenantry knows", vc.Name, storage)
	}
	etcd, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("VirtualCluster %s: a client of its %s storage: %w", vc.Name, storage, err)
	}
	return &Storage{Client: etcd, Prefix: prefix, Type: storage, cancel: cancel, forwarded: forwarded}, nil
}

// readyEtcdMember is the Pod of a ready member of cluster's etcd (storage
// Etcd), the first if none is.
func readyEtcdMember(ctx context.Context, c client.Reader, cluster string) (string, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(Namespace(cluster)), client.MatchingLabels(etcdPodLabels(cluster))); err != nil {
		return "", fmt.Errorf("listing its etcd's Pods: %w", err)
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp.IsZero() && slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}) {
			return pod.Name, nil
		}
	}
	return EtcdMemberName(0), nil
}

// etcdClientTLS is the API server's TLS to its etcd, from the control
// plane's certificates: their etcd CA, and its client certificate.
func etcdClientTLS(secret *corev1.Secret, serverName string) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(secret.Data[KeyEtcdClientCert], secret.Data[KeyEtcdClientKey])
	if err != nil {
		return nil, fmt.Errorf("its API server's etcd client certificate (Secret %s, %s): %w", secret.Name, KeyEtcdClientCert, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(secret.Data[KeyEtcdCACert]) {
		return nil, fmt.Errorf("its etcd's CA (Secret %s, %s): no certificate", secret.Name, KeyEtcdCACert)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: serverName, MinVersion: tls.VersionTLS12}, nil
}
