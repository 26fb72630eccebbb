package pods

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/tenantry/tenantry/pkg/syncer"
)

// APIAccessSecretSuffix ends the name of every Pod's API access Secret,
// "<pod>-tenantry-api-access" in its host namespace, which holds what its
// containers need to reach their own tenant API server: the tenant's CA,
// tokens that the tenant issued for the Pod's ServiceAccount, and where the
// tenant API server is. Tenant Secrets and Pods may not use such names: a
// Pod could read another Pod's token through them.
const APIAccessSecretSuffix = "-tenantry-api-access"

// ReasonFailedMount is the reason of the Warning Event on a tenant Pod whose
// projection cannot be filled from its API access Secret: a
// clusterTrustBundle projection that matches nothing and is not optional,
// or whose bundles do not fit into the Secret; a podCertificate projection
// whose request the tenant's signer denied or failed, or that could not be
// asked for; either, when the tenant does not serve the API it needs. The
// host's kubelet holds the Pod back until the files can be written.
const ReasonFailedMount = "FailedMount"

// maxAPIAccessBytes is how much a Pod's API access Secret holds at most:
// a Secret holds 1 MiB, less room for its metadata.
const maxAPIAccessBytes = 1<<20 - 32<<10

// dataSize is the size of a Secret's data.
func dataSize(data map[string][]byte) int {
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	return n
}

// The keys of a Pod's API access Secret.
const (
	apiAccessTokenKey = "token"
	apiAccessCAKey    = "ca.crt"
	apiAccessHostKey  = "kubernetes-service-host"
	apiAccessPortKey  = "kubernetes-service-port"
	apiAccessURLKey   = "kubernetes-port"
	// The tenant Pod's labels and annotations, in the downward API's
	// format, for the downward API's metadata.labels and
	// metadata.annotations files: the host Pod's would show Tenantry's
	// and lack what the policy did not copy.
	apiAccessLabelsKey      = "labels"
	apiAccessAnnotationsKey = "annotations"
	// annotationTokensRefresh says when the Secret's tokens are renewed (see
	// renewAfter).
	annotationTokensRefresh = "tenantry.dev/tokens-refresh-at"
	// rootCAConfigMap is the ConfigMap in which a cluster publishes its CA
	// in every namespace; in a host namespace it is the host's.
	rootCAConfigMap = "kube-root-ca.crt"
	// defaultTokenSeconds is a projected token's lifetime when its source
	// names none, as the API server defaults it.
	defaultTokenSeconds = 3600
)

// APIAccess rewrites spec, the host copy of the spec of the tenant Pod
// named podName, so that the Pod reaches its own tenant's API server as an
// in-cluster client would reach its cluster's:
//
//   - a projected service account token becomes the same file from the
//     Pod's API access Secret, which holds a token that the tenant issued
//     for the Pod's ServiceAccount, bound to the tenant Pod and renewed
//     before it expires; kube-root-ca.crt (projected or as a volume)
//     becomes the tenant's CA from the same Secret;
//   - every container gets KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT
//     and the other variables of the kubernetes Service, naming the tenant
//     API server, from that Secret, unless it sets them itself;
//   - the downward API's metadata.namespace and metadata.uid give the
//     tenant Pod's, not the host copy's, and its metadata.labels and
//     metadata.annotations files come from the same Secret, which holds
//     the tenant Pod's own (the host copy's carry Tenantry's labels, and
//     lack the annotations that the policy did not copy);
//   - a clusterTrustBundle projection becomes the same file from the same
//     Secret, which holds what the tenant's bundles hold, never the
//     host's (see trustBundles); a podCertificate projection becomes the
//     same files from the same Secret, which holds a key and a
//     certificate that the tenant's signer issued for the tenant Pod,
//     never the host's (see podCertificates).
//
// The Secret is made by the Pod syncer once the host Pod exists (the kubelet
// waits for it), owned by the host Pod, so that the host removes it with
// the Pod; a Pod that mounts no token and no CA gets a Secret too, without
// a token, for its service variables: no host Pod is told where the host
// API server is. The host Pod never carries a host credential, and no
// token is logged or put in an annotation.
//
// It refuses (see syncer.Refuse) a spec that names a Secret ending in
// APIAccessSecretSuffix.
func APIAccess(podName string, spec *corev1.PodSpec) error {
	if err := refuseCredentialSources(spec); err != nil {
		return err
	}
	secret := apiAccessSecretName(podName)
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		switch {
		case v.Projected != nil:
			credential := func(key, path string, user *int64) corev1.KeyToPath {
				return credentialItem(spec, v.Projected, key, path, user)
			}
			for j := range v.Projected.Sources {
				src := &v.Projected.Sources[j]
				switch {
				case src.ServiceAccountToken != nil:
					tp := src.ServiceAccountToken
					*src = corev1.VolumeProjection{Secret: &corev1.SecretProjection{
						LocalObjectReference: corev1.LocalObjectReference{Name: secret},
						Items:                []corev1.KeyToPath{credential(tokenKey(tp.Audience), tp.Path, tp.User)},
					}}
				case src.ConfigMap != nil && src.ConfigMap.Name == rootCAConfigMap:
					*src = corev1.VolumeProjection{Secret: &corev1.SecretProjection{
						LocalObjectReference: corev1.LocalObjectReference{Name: secret},
						Items:                caItems(src.ConfigMap.Items),
					}}
				case src.PodCertificate != nil:
					*src = corev1.VolumeProjection{Secret: &corev1.SecretProjection{
						LocalObjectReference: corev1.LocalObjectReference{Name: secret},
						Items:                podCertificateItems(podCertificateKey(v.Name, j), src.PodCertificate, credential),
					}}
				case src.ClusterTrustBundle != nil:
					*src = corev1.VolumeProjection{Secret: &corev1.SecretProjection{
						LocalObjectReference: corev1.LocalObjectReference{Name: secret},
						Items:                []corev1.KeyToPath{credential(trustBundleKey(src.ClusterTrustBundle), src.ClusterTrustBundle.Path, src.ClusterTrustBundle.User)},
					}}
				}
			}
			v.Projected.Sources = splitMetadataMaps(secret, v.Projected.Sources)
			for _, src := range v.Projected.Sources {
				if src.DownwardAPI != nil {
					tenantFieldRefs(src.DownwardAPI.Items)
				}
			}
		case v.ConfigMap != nil && v.ConfigMap.Name == rootCAConfigMap:
			v.VolumeSource = corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: secret, Items: caItems(v.ConfigMap.Items), DefaultMode: v.ConfigMap.DefaultMode,
			}}
		case v.DownwardAPI != nil:
			downward := []corev1.VolumeProjection{{DownwardAPI: &corev1.DownwardAPIProjection{Items: v.DownwardAPI.Items}}}
			split := splitMetadataMaps(secret, downward)
			for _, src := range split {
				if src.DownwardAPI != nil {
					tenantFieldRefs(src.DownwardAPI.Items)
				}
			}
			if len(split) != 1 || split[0].DownwardAPI == nil {
				v.VolumeSource = corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: split, DefaultMode: v.DownwardAPI.DefaultMode,
				}}
			} else {
				v.DownwardAPI.Items = split[0].DownwardAPI.Items
			}
		}
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			for j := range cs[i].Env {
				ref := cs[i].Env[j].ValueFrom
				if ref == nil || ref.FieldRef == nil {
					continue
				}
				if key, ok := metadataKey(ref.FieldRef.FieldPath); ok {
					cs[i].Env[j].ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
					}}
					continue
				}
				ref.FieldRef.FieldPath = tenantFieldPath(ref.FieldRef.FieldPath)
			}
			// With a token or without, the in-cluster address is the
			// tenant's: never the host API server's, which the kubelet
			// would give.
			cs[i].Env = append(serviceEnv(secret, cs[i].Env), cs[i].Env...)
		}
	}
	return nil
}

// credentialItem is the Secret item, key to path, that stands in for a
// credential's projection (a token, trust anchors, a key and certificate)
// in projected volume v of spec, written as a kubelet writes that
// projection: owned by user (else the volume's defaultUser), and 0600
// rather than the volume's defaultMode when a user owns it or the Pod has
// an fsGroup (whose group the kubelet then gives read access).
func credentialItem(spec *corev1.PodSpec, v *corev1.ProjectedVolumeSource, key, path string, user *int64) corev1.KeyToPath {
	item := corev1.KeyToPath{Key: key, Path: path, User: user}
	if user == nil {
		user = v.DefaultUser
	}
	if user != nil || spec.SecurityContext != nil && spec.SecurityContext.FSGroup != nil {
		item.Mode = ptr.To[int32](0o600)
	}
	return item
}

// refuseCredentialSources refuses a tenant Pod spec that would read
// credentials it must not: another Pod's API access Secret.
func refuseCredentialSources(spec *corev1.PodSpec) error {
	reserved := func(secret string) error {
		if strings.HasSuffix(secret, APIAccessSecretSuffix) {
			return syncer.Refuse("the Pod names Secret %s: Secret names ending in %q are reserved for Pods' API access", secret, APIAccessSecretSuffix)
		}
		return nil
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			if err := reserved(v.Secret.SecretName); err != nil {
				return err
			}
		}
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.Secret != nil {
				if err := reserved(src.Secret.Name); err != nil {
					return err
				}
			}
		}
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					if err := reserved(e.ValueFrom.SecretKeyRef.Name); err != nil {
						return err
					}
				}
			}
			for _, e := range c.EnvFrom {
				if e.SecretRef != nil {
					if err := reserved(e.SecretRef.Name); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// apiAccessSecretName is the name of the API access Secret of the Pod
// named pod, in the Pod's host namespace.
func apiAccessSecretName(pod string) string {
	// Distinct Pods never share a name: a name that fits is kept, below
	// the longest a name may be; one that does not is cut and given a
	// digest of all of it, to exactly that length. A tenant can neither
	// name a Pod as another's cut name, nor find two long names of one
	// digest (128 bits).
	const maxName = 253
	if len(pod)+len(APIAccessSecretSuffix) < maxName {
		return pod + APIAccessSecretSuffix
	}
	sum := sha256.Sum256([]byte(pod))
	hash := hex.EncodeToString(sum[:16])
	prefix := []byte(pod[:maxName-len(APIAccessSecretSuffix)-len(hash)-1])
	// A DNS label ends in a letter or digit.
	for i := len(prefix) - 1; i >= 0 && (prefix[i] == '.' || prefix[i] == '-'); i-- {
		prefix[i] = '0'
	}
	return string(prefix) + "-" + hash + APIAccessSecretSuffix
}

// tokenKey is the Secret key of the token for audience ("" for the tenant
// API server's own).
func tokenKey(audience string) string {
	if audience == "" {
		return apiAccessTokenKey
	}
	sum := sha256.Sum256([]byte(audience))
	return apiAccessTokenKey + "-" + hex.EncodeToString(sum[:])[:12]
}

// caItems maps kube-root-ca.crt's items to the Secret's CA.
func caItems(items []corev1.KeyToPath) []corev1.KeyToPath {
	if len(items) == 0 {
		return []corev1.KeyToPath{{Key: apiAccessCAKey, Path: apiAccessCAKey}}
	}
	out := make([]corev1.KeyToPath, len(items))
	for i, item := range items {
		out[i] = corev1.KeyToPath{Key: apiAccessCAKey, Path: item.Path, Mode: item.Mode}
	}
	return out
}

// splitMetadataMaps moves the downward API's metadata.labels and
// metadata.annotations files of sources to the API access Secret, which
// holds the tenant Pod's: every other source, and every other item, stays
// as it was, in order.
func splitMetadataMaps(secret string, sources []corev1.VolumeProjection) []corev1.VolumeProjection {
	out := make([]corev1.VolumeProjection, 0, len(sources))
	for _, src := range sources {
		if src.DownwardAPI == nil {
			out = append(out, src)
			continue
		}
		var rest []corev1.DownwardAPIVolumeFile
		var fromSecret []corev1.KeyToPath
		for _, item := range src.DownwardAPI.Items {
			key := ""
			if item.FieldRef != nil {
				switch path := item.FieldRef.FieldPath; path {
				case "metadata.labels":
					key = apiAccessLabelsKey
				case "metadata.annotations":
					key = apiAccessAnnotationsKey
				default:
					key, _ = metadataKey(path)
				}
			}
			if key == "" {
				rest = append(rest, item)
				continue
			}
			fromSecret = append(fromSecret, corev1.KeyToPath{Key: key, Path: item.Path, Mode: item.Mode})
		}
		if len(rest) > 0 || len(fromSecret) == 0 {
			out = append(out, corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{Items: rest}})
		}
		if len(fromSecret) > 0 {
			out = append(out, corev1.VolumeProjection{Secret: &corev1.SecretProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Items: fromSecret,
			}})
		}
	}
	return out
}

// metadataMapsShown says whether a tenant Pod's volumes show its labels
// and its annotations through the downward API (see splitMetadataMaps).
func metadataMapsShown(spec *corev1.PodSpec) (labels, annotations bool) {
	for _, path := range fieldPaths(spec, false) {
		switch path {
		case "metadata.labels":
			labels = true
		case "metadata.annotations":
			annotations = true
		}
	}
	return labels, annotations
}

// metadataShown says whether a tenant Pod shows any of its labels, and any
// of its annotations, through the downward API: whole, in a volume, or
// one by one, in a volume or a variable.
func metadataShown(spec *corev1.PodSpec) (labels, annotations bool) {
	for _, path := range fieldPaths(spec, true) {
		labels = labels || path == "metadata.labels" || strings.HasPrefix(path, labelPathPrefix)
		annotations = annotations || path == "metadata.annotations" || strings.HasPrefix(path, annotationPathPrefix)
	}
	return labels, annotations
}

// fieldPaths are the downward API field paths of spec's volumes and, with
// env, of its containers' variables (ephemeral containers' too).
func fieldPaths(spec *corev1.PodSpec, env bool) []string {
	var out []string
	note := func(items []corev1.DownwardAPIVolumeFile) {
		for _, item := range items {
			if item.FieldRef != nil {
				out = append(out, item.FieldRef.FieldPath)
			}
		}
	}
	for _, v := range spec.Volumes {
		switch {
		case v.DownwardAPI != nil:
			note(v.DownwardAPI.Items)
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.DownwardAPI != nil {
					note(src.DownwardAPI.Items)
				}
			}
		}
	}
	if !env {
		return out
	}
	noteEnv := func(vars []corev1.EnvVar) {
		for _, e := range vars {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				out = append(out, e.ValueFrom.FieldRef.FieldPath)
			}
		}
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			noteEnv(c.Env)
		}
	}
	for _, c := range spec.EphemeralContainers {
		noteEnv(c.Env)
	}
	return out
}

// The downward API's paths of one label and one annotation:
// metadata.labels['KEY'], metadata.annotations['KEY'].
const (
	labelPathPrefix      = "metadata.labels['"
	annotationPathPrefix = "metadata.annotations['"
)

// metadataKey is the API access Secret's key for path when path names one
// label or annotation of the Pod: the tenant Pod's, which the host Pod may
// not carry (a denied prefix, an annotation without a prefix).
func metadataKey(path string) (string, bool) {
	kind, key, ok := metadataPath(path)
	if !ok {
		return "", false
	}
	sum := sha256.Sum256([]byte(key))
	return kind + "." + hex.EncodeToString(sum[:10]), true
}

// metadataPath splits path, metadata.labels['KEY'] or
// metadata.annotations['KEY'], into "label" or "annotation" and KEY.
func metadataPath(path string) (kind, key string, ok bool) {
	for prefix, kind := range map[string]string{labelPathPrefix: "label", annotationPathPrefix: "annotation"} {
		if rest, found := strings.CutPrefix(path, prefix); found {
			if key, found := strings.CutSuffix(rest, "']"); found && key != "" {
				return kind, key, true
			}
		}
	}
	return "", "", false
}

// metadataValues are the API access Secret's items for the labels and
// annotations pod shows one by one (see metadataKey): their values, empty
// for those it does not have, as the downward API gives them.
func metadataValues(pod *corev1.Pod) map[string][]byte {
	out := map[string][]byte{}
	for _, path := range fieldPaths(&pod.Spec, true) {
		kind, k, ok := metadataPath(path)
		if !ok {
			continue
		}
		key, _ := metadataKey(path)
		if kind == "label" {
			out[key] = []byte(pod.Labels[k])
		} else {
			out[key] = []byte(pod.Annotations[k])
		}
	}
	return out
}

// downwardAPIMap is a map as the downward API writes it to a file: a
// key="value" line per key, sorted, the value quoted as Go quotes it, with
// no newline at the end.
func downwardAPIMap(m map[string]string) []byte {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	return []byte(b.String())
}

func tenantFieldRefs(items []corev1.DownwardAPIVolumeFile) {
	for i := range items {
		if items[i].FieldRef != nil {
			items[i].FieldRef.FieldPath = tenantFieldPath(items[i].FieldRef.FieldPath)
		}
	}
}

// tenantFieldPath makes a downward API field of a host Pod give what the
// tenant Pod has: its namespace and UID are in the annotations that
// Tenantry puts on the host copy.
func tenantFieldPath(path string) string {
	switch path {
	case "metadata.namespace":
		return "metadata.annotations['" + syncer.AnnotationTenantNamespace + "']"
	case "metadata.uid":
		return "metadata.annotations['" + syncer.AnnotationTenantUID + "']"
	}
	return path
}

// serviceEnv are the kubernetes Service's variables, naming the tenant API
// server from the Pod's API access Secret, less those that env sets.
func serviceEnv(secret string, env []corev1.EnvVar) []corev1.EnvVar {
	from := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key,
		}}
	}
	all := []corev1.EnvVar{
		{Name: "KUBERNETES_SERVICE_HOST", ValueFrom: from(apiAccessHostKey)},
		{Name: "KUBERNETES_SERVICE_PORT", ValueFrom: from(apiAccessPortKey)},
		{Name: "KUBERNETES_SERVICE_PORT_HTTPS", ValueFrom: from(apiAccessPortKey)},
		{Name: "KUBERNETES_PORT", ValueFrom: from(apiAccessURLKey)},
		{Name: "KUBERNETES_PORT_443_TCP", ValueFrom: from(apiAccessURLKey)},
		{Name: "KUBERNETES_PORT_443_TCP_ADDR", ValueFrom: from(apiAccessHostKey)},
		{Name: "KUBERNETES_PORT_443_TCP_PORT", ValueFrom: from(apiAccessPortKey)},
		{Name: "KUBERNETES_PORT_443_TCP_PROTO", Value: "tcp"},
	}
	return slices.DeleteFunc(all, func(v corev1.EnvVar) bool {
		return slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == v.Name })
	})
}

// usesAPIAccess says whether a host Pod spec mounts or reads its API access
// Secret: every host Pod that APIAccess made reads it, for its
// environment at least.
func usesAPIAccess(spec *corev1.PodSpec, secret string) bool {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			if slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
				return e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == secret
			}) {
				return true
			}
		}
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			return true
		}
		if v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool {
			return s.Secret != nil && s.Secret.Name == secret
		}) {
			return true
		}
	}
	return false
}

// tokenRequests are the tokens a tenant Pod's spec asks for, by audience,
// each with the shortest lifetime asked.
func tokenRequests(spec *corev1.PodSpec) map[string]int64 {
	out := map[string]int64{}
	for _, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken == nil {
				continue
			}
			seconds := ptr.Deref(s.ServiceAccountToken.ExpirationSeconds, defaultTokenSeconds)
			if have, ok := out[s.ServiceAccountToken.Audience]; !ok || seconds < have {
				out[s.ServiceAccountToken.Audience] = seconds
			}
		}
	}
	return out
}

// tenantServer is where Pods in the host reach a tenant's API server, and
// what they trust it by.
type tenantServer struct {
	host, port string
	ca         []byte
}

// newTenantServer reads the tenant API server's address off server (a URL;
// "" for config's) and its CA off config.
func newTenantServer(config *rest.Config, server string) (tenantServer, error) {
	if server == "" {
		server = config.Host
	}
	u, err := url.Parse(server)
	if err != nil {
		return tenantServer{}, fmt.Errorf("the tenant API server's URL for Pods: %w", err)
	}
	// An in-cluster client speaks HTTPS to a host and port, nothing more.
	if u.Scheme != "https" || u.Hostname() == "" || strings.Trim(u.Path, "/") != "" {
		return tenantServer{}, fmt.Errorf("the tenant API server's URL for Pods, %q, is not https://<host>[:<port>] "+
			"(in-cluster clients know no scheme and no path): set one that Pods can use (VirtualCluster spec.inClusterServer)", server)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	ca := config.CAData
	if len(ca) == 0 && config.CAFile != "" {
		if ca, err = os.ReadFile(config.CAFile); err != nil {
			return tenantServer{}, fmt.Errorf("reading the tenant API server's CA: %w", err)
		}
	}
	return tenantServer{host: u.Hostname(), port: port, ca: ca}, nil
}

// apiAccessExtension keeps, in every tenant that syncs Pods, the API
// access Secrets of its Pods (see apiAccess).
type apiAccessExtension struct {
	// inClusterServer is Options.InClusterServer.
	inClusterServer string
}

// Setup keeps the API access Secrets of the tenant's Pods.
func (e *apiAccessExtension) Setup(scope *syncer.TenantScope) error {
	server, err := newTenantServer(scope.Manager().GetConfig(), e.inClusterServer)
	if err != nil {
		return err
	}
	mgr := scope.Manager()
	servesBundles, err := serves(mgr.GetRESTMapper(), "ClusterTrustBundle")
	if err != nil {
		return err
	}
	servesRequests, err := serves(mgr.GetRESTMapper(), "PodCertificateRequest")
	if err != nil {
		return err
	}
	r := &apiAccess{
		scope: scope, tenant: mgr.GetClient(), server: server,
		bundles: trustBundles{tenant: mgr.GetClient(), served: servesBundles},
		certificates: podCertificates{tenant: mgr.GetClient(), live: mgr.GetAPIReader(), served: servesRequests,
			count: func(verb string) { scope.CountWrite("podcertificaterequests", "up", verb) }},
		recorder: mgr.GetEventRecorder("tenantry-syncer"),
	}
	// The host Pod brings its tenant Pod; so does its Secret, when changed
	// or deleted by someone else.
	hostPod := func(o client.Object) (types.NamespacedName, bool) {
		key, ok := scope.TenantKey(o)
		return key, ok && usesAPIAccess(&o.(*corev1.Pod).Spec, apiAccessSecretName(o.GetName()))
	}
	accessSecret := func(o client.Object) (types.NamespacedName, bool) {
		key, ok := scope.TenantKey(o)
		return key, ok && o.GetName() == apiAccessSecretName(key.Name)
	}
	sources := []source.TypedSource[reconcile.Request]{
		scope.TenantObjects(&corev1.Pod{}, predicate.Funcs{
			// The host Pod's events tell of the rest; the Secret holds the
			// tenant Pod's own labels and annotations, which the host Pod
			// may not carry.
			UpdateFunc: func(e event.UpdateEvent) bool {
				labels, annotations := metadataShown(&e.ObjectNew.(*corev1.Pod).Spec)
				return labels && !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) ||
					annotations && !maps.Equal(e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()) ||
					// An ephemeral container may show one label or
					// annotation in a variable.
					len(e.ObjectOld.(*corev1.Pod).Spec.EphemeralContainers) != len(e.ObjectNew.(*corev1.Pod).Spec.EphemeralContainers)
			},
		}),
		scope.HostEvents(&corev1.Pod{}, hostPod),
		scope.HostEvents(&corev1.Secret{}, accessSecret),
	}
	// Bundles and requests are watched from the first Pod that reads them
	// (see onFirstUse).
	if servesBundles {
		// A bundle's change reaches the Pods that project it, by its name
		// or its signer.
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podBundleIndex, bundlesRead); err != nil {
			return fmt.Errorf("indexing tenant Pods by the ClusterTrustBundles they project: %w", err)
		}
		r.bundleEvents = &onFirstUse{watch: source.Kind(mgr.GetCache(), &certificatesv1.ClusterTrustBundle{},
			handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, bundle *certificatesv1.ClusterTrustBundle) []reconcile.Request {
				requests, err := podsReadingBundle(ctx, mgr.GetClient(), bundle)
				if err != nil {
					scope.Logger().Error(err, "finding the Pods that project a changed ClusterTrustBundle", "clusterTrustBundle", bundle.Name)
				}
				return requests
			}))}
		sources = append(sources, r.bundleEvents)
	}
	if servesRequests {
		// A request's change reaches the Pod that made it.
		r.requestEvents = &onFirstUse{watch: source.Kind(mgr.GetCache(), &certificatesv1.PodCertificateRequest{},
			handler.TypedEnqueueRequestsFromMapFunc(podsOfRequest))}
		sources = append(sources, r.requestEvents)
	}
	return scope.RunController("pod-api-access", 1, r, sources...)
}

// serves says whether a tenant serves kind of certificates.k8s.io/v1
// (ClusterTrustBundle and PodCertificateRequest are GA since Kubernetes
// 1.37).
func serves(mapper meta.RESTMapper, kind string) (bool, error) {
	_, err := mapper.RESTMapping(schema.GroupKind{Group: certificatesv1.GroupName, Kind: kind}, certificatesv1.SchemeGroupVersion.Version)
	switch {
	case meta.IsNoMatchError(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("asking whether the tenant serves %s: %w", kind, err)
	}
	return true, nil
}

// apiAccess keeps, for one tenant, the API access Secret of each of its
// Pods whose host copy mounts one (see APIAccess): it asks the tenant for
// the tokens, writes the Secret owned by the host Pod, and renews the
// tokens before they expire.
type apiAccess struct {
	scope        *syncer.TenantScope
	tenant       client.Client // the tenant's cached client
	server       tenantServer
	bundles      trustBundles
	certificates podCertificates
	recorder     events.EventRecorder
	// bundleEvents and requestEvents watch the tenant's ClusterTrustBundles
	// and PodCertificateRequests once a Pod reads them; nil where the
	// tenant does not serve them.
	bundleEvents, requestEvents *onFirstUse
}

func (r *apiAccess) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if r.scope.Excluded(req.Namespace) {
		return reconcile.Result{}, nil
	}
	var pod corev1.Pod
	if err := r.tenant.Get(ctx, req.NamespacedName, &pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !pod.DeletionTimestamp.IsZero() || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return reconcile.Result{}, nil // its tokens end with it
	}
	var hostPod corev1.Pod
	if err := r.scope.HostReader().Get(ctx, r.scope.HostKey(req.NamespacedName), &hostPod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err) // its creation brings us back
	}
	name := apiAccessSecretName(pod.Name)
	if hostPod.Annotations[syncer.AnnotationTenantUID] != string(pod.UID) || !hostPod.DeletionTimestamp.IsZero() ||
		!usesAPIAccess(&hostPod.Spec, name) {
		return reconcile.Result{}, nil
	}
	if pod.Spec.NodeName == "" {
		// Its tokens carry the node it is bound to (the API server's
		// node claims), as a kubelet's do: they wait for the binding,
		// which follows the host scheduler's; so does every container.
		return reconcile.Result{RequeueAfter: unboundRetry}, nil
	}

	if err := r.watchWhatItReads(ctx, &pod.Spec); err != nil {
		return reconcile.Result{}, err
	}

	var current *corev1.Secret
	existing := &corev1.Secret{}
	read := r.scope.HostReader()
	if len(podCertificateProjections(&pod.Spec)) > 0 {
		// The request that the last write recorded must be seen, which the
		// cache may not have yet: a new key would be asked for again.
		read = r.scope.HostClient()
	}
	switch err := read.Get(ctx, client.ObjectKey{Namespace: hostPod.Namespace, Name: name}, existing); {
	case err == nil:
		current = existing
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, fmt.Errorf("reading the API access Secret of Pod %s: %w", req.NamespacedName, err)
	}
	if current != nil && !r.isAccessSecret(current, &pod) {
		return reconcile.Result{}, fmt.Errorf("host Secret %s/%s, where Pod %s's API access Secret belongs, is not it; it is left alone",
			current.Namespace, current.Name, req.NamespacedName)
	}

	desired, refreshAt, err := r.desired(ctx, &pod, &hostPod, current)
	if err != nil {
		return reconcile.Result{}, err
	}
	// The Pod's certificates have room first: trust anchors may take what
	// they leave.
	certRoom := podCertRoom * len(podCertificateProjections(&pod.Spec))
	unfilled, err := r.fillTrustAnchors(ctx, &pod, desired.Data, maxAPIAccessBytes-dataSize(desired.Data)-certRoom)
	if err != nil {
		return reconcile.Result{}, err
	}
	var old map[string][]byte
	if current != nil && current.Annotations[syncer.AnnotationTenantUID] == string(pod.UID) {
		old = current.Data // never an earlier Pod's key, which its ServiceAccount may not have had
	}
	certsAt, notIssued := r.certificates.fill(ctx, &pod, old, desired.Data, maxAPIAccessBytes-dataSize(desired.Data))
	unfilled = append(unfilled, notIssued...)
	if !certsAt.IsZero() && certsAt.Before(refreshAt) {
		refreshAt = certsAt
	}
	if current == nil || !equality.Semantic.DeepEqual(current.Data, desired.Data) {
		// Told when what the Secret holds changes, not at each retry.
		for _, why := range unfilled {
			r.recorder.Eventf(&pod, nil, corev1.EventTypeWarning, ReasonFailedMount, "MountVolume", "%s", why)
		}
	}
	var write, verb string
	var writeErr error
	switch {
	case current == nil:
		write, verb, writeErr = "create", "creating", r.scope.HostClient().Create(ctx, desired)
	case !equality.Semantic.DeepEqual(current, desired):
		write, verb, writeErr = "update", "updating", r.scope.HostClient().Update(ctx, desired)
	default:
		return reconcile.Result{RequeueAfter: max(time.Until(refreshAt), time.Second)}, nil
	}
	if writeErr != nil {
		if why, after := r.scope.Transient(writeErr); why != "" {
			// Made or changed a moment ago, and not in the cache yet, say.
			ctrl.LoggerFrom(ctx).V(1).Info("retrying the Pod's API access Secret: "+why, "error", writeErr.Error())
			return reconcile.Result{RequeueAfter: after}, nil
		}
		return reconcile.Result{}, fmt.Errorf("%s the API access Secret of Pod %s: %w", verb, req.NamespacedName, writeErr)
	}
	r.scope.CountWrite("pod-api-access", "down", write)
	ctrl.LoggerFrom(ctx).V(1).Info("wrote the Pod's API access Secret", "secret", name, "write", write, "refreshAt", refreshAt)
	return reconcile.Result{RequeueAfter: max(time.Until(refreshAt), time.Second)}, nil
}

// watchWhatItReads starts the watches of the ClusterTrustBundles and the
// PodCertificateRequests of the tenant, if spec is the first to read them.
func (r *apiAccess) watchWhatItReads(ctx context.Context, spec *corev1.PodSpec) error {
	if r.bundleEvents != nil && len(trustBundleProjections(spec)) > 0 {
		if err := r.bundleEvents.use(ctx); err != nil {
			return fmt.Errorf("watching the tenant's ClusterTrustBundles: %w", err)
		}
	}
	if r.requestEvents != nil && len(podCertificateProjections(spec)) > 0 {
		if err := r.requestEvents.use(ctx); err != nil {
			return fmt.Errorf("watching the tenant's PodCertificateRequests: %w", err)
		}
	}
	return nil
}

// fillTrustAnchors puts into data, an API access Secret's, the trust
// anchors of each of pod's clusterTrustBundle projections (see
// trustBundles), and says why each it leaves out is left out.
func (r *apiAccess) fillTrustAnchors(ctx context.Context, pod *corev1.Pod, data map[string][]byte, room int) (unfilled []string, err error) {
	size, limit := 0, min(room, maxTrustAnchorBytes)
	for _, p := range trustBundleProjections(&pod.Spec) {
		key := trustBundleKey(p)
		if _, done := data[key]; done {
			continue
		}
		anchors, found, err := r.bundles.trustAnchors(ctx, p)
		if err != nil {
			return nil, err
		}
		switch {
		case !found && !ptr.Deref(p.Optional, false):
			unfilled = append(unfilled, fmt.Sprintf("clusterTrustBundle projection to %s: %s, and it is not optional", p.Path, r.bundles.nothingMatches(p)))
		case size+len(anchors) > limit:
			unfilled = append(unfilled, fmt.Sprintf("clusterTrustBundle projection to %s: the Pod's trust anchors exceed %d KiB, more than the host holds for a Pod", p.Path, max(limit, 0)>>10))
		default:
			size += len(anchors)
			data[key] = append([]byte{}, anchors...) // empty, not nil, when optional and missing
		}
	}
	return unfilled, nil
}

// isAccessSecret says whether s is Tenantry's API access Secret of a Pod
// named as pod (this one, or an earlier one of the name).
func (r *apiAccess) isAccessSecret(s *corev1.Secret, pod *corev1.Pod) bool {
	return r.scope.Owns(s) && s.Annotations[syncer.AnnotationTenantNamespace] == pod.Namespace &&
		s.Annotations[syncer.AnnotationTenantName] == pod.Name
}

// desired is the API access Secret that pod's host Pod should have, built
// on current (nil to create), and when its tokens are due for renewal. The
// tokens are asked for again when missing, issued for an earlier Pod of the
// name, or due.
func (r *apiAccess) desired(ctx context.Context, pod, hostPod *corev1.Pod, current *corev1.Secret) (*corev1.Secret, time.Time, error) {
	s := &corev1.Secret{}
	if current != nil {
		s = current.DeepCopy()
	}
	s.Namespace, s.Name = hostPod.Namespace, apiAccessSecretName(pod.Name)
	s.Type = corev1.SecretTypeOpaque
	s.Labels = maps.Clone(s.Labels)
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[syncer.LabelManagedBy] = syncer.ManagedByValue
	s.Labels[syncer.LabelCluster] = r.scope.Cluster()
	s.Annotations = map[string]string{
		syncer.AnnotationTenantNamespace: pod.Namespace,
		syncer.AnnotationTenantName:      pod.Name,
		syncer.AnnotationTenantUID:       string(pod.UID),
	}
	s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: hostPod.Name, UID: hostPod.UID}}

	data := map[string][]byte{
		apiAccessCAKey:   r.server.ca,
		apiAccessHostKey: []byte(r.server.host),
		apiAccessPortKey: []byte(r.server.port),
		apiAccessURLKey:  []byte("tcp://" + net.JoinHostPort(r.server.host, r.server.port)),
	}
	// What the tenant sees of its Pod, not what the host Pod carries: only
	// for a Pod whose volumes show them, so that no other Pod's labels or
	// annotations are copied into the host, nor rewritten with them.
	if labels, annotations := metadataMapsShown(&pod.Spec); labels || annotations {
		data[apiAccessLabelsKey] = downwardAPIMap(pod.Labels)
		data[apiAccessAnnotationsKey] = downwardAPIMap(pod.Annotations)
	}
	maps.Copy(data, metadataValues(pod))
	requests := tokenRequests(&pod.Spec)
	refreshAt, fresh := time.Time{}, false
	if current != nil && current.Annotations[syncer.AnnotationTenantUID] == string(pod.UID) {
		if at, err := time.Parse(time.RFC3339, current.Annotations[annotationTokensRefresh]); err == nil && time.Now().Before(at) {
			refreshAt, fresh = at, true
		}
	}
	for audience := range requests {
		if key := tokenKey(audience); fresh && len(current.Data[key]) > 0 {
			data[key] = current.Data[key]
			continue
		}
		fresh = false
	}
	if !fresh {
		refreshAt = time.Time{}
		for audience, seconds := range requests {
			token, refresh, err := r.issue(ctx, pod, audience, seconds)
			if err != nil {
				return nil, time.Time{}, err
			}
			data[tokenKey(audience)] = token
			if refreshAt.IsZero() || refresh.Before(refreshAt) {
				refreshAt = refresh
			}
		}
		if refreshAt.IsZero() {
			refreshAt = time.Now().Add(defaultTokenSeconds * time.Second)
		}
	}
	s.Annotations[annotationTokensRefresh] = refreshAt.UTC().Format(time.RFC3339)
	s.Data = data
	return s, refreshAt, nil
}

// issue asks the tenant for a token of pod's ServiceAccount for audience,
// bound to pod, and says when to renew it.
func (r *apiAccess) issue(ctx context.Context, pod *corev1.Pod, audience string, seconds int64) ([]byte, time.Time, error) {
	sa := serviceAccountOf(pod)
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(seconds),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}
	if audience != "" {
		request.Spec.Audiences = []string{audience}
	}
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: sa}}
	issued := time.Now()
	if err := r.tenant.SubResource("token").Create(ctx, account, request); err != nil {
		return nil, time.Time{}, fmt.Errorf("asking the tenant for a token of ServiceAccount %s/%s for Pod %s: %w", pod.Namespace, sa, pod.Name, err)
	}
	r.scope.CountWrite("serviceaccounts/token", "up", "create")
	return []byte(request.Status.Token), issued.Add(renewAfter(request.Status.ExpirationTimestamp.Sub(issued))), nil
}

// serviceAccountOf is the name of pod's ServiceAccount ("default" when
// the spec names none, as the API server defaults it).
func serviceAccountOf(pod *corev1.Pod) string {
	if pod.Spec.ServiceAccountName == "" {
		return "default"
	}
	return pod.Spec.ServiceAccountName
}

// renewAfter is how long after it was issued a token of lifetime life is
// renewed: at four fifths of its life, and at least daily, as a kubelet
// renews projected tokens (the API server may stretch the lifetime of the
// kube-api-access token, 3607 s, to a year). A lifetime that the clocks
// make look spent is retried in a minute.
func renewAfter(life time.Duration) time.Duration {
	const (
		maxRenewAfter = 24 * time.Hour
		minRenewAfter = time.Minute
	)
	return min(max(life*4/5, minRenewAfter), maxRenewAfter)
}
