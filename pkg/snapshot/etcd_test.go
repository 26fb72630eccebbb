package snapshot_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenantry/tenantry/pkg/controlplane/datastore"
	"github.com/tenantry/tenantry/pkg/snapshot"
	tenantrytesting "github.com/tenantry/tenantry/pkg/testing"
)

// rootClient is a root client of an etcd of the test's own.
func rootClient(t *testing.T) *clientv3.Client {
	t.Helper()
	store := tenantrytesting.NewEtcdDataStore(t, "127.0.0.1")
	c, err := store.Client(store.Secret[datastore.KeyRootCert], store.Secret[datastore.KeyRootKey])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func put(t *testing.T, c *clientv3.Client, key, value string) {
	t.Helper()
	if _, err := c.Put(t.Context(), key, value); err != nil {
		t.Fatal(err)
	}
}

// keysUnder is every key under prefix, without it, and its value.
func keysUnder(t *testing.T, c *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	got, err := c.Get(t.Context(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, kv := range got.Kvs {
		keys[string(bytes.TrimPrefix(kv.Key, []byte(prefix)))] = string(kv.Value)
	}
	return keys
}

// A snapshot is the store at one revision, in pages, whatever is written
// meanwhile, and none of another prefix; it restores under another
// prefix, key for key, and never over keys that are there.
func TestASnapshotIsTheStoreAtOneRevisionAndRestoresUnderAnotherPrefix(t *testing.T) {
	c := rootClient(t)
	ctx := t.Context()
	const source, target = "/registry/", "/tenantry/restored/"
	for i := range 1234 { // more than two pages
		put(t, c, fmt.Sprintf("%sconfigmaps/default/cm-%04d", source, i), fmt.Sprintf("value %d", i))
	}
	put(t, c, "/registryx/not-under-the-prefix", "x")
	put(t, c, "/other/key", "y")
	want := keysUnder(t, c, source)
	// A key under a lease (an Event, an API server's address) expires: it
	// is not kept.
	lease, err := c.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, source+"events/default/e1", "an event", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}

	w, err := snapshot.NewWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Writes while the snapshot is taken: the first page's revision holds.
	var writes sync.WaitGroup
	first := true
	rev, err := snapshot.Take(ctx, c, source, func(k, v []byte) error {
		if first {
			first = false
			writes.Go(func() {
				for i := 1200; i < 1234; i++ { // in the last page, not read yet
					if _, err := c.Put(context.Background(), fmt.Sprintf("%sconfigmaps/default/cm-%04d", source, i), "changed"); err != nil {
						t.Error(err)
					}
				}
				if _, err := c.Put(context.Background(), source+"configmaps/default/zz-new", "new"); err != nil {
					t.Error(err)
				}
			})
			writes.Wait()
		}
		return w.Add(k, v)
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, _, err := w.Write(&out, snapshot.Manifest{Cluster: "c", Revision: rev}); err != nil {
		t.Fatal(err)
	}

	r, err := snapshot.Open(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if r.Manifest.Keys != len(want) {
		t.Fatalf("the snapshot holds %d keys, the store held %d under %s", r.Manifest.Keys, len(want), source)
	}
	n, err := snapshot.Load(ctx, c, target, r)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Errorf("Load wrote %d keys, want %d", n, len(want))
	}
	got := keysUnder(t, c, target)
	if len(got) != len(want) {
		t.Fatalf("%d keys restored, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("restored %s = %q, want %q (as at revision %d)", k, got[k], v, rev)
		}
	}

	again, err := snapshot.Open(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot.Load(ctx, c, target, again); !errors.Is(err, snapshot.ErrNotEmpty) {
		t.Fatalf("a second Load into %s: %v, want ErrNotEmpty", target, err)
	}
}
