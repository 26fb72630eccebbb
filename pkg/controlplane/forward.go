package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tenantryv1alpha1 "github.com/tenantry/tenantry/pkg/apis/tenantry/v1alpha1"
)

// forwardGiveUp is how long Forward keeps trying to reach the control
// plane's Pod again, for each local connection, before it ends.
const forwardGiveUp = time.Minute

// Forward forwards a port of 127.0.0.1 (port, or a free one if 0) to the
// API server of VirtualCluster cluster's control plane, through the host's
// pods/portforward: how a user outside the host reaches it (its serving
// certificate names 127.0.0.1). It returns once the port listens and the
// Pod answered, with its URL, and forwards until ctx ends; done then gives
// nil, or the error that ended it sooner (the Pod unreachable for a
// minute).
//
// Unlike kubectl port-forward, one connection's failure ends that
// connection alone, and a connection to the Pod that the host or its
// kubelet ends is made again for the next one: the port stays open, so a
// client of the kubeconfig sees at most the requests in flight fail.
//
// A control plane that sleeps, when Forward starts or later, is asked to
// wake when a connection cannot reach its Pod, and the connection waits
// for it (up to a minute): so that a client of the forwarded port wakes
// it, as one of its kubeconfig does.
func Forward(ctx context.Context, host *rest.Config, cluster string, port int) (server string, done <-chan error, err error) {
	wake, err := waker(host, cluster)
	if err != nil {
		return "", nil, err
	}
	addr, done, err := forwardPort(ctx, host, Namespace(cluster), WorkloadName+"-0", APIServerPort, port, wake)
	if err != nil {
		return "", nil, err
	}
	return "https://" + addr, done, nil
}

// waker wakes VirtualCluster cluster if it sleeps, and waits until its
// API server's Pod is ready.
func waker(host *rest.Config, cluster string) (func(context.Context) error, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := tenantryv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(host, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("a client of the host: %w", err)
	}
	return func(ctx context.Context) error {
		var vc tenantryv1alpha1.VirtualCluster
		if err := c.Get(ctx, client.ObjectKey{Name: cluster}, &vc); err != nil {
			return fmt.Errorf("reading virtualcluster/%s: %w", cluster, err)
		}
		if !vc.Asleep() {
			return nil
		}
		if err := AskToWake(ctx, c, cluster); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, forwardGiveUp)
		defer cancel()
		key := client.ObjectKey{Namespace: Namespace(cluster), Name: WorkloadName + "-0"}
		return wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var pod corev1.Pod
			if err := c.Get(ctx, key, &pod); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			for _, cond := range pod.Status.Conditions {
				if cond.Type == corev1.PodReady {
					return cond.Status == corev1.ConditionTrue, nil
				}
			}
			return false, nil
		})
	}, nil
}

// ForwardPort is Forward for any port (remote) of any Pod: it forwards a
// port of 127.0.0.1 (local, or a free one if 0) to it, and returns the
// local address, host:port.
func ForwardPort(ctx context.Context, host *rest.Config, namespace, pod string, remote, local int) (addr string, done <-chan error, err error) {
	return forwardPort(ctx, host, namespace, pod, remote, local, nil)
}

// forwardPort is ForwardPort; wake, if not nil, is called when the Pod
// cannot be reached, to bring it back before trying again.
func forwardPort(ctx context.Context, host *rest.Config, namespace, pod string, remote, local int, wake func(context.Context) error) (addr string, done <-chan error, err error) {
	transport, upgrader, err := spdy.RoundTripperFor(host)
	if err != nil {
		return "", nil, err
	}
	target, err := url.Parse(host.Host)
	if err != nil {
		return "", nil, fmt.Errorf("the host's address %q: %w", host.Host, err)
	}
	target.Path = fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/portforward", target.Path, namespace, pod)
	f := &forwarder{dialer: spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, target), pod: namespace + "/" + pod, port: remote,
		ctx: ctx, wake: wake}
	if _, err := f.reach(); err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(local)))
	if err != nil {
		f.close()
		return "", nil, fmt.Errorf("listening on 127.0.0.1:%d: %w", local, err)
	}
	out := make(chan error, 1)
	failed := make(chan error, 1)
	var handlers sync.WaitGroup
	go func() {
		for {
			local, err := ln.Accept()
			if err != nil {
				return // closed
			}
			handlers.Go(func() {
				if err := f.handle(local); err != nil {
					select {
					case failed <- err:
					default:
					}
				}
			})
		}
	}()
	go func() {
		var err error
		select {
		case <-ctx.Done():
		case err = <-failed:
		}
		_ = ln.Close()
		f.close()
		handlers.Wait()
		out <- err
	}()
	return ln.Addr().String(), out, nil
}

// forwarder carries local connections to one port of a Pod over one
// connection to the host's pods/portforward, made again when it ends.
type forwarder struct {
	dialer httpstream.Dialer
	pod    string // namespace/name, for errors
	port   int    // the Pod's

	mu        sync.Mutex
	conn      httpstream.Connection
	requestID int
	// failingSince is when the Pod stopped answering; zero while it does.
	failingSince time.Time
	closed       bool

	// ctx is the forwarding's; wake, if set, brings the Pod back.
	ctx  context.Context
	wake func(context.Context) error
	// waking lets one connection wake the Pod at a time.
	waking sync.Mutex
}

// reach is the connection to the Pod's port forwarding; a Pod that
// cannot be reached is woken first, if the forwarder can.
func (f *forwarder) reach() (httpstream.Connection, error) {
	conn, err := f.connection()
	if err == nil || f.wake == nil {
		return conn, err
	}
	f.waking.Lock()
	defer f.waking.Unlock()
	if conn, err := f.connection(); err == nil {
		return conn, nil // woken meanwhile
	}
	if werr := f.wake(f.ctx); werr != nil {
		return nil, fmt.Errorf("%w; waking it: %w", err, werr)
	}
	return f.connection()
}

// connection is the connection to the Pod's port forwarding, dialled
// again when the last one ended.
func (f *forwarder) connection() (httpstream.Connection, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errors.New("forwarding stopped")
	}
	if f.conn != nil {
		select {
		case <-f.conn.CloseChan():
			f.conn = nil
		default:
			return f.conn, nil
		}
	}
	conn, protocol, err := f.dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err == nil && protocol != portforward.PortForwardProtocolV1Name {
		_ = conn.Close()
		err = fmt.Errorf("the host speaks %q, not %s", protocol, portforward.PortForwardProtocolV1Name)
	}
	if err != nil {
		if f.failingSince.IsZero() {
			f.failingSince = time.Now()
		}
		return nil, fmt.Errorf("forwarding to pod %s: %w", f.pod, err)
	}
	f.conn, f.failingSince = conn, time.Time{}
	return conn, nil
}

// handle carries one local connection to the Pod's port, and
// closes it. Its error is one that ends the forwarding: the Pod
// unreachable for forwardGiveUp.
func (f *forwarder) handle(local net.Conn) error {
	defer local.Close()
	conn, err := f.reach()
	if err != nil {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.closed && time.Since(f.failingSince) >= forwardGiveUp {
			return fmt.Errorf("%w (for %s)", err, forwardGiveUp)
		}
		return nil
	}
	f.mu.Lock()
	f.requestID++
	headers := http.Header{}
	headers.Set(corev1.PortHeader, strconv.Itoa(f.port))
	headers.Set(corev1.PortForwardRequestIDHeader, strconv.Itoa(f.requestID))
	f.mu.Unlock()

	// The protocol's error stream first (the kubelet writes a failure of
	// this connection there), then the data stream.
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	errorStream, err := conn.CreateStream(headers)
	if err != nil {
		_ = conn.Close() // a connection that makes no stream is done
		return nil
	}
	_ = errorStream.Close() // nothing to write
	defer conn.RemoveStreams(errorStream)
	remoteFailed := make(chan struct{})
	go func() {
		defer close(remoteFailed)
		_, _ = io.Copy(io.Discard, errorStream) // this connection's failure alone: not the others'
	}()
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(headers)
	if err != nil {
		_ = conn.Close()
		return nil
	}
	defer conn.RemoveStreams(data)

	remoteDone := make(chan struct{})
	go func() {
		defer close(remoteDone)
		_, _ = io.Copy(local, data)
	}()
	go func() {
		defer data.Close() // nothing more to send
		_, _ = io.Copy(data, local)
	}()
	select {
	case <-remoteDone:
	case <-conn.CloseChan():
	}
	// Discard what is unsent, so the error stream ends too.
	_ = data.Reset()
	<-remoteFailed
	return nil
}

// close ends the connection to the Pod; handlers of local connections
// then end.
func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if f.conn != nil {
		_ = f.conn.Close()
	}
}
