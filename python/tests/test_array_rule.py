# SPDX-License-Identifier: MIT
"""docs/python.md, "Which results are tensord.Array": a result is a
tensord.Array if and only if its memory is a view of a tensor's pages
(its chain of array bases ends at a tensord.Lease); anything with memory
of its own is a plain numpy.ndarray. The exceptions are the caller's
explicit requests for the base class (np.asarray, subok=False, ...),
which numpy answers without asking the subclass."""
import pickle

import numpy as np
import pytest
import tensord
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from conftest import need_torch


def leased(client, name="ar/x", meta=b"m"):
    client.put(name, np.arange(12, dtype=np.float32).reshape(3, 4),
               metadata=meta)
    return client.get(name)


def assert_plain_copy(what, r, x):
    assert type(r) is np.ndarray, f"{what}: {type(r).__name__}"
    assert not np.shares_memory(r, x), what
    assert r.base is None or not isinstance(r.base, tensord.Lease), what
    with pytest.raises(AttributeError):
        r.version  # noqa: B018 (a plain ndarray has none)


def assert_view(what, v, x):
    assert type(v) is tensord.Array, f"{what}: {type(v).__name__}"
    assert np.shares_memory(v, x), what
    assert v.lease is x.lease, what
    # the metadata of a view are those of the tensor it views
    assert (v.version, v.metadata, v.name, v.dtype_name) == \
        (x.version, x.metadata, x.name, x.dtype_name), what


def copies_of(x):
    """Results with memory of their own, by name (values checked by the
    tests against the same operation on a plain copy)."""
    return {
        "astype": lambda x: x.astype(np.float64),
        "astype copy=False, another dtype":
            lambda x: x.astype(np.float64, copy=False),
        "astype same dtype": lambda x: x.astype(np.float32),
        "flatten": lambda x: x.flatten(),
        "take": lambda x: x.take([0, 5]),
        "take axis": lambda x: x.take([0, 2], axis=0),
        "fancy index": lambda x: x[[0, 2]],
        "fancy index 2-d": lambda x: x[[0, 1], [1, 2]],
        "boolean index": lambda x: x[x > 3],
        "repeat": lambda x: x.repeat(2),
        "argsort": lambda x: x.argsort(),
        "dot": lambda x: x.dot(x.T),
        "compress": lambda x: x.compress([True, False, True], axis=0),
        "byteswap": lambda x: x.byteswap(),
        "imag of a real array": lambda x: x.imag,
        "reshape that copies": lambda x: x.T.reshape(-1),
        "ravel of a strided view": lambda x: x[:, ::2].ravel(),
        "np.tile": lambda x: np.tile(x, 2),
        "np.unique": lambda x: np.unique(x),
        "np.take_along_axis":
            lambda x: np.take_along_axis(x, np.zeros((3, 1), int), 1),
        "np.array subok=True": lambda x: np.array(x, subok=True),
        "np.copy subok=True": lambda x: np.copy(x, subok=True),
        "np.copy": lambda x: np.copy(x),
        "np.array": lambda x: np.array(x),
        "copy": lambda x: x.copy(),
        "x + 1": lambda x: x + 1,
        "np.sqrt": lambda x: np.sqrt(x),
        "sum axis": lambda x: x.sum(axis=0),
        "cumsum": lambda x: x.cumsum(),
        "np.concatenate": lambda x: np.concatenate([x, x]),
        "np.sort": lambda x: np.sort(x),
        "einsum product": lambda x: np.einsum("ij,ij->ij", x, x),
        "pickle": lambda x: pickle.loads(pickle.dumps(x)),
        "pickle of a view": lambda x: pickle.loads(pickle.dumps(x[:, 1:])),
    }


def test_copies_are_plain_ndarrays(client):
    """Everything with memory of its own: numpy makes the ones of ndarray
    methods (astype, flatten, take, fancy indexing, ...) as the view's own
    type, which used to leave a tensord.Array without a lease."""
    x = leased(client)
    ref = np.arange(12, dtype=np.float32).reshape(3, 4)
    for what, f in copies_of(x).items():
        r = f(x)
        assert_plain_copy(what, r, x)
        np.testing.assert_array_equal(r, f(ref), err_msg=what)
        assert type(f(ref)) is np.ndarray, what
    s = x.sum()
    assert isinstance(s, np.float32) and s == 66
    # a writable loan's copies are plain too
    a = client.alloc("ar/loan", (3, 4), "f32")
    a[...] = ref
    for what, f in copies_of(a).items():
        assert_plain_copy("loan " + what, f(a), a)
    # a tensord.Array made over memory of its own is none
    assert type(np.ndarray.__new__(tensord.Array, (3,))) is np.ndarray
    assert type(np.ones(3).view(tensord.Array)) is np.ndarray
    x.release()


def test_views_are_tensord_arrays_of_the_tensor(client):
    """Every view numpy leaves the type of to the array's class, among
    them those numpy makes as plain ndarrays and hands to __array_wrap__
    (squeeze) or that a numpy function gives (a transposing einsum)."""
    x = leased(client)
    views = {
        "slice": x[1:], "step": x[:, ::2], "reversed": x[::-1],
        "index": x[0], "ellipsis": x[...], "newaxis": x[None],
        ".T": x.T, "reshape": x.reshape(4, 3), "reshape -1": x.reshape(-1),
        "view dtype": x.view(np.uint32), "view bytes": x.view(np.uint8),
        "view": x.view(), "squeeze": x[None].squeeze(),
        "squeeze axis": x[None, :, None].squeeze(0),
        "np.squeeze": np.squeeze(x[None]), "ravel": x.ravel(),
        "np.ravel": np.ravel(x), "diagonal": x.diagonal(),
        "swapaxes": x.swapaxes(0, 1), "np.transpose": np.transpose(x),
        "np.asanyarray": np.asanyarray(x),
        "np.array copy=False subok": np.array(x, copy=False, subok=True),
        "astype copy=False same dtype": x.astype(np.float32, copy=False),
        "np.expand_dims": np.expand_dims(x, 0), "np.flip": np.flip(x),
        "np.split": np.split(x, 3)[1], "rot90": np.rot90(x),
        "real": x.real, "einsum transpose": np.einsum("ij->ji", x),
        "einsum diagonal": np.einsum("ii->i", x[:, :3]),
        "broadcast_to subok": np.broadcast_to(x, (2, 3, 4), subok=True),
        "as_strided subok": as_strided(x, (2, 2), subok=True),
        "sliding_window_view subok":
            sliding_window_view(x, (2, 2), subok=True),
        "meshgrid copy=False": np.meshgrid(x[0], x[1], copy=False)[0],
        "view of np.asarray": np.asarray(x).view(tensord.Array),
    }
    for what, v in views.items():
        assert_view(what, v, x)
    assert views["squeeze"].shape == (3, 4)
    np.testing.assert_array_equal(views["einsum transpose"], x.T)
    # a view of a view keeps the lease; release() on one ends it for all
    v = views["squeeze"][1:, 1:]
    assert_view("view of a squeezed view", v, x)
    v.release()
    assert not x.lease.held


def test_explicit_requests_for_the_base_class_stay_plain_views(client):
    """np.asarray, np.ascontiguousarray, .view(np.ndarray), subok=False
    (broadcast_to, as_strided, sliding_window_view), np.asfarray,
    np.frombuffer: the caller asked numpy for a numpy.ndarray, and numpy
    makes one without asking the subclass; it is a view of the pages all
    the same (no copy), and keeps the lease alive. As a tensord.Array
    again (.view(tensord.Array)) it is the tensor's, as the subok=True
    forms are (the last two failed before: numpy's own Python code
    called __array_finalize__ and found no base through as_strided's
    holder)."""
    x = leased(client)
    for what, v in {
        "np.asarray": np.asarray(x),
        "np.ascontiguousarray": np.ascontiguousarray(x),
        "np.asfortranarray": np.asfortranarray(x.T),
        "view(np.ndarray)": x.view(np.ndarray),
        "broadcast_to": np.broadcast_to(x, (2, 3, 4)),
        "as_strided": as_strided(x, (2, 2)),
        "sliding_window_view": sliding_window_view(x, (2, 2)),
        "np.asfarray": np.asfarray(x, np.float32),
        "frombuffer": np.frombuffer(x.lease, np.float32),
    }.items():
        assert type(v) is np.ndarray, what
        assert np.shares_memory(v, x), what
    assert_view("np.asarray as Array", np.asarray(x).view(tensord.Array),
                x)
    assert_view("as_strided subok",
                as_strided(np.asarray(x), (2, 2)).view(tensord.Array), x)
    assert_view("sliding_window_view subok",
                sliding_window_view(x, (2, 2), subok=True), x)
    # no array base chain: nothing to find the tensor by
    for v in (np.frombuffer(x.lease, np.float32).view(tensord.Array),
              np.asarray(memoryview(x)).view(tensord.Array)):
        assert type(v) is np.ndarray and np.shares_memory(v, x)


def test_views_of_every_kind_of_tensor(client):
    """Loans, ring slots, ring subscribers' views and image planes: the
    views numpy used to give as plain ndarrays are tensord.Arrays whose
    metadata are the tensor's; their copies are plain."""
    a = client.alloc("ar/l", (1, 6), "i16")
    a[...] = 7
    sq = a.squeeze()
    assert type(sq) is tensord.Array and sq.lease is a.lease
    sq[0] = 1  # the loan's own writable pages
    assert a[0, 0] == 1
    v = client.publish(sq)
    assert sq.version == v == a.version
    assert type(a.astype(np.int32)) is np.ndarray

    ring = client.ring_create("ar/r", (1, 4), "f32", slots=3)
    sub = client.subscribe("ar/r")
    slot = ring.acquire(5)
    s = slot.squeeze()
    assert type(s) is tensord.Array and s.lease is slot.lease
    s[:] = [1, 2, 3, 4]
    assert type(slot[[0]]) is np.ndarray
    v = ring.publish()
    view = sub.next(5)
    for w in (view.squeeze(), np.einsum("ij->ji", view)):
        assert type(w) is tensord.Array
        assert w.lease is view.lease and w.version == v == view.version
        assert w.name == "ar/r"
    assert type(view.astype(np.float64)) is np.ndarray
    assert type(view[view > 2]) is np.ndarray
    sub.release()

    p = client.alloc("ar/nv", (4, 8), "u8", format="NV12")
    y, uv = p
    yv = y[None].squeeze()
    assert type(yv) is tensord.Array and yv.lease is y.lease
    assert yv.dtype_name == "u8" and yv.name == "ar/nv"
    assert type(y.flatten()) is np.ndarray


def test_ufunc_out_gives_back_the_out_array(client):
    """A ufunc writing into a tensor's pages (out=) gives back that very
    array: a tensord.Array, or the plain ndarray view the caller gave."""
    x = leased(client)
    a = client.alloc("ar/out", (3, 4), "f32")
    assert np.add(x, 1, out=a) is a
    assert np.multiply(x, 2, out=(a,)) is a
    tail = a[1:]
    assert np.negative(x[1:], out=tail) is tail
    a += 1
    assert type(a) is tensord.Array
    sq = a[None].squeeze()  # a view numpy makes as a plain ndarray
    assert np.add(x, 1, out=sq) is sq and type(sq) is tensord.Array
    frac = np.empty((3, 4), np.float32)
    r = np.modf(x, out=(a, frac))
    assert r[0] is a and r[1] is frac
    plain = np.asarray(a)
    assert np.add(x, 3, out=plain) is plain
    a0 = a[0, 0, ...]  # 0-d view: stays an array, not a scalar
    r0 = np.add(a0, 1, out=a0)
    assert r0 is a0 and type(r0) is tensord.Array
    o = np.empty((6, 4), np.float32)
    assert np.concatenate([x, x], out=o) is o
    want = np.arange(12, dtype=np.float32).reshape(3, 4) + 3
    want[0, 0] += 1
    np.testing.assert_array_equal(a, want)
    x.release()


def test_array_finalize_is_a_c_function_and_callable_on_arrays(client):
    """numpy finds a capsule (a C function, no Python call per view);
    numpy's own Python code and subclasses call it on arrays."""
    import types
    assert type(tensord.Array.__dict__["__array_finalize__"]).__name__ \
        == "_ArrayFinalize"
    assert type(tensord.Array.__array_finalize__).__name__ == "PyCapsule"
    x = leased(client)
    assert x.__array_finalize__(None) is None
    assert isinstance(x.__array_finalize__, types.BuiltinFunctionType)

    class Sub(tensord.Array):
        def __array_finalize__(self, obj):
            super().__array_finalize__(obj)
            self.seen = True

    s = x.view(Sub)
    assert type(s) is Sub and s.seen and s.lease is x.lease


def test_dlpack_of_the_new_views(client):
    """The views that are now tensord.Arrays export DLPack over the same
    pages; a view reaching outside the tensor's bytes is refused."""
    torch = need_torch()
    a = client.alloc("ar/dl", (1, 4), "f32")
    a[...] = [[1, 2, 3, 4]]
    t = torch.from_dlpack(a.squeeze())
    t[0] = 9
    assert a[0, 0] == 9
    x = leased(client)
    t = torch.from_dlpack(np.einsum("ij->ji", x))
    assert t.shape == (4, 3) and t[1, 0] == 1
    with pytest.raises(BufferError, match="outside"):
        as_strided(x, (4, 4), subok=True).__dlpack__()
    with pytest.raises(BufferError, match="outside"):
        as_strided(x[2:], (2, 4), subok=True).__dlpack__()
