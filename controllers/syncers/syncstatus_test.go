package syncers

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// What a tenant decides (its namespaces, its objects' errors) stays small
// in the status; the counts and the lag come through whole.
func TestSyncStatus(t *testing.T) {
	var namespaces []string
	for i := range 3000 {
		namespaces = append(namespaces, fmt.Sprintf("vc-0123456789-ns-%04d", i))
	}
	long := strings.Repeat("é", 2000) // 4000 bytes, two to a rune
	now := time.Now()
	status := syncStatus(syncer.SyncReport{
		Objects:        map[string]int{"namespaces": 3000, "configmaps": 7},
		HostNamespaces: namespaces,
		LastError:      &syncer.SyncError{Time: now, Resource: "configmaps", Object: "app/web", Message: long},
		Refusals:       2,
		LastWrite:      now,
		Lag:            3 * time.Second,
	})
	if status.Total != 3007 || status.Objects["namespaces"] != 3000 || status.Refusals != 2 || status.Lag.Duration != 3*time.Second {
		t.Errorf("total %d, objects %v, refusals %d, lag %s; want 3007, every count, 2, 3s", status.Total, status.Objects, status.Refusals, status.Lag.Duration)
	}
	if len(status.HostNamespaces) != maxListedHostNamespaces || status.HostNamespaces[0] != namespaces[0] {
		t.Errorf("%d host namespaces listed, from %q; want the first %d", len(status.HostNamespaces), status.HostNamespaces[0], maxListedHostNamespaces)
	}
	msg := status.LastError.Message
	if len(msg) > maxErrorMessage || !utf8.ValidString(msg) || !strings.HasSuffix(msg, "…") || !strings.HasPrefix(long, strings.TrimSuffix(msg, "…")) {
		t.Errorf("the error message is %d bytes (valid UTF-8: %t), want at most %d, cut on a rune with an ellipsis", len(msg), utf8.ValidString(msg), maxErrorMessage)
	}
	if short := syncStatus(syncer.SyncReport{LastError: &syncer.SyncError{Message: "the host is away"}}); short.LastError.Message != "the host is away" {
		t.Errorf("a short message became %q", short.LastError.Message)
	}
	// A terminal's escapes, from a tenant's webhook, do not reach one.
	if got := syncStatus(syncer.SyncReport{LastError: &syncer.SyncError{Message: "denied\x1b[2J\x1b]0;owned\x07\nby the webhook"}}).LastError.Message; strings.ContainsAny(got, "\x1b\x07\n") {
		t.Errorf("the message kept control characters: %q", got)
	}
}
