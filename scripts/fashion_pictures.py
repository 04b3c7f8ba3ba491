#!/usr/bin/env python3
"""Fashion-MNIST as a picture set with an embedding: the example of
docs/knn-graph.md for "simil path --images", whose rows are not images.

    python3 scripts/fashion_pictures.py OUT [--count N] [--dim D]

reads the training images of Debian's dataset-fashion-mnist and writes
    OUT/images/NNNNN.png   each image, 28 x 28 grayscale
    OUT/images.txt         line i names the picture of vector i
    OUT/embedding.npy      float32, N x D: the images projected on their D
                           principal components (default 50), the kind of
                           vectors a model would give, not pixels
Needs numpy (python3-numpy).
"""
import argparse
import gzip
import os
import struct
import zlib

import numpy as np

TRAIN = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"


def read_images(path, count):
    with gzip.open(path, "rb") as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 0x803:
            raise SystemExit("%s: not an idx3 image file" % path)
        n = min(n, count) if count else n
        data = np.frombuffer(f.read(n * rows * cols), dtype=np.uint8)
    return data.reshape(n, rows, cols)


def write_png(path, image):
    """8-bit grayscale PNG, no filtering."""
    h, w = image.shape
    raw = b"".join(b"\0" + image[y].tobytes() for y in range(h))

    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body) & 0xffffffff))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" +
                chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=0, help="first N images only")
    ap.add_argument("--dim", type=int, default=50, help="principal components kept")
    args = ap.parse_args()
    images = read_images(TRAIN, args.count)
    os.makedirs(os.path.join(args.out, "images"), exist_ok=True)
    with open(os.path.join(args.out, "images.txt"), "w") as names:
        for i, image in enumerate(images):
            write_png(os.path.join(args.out, "images", "%05d.png" % i), image)
            names.write("images/%05d.png\n" % i)
    x = images.reshape(len(images), -1).astype(np.float64)
    x -= x.mean(axis=0)
    # principal axes: eigenvectors of the 784 x 784 covariance, largest first
    values, vectors = np.linalg.eigh(x.T @ x)
    axes = vectors[:, ::-1][:, :args.dim]
    np.save(os.path.join(args.out, "embedding.npy"), (x @ axes).astype(np.float32))
    print("wrote %d pictures, %s and a %d x %d embedding to %s" %
          (len(images), "images.txt", len(images), args.dim, args.out))


if __name__ == "__main__":
    main()
