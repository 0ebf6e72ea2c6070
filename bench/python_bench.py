#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Python handoff benchmark: the tensord binding against a socket copy.

    PYTHONPATH=build/python bench/python_bench.py [--socket PATH]
        [--sizes 64,1M,64M] [--seconds S] [--touch]

Methods, per size (one line each, median of rounds, µs per operation):

  get       Client.get() + release() of a published tensor: a request to
            the daemon, a lease, a read-only numpy view of the pages.
  ring      Ring.acquire() + publish() in this process and
            Subscription.next() + release(): one handoff through a ring.
  socket    the baseline: ask a server process for SIZE bytes over an
            AF_UNIX stream socket, recv_into() a buffer, numpy.frombuffer.

Prints `ratio socket/get` and `ratio socket/ring`: how many times faster
the binding hands SIZE bytes over than copying them through a socket.
By default nobody touches the payload after the handoff (the socket has
copied it by then, the binding has not: that is the point); --touch
makes every method read every byte once (a XOR over uint64 words).
Needs a running tensord ($TENSORD_SOCKET or --socket).
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy as np
import tensord


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].isalpha() else int(s)


def touch(a):
    b = a.reshape(-1).view(np.uint8)
    n = b.size // 8 * 8
    return int(np.bitwise_xor.reduce(b[:n].view(np.uint64))) if n else 0


def timed(fn, seconds):
    """Median µs per call over rounds of at least `seconds` / 5."""
    fn()  # warm up
    n, t = 1, 0.0
    while True:  # calls per round: at least 1/5 of the budget
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        if t >= seconds / 5 or n >= 1 << 20:
            break
        n *= 2
    rounds = [t / n]
    for _ in range(4):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t0) / n)
    return statistics.median(rounds) * 1e6


SERVER = r"""
import socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
size = int(sys.argv[2])
buf = bytes(range(256)) * (size // 256) + bytes(size % 256)
while s.recv(1):
    s.sendall(buf)
"""


def socket_method(size, seconds, do_touch):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    srv = subprocess.Popen([sys.executable, "-c", SERVER,
                            str(b.fileno()), str(size)],
                           pass_fds=[b.fileno()])
    b.close()
    buf = bytearray(size)
    view = memoryview(buf)

    def once():
        a.send(b"g")
        got = 0
        while got < size:
            got += a.recv_into(view[got:], size - got)
        arr = np.frombuffer(buf, dtype=np.uint8)
        if do_touch:
            touch(arr)

    try:
        return timed(once, seconds)
    finally:
        a.close()
        srv.wait()


def get_method(client, size, seconds, do_touch):
    name = f"bench/py/{size}"
    w = client.alloc(name, (size,), "u8")
    w[:] = 1
    client.publish(w)

    def once():
        a = client.get(name)
        if do_touch:
            touch(a)
        a.release()

    try:
        return timed(once, seconds)
    finally:
        client.rm(name)


def ring_method(client, size, seconds, do_touch):
    name = f"bench/py/ring{size}"
    ring = client.ring_create(name, (size,), "u8", slots=4)
    sub = client.subscribe(name)

    def once():
        slot = ring.acquire()
        del slot
        ring.publish()
        v = sub.next()
        if do_touch:
            touch(v)
        sub.release()

    try:
        return timed(once, seconds)
    finally:
        sub.close()
        ring.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket")
    ap.add_argument("--sizes", default="64,1M,64M")
    ap.add_argument("--seconds", type=float, default=1.0,
                    help="time budget per method and size")
    ap.add_argument("--touch", action="store_true")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    print(f"# python {sys.version.split()[0]}, numpy {np.__version__}, "
          f"{os.cpu_count()} cpus, touch={args.touch}")
    print(f"{'size':>10} {'get us':>10} {'ring us':>10} {'socket us':>10}"
          f" {'socket/get':>11} {'socket/ring':>12}")
    with tensord.Client(args.socket) as client:
        for size in sizes:
            g = get_method(client, size, args.seconds, args.touch)
            r = ring_method(client, size, args.seconds, args.touch)
            s = socket_method(size, args.seconds, args.touch)
            print(f"{size:>10} {g:>10.2f} {r:>10.2f} {s:>10.2f}"
                  f" {s / g:>10.2f}x {s / r:>11.2f}x", flush=True)


if __name__ == "__main__":
    main()
