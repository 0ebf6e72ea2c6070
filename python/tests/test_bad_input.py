# SPDX-License-Identifier: MIT
"""Wrong input gets TypeError/ValueError or a tensord.Error with the
daemon's errno and reason, never a crash; loops do not leak."""
import errno
import gc
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
import tensord

from conftest import (UNDER_ASAN, WAIT_S, InThread, child_env, fd_count,
                      map_count, memfd_map_count, rss_kib)


class NotAnArray:
    pass


@pytest.mark.parametrize("obj", [NotAnArray(), [1, 2, 3], 3.0, "text",
                                 None, {"a": 1}])
def test_put_refuses_what_is_not_an_array(client, obj):
    with pytest.raises(TypeError, match="needs an array"):
        client.put("bad/x", obj)


@pytest.mark.parametrize("arr", [
    np.array(["a", "bc"]),               # unicode strings
    np.array([b"ab"]),                   # byte strings
    np.array([object(), 1], dtype=object),
    np.array([True, False]),             # bool has no blob dtype
    np.array([1 + 2j]),                  # complex neither
    np.zeros(2, dtype=[("a", "i4")]),    # structured
    np.array(["2020-01-01"], dtype="datetime64[D]"),
])
def test_put_refuses_dtypes_tensord_has_no_code_for(client, arr):
    with pytest.raises(TypeError, match="no dtype"):
        client.put("bad/x", arr)
    with pytest.raises(tensord.NotFound):
        client.stat("bad/x")


@pytest.mark.parametrize("name, exc", [
    (1, TypeError), (b"bytes", TypeError), (None, TypeError),
    ("a\0b", ValueError), ("x" * 256, ValueError),
])
def test_bad_names(client, name, exc):
    with pytest.raises(exc):
        client.put(name, np.zeros(1))
    with pytest.raises(exc):
        client.get(name)


def test_names_the_daemon_refuses_raise_its_reason(client):
    with pytest.raises(tensord.Error) as ei:
        client.put("/abs", np.zeros(1))
    assert ei.value.errno == errno.EINVAL
    assert ei.value.reason


def test_alloc_refuses_a_name_publish_would_refuse(client):
    """A name the daemon refuses is refused by alloc(), before the user
    fills a loan that publish()'s refusal would take with it (it used to
    be refused at publish(), the loan then gone)."""
    for name in ("a b", "/abs", "cam//0"):
        for kw in ({}, {"format": "rgb8"}):
            shape = (2, 2, 3) if kw else (4,)
            with pytest.raises(tensord.Error, match="bad tensor name") \
                    as ei:
                client.alloc(name, shape, "u8", **kw)
            assert ei.value.errno == errno.EINVAL
            del ei
    # a good name still works, and its loan publishes
    a = client.alloc("ok/name", (4,), "u8")
    a[:] = 7
    client.publish(a)
    assert client.get("ok/name")[3] == 7


def test_bad_arguments(client):
    with pytest.raises(ValueError):
        client.alloc("bad/a", (-1, 2), "f32")
    with pytest.raises(TypeError):
        client.alloc("bad/a", ("x",), "f32")
    with pytest.raises(TypeError):
        client.alloc("bad/a", (2,), object)
    with pytest.raises(TypeError):
        client.alloc("bad/a", (2,), "bf16")
    with pytest.raises(TypeError):
        client.alloc("bad/a", (2,), None)
    with pytest.raises(ValueError):
        client.alloc("bad/a", (2,) * 17, "u8")
    with pytest.raises(ValueError):
        client.alloc("bad/a", (2, 2), "u8", strides=(1,))
    with pytest.raises(ValueError):
        client.alloc("bad/a", (2, 2), "u8", strides=(-2, 1))
    with pytest.raises(TypeError):
        client.get("bad/a", version="1")
    with pytest.raises(TypeError):
        client.get("bad/a", version=1, newer_than=0)
    with pytest.raises(ValueError, match="must be >= 0"):
        client.get("bad/a", newer_than=0, timeout=-1)
    with pytest.raises(ValueError, match="not NaN"):
        client.get("bad/a", newer_than=0, timeout=float("nan"))
    with pytest.raises(TypeError):
        client.get("bad/a", newer_than=0, timeout="soon")
    with pytest.raises(TypeError):
        client.put("bad/a", np.zeros(1), metadata=123)
    with pytest.raises(TypeError):
        client.publish(np.zeros(3))
    with pytest.raises(TypeError):
        client.ring_create("bad/r", (2,), "str")
    with pytest.raises(TypeError):
        tensord.Client(socket=123)


def test_an_empty_shape_whose_strides_overflow_says_so(client):
    """(0, 2**62) f32 has no element, but dimension 0's C-order stride
    (2**64 bytes) fits neither a numpy stride nor a blob's i64: numpy
    refuses np.empty((0, 2**62), np.float32) alike. The refusal names the
    stride, not "too big"; a shape whose strides fit works."""
    with pytest.raises(ValueError, match=r"stride of dimension 0 \(f32, "
                       r"4-byte elements\) is over 2\*\*63 - 1") as ei:
        client.alloc("bad/e", (0, 2**62), "float32")
    assert "too big" not in str(ei.value)
    with pytest.raises(ValueError, match="stride of dimension 1 "):
        client.alloc("bad/e", (3, 0, 2**62, 4), "u8")
    with pytest.raises(ValueError, match="tensor too big"):
        client.alloc("bad/e", (2**40, 2**40), "float32")
    a = client.alloc("ok/e", (0, 2**40), "float32")
    assert a.shape == (0, 2**40) and a.nbytes == 0
    client.publish(a)
    assert client.get("ok/e").shape == (0, 2**40)


def test_numpy_integers_are_integer_arguments(client):
    """np.uint64 is no int subclass, but a numpy user's versions are
    numpy's integers, as shapes and ring sizes may be: every integer
    argument takes what operator.index() takes, never a float."""
    v = client.put("bad/np", np.zeros(2))
    with client.get("bad/np", version=np.uint64(v)) as x:
        assert x.version == v
    with pytest.raises(tensord.Timeout):
        client.get("bad/np", newer_than=np.int64(v), timeout=0)
    r = client.ring_create("bad/npr", (np.int64(2),), "u8", slots=np.int8(2))
    s = r.acquire()
    s[:] = 1
    del s
    r.wait_read(np.uint32(r.publish()), timeout=1)
    client.event_limit = np.uint16(7)
    assert client.event_limit == 7 and type(client.event_limit) is int
    with pytest.raises(OverflowError):
        client.get("bad/np", version=np.int64(-1))
    with pytest.raises(TypeError, match="a version is an int"):
        client.get("bad/np", version=np.float64(1))
    with pytest.raises(TypeError, match="a version is an int"):
        client.get("bad/np", version=1.0)
    with pytest.raises(TypeError, match="event_limit must be an int"):
        client.event_limit = np.float32(3)


def test_an_empty_or_overlong_format_is_unknown_not_a_misfit(client):
    """"" and a format name of 64 bytes or more were refused as a shape
    that does not fit them (libtensord's EINVAL), the whole name in the
    message however long: they name no format at all."""
    for fmt in ("", "r" * 64, "rgb8" + "x" * 5000):
        with pytest.raises(ValueError, match="unknown image format") as ei:
            client.alloc("fmt/a", (4, 5, 3), "u8", format=fmt)
        assert len(str(ei.value)) < 300, len(str(ei.value))
    assert client.ls("fmt/") == []


def test_alloc_refuses_a_format_publish_would_refuse(client):
    """An unknown image format, or a shape that is not the format's grid,
    is refused by alloc(), naming the formats and grids, before the user
    fills a loan: it used to be refused only at publish() (an unknown
    one as ENOSYS), the loan then gone with the frame written into it.
    A multi-plane format was already checked at alloc(); a single-plane
    one was not."""
    with pytest.raises(ValueError, match='unknown image format "RGB8"') \
            as ei:
        client.alloc("fmt/a", (4, 5, 3), "u8", format="RGB8")
    known = str(ei.value).split("knows ")[1].split(" (")[0]
    known = known.replace(" and ", ", ").split(", ")
    assert "rgb8" in known and "NV12" in known
    for fmt, shape in (("rgb8", (4, 5)), ("mono8", (4, 5, 1)),
                       ("YUYV", (4, 5, 3)), ("rgba8", (4, 5, 3))):
        with pytest.raises(ValueError, match=f"not fit format {fmt}"):
            client.alloc("fmt/a", shape, "u8", format=fmt)
    # a row pitch smaller than a row, single-plane too
    with pytest.raises(ValueError, match="not fit format rgb8"):
        client.alloc("fmt/a", (4, 5, 3), "u8", strides=(12, 3, 1),
                     format="rgb8")
    assert client.ls("fmt/") == []
    # every format the message names allocates and publishes with its
    # grid: the list says what the daemon takes
    grid = {"rgb8": (4, 6, 3), "rgba8": (4, 6, 4), "bgra8": (4, 6, 4),
            "YUYV": (4, 6, 2), "VYUY": (4, 6, 2), "mono8": (4, 6),
            "NV12": (4, 6), "NV16": (4, 6), "NV24": (4, 6),
            "rgb8_planar": (3, 4, 6), "rgba8_planar": (4, 4, 6)}
    assert sorted(known) == sorted(grid)
    for fmt in known:
        w = client.alloc("fmt/" + fmt, grid[fmt], "u8", format=fmt)
        assert client.publish(w) > 0
        got = client.get("fmt/" + fmt)
        planes = {"NV12": 2, "NV16": 2, "NV24": 2, "rgb8_planar": 3,
                  "rgba8_planar": 4}.get(fmt, 1)
        if planes > 1:
            assert got.format == fmt and len(got) == planes
        else:
            assert got.shape == grid[fmt]
        got.release()


def test_publish_takes_only_this_clients_loans(daemon, client):
    client.put("bad/p", np.zeros(2))
    with pytest.raises(ValueError, match="alloc"):
        client.publish(client.get("bad/p"))
    with tensord.Client(daemon.sock) as other:
        w = other.alloc("bad/q", (2,), "u8")
        with pytest.raises(ValueError, match="alloc"):
            client.publish(w)


def test_errors_carry_errno_and_reason(client):
    with pytest.raises(tensord.NotFound) as ei:
        client.get("nope")
    e = ei.value
    assert isinstance(e, tensord.Error)
    assert e.errno == errno.ENOENT and "nope" in e.reason
    with pytest.raises(tensord.Timeout) as ei:
        client.get("nope", newer_than=0, timeout=0.01)
    assert ei.value.errno == errno.ETIMEDOUT
    # waiting for a name to appear (no newer_than=) says so, not "newer
    # than 0", a version the caller never named; a follow's first wait too
    with pytest.raises(tensord.Timeout) as ei:
        client.get("nope", timeout=0.01)
    assert "no tensor named \"nope\" appeared within 10 ms" in \
        ei.value.reason, ei.value.reason
    # a ring with no version yet is no missing tensor: its first slot
    ring = client.ring_create("empty/ring", (4,), "u8")
    with pytest.raises(tensord.Timeout) as ei:
        client.get("empty/ring", timeout=0.01)
    assert "no version of ring \"empty/ring\" appeared within 10 ms" in \
        ei.value.reason, ei.value.reason
    ring.close()
    # a slot of no bytes says so, not "no plane sizes and no dense size"
    with pytest.raises(tensord.Error) as ei:
        client.ring_create("zero/ring", (0, 4), "u8")
    assert ei.value.errno == errno.EINVAL
    assert "shape dimension 0 is 0: a slot must hold at least one byte" \
        in ei.value.reason, ei.value.reason
    with client.follow("nope") as f:
        with pytest.raises(tensord.Timeout) as ei:
            f.next(timeout=0)
    assert "no version of \"nope\" within 0 ms" in ei.value.reason, \
        ei.value.reason
    with pytest.raises(tensord.NotFound):
        client.rm("nope")
    with pytest.raises(tensord.NotFound):
        client.subscribe("nope", timeout=0)


def test_an_error_made_without_errno_has_errno_and_reason_none():
    """Every tensord.Error has .errno and .reason: None where nobody set
    them (a test's fake raising tensord.Timeout("..."), as OSError's
    errno); such an error's handler that read e.errno raised
    AttributeError instead."""
    for cls in (tensord.Error, tensord.NotFound, tensord.PermissionDenied,
                tensord.QuotaExceeded, tensord.Timeout):
        e = cls("made here")
        assert e.errno is None and e.reason is None, cls
        assert str(e) == "made here"


def test_connecting_nowhere_raises_cleanly(tmp_path):
    with pytest.raises(tensord.Error) as ei:
        tensord.Client(str(tmp_path / "none.sock"))
    assert ei.value.errno in (errno.ENOENT, errno.ECONNREFUSED)


def test_a_socket_that_never_answers_hello_raises_not_hangs(tmp_path):
    # A socket that takes the connection and never answers (another
    # program's, a stopped tensord) held Client() for ever; now
    # $TENSORD_CONNECT_TIMEOUT_MS bounds it. In a child, so that a
    # regression fails here instead of hanging the suite.
    import socket
    path = str(tmp_path / "mute.sock")
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    ls.bind(path)
    ls.listen(4)
    code = (
        "import errno, sys, tensord\n"
        "try:\n"
        "    tensord.Client(sys.argv[1])\n"
        "except tensord.Error as e:\n"
        "    print(e.errno == errno.ETIMEDOUT, e.reason)\n")
    env = child_env()
    env["TENSORD_CONNECT_TIMEOUT_MS"] = "200"
    try:
        r = subprocess.run([sys.executable, "-c", code, path], env=env,
                           capture_output=True, text=True, timeout=WAIT_S)
    finally:
        ls.close()
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("True "), r.stdout + r.stderr
    assert path in r.stdout and "did not answer HELLO within 200 ms" \
        in r.stdout, r.stdout


@pytest.mark.parametrize("daemon_args", [["--uid-max-bytes", "64K"]])
def test_quota_exceeded(client):
    with pytest.raises(tensord.QuotaExceeded) as ei:
        client.put("q/big", np.zeros(1 << 20, np.uint8))
    assert ei.value.errno in (errno.EDQUOT, errno.ENOSPC)
    client.put("q/small", np.zeros(1024, np.uint8))


DENIED = """
import errno, numpy as np, tensord
c = tensord.Client()
try:
    c.put("p/x", np.zeros(1))
except tensord.PermissionDenied as e:
    assert e.errno in (errno.EACCES, errno.EPERM) and e.reason, e
    print("denied", e.errno)
print(float(c.get("p/ok")[0]))
"""


def test_permission_denied():
    # the daemon's own uid is always allowed: a client of another uid
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another uid")
    from conftest import Daemon
    top = tempfile.mkdtemp()
    os.chmod(top, 0o755)
    policy = os.path.join(top, "policy")
    with open(policy, "w") as f:
        f.write("allow any r *\n")
    d = Daemon(pathlib.Path(top), ["--policy", policy,
                                   "--socket-mode", "0666"])
    try:
        with tensord.Client(d.sock) as c:
            c.put("p/ok", np.array([2.5]))
        r = subprocess.run([sys.executable, "-c", DENIED],
                           env=child_env(d), user=65534, group=65534,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["denied", str(errno.EACCES), "2.5"] \
            or r.stdout.split() == ["denied", str(errno.EPERM), "2.5"]
    finally:
        d.stop()
        shutil.rmtree(top)


def test_a_closed_client_raises_value_error_everywhere(client):
    client.close()
    client.close()  # idempotent
    calls = [lambda: client.put("x", np.zeros(1)),
             lambda: client.alloc("x", (1,), "u8"),
             lambda: client.get("x"), lambda: client.stat("x"),
             lambda: client.ls(), lambda: client.rm("x"),
             lambda: client.watch("x"), lambda: client.fileno(),
             lambda: client.poll(), lambda: client.info(),
             lambda: client.trim(),
             lambda: client.ring_create("r", (1,), "u8"),
             lambda: client.subscribe("r"), lambda: client.ring_stat("r")]
    for call in calls:
        with pytest.raises(ValueError, match="closed"):
            call()
    with pytest.raises(ValueError):
        with client:
            pass


def test_daemon_killed_mid_call_raises_and_views_stay(daemon, client):
    client.put("k/a", np.arange(1000, dtype=np.int32))
    a = client.get("k/a")
    t = InThread(lambda: client.get("k/a", newer_than=a.version))
    # let the waiter park in the daemon (were it not there yet, its send
    # would fail the same way: either order must raise, not crash)
    time.sleep(0.2)
    daemon.kill()
    err = t.finish().error
    assert isinstance(err, tensord.Error), err
    assert err.errno in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN,
                         errno.EPROTO)
    with pytest.raises(tensord.Error):
        client.get("k/a")
    assert int(a[999]) == 999
    a.release()
    assert int(a.sum()) == sum(range(1000))
    client.close()


def test_blocking_calls_release_the_gil(daemon, client):
    v = client.put("gil/a", np.zeros(4))
    t = InThread(lambda: client.get("gil/a", newer_than=v, timeout=60))
    # this thread runs Python (and another client) while the waiter
    # blocks: impossible if the waiter held the GIL
    with tensord.Client(daemon.sock) as other:
        other.put("gil/a", np.ones(4))
    assert t.finish().result.sum() == 4


def assert_no_growth(step):
    """10,000 steps after a warm-up leave fds, mappings and RSS as they
    were. RSS may move by allocator noise only: a leaked 4 KiB page (each
    step reads its view) or Python object per step would be 40+ MiB."""
    for _ in range(200):
        step()
    gc.collect()
    fds, memfds, maps = fd_count(), memfd_map_count(), map_count()
    rss = rss_kib()
    for _ in range(10000):
        step()
    gc.collect()
    # memfd mappings (planes, ring slots, bells: what a step could leak)
    # exactly; all mappings within allocator noise (ASan maps regions for
    # its own heap as it likes): a mapping leaked per step would be 10,000
    assert (fd_count(), memfd_map_count()) == (fds, memfds)
    assert map_count() - maps < 64, (maps, map_count())
    # under ASan freed memory sits in its quarantine (up to 256 MiB) by
    # design, so RSS says nothing there; the plain build checks it
    if not UNDER_ASAN:
        assert rss_kib() - rss < 4096, (rss, rss_kib())


def test_ten_thousand_gets_and_releases_do_not_grow(client):
    client.put("leak/a", np.arange(4096, dtype=np.float32))

    def step():
        a = client.get("leak/a")
        assert a[1] == 1.0
        a.release()

    assert_no_growth(step)
    assert client.stat("leak/a").lease_count == 0


def test_ten_thousand_ring_views_do_not_grow(client):
    ring = client.ring_create("leak/r", (1024,), "u8", slots=4)
    sub = client.subscribe("leak/r")

    def step():
        s = ring.acquire()
        s[0] = 1
        ring.publish()
        del s
        v = sub.next(10)
        assert v[0] == 1
        sub.release()

    assert_no_growth(step)
    sub.close()
    ring.close()


def test_errors_name_what_was_wrong(client):
    """A negative stride is a stride, not a dimension; a dtype with no
    blob code is named as numpy names it (np.longdouble is float128, not
    the blob's 'f16')."""
    with pytest.raises(ValueError, match="negative stride -4 at index 0"):
        client.alloc("bad/s", (4, 2), "u8", strides=(-4, 1))
    with pytest.raises(ValueError, match="negative stride -1 at index 1"):
        client.alloc("bad/s", (4, 2), "u8", strides=(2, -1))
    with pytest.raises(ValueError, match="negative dimension -1 at index 1"):
        client.alloc("bad/s", (4, -1), "u8")
    ld = np.dtype(np.longdouble)
    if ld.itemsize == 8:
        pytest.skip("np.longdouble is float64 here: f64")
    for call in (lambda: client.alloc("bad/ld", (2,), np.longdouble),
                 lambda: client.put("bad/ld", np.zeros(2, np.longdouble)),
                 lambda: client.ring_create("bad/ld", (2,), ld)):
        with pytest.raises(TypeError) as ei:
            call()
        msg = str(ei.value)
        assert ld.name in msg and "longdouble" in msg, msg
        assert "no dtype code" in msg and "'f16'" not in msg, msg
    with pytest.raises(TypeError, match="complex64: the blob has no"):
        client.put("bad/c", np.zeros(2, np.complex64))


def test_put_refusals_name_the_tensor(client):
    """A loop putting a model's state_dict learns which entry put()
    refused: its own refusals of the array (no blob dtype, too many
    dimensions, bad metadata, not an array), the array's own refusal to
    become one (torch: a tensor that requires grad, bfloat16) and the
    daemon's (a size past --max-bytes) all say put("NAME"), keeping
    their type (the original exception as __cause__). They said only
    what, not which tensor."""
    huge = np.lib.stride_tricks.as_strided(np.zeros(1), shape=(1 << 50,),
                                           strides=(0,))
    refused = {
        "sd/mask": (np.ones(3, np.bool_), {}, TypeError),
        "sd/cplx": (np.ones(3, np.complex64), {}, TypeError),
        "sd/deep": (np.zeros((1,) * 17), {}, ValueError),
        "sd/meta": (np.zeros(3), {"metadata": 5}, TypeError),
        "sd/list": ([1, 2], {}, TypeError),
        "sd/huge": (huge, {}, tensord.QuotaExceeded),
    }
    try:
        import torch
        refused["sd/grad"] = (torch.ones(3, requires_grad=True), {},
                              RuntimeError)
        refused["sd/bf16"] = (torch.ones(3, dtype=torch.bfloat16), {},
                              TypeError)
    except ImportError:
        pass  # the numpy cases still run
    for name, (arr, kw, exc) in refused.items():
        with pytest.raises(exc) as ei:
            client.put(name, arr, **kw)
        assert f'put("{name}")' in str(ei.value), (name, str(ei.value))
        with pytest.raises(tensord.NotFound):
            client.stat(name)
    assert client.put("sd/ok", np.ones(3, np.float32)) > 0


def test_ring_counts_out_of_range_raise_instead_of_wrapping(client):
    # slots=2**32 + 4 was taken as 4 (and 2**33 as 0: the default)
    for bad in (2**32 + 4, 2**33, -1):
        for kw in ("slots", "readers"):
            with pytest.raises(OverflowError):
                client.ring_create("bad/ring", (4,), "u8", **{kw: bad})
    with pytest.raises(TypeError):
        client.ring_create("bad/ring", (4,), "u8", slots=3.0)
    ring = client.ring_create("bad/ring", (4,), "u8", slots=np.int64(3),
                              readers=np.uint8(2))
    ring.close()


def test_a_format_with_a_nul_is_refused(client):
    # it was cut at the NUL: "rgb8\0x" made an rgb8 loan
    with pytest.raises(ValueError, match="NUL"):
        client.alloc("bad/fmt", (4, 4), "u8", format="rgb8\0x")
    with pytest.raises(ValueError, match="NUL"):
        client.alloc("bad/fmt", (4, 4), "u8", format="NV12\0")


def test_a_tensor_with_a_negative_stride_is_a_tensord_error(daemon, client):
    """The blob allows a negative stride (a flipped axis; a C producer
    may publish one) without saying where the first element lies: get()
    and Follow.next() raise tensord.Error naming the tensor, with an
    errno, not the ValueError of a wrong argument, and hold nothing."""
    import ctypes
    from test_fences import Error, Producer, Publish
    prod = Producer(daemon.sock)
    f = client.follow("bad/neg")
    shape = (ctypes.c_uint64 * 1)(3)
    strides = (ctypes.c_int64 * 1)(-1)
    p = Publish(name=b"bad/neg", dtype=0, ndim=1, shape=shape,
                strides=ctypes.cast(strides, ctypes.c_void_p))
    e = Error()
    assert prod.lib.td_client_put(prod.c, ctypes.byref(p), bytes(3), 3,
                                  None, ctypes.byref(e)) == 0, e.raw
    for call in (lambda: client.get("bad/neg"), lambda: f.next(timeout=5)):
        with pytest.raises(tensord.Error, match=r'"bad/neg" version 1 has '
                           r"a negative stride \(-1 bytes, dimension 0\)"
                           ) as ei:
            call()
        assert ei.value.errno == errno.EOPNOTSUPP
        del ei
    assert client.stat("bad/neg").lease_count == 0
    f.close()
    prod.close()


@pytest.mark.parametrize("dtype", [">f4", ">i2", ">u8", ">f8", ">f2",
                                   np.dtype(np.float32).newbyteorder()])
def test_a_big_endian_dtype_is_refused_not_laid_out_little(client, dtype):
    """tensord tensors are little-endian: alloc() of a big-endian dtype
    would hand back a little-endian array, whose bytes written as the
    big-endian ones asked for would be published swapped."""
    want = np.dtype(dtype).newbyteorder("<").str
    with pytest.raises(ValueError, match=f"big-endian.*ask for {want}"):
        client.alloc("bi/be", (4,), dtype)
    with pytest.raises(ValueError, match="big-endian"):
        client.ring_create("bi/ber", (4,), dtype)
    # nothing was lent or made
    assert client.ls("bi/") == []
    # little-endian, native and byte-order-free dtypes are taken
    for ok in ("<" + want[1:], "=" + want[1:], np.dtype(want), ">u1", "|i1"):
        a = client.alloc("bi/le", (4,), ok)
        assert a.dtype.isnative
        a.release()
