package syncer

import (
	"testing"
	"time"
)

func TestPendingSyncersBackOff(t *testing.T) {
	for attempt, want := range map[int]time.Duration{
		0: time.Second, 1: 2 * time.Second, 2: 4 * time.Second, 8: 256 * time.Second,
		9: 5 * time.Minute, 40: 5 * time.Minute, 1000: 5 * time.Minute,
	} {
		if got := pendingDelay(attempt); got != want {
			t.Errorf("look %d waits %s, want %s", attempt, got, want)
		}
	}
}
