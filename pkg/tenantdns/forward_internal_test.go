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

// An answer kept from a TCP query is cut to what a UDP client takes, and
// marked truncated, so that the client asks again over TCP.
func TestForwardedAnswersFitTheClientsUDPSize(t *testing.T) {
	req := new(dns.Msg)
	req.SetQuestion("big.example.", dns.TypeA)
	big := new(dns.Msg)
	big.SetReply(req)
	for i := range 100 {
		big.Answer = append(big.Answer, &dns.A{Hdr: dns.RR_Header{Name: "big.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, byte(i))})
	}
	f := newForwarder(nil)
	f.cache.put(req, big, f.now())
	s := &Server{forwarder: f}
	w := &recordingWriter{remote: &net.UDPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5353}}
	resp := new(dns.Msg)
	s.forward(t.Context(), w, req, resp, &tenantEntry{Tenant: Tenant{Name: "t"}, forwards: make(chan struct{}, 1)})
	packed, err := resp.Pack()
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Truncated || len(packed) > dns.MinMsgSize {
		t.Errorf("a 100-record answer to a UDP client without EDNS: %d bytes, truncated %v; want at most %d bytes, truncated", len(packed), resp.Truncated, dns.MinMsgSize)
	}
}

// recordingWriter is a dns.ResponseWriter that only says where the query
// came from.
type recordingWriter struct {
	dns.ResponseWriter
	remote net.Addr
}

func (w *recordingWriter) RemoteAddr() net.Addr { return w.remote }
