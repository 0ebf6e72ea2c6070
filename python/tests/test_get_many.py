# SPDX-License-Identifier: MIT
"""get_many(names): the latest version of several names leased at one
instant, and publish_many(arrays): several alloc()s published as one
step (docs/protocol.md §6.10). A reader thread checks that it never sees
an image with the label of another step."""
import errno
import json
import os
import subprocess
import threading
import time

import numpy as np
import pytest
import tensord

SIZE = 64


def publish_pair(c, step):
    """Two loans of SIZE bytes, each byte `step`, as pair/a and pair/b
    in one publish_many: their versions."""
    a = c.alloc("pair/a", (SIZE,), "u8")
    b = c.alloc("pair/b", (SIZE,), "u8")
    a[:] = step
    b[:] = step
    return c.publish_many([a, b])


def test_get_many_reads_names_together_and_all_or_none(daemon, client):
    client.put("gm/x", np.full(8, 3, np.uint8))
    client.put("gm/y", np.full(4, 4, np.uint16))
    x, y = client.get_many(["gm/x", "gm/y"])
    assert x.tolist() == [3] * 8 and y.tolist() == [4] * 4
    with pytest.raises(tensord.NotFound) as e:
        client.get_many(("gm/x", "gm/none"))
    assert e.value.errno == errno.ENOENT
    assert "element 1" in str(e.value)
    del e
    with pytest.raises(ValueError):
        client.get_many([])
    with pytest.raises(TypeError):
        client.get_many(7)


def test_get_many_never_pairs_two_steps(daemon, client):
    producer = tensord.Client(daemon.sock)
    va, vb = publish_pair(producer, 0)
    assert client.stat("pair/a").version == va
    assert client.stat("pair/b").version == vb
    done = threading.Event()
    seen = {"reads": 0, "mixed": 0, "steps": set()}

    def reader():
        while not done.is_set():
            a, b = client.get_many(["pair/a", "pair/b"])
            seen["reads"] += 1
            seen["mixed"] += int(a[0]) != int(b[0])
            seen["steps"].add(int(a[0]))
            del a, b

    th = threading.Thread(target=reader)
    th.start()
    try:
        for step in range(1, 400):
            publish_pair(producer, step % 256)
    finally:
        done.set()
        th.join()
        producer.close()
    assert seen["mixed"] == 0, seen
    assert len(seen["steps"]) > 1, seen


def test_publish_many_metadata_and_its_refusals(daemon, client):
    a = client.alloc("pm/a", (4,), "u8")
    b = client.alloc("pm/b", (2,), "f32")
    a[:] = 7
    b[:] = 1.5
    va, vb = client.publish_many((a, b), metadata=[b"ma", None], pin=True)
    x, y = client.get_many(["pm/a", "pm/b"])
    assert (x.version, y.version) == (va, vb) == (a.version, b.version)
    assert x.metadata == b"ma" and y.metadata == b""
    assert x.tolist() == [7] * 4 and y.tolist() == [1.5] * 2
    assert client.stat("pm/a").flags & tensord.ENTRY_PIN
    del x, y
    # the daemon's refusal of one element: nothing published, every
    # loan consumed, the error names the element
    ring = client.ring_create("pm/ring", (4,), "u8", slots=2)
    c = client.alloc("pm/c", (4,), "u8")
    d = client.alloc("pm/ring", (4,), "u8")
    with pytest.raises(tensord.Error) as e:
        client.publish_many([c, d])
    assert e.value.errno == errno.EEXIST and "element 1" in str(e.value)
    assert "pm/ring" in str(e.value)
    del e
    with pytest.raises(tensord.NotFound):
        client.stat("pm/c")
    for used in (c, d):
        with pytest.raises(ValueError, match="already published"):
            client.publish(used)
    # the library's: the same name twice, as a tensord.Error too
    c = client.alloc("pm/c", (4,), "u8")
    d = client.alloc("pm/c", (4,), "u8")
    with pytest.raises(tensord.Error) as e:
        client.publish_many([c, d])
    assert e.value.errno == errno.EINVAL and "element 1" in str(e.value)
    del e
    with pytest.raises(tensord.NotFound):
        client.stat("pm/c")
    # the binding's own refusals of its arguments consume nothing
    c = client.alloc("pm/c", (4,), "u8")
    with pytest.raises(ValueError, match="element 1"):
        client.publish_many([c, client.get("pm/a")])
    with pytest.raises(TypeError):
        client.publish_many([c, np.zeros(4, np.uint8)])
    with pytest.raises(ValueError, match="one metadata per array"):
        client.publish_many([c], metadata=[b"x", b"y"])
    with pytest.raises(ValueError):
        client.publish_many([])
    (vc,) = client.publish_many([c])
    assert client.stat("pm/c").version == vc


def test_get_many_of_one_str_is_refused_not_read_as_letters(client):
    """A str is a sequence of one-letter names: get_many("ab") asked
    for "a" and "b" and gave them, a careless get_many(name) got
    tensors of other names (or NotFound naming a letter)."""
    client.put("a", np.zeros(1, np.uint8))
    client.put("b", np.ones(1, np.uint8))
    for names in ("ab", b"ab", bytearray(b"ab")):
        with pytest.raises(TypeError, match=r"get_many\(\[name\]\)"):
            client.get_many(names)
        with pytest.raises(TypeError, match="not one"):
            client.get_many(names, newer=0, timeout=0)
    assert client.stat("a").lease_count == 0
    x, y = client.get_many(["a", "b"])
    assert (x.name, y.name) == ("a", "b")


def test_publish_many_of_one_array_or_str_metadata_consumes_nothing(client):
    """One array (or Planes) is a sequence of its rows (planes), all
    the same loan: publish_many(a) sent it twice, the daemon refused a
    loan given twice and the loan was gone. A str as the metadata
    sequence gave each array one letter of it. Both are the caller's
    mistake, refused before anything is sent."""
    a = client.alloc("pm1/a", (3, 4), "u8")
    p = client.alloc("pm1/nv", (4, 4), "u8", format="NV12")
    for one in (a, a[:1], p):
        with pytest.raises(TypeError, match=r"publish_many\(\[a\]\)"):
            client.publish_many(one)
    b = client.alloc("pm1/b", (2,), "u8")
    c = client.alloc("pm1/c", (2,), "u8")
    for meta in ("xy", b"xy", bytearray(b"xy"), memoryview(b"xy")):
        with pytest.raises(TypeError, match="one per array"):
            client.publish_many([b, c], metadata=meta)
    for name in ("pm1/a", "pm1/nv", "pm1/b", "pm1/c"):
        with pytest.raises(tensord.NotFound):
            client.stat(name)
    # nothing consumed: each loan still publishes
    assert client.publish(a) > 0 and client.publish(p) > 0
    # an array of objects is a sequence of its objects
    seq = np.empty(2, dtype=object)
    seq[0], seq[1] = b, c
    vb, vc = client.publish_many(seq, metadata=[b"x", "y"])
    x, y = client.get_many(["pm1/b", "pm1/c"])
    assert (x.metadata, y.metadata) == (b"x", b"y")


# ---- get_many(names, newer=, timeout=): the next step, waited for ----

def status_sum(daemon, key):
    """A figure of every client of the daemon, summed (STATUS, through
    `tensorctl status --json`)."""
    out = subprocess.run(
        [os.path.join(os.environ["TD_BUILD_ROOT"], "tools", "tensorctl"),
         "--socket", daemon.sock, "--json", "status"],
        check=True, capture_output=True, text=True).stdout
    return sum(c[key] for c in json.loads(out)["clients"])


def until(fn, want):
    """fn() until it is want: a bounded wait (a hang guard) for what
    another thread or the daemon does on its own time."""
    for _ in range(2000):
        got = fn()
        if got == want:
            return got
        time.sleep(0.005)
    return fn()


def test_get_many_newer_waits_for_the_next_step_whole(daemon, client):
    producer = tensord.Client(daemon.sock)
    va, vb = publish_pair(producer, 1)
    # a version newer than `newer` is there: at once
    a, b = client.get_many(["pair/a", "pair/b"], newer=va - 1, timeout=0)
    assert (a.version, b.version) == (va, vb)
    del a, b
    got = {}

    def reader():
        with tensord.Client(daemon.sock) as c:
            x, y = c.get_many(["pair/a", "pair/b"], newer=va, timeout=60)
            got["v"] = (x.version, y.version)
            got["bytes"] = (int(x[0]), int(y[0]))
            del x, y

    th = threading.Thread(target=reader)
    th.start()
    try:
        assert until(lambda: status_sum(daemon, "waiters"), 1) == 1
        # parked, it holds no lease
        assert status_sum(daemon, "leases") == 0
        step = publish_pair(producer, 2)
    finally:
        th.join()
        producer.close()
    assert got["v"] == step
    assert got["bytes"] == (2, 2)


def test_get_many_newer_times_out(daemon, client):
    va, _ = publish_pair(client, 1)
    for to in (0, 0.02):
        with pytest.raises(tensord.Timeout) as e:
            client.get_many(["pair/a", "pair/b"], newer=va, timeout=to)
        assert e.value.errno == errno.ETIMEDOUT
        assert 'no version of "pair/a" newer than' in str(e.value)
        del e
    assert until(lambda: status_sum(daemon, "waiters"), 0) == 0
    # timeout alone: names[0] with any version
    a, b = client.get_many(["pair/a", "pair/b"], timeout=0)
    assert a.version == va
    del a, b
    with pytest.raises(TypeError):
        client.get_many(["pair/a"], newer=1.5)
    with pytest.raises(ValueError):
        client.get_many(["pair/a"], newer=1, timeout=-1)


def test_get_many_newer_sees_a_delete_between_two_slices(daemon, client):
    """The wait is GET_MANYs of 0.1 s at most; Python's signal handlers
    run between two of them. A DELETE made there, when no request is
    parked for the daemon to end, must end the call all the same (it
    waited on to its timeout before)."""
    import signal

    va, _ = publish_pair(client, 1)
    other = tensord.Client(daemon.sock)
    done = {}

    def on_usr1(signum, frame):
        # runs in the main thread between two slices of get_many()
        other.rm("pair/b")
        done["rm"] = True

    old = signal.signal(signal.SIGUSR1, on_usr1)
    try:
        def poke():
            until(lambda: status_sum(daemon, "waiters"), 1)
            os.kill(os.getpid(), signal.SIGUSR1)

        th = threading.Thread(target=poke)
        th.start()
        try:
            with pytest.raises(tensord.NotFound) as e:
                client.get_many(["pair/a", "pair/b"], newer=va, timeout=20)
        finally:
            th.join()
    finally:
        signal.signal(signal.SIGUSR1, old)
        other.close()
    assert done.get("rm")
    assert e.value.errno == errno.ENOENT
    assert "element 1" in str(e.value) and "pair/b" in str(e.value), e.value
    assert "deleted while the request waited" in str(e.value), e.value
    assert until(lambda: status_sum(daemon, "waiters"), 0) == 0


def test_get_many_newer_ends_when_a_name_is_deleted(daemon, client):
    va, _ = publish_pair(client, 1)
    err = {}

    def reader():
        with tensord.Client(daemon.sock) as c:
            try:
                c.get_many(["pair/a", "pair/b"], newer=va, timeout=60)
            except tensord.Error as ex:
                err["errno"], err["msg"] = ex.errno, str(ex)

    th = threading.Thread(target=reader)
    th.start()
    try:
        assert until(lambda: status_sum(daemon, "waiters"), 1) == 1
        client.rm("pair/b")
    finally:
        th.join()
    assert err["errno"] == errno.ENOENT, err
    assert "deleted while the request waited" in err["msg"], err
    assert until(lambda: status_sum(daemon, "waiters"), 0) == 0
