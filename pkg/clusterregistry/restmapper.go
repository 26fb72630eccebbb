package clusterregistry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// builtinGroups are the API groups that kube-apiserver serves itself:
// client-go's, and the CRD and APIService groups it also serves. A custom
// resource cannot take one (a CRD's group has a dot, and those of
// Kubernetes need an approval), so every API server of a version serves
// the same resources in them.
var builtinGroups = func() sets.Set[string] {
	groups := sets.New("apiextensions.k8s.io", "apiregistration.k8s.io")
	for _, gv := range clientgoscheme.Scheme.PrioritizedVersionsAllGroups() {
		groups.Insert(gv.Group)
	}
	return groups
}()

// builtinMappers shares the REST mappings of the built-in API groups
// among the clusters whose API servers run the same version: discovered
// once per version instead of once per cluster. A cluster's own mapper
// asks the shared one for built-in groups and discovers the rest (its
// custom resources) itself, lazily. Before, every spawn asked its API
// server for the whole aggregated discovery document and kept a mapper of
// its own: about 200 KiB of the manager's heap per idle cluster, and a
// large share of each start's CPU, the API server's included.
//
// The version is the API server's gitVersion. Two servers of one version
// that enable different built-in APIs (a beta group turned on in one)
// still map correctly what the first discovered lacks, through the
// cluster's own mapper; a built-in API that the first serves and another
// has turned off maps, and its requests then fail with NotFound.
type builtinMappers struct {
	mu        sync.Mutex
	byVersion map[string]*builtinMapper
}

// builtinMapper is one version's mapping, once discovered.
type builtinMapper struct {
	done   chan struct{}
	mapper meta.RESTMapper // nil if discovery failed
}

// mapperFor is the MapperProvider of every cluster's manager.
func (b *builtinMappers) mapperFor(timeout time.Duration) func(*rest.Config, *http.Client) (meta.RESTMapper, error) {
	return func(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
		own, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
		if err != nil {
			return nil, err
		}
		dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
		if err != nil {
			return nil, fmt.Errorf("building discovery client: %w", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		builtin, err := b.get(ctx, dc)
		if err != nil {
			return nil, err
		}
		if builtin == nil {
			return own, nil // this version's could not be discovered: this cluster discovers everything itself
		}
		return &layeredMapper{builtin: builtin, own: own}, nil
	}
}

// get returns the built-in groups' mapping of dc's API server version,
// discovering it through dc if no cluster of that version did yet; nil if
// that discovery failed (the next cluster tries again).
func (b *builtinMappers) get(ctx context.Context, dc *discovery.DiscoveryClient) (meta.RESTMapper, error) {
	info, err := dc.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the API server's version: %w", err)
	}
	version := info.GitVersion
	for {
		b.mu.Lock()
		if b.byVersion == nil {
			b.byVersion = map[string]*builtinMapper{}
		}
		m, found := b.byVersion[version]
		if !found {
			m = &builtinMapper{done: make(chan struct{})}
			b.byVersion[version] = m
		}
		b.mu.Unlock()
		if !found {
			m.mapper = discoverBuiltin(ctx, dc)
			if m.mapper == nil {
				b.mu.Lock()
				delete(b.byVersion, version)
				b.mu.Unlock()
			}
			close(m.done)
			return m.mapper, nil
		}
		select {
		case <-m.done:
			if m.mapper != nil {
				return m.mapper, nil
			}
			// The cluster that tried failed: try again, through this one.
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the discovery of %s: %w", version, ctx.Err())
		}
	}
}

// discoverBuiltin is a static mapping of the built-in groups that dc's API
// server serves, or nil if they could not all be discovered.
func discoverBuiltin(ctx context.Context, dc *discovery.DiscoveryClient) meta.RESTMapper {
	resources, err := restmapper.GetAPIGroupResourcesWithContext(ctx, dc)
	if err != nil {
		var failed *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &failed) {
			return nil
		}
		for gv := range failed.Groups {
			if builtinGroups.Has(gv.Group) {
				return nil
			}
		}
		// Only aggregated or custom groups failed: not ours to share.
	}
	var builtin []*restmapper.APIGroupResources
	for _, r := range resources {
		if builtinGroups.Has(r.Group.Name) {
			builtin = append(builtin, r)
		}
	}
	return &memoizedMapper{RESTMapper: restmapper.NewDiscoveryRESTMapper(builtin)}
}

// memoizedMapper remembers the REST mappings that its static mapping
// found. A discovery mapper looks a kind up in every group's mapping, one
// after another, and every cluster's start asks the shared mapping of its
// version for the same few kinds: that was a thirtieth of the manager's
// CPU in a start of 250 clusters.
type memoizedMapper struct {
	meta.RESTMapper
	mappings sync.Map // mappingKey -> meta.RESTMapping
}

// mappingKey is a RESTMapping call: a kind, and the versions it prefers.
type mappingKey struct {
	gk       schema.GroupKind
	versions string
}

// RESTMapping is the static mapping's answer, found once; each caller
// gets a copy of its own.
func (m *memoizedMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	key := mappingKey{gk: gk, versions: strings.Join(versions, ",")}
	if v, ok := m.mappings.Load(key); ok {
		mapping := v.(meta.RESTMapping)
		return &mapping, nil
	}
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	m.mappings.Store(key, *mapping)
	out := *mapping
	return &out, nil
}

// layeredMapper maps the built-in groups through a shared mapping, and
// every other group, or a built-in kind the shared mapping lacks (an API
// this server enables and the first of its version did not), through the
// cluster's own.
type layeredMapper struct {
	builtin meta.RESTMapper
	own     meta.RESTMapper
}

var _ meta.ResettableRESTMapper = &layeredMapper{}

// first asks the shared mapping for a built-in group and, when it has no
// match, the cluster's own.
func first[T any](m *layeredMapper, group string, ask func(meta.RESTMapper) (T, error)) (T, error) {
	if builtinGroups.Has(group) {
		// err == nil first: IsNoMatchError allocates on every call.
		if v, err := ask(m.builtin); err == nil || !meta.IsNoMatchError(err) {
			return v, err
		}
	}
	return ask(m.own)
}

func (m *layeredMapper) KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	return first(m, resource.Group, func(r meta.RESTMapper) (schema.GroupVersionKind, error) { return r.KindFor(resource) })
}

func (m *layeredMapper) KindsFor(resource schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	return first(m, resource.Group, func(r meta.RESTMapper) ([]schema.GroupVersionKind, error) { return r.KindsFor(resource) })
}

func (m *layeredMapper) ResourceFor(input schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	return first(m, input.Group, func(r meta.RESTMapper) (schema.GroupVersionResource, error) { return r.ResourceFor(input) })
}

func (m *layeredMapper) ResourcesFor(input schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	return first(m, input.Group, func(r meta.RESTMapper) ([]schema.GroupVersionResource, error) { return r.ResourcesFor(input) })
}

func (m *layeredMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	return first(m, gk.Group, func(r meta.RESTMapper) (*meta.RESTMapping, error) { return r.RESTMapping(gk, versions...) })
}

func (m *layeredMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	return first(m, gk.Group, func(r meta.RESTMapper) ([]*meta.RESTMapping, error) { return r.RESTMappings(gk, versions...) })
}

func (m *layeredMapper) ResourceSingularizer(resource string) (string, error) {
	if s, err := m.builtin.ResourceSingularizer(resource); err == nil {
		return s, nil
	}
	return m.own.ResourceSingularizer(resource)
}

// Reset forgets what the cluster's own mapping discovered; the shared
// mapping of built-in groups does not change within a version.
func (m *layeredMapper) Reset() {
	if r, ok := m.own.(meta.ResettableRESTMapper); ok {
		r.Reset()
	}
}
