// Package kubeletapi serves the kubelet API of tenants' virtual nodes: the
// endpoints a tenant's kube-apiserver calls on a node's kubelet for
// `kubectl logs`, `exec`, `attach` and `port-forward`. Each request acts on
// the tenant Pod's host Pod, through the host API server's pods/log,
// pods/exec, pods/attach and pods/portforward, so that what the host's own
// kubelet does (or, on the test kit, kwok) answers.
//
// One Server, one listener, serves every tenant. A tenant's API server is
// told apart from another by the client certificate it presents to
// kubelets (kube-apiserver's --kubelet-client-certificate): the certificate
// must verify against exactly one registered tenant's client CA, the CA
// that tenant's API server itself trusts for client certificates (its
// kube-system/extension-apiserver-authentication ConfigMap), as a kubelet
// of that cluster would check it. The user it names is then authorized by
// a SubjectAccessReview in that tenant, for the node's proxy subresource,
// as a kubelet with webhook authorization does. A request names a Pod by
// its tenant namespace and name, and only ever reaches the host Pod that
// Tenantry made for that tenant's Pod: a tenant cannot name another
// tenant's Pods, whatever namespace and name it asks for.
//
// Tenants join with Register, from their own app (see package pods'
// Options.KubeletAPI), and leave when it stops.
package kubeletapi
