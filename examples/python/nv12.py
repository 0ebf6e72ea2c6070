#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""nv12: a camera-style NV12 frame with padded rows, handed over by planes.

    nv12.py NAME WIDTH HEIGHT PITCH

A producer allocates an NV12 frame (rows PITCH bytes apart, as a camera
or a GPU pads them) and gets one writable array per plane: Y, HEIGHT
rows of WIDTH bytes, and UV, ceil(HEIGHT/2) rows of WIDTH bytes with U
and V interleaved. It fills them and publishes. A consumer (another
client) gets a tensord.Planes: read-only views of the very pages, one
per plane, sharing one lease; it splits UV into U and V without a copy
and prints each plane's mean.
"""
import sys

import numpy as np
import tensord


def produce(client, name, w, h, pitch):
    planes = client.alloc(name, (h, w), "u8", strides=(pitch, 1),
                          format="NV12")
    y, uv = planes
    y[:] = 16  # black
    uv[:, 0::2] = 128  # U
    uv[:, 1::2] = 64  # V
    v = client.publish(planes, metadata=b"camera 0")
    print(f"producer: NV12 {w}x{h} pitch {pitch}, version {v}")


def consume(client, name):
    with client.get(name) as planes:
        y, uv = planes
        u, v = uv.reshape(uv.shape[0], -1, 2).transpose(2, 0, 1)
        print(f"consumer: {planes.format} version {planes.version}, "
              f"planes {[p.shape for p in planes]} "
              f"strides {[p.strides for p in planes]}")
        print(f"consumer: mean Y {y.mean():g} U {u.mean():g} "
              f"V {v.mean():g}")


def main():
    if len(sys.argv) != 5:
        sys.exit(f"usage: {sys.argv[0]} NAME WIDTH HEIGHT PITCH")
    name = sys.argv[1]
    w, h, pitch = (int(x) for x in sys.argv[2:])
    with tensord.Client() as producer, tensord.Client() as consumer:
        produce(producer, name, w, h, pitch)
        consume(consumer, name)


if __name__ == "__main__":
    main()
