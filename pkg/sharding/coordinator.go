package sharding

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LabelGroup marks the peer Leases of one group of replicas, and
// LabelKeyGroup the Leases of its keys.
const (
	LabelGroup    = "tenantry.dev/shard-group"
	LabelKeyGroup = "tenantry.dev/shard-key-group"
)

// Defaults of Options.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRenewPeriod   = 2 * time.Second
)

// Options configure a Coordinator.
type Options struct {
	// Namespace holds the group's Leases. Required.
	Namespace string
	// Group names the replicas that share keys, and prefixes their Leases'
	// names. Required: a DNS label.
	Group string
	// Identity is this replica's, unique among the live ones. Default: the
	// host name and a random suffix.
	Identity string
	// LeaseDuration is how long a peer whose Lease has not changed still
	// counts live; RenewDeadline how long this replica keeps trying to
	// renew its own before it counts itself lost; RenewPeriod how often it
	// renews and reads its peers. Defaults: DefaultLeaseDuration,
	// DefaultRenewDeadline, DefaultRenewPeriod.
	LeaseDuration, RenewDeadline, RenewPeriod time.Duration
	// Logger logs membership changes.
	Logger logr.Logger
}

func (o *Options) setDefaults() error {
	if o.Namespace == "" {
		return errors.New("sharding: Options.Namespace is required")
	}
	if errs := validation.IsDNS1123Label(o.Group); len(errs) > 0 {
		return fmt.Errorf("sharding: group %q: %s", o.Group, strings.Join(errs, "; "))
	}
	if o.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("sharding: the replica's identity: %w", err)
		}
		o.Identity = strings.ToLower(host) + "-" + utilrand.String(5)
	}
	if errs := validation.IsDNS1123Subdomain(peerLeaseName(o.Group, o.Identity)); len(errs) > 0 {
		return fmt.Errorf("sharding: identity %q: %s", o.Identity, strings.Join(errs, "; "))
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewDeadline <= 0 {
		o.RenewDeadline = DefaultRenewDeadline
	}
	if o.RenewPeriod <= 0 {
		o.RenewPeriod = DefaultRenewPeriod
	}
	if o.RenewDeadline >= o.LeaseDuration {
		return fmt.Errorf("sharding: the renew deadline (%s) must be shorter than the lease duration (%s)", o.RenewDeadline, o.LeaseDuration)
	}
	if o.RenewPeriod >= o.RenewDeadline {
		return fmt.Errorf("sharding: the renew period (%s) must be shorter than the renew deadline (%s)", o.RenewPeriod, o.RenewDeadline)
	}
	if o.RenewPeriod >= o.LeaseDuration-o.RenewDeadline {
		return fmt.Errorf("sharding: the renew period (%s) must be shorter than the lease duration (%s) less the renew deadline (%s): a lost replica stops writing before its peers count it dead only with that margin",
			o.RenewPeriod, o.LeaseDuration, o.RenewDeadline)
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	return nil
}

// Coordinator is one replica's view of its group: who is live, who owns a
// key, and the keys' fencing Leases. Its methods are safe for concurrent
// use; Owner and Holds answer from memory.
type Coordinator struct {
	c    client.Client
	opts Options

	mu sync.Mutex
	// seen is, per peer identity, the peer Lease's resourceVersion and when
	// it changed, at the earliest (see round).
	seen map[string]observation
	live []string // sorted, this replica included while not lost
	held map[string]bool
	// departed are the peers found gone by gone: lost for good.
	departed map[string]bool
	// claimed are the keys whose Lease this replica wrote to take and has
	// not given up since: held, or maybe held (the answer was lost).
	claimed map[string]bool
	changes []chan struct{}
	// lost is closed, once (loseOnce), when this replica must stop writing:
	// its renewals failed for the renew deadline, or Run ended.
	lost     chan struct{}
	loseOnce sync.Once
	// lastRenew is when the last successful renewal of the peer Lease was
	// sent: peers count this replica live until at least LeaseDuration
	// after they see it, so it may write until RenewDeadline after it.
	lastRenew time.Time
	// lastListed is when the last successful list of the peers began.
	lastListed time.Time
	// ready: a round has read the peers, so Live is known.
	ready   bool
	running bool
}

type observation struct {
	resourceVersion string
	at              time.Time
}

// New builds a Coordinator on c, a client of the cluster that holds the
// Leases (reads must not come from a cache: a stale read could take a
// Lease a peer holds).
func New(c client.Client, opts Options) (*Coordinator, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	return &Coordinator{c: c, opts: opts, seen: map[string]observation{}, held: map[string]bool{}, claimed: map[string]bool{}, departed: map[string]bool{}, lost: make(chan struct{})}, nil
}

// Identity is this replica's identity.
func (co *Coordinator) Identity() string { return co.opts.Identity }

// WriteMargin is how long a request sent while Holds said yes may take and
// still land before a peer may take its key (LeaseDuration less
// RenewDeadline less RenewPeriod): bound fenced requests by less.
func (co *Coordinator) WriteMargin() time.Duration {
	return co.opts.LeaseDuration - co.opts.RenewDeadline - co.opts.RenewPeriod
}

// Lost is closed once this replica must not write for any key: it has
// failed to renew its peer Lease for the renew deadline (its peers take its
// keys once its Lease has run out), or Run has ended. A lost Coordinator
// does not recover; the process restarts.
func (co *Coordinator) Lost() <-chan struct{} { return co.lost }

// Changes returns a channel that receives (without blocking the sender)
// whenever the live peers change, so that the caller re-checks ownership.
func (co *Coordinator) Changes() <-chan struct{} {
	co.mu.Lock()
	defer co.mu.Unlock()
	ch := make(chan struct{}, 1)
	co.changes = append(co.changes, ch)
	return ch
}

// Live are the peers counted live, this replica among them, sorted.
func (co *Coordinator) Live() []string {
	co.mu.Lock()
	defer co.mu.Unlock()
	return slices.Clone(co.live)
}

// Owner is the live peer that should own key: the one with the highest
// rendezvous score; "" while no peer is known live.
func (co *Coordinator) Owner(key string) string {
	co.mu.Lock()
	defer co.mu.Unlock()
	return OwnerAmong(co.live, key)
}

// OwnerAmong is the peer of peers with the highest rendezvous score for
// key, as Owner picks it when peers are live: for tools and tests that
// predict where keys go.
func OwnerAmong(peers []string, key string) string {
	best, bestScore := "", uint64(0)
	for _, p := range peers {
		if s := score(p, key); best == "" || s > bestScore || (s == bestScore && p > best) {
			best, bestScore = p, s
		}
	}
	return best
}

// score is the rendezvous weight of peer for key.
func score(peer, key string) uint64 {
	h := sha256.New()
	h.Write([]byte(peer))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return binary.BigEndian.Uint64(h.Sum(nil)[:8])
}

// Run renews this replica's peer Lease and reads its peers' every renew
// period, and as soon as a peer's lease runs out, until ctx ends; then it
// closes Lost and deletes its peer Lease, which frees every key it held:
// its peers take them at their next round, without waiting for the lease
// to run out. The caller stops writing for its keys before ctx ends. Run
// returns ctx's end, or an error once the replica is lost. Run is called
// once.
func (co *Coordinator) Run(ctx context.Context) error {
	co.mu.Lock()
	if co.running {
		co.mu.Unlock()
		return errors.New("sharding: Run called twice")
	}
	co.running = true
	co.lastRenew = time.Now()
	co.mu.Unlock()
	tick := time.NewTicker(co.opts.RenewPeriod)
	defer tick.Stop()
	defer co.forgetMetrics()
	for {
		// Past the renew deadline this replica is lost for good, even if a
		// renewal would still go through: its peers may have taken its
		// keys.
		if err := co.checkDeadline(); err != nil {
			return err
		}
		if err := co.round(ctx); err != nil && ctx.Err() == nil {
			co.opts.Logger.Error(err, "renewing the peer Lease")
		}
		if err := co.checkDeadline(); err != nil {
			return err
		}
		// Wake at the next tick, when the renew deadline would pass, or
		// when a live peer's lease runs out, so that its keys move at once.
		deadline := time.NewTimer(co.nextWake())
		select {
		case <-ctx.Done():
			deadline.Stop()
			co.lose()
			co.leave()
			return ctx.Err()
		case <-co.lost: // a Holds or Acquire past the deadline
		case <-deadline.C:
		case <-tick.C:
		}
		deadline.Stop()
	}
}

// checkDeadline loses this replica if it is lost already or its last
// renewal was sent more than the renew deadline ago.
func (co *Coordinator) checkDeadline() error {
	if co.writable() {
		return nil
	}
	since, _ := co.renewedWithin()
	return fmt.Errorf("sharding: replica %s lost: its peer Lease not renewed for %s", co.opts.Identity, since.Round(time.Millisecond))
}

// nextWake is how long until the renew deadline passes or the first live
// peer's lease runs out, whichever comes first.
func (co *Coordinator) nextWake() time.Duration {
	co.mu.Lock()
	defer co.mu.Unlock()
	now := time.Now()
	wake := co.lastRenew.Add(co.opts.RenewDeadline)
	for _, peer := range co.live {
		if o, ok := co.seen[peer]; ok && peer != co.opts.Identity {
			// A lease already out (a failed round left it live) waits
			// for the next tick: no busy loop while reads fail.
			if expiry := o.at.Add(co.opts.LeaseDuration); expiry.After(now) && expiry.Before(wake) {
				wake = expiry
			}
		}
	}
	return max(wake.Sub(now), 0)
}

// renewedWithin says how long ago the last successful renewal was sent,
// and whether that is within the renew deadline.
func (co *Coordinator) renewedWithin() (time.Duration, bool) {
	co.mu.Lock()
	defer co.mu.Unlock()
	since := time.Since(co.lastRenew)
	return since, since < co.opts.RenewDeadline
}

// lose closes Lost and forgets the peers and the keys held.
func (co *Coordinator) lose() {
	co.loseOnce.Do(func() { close(co.lost) })
	co.mu.Lock()
	co.held, co.claimed = map[string]bool{}, map[string]bool{}
	keysHeld.WithLabelValues(co.opts.Group, co.opts.Identity).Set(0)
	co.mu.Unlock()
	co.setLive(nil)
}

// writable says whether this replica may write for the keys it holds: not
// lost, and renewed within the renew deadline. Past the deadline it is lost
// for good, here too, so that a replica paused past it writes no more,
// even if a renewal sent before the pause then succeeds.
func (co *Coordinator) writable() bool {
	select {
	case <-co.lost:
		return false
	default:
	}
	if _, ok := co.renewedWithin(); !ok {
		co.lose()
		return false
	}
	return true
}

// round renews the peer Lease and reads the peers'.
func (co *Coordinator) round(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, co.opts.RenewPeriod)
	defer cancel()
	sent := time.Now()
	if err := co.renew(ctx); err != nil {
		return err
	}
	co.mu.Lock()
	select {
	case <-co.lost: // the deadline passed while the renewal was out
	default:
		co.lastRenew = sent
	}
	co.mu.Unlock()
	var leases coordinationv1.LeaseList
	listed := time.Now()
	if err := co.c.List(ctx, &leases, client.InNamespace(co.opts.Namespace), client.MatchingLabels{LabelGroup: co.opts.Group}); err != nil {
		return fmt.Errorf("listing the peer Leases: %w", err)
	}
	now := time.Now()
	co.mu.Lock()
	// A renewal this list shows first landed after the previous list
	// began, so it was sent no later than now: counting from the later of
	// that list's start and a renew period ago, rather than from now, sees
	// a death up to a renew period sooner, and a peer that sent it stops
	// writing a renew deadline after it, at least LeaseDuration less
	// RenewDeadline less RenewPeriod before this replica counts it dead
	// (the margin Options require to be positive, for requests in flight).
	changedAt := now.Add(-co.opts.RenewPeriod)
	if co.lastListed.After(changedAt) {
		changedAt = co.lastListed
	}
	co.lastListed = listed
	var (
		live  []string
		stale []coordinationv1.Lease
	)
	present := map[string]bool{}
	for _, l := range leases.Items {
		peer, ok := strings.CutPrefix(l.Name, peerLeasePrefix(co.opts.Group))
		if !ok {
			continue
		}
		present[peer] = true
		o, known := co.seen[peer]
		if !known || o.resourceVersion != l.ResourceVersion {
			o = observation{resourceVersion: l.ResourceVersion, at: changedAt}
			co.seen[peer] = o
		}
		if peer == co.opts.Identity || now.Sub(o.at) < co.opts.LeaseDuration {
			live = append(live, peer)
		} else {
			stale = append(stale, l)
		}
	}
	for peer := range co.seen {
		if !present[peer] {
			delete(co.seen, peer) // gone: deleted on a clean shutdown
		}
	}
	for peer := range co.departed {
		if !present[peer] {
			delete(co.departed, peer) // its Lease is gone, which says as much
		}
	}
	co.ready = true
	co.mu.Unlock()
	co.setLive(live)
	for _, l := range stale {
		// A dead replica (killed, with an identity no restart reuses)
		// leaves its Lease behind. It has stopped writing, so it goes,
		// unless renewed since: replicas that start later, which would
		// count it live for a lease duration, do not, and every replica
		// takes its keys at its next round.
		if err := client.IgnoreNotFound(co.c.Delete(ctx, &l, client.Preconditions{ResourceVersion: &l.ResourceVersion})); err != nil && !apierrors.IsConflict(err) {
			co.opts.Logger.Error(err, "deleting a dead peer's Lease", "lease", l.Name)
		}
	}
	return nil
}

// setLive records the live peers and, if they changed, tells the
// subscribers.
func (co *Coordinator) setLive(live []string) {
	slices.Sort(live)
	co.mu.Lock()
	defer co.mu.Unlock()
	if slices.Equal(live, co.live) {
		return
	}
	co.opts.Logger.Info("live peers changed", "peers", live, "before", co.live)
	co.live = live
	livePeers.WithLabelValues(co.opts.Group, co.opts.Identity).Set(float64(len(live)))
	for _, ch := range co.changes {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// renew creates or renews this replica's peer Lease.
func (co *Coordinator) renew(ctx context.Context) error {
	now := metav1.NewMicroTime(time.Now())
	var l coordinationv1.Lease
	key := client.ObjectKey{Namespace: co.opts.Namespace, Name: peerLeaseName(co.opts.Group, co.opts.Identity)}
	err := co.c.Get(ctx, key, &l)
	if apierrors.IsNotFound(err) {
		co.mu.Lock()
		renewed := co.ready
		co.mu.Unlock()
		if renewed {
			// A peer deleted it: it counted this replica dead.
			co.lose()
			return fmt.Errorf("the peer Lease %s is gone: a peer counted this replica dead", key.Name)
		}
		l = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{LabelGroup: co.opts.Group}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(co.opts.Identity),
				LeaseDurationSeconds: ptr.To(int32(max(time.Second, co.opts.LeaseDuration.Round(time.Second)) / time.Second)),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}
		if err := co.c.Create(ctx, &l); err != nil {
			return fmt.Errorf("creating the peer Lease: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the peer Lease: %w", err)
	}
	l.Spec.RenewTime = &now
	if err := co.c.Update(ctx, &l); err != nil {
		return fmt.Errorf("renewing the peer Lease: %w", err)
	}
	return nil
}

// leave deletes this replica's peer Lease.
func (co *Coordinator) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), co.opts.RenewPeriod)
	defer cancel()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: co.opts.Namespace, Name: peerLeaseName(co.opts.Group, co.opts.Identity)}}
	if err := client.IgnoreNotFound(co.c.Delete(ctx, l)); err != nil {
		co.opts.Logger.Error(err, "deleting the peer Lease; peers take its keys once it runs out")
	}
}

// Acquire takes key's fencing Lease for this replica if it is free, held
// by this replica already, or held by a peer that is gone (its peer Lease
// deleted, or seen unchanged for the lease duration), and says whether this
// replica holds it now. A replica writes for a key only while Holds says
// so. key must fit a Lease name (a DNS subdomain, as a VirtualCluster's
// name does).
func (co *Coordinator) Acquire(ctx context.Context, key string) (bool, error) {
	co.mu.Lock()
	ready := co.ready
	co.mu.Unlock()
	if !ready || !co.writable() {
		return false, nil // the peers are not known yet, or this replica may not write
	}
	name := keyLeaseName(co.opts.Group, key)
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return false, fmt.Errorf("sharding: key %q: %s", key, strings.Join(errs, "; "))
	}
	now := metav1.NewMicroTime(time.Now())
	var l coordinationv1.Lease
	err := co.c.Get(ctx, client.ObjectKey{Namespace: co.opts.Namespace, Name: name}, &l)
	if apierrors.IsNotFound(err) {
		l = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: co.opts.Namespace, Name: name, Labels: map[string]string{LabelKeyGroup: co.opts.Group}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(co.opts.Identity), AcquireTime: &now, LeaseTransitions: ptr.To[int32](0)},
		}
		co.claim(key)
		err = co.c.Create(ctx, &l)
		if apierrors.IsAlreadyExists(err) {
			return co.lostRace(ctx, key) // another took it first, maybe this replica
		}
		return co.took(key, err)
	}
	if err != nil {
		return false, fmt.Errorf("reading key %s's Lease: %w", key, err)
	}
	switch holder := ptr.Deref(l.Spec.HolderIdentity, ""); {
	case holder == co.opts.Identity:
		return co.took(key, nil)
	case holder != "":
		// Another's: not this replica's, whatever it thought.
		co.forget(key)
		gone, err := co.gone(ctx, holder)
		if err != nil || !gone {
			return false, err
		}
	}
	l.Spec.HolderIdentity = ptr.To(co.opts.Identity)
	l.Spec.AcquireTime = &now
	l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	co.claim(key)
	err = co.c.Update(ctx, &l) // fails on a conflict if another took it meanwhile
	if apierrors.IsConflict(err) {
		return co.lostRace(ctx, key)
	}
	return co.took(key, err)
}

// lostRace settles a take of key whose write met another's: the Lease is
// read again, and the key is this replica's if the winner was this replica
// (two of its takes at once, as a reconcile's and a take-over's), and
// forgotten otherwise. Forgetting it after this replica's own win would
// leave a Lease naming this replica that it never gives up: the key's
// next owner would wait behind it for good.
func (co *Coordinator) lostRace(ctx context.Context, key string) (bool, error) {
	var l coordinationv1.Lease
	err := co.c.Get(ctx, client.ObjectKey{Namespace: co.opts.Namespace, Name: keyLeaseName(co.opts.Group, key)}, &l)
	switch {
	case err == nil && ptr.Deref(l.Spec.HolderIdentity, "") == co.opts.Identity:
		return co.took(key, nil)
	case err != nil && !apierrors.IsNotFound(err):
		// Unknown: keep the claim, so that a Release reads the Lease.
		return false, fmt.Errorf("reading key %s's Lease after a lost race: %w", key, err)
	}
	co.forget(key)
	return false, nil
}

// gone says whether peer may no longer write: its peer Lease is deleted,
// or unchanged since this replica saw it change, at least the lease
// duration ago. It reads the peer Lease, so that a view left stale by
// failed rounds takes no key from a peer that renews. A peer this replica
// had not seen (it joined since the last round) counts live from now.
func (co *Coordinator) gone(ctx context.Context, peer string) (bool, error) {
	co.mu.Lock()
	departed := co.departed[peer]
	co.mu.Unlock()
	if departed {
		return true, nil
	}
	var l coordinationv1.Lease
	err := co.c.Get(ctx, client.ObjectKey{Namespace: co.opts.Namespace, Name: peerLeaseName(co.opts.Group, peer)}, &l)
	co.mu.Lock()
	defer co.mu.Unlock()
	if apierrors.IsNotFound(err) {
		co.departed[peer] = true
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading peer %s's Lease: %w", peer, err)
	}
	o, known := co.seen[peer]
	if !known || o.resourceVersion != l.ResourceVersion {
		co.seen[peer] = observation{resourceVersion: l.ResourceVersion, at: time.Now()}
		return false, nil
	}
	if time.Since(o.at) < co.opts.LeaseDuration {
		return false, nil
	}
	// Past its renew deadline a peer is lost for good and never renews
	// again: it stays gone, without another read.
	co.departed[peer] = true
	return true, nil
}

func (co *Coordinator) took(key string, err error) (bool, error) {
	if err != nil {
		return false, fmt.Errorf("taking key %s's Lease: %w", key, err)
	}
	if !co.writable() {
		// Lost while taking it: the Lease is written, but this replica
		// must not write; its peers take the key once it is counted dead.
		return false, nil
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if !co.held[key] {
		co.held[key] = true
		keysHeld.WithLabelValues(co.opts.Group, co.opts.Identity).Set(float64(len(co.held)))
		handovers.WithLabelValues(co.opts.Group, co.opts.Identity, "acquired").Inc()
	}
	return true, nil
}

// claim records that this replica is about to write key's Lease to take
// it.
func (co *Coordinator) claim(key string) {
	co.mu.Lock()
	defer co.mu.Unlock()
	co.claimed[key] = true
}

// forget records that this replica does not hold key.
func (co *Coordinator) forget(key string) {
	co.mu.Lock()
	defer co.mu.Unlock()
	delete(co.claimed, key)
	if co.held[key] {
		delete(co.held, key)
		keysHeld.WithLabelValues(co.opts.Group, co.opts.Identity).Set(float64(len(co.held)))
		handovers.WithLabelValues(co.opts.Group, co.opts.Identity, "released").Inc()
	}
}

// mayHold says whether this replica holds key's Lease or may: it wrote to
// take it and has not given it up since.
func (co *Coordinator) mayHold(key string) bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.held[key] || co.claimed[key]
}

// Holds says whether this replica holds key's Lease, as far as it knows,
// and may write: not lost, and renewed within the renew deadline.
func (co *Coordinator) Holds(key string) bool {
	if !co.writable() {
		return false
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	return co.held[key]
}

// Release gives key's Lease up if this replica holds it, or may (a take
// whose answer was lost), once it has stopped writing for key, so that the
// next owner takes it at once. It costs no request for a key this replica
// never took. After an error, Release again.
func (co *Coordinator) Release(ctx context.Context, key string) error {
	return co.giveUp(ctx, key, func(l *coordinationv1.Lease) error {
		l.Spec.HolderIdentity = nil
		return co.c.Update(ctx, l)
	})
}

// Remove deletes key's Lease if this replica holds it, or may: for a key
// that is gone for good (a deleted VirtualCluster), once this replica has
// stopped writing for it.
func (co *Coordinator) Remove(ctx context.Context, key string) error {
	return co.giveUp(ctx, key, func(l *coordinationv1.Lease) error {
		return client.IgnoreNotFound(co.c.Delete(ctx, l, client.Preconditions{ResourceVersion: &l.ResourceVersion}))
	})
}

// giveUp applies write to key's Lease if this replica holds it, and
// forgets the key once the Lease is no longer this replica's.
func (co *Coordinator) giveUp(ctx context.Context, key string, write func(*coordinationv1.Lease) error) error {
	if !co.mayHold(key) {
		return nil
	}
	l, err := co.ownLease(ctx, key)
	if err != nil {
		return err
	}
	if l != nil {
		if err := write(l); err != nil {
			return fmt.Errorf("giving key %s's Lease up: %w", key, err)
		}
	}
	co.forget(key)
	return nil
}

// ownLease reads key's Lease; nil if it does not exist or another holds it.
func (co *Coordinator) ownLease(ctx context.Context, key string) (*coordinationv1.Lease, error) {
	var l coordinationv1.Lease
	err := co.c.Get(ctx, client.ObjectKey{Namespace: co.opts.Namespace, Name: keyLeaseName(co.opts.Group, key)}, &l)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading key %s's Lease: %w", key, err)
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != co.opts.Identity {
		return nil, nil
	}
	return &l, nil
}

func peerLeasePrefix(group string) string { return group + "-peer-" }

func peerLeaseName(group, identity string) string { return peerLeasePrefix(group) + identity }

func keyLeaseName(group, key string) string { return group + "-key-" + key }
