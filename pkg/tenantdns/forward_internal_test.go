package tenantdns

import (
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func answerFor(req *dns.Msg, rcode int, ttl uint32) *dns.Msg {
	in := new(dns.Msg)
	in.SetRcode(req, rcode)
	if rcode == dns.RcodeSuccess {
		in.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: net.ParseIP("192.0.2.1")}}
	}
	return in
}

// The cache answers a question it holds with the asker's ID and question,
// each TTL less the time kept, until the answer's own TTL (at most
// maxCacheTTL; maxNegativeTTL for a name that does not exist) ends; it
// keeps no truncated or failed answer, and never more than its size.
func TestAnswerCache(t *testing.T) {
	c := answerCache{entries: map[cacheKey]cachedAnswer{}, max: 3}
	now := time.Unix(1000, 0)
	ask := func(name string) *dns.Msg {
		req := new(dns.Msg)
		req.SetQuestion(name, dns.TypeA)
		return req
	}

	req := ask("example.org.")
	c.put(req, answerFor(req, dns.RcodeSuccess, 20), now)
	again := ask("Example.ORG.")
	got := c.get(again, now.Add(5*time.Second))
	if got == nil || got.Id != again.Id || got.Question[0].Name != "Example.ORG." || got.Answer[0].Header().Ttl != 15 {
		t.Fatalf("a cached answer 5 s later: %v; want the asker's ID and name, TTL 15", got)
	}
	if got := c.get(ask("example.org."), now.Add(20*time.Second)); got != nil {
		t.Errorf("an answer past its TTL: %v; want none", got)
	}

	long := ask("long.example.")
	c.put(long, answerFor(long, dns.RcodeSuccess, 3600), now)
	if c.get(ask("long.example."), now.Add(maxCacheTTL-time.Second)) == nil || c.get(ask("long.example."), now.Add(maxCacheTTL)) != nil {
		t.Errorf("an answer of TTL 3600 is not kept exactly %v", maxCacheTTL)
	}
	missing := ask("missing.example.")
	c.put(missing, answerFor(missing, dns.RcodeNameError, 0), now)
	if c.get(ask("missing.example."), now.Add(maxNegativeTTL-time.Second)) == nil || c.get(ask("missing.example."), now.Add(maxNegativeTTL)) != nil {
		t.Errorf("NXDOMAIN is not kept exactly %v", maxNegativeTTL)
	}

	for name, in := range map[string]func(*dns.Msg) *dns.Msg{
		"failed.example.": func(r *dns.Msg) *dns.Msg { return answerFor(r, dns.RcodeServerFailure, 0) },
		"cut.example.": func(r *dns.Msg) *dns.Msg {
			m := answerFor(r, dns.RcodeSuccess, 60)
			m.Truncated = true
			return m
		},
		"zero.example.": func(r *dns.Msg) *dns.Msg { return answerFor(r, dns.RcodeSuccess, 0) },
	} {
		req := ask(name)
		c.put(req, in(req), now)
		if c.get(ask(name), now) != nil {
			t.Errorf("%s was cached", name)
		}
	}

	for i := range 10 {
		req := ask(string(rune('a'+i)) + ".example.")
		c.put(req, answerFor(req, dns.RcodeSuccess, 60), now)
	}
	if n := len(c.entries); n > 3 {
		t.Errorf("the cache holds %d answers, more than its size 3", n)
	}
}
