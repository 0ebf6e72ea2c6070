# SPDX-License-Identifier: MIT
"""Each program in examples/python runs as its docstring says."""
import os
import select
import subprocess
import sys

import numpy as np

from conftest import SOURCE, child_env, need_torch

EXAMPLES = os.path.join(SOURCE, "examples", "python")


def example(daemon, name, *args, timeout=120):
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, name),
                        *map(str, args)], env=child_env(daemon),
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.splitlines()


def test_producer_then_consumer(daemon, client):
    out = example(daemon, "producer.py", "demo/m", 3)
    assert out == [f"published demo/m version {v}" for v in (1, 2, 3)]
    out = example(daemon, "consumer.py", "demo/m", 2)
    # version index 2: 200 + 0..11, summed
    assert out == ["demo/m version 3 shape (3, 4) dtype f32 "
                   "metadata b'frame 2' sum 2466"]
    assert client.get("demo/m").tolist()[2] == [208.0, 209.0, 210.0, 211.0]


def test_consumer_times_out_cleanly(daemon):
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES,
                                                     "consumer.py"),
                        "none/x", "0", "0.05"], env=child_env(daemon),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "nothing newer" in r.stderr


def test_ring_pipeline(daemon):
    out = example(daemon, "ring_pipeline.py", "cam/ring", 200)
    assert len(out) == 1 and out[0].startswith("subscriber: ")
    assert out[0].endswith("last version 200")
    seen = int(out[0].split()[1])
    assert 1 <= seen <= 200


def test_nv12_planes(daemon):
    out = example(daemon, "nv12.py", "cam/nv12", 640, 480, 704)
    assert out == [
        "producer: NV12 640x480 pitch 704, version 1",
        "consumer: NV12 version 1, planes [(480, 640), (240, 640)] "
        "strides [(704, 1), (704, 1)]",
        "consumer: mean Y 16 U 128 V 64"]


def test_torch_handoff(daemon):
    need_torch()
    out = example(daemon, "torch_handoff.py", "th/x")
    assert out[1] == "consumer: version 1 sum 992 shape (4, 8)"
    assert out[2] == ("consumer: after zeroing my tensor: mine 0, "
                      "the daemon's 992")


def asyncio_watcher(daemon, *args):
    """asyncio_watcher.py started with args, once it said ready."""
    p = subprocess.Popen([sys.executable,
                          os.path.join(EXAMPLES, "asyncio_watcher.py"),
                          *args],
                         env=child_env(daemon), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        # bounded: an example that never gets ready fails the test
        assert select.select([p.stdout], [], [], 60)[0], \
            "asyncio_watcher.py did not say ready within 60 s"
        assert p.stdout.readline() == "ready\n"
    except BaseException:
        p.kill()
        p.wait()
        raise
    return p


def test_asyncio_watcher(daemon, client):
    ring = client.ring_create("aw/ring", (16,), "u8")
    p = asyncio_watcher(daemon, "aw/", "3", "aw/ring", "20")
    try:
        vs = [client.put("aw/t", np.zeros(2)) for _ in range(3)]
        for v in range(1, 21):
            s = ring.acquire()
            s[:] = 1
            del s
            assert ring.publish() == v
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    lines = out.splitlines()
    assert [ln for ln in lines if ln.startswith("event")] == [
        f"event published aw/t {v}" for v in vs]
    frames = [ln for ln in lines if ln.startswith("frame")]
    assert frames[-1] == "frame 20 sum 16"
    ring.close()


def test_asyncio_watcher_ends_when_the_daemon_goes_away(daemon):
    # a broken connection keeps Client.fileno() readable: the example's
    # reader, left registered, ran again at once for ever (asyncio
    # logging "Exception in callback" each time) instead of ending
    p = asyncio_watcher(daemon, "ag/", "3")
    try:
        daemon.kill()
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode != 0
    assert "Exception in callback" not in err, err[:2000]
    assert "tensord.Error" in err and "ECONNRESET" in err, err[-2000:]


def test_the_bench_script_reports_ratios(daemon):
    # a smoke run (tiny budget): it works and prints one row per size;
    # figures come from a real run (bench/README.md), not from here
    r = subprocess.run([sys.executable,
                        os.path.join(SOURCE, "bench", "python_bench.py"),
                        "--socket", daemon.sock, "--sizes", "64,64K",
                        "--seconds", "0.02", "--write"],
                       env=child_env(daemon),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    in_proc, xproc = r.stdout.split("\n\n")
    rows = [ln.split() for ln in in_proc.splitlines()[2:]]
    assert [row[0] for row in rows] == ["64", "65536"]
    for row in rows:
        assert all(float(x) > 0 for x in row[1:4])
        assert row[4].endswith("x") and row[5].endswith("x")
    # the cross-process handoff: methods, and each one's ratio to the
    # first (follow)
    head = xproc.splitlines()[1].split()
    k = sum(1 for h in head[1:] if "/" not in h)
    assert k >= 5 and len(head) == 2 * k
    rows = [ln.split() for ln in xproc.splitlines()[2:]]
    assert [row[0] for row in rows] == ["64", "65536"]
    for row in rows:
        assert len(row) == len(head)
        assert all(float(x) > 0 for x in row[1:k + 1])
        assert all(x.endswith("x") for x in row[k + 1:])
