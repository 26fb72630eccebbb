package providers

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// inClusterNamespacePath holds the namespace of the Pod the manager runs in.
const inClusterNamespacePath = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// releaseTimeout bounds giving up the leader Lease on a clean shutdown.
const releaseTimeout = 5 * time.Second

// newLeaderLock is the leader election Lease lock of the manager, with an
// identity of its own (host name and a UUID) so that the manager can give
// the Lease up itself (releaseLeaderLease) on a clean shutdown. Giving it
// up is not left to controller-runtime, which also tries it after the Lease
// is lost: with the host unreachable, that try holds the exit back for up to
// the renew deadline, while another replica may already lead.
func newLeaderLock(config *rest.Config, o Options) (resourcelock.Interface, error) {
	namespace, err := namespaceOr(o.LeaderElectionNamespace, "leader-election-namespace")
	if err != nil {
		return nil, fmt.Errorf("the leader election namespace: %w", err)
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("the leader election identity: %w", err)
	}
	config = rest.AddUserAgent(rest.CopyConfig(config), "leader-election")
	// A request that hangs must not use up the whole renew deadline: as
	// controller-runtime's own lock, half of it.
	config.Timeout = o.RenewDeadline / 2
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("the leader election client: %w", err)
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, o.LeaderElectionID,
		clientset.CoreV1(), clientset.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: host + "_" + string(uuid.NewUUID())})
	if err != nil {
		return nil, fmt.Errorf("the leader election lock: %w", err)
	}
	return lock, nil
}

// namespaceOr is namespace, or if it is empty the namespace of the Pod the
// manager runs in; flag names the option that sets it.
func namespaceOr(namespace, flag string) (string, error) {
	if namespace != "" {
		return namespace, nil
	}
	data, err := os.ReadFile(inClusterNamespacePath)
	if err != nil {
		return "", fmt.Errorf("--%s is not set, and the manager does not run in a Pod (%w)", flag, err)
	}
	return strings.TrimSpace(string(data)), nil
}

// releaseLeaderLease gives the leader Lease up if lock still holds it, so
// that another replica leads at once rather than after the Lease expires.
func releaseLeaderLease(lock resourcelock.Interface) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	record, _, err := lock.Get(ctx)
	if err != nil {
		return fmt.Errorf("reading the leader Lease: %w", err)
	}
	if record.HolderIdentity != lock.Identity() {
		return nil
	}
	now := metav1.NewTime(time.Now())
	err = lock.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions:    record.LeaderTransitions,
		LeaseDurationSeconds: 1,
		RenewTime:            now,
		AcquireTime:          now,
	})
	if err != nil {
		return fmt.Errorf("releasing the leader Lease: %w", err)
	}
	return nil
}
