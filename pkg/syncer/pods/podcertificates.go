package pods

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A tenant Pod's podCertificate projections hold certificates that the
// tenant's signers issue, never the host's: APIAccess turns each into items
// of the Pod's API access Secret, and the apiAccess controller does what a
// kubelet does for them (see podCertificates), in the tenant: it makes the
// key, asks with a PodCertificateRequest in the tenant Pod's namespace,
// owned by the tenant Pod, naming the Pod, its ServiceAccount and its
// (virtual) node, writes the issued chain and the key into the Secret, and
// asks again from the time the signer said to (beginRefreshAt), the old
// certificate serving until the new one is issued. Until a certificate is
// issued the host's kubelet holds the Pod back, as a kubelet would; a
// request that the signer denies or fails is final for the projection, as
// for a kubelet. A request that cannot be made (no ServiceAccount yet, a
// refusal of the tenant's API server) is tried again a minute later.

// podCertificateKeyPrefix begins the API access Secret's keys of a
// podCertificate projection.
const podCertificateKeyPrefix = "podcertificate-"

// The keys of one podCertificate projection in the API access Secret,
// after its prefix (see podCertificateKey): what the Pod mounts, and what
// only Tenantry reads.
const (
	podCertKey         = "-key"             // the private key, PEM PKCS#8
	podCertChain       = "-chain"           // the issued chain, PEM
	podCertBundle      = "-bundle"          // the key, then the chain
	podCertRefreshAt   = "-refresh-at"      // when to ask again (RFC 3339)
	podCertPendingKey  = "-pending-key"     // the key of a request not issued yet
	podCertPendingName = "-pending-request" // the name of that request
	podCertRefused     = "-refused"         // why the signer refused, for good
	podCertRetryAt     = "-retry-at"        // when to try again to make a request
)

// podCertRetryAfter is how long Tenantry waits to try again to make a
// request that could not be made.
const podCertRetryAfter = time.Minute

// unboundRetry is how soon Tenantry looks again at a Pod that is not on
// a node yet: its tokens and certificates name the node, and a kubelet,
// which sees only bound Pods, asks for them once it is bound.
const unboundRetry = 2 * time.Second

// podCertRoom is the room in the API access Secret that one podCertificate
// projection takes: its key twice (alone, and in the bundle), its chain
// twice, and its state. A projection is not asked for when the Secret
// has no such room left.
const podCertRoom = 24 << 10

// podCertWarnPrefix begins what a Warning Event says of a podCertificate
// projection.
const podCertWarnPrefix = "podCertificate projection"

// podCertificateKey begins the keys of the podCertificate projection at
// index of volume (a kubelet, too, knows a projection by its volume and
// index).
func podCertificateKey(volume string, index int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d", volume, index))
	return podCertificateKeyPrefix + hex.EncodeToString(sum[:16])
}

// podCertificateItems are the Secret items that put the projection's files
// where it asked, each made by credential (see credentialItem).
func podCertificateItems(key string, p *corev1.PodCertificateProjection, credential func(key, path string, user *int64) corev1.KeyToPath) []corev1.KeyToPath {
	var items []corev1.KeyToPath
	for _, f := range []struct{ suffix, path string }{
		{podCertBundle, p.CredentialBundlePath}, {podCertKey, p.KeyPath}, {podCertChain, p.CertificateChainPath},
	} {
		if f.path != "" {
			items = append(items, credential(key+f.suffix, f.path, p.User))
		}
	}
	return items
}

// podCertificateProjection is one podCertificate projection of a Pod spec.
type podCertificateProjection struct {
	key string // see podCertificateKey
	*corev1.PodCertificateProjection
}

// podCertificateProjections are the podCertificate projections of a Pod
// spec, each with its key.
func podCertificateProjections(spec *corev1.PodSpec) []podCertificateProjection {
	var out []podCertificateProjection
	for _, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for i, src := range v.Projected.Sources {
			if src.PodCertificate != nil {
				out = append(out, podCertificateProjection{podCertificateKey(v.Name, i), src.PodCertificate})
			}
		}
	}
	return out
}

// podCertificates asks a tenant's signers for its Pods' certificates.
type podCertificates struct {
	tenant client.Client // the tenant's cached client
	live   client.Reader // the tenant, uncached
	// served says whether the tenant serves certificates.k8s.io/v1
	// PodCertificateRequests; when it does not, nothing is issued.
	served bool
	count  func(verb string)
}

// fill puts into data, the API access Secret of pod being built on old
// (the data of the Secret of this Pod, nil if none), the credentials of
// pod's podCertificate projections: those still fresh, those issued since,
// and the state of the requests it makes for the others, while room (the
// bytes the Secret can still take) allows. It says when to look again
// (zero: when a request changes) and, for the Pod's Warning Events, why
// each projection that stays empty does.
func (c podCertificates) fill(ctx context.Context, pod *corev1.Pod, old, data map[string][]byte, room int) (next time.Time, unfilled []string) {
	projections := podCertificateProjections(&pod.Spec)
	if len(projections) == 0 {
		return time.Time{}, nil
	}
	if !c.served {
		return time.Time{}, []string{podCertWarnPrefix + ": the cluster does not serve certificates.k8s.io/v1 PodCertificateRequests"}
	}
	now := time.Now()
	soonest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	keep := func(key string, suffixes ...string) {
		for _, s := range suffixes {
			if v, ok := old[key+s]; ok {
				data[key+s] = v
			}
		}
	}
	retry := func(p podCertificateProjection, why string) {
		unfilled = append(unfilled, fmt.Sprintf("%s of signer %s: %s; trying again in %s", podCertWarnPrefix, p.SignerName, why, podCertRetryAfter))
		at := now.Add(podCertRetryAfter)
		data[p.key+podCertRetryAt] = []byte(at.UTC().Format(time.RFC3339))
		soonest(at)
	}
	for _, p := range projections {
		// A credential serves until its successor is issued.
		keep(p.key, podCertKey, podCertChain, podCertBundle, podCertRefreshAt, podCertRefused)
		if len(old[p.key+podCertRefused]) > 0 {
			continue // final, as for a kubelet
		}
		if at, err := time.Parse(time.RFC3339, string(old[p.key+podCertRefreshAt])); err == nil && len(old[p.key+podCertChain]) > 0 && now.Before(at) {
			soonest(at)
			continue
		}
		if name := string(old[p.key+podCertPendingName]); name != "" {
			pcr, err := c.request(ctx, pod.Namespace, name)
			if err != nil {
				keep(p.key, podCertPendingKey, podCertPendingName)
				unfilled = append(unfilled, fmt.Sprintf("%s of signer %s: %v", podCertWarnPrefix, p.SignerName, err))
				soonest(now.Add(podCertRetryAfter))
				continue
			}
			switch state, why := requestState(pcr); state {
			case requestIssued:
				chain := cleanCertificateChain([]byte(pcr.Status.CertificateChain))
				key := old[p.key+podCertPendingKey]
				data[p.key+podCertKey], data[p.key+podCertChain] = key, chain
				data[p.key+podCertBundle] = append(bytes.Clone(key), chain...)
				refreshAt := pcr.Status.BeginRefreshAt.Time
				data[p.key+podCertRefreshAt] = []byte(refreshAt.UTC().Format(time.RFC3339))
				soonest(refreshAt)
				continue
			case requestPending:
				keep(p.key, podCertPendingKey, podCertPendingName)
				continue // the request's change brings the Pod back
			case requestRefused:
				refused := fmt.Sprintf("%s of signer %s: PodCertificateRequest %s %s", podCertWarnPrefix, p.SignerName, name, why)
				unfilled = append(unfilled, refused)
				data[p.key+podCertRefused] = []byte(refused)
				continue
			}
			// Gone (the tenant cleans up old requests): ask again.
		}
		if at, err := time.Parse(time.RFC3339, string(old[p.key+podCertRetryAt])); err == nil && now.Before(at) {
			keep(p.key, podCertRetryAt)
			soonest(at)
			continue
		}
		if pod.Spec.NodeName == "" {
			soonest(now.Add(unboundRetry)) // the request names the node
			continue
		}
		if room < podCertRoom {
			retry(p, fmt.Sprintf("the Pod's credentials exceed what the host holds for a Pod (%d KiB)", maxAPIAccessBytes>>10))
			continue
		}
		key, name, err := c.ask(ctx, pod, p.PodCertificateProjection)
		if err != nil {
			retry(p, err.Error())
			continue
		}
		room -= podCertRoom
		data[p.key+podCertPendingKey], data[p.key+podCertPendingName] = key, []byte(name)
	}
	return next, unfilled
}

// request reads a PodCertificateRequest of the tenant, from the cache, or
// from the tenant when the cache has not seen it yet (it was made a
// moment ago): nil if it is gone.
func (c podCertificates) request(ctx context.Context, namespace, name string) (*certificatesv1.PodCertificateRequest, error) {
	var pcr certificatesv1.PodCertificateRequest
	key := types.NamespacedName{Namespace: namespace, Name: name}
	err := c.tenant.Get(ctx, key, &pcr)
	if apierrors.IsNotFound(err) {
		err = c.live.Get(ctx, key, &pcr)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the tenant's PodCertificateRequest %s: %w", key, err)
	}
	return &pcr, nil
}

// The states of a PodCertificateRequest, for the Pod that made it.
const (
	requestGone = iota
	requestPending
	requestIssued
	requestRefused
)

// requestState says how a request stands, and, refused, why.
func requestState(pcr *certificatesv1.PodCertificateRequest) (state int, why string) {
	if pcr == nil {
		return requestGone, ""
	}
	for _, t := range []string{certificatesv1.PodCertificateRequestConditionTypeDenied, certificatesv1.PodCertificateRequestConditionTypeFailed} {
		if c := meta.FindStatusCondition(pcr.Status.Conditions, t); c != nil && c.Status == metav1.ConditionTrue {
			return requestRefused, fmt.Sprintf("was %s (%s: %s)", map[string]string{
				certificatesv1.PodCertificateRequestConditionTypeDenied: "denied",
				certificatesv1.PodCertificateRequestConditionTypeFailed: "failed",
			}[t], c.Reason, c.Message)
		}
	}
	if pcr.Status.CertificateChain != "" && pcr.Status.BeginRefreshAt != nil {
		return requestIssued, ""
	}
	return requestPending, ""
}

// ask makes a key and asks the tenant's signer for a certificate of it
// for pod, on its node, as a kubelet does: it returns the key (PEM) and
// the name of the request.
func (c podCertificates) ask(ctx context.Context, pod *corev1.Pod, p *corev1.PodCertificateProjection) (keyPEM []byte, name string, err error) {
	saName := serviceAccountOf(pod)
	var sa corev1.ServiceAccount
	if err := c.tenant.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: saName}, &sa); err != nil {
		return nil, "", fmt.Errorf("reading ServiceAccount %s/%s of Pod %s for its certificate: %w", pod.Namespace, saName, pod.Name, err)
	}
	var node corev1.Node
	if err := c.tenant.Get(ctx, types.NamespacedName{Name: pod.Spec.NodeName}, &node); err != nil {
		return nil, "", fmt.Errorf("reading Node %s of Pod %s/%s for its certificate: %w", pod.Spec.NodeName, pod.Namespace, pod.Name, err)
	}
	key, stub, err := newKeyAndStubRequest(p.KeyType)
	if err != nil {
		return nil, "", fmt.Errorf("%s of Pod %s/%s: %w", podCertWarnPrefix, pod.Namespace, pod.Name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, "", fmt.Errorf("encoding the key of Pod %s/%s's certificate: %w", pod.Namespace, pod.Name, err)
	}
	pcr := &certificatesv1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, GenerateName: "req-", // a kubelet's
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}},
		},
		Spec: certificatesv1.PodCertificateRequestSpec{
			SignerName: p.SignerName,
			PodName:    pod.Name, PodUID: pod.UID,
			ServiceAccountName: sa.Name, ServiceAccountUID: sa.UID,
			NodeName: types.NodeName(node.Name), NodeUID: node.UID,
			MaxExpirationSeconds:      p.MaxExpirationSeconds,
			StubPKCS10Request:         stub,
			UnverifiedUserAnnotations: p.UserAnnotations,
		},
	}
	if err := c.tenant.Create(ctx, pcr); err != nil {
		return nil, "", fmt.Errorf("asking the tenant for a certificate of signer %s for Pod %s/%s: %w", p.SignerName, pod.Namespace, pod.Name, err)
	}
	c.count("create")
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), pcr.Name, nil
}

// newKeyAndStubRequest makes a private key of keyType (one of the
// projection's: RSA3072, RSA4096, ECDSAP256, ECDSAP384, ECDSAP521,
// ED25519; ECDSAP256 when empty) and the PKCS#10 request, signed by it,
// that proves its possession.
func newKeyAndStubRequest(keyType string) (crypto.Signer, []byte, error) {
	var (
		key crypto.Signer
		err error
	)
	switch keyType {
	case "RSA3072":
		key, err = rsa.GenerateKey(rand.Reader, 3072)
	case "RSA4096":
		key, err = rsa.GenerateKey(rand.Reader, 4096)
	case "ECDSAP256", "":
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ECDSAP384":
		key, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "ECDSAP521":
		key, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	case "ED25519":
		_, key, err = ed25519.GenerateKey(rand.Reader)
	default:
		return nil, nil, fmt.Errorf("unknown key type %q", keyType)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("making a %s key: %w", keyType, err)
	}
	stub, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the request with the %s key: %w", keyType, err)
	}
	return key, stub, nil
}

// cleanCertificateChain keeps only the PEM blocks of an issued chain, each
// as a CERTIFICATE block, in order, as a kubelet writes it.
func cleanCertificateChain(in []byte) []byte {
	return encodeCertificates(certificateDERs(in))
}

// podsOfRequest is the request of the tenant Pod that owns a
// PodCertificateRequest, if a Pod does.
func podsOfRequest(_ context.Context, pcr *certificatesv1.PodCertificateRequest) []reconcile.Request {
	for _, o := range pcr.OwnerReferences {
		if o.APIVersion == "v1" && o.Kind == "Pod" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: pcr.Namespace, Name: o.Name}}}
		}
	}
	return nil
}
