package clusterregistry

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

// pagedServer is a ListerWatcher of 1,200 ConfigMaps served in pages of
// the limit asked, that records what it was asked and can expire a
// continue token once.
type pagedServer struct {
	asked     []metav1.ListOptions
	expireAt  string // a continue token answered once with 410 Expired
	resources string // the resourceVersion of its lists
}

func (p *pagedServer) ListWithContext(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
	p.asked = append(p.asked, o)
	if o.Continue != "" && o.Continue == p.expireAt {
		p.expireAt = ""
		return nil, apierrors.NewResourceExpired("the continue token expired")
	}
	from := 0
	if o.Continue != "" {
		from, _ = strconv.Atoi(o.Continue)
	}
	limit := int(o.Limit)
	if limit == 0 {
		limit = 1200
	}
	list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: p.resources}}
	for i := from; i < min(from+limit, 1200); i++ {
		list.Items = append(list.Items, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("cm-%d", i)}})
	}
	if from+limit < 1200 {
		list.Continue = strconv.Itoa(from + limit)
	}
	return list, nil
}

func (p *pagedServer) WatchWithContext(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return watch.NewFake(), nil
}

// A counted informer's list is asked for in pages and handed to the
// reflector whole, whatever the reflector asked: at version 0 it asks for
// the latest version (the watch cache would send 0 whole), at another
// version for one not older than it (with a limit, a version alone reads
// as Exact), and a token that expires between pages starts it again.
func TestAListIsPagedAndWhole(t *testing.T) {
	for _, c := range []struct {
		name        string
		asked       metav1.ListOptions
		expireAt    string
		wantFirst   metav1.ListOptions
		wantListing int
	}{
		{"at version 0, as a reflector starts", metav1.ListOptions{ResourceVersion: "0", Limit: 500},
			"", metav1.ListOptions{Limit: listPageSize}, 3},
		{"at a version, without a limit, as a reflector relists", metav1.ListOptions{ResourceVersion: "42"},
			"", metav1.ListOptions{ResourceVersion: "42", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: listPageSize}, 3},
		{"at a version, with a limit", metav1.ListOptions{ResourceVersion: "42", Limit: 500},
			"", metav1.ListOptions{ResourceVersion: "42", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: listPageSize}, 3},
		{"a token that expires", metav1.ListOptions{ResourceVersion: "0"},
			"1000", metav1.ListOptions{Limit: listPageSize}, 3 + 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newCacheMeter("paged", CacheLimits{Objects: 10_000, Bytes: 1 << 30})
			defer m.forget()
			server := &pagedServer{expireAt: c.expireAt, resources: "77"}
			lw := drainingListerWatcher{ListerWatcherWithContext: server, given: &toolscache.ListWatch{}, meter: m, usage: m.track("v1.ConfigMap")}
			got, err := lw.ListWithContext(t.Context(), c.asked)
			if err != nil {
				t.Fatal(err)
			}
			list := got.(*corev1.ConfigMapList)
			if len(list.Items) != 1200 || list.Continue != "" || list.ResourceVersion != "77" {
				t.Fatalf("handed %d items, continue %q, version %q; want the 1,200 whole, at 77", len(list.Items), list.Continue, list.ResourceVersion)
			}
			if list.Items[1199].Name != "cm-1199" {
				t.Errorf("the last item is %s", list.Items[1199].Name)
			}
			if len(server.asked) != c.wantListing || server.asked[0] != c.wantFirst {
				t.Errorf("asked %+v; want %d pages, the first %+v", server.asked, c.wantListing, c.wantFirst)
			}
			for _, o := range server.asked[1:] {
				if o.Continue != "" && (o.ResourceVersion != "" || o.ResourceVersionMatch != "") {
					t.Errorf("a next page asked with a version: %+v", o)
				}
			}
			if o, b := m.listing.Load(), m.listingB.Load(); o != 0 || b != 0 {
				t.Errorf("after the list, %d objects and %d bytes still counted as listing", o, b)
			}
		})
	}
}

// Lists under way count together: two informers' lists that each fit the
// limit but not together stop the cluster.
func TestListsUnderWayCountTogether(t *testing.T) {
	m := newCacheMeter("together", CacheLimits{Objects: 2_000, Bytes: 1 << 30})
	defer m.forget()
	page := func(n int) *corev1.ConfigMapList {
		l := &corev1.ConfigMapList{}
		for i := range n {
			l.Items = append(l.Items, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint(i)}})
		}
		return l
	}
	a, b := m.track("v1.ConfigMap"), m.track("v1.Secret")
	if err := m.listed(a, page(1200)); err != nil {
		t.Fatalf("one list of 1,200 under a limit of 2,000: %v", err)
	}
	if err := m.listed(b, page(1200)); err == nil {
		t.Fatal("two lists of 1,200 at once under a limit of 2,000 were let in")
	}
}

// What the reflector writes reaches the store and every handler as
// client-go's informer hands it on: the first list as the initial list
// (and the informer synced after it), each change once, a later list as
// deletions of what it lacks (DeletedFinalStateUnknown) before updates of
// what the store held and adds of the rest, and a resync as updates.
func TestDirectStoreTellsWhatTheReflectorWrites(t *testing.T) {
	informer := newDirectInformer(&toolscache.ListWatch{}, &corev1.ConfigMap{}, 0, nil).(*directInformer)
	store := (*directStore)(informer)
	var told []string
	name := func(o any) string { return o.(*corev1.ConfigMap).Name + "@" + o.(*corev1.ConfigMap).ResourceVersion }
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(o any, initial bool) {
			if initial {
				told = append(told, "initial "+name(o))
			} else {
				told = append(told, "add "+name(o))
			}
		},
		UpdateFunc: func(old, o any) { told = append(told, "update "+name(old)+" "+name(o)) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				told = append(told, "unknown "+d.Key+" "+name(d.Obj))
				return
			}
			told = append(told, "delete "+name(o))
		},
	}); err != nil {
		t.Fatal(err)
	}
	cm := func(n, rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: n, ResourceVersion: rv}}
	}
	expect := func(step string, want ...string) {
		t.Helper()
		if fmt.Sprint(told) != fmt.Sprint(want) {
			t.Errorf("%s: told %q, want %q", step, told, want)
		}
		told = nil
	}

	if informer.HasSynced() {
		t.Fatal("synced before the first list")
	}
	must(t, store.Replace([]any{cm("a", "1"), cm("b", "1")}, "1"))
	expect("the first list", "initial a@1", "initial b@1")
	if !informer.HasSynced() {
		t.Error("not synced after the first list")
	}
	must(t, store.Add(cm("c", "2")))
	must(t, store.Update(cm("b", "3")))
	must(t, store.Add(cm("c", "4"))) // an add of what the store holds updates it
	must(t, store.Delete(cm("c", "5")))
	expect("the watch", "add c@2", "update b@1 b@3", "update c@2 c@4", "delete c@5")

	must(t, store.Replace([]any{cm("b", "6"), cm("d", "6")}, "6"))
	expect("a list after the watch broke", "unknown ns/a a@1", "update b@3 b@6", "add d@6")
	if keys := informer.GetStore().ListKeys(); len(keys) != 2 {
		t.Errorf("the store holds %v, want ns/b and ns/d", keys)
	}
	must(t, store.Resync())
	if len(told) != 2 || told[0][:6] != "update" || told[1][:6] != "update" {
		t.Errorf("a resync told %q, want an update of each object", told)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
