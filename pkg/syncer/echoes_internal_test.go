package syncer

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func configMap(name, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

func TestEchoes(t *testing.T) {
	var e echoes
	e.wrote(configMap("a", "5"))
	if !e.echo(configMap("a", "5")) {
		t.Fatal("the event of the version written is not taken for its echo")
	}
	if e.echo(configMap("a", "5")) {
		t.Fatal("a second event of the same version is taken for an echo: an echo is skipped once")
	}

	// Another writer's version: not an echo, and the write is forgotten.
	e.wrote(configMap("b", "7"))
	if e.echo(configMap("b", "8")) {
		t.Fatal("another version is taken for an echo")
	}
	if e.echo(configMap("b", "7")) {
		t.Fatal("a write is remembered past the next event of its key")
	}

	// The echo came before the write returned: the reconcile it queued
	// read the version, and the write is forgotten.
	e.wrote(configMap("c", "9"))
	e.seen(client.ObjectKeyFromObject(configMap("c", "")), "9")
	if e.echo(configMap("c", "9")) {
		t.Fatal("a write a reconcile already read is still skipped")
	}
	// A reconcile that read an older version forgets nothing.
	e.wrote(configMap("d", "11"))
	e.seen(client.ObjectKeyFromObject(configMap("d", "")), "10")
	if !e.echo(configMap("d", "11")) {
		t.Fatal("a write is forgotten when a reconcile read an older version")
	}
}
