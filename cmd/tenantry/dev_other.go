//go:build !unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
)

// execDev runs path with args, this process's standard streams its own,
// and returns its exit code. An interrupt reaches tenantry-dev from the
// console: this process waits for it to stop rather than end first.
func execDev(path string, args []string) (int, error) {
	signal.Ignore(os.Interrupt)
	defer signal.Reset(os.Interrupt)
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode(), nil
	case errors.As(err, &exit):
		return 1, nil // ended by a signal
	case err != nil:
		return 1, err
	}
	return 0, nil
}
