package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// pageSize is how many keys one read of the store asks for.
	pageSize = 500
	// txnOps is how many keys one write to the store carries at most
	// (etcd's default --max-txn-ops is 128), and txnBytes about how many
	// bytes (its default --max-request-bytes is 1.5 MiB): a larger key
	// goes alone.
	txnOps   = 128
	txnBytes = 1 << 20
)

// ErrNotEmpty is a restore into a prefix that holds keys already.
var ErrNotEmpty = errors.New("the store holds keys under the prefix already")

// Take reads every key of kv under prefix at one revision, in pages,
// and gives each to add without the prefix; not those bound to a lease,
// which expire. It returns the revision:
// what add saw is the store as it was then, whatever was written
// meanwhile. A revision compacted before the read ends fails it; read
// again.
func Take(ctx context.Context, kv clientv3.KV, prefix string, add func(key, value []byte) error) (revision int64, err error) {
	if prefix == "" {
		return 0, errors.New("taking a snapshot: a prefix is required")
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(pageSize)}
		if revision != 0 {
			opts = append(opts, clientv3.WithRev(revision))
		}
		page, err := kv.Get(ctx, from, opts...)
		if err != nil {
			return 0, fmt.Errorf("reading the keys under %q at revision %d: %w", prefix, revision, err)
		}
		if revision == 0 {
			revision = page.Header.Revision
		}
		for _, item := range page.Kvs {
			if item.Lease != 0 {
				// A key bound to a lease lives as long as its lease, and
				// a restored one would live for ever: Events, and the
				// API servers' own address leases, which would make a
				// restored tenant's kubernetes Service name an old Pod.
				continue
			}
			if err := add(bytes.TrimPrefix(item.Key, []byte(prefix)), item.Value); err != nil {
				return 0, err
			}
		}
		if !page.More || len(page.Kvs) == 0 {
			return revision, nil
		}
		from = string(page.Kvs[len(page.Kvs)-1].Key) + "\x00"
	}
}

// Load writes every key of r into kv under prefix, where no key may be
// yet (ErrNotEmpty): a restore adds to nothing. It returns how many keys
// it wrote. Check the snapshot (a first read through Each) before: a
// snapshot found corrupt midway leaves what was written so far.
func Load(ctx context.Context, kv clientv3.KV, prefix string, r *Reader) (int, error) {
	if prefix == "" {
		return 0, errors.New("restoring a snapshot: a prefix is required")
	}
	held, err := kv.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("reading the keys under %q: %w", prefix, err)
	}
	if held.Count > 0 {
		return 0, fmt.Errorf("%w: %d keys under %q", ErrNotEmpty, held.Count, prefix)
	}
	var ops []clientv3.Op
	written, size := 0, 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		if _, err := kv.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("writing keys under %q (%d written): %w", prefix, written, err)
		}
		written += len(ops)
		ops, size = ops[:0], 0
		return nil
	}
	err = r.Each(func(key, value []byte) error {
		if len(ops) > 0 && size+len(prefix)+len(key)+len(value) > txnBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		ops = append(ops, clientv3.OpPut(prefix+string(key), string(value)))
		size += len(prefix) + len(key) + len(value)
		if len(ops) == txnOps {
			return flush()
		}
		return nil
	})
	if err != nil {
		return written, err
	}
	return written, flush()
}
