package pods_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	"github.com/tenantry/tenantry/pkg/syncer/pods"
)

// The heartbeat renews a kept tenant's virtual-node Leases while the
// tenant's app does not run, and sends that tenant no request while it
// does: the app renews them itself.
func TestNodeHeartbeatLeavesATenantWhoseAppRuns(t *testing.T) {
	useWorld(t)
	ctx := t.Context()
	tenant := shared.Tenants["tenant-2"]

	// A Lease of a virtual node named after a host node, last renewed
	// long ago: a manager that died, say.
	var hostNodes corev1.NodeList
	if err := shared.Host.List(ctx, &hostNodes); err != nil || len(hostNodes.Items) == 0 {
		t.Fatalf("host nodes: %v, %d", err, len(hostNodes.Items))
	}
	node := hostNodes.Items[len(hostNodes.Items)-1].Name
	stale := metav1.NewMicroTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: corev1.NamespaceNodeLease, Name: node,
			Labels: map[string]string{syncer.LabelManagedBy: syncer.ManagedByValue}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To(int32(40)), RenewTime: &stale},
	}
	if err := tenant.Create(ctx, lease); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(lease), lease); err != nil {
		t.Fatal(err)
	}
	lease.Spec.RenewTime = &stale
	if err := tenant.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}

	// Every request the heartbeat sends the tenant, counted.
	var requests atomic.Int64
	cfg := rest.CopyConfig(shared.Env.Tenants[1].Config())
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			requests.Add(1)
			return rt.RoundTrip(req)
		})
	}
	var runs atomic.Bool
	var askedWhileRunning atomic.Int64
	heartbeat := pods.NewNodeHeartbeat(pods.NodeHeartbeatOptions{
		HostNodes: shared.Hub.Reader(),
		Log:       logr.Discard(),
		AppRuns: func(cluster string) bool {
			if cluster != "tenant-2" {
				t.Errorf("asked whether the app of %q runs; only tenant-2 is kept", cluster)
			}
			if runs.Load() {
				askedWhileRunning.Add(1)
				return true
			}
			return false
		},
	})
	hbCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- heartbeat.Start(hbCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("heartbeat: %v", err)
		}
	})
	if err := heartbeat.Keep("tenant-2", "r1", cfg); err != nil {
		t.Fatal(err)
	}

	renewedSince := func(since time.Time) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			var got coordinationv1.Lease
			if err := tenant.Get(ctx, client.ObjectKeyFromObject(lease), &got); err != nil {
				return false, err
			}
			return got.Spec.RenewTime != nil && !got.Spec.RenewTime.Time.Before(since), nil
		}
	}
	eventually(t, 15*time.Second, "the stale Lease renewed by the heartbeat", renewedSince(stale.Add(time.Minute)))
	if requests.Load() == 0 {
		t.Fatal("the Lease was renewed, but not through the heartbeat's client")
	}

	// The app runs: a whole round later, the heartbeat has sent nothing.
	runs.Store(true)
	eventually(t, 30*time.Second, "the heartbeat's first round with the app running", func(context.Context) (bool, error) {
		return askedWhileRunning.Load() >= 1, nil
	})
	sent := requests.Load()
	eventually(t, 30*time.Second, "one more round with the app running", func(context.Context) (bool, error) {
		return askedWhileRunning.Load() >= 2, nil
	})
	if n := requests.Load() - sent; n != 0 {
		t.Errorf("the heartbeat sent %d requests to a tenant whose app runs; want none", n)
	}

	// The app stops: the heartbeat takes over again.
	resumed := time.Now().Truncate(time.Second)
	runs.Store(false)
	eventually(t, 15*time.Second, "the Lease renewed again once the app stopped", renewedSince(resumed))
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
