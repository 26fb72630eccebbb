package syncertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/syncer"
	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// ExpectHostCopy waits up to 10 seconds for the host copy of tenant object
// namespace/name of cluster, reads it into obj and returns it.
func (w *World) ExpectHostCopy(t testing.TB, obj client.Object, cluster, namespace, name string) client.Object {
	t.Helper()
	key := w.HostKey(cluster, namespace, name)
	tenantrytest.Eventually(t, 10*time.Second, fmt.Sprintf("host copy of %T %s %s/%s", obj, cluster, namespace, name), func(ctx context.Context) (bool, error) {
		err := w.Host.Get(ctx, key, obj)
		return err == nil, err
	})
	return obj
}

// ExpectHostGone waits up to 10 seconds for the host object of obj's key
// to be gone.
func (w *World) ExpectHostGone(t testing.TB, obj client.Object) {
	t.Helper()
	tenantrytest.Eventually(t, 10*time.Second, fmt.Sprintf("host %T %s removed", obj, client.ObjectKeyFromObject(obj)), func(ctx context.Context) (bool, error) {
		err := w.Host.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err), err
	})
}

// Events lists the Events in tenant namespace namespace (default for a
// cluster-scoped object) about the object named name, with reason.
func Events(t testing.TB, tenant client.Client, namespace, name, reason string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := tenant.List(t.Context(), &list, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// ExpectHostRejected waits up to 20 seconds for the Warning Event, reason
// syncer.ReasonHostRejected, on tenant object namespace/name whose note
// holds want, and returns it.
func ExpectHostRejected(t testing.TB, tenant client.Client, namespace, name, want string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	tenantrytest.Eventually(t, 20*time.Second, fmt.Sprintf("HostRejected Event on %s/%s saying %q", namespace, name, want), func(context.Context) (bool, error) {
		for _, e := range Events(t, tenant, namespace, name, syncer.ReasonHostRejected) {
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, want) {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	return found
}

// ExpectStripped waits up to 10 seconds for the one Normal Event, reason
// syncer.ReasonHostStripped, on tenant object namespace/name, naming each
// of want.
func ExpectStripped(t testing.TB, tenant client.Client, namespace, name string, want ...string) {
	t.Helper()
	tenantrytest.Eventually(t, 10*time.Second, fmt.Sprintf("one Normal HostStripped Event on %s/%s naming %q", namespace, name, want), func(context.Context) (bool, error) {
		events := Events(t, tenant, namespace, name, syncer.ReasonHostStripped)
		for _, e := range events {
			if e.Type == corev1.EventTypeNormal && !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(e.Note, w) }) {
				return len(events) == 1, fmt.Errorf("%d events", len(events))
			}
		}
		return false, fmt.Errorf("events %v", events)
	})
}
