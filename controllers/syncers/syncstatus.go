package syncers

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/syncer"
)

// syncStatusReporter writes VirtualCluster cluster's SyncReport to its
// status.sync, read and written through host (the management manager's
// cached client). A last write and a last error that the report has not
// seen since the tenant's controllers started are kept from the status,
// so that a manager's restart rewrites only what changed meanwhile.
func syncStatusReporter(host client.Client, cluster string) syncer.StatusReporter {
	return func(ctx context.Context, report syncer.SyncReport) error {
		status := syncStatus(report)
		var vc tenantryv1alpha1.VirtualCluster
		if err := host.Get(ctx, client.ObjectKey{Name: cluster}, &vc); err != nil {
			return fmt.Errorf("reading VirtualCluster %s: %w", cluster, err)
		}
		if had := vc.Status.Sync; had != nil {
			if status.LastWriteTime == nil {
				status.LastWriteTime = had.LastWriteTime
			}
			if status.LastError == nil {
				status.LastError = had.LastError
			}
			if equality.Semantic.DeepEqual(had, status) {
				return nil
			}
		}
		return patchStatusField(ctx, host, &vc, "add", "sync", status)
	}
}

// A tenant decides how many namespaces it has and what its objects' sync
// errors say: the status lists at most maxListedHostNamespaces of its
// host namespaces (objects["namespaces"] counts them all) and cuts an
// error's message to maxErrorMessage bytes, so that it stays far below
// the API server's object size limit.
const (
	maxListedHostNamespaces = 50
	maxErrorMessage         = 1024
)

// syncStatus is report as the API shows it.
func syncStatus(report syncer.SyncReport) *tenantryv1alpha1.SyncStatus {
	status := &tenantryv1alpha1.SyncStatus{
		Objects:        make(map[string]int32, len(report.Objects)),
		HostNamespaces: report.HostNamespaces[:min(len(report.HostNamespaces), maxListedHostNamespaces)],
		Refusals:       int32(report.Refusals),
		Lag:            metav1.Duration{Duration: report.Lag},
	}
	for name, n := range report.Objects {
		status.Objects[name] = int32(n)
		status.Total += int32(n)
	}
	if e := report.LastError; e != nil {
		status.LastError = &tenantryv1alpha1.SyncError{
			Time: metav1.NewTime(e.Time).Rfc3339Copy(), Resource: e.Resource, Object: e.Object, Message: printable(e.Message, maxErrorMessage),
		}
	}
	if !report.LastWrite.IsZero() {
		// As the API server keeps it, to the second: a status read back
		// compares equal.
		t := metav1.NewTime(report.LastWrite).Rfc3339Copy()
		status.LastWriteTime = &t
	}
	return status
}

// printable is s, which a tenant may have written, fit for a terminal
// (kubectl's columns, tenantry list): each control character or other
// rune that does not print is a space, and s is cut to at most n bytes,
// on a rune boundary, marked with an ellipsis when cut.
func printable(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, s)
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
