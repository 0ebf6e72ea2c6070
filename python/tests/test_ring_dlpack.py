# SPDX-License-Identifier: MIT
"""A ring subscriber's view exported through DLPack: torch and numpy
share the slot's pages (a copy-on-write mapping of the ring's file, no
copy), their writes stay private, and the slot stays held as long as an
exported tensor lives."""
import gc

import numpy as np
import pytest
import tensord

from conftest import InThread, mapping_of, need_torch, run_py

SHAPE = (64, 256)  # 64 KiB of f32: several pages


def frame(k):
    return (np.arange(64 * 256, dtype=np.float32) + 1000 * k).reshape(SHAPE)


def publish(ring, k):
    slot = ring.acquire(5)
    slot[:] = frame(k)
    del slot
    return ring.publish()


def ring_with_frame(client, name, slots):
    """A ring, a subscription, and frame 1 published into it."""
    ring = client.ring_create(name, SHAPE, "f32", slots=slots)
    sub = client.subscribe(name)
    publish(ring, 1)
    return ring, sub


def file_offset(addr):
    m = mapping_of(addr)
    return m["inode"], m["offset"] + addr - m["lo"]


def test_torch_shares_the_slots_pages_and_its_writes_stay_private(daemon,
                                                                  client):
    torch = need_torch()
    ring = client.ring_create("rd/a", SHAPE, "f32", slots=4)
    sub = client.subscribe("rd/a")
    with tensord.Client(daemon.sock) as c2:
        other = c2.subscribe("rd/a")
        slot = ring.acquire(5)
        slot[:] = frame(1)
        ring.publish()
        view = sub.next(5)
        view2 = other.next(5)
        t = torch.from_dlpack(view)
        assert tuple(t.shape) == SHAPE and t.dtype == torch.float32
        # the same file and offset as the producer's slot: its pages
        ino, off = file_offset(slot.ctypes.data)
        assert file_offset(t.data_ptr()) == (ino, off)
        assert file_offset(view.ctypes.data) == (ino, off)
        m = mapping_of(t.data_ptr())
        assert "memfd:" in m["path"] and m["perms"] == "rw-p", m
        assert t.data_ptr() != view.ctypes.data
        assert torch.equal(t, torch.from_numpy(frame(1)))
        n = np.from_dlpack(view)
        assert file_offset(n.ctypes.data) == (ino, off)
        np.testing.assert_array_equal(n, frame(1))
        # writes land in private pages: nobody else sees them
        t.fill_(-1.0)
        assert float(t[5, 5]) == -1.0
        np.testing.assert_array_equal(view, frame(1))
        np.testing.assert_array_equal(view2, frame(1))
        np.testing.assert_array_equal(slot, frame(1))
        np.testing.assert_array_equal(n, frame(1))
        out = run_py("import tensord\n"
                     "s = tensord.Client().subscribe('rd/a')\n"
                     "v = s.next(5); print(float(v[5, 5]), v.version)",
                     daemon)
        assert out.split() == [str(float(5 * 256 + 5 + 1000)), "1"]
        del t, n, view, view2, slot
        other.close()
    sub.close()
    ring.close()


def test_the_slot_stays_held_while_an_exported_tensor_lives(client):
    torch = need_torch()
    ring, sub = ring_with_frame(client, "rd/b", 3)
    view = sub.next(5)
    t = torch.from_dlpack(view[8:16])
    # the producer goes on and never rewrites the held slot under t
    for k in range(2, 12):
        publish(ring, k)
    assert torch.equal(t, torch.from_numpy(frame(1)[8:16]))
    # giving the view back would let the slot be rewritten under t
    for give_back in (sub.next, sub.release, view.release, sub.poll):
        with pytest.raises(tensord.Error, match=r'view of ring "rd/b" '
                           r"\(version 1\) is exported through DLPack"
                           ) as ei:
            give_back()
        assert ei.value.errno == 16  # EBUSY
    del view
    gc.collect()
    assert torch.equal(t, torch.from_numpy(frame(1)[8:16]))
    del t
    gc.collect()
    latest = sub.next(5)  # free again: the newest version
    assert latest.version == 11
    np.testing.assert_array_equal(latest, frame(11))
    sub.close()
    ring.close()


def test_a_closed_subscription_waits_for_its_exported_tensors(client):
    torch = need_torch()
    ring, sub = ring_with_frame(client, "rd/c", 3)
    t = torch.from_dlpack(sub.next(5))
    sub.close()
    assert client.ring_stat("rd/c")["subscribers"] == 1
    for k in range(2, 6):
        publish(ring, k)
    assert torch.equal(t, torch.from_numpy(frame(1)))
    del t
    gc.collect()
    assert client.ring_stat("rd/c")["subscribers"] == 0
    ring.close()


def test_a_closed_clients_subscription_says_so_whatever_is_exported(
        daemon):
    """After the client's close() the daemon ended the subscription and
    nothing holds the slot: next(), poll() and release() say what they
    say without an export (the ring is over, the client is closed), not
    EBUSY for a DLPack tensor still alive."""
    said = {}
    for export in (False, True):
        c = tensord.Client(daemon.sock)
        ring, sub = ring_with_frame(c, "rd/closed%d" % export, 3)
        view = sub.next(5)
        n = np.from_dlpack(view) if export else None
        c.close()
        for call in (sub.next, sub.poll, sub.release):
            try:
                call()
                said[export, call.__name__] = None
            except Exception as e:
                said[export, call.__name__] = (
                    type(e), getattr(e, "errno", None),
                    str(e).replace("rd/closed%d" % export, "R"))
        view.release()  # given back, the slot held by nobody
        del n, view
        gc.collect()
    for name in ("next", "poll", "release"):
        assert said[True, name] == said[False, name], (name, said)
    assert said[True, "next"][1] == 32  # EPIPE: the ring is over
    assert said[True, "poll"][0] is ValueError  # the client is closed


def test_no_export_while_another_thread_waits_in_next(client):
    # next() gives the held slot back before it waits: while it waits
    # the old view is no longer held, so it cannot be exported (the
    # exported tensor's slot could be rewritten under it)
    ring, sub = ring_with_frame(client, "rd/t", 3)
    view = sub.next(5)
    waiter = InThread(lambda: sub.next(30))
    waiter.inside(0.3)  # let it give the slot back and sleep
    with pytest.raises(BufferError):
        view.__dlpack__()
    publish(ring, 2)
    got = waiter.finish().result
    assert got.version == 2
    del got, view
    gc.collect()
    sub.close()
    ring.close()
