#!/usr/bin/env python3
"""Strict structure check of a tensord Zarr v3 hierarchy (zarr.md §12.3 step 1).

usage: zarr-check.py DIR | http://HOST:PORT/zarr

Standard library only. A folder is walked completely: every node must have
a strict-JSON zarr.json with the members the spec requires, every array
folder must hold exactly its one chunk key with exactly prod(shape) *
itemsize bytes, and nothing else may be there. Over HTTP nothing can be
listed: the arrays come from the root's consolidated metadata, each
array's zarr.json must equal its consolidated entry, its chunk key must
answer with the right Content-Length, and the rules of §10 are checked on
it (HEAD, Range -> 206 + Content-Range, bytes=-0 -> 416, directory-like
keys -> 404). Prints one line per problem and exits 1 when there is any.
"""
import json
import os
import re
import sys
import urllib.error
import urllib.request

ITEMSIZE = {"bool": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8,
            "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
            "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
            "complex64": 8, "complex128": 16}
ARRAY_MEMBERS = {"zarr_format", "node_type", "shape", "data_type",
                 "chunk_grid", "chunk_key_encoding", "fill_value", "codecs",
                 "attributes", "dimension_names", "storage_transformers"}
GROUP_MEMBERS = {"zarr_format", "node_type", "attributes",
                 "consolidated_metadata"}
INT_RANGE = {"int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1),
             "int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1),
             "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1),
             "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1)}

problems = []


def bad(where, what):
    problems.append(f"{where}: {what}")


def strict_json(raw, where):
    def no_const(tok):
        raise ValueError(f"bare {tok} token")
    try:
        text = raw.decode("utf-8")
        return json.loads(text, parse_constant=no_const)
    except (UnicodeDecodeError, ValueError) as e:
        bad(where, f"not strict JSON: {e}")
        return None


def node_name_ok(name):
    return (name != "" and "/" not in name and name.strip(".") != ""
            and not name.startswith("__") and name != "zarr.json")


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def float_fill_ok(v):
    if isinstance(v, str):
        return v in ("NaN", "Infinity", "-Infinity")  # never hex (§8)
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fill_ok(dt, v):
    if dt == "bool":
        return isinstance(v, bool)
    if dt in INT_RANGE:
        lo, hi = INT_RANGE[dt]
        return is_int(v) and lo <= v <= hi and abs(v) <= 2**53
    if dt.startswith("complex"):
        return (isinstance(v, list) and len(v) == 2
                and all(float_fill_ok(x) for x in v))
    return float_fill_ok(v)


def unknown_members(meta, known, where):
    for k, v in meta.items():
        if k not in known and not (isinstance(v, dict)
                                   and v.get("must_understand") is False):
            bad(where, f"unknown top-level member {k!r}")


def check_node(meta, where):
    """Common checks; returns the node type or None."""
    if not isinstance(meta, dict):
        bad(where, "zarr.json is not an object")
        return None
    if not is_int(meta.get("zarr_format")) or meta["zarr_format"] != 3:
        bad(where, "zarr_format is not the integer 3")
    nt = meta.get("node_type")
    if nt not in ("group", "array"):
        bad(where, f"node_type {nt!r}")
        return None
    return nt


def check_group(meta, where):
    unknown_members(meta, GROUP_MEMBERS, where)
    if not isinstance(meta.get("attributes", {}), dict):
        bad(where, "group attributes is not an object")


def expected_chunk(meta):
    """(key, size) of the one chunk, key None for zero-size arrays."""
    shape = meta["shape"]
    size = ITEMSIZE[meta["data_type"]]
    for d in shape:
        size *= d
    if any(d == 0 for d in shape):
        return None, 0
    return "/".join(["c"] + ["0"] * len(shape)), size


def check_array(meta, where):
    """Returns True when the array metadata is usable for chunk checks."""
    unknown_members(meta, ARRAY_MEMBERS, where)
    for m in ("shape", "data_type", "chunk_grid", "chunk_key_encoding",
              "fill_value", "codecs"):
        if m not in meta:
            bad(where, f"mandatory member {m!r} missing")
    shape = meta.get("shape")
    if not (isinstance(shape, list) and all(is_int(d) and d >= 0
                                            for d in shape)):
        bad(where, "shape is not a list of integers >= 0")
        return False
    dt = meta.get("data_type")
    if dt not in ITEMSIZE:
        bad(where, f"data_type {dt!r} unknown")
        return False
    cg = meta.get("chunk_grid")
    want = [d if d else 1 for d in shape]
    if (not isinstance(cg, dict) or cg.get("name") != "regular"
            or set(cg) != {"name", "configuration"}
            or cg["configuration"].get("chunk_shape") != want):
        bad(where, f"chunk_grid is not regular with chunk_shape {want}")
    cke = meta.get("chunk_key_encoding")
    if cke != {"name": "default", "configuration": {"separator": "/"}}:
        bad(where, f"chunk_key_encoding {cke!r}")
    codecs = meta.get("codecs")
    if (not isinstance(codecs, list) or len(codecs) != 1
            or not isinstance(codecs[0], dict)
            or codecs[0].get("name") != "bytes"
            or set(codecs[0]) != {"name", "configuration"}):
        bad(where, f"codecs is not exactly one bytes codec: {codecs!r}")
    else:
        conf = codecs[0]["configuration"]
        endian = conf.get("endian")
        if ITEMSIZE[dt] > 1 and endian not in ("little", "big"):
            bad(where, "bytes codec has no endian for a multi-byte type")
        if set(conf) - {"endian"}:
            bad(where, f"bytes codec configuration {conf!r}")
    if "fill_value" in meta and not fill_ok(dt, meta["fill_value"]):
        bad(where, f"fill_value {meta['fill_value']!r} not valid for {dt}")
    dn = meta.get("dimension_names")
    if dn is not None and (not isinstance(dn, list) or len(dn) != len(shape)):
        bad(where, "dimension_names length differs from the rank")
    if not isinstance(meta.get("attributes", {}), dict):
        bad(where, "attributes is not an object")
    return True


def check_root(root):
    """The root group's checks; its consolidated metadata, or None."""
    if check_node(root, "/") != "group":
        bad("/", "the root is not a group")
        return None
    check_group(root, "/")
    cm = root.get("consolidated_metadata", {}).get("metadata")
    if not isinstance(cm, dict):
        bad("/", "no inline consolidated metadata")
        return None
    return cm


def files_under(path):
    out = set()
    for root, dirs, files in os.walk(path):
        for f in files:
            out.add(os.path.relpath(os.path.join(root, f), path))
    return out


def check_dir(top):
    def read_meta(p, where):
        try:
            with open(os.path.join(p, "zarr.json"), "rb") as f:
                return strict_json(f.read(), where)
        except OSError as e:
            bad(where, f"no zarr.json ({e.strerror})")
            return None

    cm = check_root(read_meta(top, "/"))
    if cm is None:
        return
    children = set()
    for name in sorted(os.listdir(top)):
        p = os.path.join(top, name)
        if name == "zarr.json":
            continue
        if not os.path.isdir(p):
            bad("/", f"a group holds a file other than zarr.json: {name}")
            continue
        children.add(name)
        if not node_name_ok(name):
            bad(name, "invalid node name")
        meta = read_meta(p, name)
        nt = check_node(meta, name)
        if nt == "group":
            check_group(meta, name)
            bad(name, "tensord hierarchies have no nested groups")
            continue
        if nt != "array" or not check_array(meta, name):
            continue
        if cm.get(name) != meta:
            bad(name, "zarr.json differs from the consolidated entry")
        key, size = expected_chunk(meta)
        want = {"zarr.json"} | ({key} if key else set())
        have = files_under(p)
        if have != want:
            bad(name, f"files {sorted(have)}, expected {sorted(want)}")
        elif key and os.path.getsize(os.path.join(p, key)) != size:
            bad(name, f"chunk {key} is {os.path.getsize(os.path.join(p, key))}"
                      f" bytes, expected {size}")
    if set(cm) != children:
        bad("/", f"consolidated metadata lists {sorted(cm)}, folders are "
                 f"{sorted(children)}")


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None


opener = urllib.request.build_opener(NoRedirect)


def http(url, method="GET", headers=None):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def check_http(base):
    base = base.rstrip("/")
    st, _, body = http(base + "/zarr.json")
    if st != 200:
        bad("/", f"GET zarr.json -> {st}")
        return
    cm = check_root(strict_json(body, "/"))
    if cm is None:
        return
    for name, cmeta in sorted(cm.items()):
        if not node_name_ok(name):
            bad(name, "invalid node name")
        url = f"{base}/{urllib.request.quote(name)}"
        st, _, body = http(url + "/zarr.json")
        if st != 200:
            bad(name, f"GET zarr.json -> {st}")
            continue
        meta = strict_json(body, name)
        if check_node(meta, name) != "array" or not check_array(meta, name):
            continue
        if meta != cmeta:
            bad(name, "zarr.json differs from the consolidated entry")
        # "/c" is the chunk itself for a 0-d array (zarr.md §7)
        for dirlike in ("", "/") + (("/c",) if meta["shape"] else ()):
            st, _, _ = http(url + dirlike)
            if st != 404:
                bad(name, f"directory-like key {name}{dirlike} -> {st}")
        key, size = expected_chunk(meta)
        if key is None:
            st, _, _ = http(url + "/c/0")
            if st != 404:
                bad(name, f"zero-size array answers a chunk key ({st})")
            continue
        st, h, body = http(f"{url}/{key}", "HEAD")
        if st != 200 or int(h.get("Content-Length", -1)) != size:
            bad(name, f"HEAD {key} -> {st}, Content-Length "
                      f"{h.get('Content-Length')}, expected {size}")
        st, h, body = http(f"{url}/{key}")
        if st != 200 or len(body) != size:
            bad(name, f"GET {key} -> {st}, {len(body)} bytes, expected {size}")
            continue
        if size >= 12:
            st, h, part = http(f"{url}/{key}", headers={"Range": "bytes=4-11"})
            if (st != 206 or part != body[4:12]
                    or h.get("Content-Range") != f"bytes 4-11/{size}"):
                bad(name, f"Range bytes=4-11 -> {st} {h.get('Content-Range')}")
        st, h, part = http(f"{url}/{key}", headers={"Range": "bytes=-3"})
        if st != 206 or part != body[-3:]:
            bad(name, f"Range bytes=-3 -> {st}")
        st, h, _ = http(f"{url}/{key}", headers={"Range": "bytes=-0"})
        if st != 416 or h.get("Content-Range") != f"bytes */{size}":
            bad(name, f"Range bytes=-0 -> {st} {h.get('Content-Range')}")
        st, h, _ = http(f"{url}/{key}", headers={"Range": f"bytes={size}-"})
        if st != 416:
            bad(name, f"Range bytes={size}- -> {st}")


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    target = sys.argv[1]
    if re.match(r"^https?://", target):
        check_http(target)
    else:
        check_dir(target)
    for p in problems:
        print(p)
    print(f"zarr-check: {target}: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
