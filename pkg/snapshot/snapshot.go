// Package snapshot writes and reads a tenant's snapshot: every key of its
// storage under the tenant's prefix, read at one revision of the store,
// with a manifest that says what restoring needs, in one gzip'd tar.
//
// A snapshot holds keys without the prefix they were read under, so that
// it restores under any other: a tenant of an embedded etcd into a shared
// DataStore and the other way round. It is read whole and checked (its
// keys counted and digested against its manifest) before anything is
// restored from it: a corrupt or truncated snapshot fails with ErrCorrupt
// and makes nothing.
//
// A snapshot holds every Secret of the tenant, as its storage does: keep
// it as you keep the storage.
package snapshot

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"time"
)

// Format is the version of the layout this package writes and reads.
const Format = 1

// The tar entries of a snapshot, in this order.
const (
	manifestEntry = "manifest.json"
	keysEntry     = "keys"
)

const (
	// maxManifest bounds the manifest a reader accepts.
	maxManifest = 4 << 20
	// MaxRecord bounds a key or a value (etcd takes requests of 1.5 MiB
	// by default; a store may be set higher).
	MaxRecord = 64 << 20
)

var (
	// ErrCorrupt is a snapshot that is not whole: truncated, changed since
	// it was written, or not a snapshot.
	ErrCorrupt = errors.New("the snapshot is corrupt or truncated")
	// ErrFormat is a snapshot of a layout this version cannot read.
	ErrFormat = errors.New("the snapshot's format is not one this version reads")
)

// Manifest says what a snapshot holds and what restoring it needs.
type Manifest struct {
	// Format is the layout's version (Format).
	Format int `json:"format"`
	// Cluster is the name of the VirtualCluster it was taken of.
	Cluster string `json:"cluster"`
	// KubernetesVersion is the version of the tenant's control plane: a
	// snapshot restores where that version could run the data.
	KubernetesVersion string `json:"kubernetesVersion"`
	// Storage is the storage type it was read from.
	Storage string `json:"storage"`
	// Revision is the store's revision every key was read at.
	Revision int64 `json:"revision"`
	// TakenAt is when the read began, and Took how long it took.
	TakenAt time.Time `json:"takenAt"`
	Took    string    `json:"took"`
	// Spec is the VirtualCluster's spec, as JSON.
	Spec json.RawMessage `json:"spec,omitempty"`
	// PKI is what of the control plane's identity the snapshot keeps (its
	// CA and service account keys, by name), for a restored tenant that
	// its clients and its service account tokens still trust; nil: none.
	PKI map[string][]byte `json:"pki,omitempty"`

	// Keys is how many keys it holds, Bytes their keys' and values'
	// bytes, and SHA256 the digest of its keys entry. Filled by Write.
	Keys   int    `json:"keys"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Writer gathers a snapshot's keys in a temporary file, then writes the
// snapshot. Close it.
type Writer struct {
	file  *os.File
	buf   *bufio.Writer
	hash  hash.Hash
	keys  int
	bytes int64
	err   error
}

// NewWriter is a Writer whose keys wait in a temporary file of dir (""
// for the system's).
func NewWriter(dir string) (*Writer, error) {
	f, err := os.CreateTemp(dir, "tenantry-snapshot-*")
	if err != nil {
		return nil, fmt.Errorf("a temporary file for the snapshot's keys: %w", err)
	}
	h := sha256.New()
	return &Writer{file: f, buf: bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20), hash: h}, nil
}

// Add adds one key and its value.
func (w *Writer) Add(key, value []byte) error {
	if w.err != nil {
		return w.err
	}
	if len(key) == 0 || len(key) > MaxRecord || len(value) > MaxRecord {
		return fmt.Errorf("key %q: a key of 1 to %d bytes, with a value of at most as many, is what a snapshot holds", truncate(key), MaxRecord)
	}
	var n [binary.MaxVarintLen64]byte
	for _, b := range [][]byte{key, value} {
		if _, w.err = w.buf.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))]); w.err != nil {
			break
		}
		if _, w.err = w.buf.Write(b); w.err != nil {
			break
		}
	}
	if w.err != nil {
		return fmt.Errorf("writing the snapshot's keys: %w", w.err)
	}
	w.keys++
	w.bytes += int64(len(key) + len(value))
	return nil
}

// Write writes the snapshot to out: m, with what Add gathered. It
// returns the manifest it wrote (m, its format and its keys' figures
// filled in) and how many bytes it wrote.
func (w *Writer) Write(out io.Writer, m Manifest) (Manifest, int64, error) {
	if w.err != nil {
		return m, 0, w.err
	}
	if err := w.buf.Flush(); err != nil {
		return m, 0, fmt.Errorf("writing the snapshot's keys: %w", err)
	}
	size, err := w.file.Seek(0, io.SeekCurrent)
	if err != nil {
		return m, 0, err
	}
	if _, err := w.file.Seek(0, io.SeekStart); err != nil {
		return m, 0, err
	}
	m.Format, m.Keys, m.Bytes, m.SHA256 = Format, w.keys, w.bytes, hex.EncodeToString(w.hash.Sum(nil))
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, 0, fmt.Errorf("encoding the snapshot's manifest: %w", err)
	}
	counted := &countingWriter{w: out}
	gz := gzip.NewWriter(counted)
	tw := tar.NewWriter(gz)
	modTime := m.TakenAt
	if err := tw.WriteHeader(&tar.Header{Name: manifestEntry, Mode: 0o600, Size: int64(len(manifest)), ModTime: modTime}); err != nil {
		return m, 0, err
	}
	if _, err := tw.Write(manifest); err != nil {
		return m, 0, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: keysEntry, Mode: 0o600, Size: size, ModTime: modTime}); err != nil {
		return m, 0, err
	}
	if _, err := io.Copy(tw, w.file); err != nil {
		return m, 0, fmt.Errorf("writing the snapshot: %w", err)
	}
	if err := tw.Close(); err != nil {
		return m, 0, fmt.Errorf("writing the snapshot: %w", err)
	}
	if err := gz.Close(); err != nil {
		return m, 0, fmt.Errorf("writing the snapshot: %w", err)
	}
	return m, counted.n, nil
}

// Close removes the temporary file.
func (w *Writer) Close() error {
	_ = w.file.Close()
	return os.Remove(w.file.Name())
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Reader reads a snapshot: its manifest at once, its keys with Each.
type Reader struct {
	// Manifest is the snapshot's manifest.
	Manifest Manifest

	gz   *gzip.Reader
	tar  *tar.Reader
	read bool
}

// Open reads a snapshot's manifest from in; Each then reads its keys.
func Open(in io.Reader) (*Reader, error) {
	gz, err := gzip.NewReader(in)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	tr := tar.NewReader(gz)
	h, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("%w: reading its manifest: %v", ErrCorrupt, err)
	}
	if h.Name != manifestEntry || h.Size > maxManifest {
		return nil, fmt.Errorf("%w: its first entry is %q of %d bytes, not its manifest", ErrCorrupt, h.Name, h.Size)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		return nil, fmt.Errorf("%w: reading its manifest: %v", ErrCorrupt, err)
	}
	r := &Reader{gz: gz, tar: tr}
	if err := json.Unmarshal(data, &r.Manifest); err != nil {
		return nil, fmt.Errorf("%w: its manifest: %v", ErrCorrupt, err)
	}
	if r.Manifest.Format != Format {
		return nil, fmt.Errorf("%w: format %d; this version reads format %d", ErrFormat, r.Manifest.Format, Format)
	}
	return r, nil
}

// Each calls f with each key and value in turn, then checks that they are
// all the manifest says, no more, no less, and unchanged: ErrCorrupt if
// not, after f has seen them. Read a snapshot through once, to check it,
// before restoring anything from a second read. f must not keep key or
// value: their memory is used again.
func (r *Reader) Each(f func(key, value []byte) error) error {
	if r.read {
		return errors.New("a snapshot's keys are read once: open it again")
	}
	r.read = true
	h, err := r.tar.Next()
	if err != nil {
		return fmt.Errorf("%w: reading its keys: %v", ErrCorrupt, err)
	}
	if h.Name != keysEntry {
		return fmt.Errorf("%w: its second entry is %q, not its keys", ErrCorrupt, h.Name)
	}
	digest := sha256.New()
	in := bufio.NewReaderSize(io.TeeReader(r.tar, digest), 1<<20)
	var buf [2][]byte
	keys := 0
	for {
		for i := range buf {
			n, err := binary.ReadUvarint(in)
			if i == 0 && err == io.EOF {
				return r.check(keys, digest)
			}
			if err != nil {
				return fmt.Errorf("%w: after %d keys: %v", ErrCorrupt, keys, unexpected(err))
			}
			if n > MaxRecord || (i == 0 && n == 0) {
				return fmt.Errorf("%w: after %d keys, a record of %d bytes", ErrCorrupt, keys, n)
			}
			if uint64(cap(buf[i])) < n {
				buf[i] = make([]byte, n)
			}
			buf[i] = buf[i][:n]
			if _, err := io.ReadFull(in, buf[i]); err != nil {
				return fmt.Errorf("%w: after %d keys: %v", ErrCorrupt, keys, unexpected(err))
			}
		}
		keys++
		if keys > r.Manifest.Keys {
			return fmt.Errorf("%w: more keys than the %d its manifest says", ErrCorrupt, r.Manifest.Keys)
		}
		if err := f(buf[0], buf[1]); err != nil {
			return err
		}
	}
}

func (r *Reader) check(keys int, digest hash.Hash) error {
	if keys != r.Manifest.Keys {
		return fmt.Errorf("%w: %d keys, its manifest says %d", ErrCorrupt, keys, r.Manifest.Keys)
	}
	if got := hex.EncodeToString(digest.Sum(nil)); got != r.Manifest.SHA256 {
		return fmt.Errorf("%w: its keys' digest is %s, its manifest says %s", ErrCorrupt, got, r.Manifest.SHA256)
	}
	// The rest, to its end, for the compression's own checksum, which
	// covers the manifest too.
	if _, err := io.Copy(io.Discard, r.gz); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, unexpected(err))
	}
	return nil
}

// unexpected names an end of input amid a record as the truncation it is.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("it ends amid a key (truncated)")
	}
	return err
}

func truncate(key []byte) string {
	if len(key) > 64 {
		return string(key[:64]) + "..."
	}
	return string(key)
}
