package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantrytest "github.com/tenantry/tenantry/pkg/testing"
)

// podCertificates: a container reads a key and a certificate chain that
// the tenant's own signer issued for the tenant Pod, through its
// podCertificate projection: the request names the tenant Pod, its
// ServiceAccount and its node, and the files hold the issued chain and
// the key it certifies.
func (k *tenantKit) podCertificates(t *testing.T) {
	const signerName = "tenantry.test/pods"
	signer := newTestSigner(t, k.tenant, signerName)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go signer.run(ctx)

	// A separator no PEM holds: base64 ends a line with "==" at times.
	pod := checkPod("app", "certified", `cat /cert/chain.pem; echo '#part#'; cat /cert/key.pem; echo '#part#'; cat /cert/bundle.pem`)
	pod.Spec.Volumes = []corev1.Volume{{Name: "cert", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{PodCertificate: &corev1.PodCertificateProjection{
			SignerName: signerName, KeyType: "ECDSAP256",
			CredentialBundlePath: "bundle.pem", KeyPath: "key.pem", CertificateChainPath: "chain.pem",
			UserAnnotations: map[string]string{"tenantry.test/purpose": "check"},
		}},
	}}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cert", MountPath: "/cert"}}
	done := k.run(t, pod, "ended", ended)
	parts := strings.Split(k.logs(t, "app", "certified"), "#part#\n")
	if done.Status.Phase != corev1.PodSucceeded || len(parts) != 3 {
		t.Fatalf("the Pod ended %s and read %q", done.Status.Phase, parts)
	}
	chain, key, bundle := parts[0], parts[1], parts[2]
	if bundle != key+chain {
		t.Errorf("bundle.pem is not key.pem then chain.pem:\n%s", bundle)
	}
	leafBlock, _ := pem.Decode([]byte(chain))
	keyBlock, _ := pem.Decode([]byte(key))
	if leafBlock == nil || keyBlock == nil {
		t.Fatalf("chain.pem %q, key.pem %q: want PEM", chain, key)
	}
	leaf, err := x509.ParseCertificate(leafBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.CheckSignatureFrom(signer.ca); err != nil {
		t.Errorf("the chain is not the tenant signer's: %v", err)
	}
	private, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
	if err != nil {
		t.Fatalf("key.pem: %v", err)
	}
	if !private.(crypto.Signer).Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(leaf.PublicKey) {
		t.Error("key.pem is not the key the certificate certifies")
	}

	var sa corev1.ServiceAccount
	var node corev1.Node
	if err := k.tenant.Get(ctx, client.ObjectKey{Namespace: "app", Name: "default"}, &sa); err != nil {
		t.Fatal(err)
	}
	if err := k.tenant.Get(ctx, client.ObjectKey{Name: done.Spec.NodeName}, &node); err != nil {
		t.Fatal(err)
	}
	got := signer.signed()
	if len(got) != 1 {
		t.Fatalf("the signer signed %d requests, want the Pod's one", len(got))
	}
	if s := got[0]; s.PodName != "certified" || s.PodUID != done.UID || s.ServiceAccountName != "default" || s.ServiceAccountUID != sa.UID ||
		s.NodeName != types.NodeName(done.Spec.NodeName) || s.NodeUID != node.UID || s.UnverifiedUserAnnotations["tenantry.test/purpose"] != "check" {
		t.Errorf("the request asked for %+v;\nwant the tenant's Pod (%s), ServiceAccount (%s), node (%s, %s) and the Pod's annotations",
			s, done.UID, sa.UID, done.Spec.NodeName, node.UID)
	}
}

// testSigner issues the tenant's PodCertificateRequests of its signer name
// from a CA of its own, as a signer controller does.
type testSigner struct {
	tenant client.Client
	name   string
	ca     *x509.Certificate
	caKey  crypto.Signer

	mu   sync.Mutex
	done []certificatesv1.PodCertificateRequestSpec
}

func newTestSigner(t *testing.T, tenant client.Client, name string) *testSigner {
	t.Helper()
	ca, key, err := tenantrytest.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return &testSigner{tenant: tenant, name: name, ca: ca, caKey: key}
}

// run signs every request of its name until ctx ends, looking every
// 200 ms (a signer's informer, made simple).
func (s *testSigner) run(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		var list certificatesv1.PodCertificateRequestList
		if err := s.tenant.List(ctx, &list); err == nil {
			for i := range list.Items {
				if pcr := &list.Items[i]; pcr.Spec.SignerName == s.name && pcr.Status.CertificateChain == "" {
					_ = s.sign(ctx, pcr) // the next look tries again
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *testSigner) sign(ctx context.Context, pcr *certificatesv1.PodCertificateRequest) error {
	req, err := x509.ParseCertificateRequest(pcr.Spec.StubPKCS10Request)
	if err != nil {
		return err
	}
	notBefore := time.Now().Add(-2 * time.Minute).Truncate(time.Second)
	notAfter := notBefore.Add(time.Duration(ptr.Deref(pcr.Spec.MaxExpirationSeconds, 86400)) * time.Second)
	uri := &url.URL{Scheme: "spiffe", Host: "tenant.test", Path: fmt.Sprintf("/ns/%s/pod/%s", pcr.Namespace, pcr.Spec.PodName)}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), URIs: []*url.URL{uri},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, s.ca, req.PublicKey, s.caKey)
	if err != nil {
		return err
	}
	var chain bytes.Buffer
	_ = pem.Encode(&chain, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	pcr.Status = certificatesv1.PodCertificateRequestStatus{
		Conditions: []metav1.Condition{{
			Type: certificatesv1.PodCertificateRequestConditionTypeIssued, Status: metav1.ConditionTrue,
			Reason: "Issued", Message: "issued by the test signer", LastTransitionTime: metav1.Now(),
		}},
		CertificateChain: chain.String(),
		NotBefore:        ptr.To(metav1.NewTime(notBefore)),
		NotAfter:         ptr.To(metav1.NewTime(notAfter)),
		BeginRefreshAt:   ptr.To(metav1.NewTime(notAfter.Add(-30 * time.Minute))),
	}
	if err := s.tenant.Status().Update(ctx, pcr); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = append(s.done, pcr.Spec)
	return nil
}

// signed are the specs of the requests it issued.
func (s *testSigner) signed() []certificatesv1.PodCertificateRequestSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]certificatesv1.PodCertificateRequestSpec(nil), s.done...)
}
