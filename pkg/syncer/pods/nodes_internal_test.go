package pods

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// A virtual node shows its host node's capacity, conditions and labels,
// never the machine's identity, and its addresses only when asked to.
func TestVirtualNodeCopiesWhatTheTenantMaySee(t *testing.T) {
	host := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{
			corev1.LabelTopologyZone: "zone-a", "tenantry.dev/cluster": "other", syncer.LabelManagedBy: "someone",
		}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "dedicated", Effect: corev1.TaintEffectNoExecute}}},
		Status: corev1.NodeStatus{
			Capacity:        corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")},
			Allocatable:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("7")},
			Conditions:      []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.240.0.1"}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo:        corev1.NodeSystemInfo{MachineID: "m", SystemUUID: "s", BootID: "b", KubeletVersion: "v1.37.2"},
		},
	}
	for _, expose := range []bool{false, true} {
		r := &virtualNodes{exposeAddresses: expose}
		node := &corev1.Node{}
		r.setSpec(host, node)
		st := r.status(host, corev1.NodeStatus{})
		wantLabels := map[string]string{corev1.LabelTopologyZone: "zone-a", syncer.LabelManagedBy: syncer.ManagedByValue}
		if !equality.Semantic.DeepEqual(node.Labels, wantLabels) || !node.Spec.Unschedulable || len(node.Spec.Taints) != 0 {
			t.Errorf("expose=%v: labels %v, unschedulable %v, taints %v; want %v, cordoned, no taints",
				expose, node.Labels, node.Spec.Unschedulable, node.Spec.Taints, wantLabels)
		}
		if !equality.Semantic.DeepEqual(st.Capacity, host.Status.Capacity) || !equality.Semantic.DeepEqual(st.Allocatable, host.Status.Allocatable) ||
			!equality.Semantic.DeepEqual(st.Conditions, host.Status.Conditions) {
			t.Errorf("expose=%v: capacity, allocatable or conditions not the host's: %+v", expose, st)
		}
		if st.NodeInfo.MachineID != "" || st.NodeInfo.SystemUUID != "" || st.NodeInfo.BootID != "" || st.NodeInfo.KubeletVersion != "v1.37.2" {
			t.Errorf("expose=%v: node info %+v: want the machine's IDs gone, the rest kept", expose, st.NodeInfo)
		}
		wantAddresses := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "node-1"}}
		wantPort := int32(0)
		if expose {
			wantAddresses, wantPort = host.Status.Addresses, 10250
		}
		if !equality.Semantic.DeepEqual(st.Addresses, wantAddresses) || st.DaemonEndpoints.KubeletEndpoint.Port != wantPort {
			t.Errorf("expose=%v: addresses %v, kubelet port %d; want %v, %d", expose, st.Addresses, st.DaemonEndpoints.KubeletEndpoint.Port, wantAddresses, wantPort)
		}
	}
}

// A virtual node keeps the labels its tenant set, but for a key its host
// node has (the host's value wins); a label the host node drops goes; and
// a node made before records were kept takes the host's labels alone.
func TestVirtualNodeKeepsTheTenantsOwnLabels(t *testing.T) {
	r := &virtualNodes{}
	host := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{
		corev1.LabelTopologyZone: "zone-a", "disk": "ssd",
	}}}
	node := &corev1.Node{}
	r.setSpec(host, node)
	node.ResourceVersion = "1"
	if got := node.Annotations[syncer.AnnotationCopiedLabels]; got != "disk,"+corev1.LabelTopologyZone {
		t.Fatalf("record of the host's labels %q", got)
	}
	// The tenant labels the node, and tries to move it to another zone.
	node.Labels["team"] = "blue"
	node.Labels[corev1.LabelTopologyZone] = "zone-b"
	// The host node drops a label.
	delete(host.Labels, "disk")
	r.setSpec(host, node)
	want := map[string]string{corev1.LabelTopologyZone: "zone-a", "team": "blue", syncer.LabelManagedBy: syncer.ManagedByValue}
	if !equality.Semantic.DeepEqual(node.Labels, want) {
		t.Errorf("labels %v; want %v", node.Labels, want)
	}
	if own := ownLabels(node); !equality.Semantic.DeepEqual(own, map[string]string{"team": "blue"}) {
		t.Errorf("the tenant's own labels %v; want team=blue", own)
	}

	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", ResourceVersion: "7", Labels: map[string]string{
		"disk": "ssd", corev1.LabelTopologyZone: "zone-a", syncer.LabelManagedBy: syncer.ManagedByValue,
	}}}
	r.setSpec(host, old)
	if want := map[string]string{corev1.LabelTopologyZone: "zone-a", syncer.LabelManagedBy: syncer.ManagedByValue}; !equality.Semantic.DeepEqual(old.Labels, want) {
		t.Errorf("a node without a record: labels %v; want the host's alone, %v", old.Labels, want)
	}
}
