//go:build !unix

package testing

import (
	"errors"
	"os"
)

// tryLock: real nodes run on Linux only.
func tryLock(*os.File) error { return errors.New("real nodes need Linux") }
