# SPDX-License-Identifier: MIT
"""Client.follow(): each new version of a name as get() gives it, taken
from the daemon's shared memory without a message once the stream is
warm (docs/fastpath.md, "Following a name"; docs/python.md, "Following
a name"). The producer is a second client of this process unless a
fork is the point."""
import errno
import gc
import os
import signal
import threading
import time

import numpy as np
import pytest
import tensord

from conftest import (InThread, child_refuses, fd_count, memfd_map_count,
                      mapping_of, need_torch, wait_child)

N = 16 * 1024  # bytes per version


@pytest.fixture
def prod(daemon):
    with tensord.Client(daemon.sock) as c:
        yield c


def publish(prod, name, b, n=N, meta=None):
    """A TD_ALLOC_STREAM version of n bytes, all b: (version, inode)."""
    w = prod.alloc(name, (n,), "u8", stream=True)
    w[:] = b
    ino = os.fstat(w.lease.fileno()).st_ino
    return prod.publish(w, metadata=meta), ino


def warm(prod, f, name, rounds=4):
    """The follower maps the buffers the stream alternates."""
    for i in range(rounds):
        v, _ = publish(prod, name, i)
        t = f.next(5)
        assert t.version == v
        t.release()


def holding(client, prod, name, b):
    """A warm follow of name holding a new version of bytes b: the
    follow, that version, the tensor."""
    f = client.follow(name)
    warm(prod, f, name)
    v, _ = publish(prod, name, b)
    t = f.next(5)
    assert t.version == v and (t == b).all()
    return f, v, t


@pytest.fixture
def other(daemon):
    """A third client, which asks the daemon which versions it keeps."""
    with tensord.Client(daemon.sock) as c:
        yield c


def test_values_versions_and_the_newest_first(client, prod):
    v1 = prod.put("fo/v", np.arange(12, dtype=np.float32).reshape(3, 4),
                  metadata=b"one")
    with client.follow("fo/v") as f:
        assert isinstance(f, tensord.Follow) and f.name == "fo/v"
        a = f.next(timeout=0)  # the current version first
        assert type(a) is tensord.Array
        assert a.version == v1 and a.name == "fo/v" and a.metadata == b"one"
        assert a.dtype == np.float32 and a.shape == (3, 4)
        np.testing.assert_array_equal(a, np.arange(12).reshape(3, 4))
        assert a.flags.writeable is False
        with pytest.raises(ValueError):
            a[0, 0] = 1
        for k in (2, 3, 4):
            v = prod.put("fo/v", np.full((3, 4), k, np.float32))
        b = f.next(timeout=0)  # those in between are skipped
        assert b.version == v and (b == 4).all()
        # next() gave the previous tensor back; its views stay readable
        assert not a.lease.held and b.lease.held
        assert a[2, 3] == 11
        prod.rm("fo/v")  # a deleted name is followed on
        v = prod.put("fo/v", np.full((3, 4), 5, np.float32))
        c = f.next(5)
        assert c.version == v and (c == 5).all()
    assert f.closed
    with pytest.raises(ValueError, match="closed"):
        f.next(0)
    assert (c == 5).all()  # the tensor outlives the follow


def test_timeouts_raise_tensord_timeout(client, prod):
    f = client.follow("fo/t")
    for call in (lambda: f.next(0), lambda: f.next(timeout=0),
                 lambda: f.next(0.05), lambda: f.next(timeout=0.05)):
        with pytest.raises(tensord.Timeout) as ei:
            call()
        assert ei.value.errno == errno.ETIMEDOUT
        assert "fo/t" in ei.value.reason
    with pytest.raises(TypeError):
        f.next(wait=1)
    with pytest.raises(TypeError):
        f.next("1")
    with pytest.raises(ValueError):
        f.next(-1)
    v, _ = publish(prod, "fo/t", 3)
    assert f.next(timeout=0).version == v


def test_next_waits_with_the_gil_released(client, prod):
    f = client.follow("fo/gil")
    # if next() held the GIL this thread could not publish before the
    # waiter's own timeout: the waiter would raise Timeout
    waiter = InThread(lambda: f.next(timeout=20))
    time.sleep(0.2)
    v, _ = publish(prod, "fo/gil", 7)
    got = waiter.finish().result
    assert waiter.error is None, waiter.error
    assert got.version == v and (got == 7).all()
    # a second thread is refused while one waits: until the waiter is
    # inside next() this thread times out, then it is refused (a sleep
    # would not prove the waiter got there on a loaded machine)
    waiter = InThread(lambda: f.next(timeout=20))
    refused = None
    for _ in range(10000):
        try:
            f.next(0)
        except RuntimeError as e:
            refused = e
            break
        except tensord.Timeout:
            time.sleep(0.001)
    assert refused is not None and "another thread" in str(refused)
    with pytest.raises(RuntimeError):
        f.close()
    publish(prod, "fo/gil", 8)
    assert waiter.finish().result.version == v + 1


def test_a_signal_handler_interrupts_a_wait_without_deadline(client, prod):
    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted(len(published))

    def watchdog():
        # a wait deaf to signals returns only for a version: the
        # handler runs after one (the test fails rather than hangs)
        while not done.wait(15):
            publish(prod, "fo/sig", 1)
            published.append(1)

    f = client.follow("fo/sig")
    done, published = threading.Event(), []
    dog = InThread(watchdog)
    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Interrupted) as ei:
            f.next()  # forever, but for the handler
        assert ei.value.args == (0,), "the handler waited for a version"
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Interrupted) as ei:
            for _ in f:
                pass
        assert ei.value.args == (0,), "the handler waited for a version"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        done.set()
        dog.finish()
    with pytest.raises(tensord.Timeout):
        f.next(0)  # still usable


def test_iteration_gives_each_newest_version(client, prod):
    f = client.follow("fo/it")
    got = []
    for k in range(5):
        publish(prod, "fo/it", 10 + k)
        t = next(iter(f))
        got.append((t.version, int(t[0]), int(t[-1])))
    assert got == [(k + 1, 10 + k, 10 + k) for k in range(5)]
    # a for loop holds the previous tensor while it asks for the next
    seen = []
    publish(prod, "fo/it", 20)
    for t in f:
        seen.append(int(t[0]))
        if len(seen) == 3:
            break
        publish(prod, "fo/it", 21 + len(seen) - 1)
    assert seen == [20, 21, 22]


def test_a_followed_tensor_is_the_producers_buffer(client, prod):
    f = client.follow("fo/zc")
    warm(prod, f, "fo/zc")
    v, ino = publish(prod, "fo/zc", 0x5a, meta=b"zc")
    t = f.next(5)
    assert t.version == v and t.metadata == b"zc"
    assert (t == 0x5a).all()
    m = mapping_of(t.ctypes.data)
    # the very file the producer wrote, read-only, not a copy
    assert m is not None and m["inode"] == ino, m
    assert "memfd:" in m["path"] and "w" not in m["perms"]
    assert os.fstat(t.lease.fileno()).st_ino == ino
    assert m["offset"] + (t.ctypes.data - m["lo"]) == 0
    # DLPack too: a copy-on-write mapping of the same file
    d = np.from_dlpack(t)
    dm = mapping_of(d.ctypes.data)
    assert dm["inode"] == ino and dm["perms"].endswith("p")
    np.testing.assert_array_equal(d, t)


def test_a_publish_that_does_not_wait_is_followed_and_refusals_come_later(
        client, prod):
    # publish(wait=False): td_client_publish_alloc_nowait, None back;
    # the follower takes each version all the same
    with client.follow("fo/nw") as f:
        last = 0
        for i in range(6):
            w = prod.alloc("fo/nw", (N,), "u8", stream=True)
            w[:] = i
            assert prod.publish(w, metadata=b"nw", wait=False) is None
            t = f.next(5)
            assert t.version > last and t.metadata == b"nw"
            assert (t == i).all()
            last = t.version
            del t
    assert prod.stat("fo/nw").version == last
    # a refused one (a ring has the name) raises from the next alloc(),
    # once: the call after it goes on
    ring = client.ring_create("fo/nw-ring", (64,), "u8", slots=2)
    w = prod.alloc("fo/nw-ring", (64,), "u8")
    assert prod.publish(w, wait=False) is None
    with pytest.raises(tensord.Error) as ei:
        prod.alloc("fo/nw-other", (64,), "u8")
    assert ei.value.errno == errno.EEXIST and "ring" in ei.value.reason
    w = prod.alloc("fo/nw-other", (64,), "u8")
    assert prod.publish(w) > 0
    ring.close()


@pytest.mark.parametrize("path", ["pidfd", "scm"])
def test_a_warm_stream_sends_the_daemon_nothing_from_the_follower(
        daemon, path, monkeypatch):
    # RING_STAT's count of every datagram the daemon received: per warm
    # handoff only the producer's PUBLISH (which lends the next loan)
    monkeypatch.setenv("TENSORD_IMPORT", path)
    with tensord.Client(daemon.sock) as prod, \
            tensord.Client(daemon.sock) as cons:
        assert cons.info()["path_out"] == path
        counter = prod.ring_create("fo/counter", (64,), "u8")
        f = cons.follow("fo/x")
        before = fds = maps = None
        for i in range(104):
            b = (i * 5 + 1) & 0xff
            v, _ = publish(prod, "fo/x", b)
            t = f.next(5)
            assert t.version == v and (t == b).all(), i
            del t
            if i == 3:
                # earlier tests' cyclic garbage may hold fds: a gen-2
                # collection in the loop would close them and count as
                # this stream's (seen with test_fences.py before it)
                gc.collect()
                fds, maps = fd_count(), memfd_map_count()
                before = cons.ring_stat("fo/counter")["daemon_requests"]
        after = cons.ring_stat("fo/counter")["daemon_requests"]
        # 100 PUBLISHes and the RING_STAT that read the count
        assert after - before == 101
        assert maps > 0  # the tensors' pages are mapped here
        assert fd_count() == fds and memfd_map_count() == maps
        f.close()
        counter.close()


@pytest.mark.parametrize("path", ["pidfd", "scm"])
def test_a_get_newer_than_loop_follows_by_itself(daemon, path, monkeypatch):
    # the plain loop, written the usual way: the array got last is still
    # bound while the next is asked for (docs/fastpath.md, "get_newer
    # rides a follow"); warm, per handoff only the producer's PUBLISH
    monkeypatch.setenv("TENSORD_IMPORT", path)
    with tensord.Client(daemon.sock) as prod, \
            tensord.Client(daemon.sock) as cons:
        counter = prod.ring_create("fo/gcounter", (64,), "u8")
        before = fds = maps = None
        t, last = None, 0
        for i in range(106):
            b = (i * 7 + 3) & 0xff
            v, _ = publish(prod, "fo/g", b)
            t = cons.get("fo/g", newer_than=last, timeout=5)
            assert t.version == v and (t == b).all(), i
            last = t.version
            if i == 5:
                fds, maps = fd_count(), memfd_map_count()
                # read on the consumer's connection: the daemon takes
                # the quiet RELEASE of a tensor got by GET (the warm-up's
                # last ones) before this, as it does every request of one
                # connection in order; the producer's connection is
                # another socket, which it may read first
                before = cons.ring_stat("fo/gcounter")["daemon_requests"]
        after = cons.ring_stat("fo/gcounter")["daemon_requests"]
        # 100 PUBLISHes and the RING_STAT that read the count
        assert after - before == 101
        assert maps > 0  # the tensors' pages are mapped here
        assert fd_count() == fds and memfd_map_count() == maps
        del t
        counter.close()


def test_the_hold_keeps_the_bytes_while_a_view_lives(client, prod, other):
    f, v1, t = holding(client, prod, "fo/h", 0xa1)
    view = t[100:200]
    del t
    gc.collect()
    # twenty newer versions go to other buffers: the held bytes stay
    for i in range(20):
        publish(prod, "fo/h", 0x10 + i)
    assert (view == 0xa1).all()
    assert view.lease.held
    with other.get("fo/h", version=v1) as g:  # the daemon keeps v1
        assert (g == 0xa1).all()
    # the last view dies: the hold ends, and the daemon lets v1 go at
    # the name's next change
    del view
    gc.collect()
    publish(prod, "fo/h", 0x77)
    with pytest.raises(tensord.NotFound):
        other.get("fo/h", version=v1)
    newest = f.next(5)
    assert (newest == 0x77).all()


def test_a_dlpack_export_keeps_the_hold_and_next_refuses(client, prod):
    f, _, t = holding(client, prod, "fo/dl", 0x31)
    d = np.from_dlpack(t[8:16])
    for i in range(10):
        publish(prod, "fo/dl", 0x40 + i)
    assert (d == 0x31).all()
    # giving the tensor back would let its buffer be rewritten under d
    for give_back in (lambda: f.next(0), f.release, t.release):
        with pytest.raises(tensord.Error, match="DLPack") as ei:
            give_back()
        assert ei.value.errno == errno.EBUSY
    del t
    gc.collect()
    assert (d == 0x31).all()
    del d
    gc.collect()
    latest = f.next(5)  # free again: the newest version
    assert (latest == 0x49).all()
    f.release()
    assert not latest.lease.held
    # a tensor given back has nothing to export any more
    with pytest.raises(BufferError, match="released"):
        latest.__dlpack__()


def test_a_closed_clients_follow_says_so_whatever_is_exported(daemon, prod):
    """After the client's close() the daemon ended the follow and its
    hold: next(), release() and the tensor's release() say what they say
    without an export, not EBUSY for a DLPack tensor still alive."""
    said = {}
    for export in (False, True):
        c = tensord.Client(daemon.sock)
        name = "fo/closed%d" % export
        f, _, t = holding(c, prod, name, 0x21)
        d = np.from_dlpack(t) if export else None
        c.close()
        for call in (lambda: f.next(0), f.release, t.release):
            try:
                call()
                said[export, len(said) % 3] = None
            except Exception as e:
                said[export, len(said) % 3] = (
                    type(e), getattr(e, "errno", None),
                    str(e).replace(name, "N"))
        if export:
            assert (d == 0x21).all()  # still mapped
        del d, t, f
        gc.collect()
    for i in range(3):
        assert said[True, i] == said[False, i], (i, said)
        assert said[True, i] is None or said[True, i][1] != errno.EBUSY


def test_torch_keeps_the_hold(client, prod):
    torch = need_torch()
    f = client.follow("fo/torch")
    warm(prod, f, "fo/torch")
    publish(prod, "fo/torch", 9)
    t = torch.from_dlpack(f.next(5))
    for i in range(6):
        publish(prod, "fo/torch", 50 + i)
    assert int(t.sum()) == 9 * N
    with pytest.raises(tensord.Error, match="DLPack"):
        f.next(0)
    del t
    gc.collect()
    assert int(f.next(0)[0]) == 55


def test_close_while_a_tensor_lives(client, prod, other):
    f, v1, t = holding(client, prod, "fo/c", 0xc1)
    f.close()
    f.close()  # idempotent
    assert f.closed
    with pytest.raises(ValueError, match="closed"):
        f.release()
    # the hold outlives the close: the version is kept, its bytes stay
    for i in range(6):
        publish(prod, "fo/c", i)
    assert (t == 0xc1).all() and t.lease.held
    other.get("fo/c", version=v1).release()
    del f
    gc.collect()
    assert (t == 0xc1).all()
    t.release()  # ends the follow in libtensord
    publish(prod, "fo/c", 0xc2)
    with pytest.raises(tensord.NotFound):
        other.get("fo/c", version=v1)


def test_a_client_closed_under_a_follow(client, prod):
    f = client.follow("fo/cc")
    publish(prod, "fo/cc", 4)
    t = f.next(5)
    client.close()
    assert (t == 4).all()
    with pytest.raises(tensord.Error) as ei:
        f.next(0)
    assert ei.value.errno == errno.EPIPE
    del t
    gc.collect()
    f.close()


def test_a_forked_child_cannot_use_the_parents_follow(client, prod, other):
    f, v1, t = holding(client, prod, "fo/fork", 7)
    publish(prod, "fo/fork", 8)
    # release() there gives nothing back: the hold is the parent's
    child_refuses(f.release, lambda: f.next(0), lambda: f.next(timeout=1),
                  lambda: next(iter(f)))
    # the parent's hold is still there: the daemon keeps v1
    for i in range(6):
        publish(prod, "fo/fork", 20 + i)
    assert (t == 7).all() and t.lease.held
    other.get("fo/fork", version=v1).release()
    nxt = f.next(5)  # and the child took nothing of the parent's
    assert (nxt == 25).all()


def test_multi_plane_names_come_as_planes(client, prod):
    f = client.follow("fo/nv12")
    p = prod.alloc("fo/nv12", (48, 64), "u8", strides=(80, 1),
                   format="NV12")
    y, uv = p
    y[:] = 16
    uv[:] = 128
    v = prod.publish(p)
    got = f.next(5)
    assert isinstance(got, tensord.Planes) and got.version == v
    gy, guv = got
    assert gy.shape == (48, 64) and guv.shape == (24, 64)
    assert (gy == 16).all() and (guv == 128).all()
    assert got.held
    del got, gy
    gc.collect()
    assert guv.lease.held  # any plane view keeps the hold
    f.release()
    assert not guv.lease.held


def test_refusals(client, prod):
    ring = prod.ring_create("fo/ring", (4,), "u8")
    with pytest.raises(tensord.Error) as ei:
        client.follow("fo/ring")
    assert ei.value.errno == errno.EINVAL and "ring" in ei.value.reason
    with pytest.raises(TypeError):
        client.follow(b"fo/x")
    with pytest.raises(ValueError):
        client.follow("x" * 5000)
    ring.close()
    client.close()
    with pytest.raises(ValueError, match="closed"):
        client.follow("fo/x")


def test_a_follow_made_before_a_ring_took_its_name_gives_none_of_it(
        client, prod):
    """follow() of a ring's name is refused published or not (above);
    a Follow made before the ring came gives none of the ring's versions
    and waits as for a name with none, until the ring ends and the name
    is a tensor's again (the docs said a follow of an unpublished ring
    waited and one of a published ring was refused)."""
    f = client.follow("fo/later-ring")
    ring = prod.ring_create("fo/later-ring", (4,), "u8")
    with pytest.raises(tensord.Timeout):
        f.next(timeout=0.05)
    s = ring.acquire()
    s[:] = 7
    del s
    ring.publish()
    with pytest.raises(tensord.Timeout):
        f.next(timeout=0.05)
    assert f.poll() is None
    ring.close()
    v = prod.put("fo/later-ring", np.full(4, 9, np.uint8))
    x = f.next(timeout=10)
    assert x.version == v and x.tolist() == [9] * 4
    del x
    f.close()


def readable(fd, timeout):
    import select
    return bool(select.select([fd], [], [], timeout)[0])


def test_poll_wakes_fileno_for_each_version(client, prod):
    """In an event loop: Follow.poll() takes without waiting; the
    daemon's wake-up of the follow makes Client.fileno() readable (no
    thread, no message), and a next() that slept wakes it on return so
    that the loop arms the waiter again."""
    fd = client.fileno()
    with client.follow("fo/poll") as f:
        assert f.poll() is None  # armed
        client.poll()
        assert not readable(fd, 0.05)
        for b in (5, 6, 7):
            v, _ = publish(prod, "fo/poll", b)
            assert readable(fd, 10), "fileno() was not woken"
            t = None
            for _ in range(100):  # bounded: a poll that never takes it
                client.poll()
                t = f.poll()
                if t is not None:
                    break
                assert readable(fd, 10)
            assert t is not None and t.version == v and (t == b).all()
            t.release()
        assert f.poll() is None  # armed again, the fd drained
        client.poll()
        assert not readable(fd, 0.05)
        th = InThread(lambda: f.next(10))
        time.sleep(0.2)  # asleep in next(): the daemon wakes its futex
        v, _ = publish(prod, "fo/poll", 8)
        t = th.finish().result
        assert t.version == v and (t == 8).all()
        assert readable(fd, 10), "next() did not wake fileno()"
        assert f.poll() is None


def test_an_asyncio_loop_follows_without_threads(daemon, client):
    """loop.add_reader(client.fileno()) and Follow.poll(): every version
    published (by another process) reaches the callback in order."""
    import asyncio

    got = []
    f = client.follow("fo/aio")
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the producer: 20 versions, a little apart
        code = 0
        try:
            os.close(go_w)
            # not before the loop waits: else the first poll below
            # may already find version 1
            os.read(go_r, 1)
            with tensord.Client(daemon.sock) as p:
                for i in range(1, 21):
                    time.sleep(0.01)
                    w = p.alloc("fo/aio", (64,), "u8", stream=True)
                    w[:] = i
                    p.publish(w)
        except BaseException:  # noqa: BLE001 (reported by the status)
            code = 1
        os._exit(code)

    async def main():
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def on_readable():
            client.poll()
            t = f.poll()
            while t is not None:
                got.append(int(t[0]))
                t.release()
                if got[-1] == 20 and not done.done():
                    done.set_result(None)
                t = f.poll()

        assert f.poll() is None  # arms the waiter before the loop waits
        loop.add_reader(client.fileno(), on_readable)
        os.write(go_w, b"g")
        try:
            await asyncio.wait_for(done, 60)
        finally:
            loop.remove_reader(client.fileno())

    os.close(go_r)
    try:
        asyncio.run(main())
    finally:
        os.close(go_w)
    status = wait_child(pid, "the producer process")
    assert status == 0
    assert got == sorted(set(got)) and got[-1] == 20
    f.close()


def test_a_child_closing_an_inherited_follow_leaves_the_parents_loop(
        client, prod):
    """A child of fork() shares the parent's Client.fileno() epoll set:
    its close of an inherited Follow or Subscription took their fds out
    of the parent's set, whose loop then never woke for them again."""
    f = client.follow("fo/kid")
    ring = prod.ring_create("fo/kidring", (4,), "u8")
    sub = client.subscribe("fo/kidring")
    assert f.poll() is None and sub.poll() is None  # wait by fd
    fd = client.fileno()
    pid = os.fork()
    if pid == 0:
        try:
            f.close()
            sub.close()
        finally:
            os._exit(0)
    assert os.WEXITSTATUS(wait_child(pid, "the child of fork()")) == 0
    v, _ = publish(prod, "fo/kid", 3, n=64)
    assert readable(fd, 10), "the follow's publish did not wake fileno()"
    assert f.poll().version == v
    s = ring.acquire()
    s[:] = 4
    del s
    v = ring.publish()
    assert readable(fd, 10), "the ring's publish did not wake fileno()"
    view = sub.poll()
    assert view is not None and view.version == v
    view.release()
    sub.close()
    ring.close()
    f.close()


def test_a_childs_client_poll_leaves_the_parents_wake_up(client, prod):
    """The eventfd that wakes Client.fileno() while Events wait is the
    parent's and the child's: the child's poll() read it, and the
    parent's loop missed the Events its queue still held."""
    w = client.watch("fo/kidev")
    other = client.watch("fo/kidother")
    prod.put("fo/kidev", np.zeros(2, np.uint8))
    prod.stat("fo/kidev")  # the event was sent before this reply
    client.stat("fo/kidev")  # and read by libtensord meanwhile
    with pytest.raises(tensord.Timeout):
        other.next(timeout=0)  # hands it to the binding's queue
    fd = client.fileno()
    assert readable(fd, 10)
    pid = os.fork()
    if pid == 0:
        try:
            try:
                client.poll()
            except tensord.Error:
                pass
        finally:
            os._exit(0)
    assert os.WEXITSTATUS(wait_child(pid, "the child of fork()")) == 0
    assert readable(fd, 0.2), "the child took the parent's wake-up"
    assert [e.name for e in client.poll()] == ["fo/kidev"]
    w.close()
    other.close()
