package clusterregistry

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

type valueKey struct{}

// Informers stopped by one channel share one cancelable context: each
// keeps its own values, all end when the channel closes, and the channel
// is forgotten once the last is done.
func TestStopContextsShareOneWaiterPerChannel(t *testing.T) {
	s := &stopContexts{byChannel: map[<-chan struct{}]*sharedStop{}}
	ch := make(chan struct{})
	a, doneA := s.cancelable(context.WithValue(wait.ContextForChannel(ch), valueKey{}, "a"))
	b, doneB := s.cancelable(context.WithValue(wait.ContextForChannel(ch), valueKey{}, "b"))
	if a.Done() != b.Done() {
		t.Error("two contexts of one channel do not share their end")
	}
	if a.Value(valueKey{}) != "a" || b.Value(valueKey{}) != "b" {
		t.Errorf("values %v and %v, want a and b", a.Value(valueKey{}), b.Value(valueKey{}))
	}
	derived, cancel := context.WithCancel(a)
	defer cancel()

	other := make(chan struct{})
	c, doneC := s.cancelable(wait.ContextForChannel(other))
	if c.Done() == a.Done() {
		t.Error("contexts of two channels share their end")
	}

	close(ch)
	for _, ctx := range []context.Context{a, b, derived} {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a context did not end with its channel")
		}
	}
	if c.Err() != nil {
		t.Error("the other channel's context ended too")
	}
	doneA()
	doneB()
	doneC()
	if c.Err() == nil {
		t.Error("a context whose last user is done was not canceled")
	}
	if n := len(s.byChannel); n != 0 {
		t.Errorf("%d channels remembered after their users are done", n)
	}
	// A context that never ends is handed back as it is.
	if got, done := s.cancelable(context.Background()); got != context.Background() {
		t.Error("a context without an end was wrapped")
	} else {
		done()
	}
}
