#!/usr/bin/env python3
"""Cuts prepared token shards into short samples: the "short samples" workload of
bench/trainer_bench.py (issue 15). Each mail of SRC (shards prepared by nightshift-prepare
with a long --max-len, so mails are whole) becomes consecutive chunks of N tokens, N drawn
per chunk from [lo, hi] (default 100..200, most about 150), each chunk starting with the
bos token (the classifier's CLS position) and keeping its mail's label. A mail's chunks
stay in its split, so validation mails are never trained on.

  bench/chunk_shards.py SRC DST [--lo 100 --hi 200 --seed 1]

Writes DST/train.shard, DST/val.shard and DST/meta.json in the layout of
common/format/shard.h (payload checksum included).
"""
import argparse
import json
import os
import struct

import numpy as np

MAGIC = b"NSSHARD1"


def read(path):
    with open(path, "rb") as f:
        h = f.read(64)
        magic, version, vocab, n, ntok, ncls = struct.unpack("<8sIIQQI", h[:36])
        assert magic == MAGIC, path
        offsets = np.frombuffer(f.read(8 * (n + 1)), dtype=np.uint64).astype(np.int64)
        labels = np.frombuffer(f.read(4 * n), dtype=np.int32)
        ids = np.frombuffer(f.read(8 * n), dtype=np.uint64)
        tokens = np.frombuffer(f.read(4 * ntok), dtype=np.int32)
    return vocab, ncls, offsets, labels, ids, tokens


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:  # the shard's StableHash64 (common/format/shard.cc)
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def write(path, vocab, ncls, samples):
    offsets = np.zeros(len(samples) + 1, dtype=np.uint64)
    offsets[1:] = np.cumsum([len(t) for _, _, t in samples])
    labels = np.array([y for _, y, _ in samples], dtype=np.int32)
    ids = np.array([i for i, _, _ in samples], dtype=np.uint64)
    tokens = np.concatenate([t for _, _, t in samples]).astype(np.int32)
    payload = offsets.tobytes() + labels.tobytes() + ids.tobytes() + tokens.tobytes()
    header = struct.pack("<8sIIQQIIQ", MAGIC, 1, vocab, len(samples), len(tokens), ncls, 0, fnv1a64(payload))
    header += b"\0" * (64 - len(header))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header + payload)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--lo", type=int, default=100)
    ap.add_argument("--hi", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    meta = json.load(open(os.path.join(a.src, "meta.json")))
    bos = meta.get("bos_id", 2)
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.dst, exist_ok=True)
    lengths = []
    for split in ["train", "val"]:
        vocab, ncls, offsets, labels, ids, tokens = read(os.path.join(a.src, split + ".shard"))
        out = []
        for i in range(len(labels)):
            body = tokens[offsets[i]:offsets[i + 1]]
            if len(body) and body[0] == bos:
                body = body[1:]
            pos, k = 0, 0
            while pos < len(body):
                n = int(rng.integers(a.lo, a.hi + 1)) - 1  # tokens after bos
                piece = body[pos:pos + n]
                out.append(((int(ids[i]) * 1000003 + k) & 0xFFFFFFFFFFFFFFFF, int(labels[i]),
                            np.concatenate([[bos], piece]).astype(np.int32)))
                lengths.append(len(piece) + 1)
                pos += n
                k += 1
        write(os.path.join(a.dst, split + ".shard"), vocab, ncls, out)
        meta["num_" + split] = len(out)
    json.dump(meta, open(os.path.join(a.dst, "meta.json"), "w"), indent=1)
    q = np.percentile(lengths, [10, 50, 90])
    print("chunk_shards: %d train / %d val samples, length p10/p50/p90 %d/%d/%d" %
          (meta["num_train"], meta["num_val"], q[0], q[1], q[2]))


if __name__ == "__main__":
    main()
