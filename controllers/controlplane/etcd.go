package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane"
)

// annotationEtcdVoters, on the members' ConfigMap, is how many voting
// members the controller last found the etcd to have, with a
// configuration of each: while it is the count wanted, the etcd need not
// be asked.
const annotationEtcdVoters = "tenantry.dev/etcd-voting-members"

// annotationEtcdClaims, on the members' ConfigMap, is the UID of the
// claim that holds each member's data, by member (JSON): a member whose
// claim is another has lost its data, and is replaced; a claim of an
// earlier member is not one a new member starts on.
const annotationEtcdClaims = "tenantry.dev/etcd-member-claims"

// etcdMembers is the membership of the etcd of storage Etcd as the
// controller keeps it: the members' configuration files, one per member
// that runs, and how the membership stands.
type etcdMembers struct {
	files map[string]string
	// voters is annotationEtcdVoters.
	voters int
	// claims is annotationEtcdClaims.
	claims map[string]types.UID
	// running is how many members' Pods its StatefulSet runs, for a
	// ConfigMap that is gone while they run: they keep running, and
	// their files are written again from the membership.
	running int32
	// note says what changes, if anything does: for the condition.
	note string
}

// readEtcdMembers reads the members' ConfigMap of spec's etcd, as the
// controller last wrote it (not from a cache: what it decides on
// membership stands on it).
func (r *Reconciler) readEtcdMembers(ctx context.Context, spec controlplane.Spec) (etcdMembers, error) {
	var cm corev1.ConfigMap
	err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: controlplane.Namespace(spec.Cluster), Name: controlplane.EtcdConfigMapName}, &cm)
	if client.IgnoreNotFound(err) != nil {
		return etcdMembers{}, fmt.Errorf("reading etcd's members (ConfigMap %s): %w", controlplane.EtcdConfigMapName, err)
	}
	m := etcdMembers{files: map[string]string{}}
	maps.Copy(m.files, cm.Data)
	m.voters, _ = strconv.Atoi(cm.Annotations[annotationEtcdVoters])
	m.claims = map[string]types.UID{}
	if raw := cm.Annotations[annotationEtcdClaims]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &m.claims); err != nil {
			return etcdMembers{}, fmt.Errorf("ConfigMap %s's annotation %s: %w", controlplane.EtcdConfigMapName, annotationEtcdClaims, err)
		}
	}
	return m, nil
}

// pods is how many members' Pods run: ordinals up to the highest
// configured one.
func (m etcdMembers) pods() int32 {
	if len(m.files) == 0 {
		return m.running
	}
	n := -1
	for key := range m.files {
		if ordinal, ok := controlplane.EtcdMemberOrdinal(strings.TrimSuffix(key, ".json")); ok {
			n = max(n, ordinal)
		}
	}
	return int32(n + 1)
}

// settled: the etcd has the members wanted, each voting.
func (m etcdMembers) settled(want int) bool {
	return m.voters == want && len(m.files) == want
}

// configMap is the members' ConfigMap to apply.
func (m etcdMembers) configMap(spec controlplane.Spec) *corev1.ConfigMap {
	cm := spec.EtcdConfigMap(m.files)
	cm.Annotations = map[string]string{annotationEtcdVoters: strconv.Itoa(m.voters)}
	if len(m.claims) > 0 {
		claims, _ := json.Marshal(m.claims) // a map of strings
		cm.Annotations[annotationEtcdClaims] = string(claims)
	}
	return cm
}

// reconcileEtcdMembers moves the membership of the etcd of storage Etcd
// one step towards spec.EtcdMembers(): the first member starts the
// cluster; each other joins it as a learner (etcd's member add), then
// votes once it has caught up (member promote); one too many leaves it
// (member remove), the last first. A member keeps its data and its
// address (its Service's) through a Pod's loss or a version change, and
// needs no step. The etcd is asked through a port forwarded to a ready
// member, as a snapshot reads it, and only while its membership is not
// yet as wanted.
func (r *Reconciler) reconcileEtcdMembers(ctx context.Context, vc *tenantryv1alpha1.VirtualCluster, spec controlplane.Spec, m etcdMembers) (etcdMembers, error) {
	want := spec.EtcdMembers()
	if len(m.files) == 0 && m.running == 0 {
		// The first member starts a cluster of its own.
		first := controlplane.EtcdMemberName(0)
		config, err := spec.EtcdConfig(0, map[string]string{first: controlplane.EtcdPeerURL(spec.EtcdMemberIPs[0])}, false)
		if err != nil {
			return m, err
		}
		m.files[controlplane.EtcdConfigFile(0)] = config
		return m, nil
	}
	if spec.Asleep || spec.Restoring {
		return m, nil
	}
	claims, err := r.etcdClaims(ctx, spec)
	if err != nil {
		return m, err
	}
	if m.settled(want) && !m.lostData(claims) {
		return m, nil
	}
	ready, err := r.etcdReady(ctx, spec)
	if err != nil || !ready {
		m.note = "its etcd has no ready member to change its membership through"
		return m, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	storage, err := controlplane.OpenStorage(ctx, r.host, r.apiReader, vc)
	if err != nil {
		return m, fmt.Errorf("reaching etcd to change its members: %w", err)
	}
	defer storage.Close()
	etcd := storage.Client
	list, err := etcd.MemberList(ctx)
	if err != nil {
		return m, fmt.Errorf("listing etcd's members: %w", err)
	}
	log := ctrl.LoggerFrom(ctx)
	members := map[int]*etcdserverpb.Member{}
	for _, member := range list.Members {
		ordinal, ok := etcdOrdinal(spec, member, len(list.Members))
		if !ok {
			return m, fmt.Errorf("etcd member %x (%q, %v) is none of the members Tenantry made, at none of their Services' addresses", member.ID, member.Name, member.PeerURLs)
		}
		if other := members[ordinal]; other != nil {
			return m, fmt.Errorf("etcd members %x and %x are both %s", other.ID, member.ID, controlplane.EtcdMemberName(ordinal))
		}
		members[ordinal] = member
	}
	// Each member at its Service's address: one made before members had
	// Services (a single member, on its Pod's loopback) moves to it.
	for ordinal, member := range members {
		url := controlplane.EtcdPeerURL(spec.EtcdMemberIPs[ordinal])
		if !slices.Equal(member.PeerURLs, []string{url}) {
			if _, err := etcd.MemberUpdate(ctx, member.ID, []string{url}); err != nil {
				return m, fmt.Errorf("moving etcd member %s to %s: %w", controlplane.EtcdMemberName(ordinal), url, err)
			}
			log.Info("moved an etcd member to its Service's address", "member", controlplane.EtcdMemberName(ordinal), "peerURL", url)
		}
	}
	// A learner votes once it has caught up; until then, the membership
	// changes no further.
	for ordinal, member := range members {
		if !member.IsLearner {
			continue
		}
		_, err := etcd.MemberPromote(ctx, member.ID)
		if errors.Is(err, rpctypes.ErrMemberLearnerNotReady) {
			m.note = fmt.Sprintf("etcd member %s joins: it catches up with the others", controlplane.EtcdMemberName(ordinal))
			continue
		}
		if err != nil {
			return m, fmt.Errorf("promoting etcd member %s: %w", controlplane.EtcdMemberName(ordinal), err)
		}
		log.Info("an etcd member joined and votes", "member", controlplane.EtcdMemberName(ordinal))
		member.IsLearner = false
	}
	// A voter whose claim is another than the one its data were on has
	// lost them: it leaves, to join again anew (below, or next time).
	for ordinal, member := range members {
		name := controlplane.EtcdMemberName(ordinal)
		if member.IsLearner || m.note != "" || m.claims[name] == "" || claims[name] == "" || claims[name] == m.claims[name] {
			continue
		}
		if _, err := etcd.MemberRemove(ctx, member.ID); err != nil {
			return m, fmt.Errorf("removing etcd member %s, whose data are lost (its claim is another): %w", name, err)
		}
		log.Info("removed an etcd member whose data are lost, to join again anew", "member", name)
		delete(members, ordinal)
		delete(m.files, controlplane.EtcdConfigFile(ordinal))
		m.note = fmt.Sprintf("etcd member %s lost its data: it joins again", name)
	}
	cluster := map[string]string{}
	for ordinal := range members {
		cluster[controlplane.EtcdMemberName(ordinal)] = controlplane.EtcdPeerURL(spec.EtcdMemberIPs[ordinal])
	}
	switch {
	case m.note != "":
	case len(members) < want:
		ordinal := 0
		for members[ordinal] != nil {
			ordinal++
		}
		name, url := controlplane.EtcdMemberName(ordinal), controlplane.EtcdPeerURL(spec.EtcdMemberIPs[ordinal])
		m.note = fmt.Sprintf("etcd member %s joins", name)
		if _, ok := m.files[controlplane.EtcdConfigFile(ordinal)]; ok {
			// Of a member the cluster no longer has: its Pod goes first.
			delete(m.files, controlplane.EtcdConfigFile(ordinal))
			return m, nil
		}
		cleared, err := r.clearEtcdMember(ctx, spec, ordinal, m.claims[name])
		if err != nil || !cleared {
			return m, err
		}
		if _, err := etcd.MemberAddAsLearner(ctx, []string{url}); err != nil {
			return m, fmt.Errorf("adding etcd member %s: %w", name, err)
		}
		log.Info("added an etcd member, as a learner", "member", name, "peerURL", url)
		cluster[name] = url
		members[ordinal] = &etcdserverpb.Member{Name: name, IsLearner: true}
		delete(m.claims, name)
	case len(members) > want:
		ordinal := slices.Max(slices.Collect(maps.Keys(members)))
		name := controlplane.EtcdMemberName(ordinal)
		if _, err := etcd.MemberRemove(ctx, members[ordinal].ID); err != nil {
			return m, fmt.Errorf("removing etcd member %s: %w", name, err)
		}
		log.Info("removed an etcd member", "member", name)
		delete(cluster, name)
		delete(members, ordinal)
		m.note = fmt.Sprintf("etcd member %s leaves", name)
	}
	// A member that joins is told the cluster it joins. One that has
	// joined is told of itself alone: with its data it reads none of it,
	// and without (its volume lost) it finds no peer to join through and
	// does not start, rather than come back as the member it was with
	// none of what it voted for and agreed to. No file starts a cluster.
	files := map[string]string{}
	for ordinal, member := range members {
		joins := cluster
		if !member.IsLearner {
			name := controlplane.EtcdMemberName(ordinal)
			joins = map[string]string{name: cluster[name]}
		}
		if files[controlplane.EtcdConfigFile(ordinal)], err = spec.EtcdConfig(ordinal, joins, true); err != nil {
			return m, err
		}
	}
	m.files, m.voters = files, 0
	// The claims of the voters, on which their data are.
	for ordinal, member := range members {
		if name := controlplane.EtcdMemberName(ordinal); !member.IsLearner && claims[name] != "" {
			m.claims[name] = claims[name]
		}
	}
	if len(members) == want && m.note == "" {
		m.voters = want
	}
	return m, nil
}

// lostData: a member's claim is another than the one its data were on.
func (m etcdMembers) lostData(claims map[string]types.UID) bool {
	for name, uid := range m.claims {
		if _, member := m.files[controlplane.EtcdConfigFile(ordinalOf(name))]; member && claims[name] != "" && claims[name] != uid {
			return true
		}
	}
	return false
}

// ordinalOf is the ordinal of member name, -1 for none.
func ordinalOf(name string) int {
	if ordinal, ok := controlplane.EtcdMemberOrdinal(name); ok {
		return ordinal
	}
	return -1
}

// etcdClaims are the UIDs of the claims of spec's etcd's members, by
// member.
func (r *Reconciler) etcdClaims(ctx context.Context, spec controlplane.Spec) (map[string]types.UID, error) {
	var list corev1.PersistentVolumeClaimList
	if err := r.workloads.List(ctx, &list, client.InNamespace(controlplane.Namespace(spec.Cluster)), client.MatchingLabels(controlplane.Labels(spec.Cluster))); err != nil {
		return nil, fmt.Errorf("listing etcd's claims: %w", err)
	}
	claims := map[string]types.UID{}
	for _, claim := range list.Items {
		if name, ok := strings.CutPrefix(claim.Name, controlplane.DataVolumeName+"-"); ok && claim.DeletionTimestamp.IsZero() {
			if _, member := controlplane.EtcdMemberOrdinal(name); member {
				claims[name] = claim.UID
			}
		}
	}
	return claims, nil
}

// etcdOrdinal is the ordinal of an etcd member: by its name, by its
// address for one that has not started yet, and 0 for the single member
// of a cluster made before members had names of their own.
func etcdOrdinal(s controlplane.Spec, member *etcdserverpb.Member, members int) (int, bool) {
	if ordinal, ok := controlplane.EtcdMemberOrdinal(member.Name); ok {
		return ordinal, ordinal < len(s.EtcdMemberIPs)
	}
	for ordinal, ip := range s.EtcdMemberIPs {
		if slices.Equal(member.PeerURLs, []string{controlplane.EtcdPeerURL(ip)}) {
			return ordinal, true
		}
	}
	return 0, members == 1
}

// etcdReady: a member of spec's etcd is ready.
func (r *Reconciler) etcdReady(ctx context.Context, spec controlplane.Spec) (bool, error) {
	var sts appsv1.StatefulSet
	err := r.workloads.Get(ctx, client.ObjectKey{Namespace: controlplane.Namespace(spec.Cluster), Name: controlplane.EtcdName}, &sts)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil && sts.Status.ReadyReplicas > 0, err
}

// clearEtcdMember makes way for etcd member ordinal to join: the claim
// an earlier member of that ordinal left (earlier, its UID), with data of
// a member the cluster no longer has, goes first, and its Pod with it. A
// claim made since is empty, and the way is clear. It says whether it
// is; if not, they are going.
func (r *Reconciler) clearEtcdMember(ctx context.Context, spec controlplane.Spec, ordinal int, earlier types.UID) (bool, error) {
	ns, name := controlplane.Namespace(spec.Cluster), controlplane.EtcdMemberName(ordinal)
	var claim corev1.PersistentVolumeClaim
	key := client.ObjectKey{Namespace: ns, Name: controlplane.DataVolumeName + "-" + name}
	switch err := r.apiReader.Get(ctx, key, &claim); {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading the claim %s: %w", key, err)
	case !claim.DeletionTimestamp.IsZero():
		return false, nil
	case claim.UID != earlier && earlier != "":
		return true, nil // made since
	}
	// Its Pod holds it: both go.
	for _, o := range []client.Object{&claim, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}} {
		if err := r.client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting %s/%s, of an earlier etcd member: %w", ns, o.GetName(), err)
		}
	}
	ctrl.LoggerFrom(ctx).Info("deleted the claim and Pod of an earlier etcd member, for a new one to join", "claim", key.Name)
	return false, nil
}
