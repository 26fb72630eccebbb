package controlplane

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// etcdMembers is the membership of the etcd of storage Etcd as the
// controller keeps it: the members' configuration files, one per member
// that runs, and how the membership stands.
type etcdMembers struct {
	files map[string]string
	// voters is annotationEtcdVoters.
	voters int
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
	return m, nil
}

// pods is how many members' Pods run: ordinals 0 to pods-1, each
// configured.
func (m etcdMembers) pods() int32 {
	n := 0
	for ; m.files[controlplane.EtcdConfigFile(n)] != ""; n++ {
	}
	return int32(n)
}

// settled: the etcd has the members wanted, each voting.
func (m etcdMembers) settled(want int) bool {
	return m.voters == want && len(m.files) == want
}

// configMap is the members' ConfigMap to apply.
func (m etcdMembers) configMap(spec controlplane.Spec) *corev1.ConfigMap {
	cm := spec.EtcdConfigMap(m.files)
	cm.Annotations = map[string]string{annotationEtcdVoters: strconv.Itoa(m.voters)}
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
	if len(m.files) == 0 {
		// The first member starts a cluster of its own.
		first := controlplane.EtcdMemberName(0)
		config, err := spec.EtcdConfig(0, map[string]string{first: controlplane.EtcdPeerURL(spec.EtcdMemberIPs[0])}, false)
		if err != nil {
			return m, err
		}
		m.files[controlplane.EtcdConfigFile(0)] = config
		return m, nil
	}
	if m.settled(want) || spec.Asleep || spec.Restoring {
		return m, nil
	}
	ready, err := r.etcdReady(ctx, spec)
	if err != nil || !ready {
		m.note = "its etcd has no ready member to change its membership through"
		return m, err
	}
	storage, err := controlplane.OpenStorage(ctx, r.host, r.apiReader, vc)
	if err != nil {
		return m, fmt.Errorf("reaching etcd to change its members: %w", err)
	}
	defer storage.Close()
	etcd := storage.Client
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := etcd.MemberList(ctx)
	if err != nil {
		return m, fmt.Errorf("listing etcd's members: %w", err)
	}
	log := ctrl.LoggerFrom(ctx)
	members := map[int]*etcdserverpb.Member{}
	for _, member := range list.Members {
		ordinal, ok := etcdOrdinal(spec, member, len(list.Members))
		if !ok {
			return m, fmt.Errorf("etcd member %x (%q, %v) is none of the members Tenantry made: remove it (etcdctl member remove)", member.ID, member.Name, member.PeerURLs)
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
		cleared, err := r.clearEtcdMember(ctx, spec, ordinal)
		if err != nil || !cleared {
			return m, err
		}
		if _, err := etcd.MemberAddAsLearner(ctx, []string{url}); err != nil {
			return m, fmt.Errorf("adding etcd member %s: %w", name, err)
		}
		log.Info("added an etcd member, as a learner", "member", name, "peerURL", url)
		cluster[name] = url
		members[ordinal] = &etcdserverpb.Member{Name: name, IsLearner: true}
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
	// Every member's file names the cluster as it now is: one that
	// starts again without its data joins it, and none starts a cluster
	// of its own.
	files := map[string]string{}
	for ordinal := range members {
		if files[controlplane.EtcdConfigFile(ordinal)], err = spec.EtcdConfig(ordinal, cluster, true); err != nil {
			return m, err
		}
	}
	m.files, m.voters = files, 0
	if len(members) == want && m.note == "" {
		m.voters = want
	}
	return m, nil
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
// an earlier member of that ordinal left holds data of a member the
// cluster no longer has, which would keep it from starting. It says
// whether the way is clear; if not, it is being cleared.
func (r *Reconciler) clearEtcdMember(ctx context.Context, spec controlplane.Spec, ordinal int) (bool, error) {
	ns, name := controlplane.Namespace(spec.Cluster), controlplane.EtcdMemberName(ordinal)
	var pod corev1.Pod
	switch err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod); {
	case err == nil:
		return false, nil // going, as its StatefulSet shrank
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("reading Pod %s/%s: %w", ns, name, err)
	}
	var claim corev1.PersistentVolumeClaim
	switch err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: controlplane.DataVolumeName + "-" + name}, &claim); {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading the claim %s/%s: %w", ns, claim.Name, err)
	case claim.DeletionTimestamp.IsZero():
		if err := r.client.Delete(ctx, &claim, client.Preconditions{UID: &claim.UID}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting the claim %s/%s of an earlier etcd member: %w", ns, claim.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("deleted the claim of an earlier etcd member, for a new one to join", "claim", claim.Name)
	}
	return false, nil
}
