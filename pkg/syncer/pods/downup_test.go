package pods

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// tenantPod is a Pod as a tenant creates it, before mutate changes it.
func tenantPod(mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u1"},
		Spec: corev1.PodSpec{
			ServiceAccountName: "builder",
			Containers:         []corev1.Container{{Name: "web", Image: "web:v1"}},
			InitContainers:     []corev1.Container{{Name: "init", Image: "init:v1"}},
		},
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

// envFrom is the Secret key that container c's variable name comes from,
// if it does.
func envFrom(c corev1.Container, name string) (secret, key string) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			return e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key
		}
	}
	return "", ""
}

// What the Pod syncer's Down makes of a new tenant Pod: scheduled by the host, with
// no host token and the way to its own tenant's API server, under the
// default Policy; and of an existing one: only what a Pod may change.
func TestDown(t *testing.T) {
	s := Syncer(Options{})
	for _, tc := range []struct {
		name    string
		tenant  *corev1.Pod
		current *corev1.Pod // the host Pod as it is; nil to create
		refused string      // part of the refusal; "" if copied
		check   func(t *testing.T, host *corev1.Pod)
	}{
		{
			name: "created: left to the host's scheduler, on the node the tenant bound it to, no host token, the tenant's service account named",
			tenant: tenantPod(func(p *corev1.Pod) {
				p.Spec.NodeName = "tenant-node-1"
				p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
			}),
			check: func(t *testing.T, host *corev1.Pod) {
				if host.Spec.NodeName != "" {
					t.Errorf("nodeName %q, want the host's scheduler to pick", host.Spec.NodeName)
				}
				if a := host.Spec.Affinity; a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
					!equality.Semantic.DeepEqual(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, nodeTerms([]string{"tenant-node-1"})) {
					t.Errorf("affinity %+v, want the node the tenant named, and it alone", host.Spec.Affinity)
				}
				if ptr.Deref(host.Spec.AutomountServiceAccountToken, true) {
					t.Error("the host's service account token is mounted")
				}
				if host.Spec.ServiceAccountName != "builder" || host.Spec.DeprecatedServiceAccount != "builder" {
					t.Errorf("service account %q/%q, want builder", host.Spec.ServiceAccountName, host.Spec.DeprecatedServiceAccount)
				}
				if len(host.Spec.EphemeralContainers) != 0 {
					t.Errorf("ephemeral containers went down: %v", host.Spec.EphemeralContainers)
				}
			},
		},
		{
			name: "created: the token volume the tenant's admission added, and every container, reach the tenant's API server through the Pod's access Secret",
			tenant: tenantPod(func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				}}}}}
			}),
			check: func(t *testing.T, host *corev1.Pod) {
				sources := host.Spec.Volumes[0].Projected.Sources
				if len(sources) != 2 {
					t.Fatalf("%d projections, want the token's and the CA's", len(sources))
				}
				for i, path := range []string{"token", "ca.crt"} {
					src := sources[i]
					if src.ServiceAccountToken != nil || src.ConfigMap != nil || src.Secret == nil || src.Secret.Name != "web"+APIAccessSecretSuffix ||
						len(src.Secret.Items) != 1 || src.Secret.Items[0].Path != path {
						t.Errorf("projection %+v, want %s from the Pod's access Secret", src, path)
					}
				}
				if len(host.Spec.InitContainers) != 1 || len(host.Spec.Containers) != 1 {
					t.Fatalf("%d init containers and %d containers, want 1 and 1", len(host.Spec.InitContainers), len(host.Spec.Containers))
				}
				for _, c := range append(host.Spec.InitContainers, host.Spec.Containers...) {
					if secret, _ := envFrom(c, "KUBERNETES_SERVICE_HOST"); secret != "web"+APIAccessSecretSuffix {
						t.Errorf("container %s: KUBERNETES_SERVICE_HOST from Secret %q, want %q", c.Name, secret, "web"+APIAccessSecretSuffix)
					}
				}
			},
		},
		{
			name: "created: priority, scheduler, runtime class, tolerations and node-role selectors left to the host",
			tenant: tenantPod(func(p *corev1.Pod) {
				p.Spec.PriorityClassName, p.Spec.Priority = "system-node-critical", ptr.To[int32](2000001000)
				p.Spec.SchedulerName, p.Spec.RuntimeClassName = "tenant-scheduler", ptr.To("kata")
				p.Spec.Tolerations = []corev1.Toleration{
					{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
					{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				}
				p.Spec.NodeSelector = map[string]string{"node-role.kubernetes.io/control-plane": "", "disk": "ssd"}
			}),
			check: func(t *testing.T, host *corev1.Pod) {
				spec := host.Spec
				if spec.PriorityClassName != "" || spec.Priority != nil || spec.SchedulerName != "" || spec.RuntimeClassName != nil {
					t.Errorf("priority %q/%v, scheduler %q, runtime class %v reached the host", spec.PriorityClassName, spec.Priority, spec.SchedulerName, spec.RuntimeClassName)
				}
				if len(spec.Tolerations) != 1 || spec.Tolerations[0].Key != corev1.TaintNodeNotReady {
					t.Errorf("tolerations %v, want only the not-ready one", spec.Tolerations)
				}
				if want := map[string]string{"disk": "ssd"}; !equality.Semantic.DeepEqual(spec.NodeSelector, want) {
					t.Errorf("node selector %v, want %v", spec.NodeSelector, want)
				}
			},
		},
		{
			name: "refused: a hostPath volume",
			tenant: tenantPod(func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
			}),
			refused: "volume root is of type hostPath",
		},
		{
			name: "refused: another Pod's API access Secret",
			tenant: tenantPod(func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "steal", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db" + APIAccessSecretSuffix}}}}
			}),
			refused: APIAccessSecretSuffix,
		},
		{
			name: "updated: images, the deadline and scheduling gates the tenant removed follow the tenant, the rest stays as the host has it (a gate the host added among it)",
			tenant: tenantPod(func(p *corev1.Pod) {
				p.Spec.Containers[0].Image, p.Spec.InitContainers[0].Image = "web:v2", "init:v2"
				p.Spec.ActiveDeadlineSeconds = ptr.To[int64](60)
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "late", Image: "late:v1"}) // immutable: not taken
				p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}, {Name: "tenant.example/added-later"}}
			}),
			current: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{ResourceVersion: "3", Annotations: map[string]string{
					AnnotationTenantSchedulingGates: "kueue.x-k8s.io/admission,example.com/quota",
				}},
				Spec: corev1.PodSpec{NodeName: "kwok-node-1", SchedulerName: corev1.DefaultSchedulerName,
					SchedulingGates: []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/admission"}, {Name: "host.example/admission"}, {Name: "example.com/quota"}},
					Containers:      []corev1.Container{{Name: "web", Image: "web:v1"}},
					InitContainers:  []corev1.Container{{Name: "init", Image: "init:v1"}}},
			},
			check: func(t *testing.T, host *corev1.Pod) {
				if host.Spec.Containers[0].Image != "web:v2" || host.Spec.InitContainers[0].Image != "init:v2" {
					t.Errorf("images %s, %s; want the tenant's v2", host.Spec.Containers[0].Image, host.Spec.InitContainers[0].Image)
				}
				if g := host.Spec.SchedulingGates; len(g) != 2 || g[0].Name != "host.example/admission" || g[1].Name != "example.com/quota" {
					t.Errorf("scheduling gates %v; want the one the tenant removed gone, the host's kept, and none added", g)
				}
				if ptr.Deref(host.Spec.ActiveDeadlineSeconds, 0) != 60 {
					t.Errorf("activeDeadlineSeconds %v, want 60", host.Spec.ActiveDeadlineSeconds)
				}
				if host.Spec.NodeName != "kwok-node-1" || host.Spec.SchedulerName != corev1.DefaultSchedulerName || len(host.Spec.Containers) != 1 {
					t.Errorf("the host's spec changed: node %q, scheduler %q, %d containers", host.Spec.NodeName, host.Spec.SchedulerName, len(host.Spec.Containers))
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var current client.Object
			if tc.current != nil {
				current = tc.current
			}
			h, err := s.HostCopy("vc", tc.tenant, current)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("HostCopy = %v, want a refusal naming %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, h.(*corev1.Pod))
		})
	}
}

// A tenant Pod shows its host node's IP only when node addresses are
// shown; otherwise its virtual node's (the kubelet API's endpoint), or
// none.
func TestUpHidesTheHostIP(t *testing.T) {
	host := tenantPod(func(p *corev1.Pod) {
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "10.240.0.1", HostIPs: []corev1.HostIP{{IP: "10.240.0.1"}}}
	})
	for _, tc := range []struct {
		name   string
		hostIP func() string
		want   string
	}{
		{"shown", nil, "10.240.0.1"},
		{"hidden", func() string { return "" }, ""},
		{"the virtual node's", func() string { return "192.0.2.10" }, "192.0.2.10"},
	} {
		tenant := tenantPod(nil)
		copyStatus(host, tenant, tc.hostIP)
		if got := tenant.Status.HostIP; got != tc.want || (got == "") != (len(tenant.Status.HostIPs) == 0) || got != "" && tenant.Status.HostIPs[0].IP != got {
			t.Errorf("%s: hostIP %q, hostIPs %v; want %q", tc.name, got, tenant.Status.HostIPs, tc.want)
		}
	}
	if shownHostIP(Options{ExposeNodeAddresses: true}) != nil || shownHostIP(Options{})() != "" {
		t.Error("shownHostIP: want the host's with addresses exposed, none by default")
	}
}

// What Pods' Up writes to the tenant Pod: a binding to the host Pod's node
// once the host scheduled it, then the host's status (the tenant's own QoS
// class kept), and nothing when nothing changed.
func TestUp(t *testing.T) {
	running := corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "10.244.1.7", QOSClass: corev1.PodQOSBestEffort,
		HostIP: "10.240.0.1", HostIPs: []corev1.HostIP{{IP: "10.240.0.1"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	pending := corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}}
	withQOS := func(s corev1.PodStatus, q corev1.PodQOSClass) corev1.PodStatus { s.QOSClass = q; return s }
	observed := func(s corev1.PodStatus, gen, readyGen int64) corev1.PodStatus {
		s.ObservedGeneration = gen
		s.Conditions = slices.Clone(s.Conditions)
		s.Conditions[1].ObservedGeneration = readyGen
		return s
	}
	for _, tc := range []struct {
		name             string
		hostGen          int64
		tenantGen        int64
		hostNode         string
		host, tenant     corev1.PodStatus
		tenantNode       string
		wantBinding      string // node; "" for none
		wantStatus       corev1.PodStatus
		wantStatusWrites int
		wantEvent        string // the reason of the Event the tenant Pod gets; "" for none
	}{
		{
			name: "not scheduled in the host: its Pending status comes up, told as the scheduler tells it", host: pending,
			tenant: corev1.PodStatus{QOSClass: corev1.PodQOSBestEffort}, wantStatus: pending, wantStatusWrites: 1, wantEvent: ReasonFailedScheduling,
		},
		{
			name: "still not scheduled, as the tenant Pod shows: told once", host: pending,
			tenant: pending, wantStatus: pending,
		},
		{
			name: "scheduled in the host: the tenant Pod is bound to the same node, the status waits", hostNode: "kwok-node-1", host: running,
			tenant: corev1.PodStatus{QOSClass: corev1.PodQOSBestEffort}, wantBinding: "kwok-node-1", wantStatus: corev1.PodStatus{QOSClass: corev1.PodQOSBestEffort},
			wantEvent: ReasonScheduled,
		},
		{
			name: "bound: the host's status comes up, the tenant's QoS class stays", hostNode: "kwok-node-1", tenantNode: "kwok-node-1", host: running,
			tenant: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable}, wantStatus: withQOS(running, corev1.PodQOSBurstable), wantStatusWrites: 1,
		},
		{
			name: "nothing new: no write", hostNode: "kwok-node-1", tenantNode: "kwok-node-1", host: running,
			tenant: running, wantStatus: running,
		},
		{
			name:    "the host's kubelet saw the host Pod's latest spec: the tenant Pod's own generation is observed",
			hostGen: 7, tenantGen: 3, hostNode: "kwok-node-1", tenantNode: "kwok-node-1",
			host: observed(running, 7, 7), tenant: observed(running, 2, 2), wantStatus: observed(running, 3, 3), wantStatusWrites: 1,
		},
		{
			name:    "not yet: the tenant's earlier observations stay, never the host's generations",
			hostGen: 7, tenantGen: 3, hostNode: "kwok-node-1", tenantNode: "kwok-node-1",
			host: observed(running, 6, 5), tenant: observed(running, 2, 1), wantStatus: observed(running, 2, 1),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tenant := tenantPod(func(p *corev1.Pod) { p.Spec.NodeName, p.Status, p.Generation = tc.tenantNode, tc.tenant, tc.tenantGen })
			host := tenantPod(func(p *corev1.Pod) { p.Spec.NodeName, p.Status, p.Generation = tc.hostNode, tc.host, tc.hostGen })
			var binding string
			statusWrites := 0
			// The tenant has the virtual node of a bound Pod (a status
			// waits for it: TestStatusWaitsForTheTenantsNode).
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-node-1"}}
			c := fake.NewClientBuilder().WithObjects(tenant, node).WithStatusSubresource(tenant).WithInterceptorFuncs(interceptor.Funcs{
				SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
					if b, ok := subObj.(*corev1.Binding); ok && sub == "binding" {
						binding = b.Target.Name
						return nil
					}
					return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
				},
				SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
					statusWrites++
					return c.SubResource(sub).Update(ctx, obj, opts...)
				},
			}).Build()
			stored := &corev1.Pod{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(tenant), stored); err != nil {
				t.Fatal(err)
			}
			changed, err := Syncer(Options{ExposeNodeAddresses: true}).Up(t.Context(), c, host, stored)
			if err != nil {
				t.Fatal(err)
			}
			after := &corev1.Pod{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(tenant), after); err != nil {
				t.Fatal(err)
			}
			if binding != tc.wantBinding {
				t.Errorf("bound to %q, want %q", binding, tc.wantBinding)
			}
			if !equality.Semantic.DeepEqual(after.Status, tc.wantStatus) {
				t.Errorf("tenant status\n got %+v\nwant %+v", after.Status, tc.wantStatus)
			}
			if statusWrites != tc.wantStatusWrites {
				t.Errorf("%d status writes, want %d", statusWrites, tc.wantStatusWrites)
			}
			if wantChanged := tc.wantBinding != "" || tc.wantStatusWrites > 0; changed != wantChanged {
				t.Errorf("changed = %v, want %v", changed, wantChanged)
			}
			var events eventsv1.EventList
			if err := c.List(t.Context(), &events); err != nil {
				t.Fatal(err)
			}
			var reasons []string
			for _, e := range events.Items {
				reasons = append(reasons, e.Reason)
				if !strings.HasPrefix(e.Name, tenant.Name+".") || e.Regarding.Name != tenant.Name || e.Action != "Scheduling" {
					t.Errorf("Event %s regarding %s, action %s: want it named after the Pod, about it, of scheduling", e.Name, e.Regarding.Name, e.Action)
				}
			}
			if want := []string{tc.wantEvent}; tc.wantEvent == "" && len(reasons) > 0 || tc.wantEvent != "" && !slices.Equal(reasons, want) {
				t.Errorf("Events %v, want %q", reasons, tc.wantEvent)
			}
		})
	}
}

// A tenant Pod shows the statuses of its own containers only, never of one
// the host added (a mesh's proxy) or of the host's ephemeral containers,
// even under a name the tenant used; its own ephemeral containers
// (kubectl debug) show the host's status once added, and keep their own
// when refused.
func TestUpShowsTheTenantsContainersOnly(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	refused := corev1.ContainerStatus{Name: "refused", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 128, Reason: syncer.ReasonHostRejected}}}
	tenant := tenantPod(func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{
			{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox", Command: []string{"sh"}}},
			{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "refused", Image: "busybox"}},
			{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "host-debugger", Image: "busybox"}},
			{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "pending", Image: "busybox"}},
		}
		p.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{refused}
	})
	host := tenantPod(func(p *corev1.Pod) {
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{
			{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox", Command: []string{"sh"}, ImagePullPolicy: corev1.PullAlways,
				Env: serviceEnv(apiAccessSecretName(p.Name), nil)}},
			{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "host-debugger", Image: "registry.example/host-tools"}},
		}
		p.Status = corev1.PodStatus{
			Phase:                      corev1.PodRunning,
			InitContainerStatuses:      []corev1.ContainerStatus{{Name: "init", State: running}, {Name: "vault-agent-init", State: running}},
			ContainerStatuses:          []corev1.ContainerStatus{{Name: "istio-proxy", State: running}, {Name: "web", State: running}},
			EphemeralContainerStatuses: []corev1.ContainerStatus{{Name: "debugger", State: running}, {Name: "host-debugger", State: running}},
		}
	})
	if !copyStatus(host, tenant, nil) {
		t.Fatal("no status copied")
	}
	names := func(statuses []corev1.ContainerStatus) (out []string) {
		for _, s := range statuses {
			out = append(out, s.Name)
		}
		return out
	}
	if got := names(tenant.Status.InitContainerStatuses); !slices.Equal(got, []string{"init"}) {
		t.Errorf("init container statuses %v, want the tenant's init only", got)
	}
	if got := names(tenant.Status.ContainerStatuses); !slices.Equal(got, []string{"web"}) {
		t.Errorf("container statuses %v, want the tenant's web only", got)
	}
	want := []corev1.ContainerStatus{{Name: "debugger", State: running}, refused}
	if s := tenant.Status.EphemeralContainerStatuses; !equality.Semantic.DeepEqual(s, want) {
		t.Errorf("ephemeral container statuses %+v, want the host's for debugger, the tenant's own for refused, none for the host's host-debugger or pending", s)
	}
}

// A container reads its node's address through the downward API as its
// tenant Pod's status shows it: with node addresses hidden (the default),
// never the host node's; with them shown, the host's, from the host's
// kubelet.
func TestDownwardHostIPFollowsTheNodeAddressPolicy(t *testing.T) {
	tenant := tenantPod(func(p *corev1.Pod) {
		for _, path := range []string{"status.hostIP", "status.hostIPs", "status.podIP"} {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{
				Name: strings.ToUpper(strings.ReplaceAll(path, ".", "_")), ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}},
			})
		}
	})
	env := func(opts Options) map[string]string {
		s := Syncer(opts)
		h, err := s.HostCopy("vc", tenant, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, e := range h.(*corev1.Pod).Spec.Containers[0].Env {
			switch {
			case e.ValueFrom == nil:
				out[e.Name] = "value " + e.Value
			case e.ValueFrom.FieldRef != nil:
				out[e.Name] = "field " + e.ValueFrom.FieldRef.FieldPath
			}
		}
		return out
	}
	hidden := env(Options{})
	if hidden["STATUS_HOSTIP"] != "value " || hidden["STATUS_HOSTIPS"] != "value " || hidden["STATUS_PODIP"] != "field status.podIP" {
		t.Errorf("node addresses hidden: %v; want the host IPs empty, as the tenant Pod's status shows them, and the Pod IP the host's kubelet gives", hidden)
	}
	shown := env(Options{ExposeNodeAddresses: true})
	if shown["STATUS_HOSTIP"] != "field status.hostIP" || shown["STATUS_HOSTIPS"] != "field status.hostIPs" {
		t.Errorf("node addresses shown: %v; want the host's kubelet to give them", shown)
	}
}

// Every host container pulls Always unless the policy keeps the tenant's
// pull policy: with IfNotPresent or Never, a tenant would run another
// tenant's private image that the node holds, without its credentials.
func TestImagePullPolicy(t *testing.T) {
	tenant := tenantPod(func(p *corev1.Pod) {
		p.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
		p.Spec.InitContainers[0].ImagePullPolicy = corev1.PullIfNotPresent
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "models", VolumeSource: corev1.VolumeSource{
			Image: &corev1.ImageVolumeSource{Reference: "registry.example/models:1", PullPolicy: corev1.PullNever},
		}})
	})
	for _, tc := range []struct {
		keep bool
		want corev1.PullPolicy
	}{{false, corev1.PullAlways}, {true, corev1.PullNever}} {
		s := Syncer(Options{Policy: Policy{KeepImagePullPolicy: tc.keep}})
		h, err := s.HostCopy("vc", tenant, nil)
		if err != nil {
			t.Fatal(err)
		}
		host := h.(*corev1.Pod)
		if got := host.Spec.Containers[0].ImagePullPolicy; got != tc.want {
			t.Errorf("keep %v: the host container pulls %s, want %s", tc.keep, got, tc.want)
		}
		for _, v := range host.Spec.Volumes {
			if v.Image != nil && v.Image.PullPolicy != tc.want {
				t.Errorf("keep %v: the image volume pulls %s, want %s", tc.keep, v.Image.PullPolicy, tc.want)
			}
		}
		note := s.Stripped(tenant)
		if told := strings.Contains(note, "imagePullPolicy of init, web, volume models (Always in the host"); told == tc.keep {
			t.Errorf("keep %v: the tenant is told %q", tc.keep, note)
		}
	}
}
