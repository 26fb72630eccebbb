package virtualcluster

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// errInvalidKubeconfig marks a kubeconfig that cannot be used.
var errInvalidKubeconfig = errors.New("invalid kubeconfig")

// RESTConfigFromKubeconfig turns a kubeconfig taken from a Secret into a
// rest.Config, as the VirtualCluster controller does (tenantry register
// checks a file with it before it registers it). It accepts only
// kubeconfigs that carry everything inline:
// a kubeconfig that names files or plugins would make the manager read files
// or run programs of its own host on behalf of whoever wrote the Secret, for
// example sending the manager's own service account token to a server of
// their choice.
//
// Its errors never quote the kubeconfig: they end up in logs, events and
// status, and the kubeconfig holds credentials.
func RESTConfigFromKubeconfig(data []byte) (*rest.Config, error) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		if strings.Contains(err.Error(), "couldn't get version/kind") {
			return nil, fmt.Errorf("%w: not a YAML or JSON object", errInvalidKubeconfig)
		}
		return nil, fmt.Errorf("%w: not a kubeconfig: %s", errInvalidKubeconfig, redact(err.Error()))
	}
	name := kc.CurrentContext
	if name == "" {
		return nil, fmt.Errorf("%w: no current-context", errInvalidKubeconfig)
	}
	ctx, ok := kc.Contexts[name]
	if !ok {
		return nil, fmt.Errorf("%w: current-context %q is not among its contexts", errInvalidKubeconfig, name)
	}
	cluster, ok := kc.Clusters[ctx.Cluster]
	if !ok {
		return nil, fmt.Errorf("%w: context %q names cluster %q, which it does not define", errInvalidKubeconfig, name, ctx.Cluster)
	}
	if cluster.Server == "" {
		return nil, fmt.Errorf("%w: cluster %q has no server", errInvalidKubeconfig, ctx.Cluster)
	}
	if cluster.CertificateAuthority != "" {
		return nil, fmt.Errorf("%w: cluster %q reads certificate-authority from a file; use certificate-authority-data", errInvalidKubeconfig, ctx.Cluster)
	}
	user, ok := kc.AuthInfos[ctx.AuthInfo]
	if !ok {
		return nil, fmt.Errorf("%w: context %q names user %q, which it does not define", errInvalidKubeconfig, name, ctx.AuthInfo)
	}
	if err := inlineOnly(ctx.AuthInfo, user); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*kc, name, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", errInvalidKubeconfig, redact(err.Error()))
	}
	return cfg, nil
}

// inlineOnly refuses credentials that live outside the kubeconfig.
func inlineOnly(name string, u *clientcmdapi.AuthInfo) error {
	refuse := func(field, instead string) error {
		return fmt.Errorf("%w: user %q uses %s, which the manager refuses; %s", errInvalidKubeconfig, name, field, instead)
	}
	switch {
	case u.ClientCertificate != "":
		return refuse("client-certificate (a file)", "use client-certificate-data")
	case u.ClientKey != "":
		return refuse("client-key (a file)", "use client-key-data")
	case u.TokenFile != "":
		return refuse("tokenFile", "use token")
	case u.Exec != nil:
		return refuse("an exec plugin", "use inline credentials")
	case u.AuthProvider != nil:
		return refuse("an auth-provider plugin", "use inline credentials")
	}
	return nil
}

// quoted matches the spans that parser errors quote from their input.
var quoted = regexp.MustCompile("`[^`]*`|\"[^\"]*\"|'[^']*'")

// maxErrorLength bounds what of a parser error reaches status and logs.
const maxErrorLength = 200

// redact removes every quoted span from a parser error, since parsers quote
// the input they failed on, and the input here is a credential.
func redact(msg string) string {
	msg = quoted.ReplaceAllString(msg, "<redacted>")
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) > maxErrorLength {
		msg = msg[:maxErrorLength] + "…"
	}
	return msg
}
