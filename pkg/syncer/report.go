package syncer

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/tenantry/tenantry/pkg/syncer/internal/hostcache"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SyncReport is what one tenant cluster's syncers have in the host and
// did lately: what a VirtualCluster's status shows of it.
type SyncReport struct {
	// Objects counts the tenant's host copies by syncer name (a built-in
	// resource, "configmaps", or a custom one, "foos.samples.example.com"),
	// host namespaces among them as "namespaces".
	Objects map[string]int
	// HostNamespaces are the tenant's host namespaces, sorted.
	HostNamespaces []string
	// LastError is the last sync that failed, if any did since the
	// tenant's controllers started.
	LastError *SyncError
	// Refusals counts the copies refused (by the host, or by a syncer's
	// Refuse) within RefusalWindow before the report.
	Refusals int
	// LastWrite is when a host copy was last written, zero if none was
	// since the tenant's controllers started.
	LastWrite time.Time
	// Lag is the longest that a change of a tenant object waited, from
	// its event until its sync ended, among the syncs since the report
	// last told; cut to whole seconds, so under a second is 0.
	Lag time.Duration
}

// changed says whether the report tells something new against last: a
// last write later by less than lastWriteResolution is not news, nor is
// the same error failing again, so that a busy tenant's status is not
// written at every report.
func (r SyncReport) changed(last *SyncReport) bool {
	if last == nil {
		return true
	}
	if r.LastWrite.IsZero() != last.LastWrite.IsZero() || r.LastWrite.Sub(last.LastWrite) >= lastWriteResolution {
		return true
	}
	a, b := r, *last
	a.LastWrite, b.LastWrite = time.Time{}, time.Time{}
	a.LastError, b.LastError = withoutTime(a.LastError), withoutTime(b.LastError)
	return !reflect.DeepEqual(a, b)
}

// urgent says whether the report tells news that should not wait for
// MinReportInterval: the first report (once the start's work is done, see
// reporter.run), an error that appears or goes, the first refusal or the
// last one gone. A lag waits: every tenant of a manager that starts 1,000
// has one, for seconds, and two status writes each in the minute after,
// while the host still serves the start, made that start slower.
func (r SyncReport) urgent(last *SyncReport) bool {
	return last == nil ||
		(r.LastError == nil) != (last.LastError == nil) ||
		(r.Refusals == 0) != (last.Refusals == 0)
}

func withoutTime(e *SyncError) *SyncError {
	if e == nil {
		return nil
	}
	c := *e
	c.Time = time.Time{}
	return &c
}

// due says whether report now is to be told, last having been told at
// toldAt (nil: none was yet, and the first is due).
func due(now SyncReport, last *SyncReport, toldAt time.Time) bool {
	switch {
	case last == nil:
		return true
	case !now.changed(last):
		return false
	default:
		return now.urgent(last) || time.Since(toldAt) >= MinReportInterval
	}
}

// MinReportInterval is the least time between two reports a tenant's
// StatusReporter hears, unless the later is urgent: with 1,000 busy
// tenants, a status write each 60 s each is 17 a second.
const MinReportInterval = time.Minute

// lastWriteResolution is how much later a last write must be to be news.
const lastWriteResolution = time.Minute

// SyncError is one sync that failed.
type SyncError struct {
	// Time is when it failed.
	Time time.Time
	// Resource is the syncer's name, Object the tenant object's
	// namespace/name.
	Resource string
	Object   string
	// Message says why.
	Message string
}

// StatusReporter hears a tenant cluster's SyncReport when it changes:
// looked at every Options.ReportPeriod, told at most once per
// MinReportInterval unless the news is urgent (see SyncReport.urgent).
type StatusReporter func(ctx context.Context, report SyncReport) error

// RefusalWindow is how far back SyncReport.Refusals counts.
const RefusalWindow = time.Hour

// DefaultReportPeriod is how often a tenant's SyncReport is made by
// default.
const DefaultReportPeriod = 10 * time.Second

// activity records what a tenant cluster's reconcilers did, for its
// SyncReport. It is safe for concurrent use; a nil activity records
// nothing.
type activity struct {
	mu        sync.Mutex
	lastError *SyncError
	refusals  []time.Time // oldest first, within RefusalWindow of the last one
	lastWrite time.Time
	lag       time.Duration // the longest since the last report
}

// failed records a sync of resource's tenant object key that failed.
func (a *activity) failed(resource string, key types.NamespacedName, err error) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastError = &SyncError{Time: time.Now(), Resource: resource, Object: key.String(), Message: err.Error()}
}

// refused records a copy refused.
func (a *activity) refused() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	a.refusals = append(a.dropOld(now), now)
}

// wrote records a write of a host copy.
func (a *activity) wrote() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastWrite = time.Now()
}

// synced records a sync that ended, of a change that arrived at arrived.
func (a *activity) synced(arrived time.Time) {
	if a == nil {
		return
	}
	lag := time.Since(arrived)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lag = max(a.lag, lag)
}

// dropOld is the refusals within RefusalWindow of now. Callers hold mu.
func (a *activity) dropOld(now time.Time) []time.Time {
	i, _ := slices.BinarySearchFunc(a.refusals, now.Add(-RefusalWindow), func(t, cut time.Time) int { return t.Compare(cut) })
	return a.refusals[i:]
}

// fill copies the activity into r, and starts the next report's lag.
func (a *activity) fill(r *SyncReport, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refusals = a.dropOld(now)
	r.Refusals = len(a.refusals)
	r.LastWrite = a.lastWrite
	r.Lag = a.lag.Truncate(time.Second)
	a.lag = 0
	if a.lastError != nil {
		e := *a.lastError
		r.LastError = &e
	}
}

// reporter makes a tenant's SyncReport from the hub's cache (its host
// copies, by the cluster index) and its activity.
type reporter struct {
	mu       sync.Mutex // guards types: a custom type's syncer starts late
	cluster  string
	read     client.Reader
	scheme   *runtime.Scheme
	activity *activity
	// types are the syncers' types, by syncer name.
	types map[string]syncedType
}

type syncedType struct {
	obj client.Object
	gvk schema.GroupVersionKind
}

// add counts s's host copies of type gvk from now on.
func (r *reporter) add(s *Syncer, gvk schema.GroupVersionKind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.types[s.Name] = syncedType{obj: s.Object(), gvk: gvk}
}

// report makes the report now.
func (r *reporter) report(ctx context.Context) (SyncReport, error) {
	r.mu.Lock()
	types := maps.Clone(r.types)
	r.mu.Unlock()
	out := SyncReport{Objects: map[string]int{}}
	for name, t := range types {
		list := hostcache.NewList(t.obj, t.gvk, r.scheme)
		// Read only: the cache's own objects, not copies of each.
		if err := r.read.List(ctx, list, client.MatchingFields{hostcache.ClusterIndex: r.cluster}, client.UnsafeDisableDeepCopy); err != nil {
			return SyncReport{}, fmt.Errorf("counting the host copies of %s: %w", name, err)
		}
		// Copies of tenant objects, and what Tenantry makes for one (a
		// Pod's API access Secret): not a namespace's own policies, such
		// as its isolation NetworkPolicy, which name no tenant object.
		n := 0
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			if _, ok := o.(client.Object).GetAnnotations()[AnnotationTenantName]; ok {
				n++
			}
			return nil
		}); err != nil {
			return SyncReport{}, err
		}
		out.Objects[name] = n
		if name == namespaceSyncerName {
			err := meta.EachListItem(list, func(o runtime.Object) error {
				out.HostNamespaces = append(out.HostNamespaces, o.(client.Object).GetName())
				return nil
			})
			if err != nil {
				return SyncReport{}, err
			}
			slices.Sort(out.HostNamespaces)
		}
	}
	r.activity.fill(&out, time.Now())
	return out, nil
}

// run tells to the report, looked at every period, when it changed: at
// once when the change is urgent, else at most once per
// MinReportInterval; until ctx ends. The first report waits until settled
// says the work of the start is done, for up to MinReportInterval, so
// that it tells what the first sync made rather than a part of it (and
// a second write does not follow it within the minute). The longest lag
// since the report last told is told, not only the last period's.
func (r *reporter) run(ctx context.Context, log logr.Logger, period time.Duration, to StatusReporter, settled func() bool) {
	var (
		last    *SyncReport
		toldAt  time.Time
		lag     time.Duration // the longest since the last report told
		failing bool          // the last write failed: the next failure logs quietly
	)
	began := time.Now()
	tick := time.NewTicker(period)
	defer tick.Stop()
	// Until the first report is made, the end of the start's work is
	// looked for every firstReportPoll, so that the report follows it
	// closely rather than up to a period later.
	poll := time.NewTicker(firstReportPoll)
	defer poll.Stop()
	for {
		first := last == nil
		mayTell := !first || settled() || time.Since(began) >= MinReportInterval
		if mayTell {
			if first {
				poll.Stop() // made once: a failed write is retried each period
			}
			now, err := r.report(ctx)
			if err == nil {
				lag = max(lag, now.Lag)
				now.Lag = lag
			}
			switch {
			case err != nil:
				log.V(1).Info("cannot make the sync report yet", "error", err.Error())
			case !due(now, last, toldAt):
			default:
				if err := to(ctx, now); err != nil {
					if !failing {
						log.Info("cannot write the sync report; retrying", "error", err.Error())
					} else {
						log.V(1).Info("cannot write the sync report yet", "error", err.Error())
					}
					failing = true
					break
				}
				last, toldAt, lag, failing = &now, time.Now(), 0, false
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-poll.C:
		}
	}
}

// firstReportPoll is how often a tenant's reporter looks whether the work
// of the start is done, until it has made its first report.
const firstReportPoll = time.Second
