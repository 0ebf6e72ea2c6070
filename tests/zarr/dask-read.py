#!/usr/bin/python3
"""Read tensord's Zarr v2 view over HTTP with Dask on a local cluster.

usage: dask-read.py URL EXPECT.json

URL is http://HOST:PORT/zarr-v2. EXPECT.json is the file zarrita-read.mjs
reads ({"arrays": {NAME: {"dtype", "shape", "raw"}}}): the raw files are the
bytes `tensorctl get` wrote. A dask.distributed.LocalCluster with 2 worker
processes computes, for every non-empty array, the sum of its elements (as
float64) and the maximum, from zarr arrays opened over HTTP (fsspec's HTTP
store, consolidated metadata); the same reductions over the raw bytes are
computed here with numpy, and they must be equal. Then xarray.open_zarr of
the same URL must list every array and read each with its dtype and
values as published. Debian's python3-zarr (2.x),
python3-dask, python3-distributed, python3-xarray, python3-fsspec and
python3-aiohttp; run with /usr/bin/python3. Exits 1 on any difference,
2 when a package is missing (saying which).
"""
import json
import math
import sys
import warnings

try:
    import dask.array as da
    import numpy as np
    import xarray as xr
    import zarr
    from dask.distributed import Client, LocalCluster
    import fsspec  # noqa: F401  (zarr's HTTP store)
    import aiohttp  # noqa: F401  (fsspec's HTTP backend)
except ImportError as e:
    print(f"dask-read: missing Python package: {e.name} (scripts/deps.sh "
          f"installs python3-zarr python3-dask python3-distributed "
          f"python3-xarray python3-fsspec python3-aiohttp)")
    sys.exit(2)

NUMPY = {"int8": "<i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
         "uint8": "<u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8",
         "float16": "<f2", "float32": "<f4", "float64": "<f8"}


def same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def main():
    url, exp_path = sys.argv[1], sys.argv[2]
    warnings.simplefilter("ignore", RuntimeWarning)  # inf - inf on purpose
    with open(exp_path) as f:
        expect = json.load(f)["arrays"]
    group = zarr.open_consolidated(url, mode="r")
    names = sorted(group.array_keys())
    if names != sorted(expect):
        print(f"dask-read: arrays {names}, expected {sorted(expect)}")
        return 1
    want, arrays = {}, {}
    for name, e in sorted(expect.items()):
        raw = np.fromfile(e["raw"], dtype=NUMPY[e["dtype"]])
        raw = raw.reshape(e["shape"])
        z = group[name]
        if list(z.shape) != e["shape"] or z.dtype != raw.dtype:
            print(f"dask-read: {name}: {z.dtype}{z.shape}, expected "
                  f"{raw.dtype}{tuple(e['shape'])}")
            return 1
        if raw.size == 0:
            continue
        arrays[name] = da.from_zarr(z)
        want[name] = (float(raw.astype("float64").sum()),
                      float(raw.astype("float64").max()))
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                      dashboard_address=None) as cluster, \
            Client(cluster) as client:
        workers = len(client.scheduler_info()["workers"])
        if workers != 2:
            print(f"dask-read: {workers} workers, expected 2")
            return 1
        tasks = {n: (a.astype("float64").sum(), a.astype("float64").max())
                 for n, a in arrays.items()}
        got = client.compute(tasks, sync=True)
    for name, (s, m) in sorted(want.items()):
        gs, gm = (float(x) for x in got[name])
        # float16 holds +-Infinity and NaN on purpose: NaN equals NaN here
        if not (same(gs, s) and same(gm, m)):
            print(f"dask-read: {name}: sum {gs} max {gm}, expected sum {s} "
                  f"max {m}")
            return 1
    ds = xr.open_zarr(url, consolidated=True)
    if sorted(ds.data_vars) != sorted(expect):
        print(f"dask-read: xarray lists {sorted(ds.data_vars)}, expected "
              f"{sorted(expect)}")
        return 1
    # xarray decodes a fill value as missing data: the values and dtypes
    # it gives must still be the published ones (an integer fill of 0
    # would make every 0 a NaN and the array float64)
    for name, e in sorted(expect.items()):
        raw = np.fromfile(e["raw"], dtype=NUMPY[e["dtype"]])
        got = ds[name].values
        if got.dtype != raw.dtype or not np.array_equal(
                got.reshape(-1), raw, equal_nan=raw.dtype.kind == "f"):
            print(f"dask-read: xarray {name}: {got.dtype} {got.reshape(-1)[:8]}"
                  f", expected {raw.dtype} {raw[:8]}")
            return 1
    print(f"dask-read: {url}: {len(want)} reduction(s) equal on 2 workers, "
          f"xarray lists and reads {len(expect)} array(s) as published")
    return 0


if __name__ == "__main__":
    sys.exit(main())
