package syncer

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
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

	var r SyncReport
	a.fill(&r, time.Now())
	if r.Refusals != 2 {
		t.Errorf("refusals = %d, want 2: the one 30 minutes ago and the one just now", r.Refusals)
	}
	if e := r.LastError; e == nil || e.Resource != "pods" || e.Object != "app/web" || e.Message != "the host is away" || e.Time.Before(now) {
		t.Errorf("last error = %+v, want the pods one", e)
	}
	if r.LastWrite.Before(now) {
		t.Errorf("last write = %s, want now", r.LastWrite)
	}
	// An hour on, none is left.
	a.fill(&r, time.Now().Add(RefusalWindow+time.Second))
	if r.Refusals != 0 {
		t.Errorf("an hour on, refusals = %d, want 0", r.Refusals)
	}
	// A nil activity records nothing, and does not fail.
	var none *activity
	none.refused()
	none.wrote()
	none.failed("pods", types.NamespacedName{}, errors.New("x"))
}
