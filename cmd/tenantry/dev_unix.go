//go:build unix

package main

import (
	"os"
	"syscall"
)

// execDev replaces this process with path, run with args: signals, the
// terminal and the exit code are tenantry-dev's own. It returns only if
// that fails.
func execDev(path string, args []string) (int, error) {
	return 1, syscall.Exec(path, append([]string{path}, args...), os.Environ())
}
