# SPDX-License-Identifier: MIT
"""A dma-buf plane with a DRM format modifier (a tiled or compressed
layout) is no array: get() raises naming the modifier, and never hands
out its bytes as rows (blob spec §6.1). The producer and the daemon run
under tests/fake-dmabuf.c (this machine has no dma-buf exporter)."""
import errno
import os
import subprocess
import sys

import pytest

import tensord
from conftest import Daemon, child_env, fake_dmabuf_env

X_TILED = 0x0100000000000001  # I915_FORMAT_MOD_X_TILED (drm_fourcc.h)

PRODUCER = r"""
import ctypes, os, sys
sys.path.insert(0, os.path.join(os.environ["TD_SOURCE_ROOT"], "python",
                                "tests"))
from test_fences import Error, Publish

class PublishMod(ctypes.Structure):
    _fields_ = Publish._fields_ + [("modifiers", ctypes.c_void_p)]

lib = ctypes.CDLL("libtensord.so.0")
lib.td_client_connect.argtypes = [ctypes.c_char_p,
                                  ctypes.POINTER(ctypes.c_void_p),
                                  ctypes.c_void_p]
lib.td_client_publish.argtypes = [ctypes.c_void_p,
                                  ctypes.POINTER(PublishMod),
                                  ctypes.c_void_p, ctypes.c_void_p]
lib.td_client_close.argtypes = [ctypes.c_void_p]
c = ctypes.c_void_p()
assert lib.td_client_connect(sys.argv[1].encode(), ctypes.byref(c),
                             None) == 0
for name, mod in (("lin", 0), ("tiled", int(sys.argv[2]))):
    fd = os.memfd_create("td-fake-dmabuf", os.MFD_ALLOW_SEALING)
    os.write(fd, bytes(range(64)) * 64)
    import fcntl
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    shape = (ctypes.c_uint64 * 2)(64, 64)
    fds = (ctypes.c_int * 1)(fd)
    mods = (ctypes.c_uint64 * 1)(mod)
    p = PublishMod(name=name.encode(), flags=4 if mod else 0, dtype=0,
                   ndim=2, shape=shape, fd_count=1,
                   fds=ctypes.cast(fds, ctypes.c_void_p),
                   modifiers=ctypes.cast(mods, ctypes.c_void_p))
    e = Error()
    rc = lib.td_client_publish(c, ctypes.byref(p), None, ctypes.byref(e))
    assert rc == 0, e.raw
    os.close(fd)
lib.td_client_close(c)
"""


@pytest.fixture
def fake_daemon(tmp_path):
    d = Daemon(tmp_path, [], env=fake_dmabuf_env({}))
    yield d
    d.stop()


def test_a_tiled_plane_is_not_an_array(fake_daemon):
    env = fake_dmabuf_env(child_env(fake_daemon))
    r = subprocess.run([sys.executable, "-c", PRODUCER, fake_daemon.sock,
                        str(X_TILED)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    with tensord.Client(fake_daemon.sock) as c:
        # the linear one on the same kind of buffer is an array
        a = c.get("lin")
        assert a.shape == (64, 64) and a[0, 5] == 5 and a[1, 0] == 0
        del a
        with pytest.raises(tensord.Error,
                           match=r"plane 0 carries DRM format modifier "
                           r"0x100000000000001 \(a tiled or compressed "
                           r"layout\), not readable as an array") as ei:
            c.get("tiled")
        assert ei.value.errno == errno.EOPNOTSUPP
        del ei
        # and nothing is left held
        assert c.stat("tiled").lease_count == 0
