package virtualcluster

import (
	"crypto/sha256"
	"errors"
	"testing"
	"time"
)

// A tenant past its cache limits is spawned again 30 s later, then twice
// as late each time it goes past them again, up to 10 minutes; the same
// failure told twice changes nothing; a changed spec (another digest) is
// spawned at once; a tenant within its limits again starts from nothing.
func TestATenantPastItsLimitsIsSpawnedAgainLater(t *testing.T) {
	r := &Reconciler{}
	spec, raised := sha256.Sum256([]byte("spec")), sha256.Sum256([]byte("raised limit"))
	over := errors.New("past its limits")
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)

	if next, _ := r.overLimitUntil("hoarder", spec, now); !next.IsZero() {
		t.Fatalf("a tenant never past its limits waits until %v", next)
	}
	if next := r.wentOverLimit("hoarder", spec, over, now); next != now.Add(30*time.Second) {
		t.Errorf("first time past its limits: again at %v, want 30s later", next)
	}
	if next := r.wentOverLimit("hoarder", spec, over, now.Add(time.Second)); next != now.Add(30*time.Second) {
		t.Errorf("the same failure told again moved the retry to %v", next)
	}
	if next, why := r.overLimitUntil("hoarder", spec, now.Add(10*time.Second)); next != now.Add(30*time.Second) || why != over {
		t.Errorf("meanwhile: until %v (%v), want 30s after, with the error", next, why)
	}
	if next, _ := r.overLimitUntil("hoarder", raised, now.Add(10*time.Second)); !next.IsZero() {
		t.Errorf("a changed spec waits until %v, want at once", next)
	}
	at := now.Add(30 * time.Second)
	delay := 30 * time.Second
	for range 6 {
		delay = min(2*delay, 10*time.Minute)
		next := r.wentOverLimit("hoarder", spec, over, at)
		if next != at.Add(delay) {
			t.Fatalf("past its limits again at %v: again at %v, want %v later", at, next, delay)
		}
		at = next
	}
	if delay != 10*time.Minute {
		t.Errorf("the delay stopped growing at %v, want 10m", delay)
	}
	r.withinLimit("hoarder")
	if next, _ := r.overLimitUntil("hoarder", spec, at.Add(-time.Second)); !next.IsZero() {
		t.Errorf("a tenant within its limits again still waits until %v", next)
	}
}
