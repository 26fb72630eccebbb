package kubeletapi

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/proxy"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The kubelet endpoints served, by the first segment of their path, and
// the host Pod subresource each acts through.
var endpoints = map[string]endpoint{
	"containerLogs": {kind: "logs", subresource: "log", container: true},
	"exec":          {kind: "exec", subresource: "exec", container: true, uid: true},
	"attach":        {kind: "attach", subresource: "attach", container: true, uid: true},
	"portForward":   {kind: "portforward", subresource: "portforward", uid: true},
}

type endpoint struct {
	// kind names the endpoint in metrics and logs.
	kind string
	// subresource is the host Pod subresource that serves it.
	subresource string
	// container: the path ends with a container name; uid: a Pod UID may
	// come before it (/exec/ns/pod/uid/container).
	container, uid bool
}

// target is what a request's path names.
type target struct {
	endpoint
	namespace, pod, uid, container string
}

// parsePath reads a kubelet API path: /containerLogs/ns/pod/container,
// /exec|attach/ns/pod[/uid]/container, /portForward/ns/pod[/uid].
func parsePath(path string) (target, error) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	e, ok := endpoints[parts[0]]
	if !ok {
		return target{}, fmt.Errorf("%s is not served: the kubelet API of a virtual node serves containerLogs, exec, attach and portForward", path)
	}
	t := target{endpoint: e}
	args := parts[1:]
	want := 2
	if e.container {
		want++
	}
	if e.uid && len(args) == want+1 {
		t.uid = args[2]
		args = append(args[:2:2], args[3:]...)
	}
	if len(args) != want {
		return target{}, fmt.Errorf("path %s: want /%s/<namespace>/<pod>%s", path, parts[0], map[bool]string{true: "/<container>"}[e.container])
	}
	t.namespace, t.pod = args[0], args[1]
	if e.container {
		t.container = args[2]
	}
	for _, a := range args {
		if a == "" {
			return target{}, fmt.Errorf("path %s has an empty segment", path)
		}
	}
	return t, nil
}

// ServeHTTP serves one kubelet API request of a tenant's API server.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		// No tenant API server: whatever it asks, its connection is not
		// kept for another request, so that it holds no place for long.
		w.Header().Set("Connection", "close")
	}
	if r.URL.Path == "/healthz" {
		_, _ = w.Write([]byte("ok"))
		return
	}
	cluster, kind := "", "unknown"
	// A request is counted once answered (a stream: once opened), and
	// timed once it ends.
	rec := &statusRecorder{ResponseWriter: w, answered: func(code int) { count(cluster, kind, code) }}
	w = rec
	defer func() { observeDuration(kind, time.Since(start)) }()
	fail := func(status int, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		log := s.opts.Logger
		if cluster != "" {
			log = log.WithValues("cluster", cluster)
		}
		log.V(1).Info("kubelet API request refused", "path", r.URL.Path, "code", status, "reason", msg)
		http.Error(w, msg, status)
	}

	tenant, user, err := s.authenticate(r)
	if err != nil {
		fail(http.StatusUnauthorized, "%v", err)
		return
	}
	cluster = tenant.Name
	select {
	case tenant.requests <- struct{}{}:
		defer func() { <-tenant.requests }()
	default:
		fail(http.StatusTooManyRequests, "tenant %s has %d kubelet API requests open, the most it may", cluster, maxRequestsPerTenant)
		return
	}
	t, err := parsePath(r.URL.Path)
	if err != nil {
		fail(http.StatusNotFound, "%v", err)
		return
	}
	kind = t.kind

	ctx := r.Context()
	var pod corev1.Pod
	if err := tenant.Client.Get(ctx, client.ObjectKey{Namespace: t.namespace, Name: t.pod}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			fail(http.StatusNotFound, "pod %s/%s not found", t.namespace, t.pod)
			return
		}
		fail(http.StatusBadGateway, "reading pod %s/%s: %v", t.namespace, t.pod, err)
		return
	}
	if t.uid != "" && types.UID(t.uid) != pod.UID {
		fail(http.StatusNotFound, "pod %s/%s has UID %s, not %s", t.namespace, t.pod, pod.UID, t.uid)
		return
	}
	if t.container != "" && !hasContainer(&pod, t.container) {
		// Only the tenant's own containers: never one the host added.
		fail(http.StatusNotFound, "pod %s/%s has no container %s", t.namespace, t.pod, t.container)
		return
	}
	allowed, reason, err := authorize(ctx, tenant, user, r, pod.Spec.NodeName)
	if err != nil {
		fail(http.StatusBadGateway, "%v", err)
		return
	}
	if !allowed {
		fail(http.StatusForbidden, "%s may not %s nodes/proxy of node %s: %s", user.Subject.CommonName, verbOf(r.Method), pod.Spec.NodeName, reason)
		return
	}
	hostKey, ok, err := tenant.HostPod(ctx, &pod, t.container)
	if err != nil {
		fail(http.StatusBadGateway, "finding the host Pod of %s/%s: %v", t.namespace, t.pod, err)
		return
	}
	if !ok {
		if t.container != "" {
			fail(http.StatusNotFound, "container %s of pod %s/%s does not run in the host", t.container, t.namespace, t.pod)
			return
		}
		fail(http.StatusNotFound, "pod %s/%s does not run in the host", t.namespace, t.pod)
		return
	}

	query, err := hostQuery(t, r.URL.Query())
	if err != nil {
		fail(http.StatusBadRequest, "%v", err)
		return
	}
	location := *s.host
	location.Path = strings.TrimSuffix(location.Path, "/") +
		fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/%s", hostKey.Namespace, hostKey.Name, t.subresource)
	location.RawQuery = query.Encode()
	h := proxy.NewUpgradeAwareHandler(&location, s.transport, false, false, responder{s, cluster})
	h.UpgradeTransport = s.upgrade
	h.UseLocationHost = true
	// Logs stream as the host writes them (kubectl logs -f).
	h.FlushInterval = -1
	// The host sees only the location built here: the proxy would
	// otherwise take a plain request's own query and trailing slash.
	out := r.Clone(ctx)
	out.URL.Path, out.URL.RawPath, out.URL.RawQuery = location.Path, "", location.RawQuery
	stripIdentity(out.Header)
	h.ServeHTTP(rec, out)
	rec.answer(http.StatusOK) // a response that set no status
}

// hostQuery translates a kubelet request's query to that of the host Pod
// subresource: the container moves from the path to the query; exec and
// attach name their streams as the Pod API does.
func hostQuery(t target, in url.Values) (url.Values, error) {
	out := url.Values{}
	switch t.kind {
	case "logs":
		for _, k := range []string{"follow", "previous", "sinceSeconds", "sinceTime", "timestamps", "tailLines", "limitBytes", "stream"} {
			if v, ok := in[k]; ok {
				out[k] = v
			}
		}
	case "exec", "attach":
		if t.kind == "exec" {
			cmd := in[corev1.ExecCommandParam]
			if len(cmd) == 0 {
				return nil, fmt.Errorf("exec without a command")
			}
			out[corev1.ExecCommandParam] = cmd
		}
		for kubelet, api := range map[string]string{
			corev1.ExecStdinParam: "stdin", corev1.ExecStdoutParam: "stdout",
			corev1.ExecStderrParam: "stderr", corev1.ExecTTYParam: "tty",
		} {
			if on(in.Get(kubelet)) {
				out.Set(api, "true")
			}
		}
	case "portforward":
		// A WebSocket client names its ports in the query; SPDY in the
		// streams' headers, which pass through as they are.
		if ports := in[corev1.PortHeader]; len(ports) > 0 {
			out["ports"] = ports
		}
	}
	if t.container != "" {
		out.Set("container", t.container)
	}
	return out, nil
}

// hasContainer says whether the tenant Pod has a container (an init, a
// regular or an ephemeral one) of that name. Whether its host Pod runs it
// as the tenant's is Tenant.HostPod's to say: an ephemeral container's
// name may be that of one the host added to the host Pod.
func hasContainer(pod *corev1.Pod, name string) bool {
	named := func(c corev1.Container) bool { return c.Name == name }
	return slices.ContainsFunc(pod.Spec.InitContainers, named) || slices.ContainsFunc(pod.Spec.Containers, named) ||
		slices.ContainsFunc(pod.Spec.EphemeralContainers, func(c corev1.EphemeralContainer) bool { return c.Name == name })
}

// stripIdentity removes from a tenant's request every header that could
// speak for someone: it goes to the host with the host's credentials only,
// and a tenant must not borrow them to act as another user (impersonation,
// or the identity headers of an authenticating proxy).
func stripIdentity(h http.Header) {
	for k := range h {
		switch c := http.CanonicalHeaderKey(k); {
		case c == "Authorization", c == "Proxy-Authorization", c == "Cookie",
			strings.HasPrefix(c, "Impersonate-"), strings.HasPrefix(c, "X-Remote-"):
			delete(h, k)
		}
	}
}

// on reads a kubelet stream flag ("1", "true").
func on(v string) bool { return v == "1" || strings.EqualFold(v, "true") }

// statusRecorder tells answered, once, the status of the response.
type statusRecorder struct {
	http.ResponseWriter
	answered func(code int)
	done     bool
}

func (r *statusRecorder) answer(code int) {
	if !r.done {
		r.done = true
		r.answered(code)
	}
}

func (r *statusRecorder) WriteHeader(code int) {
	r.answer(code)
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	r.answer(http.StatusOK)
	return r.ResponseWriter.Write(p)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack hands the connection of an upgrade (exec, attach, port-forward)
// to the proxy, which then relays the host's answer.
func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := r.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("the connection cannot be taken over")
	}
	r.answer(http.StatusSwitchingProtocols)
	return h.Hijack()
}

// responder answers a request that could not reach the host API server.
type responder struct {
	s       *Server
	cluster string
}

func (e responder) Error(w http.ResponseWriter, r *http.Request, err error) {
	e.s.opts.Logger.Error(err, "reaching the host API server for a kubelet API request", "cluster", e.cluster, "path", r.URL.Path)
	http.Error(w, fmt.Sprintf("reaching the host API server: %v", err), http.StatusBadGateway)
}
