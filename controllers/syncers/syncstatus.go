package syncers

import (
	"context"

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

// syncStatus is report as the API shows it.
func syncStatus(report syncer.SyncReport) *tenantryv1alpha1.SyncStatus {
	status := &tenantryv1alpha1.SyncStatus{
		Objects:        make(map[string]int32, len(report.Objects)),
		HostNamespaces: report.HostNamespaces,
		Refusals:       int32(report.Refusals),
		Lag:            metav1.Duration{Duration: report.Lag},
	}
	for name, n := range report.Objects {
		status.Objects[name] = int32(n)
		status.Total += int32(n)
	}
	if e := report.LastError; e != nil {
		status.LastError = &tenantryv1alpha1.SyncError{
			Time: metav1.NewTime(e.Time), Resource: e.Resource, Object: e.Object, Message: e.Message,
		}
	}
	if !report.LastWrite.IsZero() {
		t := metav1.NewTime(report.LastWrite)
		status.LastWriteTime = &t
	}
	return status
}
