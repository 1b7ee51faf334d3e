#!/usr/bin/env python3
"""Regenerates the bad IDX files of this folder. Each <case>.<role>.gz replaces
the file <role>.gz of a small, otherwise valid Fashion-MNIST folder of 10
images (see tests/runtime/data_test.c); <case>.<role>.gz.expect holds the text
the error must contain (the error also names the file)."""
import gzip, struct

def idx(magic, dims, data):
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)

def put(name, raw, expect, compress=True):
    with open(name, "wb") as f:
        f.write(gzip.compress(raw, mtime=0) if compress else raw)
    with open(name + ".expect", "w") as f:
        f.write(expect + "\n")

IMG, LAB = "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"
px = [(i * 7) % 256 for i in range(10 * 28 * 28)]
put("bad-magic." + IMG, idx(0x801, [10, 28, 28], px), "bad magic number 0x00000801 (expected 0x00000803")
put("truncated." + IMG, idx(0x803, [10, 28, 28], px[:5 * 784]), "truncated: the header promises 7840 bytes of data, the file holds 3920")
put("short-header." + IMG, idx(0x803, [10], []), "truncated header: 8 of 16 bytes")
put("empty." + IMG, b"", "truncated: 0 bytes, no IDX header")
put("wrong-size." + IMG, idx(0x803, [10, 32, 32], [1] * (10 * 32 * 32)), "images are 32x32 pixels, expected 28x28")
put("zero-count." + IMG, idx(0x803, [0, 28, 28], []), "dimension 0 is 0, outside [1,")
put("huge-count." + IMG, idx(0x803, [4000000000, 28, 28], []), "dimension 0 is 4000000000, outside [1,")
good = gzip.compress(idx(0x803, [10, 28, 28], px), mtime=0)
put("cut-stream." + IMG, good[: len(good) // 2], "corrupt gzip data", compress=False)
put("garbage-stream." + IMG, good[:10] + bytes((b * 13 + 5) % 256 for b in range(200)), "gzip", compress=False)
put("label-count." + LAB, idx(0x801, [7], [1] * 7), "7 labels for the 10 images")
put("label-range." + LAB, idx(0x801, [10], [0, 1, 2, 10, 4, 5, 6, 7, 8, 9]), "label 10 of item 3 is outside [0, 10)")
put("label-magic." + LAB, idx(0x803, [10, 1, 1], [0] * 10), "bad magic number 0x00000803 (expected 0x00000801")
