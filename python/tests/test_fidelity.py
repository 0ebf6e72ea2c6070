# SPDX-License-Identifier: MIT
"""dtype, shape, strides and metadata come back exactly as published."""
import numpy as np
import pytest
import tensord

from conftest import need_torch

DTYPES = ["u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f16",
          "f32", "f64"]
NUMPY = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16,
         "u32": np.uint32, "i32": np.int32, "u64": np.uint64,
         "i64": np.int64, "f16": np.float16, "f32": np.float32,
         "f64": np.float64}
# torch 1.13 has no uint16/32/64
TORCH = {"u8": "uint8", "i8": "int8", "i16": "int16", "i32": "int32",
         "i64": "int64", "f16": "float16", "f32": "float32",
         "f64": "float64"}


def sample(dtype, shape):
    n = int(np.prod(shape, dtype=np.int64))
    dt = np.dtype(dtype)
    if dt.kind in "ui":
        # random bytes, then the extremes: every byte of the type matters
        rng = np.random.default_rng(n)
        vals = np.frombuffer(rng.bytes(n * dt.itemsize), dtype=dt).copy()
        if n >= 2:
            vals[0], vals[-1] = np.iinfo(dt).min, np.iinfo(dt).max
    else:
        vals = (np.arange(n, dtype=np.float64) * 1.25 - 7).astype(dt)
    return vals.reshape(shape)


def test_the_dtype_table_names_every_blob_dtype():
    assert sorted(tensord.DTYPES) == sorted(DTYPES)
    for name, dt in tensord.DTYPES.items():
        assert dt == np.dtype(NUMPY[name])


@pytest.mark.parametrize("name", DTYPES)
def test_every_dtype_round_trips(client, name):
    src = sample(NUMPY[name], (3, 5))
    client.put("fid/" + name, src)
    got = client.get("fid/" + name)
    assert got.dtype == src.dtype
    assert got.dtype_name == name
    assert client.stat("fid/" + name).dtype == name
    np.testing.assert_array_equal(got, src)
    assert got.tobytes() == src.tobytes()
    if name in TORCH:
        torch = need_torch()
        t = torch.from_dlpack(got)
        assert t.dtype == getattr(torch, TORCH[name])
        assert t.numpy().tobytes() == src.tobytes()


@pytest.mark.parametrize("rank", range(9))
def test_rank_0_to_8_round_trips(client, rank):
    shape = tuple((2 + i % 2) for i in range(rank))
    src = sample(np.int32, shape)
    client.put(f"fid/rank{rank}", src)
    got = client.get(f"fid/rank{rank}")
    assert got.shape == shape and got.ndim == rank
    assert got.strides == src.strides
    np.testing.assert_array_equal(got, src)
    assert tuple(client.stat(f"fid/rank{rank}").shape) == shape
    torch = need_torch()
    t = torch.from_dlpack(got)
    assert tuple(t.shape) == shape
    assert torch.equal(t, torch.from_numpy(src))


@pytest.mark.parametrize("shape", [(0,), (3, 0, 2), (0, 0)])
def test_zero_size_tensors_round_trip(client, shape):
    client.put("fid/empty", np.zeros(shape, dtype=np.float32))
    got = client.get("fid/empty")
    assert got.shape == shape and got.size == 0
    assert got.dtype == np.float32
    assert client.stat("fid/empty").bytes == 0
    w = client.alloc("fid/empty2", shape, "u16")
    client.publish(w)
    assert client.get("fid/empty2").shape == shape
    assert need_torch().from_dlpack(got).shape == shape


def test_a_padded_row_pitch_is_kept(client):
    # 5 rows of 10 f32 (40 bytes) at a 64-byte pitch
    w = client.alloc("fid/pitch", (5, 10), "f32", strides=(64, 4))
    assert w.strides == (64, 4) and not w.flags.c_contiguous
    w[:] = np.arange(50, dtype=np.float32).reshape(5, 10)
    client.publish(w)
    got = client.get("fid/pitch")
    assert got.strides == (64, 4)
    assert client.stat("fid/pitch").bytes == 4 * 64 + 40
    np.testing.assert_array_equal(
        got, np.arange(50, dtype=np.float32).reshape(5, 10))
    torch = need_torch()
    t = torch.from_dlpack(got)
    assert t.stride() == (16, 1)
    assert torch.equal(t, torch.arange(50, dtype=torch.float32)
                       .reshape(5, 10))


def test_an_image_row_pitch_travels_as_the_plane_stride(client):
    # a camera-style rgb8 frame: 4 rows of 5 pixels, rows 32 bytes apart
    want = np.arange(60, dtype=np.uint8).reshape(4, 5, 3)
    w = client.alloc("fid/img", (4, 5, 3), "u8", strides=(32, 3, 1),
                     format="rgb8")
    w[:] = want
    client.publish(w)
    got = client.get("fid/img")
    assert got.strides == (32, 3, 1)
    assert client.stat("fid/img").bytes == 3 * 32 + 15
    np.testing.assert_array_equal(got, want)
    t = need_torch().from_dlpack(got)
    assert t.stride() == (32, 3, 1)
    assert t.numpy().tobytes() == want.tobytes()


def test_an_image_without_strides_publishes_its_rows_packed(client):
    # alloc(format="rgb8") with no row pitch: rows packed, as a camera's
    # 1920x1080 frame; it used to be refused at publish (the plane's
    # stride defaulted to its size: "its layout needs ...")
    want = np.arange(60, dtype=np.uint8).reshape(4, 5, 3)
    w = client.alloc("fid/packed", (4, 5, 3), "u8", format="rgb8")
    w[:] = want
    client.publish(w)
    got = client.get("fid/packed")
    assert got.strides == (15, 3, 1)
    np.testing.assert_array_equal(got, want)
    client.put("fid/packed2", want)  # no format: no image, as before
    assert client.get("fid/packed2").strides == (15, 3, 1)


def test_image_formats_refuse_what_they_cannot_say(client):
    with pytest.raises(ValueError, match="first stride"):
        client.alloc("fid/img2", (4, 5, 3), "u8", strides=(32, 4, 1),
                     format="rgb8")
    with pytest.raises(TypeError):
        client.alloc("fid/img2", (4, 5, 3), "u8", format=3)
    with pytest.raises(ValueError):
        client.alloc("fid/img2", (4,), "u8", format="mono8")
    # refused before the loan is filled (test_bad_input.py,
    # test_alloc_refuses_a_format_publish_would_refuse)
    with pytest.raises(ValueError, match="unknown image format"):
        client.alloc("fid/img2", (4, 5), "u8", format="no-such-format")


def test_a_non_contiguous_array_is_copied_in_c_order(client):
    base = np.arange(6 * 8, dtype=np.int16).reshape(6, 8)
    src = base[::2, ::-1].T  # strided, reversed, transposed
    assert not src.flags.c_contiguous
    client.put("fid/nc", src)
    got = client.get("fid/nc")
    assert got.flags.c_contiguous
    assert got.shape == src.shape
    np.testing.assert_array_equal(got, src)


@pytest.mark.parametrize("dtype", [">f8", ">f4", ">i2", ">u8", ">f2"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_big_endian_array_is_stored_native(client, dtype, stream):
    """put() copies values, not bytes: a big-endian array (strided too)
    is published as the same values in the tensor's little-endian bytes,
    never swapped (alloc() refuses a big-endian dtype: test_bad_input)."""
    src = (np.arange(12) - 5).astype(dtype).reshape(3, 4)
    for arr in (src, src[:, ::2].T):
        client.put("fid/be", arr, stream=stream)
        got = client.get("fid/be")
        assert got.dtype == arr.dtype.newbyteorder("=") and \
            got.dtype.isnative
        np.testing.assert_array_equal(got, arr)
        assert got.tobytes() == arr.astype(
            arr.dtype.newbyteorder("<")).tobytes()
        got.release()


def test_buffer_protocol_objects_are_accepted(client):
    client.put("fid/bytes", bytearray(b"\x01\x02\x03"))
    assert client.get("fid/bytes").tolist() == [1, 2, 3]
    client.put("fid/mv", memoryview(np.arange(4, dtype=np.float32)))
    assert client.get("fid/mv").tolist() == [0.0, 1.0, 2.0, 3.0]


def test_bytes_are_put_as_the_buffer_they_are(client):
    """numpy makes one string scalar (dtype S3) of bytes: put() takes
    their buffer, u8, as it takes a bytearray's."""
    client.put("fid/b", b"\x01\x02\x03")
    got = client.get("fid/b")
    assert got.dtype == np.uint8 and got.tolist() == [1, 2, 3]
    client.put("fid/b", b"")
    assert client.get("fid/b").shape == (0,)


@pytest.mark.parametrize("meta", [b"", b"\x00\xff\x00binary\n",
                                  bytes(range(256)) * 16])
def test_metadata_bytes_round_trip(client, meta):
    client.put("fid/meta", np.zeros(1), metadata=meta)
    got = client.get("fid/meta")
    assert got.metadata == meta
    assert client.stat("fid/meta").metadata == meta
    w = client.alloc("fid/meta2", (1,), "u8")
    client.publish(w, metadata=meta)
    assert client.get("fid/meta2").metadata == meta
    assert w.metadata == meta


def test_str_metadata_is_utf8(client):
    client.put("fid/smeta", np.zeros(1), metadata="grüße")
    assert client.get("fid/smeta").metadata == "grüße".encode()


def test_versions_and_lookup_by_version(client):
    v1 = client.put("fid/v", np.array([1]))
    held = client.get("fid/v")  # a leased version stays reachable
    v2 = client.put("fid/v", np.array([2]))
    assert v2 > v1
    assert client.get("fid/v").version == v2
    assert int(client.get("fid/v", version=v1)[0]) == 1
    held.release()
    with pytest.raises(tensord.NotFound):
        client.get("fid/v", version=v1)
    assert int(client.get("fid/v", newer_than=v1)[0]) == 2
    with pytest.raises(tensord.Timeout):
        client.get("fid/v", newer_than=v2, timeout=0)


def test_ls_and_rm(client):
    va = client.put("ls/a", np.zeros(2, np.uint8), pin=True)
    client.put("ls/b", np.zeros((2, 3), np.float32))
    client.put("other", np.zeros(1))
    names = [e.name for e in client.ls("ls/")]
    assert names == ["ls/a", "ls/b"]
    e = client.ls("ls/")[1]
    assert e.shape == (2, 3) and e.dtype == "f32" and e.bytes == 24
    assert client.ls("ls/")[0].flags & tensord.ENTRY_PIN
    assert len(client.ls()) == 3
    assert client.rm("ls/a") == va
    with pytest.raises(tensord.NotFound):
        client.stat("ls/a")


def test_metadata_of_any_buffer_is_taken_in_c_order(client):
    """metadata takes any buffer: one that is not a C-contiguous run of
    bytes (a strided memoryview, a Fortran-order array) is copied in C
    order, as bytes(obj) would."""
    raw = bytearray(b"abcdefgh")
    mv = memoryview(raw)[::2]
    assert not mv.contiguous
    client.put("fid/mvmeta", np.zeros(1), metadata=mv)
    assert client.get("fid/mvmeta").metadata == b"aceg"
    f = np.asfortranarray(np.arange(6, dtype=np.uint8).reshape(2, 3))
    w = client.alloc("fid/mvmeta2", (1,), "u8")
    client.publish(w, metadata=f)
    assert client.get("fid/mvmeta2").metadata == bytes(f) == \
        bytes([0, 1, 2, 3, 4, 5])
    with pytest.raises(TypeError, match="bytes-like"):
        client.put("fid/mvmeta", np.zeros(1), metadata=[1, 2])

