package clusterregistry

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrFenced is the error of a request that a Fence stopped.
var ErrFenced = errors.New("fenced: this process may no longer write for the cluster")

// A Fence says whether this process may still send requests for a cluster:
// nil while it may, an error wrapping ErrFenced once it may not, for
// example because another replica may run the cluster now (see
// pkg/sharding). A Fence is called before every request, so it answers
// from memory.
type Fence func(cluster string) error

// fence makes every request of clients built from cfg ask f first; a
// fenced request fails before it is sent. It keeps cfg's own rate limit:
// its RateLimiter, or one built from its QPS and Burst as client-go would.
func fence(cfg *rest.Config, cluster string, f Fence) {
	limiter := cfg.RateLimiter
	if limiter == nil && cfg.QPS >= 0 {
		qps, burst := cfg.QPS, cfg.Burst
		if qps == 0 {
			qps = rest.DefaultQPS
		}
		if burst == 0 {
			burst = rest.DefaultBurst
		}
		limiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
	}
	cfg.RateLimiter = fencedLimiter{limiter: limiter, cluster: cluster, fence: f}
}

// fencedLimiter is a rate limiter that asks a Fence before each request.
type fencedLimiter struct {
	limiter flowcontrol.RateLimiter // nil: no limit
	cluster string
	fence   Fence
}

func (l fencedLimiter) Wait(ctx context.Context) error {
	if err := l.fence(l.cluster); err != nil {
		return err
	}
	if l.limiter == nil {
		return nil
	}
	if err := l.limiter.Wait(ctx); err != nil {
		return err
	}
	return l.fence(l.cluster) // the wait may have been long
}

// TryAccept is never used by client-go's REST clients, which Wait.
func (l fencedLimiter) TryAccept() bool {
	return l.fence(l.cluster) == nil && (l.limiter == nil || l.limiter.TryAccept())
}

func (l fencedLimiter) Accept() { _ = l.Wait(context.Background()) }

func (l fencedLimiter) Stop() {
	if l.limiter != nil {
		l.limiter.Stop()
	}
}

func (l fencedLimiter) QPS() float32 {
	if l.limiter == nil {
		return 0
	}
	return l.limiter.QPS()
}

// fencedClient is a client whose writes ask a Fence first; reads go
// through.
type fencedClient struct {
	client.Client
	check func() error
}

func fenceClient(c client.Client, cluster string, f Fence) client.Client {
	return fencedClient{Client: c, check: func() error { return f(cluster) }}
}

func (c fencedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Client.Create(ctx, obj, opts...)
}

func (c fencedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Client.Update(ctx, obj, opts...)
}

func (c fencedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c fencedClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Client.Apply(ctx, obj, opts...)
}

func (c fencedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Client.Delete(ctx, obj, opts...)
}

func (c fencedClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

func (c fencedClient) Status() client.SubResourceWriter {
	return fencedWriter{SubResourceWriter: c.Client.Status(), check: c.check}
}

func (c fencedClient) SubResource(name string) client.SubResourceClient {
	sub := c.Client.SubResource(name)
	return fencedSubResource{SubResourceReader: sub, fencedWriter: fencedWriter{SubResourceWriter: sub, check: c.check}}
}

type fencedSubResource struct {
	client.SubResourceReader
	fencedWriter
}

type fencedWriter struct {
	client.SubResourceWriter
	check func() error
}

func (w fencedWriter) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	if err := w.check(); err != nil {
		return err
	}
	return w.SubResourceWriter.Create(ctx, obj, sub, opts...)
}

func (w fencedWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := w.check(); err != nil {
		return err
	}
	return w.SubResourceWriter.Update(ctx, obj, opts...)
}

func (w fencedWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := w.check(); err != nil {
		return err
	}
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

func (w fencedWriter) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	if err := w.check(); err != nil {
		return err
	}
	return w.SubResourceWriter.Apply(ctx, obj, opts...)
}
