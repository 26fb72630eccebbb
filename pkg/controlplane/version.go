package controlplane

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrVersionSkew is a version change Kubernetes does not support: back,
// or more than one minor version forward.
var ErrVersionSkew = errors.New("a control plane moves one minor version at a time, forward")

// CheckVersionChange says whether a control plane whose data was last
// run by version from (v1.M.P) may run version to: the same, or one
// minor version on. A version change and a restore of a snapshot taken
// at from follow the same rule: the API server of to reads and migrates
// what from wrote.
func CheckVersionChange(from, to string) error {
	if from == to {
		return nil
	}
	f, err := minorOf(from)
	if err != nil {
		return err
	}
	t, err := minorOf(to)
	if err != nil {
		return err
	}
	if t != f && t != f+1 {
		return fmt.Errorf("from %s to %s: %w", from, to, ErrVersionSkew)
	}
	return nil
}

// minorOf is the minor version of v1.M.P.
func minorOf(version string) (int, error) {
	parts := strings.Split(strings.TrimPrefix(version, "v"), ".")
	if len(parts) != 3 || parts[0] != "1" {
		return 0, fmt.Errorf("version %q is not of the form v1.M.P", version)
	}
	m, err := strconv.Atoi(parts[1])
	if err != nil {
		return 0, fmt.Errorf("version %q is not of the form v1.M.P", version)
	}
	return m, nil
}
