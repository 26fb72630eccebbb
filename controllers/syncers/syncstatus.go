package syncers

import (
	"context"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/syncer"
)

// syncStatusReporter writes VirtualCluster cluster's SyncReport to its
// status.sync.
func syncStatusReporter(host client.Client, cluster string) syncer.StatusReporter {
	return func(ctx context.Context, report syncer.SyncReport) error {
		return patchStatusField(ctx, host, cluster, "add", "sync", syncStatus(report))
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
			Time: metav1.NewTime(e.Time), Resource: e.Resource, Object: e.Object, Message: truncate(e.Message, maxErrorMessage),
		}
	}
	if !report.LastWrite.IsZero() {
		t := metav1.NewTime(report.LastWrite)
		status.LastWriteTime = &t
	}
	return status
}

// truncate is s cut to at most n bytes, on a rune boundary, marked with an
// ellipsis when cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
