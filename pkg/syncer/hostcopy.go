package syncer

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationSyncedDigest records, on a host copy, a digest of the content
// (everything but metadata and status) that its tenant object asked for
// when Tenantry last wrote it. It is how a sync tells a field another
// writer added in the host (a host controller, a mutating webhook) from one
// the tenant removed: the first is left alone, the second removed.
const AnnotationSyncedDigest = "tenantry.dev/synced-digest"

// HostCopy is the host copy that tenant should have in cluster, given
// current, the host copy as it is (nil to create), under the default label
// and annotation policy (DefaultDeniedMetadataPrefixes and
// DefaultAllowedMetadataPrefixes). It is what a sync writes, and what a
// test of a syncer checks.
//
// A new copy is the framework's metadata, then Down, on an empty object.
// An existing one is built on current so that what the host filled in
// stays, and then one of two ways:
//   - The tenant asks for what it asked at the last write (the same
//     AnnotationSyncedDigest) and current still holds all of it: whatever
//     else current holds is another writer's, and is kept as it is. Only
//     metadata is brought up to date (the framework's and what Down sets).
//     So a host webhook or controller that adds a field is not fought over.
//   - Otherwise (the tenant changed, or a field of the tenant's was changed
//     in the host): Down on current, which replaces what Down syncs, and
//     so also removes what the tenant removed.
func (s *Syncer) HostCopy(cluster string, tenant, current client.Object) (client.Object, error) {
	return s.hostCopy(translator{Cluster: cluster}, tenant, current)
}

// hostCopy is HostCopy under tr's metadata policy.
func (s *Syncer) hostCopy(tr translator, tenant, current client.Object) (client.Object, error) {
	asked, err := s.build(tr, tenant, nil)
	if err != nil {
		if current == nil {
			return nil, err
		}
		// What the tenant asks would not be made today (a policy narrowed
		// since): the copy that exists is kept in step as far as Down
		// goes, with its record as it is.
		return s.build(tr, tenant, current)
	}
	askedContent, err := content(asked)
	if err != nil {
		return nil, err
	}
	digest, err := contentDigest(askedContent)
	if err != nil {
		return nil, err
	}
	if current == nil {
		setAnnotation(asked, AnnotationSyncedDigest, digest)
		return asked, nil
	}
	host, err := s.build(tr, tenant, current)
	if err != nil {
		return nil, err
	}
	setAnnotation(host, AnnotationSyncedDigest, digest)
	if semanticallyEqual(host, current) || current.GetAnnotations()[AnnotationSyncedDigest] != digest {
		return host, nil
	}
	currentContent, err := content(current)
	if err != nil {
		return nil, err
	}
	if !contains(currentContent, askedContent) {
		return host, nil // a field of the tenant's was changed in the host: repair it
	}
	// current's content, with metadata as Down left it (a Namespace's Pod
	// Security label is Down's).
	kept := current.DeepCopyObject().(client.Object)
	kept.SetLabels(host.GetLabels())
	kept.SetAnnotations(host.GetAnnotations())
	return kept, nil
}

// build is tenant's host copy built on current (nil: on an empty object):
// the framework's metadata, then Down.
func (s *Syncer) build(tr translator, tenant, current client.Object) (client.Object, error) {
	var host client.Object
	if current == nil {
		host = s.Object()
	} else {
		host = current.DeepCopyObject().(client.Object)
	}
	tr.DenyUnprefixedAnnotations = s.DenyUnprefixedAnnotations
	tr.hostMetadata(tenant, host, s.ClusterScoped, s.CopyUserMetadata)
	if err := s.Down(tenant, host); err != nil {
		return nil, fmt.Errorf("translating %s %s down: %w", s.Name, client.ObjectKeyFromObject(tenant), err)
	}
	return host, nil
}

// content is obj as JSON-like values, without its type, metadata and
// status: what Down syncs.
func content(obj client.Object) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("reading %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	m = maps.Clone(m) // an Unstructured's own map otherwise
	for _, k := range []string{"apiVersion", "kind", "metadata", "status"} {
		delete(m, k)
	}
	return m, nil
}

// contentDigest is a short, stable digest of content (JSON sorts map keys).
func contentDigest(content map[string]any) (string, error) {
	data, err := json.Marshal(content)
	if err != nil {
		return "", fmt.Errorf("digesting host content: %w", err)
	}
	sum := sha256.Sum256(data)
	return base64.RawURLEncoding.EncodeToString(sum[:18]), nil
}

// contains says whether have holds everything want does: every key of a
// map with a value that holds want's; for a list, want's elements in their
// order, each held by an element of have, with have's other elements
// anywhere between (a sidecar, a volume or a pull secret a host webhook
// added); equal scalars.
func contains(have, want any) bool { return holds(have, want, true) }

// containsExactLists is contains with lists of the same length only: for
// objects whose every list element is Tenantry's to say, such as the
// rules of an isolation NetworkPolicy, where an element added in the host
// (a rule that lets everyone in) must go.
func containsExactLists(have, want any) bool { return holds(have, want, false) }

func holds(have, want any, extraElements bool) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return len(w) == 0 && have == nil
		}
		for k, wv := range w {
			if !holds(h[k], wv, extraElements) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok {
			return len(w) == 0 && have == nil
		}
		if !extraElements && len(h) != len(w) {
			return false
		}
		// Matching each wanted element to the first element of have left
		// that holds it leaves the most of have for the elements after.
		j := 0
		for _, wv := range w {
			for j < len(h) && !holds(h[j], wv, extraElements) {
				j++
			}
			if j == len(h) {
				return false
			}
			j++
		}
		return true
	case nil:
		return true
	}
	return equality.Semantic.DeepEqual(have, want)
}

// setAnnotation sets one annotation of obj.
func setAnnotation(obj client.Object, key, value string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[key] = value
	obj.SetAnnotations(a)
}
