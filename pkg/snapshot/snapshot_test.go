package snapshot_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tenantry/tenantry/pkg/snapshot"
)

type kv struct{ key, value string }

// write is a snapshot of kvs, as bytes.
func write(t *testing.T, m snapshot.Manifest, kvs []kv) []byte {
	t.Helper()
	w, err := snapshot.NewWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, p := range kvs {
		if err := w.Add([]byte(p.key), []byte(p.value)); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	_, n, err := w.Write(&out, m)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(out.Len()) {
		t.Errorf("Write says %d bytes, wrote %d", n, out.Len())
	}
	return out.Bytes()
}

// read is every key of a snapshot, and its manifest.
func read(data []byte) (snapshot.Manifest, []kv, error) {
	r, err := snapshot.Open(bytes.NewReader(data))
	if err != nil {
		return snapshot.Manifest{}, nil, err
	}
	var kvs []kv
	err = r.Each(func(k, v []byte) error {
		kvs = append(kvs, kv{string(k), string(v)})
		return nil
	})
	return r.Manifest, kvs, err
}

func someKeys(n int) []kv {
	kvs := make([]kv, n)
	for i := range kvs {
		kvs[i] = kv{fmt.Sprintf("/configmaps/default/cm-%04d", i), strings.Repeat(fmt.Sprint(i%10), i%300)}
	}
	return kvs
}

func TestASnapshotReadsBackWhatWasWritten(t *testing.T) {
	kvs := someKeys(1000)
	taken := time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC)
	data := write(t, snapshot.Manifest{Cluster: "c", KubernetesVersion: "v1.36.3", Storage: "Embedded", Revision: 42, TakenAt: taken, Spec: []byte(`{"a":1}`)}, kvs)
	m, got, err := read(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(kvs) {
		t.Fatalf("read %d keys, wrote %d", len(got), len(kvs))
	}
	for i := range kvs {
		if got[i] != kvs[i] {
			t.Fatalf("key %d: read %q=%.20q, wrote %q=%.20q", i, got[i].key, got[i].value, kvs[i].key, kvs[i].value)
		}
	}
	var size int64
	for _, p := range kvs {
		size += int64(len(p.key) + len(p.value))
	}
	var spec bytes.Buffer
	if err := json.Compact(&spec, m.Spec); err != nil {
		t.Fatal(err)
	}
	if m.Format != snapshot.Format || m.Keys != 1000 || m.Bytes != size || m.Cluster != "c" || m.Revision != 42 || !m.TakenAt.Equal(taken) || spec.String() != `{"a":1}` || len(m.SHA256) != 64 {
		t.Errorf("manifest %+v", m)
	}
}

// A snapshot that is not whole is refused, whatever part is missing or
// changed, and says so.
func TestACorruptOrTruncatedSnapshotIsRefused(t *testing.T) {
	data := write(t, snapshot.Manifest{Cluster: "c"}, someKeys(300))
	cases := map[string][]byte{
		"empty":                       nil,
		"not a snapshot":              []byte("hello, world"),
		"truncated at a quarter":      data[:len(data)/4],
		"truncated at three quarters": data[:3*len(data)/4],
		"its last byte gone":          data[:len(data)-1],
	}
	for _, at := range []int{len(data) / 3, len(data) / 2, len(data) - 10} {
		changed := bytes.Clone(data)
		changed[at] ^= 0x40
		cases[fmt.Sprintf("a byte changed at %d of %d", at, len(data))] = changed
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := read(data)
			if !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("read: %v, want ErrCorrupt", err)
			}
			if strings.HasPrefix(name, "truncated") && !strings.Contains(err.Error(), "truncated") {
				t.Errorf("a truncated snapshot's error does not say so: %v", err)
			}
		})
	}
}

func TestASnapshotOfAnotherFormatIsRefused(t *testing.T) {
	// Written as a later version would: the same layout, another format.
	data := write(t, snapshot.Manifest{Cluster: "c"}, someKeys(3))
	m, _, err := read(data)
	if err != nil {
		t.Fatal(err)
	}
	m.Format = snapshot.Format + 1
	if _, err := snapshot.Open(bytes.NewReader(rewriteManifest(t, data, m))); !errors.Is(err, snapshot.ErrFormat) {
		t.Fatalf("Open: %v, want ErrFormat", err)
	}
}

func TestAKeyOutOfBoundsIsRefused(t *testing.T) {
	w, err := snapshot.NewWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(nil, []byte("v")); err == nil {
		t.Error("an empty key was taken")
	}
}

// rewriteManifest is data with its manifest replaced by m.
func rewriteManifest(t *testing.T, data []byte, m snapshot.Manifest) []byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "manifest.json" {
			if body, err = json.Marshal(m); err != nil {
				t.Fatal(err)
			}
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
