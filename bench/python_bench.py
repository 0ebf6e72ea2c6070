#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Python handoff benchmark: the tensord binding against a socket copy.

    PYTHONPATH=build/python bench/python_bench.py [--socket PATH]
        [--sizes 64,1M,64M] [--seconds S] [--touch] [--write]

Methods, per size (one line each, median of rounds, µs per operation):

  get       Client.get() + release() of a published tensor: a request to
            the daemon, a lease, a read-only numpy view of the pages.
  ring      Ring.acquire() + publish() in this process and
            Subscription.next() + release(): one handoff through a ring.
  socket    the baseline: ask a server process for SIZE bytes over an
            AF_UNIX stream socket, recv_into() a buffer, numpy.frombuffer.

Prints `ratio socket/get` and `ratio socket/ring`: how many times faster
the binding hands SIZE bytes over than copying them through a socket.

Then the cross-process handoff ("data loader -> trainer" in two Python
processes), ping-pong, µs per handoff (median of rounds). The producer
(this process) writes a stamp (an int64 at byte 0) and hands SIZE bytes
over; a consumer process (forked) takes them, reads the stamp, lets go
and acks with that stamp over a socketpair (every method the same ack):

  follow     producer: alloc(stream=True), write, publish(); consumer:
             Client.follow(name) + Follow.next(), release().
  nowait     follow, the producer's publish(wait=False): it does not
             wait for the daemon's answer (the follower took the
             version already).
  shared     follow, the producer's alloc(private=False): publish()
             leaves the loan's pages shared and its array read-only, so
             the next loan of the buffer reuses the mapping (no fresh
             mapping, page faults or remap a version).
  put        producer: put(name, array) of an array it has (one copy
             into a fresh loan, a new buffer a version); consumer as
             follow.
  sput       put(name, array, stream=True): the copy goes into the
             name's stream loan, kept mapped.
  newer      the same producer as follow; consumer: get(name,
             newer_than=last), release().
  ring       the fast path: Ring.acquire(), write, publish();
             consumer: subscribe(name) + Subscription.next(), release()
             (no message to the daemon per handoff).
  shm+queue  multiprocessing.shared_memory written in place, the stamp
             through a multiprocessing.Queue as the notification.
  shm+pipe   the same with os.write/os.read of 8 bytes on a pipe.
  pickle     the array itself through a multiprocessing.Queue (pickled:
             copied through a pipe, unpickled).

Ratios: each other method's µs over follow's (over the first of
--methods). --no-xproc skips this part, --xproc-only runs only it.
By default nobody touches the payload after the handoff (the socket has
copied it by then, the binding has not: that is the point); --touch
makes every method read every byte once (a XOR over uint64 words);
--write makes every producer write every byte before the stamp (a data
loader filling its batch), where the first is the stamp alone.
Needs a running tensord ($TENSORD_SOCKET or --socket).
"""
import argparse
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy as np
import tensord
from multiprocessing import shared_memory


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


# ---- cross-process handoff: a producer (this process), a consumer
# process, ping-pong; the ack is the same for every method: the stamp
# read, 8 bytes back over a socketpair.

STOP = -1
ACK = 8


def stamp_of(a):
    return int(a[:8].view(np.int64)[0])


def consumer_main(method, sock, size, do_touch, ack, note):
    """The consumer process: take each handoff, read its stamp, let go,
    ack with the stamp; ends at STOP."""
    def send(stamp):
        ack.sendall(stamp.to_bytes(ACK, "little", signed=True))

    if method in ("follow", "nowait", "newer", "shared", "put", "sput"):
        c = tensord.Client(sock)
        name = note
        f = c.follow(name) if method != "newer" else None
        last = 0
        send(0)  # ready
        while True:
            if f is not None:
                x = f.next(timeout=30)
            else:
                x = c.get(name, newer_than=last, timeout=30)
                last = x.version
            st = stamp_of(x)
            if do_touch:
                touch(x)
            x.release()
            del x
            send(st)
            if st == STOP:
                break
        if f is not None:
            f.close()
        c.close()
        return
    if method == "ring":
        c = tensord.Client(sock)
        sub = c.subscribe(note, timeout=30)
        send(0)
        while True:
            x = sub.next(timeout=30)
            st = stamp_of(x)
            if do_touch:
                touch(x)
            del x
            sub.release()
            send(st)
            if st == STOP:
                break
        sub.close()
        c.close()
        return
    if method in ("shm+queue", "shm+pipe"):
        # the parent's mapping, inherited at the fork (attaching by name
        # would register the segment with the resource tracker again)
        buf, q = note
        send(0)
        while True:
            if method == "shm+queue":
                q.get()
            else:
                os.read(q, ACK)
            st = stamp_of(buf)
            if do_touch:
                touch(buf)
            send(st)
            if st == STOP:
                break
        return
    q = note  # pickle
    send(0)
    while True:
        x = q.get()
        st = stamp_of(x)
        if do_touch:
            touch(x)
        del x
        send(st)
        if st == STOP:
            break


def recv_ack(ack):
    b = b""
    while len(b) < ACK:
        got = ack.recv(ACK - len(b))
        if not got:
            raise RuntimeError("the consumer process went away")
        b += got
    return int.from_bytes(b, "little", signed=True)


def xproc_method(method, sock, size, seconds, do_touch, ctx,
                 do_write=False):
    """µs per handoff of one method at one size (median of rounds)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    client = shm = wfd = rfd = ring = None
    stamp = [0]
    if method == "ring":
        client = tensord.Client(sock)
        note = f"bench/py/x/ring/{size}"
        ring = client.ring_create(note, (size,), "u8", slots=4)

        def hand(st):
            w = ring.acquire(timeout=30)
            if do_write:
                w[:] = st & 255
            w[:8].view(np.int64)[0] = st
            del w
            ring.publish()
    elif method in ("put", "sput"):
        client = tensord.Client(sock)
        note = f"bench/py/x/{method}/{size}"
        try:
            client.rm(note)
        except tensord.NotFound:
            pass
        src = np.zeros((size,), np.uint8)
        kw = {"stream": True} if method == "sput" else {}

        def hand(st):
            if do_write:
                src[:] = st & 255
            src[:8].view(np.int64)[0] = st
            client.put(note, src, **kw)
    elif method in ("follow", "nowait", "newer", "shared"):
        client = tensord.Client(sock)
        wait = method != "nowait"
        # (a binding before alloc(private=) has no keyword)
        kw = {"private": False} if method == "shared" else {}
        note = f"bench/py/x/{method}/{size}"
        try:  # the consumer takes the first version it finds: ours
            client.rm(note)
        except tensord.NotFound:
            pass

        def hand(st):
            w = client.alloc(note, (size,), "u8", stream=True, **kw)
            if do_write:
                w[:] = st & 255
            w[:8].view(np.int64)[0] = st
            if wait:  # (a binding before publish(wait=) has no keyword)
                client.publish(w)
            else:
                client.publish(w, wait=False)
    elif method in ("shm+queue", "shm+pipe"):
        shm = shared_memory.SharedMemory(create=True, size=size)
        buf = np.ndarray((size,), np.uint8, buffer=shm.buf)
        if method == "shm+queue":
            q = ctx.Queue()
            note = (buf, q)

            def hand(st):
                if do_write:
                    buf[:] = st & 255
                buf[:8].view(np.int64)[0] = st
                q.put(st)
        else:
            rfd, wfd = os.pipe()
            note = (buf, rfd)

            def hand(st):
                if do_write:
                    buf[:] = st & 255
                buf[:8].view(np.int64)[0] = st
                os.write(wfd, st.to_bytes(ACK, "little", signed=True))
    else:
        q = ctx.Queue()
        note = q
        arr = np.ones((size,), np.uint8)

        def hand(st):
            if do_write:
                arr[:] = st & 255
            arr[:8].view(np.int64)[0] = st
            q.put(arr)

    proc = ctx.Process(target=consumer_main,
                       args=(method, sock, size, do_touch, b, note))
    proc.start()
    b.close()

    def once():
        stamp[0] += 1
        hand(stamp[0])
        got = recv_ack(a)
        if got != stamp[0]:
            raise RuntimeError(f"{method}: stamp {got}, "
                               f"{stamp[0]} expected")

    try:
        if recv_ack(a) != 0:
            raise RuntimeError(f"{method}: the consumer did not start")
        us = timed(once, seconds)
        hand(STOP)
        if recv_ack(a) != STOP:
            raise RuntimeError(f"{method}: no ack of the end")
        return us
    finally:
        a.close()
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
            proc.join()
        if ring is not None:
            ring.close()
        elif client is not None:
            try:
                client.rm(note)
            except tensord.NotFound:
                pass  # (never published: the failure above says why)
        if client is not None:
            client.close()
        if shm is not None:
            del buf
            shm.close()
            shm.unlink()
        for fd in (rfd, wfd):
            if fd is not None:
                os.close(fd)


XMETHODS = ("follow", "nowait", "shared", "put", "sput", "newer", "ring", "shm+queue", "shm+pipe",
            "pickle")


def xproc_table(sock, sizes, seconds, do_touch, methods=XMETHODS,
                do_write=False):
    # fork: the consumer starts at once; it makes its own Client
    # (docs/python.md: a Client belongs to the process that connected it)
    ctx = multiprocessing.get_context("fork")
    print(f"# cross-process handoff, µs per handoff (ack over a "
          f"socketpair), touch={do_touch}, write={do_write}")
    print(f"{'size':>10}" + "".join(f" {m:>10}" for m in methods)
          + "".join(f" {m + '/' + methods[0]:>17}" for m in methods[1:]))
    for size in sizes:
        us = [xproc_method(m, sock, size, seconds, do_touch, ctx, do_write)
              for m in methods]
        print(f"{size:>10}" + "".join(f" {u:>10.2f}" for u in us)
              + "".join(f" {u / us[0]:>16.2f}x" for u in us[1:]),
              flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket")
    ap.add_argument("--sizes", default="64,1M,64M")
    ap.add_argument("--seconds", type=float, default=1.0,
                    help="time budget per method and size")
    ap.add_argument("--touch", action="store_true")
    ap.add_argument("--write", action="store_true",
                    help="cross-process producers write every byte")
    ap.add_argument("--no-xproc", action="store_true",
                    help="skip the cross-process handoff")
    ap.add_argument("--xproc-only", action="store_true",
                    help="only the cross-process handoff")
    ap.add_argument("--methods", default=",".join(XMETHODS),
                    help="cross-process methods, the first the one "
                    "the ratios divide by")
    args = ap.parse_args()
    methods = tuple(args.methods.split(","))
    if not methods or set(methods) - set(XMETHODS):
        ap.error(f"--methods: of {','.join(XMETHODS)}")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    print(f"# python {sys.version.split()[0]}, numpy {np.__version__}, "
          f"{os.cpu_count()} cpus, touch={args.touch}")
    if not args.xproc_only:
        in_process_table(args, sizes)
    if not args.no_xproc:
        if not args.xproc_only:
            print()
        xproc_table(args.socket, sizes, args.seconds, args.touch, methods,
                    args.write)


def in_process_table(args, sizes):
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
