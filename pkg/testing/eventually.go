package testing

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// pollInterval is how often Eventually checks its condition.
const pollInterval = 50 * time.Millisecond

// Eventually polls cond every pollInterval until it returns true, and fails
// the test if that does not happen within timeout, naming what was awaited
// and the last error cond returned. Use it instead of sleeping: against real
// API servers, every state arrives asynchronously.
//
// cond returns whether the state holds, and optionally why not: the error is
// only reported, it does not end the polling.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := Poll(t.Context(), pollInterval, timeout, cond); err != nil {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}

// Poll checks cond every interval, at once first, until it holds, ctx ends,
// or timeout passes (0: only ctx bounds it). cond's error says why the
// state does not hold yet: it does not end the polling, and the error Poll
// returns carries the last one.
func Poll(ctx context.Context, interval, timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	var last error
	check := func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if ctx.Err() == nil { // an error from the deadline itself says nothing
			last = err
		}
		return ok, nil
	}
	var err error
	if timeout > 0 {
		err = wait.PollUntilContextTimeout(ctx, interval, timeout, true, check)
	} else {
		err = wait.PollUntilContextCancel(ctx, interval, true, check)
	}
	if err != nil && last != nil {
		return fmt.Errorf("%w (last error: %w)", err, last)
	}
	return err
}

// Consistently checks cond every interval, at once first, for duration,
// and fails the test the first time it does not hold, naming what should
// have held and why not. It samples a state that must last (a node that
// stays Ready): to wait for a state, use Eventually.
func Consistently(t testing.TB, duration, interval time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx := t.Context()
	deadline := time.Now().Add(duration)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if ok, err := cond(ctx); !ok {
			if err == nil {
				err = fmt.Errorf("it did not")
			}
			t.Fatalf("%s: stopped holding within %s: %v", what, duration, err)
		}
		if !time.Now().Before(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: the test ended first", what)
		case <-tick.C:
		}
	}
}
