// Package datastore keeps tenants apart on a shared etcd: a DataStore
// that several provisioned control planes use, each under a key prefix of
// its own that only its own etcd user may read or write.
//
// Each tenant's API server authenticates to etcd with a client
// certificate whose common name is its etcd user (User), signed by the
// DataStore's CA; etcd, with authentication enabled, maps the certificate
// to the user, and the user's one role grants the tenant's prefix alone
// (Prefix). Tenantry manages users and roles as etcd's root user.
package datastore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tenantry/tenantry/pkg/controlplane/pki"
)

// Keys of a DataStore's Secret.
const (
	// KeyCACert is the CA that signs the etcd members' serving
	// certificates and that etcd trusts for its clients'.
	KeyCACert = "ca.crt"
	// KeyCAKey is that CA's key: Tenantry signs each tenant's client
	// certificate with it.
	KeyCAKey = "ca.key"
	// KeyRootCert and KeyRootKey are a client certificate of etcd's root
	// user, with which Tenantry manages the tenants' users and roles.
	KeyRootCert = "tls.crt"
	KeyRootKey  = "tls.key"
)

// Errors of Open, to test with errors.Is.
var (
	// ErrInvalidSecret: the DataStore's Secret lacks a key, or holds
	// what is not a certificate and key of the right kind.
	ErrInvalidSecret = errors.New("the DataStore's Secret is not usable")
	// ErrUnreachable: no endpoint answered in time.
	ErrUnreachable = errors.New("the DataStore's etcd does not answer")
	// ErrAuthDisabled: etcd runs without authentication, so every
	// tenant's API server could read every tenant's keys. Refused.
	ErrAuthDisabled = errors.New("the DataStore's etcd has authentication disabled: enable it (etcdctl auth enable), or its tenants are not kept apart")
	// ErrNotRoot: the Secret's client certificate is not one of etcd's
	// root user.
	ErrNotRoot = errors.New("the DataStore Secret's client certificate is not etcd's root user")
)

// User is the etcd user, and the client certificate's common name, of
// VirtualCluster cluster's API server.
func User(cluster string) string { return "tenantry:" + cluster }

// role is the etcd role of cluster, granted to User(cluster) alone.
func role(cluster string) string { return "tenantry:" + cluster }

// Prefix is the key prefix of cluster's objects: its API server's
// --etcd-prefix is below it, and its role grants it and nothing else.
// Names of VirtualClusters hold no slash, so no tenant's prefix holds
// another's.
func Prefix(cluster string) string { return "/tenantry/" + cluster + "/" }

// APIServerFlags are the flags (without their --) that put cluster's
// kube-apiserver on the store at endpoints, trusting caFile for etcd's
// certificate and signing in with certFile and keyFile (ClientLeaf's):
// its keys below Prefix(cluster), and no compaction of its own, which
// would compact every tenant's keys and which its role does not allow
// (the store compacts itself: --auto-compaction-retention).
func APIServerFlags(cluster string, endpoints []string, caFile, certFile, keyFile string) map[string]string {
	return map[string]string{
		"etcd-servers":             strings.Join(endpoints, ","),
		"etcd-cafile":              caFile,
		"etcd-certfile":            certFile,
		"etcd-keyfile":             keyFile,
		"etcd-prefix":              Prefix(cluster) + "registry",
		"etcd-compaction-interval": "0",
	}
}

// Store is a shared etcd, reached as its root user.
type Store struct {
	client *clientv3.Client
	// ca signs the tenants' client certificates.
	ca *pki.KeyPair
	// Endpoints are etcd's client URLs.
	Endpoints []string
}

// dialTimeout bounds Open's wait for an endpoint.
const dialTimeout = 5 * time.Second

// Open reaches the etcd at endpoints with the Secret's data (the keys
// above), and checks that it authenticates its clients: a store that
// would not keep tenants apart is refused (ErrAuthDisabled). Close it.
func Open(ctx context.Context, endpoints []string, secret map[string][]byte) (*Store, error) {
	ca, err := pki.Parse(secret[KeyCACert], secret[KeyCAKey], nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s and %s: %w", ErrInvalidSecret, KeyCACert, KeyCAKey, err)
	}
	root, err := tls.X509KeyPair(secret[KeyRootCert], secret[KeyRootKey])
	if err != nil {
		return nil, fmt.Errorf("%w: %s and %s: %w", ErrInvalidSecret, KeyRootCert, KeyRootKey, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: dialTimeout,
		TLS:         &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{root}, MinVersion: tls.VersionTLS12},
		Context:     ctx,
		// etcd's client logs through zap on its own; Tenantry says what
		// matters in conditions.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, unavailable(endpoints, err)
	}
	s := &Store{client: c, ca: ca, Endpoints: endpoints}
	if err := s.check(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return s, nil
}

// check asks etcd whether authentication is on, as root.
func (s *Store) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	status, err := s.client.AuthStatus(ctx)
	switch {
	case err != nil:
		return unavailable(s.Endpoints, err)
	case !status.Enabled:
		return ErrAuthDisabled
	}
	// Only root may list the users.
	if _, err := s.client.UserList(ctx); err != nil {
		return unavailable(s.Endpoints, err)
	}
	return nil
}

// unavailable says why etcd at endpoints did not serve a request: its
// client is not root (ErrNotRoot), or it did not answer (ErrUnreachable).
func unavailable(endpoints []string, err error) error {
	if isError(err, rpctypes.ErrPermissionDenied) || isError(err, rpctypes.ErrUserNotFound) {
		return fmt.Errorf("%w: %w", ErrNotRoot, err)
	}
	return fmt.Errorf("%w (%s): %w", ErrUnreachable, strings.Join(endpoints, ", "), err)
}

// isError says whether err is etcd's error want, as the client returns it
// or as the server's status carries it.
func isError(err, want error) bool {
	return err != nil && (errors.Is(err, want) || rpctypes.ErrorDesc(err) == want.Error())
}

// Close closes the connection.
func (s *Store) Close() error { return s.client.Close() }

// CA is the certificate of the CA that etcd trusts, which the tenants'
// API servers trust for etcd's serving certificate.
func (s *Store) CA() *pki.KeyPair { return s.ca }

// ClientLeaf is the client certificate of cluster's API server, to be
// signed by CA.
func ClientLeaf(cluster string) pki.Leaf {
	return pki.Leaf{CommonName: User(cluster), Usage: pki.Client}
}

// Grant makes cluster's etcd user and role, the role with read and write
// on Prefix(cluster) alone. It is idempotent, and puts back a permission
// someone took away or widened.
func (s *Store) Grant(ctx context.Context, cluster string) error {
	user, role := User(cluster), role(cluster)
	if _, err := s.client.RoleAdd(ctx, role); err != nil && !isError(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("adding etcd role %s: %w", role, err)
	}
	got, err := s.client.RoleGet(ctx, role)
	if err != nil {
		return fmt.Errorf("reading etcd role %s: %w", role, err)
	}
	prefix := Prefix(cluster)
	end := clientv3.GetPrefixRangeEnd(prefix)
	exact := false
	for _, p := range got.Perm {
		if string(p.Key) == prefix && string(p.RangeEnd) == end && p.PermType == authpb.READWRITE {
			exact = true
			continue
		}
		// Anything else the role holds is none of the tenant's.
		if _, err := s.client.RoleRevokePermission(ctx, role, string(p.Key), string(p.RangeEnd)); err != nil {
			return fmt.Errorf("revoking %q from etcd role %s: %w", p.Key, role, err)
		}
	}
	if !exact {
		if _, err := s.client.RoleGrantPermission(ctx, role, prefix, end, clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			return fmt.Errorf("granting %s to etcd role %s: %w", prefix, role, err)
		}
	}
	// No password: the user signs in with its certificate alone.
	if _, err := s.client.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !isError(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("adding etcd user %s: %w", user, err)
	}
	u, err := s.client.UserGet(ctx, user)
	if err != nil {
		return fmt.Errorf("reading etcd user %s: %w", user, err)
	}
	for _, r := range u.Roles {
		if r != role {
			if _, err := s.client.UserRevokeRole(ctx, user, r); err != nil {
				return fmt.Errorf("revoking role %s from etcd user %s: %w", r, user, err)
			}
		}
	}
	if _, err := s.client.UserGrantRole(ctx, user, role); err != nil {
		return fmt.Errorf("granting role %s to etcd user %s: %w", role, user, err)
	}
	return nil
}

// Revoke removes cluster's etcd user and role, and unless keepData, its
// keys. Done already is no error.
func (s *Store) Revoke(ctx context.Context, cluster string, keepData bool) error {
	if _, err := s.client.UserDelete(ctx, User(cluster)); err != nil && !isError(err, rpctypes.ErrUserNotFound) {
		return fmt.Errorf("deleting etcd user %s: %w", User(cluster), err)
	}
	if _, err := s.client.RoleDelete(ctx, role(cluster)); err != nil && !isError(err, rpctypes.ErrRoleNotFound) {
		return fmt.Errorf("deleting etcd role %s: %w", role(cluster), err)
	}
	if keepData {
		return nil
	}
	if _, err := s.client.Delete(ctx, Prefix(cluster), clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("deleting the keys of %s: %w", cluster, err)
	}
	return nil
}

// Keys counts cluster's keys in the store.
func (s *Store) Keys(ctx context.Context, cluster string) (int64, error) {
	got, err := s.client.Get(ctx, Prefix(cluster), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("counting the keys of %s: %w", cluster, err)
	}
	return got.Count, nil
}

// Tenants counts the etcd users Tenantry made (one per control plane).
func (s *Store) Tenants(ctx context.Context) (int, error) {
	users, err := s.client.UserList(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing etcd users: %w", err)
	}
	n := 0
	for _, u := range users.Users {
		if strings.HasPrefix(u, "tenantry:") {
			n++
		}
	}
	return n, nil
}

// EndpointCIDRs are the addresses of endpoints (etcd client URLs), each
// as a CIDR of one address, for a NetworkPolicy to deny Pods: an IP as it
// is, a name as it resolves now.
func EndpointCIDRs(ctx context.Context, endpoints []string) ([]string, error) {
	var out []string
	for _, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil || u.Hostname() == "" {
			return nil, fmt.Errorf("endpoint %q is not a URL of an address", e)
		}
		addrs := []netip.Addr{}
		if a, err := netip.ParseAddr(u.Hostname()); err == nil {
			addrs = append(addrs, a)
		} else {
			ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
			if err != nil {
				return nil, fmt.Errorf("resolving endpoint %s: %w", e, err)
			}
			addrs = append(addrs, ips...)
		}
		for _, a := range addrs {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()).String())
		}
	}
	return out, nil
}
