package testing

import (
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// NewRegistry starts an OCI registry of the test's own that takes pushes
// and serves pulls (go-containerregistry's, in memory), on the loopback,
// where clients reach it over plain HTTP, and returns its host:port. It
// stops with the test. The kit's image registry, which real nodes pull
// from, is read-only: this one is for what a test pushes.
func NewRegistry(t testing.TB) string {
	t.Helper()
	server := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(server.Close)
	return strings.TrimPrefix(server.URL, "http://")
}
