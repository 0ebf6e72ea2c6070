# SPDX-License-Identifier: MIT
"""One Client shared by several threads (docs/python.md, "Blocking calls,
threads, asyncio"), and what a child of fork() finds of it when another
thread of the parent was inside a call at the fork."""
import errno
import os
import threading
import time

import numpy as np
import pytest
import tensord

from conftest import InThread, fd_count, wait_child

# a child that hangs is killed this much later and the test fails
CHILD_S = 20


def in_child(body):
    """Fork; body() runs in the child, which exits 0 when it returns, 1
    when it raises (its message printed). Asserts that in the parent."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            body()
            code = 0
        except BaseException as e:  # noqa: BLE001 (the child reports it)
            os.write(2, f"child: {type(e).__name__}: {e}\n".encode())
        finally:
            os._exit(code)
    status = wait_child(pid, "the child of fork() (a call hung)", CHILD_S)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, \
        f"the child failed (status {status:#x})"


def refuses(call):
    try:
        call()
    except tensord.Error as e:
        assert e.errno == errno.ECHILD, e
        return
    raise AssertionError(f"{call} did not raise ECHILD in the child")


def closes(client):
    """close() in the child closes the child's copy: fileno()'s fd goes."""
    fd = client.fileno()
    client.close()
    try:
        os.fstat(fd)
    except OSError as e:
        assert e.errno == errno.EBADF
        return
    raise AssertionError("close() in the child left the client open")


def test_a_child_forked_while_a_thread_waits_in_get_newer(client):
    # the first get(newer_than=) of a name waits holding libtensord's
    # handle mutex; the thread that held it at the fork is not in the
    # child, so a child that locked it again would hang for ever
    v = client.put("th/fork", np.arange(4.0))
    t = InThread(lambda: client.get("th/fork", newer_than=v, timeout=3))
    t.inside(0.3)

    def child():
        assert client.trim() >= 0
        refuses(lambda: client.stat("th/fork"))
        refuses(lambda: client.get("th/fork"))
        refuses(client.poll)
        closes(client)
    in_child(child)
    assert isinstance(t.finish().error, tensord.Timeout)
    assert client.get("th/fork").tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_child_forked_while_a_thread_polls(client):
    # poll() hands events over with the binding's deliver mutex held and
    # the GIL released: the fork lands there often
    w = client.watch("th/")
    stop = threading.Event()

    def poller():
        while not stop.is_set():
            client.poll()
    t = threading.Thread(target=poller, daemon=True)
    t.start()
    try:
        for _ in range(20):
            in_child(lambda: (refuses(client.poll),
                              refuses(lambda: w.next(timeout=0)),
                              closes(client)))
            time.sleep(0.01)
    finally:
        stop.set()
        t.join(CHILD_S)
    assert client.put("th/x", np.zeros(1)) == 1
    assert w.next(timeout=5).name == "th/x"


def test_a_child_forked_while_threads_wait_in_a_follow_and_a_ring(client):
    # each of these is busy while a thread waits in it; that thread is
    # not in the child, which gets ECHILD from them and closes its copies
    # (docs/python.md: "An inherited ring or subscription stays the
    # parent's too", "An inherited Follow likewise")
    client.put("th/f", np.arange(3.0))
    f = client.follow("th/f")
    f.next(timeout=5)
    r = client.ring_create("th/r", (4,), "u8", slots=2)
    sub = client.subscribe("th/r", timeout=5)
    idle = client.subscribe("th/r", timeout=5)  # reads nothing
    slot = r.acquire(timeout=5)
    slot[:] = 1
    del slot
    v = r.publish()
    sub.next(timeout=5).release()
    waits = [InThread(lambda: f.next(timeout=3)),
             InThread(lambda: sub.next(timeout=3)),
             InThread(lambda: r.wait_read(v, timeout=3))]
    for t in waits:
        t.inside(0.1)
    time.sleep(0.3)

    def child():
        for obj, call in ((f, lambda: f.next(timeout=0)),
                          (sub, lambda: sub.next(timeout=0)),
                          (r, lambda: r.acquire(timeout=0))):
            refuses(call)
            obj.close()
    in_child(child)
    for t in waits:
        t.finish()
    assert not f.closed
    f.close()
    r.close()
    sub.close()
    idle.close()


def test_a_follows_tensors_dropped_by_other_threads(client, daemon):
    # next() gives the held tensor back with the GIL released; another
    # thread that drops that tensor's last view meanwhile frees its Lease,
    # which next() must not read afterwards (ASan: heap-use-after-free)
    import queue
    prod = tensord.Client(daemon.sock)
    stop = threading.Event()

    def produce():
        n = 0
        while not stop.is_set():
            a = prod.alloc("th/fw", (256,), "f32", stream=True)
            a[:] = n
            prod.publish(a)
            n += 1
    q = queue.Queue()

    def drop():
        while q.get() is not None:
            pass  # the tensor's last reference goes here
    threads = [threading.Thread(target=produce, daemon=True)] + \
        [threading.Thread(target=drop, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        with client.follow("th/fw") as f:
            end = time.monotonic() + 2
            while time.monotonic() < end:
                x = f.next(timeout=5)
                assert x[0] == x[-1]
                q.put(x)
                del x
    finally:
        stop.set()
        for _ in threads[1:]:
            q.put(None)
        for t in threads:
            t.join(CHILD_S)
        prod.close()


def test_connecting_again_while_another_thread_is_in_a_call(client, daemon):
    # close() is deferred to the calls in flight; __init__ before they
    # returned says so, not "already connected" of a client that says
    # it is closed
    v = client.put("th/again", np.arange(2.0))
    t = InThread(lambda: client.get("th/again", newer_than=v, timeout=1))
    t.inside(0.2)
    client.close()
    assert client.closed
    try:
        client.__init__(daemon.sock)
    except RuntimeError as e:
        assert "another thread" in str(e), e
    else:
        raise AssertionError("__init__ connected over a call in flight")
    assert isinstance(t.finish().error, tensord.Timeout)


def test_threads_sharing_a_client_put_get_watch_and_bound_its_events(
        client):
    # every call releases the GIL: threads interleave inside libtensord
    # and in the binding's code around it (Watches opened and closed
    # while another thread sets event_limit, which syncs libtensord's
    # bound without the GIL); each reads back only whole tensors
    errors = []

    def worker(i):
        try:
            other = f"ts/{(i + 1) % 3}"
            for k in range(40):
                client.put(f"ts/{i}", np.full(64, i * 10 + k % 10, np.uint8))
                try:
                    x = client.get(other)
                    assert len(set(np.asarray(x).tolist())) == 1
                    del x
                except tensord.NotFound:
                    pass
                with client.watch(f"ts/{i}") as w:
                    client.event_limit = k % 4
                    client.ls("ts/")
                    del w
                client.poll()
        except Exception as e:  # noqa: BLE001 (handed to the test)
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(CHILD_S * 3)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert errors == []


def test_two_threads_connecting_one_client_at_once_make_one_connection(
        daemon):
    # __init__ connects with the GIL released: a second thread's
    # __init__ of the same closed client meanwhile is refused ("already
    # connected") once the first connected, and its own connection is
    # closed, not left open behind the one the client keeps
    client = tensord.Client(daemon.sock)
    client.close()
    base = fd_count()
    for _ in range(20):
        gate = threading.Barrier(2)
        said = []

        def connect():
            gate.wait()
            try:
                client.__init__(daemon.sock)
                said.append("connected")
            except RuntimeError as e:
                said.append(str(e))
        threads = [threading.Thread(target=connect) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(CHILD_S)
        # the second either came after the first connected or raced it
        assert sorted(said) == ["already connected", "connected"], said
        client.close()
        assert fd_count() == base, "a connection was left open"


@pytest.mark.parametrize("call", ["next", "poll"])
def test_a_follows_next_while_another_thread_gives_its_tensor_back(
        client, daemon, call):
    # the last view of a followed tensor dies in another thread, which
    # gives it back to libtensord with the GIL released; a next() or
    # poll() that takes the GIL meanwhile must not find libtensord's hold
    # still taken (EBUSY). One CPU for both threads and the dropping one
    # niced: the follower runs as soon as the dropper lets the GIL go.
    import queue
    prod = tensord.Client(daemon.sock)
    q, ready = queue.Queue(), threading.Event()

    def drop():
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        while True:
            y = q.get()
            if y is None:
                return
            ready.set()
            del y  # the last view: its Lease gives the tensor back

    def publish(n):
        w = prod.alloc("th/gb", (256,), "u8", stream=True)
        w[:] = n % 256
        return prod.publish(w)
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    dropper = threading.Thread(target=drop, daemon=True)
    dropper.start()
    try:
        with client.follow("th/gb") as f:
            for i in range(200):
                publish(i)
                x = f.next(timeout=5)
                newer = publish(i + 1)
                ready.clear()
                q.put(x)
                del x
                assert ready.wait(CHILD_S)
                y = getattr(f, call)() if call == "poll" else f.next(5)
                assert y is None or y.version == newer
                del y
    finally:
        q.put(None)
        dropper.join(CHILD_S)
        os.sched_setaffinity(0, cpus)
        prod.close()


def test_poll_and_watch_next_do_not_wait_for_another_threads_call(
        client, daemon):
    """An event loop's Client.poll() (and a Watch.next() with a timeout)
    while another thread's call waits for a daemon that does not answer
    (stopped): they give what is there and return, instead of waiting
    for that call, here for ever. Its events come once it returned."""
    import select
    import signal
    w = client.watch("pw/")
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        stuck = InThread(lambda: client.ls("pw/"))
        stuck.inside(0.3)
        polled = InThread(client.poll)
        polled.finish()
        assert polled.error is None and polled.result == []
        nexted = InThread(lambda: w.next(timeout=0.05))
        nexted.finish()
        assert isinstance(nexted.error, tensord.Timeout), nexted.error
        # fileno() does not wake the loop for the call it cannot serve
        assert select.select([client.fileno()], [], [], 0)[0] == []
        assert stuck.is_alive(), "the call in flight returned"
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert stuck.finish().result == []
    with tensord.Client(daemon.sock) as prod:
        v = prod.put("pw/a", np.zeros(4, np.uint8))
    got = []
    while not got:
        assert select.select([client.fileno()], [], [], 60)[0], \
            "fileno() never woke for the event"
        got = client.poll()
    assert [(e.type, e.name, e.version) for e in got] == \
        [("published", "pw/a", v)]
    w.close()


def test_poll_gets_events_while_another_thread_waits_in_get_newer(
        client, daemon):
    """A thread waiting in get(newer_than=) (a request a slice at a time)
    holds the client; the loop's poll() does not wait for it, and the
    events that came meanwhile are handed over between its slices."""
    import select
    v0 = client.put("pn/x", np.zeros(4, np.uint8))
    w = client.watch("pn/e")
    waiter = InThread(lambda: client.get("pn/x", newer_than=v0))
    waiter.inside(0.3)
    with tensord.Client(daemon.sock) as prod:
        v = prod.put("pn/e", np.ones(4, np.uint8))
        got = []
        while not got:
            assert select.select([client.fileno()], [], [], 60)[0], \
                "fileno() never woke for the event"
            got = client.poll()
        assert waiter.is_alive(), "get(newer_than=) returned"
        assert [(e.type, e.name, e.version) for e in got] == \
            [("published", "pn/e", v)]
        v2 = prod.put("pn/x", np.full(4, 2, np.uint8))
    assert waiter.finish().result.version == v2
    w.close()
