package testing_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

func TestMain(m *testing.M) {
	// envtest logs through controller-runtime's global logger.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// TestEnvironment starts a host and three tenants, writes and reads an object
// in each, restarts one tenant's API server and shows that the others never
// noticed and that clients built before the restart work again.
func TestEnvironment(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{Tenants: 3, HostAuditLog: true})
	ctx := t.Context()

	planes := env.ControlPlanes()
	if got, want := names(planes), "host tenant-1 tenant-2 tenant-3"; got != want {
		t.Fatalf("control planes = %q, want %q", got, want)
	}

	clients := map[string]client.Client{}
	for _, cp := range planes {
		c, err := client.New(cp.Config(), client.Options{})
		if err != nil {
			t.Fatalf("%s: building client: %v", cp.Name(), err)
		}
		clients[cp.Name()] = c
		writeAndRead(ctx, t, c, cp.Name(), "before")
	}

	t.Run("each API server's and etcd's process and CPU time", func(t *testing.T) {
		pids := map[int]string{}
		for _, cp := range planes {
			for binary, find := range map[string]func() (int, error){"kube-apiserver": cp.APIServerPID, "etcd": cp.EtcdPID} {
				pid, err := find()
				if err != nil {
					t.Fatal(err)
				}
				if other, dup := pids[pid]; dup {
					t.Fatalf("%s's %s and %s name one process, %d", cp.Name(), binary, other, pid)
				}
				pids[pid] = cp.Name() + "'s " + binary
				cpu, err := tenantrytest.ProcessCPU(pid)
				if err != nil {
					t.Fatal(err)
				}
				// A started API server or etcd has spent well over a tick.
				if cpu < 100*time.Millisecond {
					t.Errorf("%s: %s %d spent %s of CPU", cp.Name(), binary, pid, cpu)
				}
			}
		}
	})

	t.Run("the host's audit log", func(t *testing.T) {
		// The ConfigMap writeAndRead created above, by the kit's admin.
		events, err := env.Host.AuditEvents()
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, e := range events {
			ref := e.ObjectRef
			found = found || (e.Verb == "create" && ref != nil && ref.Resource == "configmaps" && ref.Namespace == "default" &&
				ref.Name == "probe" && e.Code() == 201 && e.User.Username != "")
		}
		if !found {
			t.Errorf("no create of default/probe answered 201 among the host's %d audit events", len(events))
		}
		if _, err := env.Tenants[0].AuditEvents(); !errors.Is(err, tenantrytest.ErrNoAuditLog) {
			t.Errorf("a tenant's audit events: %v, want ErrNoAuditLog", err)
		}
	})

	t.Run("kubeconfig reaches the same cluster", func(t *testing.T) {
		for _, cp := range planes {
			data, err := cp.Kubeconfig()
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
			if err != nil {
				t.Fatalf("%s: parsing kubeconfig: %v", cp.Name(), err)
			}
			c, err := client.New(cfg, client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			expectData(ctx, t, c, cp.Name(), "before")
		}
	})

	victim := env.Tenants[1]
	address := victim.Address()
	if err := victim.StopAPIServer(); err != nil {
		t.Fatalf("stopping %s: %v", victim.Name(), err)
	}

	var probe corev1.ConfigMap
	err := clients[victim.Name()].Get(ctx, client.ObjectKey{Namespace: "default", Name: "probe"}, &probe)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Get from stopped %s = %v, want connection refused", victim.Name(), err)
	}
	for _, cp := range planes {
		if cp != victim {
			writeAndRead(ctx, t, clients[cp.Name()], cp.Name(), "during")
		}
	}

	if err := victim.StartAPIServer(); err != nil {
		t.Fatalf("restarting %s: %v", victim.Name(), err)
	}
	if victim.Address() != address {
		t.Fatalf("%s moved from %s to %s", victim.Name(), address, victim.Address())
	}
	// The object written before the stop is still there (etcd kept running),
	// and the client built before the stop reads it.
	expectData(ctx, t, clients[victim.Name()], victim.Name(), "before")
	writeAndRead(ctx, t, clients[victim.Name()], victim.Name(), "after")
}

// TestDisconnect partitions a control plane without stopping it: requests
// time out instead of failing fast, and work again once healed.
func TestDisconnect(t *testing.T) {
	env := tenantrytest.New(t, tenantrytest.Options{})
	ctx := t.Context()
	cfg := env.Host.Config()
	cfg.Timeout = time.Second
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	writeAndRead(ctx, t, c, "host", "before")

	if err := env.Host.Disconnect(); err != nil {
		t.Fatal(err)
	}
	// A partition answers nothing: the request fails only when the client's
	// own 1s timeout ends it, not at once as a refused connection would.
	var cm corev1.ConfigMap
	began := time.Now()
	err = c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "probe"}, &cm)
	if elapsed := time.Since(began); err == nil || elapsed < 900*time.Millisecond {
		t.Fatalf("Get while partitioned = %v after %s, want a failure after the 1s timeout", err, elapsed)
	}
	if err := env.Host.Reconnect(); err != nil {
		t.Fatal(err)
	}
	expectData(ctx, t, c, "host", "before")
}

func TestStartWithoutBinaries(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "etcd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := tenantrytest.Start(t.Context(), tenantrytest.Options{BinaryAssetsDirectory: dir})
	if err == nil {
		t.Fatal("Start succeeded without a kube-apiserver binary")
	}
	if !strings.Contains(err.Error(), filepath.Join(dir, "kube-apiserver")) || !strings.Contains(err.Error(), "make envtest") {
		t.Fatalf("error %q does not name the missing binary and how to build it", err)
	}
	if _, err := tenantrytest.Start(t.Context(), tenantrytest.Options{Tenants: -1}); err == nil {
		t.Fatal("Start accepted a negative tenant count")
	}
}

func TestStopIsFinal(t *testing.T) {
	before := goleak.IgnoreCurrent()
	env := tenantrytest.New(t, tenantrytest.Options{Tenants: 1})
	for _, cp := range env.ControlPlanes() {
		// Exercise every proxy mode so that each leaves its goroutines behind
		// if Stop does not end them.
		if err := cp.Disconnect(); err != nil {
			t.Fatal(err)
		}
		if err := cp.Reconnect(); err != nil {
			t.Fatal(err)
		}
		c, err := client.New(cp.Config(), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		writeAndRead(t.Context(), t, c, cp.Name(), "x")
	}
	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
	if err := env.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := env.Host.StartAPIServer(); !errors.Is(err, tenantrytest.ErrStopped) {
		t.Fatalf("StartAPIServer after Stop = %v, want ErrStopped", err)
	}
}

func names(planes []*tenantrytest.ControlPlane) string {
	var s []string
	for _, cp := range planes {
		s = append(s, cp.Name())
	}
	return strings.Join(s, " ")
}

// writeAndRead stores value under the ConfigMap default/probe, creating or
// updating it, and reads it back.
func writeAndRead(ctx context.Context, t *testing.T, c client.Client, cluster, value string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "probe"}}
	err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm)
	switch {
	case err == nil:
		cm.Data = map[string]string{"cluster": cluster, "value": value}
		err = c.Update(ctx, cm)
	case client.IgnoreNotFound(err) == nil:
		cm.Data = map[string]string{"cluster": cluster, "value": value}
		err = c.Create(ctx, cm)
	}
	if err != nil {
		t.Fatalf("%s: writing ConfigMap: %v", cluster, err)
	}
	expectData(ctx, t, c, cluster, value)
}

// expectData polls, with a deadline, until default/probe holds the value
// written in cluster; a restarted API server takes a moment to answer.
func expectData(ctx context.Context, t *testing.T, c client.Client, cluster, value string) {
	t.Helper()
	tenantrytest.Eventually(t, 30*time.Second, "default/probe in "+cluster+" = "+value, func(ctx context.Context) (bool, error) {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "probe"}, &cm); err != nil {
			return false, err
		}
		if cm.Data["cluster"] != cluster || cm.Data["value"] != value {
			return false, errors.New("data is " + cm.Data["cluster"] + "/" + cm.Data["value"])
		}
		return true, nil
	})
}
