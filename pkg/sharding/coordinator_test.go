package sharding_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/tenantry/tenantry/pkg/sharding"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// Test timing: a lease of 3 s, so that a death is seen in seconds.
const (
	leaseDuration = 3 * time.Second
	renewDeadline = 2 * time.Second
	renewPeriod   = 250 * time.Millisecond
)

// replica is a Coordinator running until stop.
type replica struct {
	*sharding.Coordinator
	stop func()
	done chan error
}

func startReplica(t *testing.T, c client.Client, id string) *replica {
	t.Helper()
	co, err := sharding.New(c, sharding.Options{
		Namespace: "default", Group: "test", Identity: id,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RenewPeriod: renewPeriod,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{Coordinator: co, done: make(chan error, 1)}
	go func() { r.done <- co.Run(ctx) }()
	var once sync.Once
	r.stop = func() { once.Do(func() { cancel(); <-r.done }) }
	t.Cleanup(r.stop)
	return r
}

func waitLive(t *testing.T, want []string, replicas ...*replica) {
	t.Helper()
	for _, r := range replicas {
		tenantrytest.Eventually(t, 10*time.Second, fmt.Sprintf("%s sees %v live", r.Identity(), want), func(context.Context) (bool, error) {
			return slices.Equal(r.Live(), want), fmt.Errorf("live %v", r.Live())
		})
	}
}

// Replicas agree on each key's owner; only the owner takes a key's Lease
// while the others live; a replica that leaves cleanly is gone from the
// others' view at once, and its released keys are taken by their new owner.
func TestReplicasShareKeys(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{})
	c := newClient(t, env)
	ctx := t.Context()
	a, b, cc := startReplica(t, c, "a"), startReplica(t, c, "b"), startReplica(t, c, "c")
	waitLive(t, []string{"a", "b", "c"}, a, b, cc)
	replicas := map[string]*replica{"a": a, "b": b, "c": cc}

	owned := map[string][]string{}
	for i := range 30 {
		key := fmt.Sprintf("vc-%d", i)
		o := a.Owner(key)
		if b.Owner(key) != o || cc.Owner(key) != o {
			t.Fatalf("key %s: owners %s, %s, %s; want one", key, o, b.Owner(key), cc.Owner(key))
		}
		owned[o] = append(owned[o], key)
		if got, err := replicas[o].Acquire(ctx, key); err != nil || !got || !replicas[o].Holds(key) {
			t.Fatalf("owner %s could not take key %s: %v", o, key, err)
		}
		for id, r := range replicas {
			if got, err := r.Acquire(ctx, key); err != nil || (id != o && got) {
				t.Fatalf("%s took key %s, held by its owner %s, alive: %t, %v", id, key, o, got, err)
			}
		}
	}
	if len(owned) != 3 {
		t.Errorf("30 keys over 3 replicas: %v", owned)
	}

	// c leaves cleanly: it releases its keys, then its peer Lease goes.
	for _, key := range owned["c"] {
		if err := cc.Release(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	cc.stop()
	waitLive(t, []string{"a", "b"}, a, b)
	for _, key := range owned["c"] {
		o := a.Owner(key)
		if got, err := replicas[o].Acquire(ctx, key); err != nil || !got {
			t.Fatalf("key %s, released by c: new owner %s could not take it: %v", key, o, err)
		}
	}
}

// A replica cut off from the API server counts itself lost before any
// peer can count it dead and take its keys.
func TestLostReplicaStopsBeforeItsKeysMove(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{})
	c := newClient(t, env)
	cutOff := make(chan struct{})
	failing := interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			select {
			case <-cutOff:
				return errors.New("the network is cut")
			default:
				return c.Update(ctx, obj, opts...)
			}
		},
	})
	a, b := startReplica(t, failing, "a"), startReplica(t, c, "b")
	waitLive(t, []string{"a", "b"}, a, b)
	key := takeOwnKey(t, a)

	close(cutOff)
	cutAt := time.Now()
	var lostAt time.Time
	select {
	case <-a.Lost():
		lostAt = time.Now()
	case <-time.After(2 * leaseDuration):
		t.Fatal("a, cut off, never counted itself lost")
	}
	if a.Holds(key) {
		t.Error("a lost replica still says it holds its key")
	}
	var tookAt time.Time
	tenantrytest.Eventually(t, 10*time.Second, "b takes a's key", func(ctx context.Context) (bool, error) {
		got, err := b.Acquire(ctx, key)
		tookAt = time.Now()
		return got, err
	})
	if !lostAt.Before(tookAt) {
		t.Errorf("a counted itself lost %s after the cut, b took its key %s after it", lostAt.Sub(cutAt), tookAt.Sub(cutAt))
	}
	waitLive(t, []string{"b"}, b)
	t.Logf("cut at 0: a lost at %s, b took its key at %s (lease %s, renew deadline %s)",
		lostAt.Sub(cutAt).Round(10*time.Millisecond), tookAt.Sub(cutAt).Round(10*time.Millisecond), leaseDuration, renewDeadline)
}

// takeOwnKey finds a key that r owns and takes it.
func takeOwnKey(t *testing.T, r *replica) string {
	t.Helper()
	for i := 0; ; i++ {
		key := fmt.Sprintf("vc-%d", i)
		if r.Owner(key) != r.Identity() {
			continue
		}
		if got, err := r.Acquire(t.Context(), key); err != nil || !got {
			t.Fatalf("%s could not take its key %s: %v", r.Identity(), key, err)
		}
		return key
	}
}

func newClient(t *testing.T, env *tenantrytest.Environment) client.Client {
	t.Helper()
	c, err := client.NewWithWatch(env.Host.Config(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A key held by a peer this replica has not seen yet (it joined since the
// last round) is not taken: the peer counts live from when it is first
// seen, and its key moves only once it has stayed silent for the lease
// duration.
func TestKeyOfANewPeerIsNotTaken(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{})
	c := newClient(t, env)
	ctx := t.Context()
	a := startReplica(t, c, "a")
	waitLive(t, []string{"a"}, a)

	now := metav1.NewMicroTime(time.Now())
	for _, l := range []*coordinationv1.Lease{
		{ // a peer that has just joined, and took a key before a's next round
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "test-peer-newcomer", Labels: map[string]string{sharding.LabelGroup: "test"}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("newcomer"), RenewTime: &now},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "test-key-vc-new"},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("newcomer"), AcquireTime: &now},
		},
		{ // held by a peer whose Lease is gone
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "test-key-vc-orphan"},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("departed"), AcquireTime: &now},
		},
	} {
		if err := c.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := a.Acquire(ctx, "vc-orphan"); err != nil || !got {
		t.Fatalf("a key whose holder's Lease is gone: taken %t, %v", got, err)
	}
	seenAt := time.Now()
	if got, err := a.Acquire(ctx, "vc-new"); err != nil || got {
		t.Fatalf("a key of a peer a has not seen yet: taken %t, %v", got, err)
	}
	tenantrytest.Eventually(t, 3*leaseDuration, "a takes the key once the newcomer stayed silent", func(ctx context.Context) (bool, error) {
		return a.Acquire(ctx, "vc-new")
	})
	if waited := time.Since(seenAt); waited < leaseDuration {
		t.Errorf("a took the newcomer's key %s after first seeing it, before the lease duration %s", waited, leaseDuration)
	}
}

// A replica whose renewals fail past the renew deadline is lost for good,
// even if the network heals before its peers count it dead: they may take
// its keys from then on, so it must never count itself live again.
func TestRenewalAfterTheDeadlineDoesNotRevive(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{})
	c := newClient(t, env)
	var cut atomic.Bool
	failing := interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if cut.Load() {
				return errors.New("the network is cut")
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	a, b := startReplica(t, failing, "a"), startReplica(t, c, "b")
	waitLive(t, []string{"a", "b"}, a, b)
	key := takeOwnKey(t, a)

	cut.Store(true)
	tenantrytest.Eventually(t, 2*renewDeadline, "a stops holding its key at its renew deadline", func(context.Context) (bool, error) {
		return !a.Holds(key), nil
	})
	cut.Store(false) // healed before b counts a dead: a's renewals go through again
	tenantrytest.Eventually(t, 3*leaseDuration, "b takes a's key", func(ctx context.Context) (bool, error) {
		if a.Holds(key) {
			return false, errors.New("a holds its key again after its renew deadline")
		}
		return b.Acquire(ctx, key)
	})
	select {
	case <-a.Lost():
	default:
		t.Error("a is not lost")
	}
	if a.Holds(key) {
		t.Errorf("a holds %s, which b took", key)
	}
}

// Two takes of one key at once in one replica (a reconcile's and a
// take-over's) leave the key held, whichever write wins: a Release then
// gives the Lease up, so that a new owner never waits behind a Lease its
// holder forgot.
func TestConcurrentTakesInOneReplica(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{})
	c := newClient(t, env)
	ctx := t.Context()
	a := startReplica(t, c, "a")
	waitLive(t, []string{"a"}, a)
	const keys = 40
	var wg sync.WaitGroup
	for i := range keys {
		key := fmt.Sprintf("race-%d", i)
		for range 2 {
			wg.Go(func() {
				if _, err := a.Acquire(ctx, key); err != nil {
					t.Errorf("taking %s: %v", key, err)
				}
			})
		}
	}
	wg.Wait()
	for i := range keys {
		key := fmt.Sprintf("race-%d", i)
		if !a.Holds(key) {
			t.Errorf("key %s: its Lease names a, which forgot it", key)
			continue
		}
		if err := a.Release(ctx, key); err != nil {
			t.Fatal(err)
		}
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "test-key-" + key}, &l); err != nil {
			t.Fatal(err)
		}
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" {
			t.Errorf("key %s: released, its Lease still names %q", key, h)
		}
	}
}
