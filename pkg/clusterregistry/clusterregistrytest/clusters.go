// Package clusterregistrytest holds a fake of clusterregistry.Clusters, for
// the tests of host-side reconcilers: clusters are named clients (a fake
// client, or a real one) whose states a test sets.
package clusterregistrytest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tenantry/tenantry/pkg/clusterregistry"
)

// Clusters is a fake clusterregistry.Clusters. Its zero value holds no
// cluster; it is safe for concurrent use.
type Clusters struct {
	mu          sync.Mutex
	clusters    map[string]*cluster
	subscribers map[int]func(clusterregistry.Status)
	next        int
}

type cluster struct {
	client  client.Client
	status  clusterregistry.Status
	watches []string
}

var _ clusterregistry.Clusters = &Clusters{}

// Run puts the named cluster in the registry, Running, with c as its
// client, and tells the subscribers.
func (f *Clusters) Run(name string, c client.Client) {
	f.set(name, c, clusterregistry.StateRunning, nil)
}

// Fail reports the named cluster Failed with err, and tells the
// subscribers; its client is no longer lent.
func (f *Clusters) Fail(name string, err error) {
	f.set(name, nil, clusterregistry.StateFailed, err)
}

// Remove takes the named cluster out, telling the subscribers Stopped.
func (f *Clusters) Remove(name string) {
	f.mu.Lock()
	delete(f.clusters, name)
	f.mu.Unlock()
	f.notify(clusterregistry.Status{Name: name, State: clusterregistry.StateStopped, Since: time.Now()})
}

func (f *Clusters) set(name string, c client.Client, state clusterregistry.State, err error) {
	s := clusterregistry.Status{Name: name, State: state, Err: err, Since: time.Now()}
	f.mu.Lock()
	if f.clusters == nil {
		f.clusters = map[string]*cluster{}
	}
	f.clusters[name] = &cluster{client: c, status: s}
	f.mu.Unlock()
	f.notify(s)
}

func (f *Clusters) notify(s clusterregistry.Status) {
	f.mu.Lock()
	subs := make([]func(clusterregistry.Status), 0, len(f.subscribers))
	for _, sub := range f.subscribers {
		subs = append(subs, sub)
	}
	f.mu.Unlock()
	for _, sub := range subs {
		sub(s)
	}
}

// WithClient implements clusterregistry.Clusters.
func (f *Clusters) WithClient(name string, fn func(c client.Client) error) error {
	f.mu.Lock()
	c, ok := f.clusters[name]
	f.mu.Unlock()
	switch {
	case !ok:
		return fmt.Errorf("cluster %q: %w", name, clusterregistry.ErrNotExist)
	case c.status.State != clusterregistry.StateRunning:
		return fmt.Errorf("cluster %q is %s: %w", name, c.status.State, clusterregistry.ErrNotRunning)
	}
	return fn(c.client)
}

// Status implements clusterregistry.Clusters.
func (f *Clusters) Status(name string) (clusterregistry.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.clusters[name]
	if !ok {
		return clusterregistry.Status{}, fmt.Errorf("cluster %q: %w", name, clusterregistry.ErrNotExist)
	}
	return c.status, nil
}

// List implements clusterregistry.Clusters.
func (f *Clusters) List() []clusterregistry.Status {
	f.mu.Lock()
	list := make([]clusterregistry.Status, 0, len(f.clusters))
	for _, c := range f.clusters {
		list = append(list, c.status)
	}
	f.mu.Unlock()
	slices.SortFunc(list, func(a, b clusterregistry.Status) int { return strings.Compare(a.Name, b.Name) })
	return list
}

// Watch implements clusterregistry.Clusters: it records the watch's name
// (once per name while the cluster runs), for Watches; no event comes of
// it, since a fake client has no cache to watch.
func (f *Clusters) Watch(_ context.Context, name string, in clusterregistry.WatchInput) error {
	if in.Name == "" || in.Watcher == nil || in.Kind == nil || in.Handler == nil {
		return fmt.Errorf("cluster %q: %w", name, clusterregistry.ErrWatchInput)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.clusters[name]
	switch {
	case !ok:
		return fmt.Errorf("cluster %q: %w", name, clusterregistry.ErrNotExist)
	case c.status.State != clusterregistry.StateRunning:
		return fmt.Errorf("cluster %q is %s: %w", name, c.status.State, clusterregistry.ErrNotRunning)
	case !slices.Contains(c.watches, in.Name):
		c.watches = append(c.watches, in.Name)
	}
	return nil
}

// Watches are the names of the named cluster's watches since it last
// started running.
func (f *Clusters) Watches(name string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clusters[name]; ok {
		return slices.Clone(c.watches)
	}
	return nil
}

// Subscribe implements clusterregistry.Clusters.
func (f *Clusters) Subscribe(fn func(clusterregistry.Status)) (cancel func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subscribers == nil {
		f.subscribers = map[int]func(clusterregistry.Status){}
	}
	id := f.next
	f.next++
	f.subscribers[id] = fn
	return func() {
		f.mu.Lock()
		delete(f.subscribers, id)
		f.mu.Unlock()
	}
}
