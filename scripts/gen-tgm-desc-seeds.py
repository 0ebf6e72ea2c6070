#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write tests/data/tgm-desc-seeds/: CBOR inputs for the fuzz-tgm-desc
target, built here from the descriptor and metadata tables of
../shared/specs/tensogram.md §15 (not copied from any upstream file):
canonical descriptors of each dtype, codec and mask variants, the
non-canonical forms the reader must accept (indefinite lengths, long
heads, tags, chunked strings), metadata maps with base/_extra_/_reserved_,
and a few broken items. Re-run after a format change:
    python3 scripts/gen-tgm-desc-seeds.py tests/data/tgm-desc-seeds
"""
import os
import struct
import sys


def head(major, n, long=False):
    if n < 24 and not long:
        return bytes([major << 5 | n])
    for ai, fmt, lim in ((24, '>B', 1 << 8), (25, '>H', 1 << 16),
                         (26, '>I', 1 << 32), (27, '>Q', 1 << 64)):
        if long and ai < 27:
            continue
        if n < lim:
            return bytes([major << 5 | ai]) + struct.pack(fmt, n)
    raise ValueError(n)


def enc(v):
    """Canonical CBOR (definite lengths, shortest heads, sorted keys)."""
    if v is True:
        return b'\xf5'
    if v is False:
        return b'\xf4'
    if v is None:
        return b'\xf6'
    if isinstance(v, int):
        return head(0, v) if v >= 0 else head(1, -1 - v)
    if isinstance(v, float):
        return b'\xfb' + struct.pack('>d', v)
    if isinstance(v, bytes):
        return head(2, len(v)) + v
    if isinstance(v, str):
        b = v.encode()
        return head(3, len(b)) + b
    if isinstance(v, list):
        return head(4, len(v)) + b''.join(enc(x) for x in v)
    if isinstance(v, dict):
        items = sorted((enc(k), enc(x)) for k, x in v.items())
        items.sort(key=lambda kv: (len(kv[0]), kv[0]))
        return head(5, len(v)) + b''.join(k + x for k, x in items)
    raise TypeError(v)


def desc(dtype='float32', shape=(4,), order='little', **kw):
    strides, s = [], 1
    for d in reversed(shape):
        strides.insert(0, s)
        s *= d
    d = dict(type='ntensor', ndim=len(shape), shape=list(shape),
             strides=strides, dtype=dtype, byte_order=order,
             encoding='none', filter='none', compression='none')
    d.update(kw)
    return d


def indefinite_map(d):
    return b'\xbf' + b''.join(enc(k) + enc(v) for k, v in d.items()) + \
        b'\xff'


seeds = {
    'desc-f32.cbor': enc(desc()),
    'desc-f64-2x3-big.cbor': enc(desc('float64', (2, 3), 'big')),
    'desc-scalar.cbor': enc(desc('int16', ())),
    'desc-zero-dim.cbor': enc(desc('uint8', (0, 5))),
    'desc-no-byte-order.cbor': enc({k: v for k, v in desc().items()
                                    if k != 'byte_order'}),
    'desc-zstd.cbor': enc(desc(compression='zstd', zstd_level=3)),
    'desc-simple-packing.cbor': enc(desc('float64', encoding='simple_packing',
                                         sp_bits_per_value=16,
                                         sp_reference_value=1.5)),
    'desc-shuffle.cbor': enc(desc(filter='shuffle', shuffle_element_size=4)),
    'desc-masks.cbor': enc(desc(masks={
        'nan': {'method': 'roaring', 'offset': 16, 'length': 8},
        'inf+': {'method': 'rle', 'offset': 24, 'length': 2,
                 'params': {'x': 1}}})),
    'desc-bfloat16.cbor': enc(desc('bfloat16')),
    'desc-bitmask.cbor': enc(desc('bitmask', (13,))),
    'desc-params-name.cbor': enc(desc(name='n', mars={'param': '2t'})),
    'desc-indefinite.cbor': indefinite_map(desc()),
    'desc-long-heads.cbor': head(5, 1, True) + head(3, 5, True) + b'shape' +
    b'\x9f' + head(0, 4, True) + b'\xff',
    'desc-tagged.cbor': b'\xd8\x18' + enc(desc()),
    'desc-chunked-text.cbor': b'\xa1\x7f\x62ty\x62pe\xff\x67ntensor',
    'desc-half-float.cbor': b'\xa1\x61x\xf9\x3c\x00',
    'desc-truncated.cbor': enc(desc())[:-3],
    'desc-forged-count.cbor': b'\x9b\x40\x00\x00\x00\x00\x00\x00\x00\x01',
    'desc-deep.cbor': b'\x81' * 40 + b'\x00',
    'desc-bad-utf8.cbor': b'\xa1\x62\xc3\x28\x00',
    'meta-base.cbor': enc({
        'base': [{'shortName': '2t', 'mars': {'param': 167, 'levtype': 'sfc'},
                  '_reserved_': {'tensor': {'ndim': 1, 'dtype': 'float32',
                                            'shape': [4], 'strides': [1]}}},
                 {'name': 'a/b', 'flag': True, 'v': -5, 'r': 0.25,
                  'blob': b'\x00\xff', 'none': None}],
        '_extra_': {'source': 'seed'},
        '_reserved_': {'encoder': {'name': 'tensord', 'version': '0'}}}),
    'meta-saved.cbor': enc({
        'base': [{'name': 'a', 'tensord_meta': 'hi\n'},
                 {'name': 'b', 'tensord_meta': b'\xff\xfe'},
                 {'name': 'c'},
                 {'name': 'd', 'tensord_meta': 'x', 'k': 1}]}),
    'meta-empty.cbor': enc({}),
    'meta-bad-base.cbor': enc({'base': 3}),
    'hash-frame.cbor': enc({'algorithm': 'xxh3',
                            'hashes': ['0123456789abcdef']}),
}

out = sys.argv[1] if len(sys.argv) > 1 else 'tests/data/tgm-desc-seeds'
os.makedirs(out, exist_ok=True)
for name, data in sorted(seeds.items()):
    with open(os.path.join(out, name), 'wb') as f:
        f.write(data)
print(f'{len(seeds)} seeds in {out}')
