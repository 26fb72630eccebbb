package datastore_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tenantry/tenantry/pkg/controlplane/datastore"
	tenantrytesting "github.com/tenantry/tenantry/pkg/testing"
)

func startStore(t *testing.T) *tenantrytesting.EtcdDataStore {
	t.Helper()
	return tenantrytesting.NewEtcdDataStore(t, "127.0.0.1")
}

// tenantClient is a client of the store as cluster's API server.
func tenantClient(t *testing.T, store *tenantrytesting.EtcdDataStore, s *datastore.Store, cluster string) *clientv3.Client {
	t.Helper()
	kp, err := s.CA().Issue(datastore.ClientLeaf(cluster), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return clientAs(t, store, kp.CertPEM, kp.KeyPEM)
}

// clientAs is a client of the store as the certificate's user, closed
// when the test ends.
func clientAs(t *testing.T, store *tenantrytesting.EtcdDataStore, certPEM, keyPEM []byte) *clientv3.Client {
	t.Helper()
	c, err := store.Client(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestTenantsAreKeptApart(t *testing.T) {
	store := startStore(t)
	ctx := t.Context()
	s, err := datastore.Open(ctx, []string{store.Endpoint}, store.Secret)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, cluster := range []string{"team-a", "team-ab"} {
		if err := s.Grant(ctx, cluster); err != nil {
			t.Fatal(err)
		}
		// Twice: nothing changes.
		if err := s.Grant(ctx, cluster); err != nil {
			t.Fatal(err)
		}
	}
	a, ab := tenantClient(t, store, s, "team-a"), tenantClient(t, store, s, "team-ab")
	if _, err := a.Put(ctx, datastore.Prefix("team-a")+"registry/secrets/x", "a's"); err != nil {
		t.Fatalf("team-a writing its own prefix: %v", err)
	}
	if _, err := ab.Put(ctx, datastore.Prefix("team-ab")+"registry/secrets/x", "ab's"); err != nil {
		t.Fatalf("team-ab writing its own prefix: %v", err)
	}
	// Neither reads or writes the other's keys, nor the whole store: team-a's
	// prefix is not one of team-ab's.
	for name, op := range map[string]func() error{
		"team-a reads team-ab's": func() error {
			_, err := a.Get(ctx, datastore.Prefix("team-ab"), clientv3.WithPrefix())
			return err
		},
		"team-ab reads team-a's": func() error {
			_, err := ab.Get(ctx, datastore.Prefix("team-a"), clientv3.WithPrefix())
			return err
		},
		"team-a reads everything": func() error {
			_, err := a.Get(ctx, "", clientv3.WithFromKey())
			return err
		},
		"team-a writes team-ab's": func() error {
			_, err := a.Put(ctx, datastore.Prefix("team-ab")+"registry/secrets/y", "a's")
			return err
		},
		"team-a deletes team-ab's": func() error {
			_, err := a.Delete(ctx, datastore.Prefix("team-ab"), clientv3.WithPrefix())
			return err
		},
		"team-a lists the users": func() error {
			_, err := a.UserList(ctx)
			return err
		},
	} {
		if err := op(); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("%s: want permission denied, got %v", name, err)
		}
	}
	if n, err := s.Tenants(ctx); err != nil || n != 2 {
		t.Errorf("Tenants() = %d, %v; want 2", n, err)
	}

	// Revoked with its data: team-a's keys and user go, team-ab's stay.
	if err := s.Revoke(ctx, "team-a", false); err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(ctx, "team-a", false); err != nil {
		t.Fatalf("revoking again: %v", err)
	}
	if _, err := a.Get(ctx, datastore.Prefix("team-a")); err == nil {
		t.Error("team-a still reads after its user was revoked")
	}
	root := rootClient(t, store)
	for prefix, want := range map[string]int64{datastore.Prefix("team-a"): 0, datastore.Prefix("team-ab"): 1} {
		got, err := root.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if got.Count != want {
			t.Errorf("%d keys under %s, want %d", got.Count, prefix, want)
		}
	}
}

func rootClient(t *testing.T, store *tenantrytesting.EtcdDataStore) *clientv3.Client {
	t.Helper()
	return clientAs(t, store, store.Secret[datastore.KeyRootCert], store.Secret[datastore.KeyRootKey])
}

func TestOpenRefuses(t *testing.T) {
	store := startStore(t)
	ctx := t.Context()
	secret := func(edit func(map[string][]byte)) map[string][]byte {
		out := map[string][]byte{}
		for k, v := range store.Secret {
			out[k] = v
		}
		edit(out)
		return out
	}
	s, err := datastore.Open(ctx, []string{store.Endpoint}, store.Secret)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tenant, err := s.CA().Issue(datastore.ClientLeaf("team-a"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		endpoints []string
		secret    map[string][]byte
		want      error
	}{
		"no CA key": {[]string{store.Endpoint}, secret(func(m map[string][]byte) { delete(m, datastore.KeyCAKey) }), datastore.ErrInvalidSecret},
		"no root":   {[]string{store.Endpoint}, secret(func(m map[string][]byte) { m[datastore.KeyRootKey] = []byte("junk") }), datastore.ErrInvalidSecret},
		"a tenant's cert": {[]string{store.Endpoint}, secret(func(m map[string][]byte) {
			m[datastore.KeyRootCert], m[datastore.KeyRootKey] = tenant.CertPEM, tenant.KeyPEM
		}), datastore.ErrNotRoot},
		"nobody listens": {[]string{"https://127.0.0.1:1"}, store.Secret, datastore.ErrUnreachable},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			s, err := datastore.Open(ctx, tc.endpoints, tc.secret)
			if err == nil {
				_ = s.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open: want %v, got %v", tc.want, err)
			}
		})
	}

	// Authentication off: every tenant would read every tenant's keys.
	root := rootClient(t, store)
	if _, err := root.AuthDisable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := datastore.Open(ctx, []string{store.Endpoint}, store.Secret); !errors.Is(err, datastore.ErrAuthDisabled) {
		t.Errorf("Open with authentication off: want ErrAuthDisabled, got %v", err)
	}
}

// A tenant's kube-apiserver runs on the store with its own user alone:
// under its prefix, without compacting the store (the store does).
func TestAPIServerOnItsPrefix(t *testing.T) {
	store := startStore(t)
	ctx := t.Context()
	s, err := datastore.Open(ctx, []string{store.Endpoint}, store.Secret)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Grant(ctx, "team-a"); err != nil {
		t.Fatal(err)
	}
	kp, err := s.CA().Issue(datastore.ClientLeaf("team-a"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{"etcd-ca.crt": s.CA().CertPEM, "etcd-client.crt": kp.CertPEM, "etcd-client.key": kp.KeyPEM}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	endpoint, err := url.Parse(store.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	server := &envtest.APIServer{EtcdURL: endpoint}
	for flag, value := range datastore.APIServerFlags("team-a", []string{store.Endpoint}, filepath.Join(dir, "etcd-ca.crt"), filepath.Join(dir, "etcd-client.crt"), filepath.Join(dir, "etcd-client.key")) {
		server.Configure().Set(flag, value)
	}
	if err := server.Start(); err != nil {
		t.Fatalf("a kube-apiserver on team-a's prefix: %v", err)
	}
	defer func() {
		if err := server.Stop(); err != nil {
			t.Error(err)
		}
	}()
	plane := envtest.ControlPlane{APIServer: server}
	user, err := plane.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(user.Config())
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	root := rootClient(t, store)
	got, err := root.Get(ctx, datastore.Prefix("team-a")+"registry/configmaps/default/kept")
	if err != nil {
		t.Fatal(err)
	}
	if got.Count != 1 {
		t.Errorf("the ConfigMap is not at %sregistry/configmaps/default/kept", datastore.Prefix("team-a"))
	}
	outside, err := root.Get(ctx, "/registry", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if outside.Count != 0 {
		t.Errorf("%d keys of the API server outside its prefix", outside.Count)
	}
}
