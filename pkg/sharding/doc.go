// Package sharding spreads keys, such as VirtualClusters, over the live
// replicas of a controller, with Kubernetes Leases in one namespace as the
// only shared state.
//
// # Membership
//
// Every replica runs a Coordinator, which holds a peer Lease of its own
// (named "<group>-peer-<identity>", labelled with the group) and renews it
// every RenewPeriod. A replica counts a peer live while it has seen that
// peer's Lease change within LeaseDuration, by its own clock, as client-go's
// leader election does: no two clocks are compared. (A change counts from
// the start of the previous read of the peers, which came before it, so
// that a death is seen up to a RenewPeriod sooner than from the read that
// shows the change.) A replica whose own renewals have failed for
// RenewDeadline counts itself lost: Lost is closed, and it must stop
// writing for every key at once, before its peers can count it dead.
// RenewPeriod must be shorter than LeaseDuration less RenewDeadline, the
// margin between the two. The first replica that counts a peer dead
// deletes its Lease (unless renewed since), so that replicas started later
// do not count it live. A replica that stops cleanly
// deletes its peer Lease, which frees every key it held: its peers take
// them at their next round.
//
// # Ownership
//
// Owner picks, for a key, the live peer with the highest rendezvous
// (highest random weight) score: a hash of the peer's identity and the key.
// Every replica that sees the same peers picks the same owner, and a peer
// that joins or leaves moves only the keys it wins or held, about 1/N of
// them.
//
// # Fencing
//
// Ownership as computed is advice: during a change two replicas may each
// believe a key theirs for a moment. A key's Lease ("<group>-key-<key>")
// fences it: Acquire takes it only when it is free, already held by this
// replica, or held by a peer that is gone (its peer Lease deleted, or seen
// unchanged for LeaseDuration; a peer first seen counts live from then),
// and a replica writes for a key only while Holds says so: it holds the
// key's Lease, and its last successful renewal was sent within
// RenewDeadline. A key's Lease is written only when it changes hands, not
// renewed: its holder's peer Lease stands for it. So the steady-state write
// cost is one peer Lease renewal per replica per RenewPeriod, whatever the
// number of keys. Remove deletes the Lease of a key gone for good.
//
// # Metrics
//
// tenantry_sharding_keys_held, tenantry_sharding_live_peers and
// tenantry_sharding_handovers_total{direction="acquired"|"released"}, by
// group and replica, in controller-runtime's metrics registry.
package sharding
