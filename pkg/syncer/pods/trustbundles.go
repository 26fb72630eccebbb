package pods

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"slices"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A tenant Pod's clusterTrustBundle projections are the tenant's bundles,
// never the host's: APIAccess turns each into an item of the Pod's API
// access Secret, under the key trustBundleKey gives, and the apiAccess
// controller writes there what the tenant's bundles hold, as a kubelet
// would write the file (see trustAnchors), and again whenever a bundle
// changes.
//
// A projection that matches nothing and is optional gets an empty file, as
// from a kubelet. One that is not optional gets no key, so that the host's
// kubelet does not start the Pod, as it would not start it for a missing
// bundle; the tenant gets a FailedMount Warning Event on its Pod, and the
// Pod starts once the bundle is there.

// trustBundleKeyPrefix begins the API access Secret's keys of trust anchors.
const trustBundleKeyPrefix = "clustertrustbundle-"

// maxTrustAnchorBytes is how much of a Pod's API access Secret its trust
// anchors may fill at most (see maxAPIAccessBytes): less when the rest of
// the Secret (tokens, CA, the Pod's labels and annotations, its
// certificates) leaves less.
const maxTrustAnchorBytes = 768 << 10

// trustBundleKey is the key of the API access Secret that holds the trust
// anchors a clusterTrustBundle projection asks for: the same for two
// projections that ask the same, another for any other. Whether it is
// optional is part of what it asks: nothing found, an optional projection
// is an empty file, and another one holds the Pod back.
func trustBundleKey(p *corev1.ClusterTrustBundleProjection) string {
	h := sha256.New()
	if ptr.Deref(p.Optional, false) {
		h.Write([]byte("optional\x00"))
	}
	switch {
	case p.Name != nil:
		fmt.Fprintf(h, "name\x00%s", *p.Name)
	default:
		fmt.Fprintf(h, "signer\x00%s\x00", ptrString(p.SignerName))
		if p.LabelSelector == nil {
			h.Write([]byte("nothing")) // nil matches nothing, {} everything
		} else if s, err := metav1.LabelSelectorAsSelector(p.LabelSelector); err == nil {
			fmt.Fprintf(h, "selector\x00%s", s.String())
		} else {
			fmt.Fprintf(h, "invalid\x00%v", p.LabelSelector)
		}
	}
	return trustBundleKeyPrefix + hex.EncodeToString(h.Sum(nil)[:16])
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// trustBundleProjections are the clusterTrustBundle projections of a Pod
// spec, in the order of its volumes.
func trustBundleProjections(spec *corev1.PodSpec) []*corev1.ClusterTrustBundleProjection {
	var out []*corev1.ClusterTrustBundleProjection
	for _, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ClusterTrustBundle != nil {
				out = append(out, src.ClusterTrustBundle)
			}
		}
	}
	return out
}

// trustBundles reads a tenant's ClusterTrustBundles (certificates.k8s.io/v1)
// from the tenant's cache.
type trustBundles struct {
	tenant client.Reader
	// served says whether the tenant serves certificates.k8s.io/v1
	// ClusterTrustBundles; when it does not, no bundle matches.
	served bool
}

// trustAnchors are the trust anchors that a clusterTrustBundle projection
// asks of the tenant, as a kubelet writes them: every certificate of the
// matching bundles once, PEM-encoded (in the order of their DER bytes, not
// shuffled, so that the Secret changes only when the bundles do). found is
// false when nothing matches: then the anchors are empty.
func (b trustBundles) trustAnchors(ctx context.Context, p *corev1.ClusterTrustBundleProjection) (anchors []byte, found bool, err error) {
	if !b.served {
		return nil, false, nil
	}
	var bundles []certificatesv1.ClusterTrustBundle
	switch {
	case p.Name != nil:
		var ctb certificatesv1.ClusterTrustBundle
		switch err := b.tenant.Get(ctx, types.NamespacedName{Name: *p.Name}, &ctb); {
		case apierrors.IsNotFound(err):
			return nil, false, nil
		case err != nil:
			return nil, false, fmt.Errorf("reading the tenant's ClusterTrustBundle %s: %w", *p.Name, err)
		}
		bundles = append(bundles, ctb)
	case p.SignerName != nil && p.LabelSelector != nil: // a nil selector matches nothing
		selector, err := metav1.LabelSelectorAsSelector(p.LabelSelector)
		if err != nil {
			return nil, false, fmt.Errorf("the label selector of ClusterTrustBundles of signer %s: %w", *p.SignerName, err)
		}
		var list certificatesv1.ClusterTrustBundleList
		if err := b.tenant.List(ctx, &list, client.MatchingLabelsSelector{Selector: selector}); err != nil {
			return nil, false, fmt.Errorf("listing the tenant's ClusterTrustBundles of signer %s: %w", *p.SignerName, err)
		}
		for _, ctb := range list.Items {
			if ctb.Spec.SignerName == *p.SignerName {
				bundles = append(bundles, ctb)
			}
		}
	}
	if len(bundles) == 0 {
		return nil, false, nil
	}
	return normalizeTrustAnchors(bundles), true, nil
}

// normalizeTrustAnchors joins the certificates of bundles, each once, as
// PEM CERTIFICATE blocks, ordered by their DER bytes.
func normalizeTrustAnchors(bundles []certificatesv1.ClusterTrustBundle) []byte {
	var ders []string
	for _, ctb := range bundles {
		ders = append(ders, certificateDERs([]byte(ctb.Spec.TrustBundle))...)
	}
	slices.Sort(ders)
	return encodeCertificates(slices.Compact(ders))
}

// certificateDERs are the bytes of each PEM block of in, in order; what
// is around and between the blocks is dropped.
func certificateDERs(in []byte) []string {
	var ders []string
	for rest := in; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return ders
		}
		ders = append(ders, string(block.Bytes))
	}
}

// encodeCertificates is ders as PEM CERTIFICATE blocks (empty, not nil,
// for none).
func encodeCertificates(ders []string) []byte {
	out := []byte{}
	for _, der := range ders {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte(der)})...)
	}
	return out
}

// podBundleIndex indexes a tenant's Pods by the ClusterTrustBundles their
// projections read: "name/<bundle>" for one named, "signer/<signer>" for
// those selected by signer.
const podBundleIndex = "tenantry.dev/trust-bundles"

// bundlesRead are a Pod's podBundleIndex values.
func bundlesRead(o client.Object) []string {
	var out []string
	for _, p := range trustBundleProjections(&o.(*corev1.Pod).Spec) {
		key := "signer/" + ptrString(p.SignerName)
		if p.Name != nil {
			key = "name/" + *p.Name
		}
		if !slices.Contains(out, key) {
			out = append(out, key)
		}
	}
	return out
}

// podsReadingBundle are the requests for the tenant's Pods whose
// projections may read bundle, by its name or its signer: its change may
// change what each of them holds. tenant's Pods carry podBundleIndex.
func podsReadingBundle(ctx context.Context, tenant client.Reader, bundle *certificatesv1.ClusterTrustBundle) ([]reconcile.Request, error) {
	var out []reconcile.Request
	for _, key := range []string{"name/" + bundle.Name, "signer/" + bundle.Spec.SignerName} {
		var pods corev1.PodList
		if err := tenant.List(ctx, &pods, client.MatchingFields{podBundleIndex: key}); err != nil {
			return nil, fmt.Errorf("listing the tenant's Pods that read ClusterTrustBundle %s: %w", bundle.Name, err)
		}
		for i := range pods.Items {
			r := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&pods.Items[i])}
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// nothingMatches says, for a Warning Event, why a projection found no
// bundle.
func (b trustBundles) nothingMatches(p *corev1.ClusterTrustBundleProjection) string {
	switch {
	case !b.served:
		return "the cluster does not serve certificates.k8s.io/v1 ClusterTrustBundles"
	case p.Name != nil:
		return fmt.Sprintf("no ClusterTrustBundle is named %q", *p.Name)
	case p.LabelSelector == nil:
		return fmt.Sprintf("it selects no ClusterTrustBundle of signer %q (it has no label selector)", ptrString(p.SignerName))
	}
	return fmt.Sprintf("no ClusterTrustBundle of signer %q matches its label selector", ptrString(p.SignerName))
}
