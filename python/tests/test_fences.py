# SPDX-License-Identifier: MIT
"""A version published with an acquire fence (docs/fastpath.md, "GPU
stages", "Fences") comes back from get() and Follow.next() only once the
fence has signalled: the bytes of an array are never those of a write
still under way. The producer is libtensord itself through ctypes
(td_fence_create, td_client_put with TD_PUBLISH_FENCE, td_fence_signal),
as a GPU stage in C would publish; the binding has no fence producer."""
import ctypes
import errno
import os
import select
import threading
import time

import numpy as np
import pytest
import tensord

TD_PUBLISH_FENCE = 0x2
TD_TENSOR_U8 = 0


class Publish(ctypes.Structure):
    """struct td_publish (tensord.h), field for field."""
    _fields_ = [("name", ctypes.c_char_p), ("flags", ctypes.c_uint32),
                ("dtype", ctypes.c_uint32), ("ndim", ctypes.c_uint32),
                ("shape", ctypes.POINTER(ctypes.c_uint64)),
                ("strides", ctypes.c_void_p),
                ("quant_axis", ctypes.c_int32),
                ("quant_scale_count", ctypes.c_uint32),
                ("quant_scales", ctypes.c_void_p),
                ("quant_zero_point_count", ctypes.c_uint32),
                ("quant_zero_points", ctypes.c_void_p),
                ("format", ctypes.c_char_p),
                ("color_space", ctypes.c_char_p),
                ("color_transfer", ctypes.c_char_p),
                ("color_encoding", ctypes.c_char_p),
                ("color_range", ctypes.c_char_p),
                ("plane_count", ctypes.c_uint32),
                ("planes", ctypes.c_void_p),
                ("fd_count", ctypes.c_uint32), ("fds", ctypes.c_void_p),
                ("fence_fd", ctypes.c_int), ("meta", ctypes.c_void_p),
                ("meta_len", ctypes.c_size_t)]


class Error(ctypes.Structure):
    """struct td_error: room enough for its code and reason."""
    _fields_ = [("raw", ctypes.c_char * 1024)]


class Producer:
    """A C client of the daemon that publishes fenced versions."""

    def __init__(self, sock):
        # the one tensord's extension loaded (same soname)
        self.lib = ctypes.CDLL("libtensord.so.0")
        self.lib.td_client_connect.argtypes = [
            ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_void_p]
        self.lib.td_client_put.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(Publish), ctypes.c_char_p,
            ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint64),
            ctypes.c_void_p]
        self.lib.td_fence_signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        self.lib.td_client_close.argtypes = [ctypes.c_void_p]
        self.c = ctypes.c_void_p()
        rc = self.lib.td_client_connect(sock.encode(),
                                        ctypes.byref(self.c), None)
        assert rc == 0, os.strerror(-rc)

    def put_fenced(self, name, data):
        """Publish data with a new, unsignalled eventfd fence: its fd."""
        fence = self.lib.td_fence_create()
        assert fence >= 0
        shape = (ctypes.c_uint64 * 1)(len(data))
        p = Publish(name=name.encode(), flags=TD_PUBLISH_FENCE,
                    dtype=TD_TENSOR_U8, ndim=1, shape=shape,
                    fence_fd=fence)
        e = Error()
        rc = self.lib.td_client_put(self.c, ctypes.byref(p), data,
                                    len(data), None, ctypes.byref(e))
        assert rc == 0, e.raw
        return fence

    def signal(self, fence):
        assert self.lib.td_fence_signal(fence, None) == 0

    def close(self):
        self.lib.td_client_close(self.c)


@pytest.fixture
def prod(daemon):
    p = Producer(daemon.sock)
    yield p
    p.close()


def test_get_waits_for_the_fence_and_says_so_when_it_does_not_signal(
        client, prod):
    fence = prod.put_fenced("gpu/f", bytes(range(16)))
    # (an `ei` kept in this frame is a cycle with its traceback, which
    # would close what the frame holds in some later test's gc: del ei)
    with pytest.raises(tensord.Timeout, match="fence of \"gpu/f\" "
                       "version 1 did not signal within 50 ms"):
        client.get("gpu/f", timeout=0.05)
    with pytest.raises(tensord.Timeout) as ei:
        client.get("gpu/f", timeout=0)
    assert ei.value.errno == errno.ETIMEDOUT
    del ei
    with pytest.raises(tensord.Timeout):
        client.get("gpu/f", version=1, timeout=0)
    prod.signal(fence)
    with client.get("gpu/f") as x:
        assert np.array_equal(x, np.arange(16, dtype=np.uint8))
    with client.get("gpu/f", version=1, timeout=0) as x:
        assert x[15] == 15
    os.close(fence)


def test_get_many_bounds_its_wait_for_fences_by_its_timeout(client, prod):
    """get_many() hands each array out once its fence signalled, as get()
    does, and its timeout bounds that wait too: it waited without a
    limit, so a fence that never signalled (a producer that died before
    signalling) held get_many(names, timeout=) for ever. Here a timer
    signals it at last, which without the bound is when the calls would
    have returned."""
    fence = prod.put_fenced("gpu/m", bytes(range(8)))
    plain = client.put("gpu/plain", np.full(4, 5, np.uint8))
    timer = threading.Timer(30, prod.signal, (fence,))
    timer.start()
    try:
        with pytest.raises(tensord.Timeout, match="fence of \"gpu/m\" "
                           "version 1 did not signal within 0 ms"):
            client.get_many(["gpu/plain", "gpu/m"], timeout=0)
        with pytest.raises(tensord.Timeout, match="fence of \"gpu/m\""):
            client.get_many(["gpu/m", "gpu/plain"], newer=0, timeout=0.05)
    finally:
        timer.cancel()
        timer.join()
    # nothing stays leased of a call that raised
    assert client.stat("gpu/m").lease_count == 0
    assert client.stat("gpu/plain").lease_count == 0
    prod.signal(fence)
    # tensord relays the signal to this consumer's own fence: a moment
    # later, so wait for it (bounded)
    m, p = client.get_many(["gpu/m", "gpu/plain"], timeout=10)
    assert m.tolist() == list(range(8)) and p.version == plain
    del m, p
    os.close(fence)


def test_follow_next_waits_for_the_fence(client, prod):
    f = client.follow("gpu/ff")
    fence = prod.put_fenced("gpu/ff", b"\x07" * 32)
    with pytest.raises(tensord.Timeout, match="fence of \"gpu/ff\""):
        f.next(timeout=0.05)
    prod.signal(fence)
    # tensord relays the signal to this consumer's own fence: a moment
    # later, so wait for it (bounded)
    x = f.next(timeout=10)
    assert x.tobytes() == b"\x07" * 32
    x.release()
    del x
    f.close()
    os.close(fence)


def test_follow_poll_gives_a_fenced_version_once_signalled(client, prod):
    f = client.follow("gpu/fp")
    fence = prod.put_fenced("gpu/fp", b"\x09" * 8)
    assert f.poll() is None
    assert f.poll() is None  # still taken, still not signalled
    prod.signal(fence)
    # relayed by tensord a moment later: fileno() wakes the loop to look
    deadline = time.monotonic() + 10
    while (x := f.poll()) is None:
        assert time.monotonic() < deadline, "the signal never came through"
        select.select([client.fileno()], [], [], 1)
    assert x.tobytes() == b"\x09" * 8
    x.release()
    del x
    f.close()
    os.close(fence)


def test_a_pending_fence_wakes_the_loop_when_it_signals_not_before(
        client, prod):
    """In poll() mode the fence's fd joins fileno() while the version
    waits for it: the loop wakes at the signal, not every millisecond."""
    f = client.follow("gpu/fw")
    fence = prod.put_fenced("gpu/fw", b"\x05" * 8)
    assert f.poll() is None
    assert f.poll() is None
    client.poll()
    r, _, _ = select.select([client.fileno()], [], [], 0.2)
    assert r == [], "fileno() woke with the fence still pending"
    prod.signal(fence)
    r, _, _ = select.select([client.fileno()], [], [], 10)
    assert r, "the fence's signal did not wake the loop"
    x = f.poll()
    assert x is not None and x.tobytes() == b"\x05" * 8
    # given: its fence holds fileno() readable no more
    client.poll()
    r, _, _ = select.select([client.fileno()], [], [], 0)
    assert r == []
    x.release()
    del x
    f.close()
    os.close(fence)


def test_follow_release_gives_back_a_version_whose_fence_is_pending(
        client, prod):
    f = client.follow("gpu/fr")
    fence = prod.put_fenced("gpu/fr", b"\x02" * 8)
    with pytest.raises(tensord.Timeout):
        f.next(timeout=0)
    assert client.stat("gpu/fr").lease_count == 1  # taken, not given
    f.release()
    assert client.stat("gpu/fr").lease_count == 0
    os.close(fence)
    fence = prod.put_fenced("gpu/fr", b"\x04" * 8)
    prod.signal(fence)
    x = f.next(timeout=0)  # the newer one
    assert x.tobytes() == b"\x04" * 8
    x.release()
    del x
    f.close()
    os.close(fence)


def test_a_follow_closed_with_a_fenced_version_taken_releases_it(
        client, prod):
    f = client.follow("gpu/fc")
    fence = prod.put_fenced("gpu/fc", b"\x01" * 8)
    with pytest.raises(tensord.Timeout):
        f.next(timeout=0)
    assert client.stat("gpu/fc").lease_count == 1  # taken, not given
    f.close()
    assert client.stat("gpu/fc").lease_count == 0
    os.close(fence)


class RingDesc(ctypes.Structure):
    """struct td_ring_desc (tensord.h)."""
    _fields_ = [("dtype", ctypes.c_uint32), ("ndim", ctypes.c_uint32),
                ("shape", ctypes.POINTER(ctypes.c_uint64)),
                ("plane_count", ctypes.c_uint32),
                ("plane_sizes", ctypes.c_void_p),
                ("slot_count", ctypes.c_uint32),
                ("reader_count", ctypes.c_uint32),
                ("flags", ctypes.c_uint32)]


class Slot(ctypes.Structure):
    """struct td_slot (tensord.h, TD_SLOT_MAX_PLANES 4)."""
    _fields_ = [("index", ctypes.c_uint32),
                ("plane_count", ctypes.c_uint32),
                ("planes", ctypes.c_void_p * 4),
                ("sizes", ctypes.c_uint64 * 4)]


class RingProducer:
    """A fenced ring of 64 u8 per slot, through libtensord."""

    def __init__(self, prod, name):
        self.lib = prod.lib
        self.lib.td_ring_create.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(RingDesc),
            ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        self.lib.td_ring_acquire.argtypes = [
            ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(Slot)]
        self.lib.td_ring_publish_fenced.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]
        self.lib.td_ring_fence_signal.argtypes = [ctypes.c_void_p,
                                                  ctypes.c_uint64]
        self.lib.td_ring_close.argtypes = [ctypes.c_void_p]
        self.lib.td_ring_wait_read.argtypes = [
            ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int]
        self.shape = (ctypes.c_uint64 * 1)(64)
        d = RingDesc(dtype=TD_TENSOR_U8, ndim=1, shape=self.shape,
                     slot_count=3, reader_count=1)
        self.r = ctypes.c_void_p()
        rc = self.lib.td_ring_create(prod.c, name.encode(), ctypes.byref(d),
                                     ctypes.byref(self.r), None)
        assert rc == 0, os.strerror(-rc)

    def publish_fenced(self):
        """Publish a slot before writing it: (version, slot)."""
        s = Slot()
        assert self.lib.td_ring_acquire(self.r, -1, ctypes.byref(s)) == 0
        v = ctypes.c_uint64()
        assert self.lib.td_ring_publish_fenced(self.r, ctypes.byref(v)) == 0
        return v.value, s

    def write_and_signal(self, v, s, b):
        ctypes.memset(s.planes[0], b, 64)
        assert self.lib.td_ring_fence_signal(self.r, v) == 0

    def wait_read(self, v, ms):
        """td_ring_wait_read: 0 once every subscriber released v."""
        return self.lib.td_ring_wait_read(self.r, v, ms)

    def close(self):
        self.lib.td_ring_close(self.r)


def test_a_subscription_gives_a_fenced_slot_once_signalled(client, prod):
    ring = RingProducer(prod, "gpu/r")
    sub = client.subscribe("gpu/r", timeout=5)
    v, s = ring.publish_fenced()
    with pytest.raises(tensord.Timeout, match="fence of \"gpu/r\""):
        sub.next(timeout=0.05)
    assert sub.poll() is None  # still pending, still taken
    ring.write_and_signal(v, s, 5)
    x = sub.next(timeout=0)
    assert x.tobytes() == b"\x05" * 64
    x.release()
    del x
    # poll(): None while pending, the whole slot once signalled
    v, s = ring.publish_fenced()
    assert sub.poll() is None
    ring.write_and_signal(v, s, 6)
    x = sub.poll()
    assert x is not None and x.tobytes() == b"\x06" * 64
    x.release()
    del x  # a live view would defer sub.close() to its gc
    # a producer that closes with a fence pending ends the iteration
    ring.publish_fenced()
    with pytest.raises(tensord.Timeout):
        sub.next(timeout=0)
    ring.close()
    assert list(sub) == []
    sub.close()


def test_a_subscription_release_gives_back_a_slot_whose_fence_is_pending(
        client, prod):
    ring = RingProducer(prod, "gpu/rr")
    sub = client.subscribe("gpu/rr", timeout=5)
    v1, _ = ring.publish_fenced()
    with pytest.raises(tensord.Timeout):
        sub.next(timeout=0)
    # the subscriber holds v1's slot: the producer's lock step waits
    assert ring.wait_read(v1, 0) == -errno.ETIMEDOUT
    sub.release()  # taken, never given: released all the same
    assert ring.wait_read(v1, 0) == 0
    v2, s2 = ring.publish_fenced()
    ring.write_and_signal(v2, s2, 3)
    x = sub.next(timeout=0)  # the newer one, not v1 again
    assert x.version == v2 and x.tobytes() == b"\x03" * 64
    x.release()
    del x
    sub.close()
    ring.close()


def _late(delay, fn):
    """fn() on a timer thread after delay seconds: the timer, started."""
    t = threading.Timer(delay, fn)
    t.start()
    return t


def test_one_timeout_bounds_the_wait_and_the_fence_together(client, prod):
    """get(newer=), Follow.next() and Subscription.next() with a timeout:
    a version that comes 1.5 s into a 2 s timeout, its fence never
    signalled, gets what is left of it, 0.5 s, not the whole 2 s again
    (each call took 3.5 s before). The bound asserted, 3 s, is the
    timeout plus a second."""
    ring = RingProducer(prod, "gpu/tr")
    sub = client.subscribe("gpu/tr", timeout=5)
    v0 = client.put("gpu/t", np.zeros(4, np.uint8))
    f = client.follow("gpu/t")
    f.next(timeout=5).release()
    fences = []

    def put():
        fences.append(prod.put_fenced("gpu/t", b"\x01" * 8))

    calls = [("get", lambda: client.get("gpu/t", newer_than=v0,
                                        timeout=2.0), put),
             ("Follow.next", lambda: f.next(timeout=2.0), put),
             ("Subscription.next", lambda: sub.next(timeout=2.0),
              ring.publish_fenced)]
    try:
        for what, call, late in calls:
            v0 = client.stat("gpu/t").version
            timer = _late(1.5, late)
            t0 = time.monotonic()
            with pytest.raises(tensord.Timeout, match="fence of"):
                call()
            took = time.monotonic() - t0
            timer.join()
            assert took < 3.0, f"{what}(timeout=2.0) took {took:.2f} s"
            assert took >= 1.9, f"{what} returned early: {took:.2f} s"
    finally:
        for fence in fences:
            prod.signal(fence)
            os.close(fence)
    f.close()
    ring.close()
    sub.close()
