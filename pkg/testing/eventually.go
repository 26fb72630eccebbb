package testing

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// PollInterval is how often Eventually checks its condition.
const PollInterval = 50 * time.Millisecond

// Eventually polls cond every PollInterval until it returns true, and fails
// the test if that does not happen within timeout, naming what was awaited
// and the last error cond returned. Use it instead of sleeping: against real
// API servers, every state arrives asynchronously.
//
// cond returns whether the state holds, and optionally why not: the error is
// only reported, it does not end the polling.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), PollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if ctx.Err() == nil { // an error from the deadline itself says nothing
			last = err
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s (last error: %v)", what, timeout, last)
	}
}
