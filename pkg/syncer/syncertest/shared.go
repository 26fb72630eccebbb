package syncertest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Shared is a World that the tests of one package share: the first test
// that asks for it starts it, so that a run of tests that need no API
// server starts none, and Run, the package's TestMain, stops it once every
// test has run.
type Shared struct {
	opts WorldOptions

	once  sync.Once
	world *World
	stop  func() error
	err   error
}

// Share declares a World, started with opts on first use.
func Share(opts WorldOptions) *Shared { return &Shared{opts: opts} }

// World starts the World on the first call and returns it; a World that
// failed to start fails every test that asks for it.
func (s *Shared) World(t testing.TB) *World {
	t.Helper()
	s.once.Do(func() {
		s.world, s.stop, s.err = StartWorld(context.Background(), s.opts)
	})
	if s.err != nil {
		t.Fatalf("starting host and tenants: %v", s.err)
	}
	return s.world
}

// Stop tears the World down, if it was started.
func (s *Shared) Stop() error {
	if s.stop == nil {
		return nil
	}
	return s.stop()
}

// Run is a package's TestMain: it runs the tests, with controller-runtime's
// own logger discarding (the World logs to WorldOptions.Logger), then
// stops the World, and exits with the tests' code, or 1 when the World
// fails to stop.
func (s *Shared) Run(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}
