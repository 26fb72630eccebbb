package pods

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

func TestAPIAccessRewritesTheSpec(t *testing.T) {
	spec := corev1.PodSpec{
		Containers: []corev1.Container{
			{Name: "app", Env: []corev1.EnvVar{
				{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
				{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			}},
			{Name: "own-server", Env: []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "mine"}}},
		},
		Volumes: []corev1.Volume{
			{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
					Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
			}}}},
			{Name: "vault", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "vault-token", Audience: "vault"}},
			}}}},
			{Name: "ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}}},
		},
	}
	tenantSpec := *spec.DeepCopy()
	if err := APIAccess("web", &spec); err != nil {
		t.Fatal(err)
	}
	secret := "web-tenantry-api-access"

	access := spec.Volumes[0].Projected.Sources
	if s := access[0].Secret; s == nil || s.Name != secret || s.Items[0] != (corev1.KeyToPath{Key: "token", Path: "token"}) {
		t.Errorf("token source = %+v, want the Secret's token", access[0])
	}
	if s := access[1].Secret; s == nil || s.Name != secret || s.Items[0].Key != "ca.crt" || s.Items[0].Path != "ca.crt" {
		t.Errorf("CA source = %+v, want the Secret's CA", access[1])
	}
	if got := access[2].DownwardAPI.Items[0].FieldRef.FieldPath; got != "metadata.annotations['tenantry.dev/tenant-namespace']" {
		t.Errorf("namespace file from %q, want the tenant namespace", got)
	}
	vault := spec.Volumes[1].Projected.Sources[0].Secret
	if vault == nil || vault.Items[0].Key == "token" || !strings.HasPrefix(vault.Items[0].Key, "token-") || vault.Items[0].Path != "vault-token" {
		t.Errorf("audience token source = %+v, want a token of its own", vault)
	}
	if v := spec.Volumes[2]; v.Secret == nil || v.Secret.SecretName != secret || v.Secret.Items[0].Key != "ca.crt" {
		t.Errorf("CA volume = %+v, want the Secret's CA", v.VolumeSource)
	}

	env := map[string]corev1.EnvVar{}
	for _, e := range spec.Containers[0].Env {
		env[e.Name] = e
	}
	if ref := env["KUBERNETES_SERVICE_HOST"].ValueFrom; ref == nil || ref.SecretKeyRef.Name != secret || ref.SecretKeyRef.Key != "kubernetes-service-host" {
		t.Errorf("KUBERNETES_SERVICE_HOST = %+v", env["KUBERNETES_SERVICE_HOST"])
	}
	if got := env["NS"].ValueFrom.FieldRef.FieldPath; got != "metadata.annotations['tenantry.dev/tenant-namespace']" {
		t.Errorf("NS from %q, want the tenant namespace", got)
	}
	if got := env["NODE"].ValueFrom.FieldRef.FieldPath; got != "spec.nodeName" {
		t.Errorf("NODE from %q, want it unchanged", got)
	}
	own := spec.Containers[1].Env
	hosts := 0
	for _, e := range own {
		if e.Name == "KUBERNETES_SERVICE_HOST" {
			hosts++
			if e.Value != "mine" {
				t.Errorf("a container's own KUBERNETES_SERVICE_HOST became %+v", e)
			}
		}
	}
	if hosts != 1 {
		t.Errorf("%d KUBERNETES_SERVICE_HOST in a container that sets its own", hosts)
	}

	requests := tokenRequests(&tenantSpec)
	if len(requests) != 2 || requests[""] != 3607 || requests["vault"] != defaultTokenSeconds {
		t.Errorf("token requests = %v, want the API server's for 3607 s and vault's for the default", requests)
	}
	if !usesAPIAccess(&spec, secret) || usesAPIAccess(&tenantSpec, secret) {
		t.Error("usesAPIAccess does not tell the rewritten spec from the tenant's")
	}
}

// A Pod that mounts neither token nor CA still learns its tenant API
// server's address, never the host's: its variables come from its API
// access Secret, which holds no token then; one it sets itself stays.
func TestAPIAccessNamesTheTenantServerWithoutAToken(t *testing.T) {
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_PORT", Value: "8443"}}}}}
	if err := APIAccess("batch", &spec); err != nil {
		t.Fatal(err)
	}
	secret := apiAccessSecretName("batch")
	env := map[string]corev1.EnvVar{}
	for _, e := range spec.Containers[0].Env {
		env[e.Name] = e
	}
	if h := env["KUBERNETES_SERVICE_HOST"]; h.ValueFrom == nil || h.ValueFrom.SecretKeyRef == nil || h.ValueFrom.SecretKeyRef.Name != secret {
		t.Errorf("KUBERNETES_SERVICE_HOST = %+v; want it from Secret %s", h, secret)
	}
	if p := env["KUBERNETES_SERVICE_PORT"]; p.Value != "8443" || len(spec.Containers[0].Env) != 8 {
		t.Errorf("env %+v: want the Pod's own KUBERNETES_SERVICE_PORT kept, once", spec.Containers[0].Env)
	}
	if len(spec.Volumes) != 0 || !usesAPIAccess(&spec, secret) {
		t.Errorf("spec %+v: want no volume, and the Secret made for the variables", spec)
	}
}

// Distinct Pods never share an API access Secret, whatever names a tenant
// picks: two long names, or a short name spelled as a long name's cut
// form.
func TestAPIAccessSecretName(t *testing.T) {
	long := strings.Repeat("a", 253)
	name, other := apiAccessSecretName(long), apiAccessSecretName(long[:252]+"b")
	if len(name) != 253 || !strings.HasSuffix(name, APIAccessSecretSuffix) || name == other {
		t.Errorf("long Pod names give %q and %q: want distinct valid names", name, other)
	}
	// A Pod named as the long one's Secret, less the suffix.
	forged := strings.TrimSuffix(name, APIAccessSecretSuffix)
	if got := apiAccessSecretName(forged); got == name {
		t.Errorf("Pod %q gets the Secret of Pod %q", forged, long)
	}
	// A cut that ends in a dot or a dash still makes a valid name.
	dotted := strings.Repeat("a", 200) + "." + strings.Repeat("b", 52)
	if errs := validation.IsDNS1123Subdomain(apiAccessSecretName(dotted)); len(errs) > 0 {
		t.Errorf("%q: %v", apiAccessSecretName(dotted), errs)
	}
	for n := 200; n <= 253; n++ {
		if errs := validation.IsDNS1123Subdomain(apiAccessSecretName(strings.Repeat("x", n))); len(errs) > 0 {
			t.Errorf("a Pod name of %d characters: %v", n, errs)
		}
	}
}

// A Pod may not read another Pod's API access Secret.
func TestAPIAccessRefusesCredentialsNotItsOwn(t *testing.T) {
	other := corev1.LocalObjectReference{Name: "db-0" + APIAccessSecretSuffix}
	for name, spec := range map[string]corev1.PodSpec{
		"volume": {Volumes: []corev1.Volume{{Name: "t", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: other.Name}}}}},
		"projection": {Volumes: []corev1.Volume{{Name: "t", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: other}}}}}}}},
		"env": {Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{{Name: "T", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: other, Key: "token"}}}}}}},
		"envFrom": {InitContainers: []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: other}}}}}},
	} {
		err := APIAccess("web", &spec)
		if err == nil || !strings.Contains(err.Error(), "reserved for Pods' API access") {
			t.Errorf("%s: APIAccess = %v, want a refusal saying why", name, err)
		}
	}
}

func TestTokensRenewAtFourFifthsAndDaily(t *testing.T) {
	for life, want := range map[time.Duration]time.Duration{
		time.Hour:            48 * time.Minute,
		365 * 24 * time.Hour: 24 * time.Hour, // a kube-api-access token the API server stretched
		-time.Minute:         time.Minute,    // clocks apart
	} {
		if got := renewAfter(life); got != want {
			t.Errorf("renewAfter(%s) = %s, want %s", life, got, want)
		}
	}
}

func TestTenantServerForPods(t *testing.T) {
	config := &rest.Config{Host: "https://10.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca")}}
	for server, want := range map[string]string{
		"":                               "10.0.0.1:6443",
		"https://tenant.example":         "tenant.example:443",
		"https://[fd00::1]:8443/":        "fd00::1:8443",
		"http://tenant.example":          "",
		"https://proxy/k8s/clusters/c-1": "",
		"tenant.example:6443":            "",
	} {
		got, err := newTenantServer(config, server)
		switch {
		case want == "" && err == nil:
			t.Errorf("%q: %s:%s, want an error", server, got.host, got.port)
		case want != "" && (err != nil || got.host+":"+got.port != want || string(got.ca) != "ca"):
			t.Errorf("%q: %s:%s (%v), want %s", server, got.host, got.port, err, want)
		}
	}
}

// The downward API's labels and annotations files come from the API access
// Secret, which holds the tenant Pod's: every other item, and every other
// source, stays where it was, in order; a volume with neither stays a
// downward API volume.
func TestAPIAccessGivesTheTenantPodsLabelsAndAnnotations(t *testing.T) {
	field := func(path, field string) corev1.DownwardAPIVolumeFile {
		return corev1.DownwardAPIVolumeFile{Path: path, FieldRef: &corev1.ObjectFieldSelector{FieldPath: field}}
	}
	mode := ptr.To[int32](0o400)
	spec := corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			DefaultMode: mode,
			Items: []corev1.DownwardAPIVolumeFile{
				field("labels", "metadata.labels"), field("name", "metadata.name"),
				{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}, Mode: mode},
			},
		}}},
		{Name: "plain", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{field("ns", "metadata.namespace")},
		}}},
		{Name: "mixed", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{field("labels", "metadata.labels")}}},
		}}}},
	}}
	if err := APIAccess("web", &spec); err != nil {
		t.Fatal(err)
	}
	secret := apiAccessSecretName("web")
	podinfo := spec.Volumes[0].Projected
	if podinfo == nil || *podinfo.DefaultMode != 0o400 || len(podinfo.Sources) != 2 ||
		podinfo.Sources[0].DownwardAPI == nil || len(podinfo.Sources[0].DownwardAPI.Items) != 1 || podinfo.Sources[0].DownwardAPI.Items[0].Path != "name" ||
		podinfo.Sources[1].Secret == nil || podinfo.Sources[1].Secret.Name != secret ||
		podinfo.Sources[1].Secret.Items[0] != (corev1.KeyToPath{Key: apiAccessLabelsKey, Path: "labels"}) ||
		podinfo.Sources[1].Secret.Items[1].Key != apiAccessAnnotationsKey || *podinfo.Sources[1].Secret.Items[1].Mode != 0o400 {
		t.Errorf("podinfo: %+v, want the name from the downward API, labels and annotations from %s", spec.Volumes[0].VolumeSource, secret)
	}
	if plain := spec.Volumes[1]; plain.DownwardAPI == nil || plain.DownwardAPI.Items[0].FieldRef.FieldPath != tenantFieldPath("metadata.namespace") {
		t.Errorf("a volume without labels or annotations: %+v, want a downward API volume of the tenant's namespace", plain.VolumeSource)
	}
	mixed := spec.Volumes[2].Projected.Sources
	if len(mixed) != 2 || mixed[0].ConfigMap == nil || mixed[1].Secret == nil || mixed[1].Secret.Items[0].Key != apiAccessLabelsKey {
		t.Errorf("a projected volume: %+v, want the ConfigMap, then the labels from %s", mixed, secret)
	}
}

// The downward API's format: sorted key="value" lines, quoted as Go
// quotes, no newline at the end; nothing for no map.
func TestDownwardAPIMap(t *testing.T) {
	got := string(downwardAPIMap(map[string]string{"b": "two\nlines", "a": `say "hi"`}))
	if want := "a=\"say \\\"hi\\\"\"\nb=\"two\\nlines\""; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := downwardAPIMap(nil); len(got) != 0 {
		t.Errorf("no labels: %q", got)
	}
}

// Only a Pod whose volumes show its labels or annotations has them in its
// API access Secret.
func TestMetadataMapsShown(t *testing.T) {
	field := func(path string) corev1.DownwardAPIVolumeFile {
		return corev1.DownwardAPIVolumeFile{Path: "f", FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	for _, tc := range []struct {
		name                string
		volumes             []corev1.Volume
		labels, annotations bool
	}{
		{"none", nil, false, false},
		{"the namespace only", []corev1.Volume{{VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{field("metadata.namespace")}}}}}, false, false},
		{"labels", []corev1.Volume{{VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{field("metadata.labels")}}}}}, true, false},
		{"annotations, projected", []corev1.Volume{{VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{field("metadata.annotations")}}}}}}}}, false, true},
	} {
		labels, annotations := metadataMapsShown(&corev1.PodSpec{Volumes: tc.volumes})
		if labels != tc.labels || annotations != tc.annotations {
			t.Errorf("%s: labels %v, annotations %v; want %v, %v", tc.name, labels, annotations, tc.labels, tc.annotations)
		}
	}
}

// One label or annotation that a Pod reads through the downward API, in a
// variable or a volume, comes from the API access Secret, which holds the
// tenant Pod's value (empty while it has none): the host Pod may not carry
// it (an annotation without a prefix, a denied prefix).
func TestAPIAccessShowsOneLabelOrAnnotation(t *testing.T) {
	annotation := "metadata.annotations['mysubpath']"
	label := "metadata.labels['example.com/team']"
	spec := corev1.PodSpec{
		Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{
			{Name: "SUBPATH", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: annotation}}},
			{Name: "NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		}}},
		Volumes: []corev1.Volume{{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: "team", FieldRef: &corev1.ObjectFieldSelector{FieldPath: label}}},
		}}}},
	}
	pod := &corev1.Pod{Spec: *spec.DeepCopy()}
	if labels, annotations := metadataShown(&pod.Spec); !labels || !annotations {
		t.Errorf("shown: labels %v, annotations %v; want both", labels, annotations)
	}
	if err := APIAccess("web", &spec); err != nil {
		t.Fatal(err)
	}
	secret := apiAccessSecretName("web")
	annotationKey, _ := metadataKey(annotation)
	labelKey, _ := metadataKey(label)
	var subpath *corev1.EnvVar
	for i, e := range spec.Containers[0].Env {
		if e.Name == "SUBPATH" {
			subpath = &spec.Containers[0].Env[i]
		}
		if e.Name == "NAME" && (e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name") {
			t.Errorf("NAME: %+v; want the host Pod's name, the tenant's", e.ValueFrom)
		}
	}
	if subpath == nil || subpath.ValueFrom.SecretKeyRef == nil || subpath.ValueFrom.SecretKeyRef.Name != secret || subpath.ValueFrom.SecretKeyRef.Key != annotationKey {
		t.Errorf("SUBPATH: %+v; want the API access Secret's item %s", subpath, annotationKey)
	}
	projected := spec.Volumes[0].Projected
	if projected == nil || len(projected.Sources) != 1 || projected.Sources[0].Secret == nil ||
		projected.Sources[0].Secret.Items[0] != (corev1.KeyToPath{Key: labelKey, Path: "team"}) {
		t.Errorf("volume %+v; want the label from the API access Secret at team", spec.Volumes[0].VolumeSource)
	}

	values := metadataValues(pod)
	if v, ok := values[annotationKey]; !ok || string(v) != "" {
		t.Errorf("an annotation the Pod lacks: %q, %v; want an empty item", v, ok)
	}
	pod.Annotations = map[string]string{"mysubpath": "mypath"}
	pod.Labels = map[string]string{"example.com/team": "blue"}
	values = metadataValues(pod)
	if string(values[annotationKey]) != "mypath" || string(values[labelKey]) != "blue" {
		t.Errorf("values %q; want the tenant Pod's", values)
	}
	for _, bad := range []string{"metadata.annotations", "metadata.labels['']", "metadata.labels[x]"} {
		if _, ok := metadataKey(bad); ok {
			t.Errorf("%q named one label or annotation", bad)
		}
	}
}
