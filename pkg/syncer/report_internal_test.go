package syncer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The report counts the refusals of the last hour only, and keeps the last
// failure.
func TestActivityReport(t *testing.T) {
	a := &activity{}
	now := time.Now()
	a.refusals = []time.Time{now.Add(-2 * time.Hour), now.Add(-RefusalWindow - time.Second), now.Add(-30 * time.Minute)}
	a.refused()
	a.failed("configmaps", types.NamespacedName{Namespace: "app", Name: "first"}, errors.New("first"))
	a.failed("pods", types.NamespacedName{Namespace: "app", Name: "web"}, errors.New("the host is away"))
	a.wrote()
	a.synced(now.Add(-2500 * time.Millisecond))
	a.synced(now.Add(-time.Second))

	var r SyncReport
	a.fill(&r, time.Now())
	if r.Lag != 2*time.Second {
		t.Errorf("lag = %s, want the longest, 2.5 s, in whole seconds", r.Lag)
	}
	if r.Refusals != 2 {
		t.Errorf("refusals = %d, want 2: the one 30 minutes ago and the one just now", r.Refusals)
	}
	if e := r.LastError; e == nil || e.Resource != "pods" || e.Object != "app/web" || e.Message != "the host is away" || e.Time.Before(now) {
		t.Errorf("last error = %+v, want the pods one", e)
	}
	if r.LastWrite.Before(now) {
		t.Errorf("last write = %s, want now", r.LastWrite)
	}
	// An hour on, no refusal is left, and no lag: each report's is its own.
	a.fill(&r, time.Now().Add(RefusalWindow+time.Second))
	if r.Refusals != 0 || r.Lag != 0 {
		t.Errorf("an hour on, refusals = %d and lag %s, want 0 and 0", r.Refusals, r.Lag)
	}
	// A nil activity records nothing, and does not fail.
	var none *activity
	none.refused()
	none.wrote()
	none.failed("pods", types.NamespacedName{}, errors.New("x"))
	none.synced(now)
}

// A report is news when what it says changed, or its last write moved by a
// minute; a last write a few seconds later is not.
func TestSyncReportChanged(t *testing.T) {
	now := time.Now()
	base := SyncReport{Objects: map[string]int{"configmaps": 1}, LastWrite: now}
	for _, tc := range []struct {
		name string
		next SyncReport
		want bool
	}{
		{"the same", base, false},
		{"a write 10 seconds later", SyncReport{Objects: map[string]int{"configmaps": 1}, LastWrite: now.Add(10 * time.Second)}, false},
		{"a write a minute later", SyncReport{Objects: map[string]int{"configmaps": 1}, LastWrite: now.Add(time.Minute)}, true},
		{"another count", SyncReport{Objects: map[string]int{"configmaps": 2}, LastWrite: now}, true},
		{"a lag", SyncReport{Objects: map[string]int{"configmaps": 1}, LastWrite: now, Lag: 3 * time.Second}, true},
	} {
		if got := tc.next.changed(&base); got != tc.want {
			t.Errorf("%s: changed = %t, want %t", tc.name, got, tc.want)
		}
	}
	failing := base
	failing.LastError = &SyncError{Time: now, Resource: "configmaps", Object: "app/web", Message: "the host is away"}
	again := failing
	again.LastError = &SyncError{Time: now.Add(10 * time.Second), Resource: "configmaps", Object: "app/web", Message: "the host is away"}
	if again.changed(&failing) {
		t.Error("the same error failing again 10 s later is news")
	}
	// What is news at once, and what waits for MinReportInterval.
	for _, tc := range []struct {
		name       string
		next, last SyncReport
		want       bool
	}{
		{"an error appears", failing, base, true},
		{"the error goes", base, failing, true},
		{"a first refusal", SyncReport{Refusals: 1}, SyncReport{}, true},
		{"a second refusal", SyncReport{Refusals: 2}, SyncReport{Refusals: 1}, false},
		{"a lag starts", SyncReport{Lag: time.Second}, SyncReport{}, false},
		{"a longer lag", SyncReport{Lag: 5 * time.Second}, SyncReport{Lag: time.Second}, false},
		{"another count", SyncReport{Objects: map[string]int{"configmaps": 2}}, SyncReport{Objects: map[string]int{"configmaps": 1}}, false},
	} {
		if got := tc.next.urgent(&tc.last); got != tc.want {
			t.Errorf("%s: urgent = %t, want %t", tc.name, got, tc.want)
		}
	}
	if !base.changed(nil) || !base.urgent(nil) {
		t.Error("the first report is not urgent news")
	}
	if !base.changed(&SyncReport{Objects: map[string]int{"configmaps": 1}}) {
		t.Error("a first write is not news")
	}
}

// A report is told when it changed: the first at once (run waits for the
// start's work to be done), later ones at once when urgent, else after
// MinReportInterval.
func TestReportDue(t *testing.T) {
	counts := func(n int) SyncReport { return SyncReport{Objects: map[string]int{"configmaps": n}} }
	justNow, longAgo := time.Now(), time.Now().Add(-2*MinReportInterval)
	for _, tc := range []struct {
		name   string
		now    SyncReport
		last   *SyncReport
		toldAt time.Time
		want   bool
	}{
		{"the first", counts(3), nil, time.Time{}, true},
		{"no change", counts(3), ptr.To(counts(3)), longAgo, false},
		{"a new count, just after the last", counts(4), ptr.To(counts(3)), justNow, false},
		{"a new count, a while after the last", counts(4), ptr.To(counts(3)), longAgo, true},
		{"a first refusal, just after the last", SyncReport{Refusals: 1}, &SyncReport{}, justNow, true},
	} {
		if got := due(tc.now, tc.last, tc.toldAt); got != tc.want {
			t.Errorf("%s: due = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// The first report waits until the start's work is done, and follows it
// within a poll, not a period; a period is long here, so that only the
// poll can bring it.
func TestFirstReportWaitsForTheStartsWork(t *testing.T) {
	r := &reporter{cluster: "c", activity: &activity{}, types: map[string]syncedType{}}
	var settled atomic.Bool
	told := make(chan SyncReport, 10)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(ctx, logr.Discard(), time.Hour, func(_ context.Context, report SyncReport) error {
			told <- report
			return nil
		}, settled.Load)
	}()
	defer func() { cancel(); <-done }()

	select {
	case <-told:
		t.Fatal("the first report was told while the start's work went on")
	case <-time.After(3 * firstReportPoll): // a window for nothing to happen, not a wait for a state
	}
	settled.Store(true)
	select {
	case <-told:
	case <-time.After(10 * firstReportPoll):
		t.Fatal("the first report was not told once the start's work was done")
	}
}
