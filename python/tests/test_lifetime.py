# SPDX-License-Identifier: MIT
"""Leases live exactly as long as some view of them, and no view ever
points at unmapped memory: after release(), after Client.close(), after
a subscription or ring is closed."""
import gc
import os
import time

import numpy as np
import pytest
import tensord

from conftest import (InThread, child_refuses, fd_count, mapping_of,
                      need_torch, wait_child)


def leases(client, name):
    return client.stat(name).lease_count


def test_lease_count_drops_to_zero_when_the_last_view_dies(client):
    client.put("lt/a", np.arange(100, dtype=np.int64))
    a = client.get("lt/a")
    b = a[10:20]
    c = b.reshape(2, 5)
    assert leases(client, "lt/a") == 1
    del a
    gc.collect()
    assert leases(client, "lt/a") == 1
    del b
    gc.collect()
    assert leases(client, "lt/a") == 1
    assert list(c[1]) == [15, 16, 17, 18, 19]
    del c
    gc.collect()
    assert leases(client, "lt/a") == 0


def test_two_gets_are_two_leases(client):
    client.put("lt/two", np.zeros(8))
    a, b = client.get("lt/two"), client.get("lt/two")
    assert leases(client, "lt/two") == 2
    a.release()
    assert leases(client, "lt/two") == 1
    del b
    gc.collect()
    assert leases(client, "lt/two") == 0


def test_release_ends_the_lease_while_views_stay_readable(client):
    client.put("lt/r", np.arange(4096, dtype=np.uint32))
    a = client.get("lt/r")
    view = a[::2]
    a.release()
    a.release()  # idempotent
    assert leases(client, "lt/r") == 0
    assert not a.lease.held
    # libtensord may unmap its own mapping now; ours stays
    client.trim()
    client.rm("lt/r")
    assert mapping_of(view.ctypes.data) is not None
    assert int(view[-1]) == 4094 and int(a.sum()) == sum(range(4096))


def test_with_block_releases_at_exit(client):
    client.put("lt/w", np.ones(16))
    with client.get("lt/w") as a:
        assert leases(client, "lt/w") == 1
        assert a.sum() == 16
    assert leases(client, "lt/w") == 0


def test_a_view_kept_after_client_close_stays_valid(daemon, client):
    client.put("lt/c", np.arange(1 << 16, dtype=np.float64))
    a = client.get("lt/c")
    client.close()
    assert client.closed
    assert float(a[-1]) == float((1 << 16) - 1)
    assert a.version == 1
    a.release()
    assert float(a[12345]) == 12345.0
    with pytest.raises(ValueError, match="closed"):
        client.get("lt/c")
    # the daemon dropped the lease with the connection
    with tensord.Client(daemon.sock) as c2:
        assert leases(c2, "lt/c") == 0


def test_a_loan_view_survives_publish_and_its_writes_stay_private(client):
    w = client.alloc("lt/loan", (1024,), "u8")
    w[:] = 9
    v = client.publish(w)
    assert w.version == v
    w[0] = 1  # a private page now: no fault, nobody sees it
    g = client.get("lt/loan")
    assert int(g[0]) == 9 and int(w[0]) == 1
    with pytest.raises(ValueError, match="already published"):
        client.publish(w)


@pytest.mark.parametrize("private", [True, False])
def test_a_fork_while_a_loan_is_filled_does_not_hold_up_its_publish(
        client, private):
    # the child (alive, not exec'ed) kept a writable mapping of the loan,
    # and the publish's write seal failed: "unmap writable mappings"
    w = client.alloc("lt/fork", (4096,), "u8", recycle=not private,
                     private=private)
    w[:] = 3
    r, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(wr)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    try:
        v = client.publish(w)
    finally:
        os.close(wr)
        os.waitpid(pid, 0)
    assert v > 0
    assert int(client.get("lt/fork")[0]) == 3


def test_an_unpublished_loan_is_given_up_by_release(client):
    w = client.alloc("lt/gone", (10,), "f32")
    w.release()
    with pytest.raises(ValueError, match="already published or released"):
        client.publish(w)
    with pytest.raises(tensord.NotFound):
        client.get("lt/gone")
    w[:] = 1.0  # still our mapping


def test_subscription_close_waits_for_its_last_view(client):
    ring = client.ring_create("lt/ring", (64,), "f32", slots=4)
    sub = client.subscribe("lt/ring")
    slot = ring.acquire()
    slot[:] = 5.0
    ring.publish()
    v = sub.next(5)
    sub.close()
    with pytest.raises(ValueError, match="closed"):
        sub.next(0)
    assert client.ring_stat("lt/ring")["subscribers"] == 1
    assert float(v.sum()) == 320.0
    del v
    gc.collect()
    assert client.ring_stat("lt/ring")["subscribers"] == 0
    del slot
    ring.close()


def test_ring_close_waits_for_its_last_slot_array(client):
    ring = client.ring_create("lt/ring2", (8,), "u8")
    slot = ring.acquire()
    slot[:] = 1
    ring.publish()
    ring.close()
    assert int(slot.sum()) == 8  # still mapped (read-only: published)
    assert client.stat("lt/ring2").flags & tensord.ENTRY_RING
    del slot
    gc.collect()
    with pytest.raises(tensord.NotFound):
        client.stat("lt/ring2")


def test_close_while_another_thread_waits_closes_after_it(daemon, client):
    v = client.put("lt/wait", np.zeros(4))
    t = InThread(lambda: client.get("lt/wait", newer_than=v, timeout=60))
    t.inside()  # in get(); parked in the daemon or not, either is right
    client.close()   # returns at once: the handle closes after the call
    assert client.closed
    with pytest.raises(ValueError, match="closed"):
        client.stat("lt/wait")
    with tensord.Client(daemon.sock) as other:
        other.put("lt/wait", np.ones(4))
    got = t.finish().result
    assert got.tolist() == [1.0] * 4
    # the connection is gone now: the daemon holds no lease of it
    with tensord.Client(daemon.sock) as other:
        assert leases(other, "lt/wait") == 0


@pytest.mark.parametrize("wait", ["get", "subscribe"])
def test_a_wait_without_a_timeout_ends_when_another_thread_closes(daemon,
                                                                 wait):
    # a wait with a deadline goes on to it (above); one without would
    # wait for ever on a closed client, and keep its connection open
    c = tensord.Client(daemon.sock)
    v = c.put("lt/ever", np.zeros(4))
    calls = {"get": lambda: c.get("lt/ever", newer_than=v),
             "subscribe": lambda: c.subscribe("lt/no-ring")}
    open_fds = fd_count()
    t = InThread(calls[wait])
    t.inside()
    c.close()
    t.finish(timeout=10)
    assert isinstance(t.error, ValueError), t.error
    assert "closed while this call waited" in str(t.error)
    assert fd_count() < open_fds, "the connection outlived the call"


def test_a_view_got_while_closing_is_unmapped_when_it_dies(daemon, client):
    # the get() returns after close() took effect: its mapping must not
    # join the closed client's cache, where nothing would ever unmap it
    v = client.put("lt/late", np.zeros(1 << 14, dtype=np.uint8))
    t = InThread(lambda: client.get("lt/late", newer_than=v, timeout=60))
    t.inside()
    client.close()
    with tensord.Client(daemon.sock) as other:
        other.put("lt/late", np.full(1 << 14, 7, dtype=np.uint8))
    got = t.finish().result
    assert (got == 7).all()
    addr = got.ctypes.data
    assert mapping_of(addr) is not None
    del got, t
    gc.collect()
    assert mapping_of(addr) is None, "the mapping outlived its last view"


def test_a_forked_child_cannot_end_the_parents_lease(client):
    client.put("lt/fork", np.arange(8.0))
    a = client.get("lt/fork")
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            del a
            gc.collect()  # the view dies in the child: nothing is sent
            try:
                client.stat("lt/fork")
            except tensord.Error as e:
                code = 0 if "ECHILD" in str(e) else 2
        finally:
            os._exit(code)
    status = wait_child(pid, "the child of fork()")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert leases(client, "lt/fork") == 1
    assert a.tolist() == list(range(8))
    del a
    gc.collect()
    assert leases(client, "lt/fork") == 0


def test_connecting_a_closed_client_again_leaks_nothing(daemon):
    c = tensord.Client(daemon.sock)

    def lists():
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is list)

    c.close()
    c.__init__(daemon.sock)
    before = lists()
    for _ in range(50):
        c.close()
        c.__init__(daemon.sock)
    assert lists() - before < 10, "each reconnect left a list behind"
    c.put("lt/again", np.zeros(2))
    assert c.get("lt/again").tolist() == [0.0, 0.0]
    c.close()


def test_a_dlpack_tensor_keeps_the_lease(client):
    client.put("lt/dl", np.arange(8, dtype=np.float32))
    a = client.get("lt/dl")
    t = need_torch().from_dlpack(a)
    del a
    gc.collect()
    assert leases(client, "lt/dl") == 1
    assert float(t.sum()) == 28.0
    del t
    gc.collect()
    assert leases(client, "lt/dl") == 0


def test_gets_of_one_buffer_reuse_a_cached_mapping_until_trim(client):
    want = np.arange(1 << 16, dtype=np.uint8)
    client.put("lt/cache", want)
    a = client.get("lt/cache")
    addr = a.ctypes.data
    a.release()
    del a
    gc.collect()
    # no view left, the mapping stays cached: the next get of the same
    # buffer reads through it (page tables filled), not a new one
    b = client.get("lt/cache")
    assert b.ctypes.data == addr
    np.testing.assert_array_equal(b, want)
    # a new version is another buffer: another mapping, its own bytes
    client.put("lt/cache", want[::-1].copy())
    c = client.get("lt/cache")
    assert c.ctypes.data != addr
    np.testing.assert_array_equal(c, want[::-1])
    np.testing.assert_array_equal(b, want)
    del b, c
    gc.collect()
    assert client.trim() >= 2
    assert mapping_of(addr) is None


def test_a_recycled_loans_next_version_reads_through_the_cached_mapping(
        daemon, client):
    with tensord.Client(daemon.sock) as prod:
        def publish(k):
            w = prod.alloc("lt/rec", (4096,), "u32", recycle=True)
            w[:] = k
            return prod.publish(w)

        publish(1)
        a = client.get("lt/rec")
        addr, ino = a.ctypes.data, os.fstat(a.lease.fileno()).st_ino
        a.release()
        del a
        gc.collect()
        # a request of this client's: the daemon has ended the lease
        assert client.stat("lt/rec").lease_count == 0
        publish(2)  # version 1 replaced and released: its buffer is free
        v3 = publish(3)  # and carries version 3
        b = client.get("lt/rec")
        assert b.version == v3 and (b == 3).all()
        assert os.fstat(b.lease.fileno()).st_ino == ino
        assert b.ctypes.data == addr  # the same mapping, page tables warm


def test_a_forked_child_cannot_use_the_parents_ring(client):
    ring = client.ring_create("lt/fring", (4,), "u8", slots=3)
    sub = client.subscribe("lt/fring")
    ring.acquire(5)[:] = 7
    ring.publish()
    view = sub.next(5)
    # sub.release() there gives nothing back: the hold is the parent's
    # publish() with no slot acquired too: ECHILD, not "acquire() first"
    child_refuses(sub.release, lambda: ring.acquire(0), ring.publish,
                  lambda: sub.next(0), lambda: sub.poll())
    # the parent's hold is still in the ring: however often the producer
    # publishes, it never rewrites the held slot
    for i in range(8):
        ring.acquire(5)[:] = 8 + i
        v2 = ring.publish()
    assert view.tolist() == [7, 7, 7, 7]
    nxt = sub.next(5)
    assert nxt.version == v2 and nxt.tolist() == [15] * 4


def test_allocs_given_up_unpublished_do_not_use_up_the_connection(client):
    """An alloc released, dropped or whose publish failed is given back to
    the daemon: it used to keep each until the client disconnected, and
    after 64 the client could allocate nothing more (ENOBUFS)."""
    for _ in range(100):
        client.alloc("lt/given", (16,), "u8").release()
    for _ in range(100):
        a = client.alloc("lt/given", (16,), "u8")
        del a
    for _ in range(100):
        a = client.alloc("lt/given", (16,), "u8")
        with pytest.raises(Exception):
            client.publish(a, format="xyz")
    assert client.put("lt/after", np.zeros(4, np.uint8)) > 0


def test_nothing_is_held_after_client_close(daemon, client):
    """Client.close() ends every lease, loan and follow hold in the
    daemon: .held says so (Lease, Planes, a followed tensor, a loan),
    while the views stay mapped and readable. An ended lease exports no
    DLPack tensor (its bytes may be recycled), as after release()."""
    with tensord.Client(daemon.sock) as prod:
        prod.put("lt/h", np.arange(4096, dtype=np.uint32))
        p = prod.alloc("lt/hp", (8, 16), "u8", format="NV12")
        p[0][:] = 3
        p[1][:] = 4
        prod.publish(p)
        f = client.follow("lt/hf")
        prod.put("lt/hf", np.full(64, 9, dtype=np.uint8))
        ft = f.next(5)
        a = client.get("lt/h")
        planes = client.get("lt/hp")
        y = planes[0]
        w = client.alloc("lt/hw", (32,), "u8")
        for held in (a.lease, planes, y.lease, ft.lease, w.lease):
            assert held.held
        client.close()
        for held in (a.lease, planes, y.lease, ft.lease, w.lease):
            assert not held.held, held
        assert int(a[-1]) == 4095 and (y == 3).all() and (ft == 9).all()
        w[:] = 1  # still our mapping
        with pytest.raises(BufferError, match="close"):
            np.from_dlpack(a)
        with pytest.raises(BufferError, match="close"):
            y.__dlpack__()
        a.release()  # still fine, and still not held
        assert not a.lease.held and int(a[1]) == 1
        # the daemon holds nothing of the closed connection (its hang-up
        # is handled in some loop turn of its own, which prod's STAT may
        # come before: a bounded wait)
        for _ in range(2000):
            if (prod.stat("lt/h").lease_count == 0
                    and prod.stat("lt/hp").lease_count == 0):
                break
            time.sleep(0.001)
        assert prod.stat("lt/h").lease_count == 0
        assert prod.stat("lt/hp").lease_count == 0
        # connected again, the client's old leases stay ended
        client.__init__(daemon.sock)
        assert not planes.held and not ft.lease.held
        b = client.get("lt/h")
        assert b.lease.held and not y.lease.held
        b.release()
        del f, ft


def test_fileno_raises_once_the_client_closed(client, daemon):
    # libtensord keeps the fds of tensors not yet released open after
    # td_client_close(); fileno() is "valid while held", and nothing is
    # held any more
    client.put("lt/fd", np.zeros(4))
    a = client.get("lt/fd")
    loan = client.alloc("lt/fdl", (4,), "u8")
    os.fstat(a.lease.fileno())
    os.fstat(loan.lease.fileno())
    client.close()
    for x in (a, loan):
        assert not x.lease.held
        with pytest.raises(ValueError, match="closed"):
            x.lease.fileno()
    assert a.tolist() == [0.0] * 4  # the view stays readable


def test_ring_views_say_whether_they_hold_their_slot(client):
    ring = client.ring_create("lt/rh", (4,), "u8", slots=3)
    sub = client.subscribe("lt/rh", timeout=5)
    slot = ring.acquire(timeout=5)
    again = ring.acquire(timeout=5)  # the same slot, still acquired
    assert slot.lease.held and again.lease.held and slot[1:].lease.held
    ring.publish()
    assert not slot.lease.held and not again.lease.held  # the readers'
    nxt = ring.acquire(timeout=5)
    assert nxt.lease.held and not slot.lease.held
    ring.publish()
    view = sub.next(timeout=5)
    assert view.lease.held and view[::2].lease.held
    ring.acquire(timeout=5)
    ring.publish()
    newer = sub.next(timeout=5)  # gives view's slot back
    assert not view.lease.held and newer.lease.held
    sub.release()
    assert not newer.lease.held
    ring.acquire(timeout=5)
    ring.publish()
    last = sub.next(timeout=5)
    pending = ring.acquire(timeout=5)
    client.close()  # ends the ring and the subscription in the daemon
    assert not last.lease.held and not pending.lease.held


def test_every_binding_object_takes_a_weak_reference(daemon, client):
    """weakref.ref(), weakref.finalize() and WeakValueDictionary work on
    every object the binding hands out (a pool of clients per worker, a
    cache of follows, a cleanup at the end of a client): they raised
    TypeError ("cannot create weak reference to 'tensord.Client'
    object") for all but Array. A weak reference keeps nothing alive:
    the object's end still ends what it holds, and its callback runs."""
    import weakref
    c = tensord.Client(daemon.sock)
    c.put("wr/a", np.arange(4, dtype=np.uint8))
    objs = {"Client": c, "Lease": c.get("wr/a").lease,
            "Follow": c.follow("wr/a"), "Watch": c.watch("wr/"),
            "Ring": c.ring_create("wr/r", (4,), "u8")}
    objs["Subscription"] = c.subscribe("wr/r", timeout=5)
    objs["Planes"] = c.alloc("wr/p", (4, 4), "u8", format="NV12")
    gone = []
    refs = {k: weakref.ref(o, lambda r, k=k: gone.append(k))
            for k, o in objs.items()}
    assert all(refs[k]() is objs[k] for k in objs)
    fin = weakref.finalize(c, gone.append, "finalized")
    cache = weakref.WeakValueDictionary(objs)
    assert leases(client, "wr/a") == 1
    del objs, c
    gc.collect()
    assert sorted(gone) == sorted(["Client", "Lease", "Follow", "Watch",
                                   "Ring", "Subscription", "Planes",
                                   "finalized"])
    assert all(r() is None for r in refs.values())
    assert not fin.alive and len(cache) == 0
    # its end ended its lease and ring, as without weakrefs (the daemon
    # handles that connection's hang-up in a loop turn of its own, which
    # this other connection's STAT may come before: a bounded wait)
    for _ in range(2000):
        if leases(client, "wr/a") == 0 and "wr/r" not in [
                e.name for e in client.ls("wr/")]:
            break
        time.sleep(0.001)
    assert leases(client, "wr/a") == 0
    with pytest.raises(tensord.NotFound):
        client.ring_stat("wr/r")
