# SPDX-License-Identifier: MIT
"""Tensors of several planes (NV12, planar RGB): get() gives a
tensord.Planes, a sequence of read-only per-plane views of one lease,
each with the rows the blob spec gives that plane, no copy."""
import gc
import os

import numpy as np
import pytest
import tensord

from conftest import mapping_of, need_torch, run_py

H, W, PITCH = 48, 64, 80

# a producer process: NV12 64x48 with rows 80 bytes apart, Y then UV
PRODUCER = """
import os, sys, numpy as np, tensord
c = tensord.Client()
p = c.alloc(sys.argv[1], (48, 64), 'u8', strides=(80, 1), format='NV12')
y, uv = p
y[:] = (np.arange(48 * 64) % 251).reshape(48, 64)
uv[:] = (np.arange(24 * 64) % 241).reshape(24, 64)
ino = os.fstat(p.lease.fileno()).st_ino
print(ino, c.publish(p, metadata=b'nv12'))
"""


def want_y():
    return (np.arange(H * W) % 251).reshape(H, W).astype(np.uint8)


def want_uv():
    return (np.arange(H // 2 * W) % 241).reshape(H // 2, W).astype(np.uint8)


def produce(daemon, name):
    ino, version = run_py(PRODUCER, daemon, name).split()
    return int(ino), int(version)


def test_nv12_planes_are_views_of_the_producers_file(daemon, client):
    ino, version = produce(daemon, "pl/nv12")
    p = client.get("pl/nv12")
    assert isinstance(p, tensord.Planes)
    assert len(p) == 2 and p.format == "NV12"
    assert p.version == version and p.metadata == b"nv12"
    assert p.dtype_name == "u8" and p.name == "pl/nv12"
    y, uv = p
    # the blob spec's planes: Y is H rows, UV ceil(H/2) rows of W bytes
    # (U and V interleaved), both at the producer's row pitch
    assert y.shape == (H, W) and y.strides == (PITCH, 1)
    assert uv.shape == (H // 2, W) and uv.strides == (PITCH, 1)
    assert y.dtype == np.uint8 and uv.dtype == np.uint8
    np.testing.assert_array_equal(y, want_y())
    np.testing.assert_array_equal(uv, want_uv())
    for plane, off in ((y, 0), (uv, PITCH * H)):
        addr = plane.__array_interface__["data"][0]
        m = mapping_of(addr)
        assert m is not None and m["inode"] == ino, m
        assert "w" not in m["perms"]
        # where the spec puts it in the buffer: UV at stride * H
        assert m["offset"] + addr - m["lo"] == off
        assert plane.flags.writeable is False
        with pytest.raises(ValueError):
            plane[0, 0] = 1
        assert plane.version == version
    # U and V as pairs: a reshape, still a view
    pairs = uv.reshape(H // 2, W // 2, 2)
    assert np.shares_memory(pairs, uv)
    u, v = uv.reshape(uv.shape[0], -1, 2).transpose(2, 0, 1)  # the docs'
    assert np.shares_memory(u, uv) and np.shares_memory(v, uv)
    np.testing.assert_array_equal(u, want_uv()[:, 0::2])
    np.testing.assert_array_equal(v, want_uv()[:, 1::2])


def test_the_lease_ends_when_the_last_plane_view_dies(daemon, client):
    produce(daemon, "pl/life")
    p = client.get("pl/life")
    assert client.stat("pl/life").lease_count == 1
    uv = p[1]
    del p
    gc.collect()
    assert client.stat("pl/life").lease_count == 1
    np.testing.assert_array_equal(uv, want_uv())
    s = uv[3:5]
    del uv
    gc.collect()
    assert client.stat("pl/life").lease_count == 1
    del s
    gc.collect()
    assert client.stat("pl/life").lease_count == 0


def test_release_and_with_end_the_lease_of_every_plane(daemon, client):
    produce(daemon, "pl/rel")
    with client.get("pl/rel") as p:
        y = p[0]
        assert p.held and y.lease.held
        assert client.stat("pl/rel").lease_count == 1
    assert client.stat("pl/rel").lease_count == 0
    assert not y.lease.held and not p.held
    y[0, 0]  # still mapped: reading never faults
    p2 = client.get("pl/rel")
    p2[1].release()
    assert client.stat("pl/rel").lease_count == 0


def test_each_plane_exports_dlpack_copy_on_write(daemon, client):
    ino, _ = produce(daemon, "pl/dl")
    p = client.get("pl/dl")
    torch = need_torch()
    for plane, want in zip(p, (want_y(), want_uv())):
        t = torch.from_dlpack(plane)
        assert tuple(t.shape) == plane.shape
        assert tuple(t.stride()) == plane.strides  # u8: bytes = elements
        m = mapping_of(t.data_ptr())
        assert m["inode"] == ino and m["perms"].endswith("p"), m
        assert torch.equal(t, torch.from_numpy(want))
        t[0, 0] = 0
        t[1, :] = 7  # private pages: nobody else sees these
        np.testing.assert_array_equal(plane, want)
        n = np.from_dlpack(plane)
        assert mapping_of(n.ctypes.data)["inode"] == ino
        np.testing.assert_array_equal(n, want)
    out = run_py("import tensord; p = tensord.Client().get('pl/dl'); "
                 "print(int(p[0][1, 5]), int(p[1][1, 5]))", daemon)
    assert out.split() == [str(W + 5), str(W + 5)]


def test_the_planes_object_refuses_dlpack_saying_to_export_a_plane(
        daemon, client):
    """torch.from_dlpack(planes) took a Planes, which had no __dlpack__,
    for a capsule and said "received an invalid capsule ... consumed
    only once"; numpy said it has no __dlpack__. Both now get the
    binding's BufferError: export each plane."""
    produce(daemon, "pl/dlp")
    p = client.get("pl/dlp")
    assert p.__dlpack_device__() == (1, 0)
    with pytest.raises(BufferError, match=r"2 planes \(NV12\) is no one "
                       r"DLPack tensor: export each plane.*"
                       r"DLPack export of \"pl/dlp\""):
        np.from_dlpack(p)
    try:
        import torch
    except ImportError:
        return  # the numpy half ran; the torch half needs python3-torch
    with pytest.raises(BufferError, match="export each plane"):
        torch.from_dlpack(p)
    assert tuple(torch.from_dlpack(p[1]).shape) == p[1].shape
    assert p.held


def test_planar_rgb_gives_one_channel_per_plane(client):
    want = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    p = client.alloc("pl/rgbp", (3, 4, 5), "f32", format="rgb8_planar")
    assert isinstance(p, tensord.Planes) and len(p) == 3
    for c, plane in enumerate(p):
        assert plane.shape == (4, 5) and plane.flags.writeable
        plane[:] = want[c]
    v = client.publish(p[2], metadata=b"rgb")  # any plane publishes it
    assert p.version == v and p[0].version == v and p[1].metadata == b"rgb"
    g = client.get("pl/rgbp")
    assert [x.shape for x in g] == [(4, 5)] * 3
    for c in range(3):
        np.testing.assert_array_equal(g[c], want[c])
    with pytest.raises(IndexError):
        g[3]
    # a sequence as Python's are: from the end, and slices (a tuple)
    np.testing.assert_array_equal(g[-1], want[2])
    with pytest.raises(IndexError):
        g[-4]
    rg, gb = g[:2], g[1:]
    assert isinstance(rg, tuple) and len(rg) == 2 and len(gb) == 2
    np.testing.assert_array_equal(rg[1], want[1])
    np.testing.assert_array_equal(gb[1], want[2])
    assert [x.shape for x in g[::2]] == [(4, 5)] * 2 and g[5:] == ()
    with pytest.raises(TypeError):
        g["y"]
    assert client.stat("pl/rgbp").bytes == want.nbytes


def test_a_planes_lease_has_no_single_buffer(daemon, client):
    produce(daemon, "pl/buf")
    p = client.get("pl/buf")
    with pytest.raises(BufferError):
        memoryview(p.lease)
    with pytest.raises(AttributeError):
        p.lease.__array_interface__
    # each plane's lease has them
    mv = memoryview(p[1].lease)
    assert mv.readonly and mv.shape == p[1].shape
    assert mv.strides == p[1].strides
    assert p[1].lease.__array_interface__["shape"] == p[1].shape
    assert os.fstat(p[1].lease.fileno()).st_size >= PITCH * H * 3 // 2


def test_multi_plane_alloc_refuses_layouts_it_cannot_publish(client):
    with pytest.raises(ValueError, match="pitch"):
        client.alloc("pl/bad", (48, 64), "u8", strides=(80, 2),
                     format="NV12")
    with pytest.raises(ValueError, match="fit format"):
        client.alloc("pl/bad", (48, 64, 3), "u8", format="NV12")
    with pytest.raises(ValueError, match="fit format"):
        client.alloc("pl/bad", (48, 64), "u8", strides=(32, 1),
                     format="NV12")
