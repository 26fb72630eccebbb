package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// poll checks cond every interval until it holds, ctx ends, or timeout
// passes (0: only ctx bounds it). The error carries what cond last said.
func poll(ctx context.Context, interval, timeout time.Duration, cond func(context.Context) (bool, error)) error {
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
		return fmt.Errorf("%w (last: %w)", err, last)
	}
	return err
}
