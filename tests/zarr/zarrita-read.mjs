// Read a tensord Zarr v3 hierarchy with zarrita 0.7.5 and compare it with
// what the test expects (../shared/specs/zarr.md §12.3 steps 2-4).
//
// usage: node zarrita-read.mjs STORE EXPECT.json
//   STORE        a folder, or an http:// URL (FetchStore)
//   EXPECT.json  {"group_attrs": {...} (optional),
//                 "arrays": {NAME: {"dtype", "shape", "raw": FILE,
//                                   "attrs": {...} (optional)}}}
//                where FILE holds the element bytes, little-endian, C order
//                (what `tensorctl get` writes).
// Arrays are found through the consolidated metadata only; the set found
// must equal the expected set. Values are compared byte for byte (so NaN
// payloads, -0 and 64-bit integers are exact). float16/bfloat16 and complex
// are read through a store wrapper (§12.2): half types as uint16, complex
// as float pairs with an extra trailing dimension of 2. Over HTTP the chunk
// is also read by getRange (offset/length, suffix in both modes) and a
// missing key must read as undefined. Exits 1 on the first mismatch.
import * as zarr from "zarrita";
import FileSystemStore from "@zarrita/storage/fs";
import { readFileSync } from "node:fs";
import { isDeepStrictEqual } from "node:util";

const [loc, expectPath] = process.argv.slice(2);
const expect = JSON.parse(readFileSync(expectPath, "utf8"));
const http = /^https?:\/\//.test(loc);
const raw = http ? new zarr.FetchStore(loc) : new FileSystemStore(loc);

function fail(msg) {
  console.error(`zarrita-read: ${loc}: ${msg}`);
  process.exit(1);
}

// §12.2 rewrites: what zarrita 0.7.5 on Node 20 cannot decode itself.
const HALF = new Set(["float16", "bfloat16"]);
const COMPLEX = { complex64: "float32", complex128: "float64" };
function rewrite(meta) {
  if (!meta || meta.node_type !== "array") return meta;
  const m = structuredClone(meta);
  if (HALF.has(m.data_type)) {
    m.data_type = "uint16";
    m.fill_value = m.fill_value === "NaN"
      ? (meta.data_type === "bfloat16" ? 0x7fc0 : 0x7e00) : 0;
  } else if (COMPLEX[m.data_type]) {
    m.data_type = COMPLEX[m.data_type];
    m.fill_value = "NaN";
    m.shape = [...m.shape, 2];
    m.chunk_grid.configuration.chunk_shape =
      [...m.chunk_grid.configuration.chunk_shape, 2];
  }
  return m;
}
const complexArrays = new Set();
const enc = (o) => new TextEncoder().encode(JSON.stringify(o));
const dec = (b) => JSON.parse(new TextDecoder().decode(b));
const wrapped = {
  async get(key, opts) {
    // complex: the extra dimension's chunk index is dropped again
    const parts = key.split("/");
    const arr = parts[1];
    if (complexArrays.has(arr) && parts[2] === "c")
      key = parts.slice(0, -1).join("/");
    const b = await raw.get(key, opts);
    if (!b || !key.endsWith("zarr.json")) return b;
    const meta = dec(b);
    if (meta.node_type === "array") {
      if (COMPLEX[meta.data_type]) complexArrays.add(arr);
      return enc(rewrite(meta));
    }
    const cm = meta.consolidated_metadata?.metadata;
    for (const k of Object.keys(cm ?? {})) {
      if (COMPLEX[cm[k].data_type]) complexArrays.add(k);
      cm[k] = rewrite(cm[k]);
    }
    return enc(meta);
  },
};

const store = await zarr.withConsolidatedMetadata(wrapped, { format: "v3" });
const root = await zarr.open.v3(zarr.root(store), { kind: "group" });
if (expect.group_attrs && !isDeepStrictEqual(root.attrs, expect.group_attrs))
  fail(`group attributes ${JSON.stringify(root.attrs)}, expected ` +
       JSON.stringify(expect.group_attrs));
const found = store.contents().filter((c) => c.kind === "array")
  .map((c) => c.path.replace(/^\//, "")).sort();
const want = Object.keys(expect.arrays).sort();
if (!isDeepStrictEqual(found, want))
  fail(`arrays ${JSON.stringify(found)}, expected ${JSON.stringify(want)}`);

// the original metadata (before the rewrite), straight from the store
const origMeta = async (name) => dec(await raw.get(`/${name}/zarr.json`));

const TYPED = {
  int8: Int8Array, int16: Int16Array, int32: Int32Array,
  int64: BigInt64Array, uint8: Uint8Array, uint16: Uint16Array,
  uint32: Uint32Array, uint64: BigUint64Array, float32: Float32Array,
  float64: Float64Array, bool: Uint8Array,
};

function bytesOf(value, dtype) {
  if (ArrayBuffer.isView(value))
    return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  // 0-d: the bare scalar
  const T = TYPED[dtype];
  const a = new T(1);
  a[0] = dtype === "bool" ? Number(value) : value;
  return Buffer.from(a.buffer);
}

let checked = 0;
for (const name of want) {
  const e = expect.arrays[name];
  const meta = await origMeta(name);
  const arr = await zarr.open.v3(zarr.root(store).resolve(name),
                                 { kind: "array" });
  const shape = COMPLEX[meta.data_type] ? arr.shape.slice(0, -1) : arr.shape;
  if (meta.data_type !== e.dtype)
    fail(`${name}: data_type ${meta.data_type}, expected ${e.dtype}`);
  if (!isDeepStrictEqual(shape, e.shape))
    fail(`${name}: shape ${JSON.stringify(shape)}, expected ` +
         JSON.stringify(e.shape));
  if (!isDeepStrictEqual(arr.attrs, e.attrs ?? arr.attrs))
    fail(`${name}: attributes ${JSON.stringify(arr.attrs)}, expected ` +
         JSON.stringify(e.attrs));
  if (arr.dimensionNames !== undefined && arr.dimensionNames !== null &&
      !("dimension_names" in meta))
    fail(`${name}: dimension names ${arr.dimensionNames} not in zarr.json`);
  const expectFill = { f: "NaN", c: "NaN", b: false }[meta.data_type[0]] ?? 0;
  const fill = HALF.has(meta.data_type) ? meta.fill_value : arr.fillValue;
  if (!(Number.isNaN(fill) && expectFill === "NaN") &&
      !(fill === expectFill || fill === "NaN" ||
        (typeof fill === "bigint" && fill === 0n)))
    fail(`${name}: fill value ${fill}, expected ${expectFill}`);
  const expBytes = readFileSync(e.raw);
  if (shape.some((d) => d === 0)) {
    // zarrita's get() throws on zero-length dimensions (§12.2): the
    // metadata above is all there is, and there must be no bytes
    if (expBytes.length !== 0) fail(`${name}: zero-size but raw bytes`);
    checked++;
    continue;
  }
  const got = await zarr.get(arr);
  const rd = COMPLEX[meta.data_type] ?? (HALF.has(meta.data_type)
    ? "uint16" : meta.data_type);
  const gotBytes = bytesOf(shape.length ? got.data : got, rd);
  if (!gotBytes.equals(expBytes))
    fail(`${name}: values differ (${gotBytes.length} bytes read, ` +
         `${expBytes.length} expected)`);
  if (http) {
    const key = `/${name}/` + ["c", ...shape.map(() => "0")].join("/");
    const n = expBytes.length;
    const off = Math.min(4, n - 1), len = Math.min(8, n - off);
    const r1 = await raw.getRange(key, { offset: off, length: len });
    if (!r1 || !Buffer.from(r1).equals(expBytes.subarray(off, off + len)))
      fail(`${name}: getRange offset ${off} length ${len} differs`);
    for (const useSuffixRequest of [false, true]) {
      const s = new zarr.FetchStore(loc, { useSuffixRequest });
      const k = Math.min(3, n);
      const r2 = await s.getRange(key, { suffixLength: k });
      if (!r2 || !Buffer.from(r2).equals(expBytes.subarray(n - k)))
        fail(`${name}: suffix ${k} (useSuffixRequest ${useSuffixRequest})`);
    }
    if ((await raw.get(`/${name}/c/9`)) !== undefined)
      fail(`${name}: a missing key did not read as undefined`);
  }
  checked++;
}
console.log(`zarrita-read: ${loc}: ${checked} array(s) equal`);
