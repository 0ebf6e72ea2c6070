#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""torch_handoff: a torch tensor handed to another process, no copy.

    torch_handoff.py NAME

The producer (this script with --produce) borrows pages from the daemon
(Client.alloc), wraps them as a torch tensor with torch.from_dlpack and
computes into it in place, then publishes. The consumer gets the tensor
and wraps it with torch.from_dlpack: a tensor over the producer's pages.
Those pages are read-only for consumers; the binding hands DLPack a
copy-on-write mapping, so writing into the consumer's torch tensor
neither crashes nor changes what anyone else reads.
"""
import subprocess
import sys

import tensord
import torch


def produce(name):
    with tensord.Client() as client:
        a = client.alloc(name, (4, 8), "f32")
        t = torch.from_dlpack(a)  # the loan's pages, writable
        torch.arange(32, dtype=torch.float32, out=t.view(-1))
        t.mul_(2)
        print(f"producer: published version {client.publish(a)}")


def consume(name):
    with tensord.Client() as client:
        arr = client.get(name, timeout=10)
        t = torch.from_dlpack(arr)  # the same pages, copy-on-write
        print(f"consumer: version {arr.version} sum {float(t.sum()):g} "
              f"shape {tuple(t.shape)}")
        t.zero_()  # private to this tensor
        again = client.get(name)
        print(f"consumer: after zeroing my tensor: mine {float(t.sum()):g}"
              f", the daemon's {float(again.sum()):g}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--produce":
        produce(sys.argv[2])
    elif len(sys.argv) == 2:
        r = subprocess.run([sys.executable, __file__, "--produce",
                            sys.argv[1]])
        if r.returncode:
            sys.exit(r.returncode)
        consume(sys.argv[1])
    else:
        sys.exit(f"usage: {sys.argv[0]} NAME")
