package tenantdns

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// upstreamTimeout bounds one exchange with one upstream resolver: a
// resolver that does not answer costs a query this long, and the next is
// asked.
const upstreamTimeout = 2 * time.Second

// maxForwards bounds the queries of one tenant that wait for an upstream
// resolver at once: beyond, its queries for other names are refused at
// once (REFUSED, as CoreDNS's forward does past max_concurrent), so that a
// tenant asking for names that resolve slowly holds no more than this
// many of the server's goroutines, and other tenants' queries go on.
const maxForwards = 100

// The forwarded answers' cache: at most cacheEntries answers, each kept
// for its own TTL but at most maxCacheTTL (a name that does not exist, or
// has no records of the type, at most maxNegativeTTL).
const (
	cacheEntries   = 10000
	maxCacheTTL    = 30 * time.Second
	maxNegativeTTL = 5 * time.Second
)

// errTooManyForwards: the tenant has maxForwards queries waiting upstream.
var errTooManyForwards = errors.New("too many of the tenant's queries wait for an upstream resolver")

// forwarder asks the upstream resolvers for the names outside the cluster
// domain, for every tenant: one client per transport, a short timeout per
// resolver, answers cached (they do not depend on the tenant asking: the
// upstream resolvers are the host's).
type forwarder struct {
	upstream []string
	udp, tcp *dns.Client
	cache    answerCache
	now      func() time.Time
}

func newForwarder(upstream []string) *forwarder {
	return &forwarder{
		upstream: upstream,
		udp:      &dns.Client{Net: "udp", Timeout: upstreamTimeout},
		tcp:      &dns.Client{Net: "tcp", Timeout: upstreamTimeout},
		cache:    answerCache{entries: map[cacheKey]cachedAnswer{}, max: cacheEntries},
		now:      time.Now,
	}
}

// exchange answers req from the cache, or asks the upstream resolvers in
// turn over network and relays the first answer (asking again over TCP
// when UDP's is truncated), holding one of t's forward slots meanwhile.
func (f *forwarder) exchange(ctx context.Context, t *tenantEntry, network string, req *dns.Msg) (*dns.Msg, error) {
	if in := f.cache.get(req, f.now()); in != nil {
		return in, nil
	}
	select {
	case t.forwards <- struct{}{}:
		defer func() { <-t.forwards }()
	default:
		return nil, errTooManyForwards
	}
	lastErr := errors.New("no upstream resolver")
	for _, upstream := range f.upstream {
		c := f.udp
		if network == "tcp" {
			c = f.tcp
		}
		in, _, err := c.ExchangeContext(ctx, req, upstream)
		if err == nil && in.Truncated && c == f.udp {
			in, _, err = f.tcp.ExchangeContext(ctx, req, upstream)
		}
		if err != nil {
			lastErr = fmt.Errorf("%s: %w", upstream, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		f.cache.put(req, in, f.now())
		return in, nil
	}
	return nil, lastErr
}

// cacheKey names one question, with whether DNSSEC records were asked for.
type cacheKey struct {
	name          string
	qtype, qclass uint16
	do            bool
}

type cachedAnswer struct {
	msg     *dns.Msg
	stored  time.Time
	expires time.Time
}

// answerCache holds upstream answers, max at most: a full cache drops
// expired answers first, then any.
type answerCache struct {
	mu      sync.Mutex
	entries map[cacheKey]cachedAnswer
	max     int
}

func keyOf(req *dns.Msg) (cacheKey, bool) {
	if len(req.Question) != 1 {
		return cacheKey{}, false
	}
	q := req.Question[0]
	do := false
	if opt := req.IsEdns0(); opt != nil {
		do = opt.Do()
	}
	return cacheKey{name: strings.ToLower(q.Name), qtype: q.Qtype, qclass: q.Qclass, do: do}, true
}

// get is the cached answer to req, as if fresh: req's ID and question, and
// every TTL less the time it was kept; nil if none.
func (c *answerCache) get(req *dns.Msg, now time.Time) *dns.Msg {
	key, ok := keyOf(req)
	if !ok {
		return nil
	}
	c.mu.Lock()
	e, found := c.entries[key]
	c.mu.Unlock()
	if !found || !now.Before(e.expires) {
		return nil
	}
	out := e.msg.Copy()
	out.Id = req.Id
	out.Question = req.Question
	age := uint32(now.Sub(e.stored) / time.Second)
	for _, section := range [][]dns.RR{out.Answer, out.Ns, out.Extra} {
		for _, rr := range section {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				h.Ttl -= min(age, h.Ttl)
			}
		}
	}
	return out
}

// put keeps in, the answer to req, for as long as its records live, if it
// is whole (not truncated) and final (an answer, or that the name or the
// type does not exist).
func (c *answerCache) put(req, in *dns.Msg, now time.Time) {
	key, ok := keyOf(req)
	if !ok || in.Truncated || (in.Rcode != dns.RcodeSuccess && in.Rcode != dns.RcodeNameError) {
		return
	}
	limit := maxCacheTTL
	if in.Rcode == dns.RcodeNameError || len(in.Answer) == 0 {
		limit = maxNegativeTTL
	}
	ttl := limit
	for _, section := range [][]dns.RR{in.Answer, in.Ns, in.Extra} {
		for _, rr := range section {
			if h := rr.Header(); h.Rrtype != dns.TypeOPT {
				ttl = min(ttl, time.Duration(h.Ttl)*time.Second)
			}
		}
	}
	if ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, found := c.entries[key]; !found && len(c.entries) >= c.max {
		c.evict(now)
	}
	c.entries[key] = cachedAnswer{msg: in.Copy(), stored: now, expires: now.Add(ttl)}
}

// evict makes room for one answer: every expired answer goes, or, if none
// has, one answer.
func (c *answerCache) evict(now time.Time) {
	for k, e := range c.entries {
		if !now.Before(e.expires) {
			delete(c.entries, k)
		}
	}
	if len(c.entries) < c.max {
		return
	}
	for k := range c.entries {
		delete(c.entries, k)
		return
	}
}
