//go:build unix

package testing

import (
	"os"

	"golang.org/x/sys/unix"
)

// tryLock takes f's exclusive lock without waiting; closing f releases it,
// and so does the end of this process, however it ends.
func tryLock(f *os.File) error { return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) }
