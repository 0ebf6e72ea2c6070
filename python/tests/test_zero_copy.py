# SPDX-License-Identifier: MIT
"""Zero copy, proven from /proc/self/maps: a consumer's array lies in its
mapping of the very file the producer wrote, and DLPack consumers share
that file's pages copy-on-write."""
import copy
import ctypes
import hashlib
import os
import pickle
import subprocess
import sys
import zlib

import numpy as np
import pytest
import tensord

from conftest import child_env, mapping_of, need_torch, run_py

PRODUCER = """
import os, sys, numpy as np, tensord
c = tensord.Client()
a = c.alloc(sys.argv[1], (256, 1024), 'f32')
a[:] = np.arange(256 * 1024, dtype=np.float32).reshape(256, 1024)
ino = os.fstat(a.lease.fileno()).st_ino
print(ino, c.publish(a, metadata=b'from-producer'))
"""


def produce(daemon, name):
    ino, version = run_py(PRODUCER, daemon, name).split()
    return int(ino), int(version)


def expected():
    return np.arange(256 * 1024, dtype=np.float32).reshape(256, 1024)


def test_consumer_array_lies_in_a_mapping_of_the_producers_file(daemon,
                                                                client):
    ino, version = produce(daemon, "zc/a")
    a = client.get("zc/a")
    assert a.version == version
    assert a.metadata == b"from-producer"
    np.testing.assert_array_equal(a, expected())
    m = mapping_of(a.__array_interface__["data"][0])
    assert m is not None
    # the producer's loan, the consumer's lease and the mapping under the
    # array are one file: the same pages, not a copy
    assert m["inode"] == ino
    assert os.fstat(a.lease.fileno()).st_ino == ino
    assert "memfd:" in m["path"]
    assert "w" not in m["perms"]
    end = a.__array_interface__["data"][0] + a.nbytes
    assert end <= m["hi"]


def test_consumer_array_is_read_only_and_cannot_be_made_writable(daemon,
                                                                 client):
    produce(daemon, "zc/ro")
    a = client.get("zc/ro")
    assert a.flags.writeable is False
    with pytest.raises(ValueError):
        a[0, 0] = 1
    with pytest.raises(ValueError):
        a.flags.writeable = True
    # a writable buffer of the lease is refused (ctypes asks for one)
    with pytest.raises((BufferError, TypeError)):
        ctypes.c_char.from_buffer(a.lease)
    assert memoryview(a.lease).readonly


def test_torch_from_dlpack_shares_the_file_and_its_writes_stay_private(
        daemon, client):
    ino, _ = produce(daemon, "zc/t")
    a = client.get("zc/t")
    other = client.get("zc/t")
    torch = need_torch()
    t = torch.from_dlpack(a)
    assert t.dtype == torch.float32 and tuple(t.shape) == a.shape
    m = mapping_of(t.data_ptr())
    assert m is not None and m["inode"] == ino, m
    # a private (copy-on-write) mapping: reads share the page cache, a
    # write gets a private page instead of SIGSEGV on PROT_READ
    assert m["perms"].endswith("p") and "w" in m["perms"]
    assert m["lo"] != mapping_of(a.ctypes.data)["lo"]
    assert torch.equal(t, torch.from_numpy(expected()))
    t[3, 4] = -1.0
    t[200:, :] = 7.0
    assert float(t[3, 4]) == -1.0
    # nobody else sees it: not this array, not another lease, not
    # another process
    np.testing.assert_array_equal(a, expected())
    np.testing.assert_array_equal(other, expected())
    out = run_py("import tensord; a = tensord.Client().get('zc/t'); "
                 "print(float(a[3, 4]), float(a[255, 0]))", daemon)
    assert out.split() == ["3076.0", str(float(255 * 1024))]


def test_numpy_from_dlpack_shares_the_file(daemon, client):
    ino, _ = produce(daemon, "zc/n")
    a = client.get("zc/n")
    b = np.from_dlpack(a)
    assert mapping_of(b.ctypes.data)["inode"] == ino
    np.testing.assert_array_equal(b, expected())


def test_dlpack_of_a_slice_points_at_the_slice(daemon, client):
    produce(daemon, "zc/s")
    a = client.get("zc/s")
    s = a[10:20, 5::3]
    torch = need_torch()
    t = torch.from_dlpack(s)
    assert tuple(t.shape) == s.shape
    assert tuple(t.stride()) == tuple(x // 4 for x in s.strides)
    assert torch.equal(t, torch.from_numpy(np.ascontiguousarray(s)))


def test_a_writable_loan_exports_its_own_pages(client):
    w = client.alloc("zc/w", (4, 4), "i32")
    torch = need_torch()
    t = torch.from_dlpack(w)
    assert t.data_ptr() == w.ctypes.data
    t[1, 1] = 42
    assert w[1, 1] == 42
    client.publish(w)
    assert client.get("zc/w")[1, 1] == 42


def test_buffer_protocol_and_array_interface_share_the_pages(daemon,
                                                             client):
    produce(daemon, "zc/b")
    a = client.get("zc/b")
    lease = a.lease
    mv = memoryview(lease)
    assert mv.readonly and mv.shape == a.shape and mv.format == "f"
    b = np.asarray(lease)
    assert b.ctypes.data == a.ctypes.data
    assert not b.flags.writeable
    ai = lease.__array_interface__
    assert ai["data"] == (a.ctypes.data, True)
    assert ai["shape"] == a.shape and ai["strides"] == a.strides


def test_a_lease_is_one_run_of_bytes_to_a_plain_buffer_request(client):
    """hashlib and zlib ask for PyBUF_SIMPLE, a run of bytes with no
    shape, and hashlib refuses one that says more than one dimension."""
    client.put("zc/simple", np.arange(12, dtype=np.float32).reshape(3, 4))
    x = client.get("zc/simple")
    assert hashlib.sha256(x.lease).digest() == \
        hashlib.sha256(x.tobytes()).digest()
    assert zlib.crc32(x.lease) == zlib.crc32(x.tobytes())
    # the full request still has the tensor's shape
    assert memoryview(x.lease).shape == (3, 4)
    # one that is not one run of bytes is still refused
    w = client.alloc("zc/pitch", (3, 4), "u8", strides=(8, 1))
    with pytest.raises(BufferError, match="not contiguous"):
        hashlib.sha256(w.lease)


def test_dlpack_refusals_name_the_exported_views_dtype(client):
    """A view of another dtype is refused as that dtype, not as the
    tensor's ('f32' has a DLPack code: saying it has none misleads)."""
    client.put("zc/dt", np.arange(4, dtype=np.float32))
    x = client.get("zc/dt")
    with pytest.raises(BufferError, match=r"complex64 .*only ints"):
        x.view(np.complex64).__dlpack__()
    with pytest.raises(BufferError, match=r">f4 .*native byte order"):
        np.from_dlpack(x.view(">f4"))
    np.testing.assert_array_equal(np.from_dlpack(x.view(np.int32)),
                                  x.view(np.int32))


def test_arithmetic_and_copies_are_plain_ndarrays_and_views_stay_on_the_lease(
        client):
    """docs/python.md: slices and reshapes are tensord.Array views of the
    lease; results of arithmetic (memory of their own) are plain ndarrays,
    reductions to one value numpy scalars, as for any ndarray."""
    client.put("zc/plain", np.arange(6, dtype=np.float32).reshape(2, 3))
    x = client.get("zc/plain")
    for r in (x + 1, x * 2, np.add(x, 1), -x, x.copy(), x.copy(order="F"),
              x.mean(axis=0), np.sqrt(x), copy.copy(x), copy.deepcopy(x),
              pickle.loads(pickle.dumps(x)),
              pickle.loads(pickle.dumps(x, protocol=5)),
              pickle.loads(pickle.dumps(x[:, 1:]))):
        assert type(r) is np.ndarray
        assert not np.shares_memory(r, x)
    np.testing.assert_array_equal(x + 1, np.arange(1, 7).reshape(2, 3))
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(x)), x)
    assert x.copy(order="F").flags.f_contiguous
    s = x.sum()
    assert isinstance(s, np.float32) and s == 15
    for v in (x[1:], x.reshape(3, 2), x.T, x[:, ::2]):
        assert type(v) is tensord.Array
        assert v.version == x.version and np.shares_memory(v, x)
    # writing into a view of the lease's own type keeps it a view
    a = client.alloc("zc/plain2", (4,), "f32")
    np.add(a, 1, out=a)
    assert type(a) is tensord.Array
    assert client.publish(a) > 0
    x.release()


def test_like_functions_give_plain_ndarrays(client):
    """numpy's *_like functions make memory of their own: plain ndarrays
    (subok forced off, however it is given), whose values are right;
    numpy's other functions keep giving tensord.Array views."""
    client.put("zc/like", np.arange(6, dtype=np.float32).reshape(2, 3))
    x = client.get("zc/like")
    made = {
        "empty_like": np.empty_like(x),
        "zeros_like": np.zeros_like(x),
        "ones_like": np.ones_like(x),
        "full_like": np.full_like(x, 7),
        "zeros_like subok=True": np.zeros_like(x, subok=True),
        "zeros_like positional subok": np.zeros_like(x, None, "K", True),
        "full_like positional subok": np.full_like(x, 7, None, "K", True),
        "zeros_like shape": np.zeros_like(x, shape=(4,)),
        "ones_like dtype": np.ones_like(x[:, ::2], dtype=np.int16),
    }
    for what, r in made.items():
        assert type(r) is np.ndarray, what
        assert not np.shares_memory(r, x), what
        r[...] = 1  # its own, writable memory
    assert made["zeros_like shape"].shape == (4,)
    assert made["ones_like dtype"].dtype == np.int16
    assert made["ones_like dtype"].shape == (2, 2)
    np.testing.assert_array_equal(np.zeros_like(x), np.zeros((2, 3)))
    np.testing.assert_array_equal(np.full_like(x, 7), np.full((2, 3), 7))
    assert np.ones_like(x).dtype == np.float32
    for v in (np.reshape(x, (3, 2)), np.transpose(x), np.ravel(x),
              np.swapaxes(x, 0, 1), x[:, 1:], np.asanyarray(x)):
        assert type(v) is tensord.Array
        assert v.lease is x.lease and np.shares_memory(v, x)
    assert np.sum(x) == 15 and type(np.sort(x)) is np.ndarray
    x.release()


def test_dlpack_refuses_negative_strides(client):
    """A reversed view has negative strides, which torch 1.13 aborts the
    process on (numpy 1.24 exports them): a BufferError instead."""
    client.put("zc/neg", np.arange(12, dtype=np.float32).reshape(3, 4))
    x = client.get("zc/neg")
    for v in (x[::-1], x[:, ::-2], np.flip(x)):
        with pytest.raises(BufferError, match="negative stride"):
            v.__dlpack__()
        with pytest.raises(BufferError, match="negative stride"):
            np.from_dlpack(v)
    # over one element a stride moves nowhere: exported as 0
    one = x[1:2, ::-1][:, :1]
    assert one.strides[1] < 0
    np.testing.assert_array_equal(np.from_dlpack(one), [[7.0]])
    # what can be exported still is, and its copy of a reversed view too
    np.testing.assert_array_equal(np.from_dlpack(x[::2]), x[::2])
    np.testing.assert_array_equal(np.from_dlpack(x[::-1].copy()), x[::-1])


TORCH_REVERSED = """
import sys, torch, numpy as np, tensord
x = tensord.Client().get(sys.argv[1])
try:
    torch.from_dlpack(x[::-1])
    print("exported")
except BufferError as e:
    print("refused:", e)
"""


def test_torch_gets_an_error_for_a_reversed_view_not_an_abort(daemon,
                                                              client):
    """torch 1.13 aborts the whole process (an uncaught C++ exception)
    on a DLPack tensor with a negative stride: in a child process, so
    that an abort fails this test instead of killing pytest."""
    need_torch()
    client.put("zc/negt", np.arange(12, dtype=np.float32).reshape(3, 4))
    r = subprocess.run([sys.executable, "-c", TORCH_REVERSED, "zc/negt"],
                       env=child_env(daemon), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, \
        f"the process died ({r.returncode}): {r.stderr[-2000:]}"
    assert r.stdout.startswith("refused:") and "negative stride" in \
        r.stdout, r.stdout + r.stderr


def refusal_text(call):
    with pytest.raises(BufferError) as ei:
        call()
    return str(ei.value)


def test_every_dlpack_refusal_names_the_tensor(client, daemon):
    """A pipeline exporting many tensors learns which one was refused:
    each BufferError of the DLPack path (and of the buffer protocol)
    names the tensor and its version, a ring view its ring."""
    v = client.put("zc/nm", np.arange(12, dtype=np.float32).reshape(3, 4))
    x = client.get("zc/nm")
    named = f'"zc/nm" version {v}'
    for call in (lambda: x.view(np.complex64).__dlpack__(),
                 lambda: np.from_dlpack(x.view(">f4")),
                 lambda: x[::-1].__dlpack__(),
                 lambda: x.__dlpack__(stream=1),
                 lambda: np.lib.stride_tricks.as_strided(
                     x, (8, 4), subok=True).__dlpack__()):
        assert named in refusal_text(call)
    v_odd = client.put("zc/odd", np.zeros((4, 3), np.uint8))
    odd = client.get("zc/odd")
    assert f'"zc/odd" version {v_odd}' in refusal_text(
        lambda: odd[:, :2].view(np.uint16).__dlpack__())
    gone = client.get("zc/nm")
    gone.release()
    assert "released" in refusal_text(gone.__dlpack__)
    assert named in refusal_text(gone.__dlpack__)
    with tensord.Client(daemon.sock) as other:
        kept = other.get("zc/nm")
    assert named in refusal_text(kept.__dlpack__)
    # the buffer protocol's refusals, as the export's
    w = client.alloc("zc/npitch", (3, 4), "u8", strides=(8, 1))
    assert '"zc/npitch" (an alloc() loan, not published)' in \
        refusal_text(lambda: hashlib.sha256(w.lease))


def test_ring_dlpack_refusals_name_the_ring(client):
    ring = client.ring_create("zc/ring", (4,), "u8", slots=3)
    sub = client.subscribe("zc/ring", timeout=5)
    slot = ring.acquire(5)
    slot[:] = 1
    v = ring.publish()
    text = refusal_text(slot.__dlpack__)
    assert "published" in text and 'ring "zc/ring"' in text
    view = sub.next(5)
    sub.release()
    text = refusal_text(view.__dlpack__)
    assert "released" in text and f'ring "zc/ring" view version {v}' in text
    del slot, view
    sub.close()
    ring.close()
