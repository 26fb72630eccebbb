package syncer

import (
	"testing"
	"time"
)

func TestRecentCreates(t *testing.T) {
	var r recentCreates
	r.Lock()
	defer r.Unlock()
	if r.has("ns/a") {
		t.Fatal("an object never created is taken for created")
	}
	r.add("ns/a")
	if !r.has("ns/a") {
		t.Fatal("an object just created is not remembered")
	}
	r.forget("ns/a")
	if r.has("ns/a") {
		t.Fatal("an object the cache showed is still remembered")
	}
	// An object whose create is older than the TTL is made again.
	r.at["ns/b"] = time.Now().Add(-recentCreateTTL)
	if r.has("ns/b") {
		t.Fatal("a create older than the TTL is still taken for the truth")
	}
	if _, kept := r.at["ns/b"]; kept {
		t.Fatal("an expired create is kept")
	}
}
