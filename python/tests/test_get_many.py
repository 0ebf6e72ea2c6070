# SPDX-License-Identifier: MIT
"""get_many(names): the latest version of several names leased at one
instant (docs/protocol.md §6.10). The pairs are published by
libtensord's td_client_publish_many through ctypes (the binding has no
publish_many yet), so a reader thread checks that it never sees an
image with the label of another step."""
import ctypes
import errno
import threading

import numpy as np
import pytest
import tensord

from test_fences import Error, Publish as Publish0

SIZE = 64


class Publish(Publish0):
    """struct td_publish whole: an array of them needs its last field
    (modifiers) too, for the C stride between elements."""
    _fields_ = [("modifiers", ctypes.c_void_p)]


def libtensord():
    """The one libtensord tensord's extension loaded (same soname)."""
    lib = ctypes.CDLL("libtensord.so.0")
    vp = ctypes.c_void_p
    lib.td_client_connect.argtypes = [ctypes.c_char_p,
                                      ctypes.POINTER(vp), vp]
    lib.td_client_alloc.argtypes = [vp, ctypes.c_uint32,
                                    ctypes.POINTER(ctypes.c_uint64),
                                    ctypes.POINTER(vp), vp]
    lib.td_alloc_data.restype = vp
    lib.td_alloc_data.argtypes = [vp, ctypes.c_uint32]
    lib.td_client_publish_many.argtypes = [vp, ctypes.c_uint32,
                                           ctypes.POINTER(vp),
                                           ctypes.POINTER(Publish), vp, vp]
    lib.td_client_close.argtypes = [vp]
    return lib


def publish_pair(lib, c, step):
    """Two loans of SIZE bytes, each byte `step`, as pair/a and pair/b
    in one td_client_publish_many."""
    allocs = (ctypes.c_void_p * 2)()
    pubs = (Publish * 2)()
    shape = (ctypes.c_uint64 * 1)(SIZE)
    size = ctypes.c_uint64(SIZE)
    err = Error()
    for i, name in enumerate((b"pair/a", b"pair/b")):
        a = ctypes.c_void_p()
        assert lib.td_client_alloc(c, 1, ctypes.byref(size),
                                   ctypes.byref(a), ctypes.byref(err)) == 0
        ctypes.memset(lib.td_alloc_data(a, 0), step, SIZE)
        allocs[i] = a
        pubs[i].name = name
        pubs[i].ndim = 1
        pubs[i].shape = shape
    rc = lib.td_client_publish_many(c, 2, allocs, pubs, None,
                                    ctypes.byref(err))
    assert rc == 0, err.raw
    return rc


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
    lib = libtensord()
    c = ctypes.c_void_p()
    err = Error()
    assert lib.td_client_connect(daemon.sock.encode(), ctypes.byref(c),
                                 ctypes.byref(err)) == 0
    assert publish_pair(lib, c, 0) == 0
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
            assert publish_pair(lib, c, step % 256) == 0
    finally:
        done.set()
        th.join()
        lib.td_client_close(c)
    assert seen["mixed"] == 0, seen
    assert len(seen["steps"]) > 1, seen
