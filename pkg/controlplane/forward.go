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

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// Forward forwards a port of 127.0.0.1 (port, or a free one if 0) to the
// API server of VirtualCluster cluster's control plane, through the host's
// pods/portforward, as kubectl port-forward does: how a user outside the
// host reaches it (its serving certificate names 127.0.0.1). It returns
// once the port listens, with its URL, and forwards until ctx ends; done
// then gives nil, or the error that ended it sooner.
func Forward(ctx context.Context, host *rest.Config, cluster string, port int) (server string, done <-chan error, err error) {
	ns, pod := Namespace(cluster), WorkloadName+"-0"
	transport, upgrader, err := spdy.RoundTripperFor(host)
	if err != nil {
		return "", nil, err
	}
	target, err := url.Parse(host.Host)
	if err != nil {
		return "", nil, fmt.Errorf("the host's address %q: %w", host.Host, err)
	}
	target.Path = fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/portforward", target.Path, ns, pod)
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, target)
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("%d:%d", port, APIServerPort)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return "", nil, err
	}
	ended := make(chan error, 1)
	go func() { ended <- pf.ForwardPorts() }()
	select {
	case err := <-ended:
		return "", nil, fmt.Errorf("forwarding to pod %s/%s: %w", ns, pod, err)
	case <-ctx.Done():
		close(stop)
		<-ended
		return "", nil, ctx.Err()
	case <-ready:
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		close(stop)
		<-ended
		return "", nil, fmt.Errorf("the forwarded port of pod %s/%s: %v", ns, pod, err)
	}
	out := make(chan error, 1)
	go func() {
		select {
		case <-ctx.Done():
			close(stop)
			<-ended
			out <- nil
		case err := <-ended:
			if err == nil {
				err = errors.New("the host ended the connection")
			}
			out <- fmt.Errorf("forwarding to pod %s/%s: %w", ns, pod, err)
		}
	}()
	return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), out, nil
}
