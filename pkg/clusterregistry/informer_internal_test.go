package clusterregistry

import (
	"context"
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// A watch stopped while an event is on its way through a filter (as
// controller-runtime's metadata-only informers have one) leaves no
// goroutine behind: the filter hands the event on, and ends.
func TestStoppedWatchLeavesNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	upstream := watch.NewFake()
	lw := drainingListerWatcher{given: &toolscache.ListWatch{}, ListerWatcherWithContext: &toolscache.ListWatch{
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.Filter(upstream, func(e watch.Event) (watch.Event, bool) { return e, true }), nil
		},
	}}
	w, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The filter takes the event and waits to hand it on: the watch's
	// reader has stopped reading.
	upstream.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "in-flight"}})
	w.Stop()
	w.Stop() // twice, as a reflector may
	goleak.VerifyNone(t, before)
}

// The ListerWatcher keeps saying what the given one says of streaming
// lists, so that the reflector's choice is the same; a counted one never
// streams, since a streamed list is only put in the store whole.
func TestDrainingListerWatcherKeepsWatchListSemantics(t *testing.T) {
	for _, unsupported := range []bool{false, true} {
		given := toolscache.ToListWatcherWithWatchListSemantics(&toolscache.ListWatch{}, fakeWatchListClient{unsupported})
		lw := drainingListerWatcher{ListerWatcherWithContext: toolscache.ToListerWatcherWithContext(given), given: given}
		if got := lw.IsWatchListSemanticsUnSupported(); got != unsupported {
			t.Errorf("IsWatchListSemanticsUnSupported = %v, want %v", got, unsupported)
		}
		lw.meter = newCacheMeter("c", CacheLimits{Objects: 1, Bytes: 1})
		if !lw.IsWatchListSemanticsUnSupported() {
			t.Errorf("a counted ListerWatcher says it streams lists")
		}
		lw.meter.forget()
	}
}

type fakeWatchListClient struct{ unsupported bool }

func (c fakeWatchListClient) IsWatchListSemanticsUnSupported() bool { return c.unsupported }
