package controlplane

import (
	"errors"
	"fmt"
	"net"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
	"github.com/tenantry/tenantry/pkg/controlplane/datastore"
	"github.com/tenantry/tenantry/pkg/controlplane/pki"
)

// Keys of the PKI Secret (PKISecretName).
const (
	KeyCACert                      = "ca.crt"
	KeyCAKey                       = "ca.key"
	KeyServingCert                 = "apiserver.crt"
	KeyServingKey                  = "apiserver.key"
	KeyKubeletClientCert           = "apiserver-kubelet-client.crt"
	KeyKubeletClientKey            = "apiserver-kubelet-client.key"
	KeyFrontProxyCACert            = "front-proxy-ca.crt"
	KeyFrontProxyCAKey             = "front-proxy-ca.key"
	KeyFrontProxyClientCert        = "front-proxy-client.crt"
	KeyFrontProxyClientKey         = "front-proxy-client.key"
	KeyServiceAccountPrivate       = "sa.key"
	KeyServiceAccountPublic        = "sa.pub"
	KeyControllerManagerKubeconfig = "controller-manager.conf"
	KeyControllerManagerCert       = "controller-manager.crt"
	KeyControllerManagerKey        = "controller-manager.key"
	// The etcd CA's (storage Etcd; for DataStore, the store's certificate
	// alone), etcd's serving certificate (storage Etcd) and the API
	// server's client certificate to etcd (Etcd and DataStore).
	KeyEtcdCACert     = "etcd-ca.crt"
	KeyEtcdCAKey      = "etcd-ca.key"
	KeyEtcdServerCert = "etcd-server.crt"
	KeyEtcdServerKey  = "etcd-server.key"
	KeyEtcdClientCert = "apiserver-etcd-client.crt"
	KeyEtcdClientKey  = "apiserver-etcd-client.key"
	// The certificate with which etcd's members (storage Etcd) serve
	// and reach each other.
	KeyEtcdPeerCert = "etcd-peer.crt"
	KeyEtcdPeerKey  = "etcd-peer.key"
	// With Activity: the audit policy and webhook kubeconfig of the API
	// server's reports, its client certificate, and the serving
	// certificate of the manager's receiver for it.
	KeyAuditPolicy            = "audit-policy.yaml"
	KeyAuditWebhookKubeconfig = "audit-webhook.conf"
	KeyAuditWebhookCert       = "audit-webhook-client.crt"
	KeyAuditWebhookKey        = "audit-webhook-client.key"
	KeyActivityServingCert    = "activity-serving.crt"
	KeyActivityServingKey     = "activity-serving.key"
)

// auditPolicy reports what may be people's requests, by their metadata
// alone: not the tenant's own controllers (its service accounts, its
// controller-manager), its nodes, nor health checks. The receiver drops
// Tenantry's own requests (by their user agent) from what is left. A
// long request (a watch, an exec session) is reported as it starts and
// as it ends.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
omitManagedFields: true
rules:
- level: None
  userGroups: ["system:serviceaccounts", "system:nodes"]
- level: None
  users: ["system:kube-controller-manager", "system:kube-scheduler", "system:kube-proxy", "system:apiserver", "system:anonymous"]
- level: None
  nonResourceURLs: ["/healthz*", "/livez*", "/readyz*", "/version", "/metrics"]
- level: Metadata
`

// AdminUser is the user of the admin kubeconfig Tenantry writes for a
// provisioned control plane, a member of system:masters.
const AdminUser = "tenantry:admin"

// localServer is where a component in the control plane's Pod reaches
// the API server.
var localServer = fmt.Sprintf("https://127.0.0.1:%d", APIServerPort)

// pair names a certificate and its key in the PKI Secret.
type pair struct{ cert, key string }

// ServingNames are the names and addresses the API server's certificate
// serves: its Service's (at serviceIP, and by name in the host), the
// tenant's own kubernetes Service's (the first address of its Service
// range), and the loopback, where its components reach it.
func (s Spec) ServingNames(serviceIP string) (pki.Leaf, error) {
	leaf := pki.Leaf{CommonName: "kube-apiserver", Usage: pki.Server}
	ns := Namespace(s.Cluster)
	for _, svc := range []string{"kubernetes.default", ServiceName + "." + ns} {
		leaf.DNSNames = append(leaf.DNSNames, svc, svc+".svc", svc+".svc."+s.ClusterDomain)
	}
	leaf.DNSNames = append(leaf.DNSNames, "kubernetes", "localhost")
	leaf.IPs = []net.IP{net.IPv4(127, 0, 0, 1)}
	if serviceIP != "" {
		ip := net.ParseIP(serviceIP)
		if ip == nil {
			return leaf, fmt.Errorf("the API server's Service IP %q is not an address", serviceIP)
		}
		leaf.IPs = append(leaf.IPs, ip)
	}
	_, cidr, err := net.ParseCIDR(s.ServiceCIDR)
	if err != nil {
		return leaf, fmt.Errorf("the Service range %q: %w", s.ServiceCIDR, err)
	}
	first := append(net.IP(nil), cidr.IP...)
	first[len(first)-1]++
	leaf.IPs = append(leaf.IPs, first)
	return leaf, nil
}

// EtcdServingNames are the names and addresses the serving certificate
// of the etcd of storage Etcd serves: its client Service's (at
// serviceIP, and by name in the host), each of its members' (at
// s.EtcdMemberIPs), and the loopback.
func (s Spec) EtcdServingNames(serviceIP string) (pki.Leaf, error) {
	leaf := pki.Leaf{CommonName: "etcd", Usage: pki.Server, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}
	svc := EtcdName + "." + Namespace(s.Cluster)
	leaf.DNSNames = []string{EtcdName, svc, svc + ".svc", svc + ".svc." + s.ClusterDomain, "localhost"}
	ips, err := addresses("etcd's Service", append([]string{serviceIP}, s.EtcdMemberIPs...))
	if err != nil {
		return leaf, err
	}
	leaf.IPs = append(leaf.IPs, ips...)
	return leaf, nil
}

// EtcdPeerNames are the subject and addresses of the certificate with
// which the members of the etcd of storage Etcd serve and reach each
// other: each member's, at s.EtcdMemberIPs.
func (s Spec) EtcdPeerNames() (pki.Leaf, error) {
	ips, err := addresses("an etcd member's Service", s.EtcdMemberIPs)
	return pki.Leaf{CommonName: etcdPeerCommonName, Usage: pki.Peer, IPs: ips}, err
}

// addresses parses ips, of what.
func addresses(what string, ips []string) ([]net.IP, error) {
	var out []net.IP
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("%s IP %q is not an address", what, s)
		}
		out = append(out, ip)
	}
	return out, nil
}

// Certificates is the PKI Secret's data for the control plane: what
// current holds that is still good, and anew what is missing, not signed
// by its CA, due for renewal (pki.Renew) or no longer serving the names
// it must (the Service at serviceIP, its etcd's at s.EtcdServiceIP and its members' at s.EtcdMemberIPs). It
// says when the first certificate it holds expires. The CAs and the
// service account key are made once: a new one would lock every client
// and token out.
func (s Spec) Certificates(current map[string][]byte, serviceIP string, now time.Time) (map[string][]byte, time.Time, error) {
	data := map[string][]byte{}
	var expires time.Time
	note := func(kp *pki.KeyPair) {
		if expires.IsZero() || kp.Cert.NotAfter.Before(expires) {
			expires = kp.Cert.NotAfter
		}
	}
	ca, err := s.authority(current, data, pair{KeyCACert, KeyCAKey}, s.Cluster+"-ca", now)
	if err != nil {
		return nil, time.Time{}, err
	}
	frontProxyCA, err := s.authority(current, data, pair{KeyFrontProxyCACert, KeyFrontProxyCAKey}, s.Cluster+"-front-proxy-ca", now)
	if err != nil {
		return nil, time.Time{}, err
	}
	serving, err := s.ServingNames(serviceIP)
	if err != nil {
		return nil, time.Time{}, err
	}
	type leaf struct {
		names pair
		ca    *pki.KeyPair
		leaf  pki.Leaf
	}
	leaves := []leaf{
		{pair{KeyServingCert, KeyServingKey}, ca, serving},
		{pair{KeyKubeletClientCert, KeyKubeletClientKey}, ca, pki.Leaf{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, Usage: pki.Client}},
		{pair{KeyFrontProxyClientCert, KeyFrontProxyClientKey}, frontProxyCA, pki.Leaf{CommonName: "front-proxy-client", Usage: pki.Client}},
		{pair{KeyControllerManagerCert, KeyControllerManagerKey}, ca, pki.Leaf{CommonName: "system:kube-controller-manager", Usage: pki.Client}},
	}
	if s.Activity != nil {
		leaves = append(leaves,
			leaf{pair{KeyAuditWebhookCert, KeyAuditWebhookKey}, ca, pki.Leaf{CommonName: ActivityClientUser, Usage: pki.Client}},
			leaf{pair{KeyActivityServingCert, KeyActivityServingKey}, ca, pki.Leaf{CommonName: ActivityServerName(s.Cluster), DNSNames: []string{ActivityServerName(s.Cluster)}, Usage: pki.Server}})
	}
	switch s.Storage {
	case tenantryv1alpha1.StorageEtcd:
		etcdCA, err := s.authority(current, data, pair{KeyEtcdCACert, KeyEtcdCAKey}, s.Cluster+"-etcd-ca", now)
		if err != nil {
			return nil, time.Time{}, err
		}
		etcdServing, err := s.EtcdServingNames(s.EtcdServiceIP)
		if err != nil {
			return nil, time.Time{}, err
		}
		etcdPeer, err := s.EtcdPeerNames()
		if err != nil {
			return nil, time.Time{}, err
		}
		leaves = append(leaves,
			leaf{pair{KeyEtcdServerCert, KeyEtcdServerKey}, etcdCA, etcdServing},
			leaf{pair{KeyEtcdPeerCert, KeyEtcdPeerKey}, etcdCA, etcdPeer},
			leaf{pair{KeyEtcdClientCert, KeyEtcdClientKey}, etcdCA, pki.Leaf{CommonName: "kube-apiserver-etcd-client", Usage: pki.Client}})
	case tenantryv1alpha1.StorageDataStore:
		if s.DataStore == nil || s.DataStore.CA == nil {
			return nil, time.Time{}, errors.New("storage DataStore without the store's CA")
		}
		// The store's CA certificate, never its key.
		data[KeyEtcdCACert] = s.DataStore.CA.CertPEM
		leaves = append(leaves, leaf{pair{KeyEtcdClientCert, KeyEtcdClientKey}, s.DataStore.CA, datastore.ClientLeaf(s.Cluster)})
	}
	for _, l := range leaves {
		kp, err := leafOf(current, l.names, l.ca, l.leaf, now)
		if err != nil {
			return nil, time.Time{}, err
		}
		data[l.names.cert], data[l.names.key] = kp.CertPEM, kp.KeyPEM
		note(kp)
	}
	if len(current[KeyServiceAccountPrivate]) > 0 && len(current[KeyServiceAccountPublic]) > 0 {
		data[KeyServiceAccountPrivate], data[KeyServiceAccountPublic] = current[KeyServiceAccountPrivate], current[KeyServiceAccountPublic]
	} else if data[KeyServiceAccountPrivate], data[KeyServiceAccountPublic], err = pki.NewSigningKey(); err != nil {
		return nil, time.Time{}, err
	}
	// Files, not data: client-go reads a renewed certificate again, and
	// the controller-manager runs on without a restart.
	kubeconfig, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"tenant": {Server: localServer, CertificateAuthority: pkiDir + "/" + KeyCACert}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"controller-manager": {ClientCertificate: pkiDir + "/" + KeyControllerManagerCert, ClientKey: pkiDir + "/" + KeyControllerManagerKey}},
		Contexts:       map[string]*clientcmdapi.Context{"tenant": {Cluster: "tenant", AuthInfo: "controller-manager"}},
		CurrentContext: "tenant",
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("the controller-manager's kubeconfig: %w", err)
	}
	data[KeyControllerManagerKubeconfig] = kubeconfig
	if s.Activity != nil {
		webhook, err := clientcmd.Write(clientcmdapi.Config{
			Clusters: map[string]*clientcmdapi.Cluster{"activity": {
				Server: s.Activity.URL, CertificateAuthority: pkiDir + "/" + KeyCACert, TLSServerName: ActivityServerName(s.Cluster),
			}},
			AuthInfos:      map[string]*clientcmdapi.AuthInfo{"kube-apiserver": {ClientCertificate: pkiDir + "/" + KeyAuditWebhookCert, ClientKey: pkiDir + "/" + KeyAuditWebhookKey}},
			Contexts:       map[string]*clientcmdapi.Context{"activity": {Cluster: "activity", AuthInfo: "kube-apiserver"}},
			CurrentContext: "activity",
		})
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("the audit webhook's kubeconfig: %w", err)
		}
		data[KeyAuditWebhookKubeconfig], data[KeyAuditPolicy] = webhook, []byte(auditPolicy)
	}
	return data, expires, nil
}

// CA reads the control plane's CA from the PKI Secret's data.
func CA(data map[string][]byte) (*pki.KeyPair, error) {
	return pki.Parse(data[KeyCACert], data[KeyCAKey], nil)
}

// authority keeps current's CA of names, or makes one named commonName.
func (s Spec) authority(current, data map[string][]byte, names pair, commonName string, now time.Time) (*pki.KeyPair, error) {
	kp, err := pki.Parse(current[names.cert], current[names.key], nil)
	if err != nil {
		if len(current[names.cert]) > 0 {
			// A broken CA is not replaced behind everyone's back.
			return nil, fmt.Errorf("the PKI Secret's %s: %w", names.cert, err)
		}
		if kp, err = pki.NewCA(commonName, now); err != nil {
			return nil, err
		}
	}
	data[names.cert], data[names.key] = kp.CertPEM, kp.KeyPEM
	return kp, nil
}

// leafOf keeps current's certificate of names if ca signed it and it
// needs no renewal for leaf, or issues one.
func leafOf(current map[string][]byte, names pair, ca *pki.KeyPair, leaf pki.Leaf, now time.Time) (*pki.KeyPair, error) {
	if kp, err := pki.Parse(current[names.cert], current[names.key], ca); err == nil && !pki.Renew(kp.Cert, &leaf, now) {
		return kp, nil
	}
	return ca.Issue(leaf, now)
}

// Kubeconfig is a kubeconfig for server, trusting ca, with a client
// certificate for leaf: current's, if ca signed it, it is for that server
// and it needs no renewal; otherwise a new one. It returns the client's
// key pair too.
func Kubeconfig(ca *pki.KeyPair, current []byte, server string, leaf pki.Leaf, now time.Time) ([]byte, *pki.KeyPair, error) {
	if kp, err := clientOf(current, ca, server); err == nil && !pki.Renew(kp.Cert, &leaf, now) {
		return current, kp, nil
	}
	kp, err := ca.Issue(leaf, now)
	if err != nil {
		return nil, nil, err
	}
	const name = "tenant"
	config := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{name: {Server: server, CertificateAuthorityData: ca.CertPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{leaf.CommonName: {ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: name, AuthInfo: leaf.CommonName}},
		CurrentContext: name,
	}
	out, err := clientcmd.Write(config)
	if err != nil {
		return nil, nil, fmt.Errorf("writing the kubeconfig: %w", err)
	}
	return out, kp, nil
}

// clientOf reads the client certificate of a kubeconfig, if it is one of
// ca's for server.
func clientOf(kubeconfig []byte, ca *pki.KeyPair, server string) (*pki.KeyPair, error) {
	if len(kubeconfig) == 0 {
		return nil, errors.New("no kubeconfig")
	}
	config, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, err
	}
	ctx := config.Contexts[config.CurrentContext]
	if ctx == nil || config.Clusters[ctx.Cluster] == nil || config.AuthInfos[ctx.AuthInfo] == nil {
		return nil, errors.New("the kubeconfig's current context names nothing")
	}
	if config.Clusters[ctx.Cluster].Server != server {
		return nil, fmt.Errorf("the kubeconfig is for %s", config.Clusters[ctx.Cluster].Server)
	}
	user := config.AuthInfos[ctx.AuthInfo]
	return pki.Parse(user.ClientCertificateData, user.ClientKeyData, ca)
}
