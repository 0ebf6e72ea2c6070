/* SPDX-License-Identifier: MIT */
/*
 * The Hurray reader core (specs/hurray.md §13, §17.1): open as a sequence
 * of needs (header, trailer, index, memory, KV, memory), each range
 * validated before it is asked for; then pure per-tensor checks, name
 * lookup by binary search and the composite walk. No I/O, no allocation:
 * working memory is asked of the driver, sized from lengths already
 * bounded by the file size and by the TD_HRRY_MAX_* caps.
 */
#include "hrry.h"

#include <errno.h>
#include <string.h>

#include "bytes.h"

enum {
	S_HEADER,
	S_TRAILER,
	S_INDEX,
	S_INDEX_MEM,
	S_KV,
	S_KV_MEM,
	S_DONE,
	S_FAILED,
};

#define ENTRY_MIN 35 /* name_len 2 + name >= 1 + 32 fixed */

void td_hrry_rcore_init(struct td_hrry_rcore *c, uint64_t file_size)
{
	memset(c, 0, sizeof(*c));
	c->file_size = file_size;
	c->state = S_HEADER;
}

static int fail(struct td_hrry_rcore *c, struct td_hrry_err *err,
		enum td_hrry_error kind, uint64_t off, const char *reason)
{
	c->state = S_FAILED;
	return td__hrry_fail(err, kind, off, reason);
}

static void want(struct td_hrry_rcore *c, enum td_hrry_need_kind kind,
		 uint64_t off, uint64_t len)
{
	c->need.kind = kind;
	c->need.offset = off;
	c->need.len = len;
}

int td_hrry_rcore_step(struct td_hrry_rcore *c, struct td_hrry_need *need,
		       struct td_hrry_err *err)
{
	switch (c->state) {
	case S_DONE:
		return TD_HRRY_STEP_DONE;
	case S_FAILED:
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "reader core already failed");
	case S_HEADER:
		if (c->file_size < TD_HRRY_MIN_FILE_LEN)
			return fail(c, err, TD_HRRY_E_INVALID_HEADER, 0,
				    "file shorter than 104 bytes (header + "
				    "trailer)");
		want(c, TD_HRRY_NEED_READ, 0, TD_HRRY_HEADER_LEN);
		break;
	default:
		break; /* need set by the previous supply */
	}
	*need = c->need;
	return TD_HRRY_STEP_NEED;
}

static bool pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

static int header(struct td_hrry_rcore *c, const uint8_t *h,
		  struct td_hrry_err *err)
{
	if (memcmp(h, "HRRYFILE", 8))
		return fail(c, err, TD_HRRY_E_INVALID_FILE_MAGIC, 0,
			    "file magic is not HRRYFILE");
	if (h[8] != 1)
		return fail(c, err, TD_HRRY_E_UNSUPPORTED_CONTAINER_VERSION, 8,
			    "container major version is not 1");
	c->minor = h[9];
	c->file_flags = td__le32(h + 12);
	if (c->file_flags >> 3)
		return fail(c, err, TD_HRRY_E_RESERVED_FILE_FLAG_BITS, 12,
			    "reserved file flag bits set");
	if (h[10] || h[11])
		return fail(c, err, TD_HRRY_E_RESERVED_BYTES_NON_ZERO, 10,
			    "header bytes 10-11 are not zero");
	for (int i = 36; i < 64; i++)
		if (h[i])
			return fail(c, err, TD_HRRY_E_RESERVED_BYTES_NON_ZERO,
				    (uint64_t)i,
				    "header bytes 36-63 are not zero");
	c->alignment = td__le32(h + 16);
	if (!pow2(c->alignment) || c->alignment < TD_HRRY_MIN_ALIGNMENT ||
	    c->alignment > TD_HRRY_MAX_ALIGNMENT)
		return fail(c, err, TD_HRRY_E_INVALID_HEADER, 16,
			    "data_buffer_alignment is not a power of two in "
			    "[4096, 2 MiB]");
	c->first_descriptor_offset = td__le64(h + 20);
	if (c->first_descriptor_offset < 64 || c->first_descriptor_offset % 8)
		return fail(c, err, TD_HRRY_E_INVALID_HEADER, 20,
			    "first_descriptor_offset below 64 or not "
			    "8-aligned");
	c->tensor_count_hint = td__le64(h + 28);
	want(c, TD_HRRY_NEED_READ, c->file_size - TD_HRRY_TRAILER_LEN,
	     TD_HRRY_TRAILER_LEN);
	c->state = S_TRAILER;
	return 0;
}

static int trailer(struct td_hrry_rcore *c, const uint8_t *t,
		   struct td_hrry_err *err)
{
	uint64_t base = c->file_size - TD_HRRY_TRAILER_LEN, end;
	if (memcmp(t + 36, "HRRY", 4))
		return fail(c, err, TD_HRRY_E_INVALID_TRAILER_MAGIC, base + 36,
			    "trailer magic is not HRRY");
	if (td__le32(t + 32))
		return fail(c, err, TD_HRRY_E_RESERVED_BYTES_NON_ZERO,
			    base + 32, "trailer reserved word is not zero");
	c->index_offset = td__le64(t);
	c->index_length = td__le64(t + 8);
	c->kv_offset = td__le64(t + 16);
	c->kv_length = td__le32(t + 24);
	c->index_crc32c = td__le32(t + 28);
	if (td__add_ovf(c->index_offset, c->index_length, &end) || end > base)
		return fail(c, err, TD_HRRY_E_INDEX_OVERRUNS_TRAILER, base,
			    "index_offset + index_length runs into the "
			    "trailer");
	if (c->index_offset < 64 || c->index_offset % 8 ||
	    c->index_length < 8)
		return fail(c, err, TD_HRRY_E_INVALID_HEADER, base,
			    "index_offset below 64 or not 8-aligned, or "
			    "index_length below 8");
	if (!c->kv_offset != !c->kv_length)
		return fail(c, err, TD_HRRY_E_INVALID_HEADER, base + 16,
			    "exactly one of kv_offset and kv_length is 0");
	if ((c->file_flags & TD_HRRY_FILE_HAS_KV_METADATA) && !c->kv_offset)
		return fail(c, err, TD_HRRY_E_INVALID_HEADER, 12,
			    "HAS_KV_METADATA set but the trailer has no KV");
	if (c->kv_offset &&
	    (c->kv_offset < 64 || c->kv_offset % 8 ||
	     td__add_ovf(c->kv_offset, c->kv_length, &end) ||
	     end > c->index_offset))
		return fail(c, err, TD_HRRY_E_INVALID_HEADER, base + 16,
			    "KV section below 64, not 8-aligned, or past the "
			    "index");
	if (!(c->file_flags & TD_HRRY_FILE_HAS_INDEX_CRC32C) &&
	    c->index_crc32c)
		return fail(c, err, TD_HRRY_E_INVALID_HEADER, base + 28,
			    "index_crc32c set while HAS_INDEX_CRC32C is clear");
	/* Both are read whole and kept: a sparse file of any apparent size
	 * may declare any length, so the cap comes before the request. */
	if (c->index_length > TD_HRRY_MAX_INDEX_LEN)
		return fail(c, err, TD_HRRY_E_TOO_LARGE, base + 8,
			    "index_length over tensord's 512 MiB cap");
	if (c->kv_length > TD_HRRY_MAX_KV_LEN)
		return fail(c, err, TD_HRRY_E_TOO_LARGE, base + 24,
			    "kv_length over tensord's 1 GiB cap");
	want(c, TD_HRRY_NEED_READ, c->index_offset, c->index_length);
	c->state = S_INDEX;
	return 0;
}

/* ---- heapsort of u32 entry numbers (no allocation) ---- */

static void sift(const void *ctx, uint32_t *v, uint64_t n, uint64_t i,
		 td__hrry_cmp_fn cmp)
{
	for (;;) {
		uint64_t l = 2 * i + 1, m = i;
		if (l < n && cmp(ctx, v[l], v[m]) > 0)
			m = l;
		if (l + 1 < n && cmp(ctx, v[l + 1], v[m]) > 0)
			m = l + 1;
		if (m == i)
			return;
		uint32_t t = v[i];
		v[i] = v[m];
		v[m] = t;
		i = m;
	}
}

void td__hrry_heapsort(const void *ctx, uint32_t *v, uint64_t n,
		       td__hrry_cmp_fn cmp)
{
	for (uint64_t i = n / 2; i-- > 0;)
		sift(ctx, v, n, i, cmp);
	for (uint64_t e = n; e-- > 1;) {
		uint32_t t = v[0];
		v[0] = v[e];
		v[e] = t;
		sift(ctx, v, e, 0, cmp);
	}
}

static int bytes_cmp(const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
	int r = memcmp(a, b, al < bl ? al : bl);
	if (r)
		return r;
	return al < bl ? -1 : al > bl;
}

static int name_cmp(const void *ctx, uint32_t a, uint32_t b)
{
	const struct td_hrry_rcore *c = ctx;
	const uint8_t *pa = c->index + c->entry_off[a];
	const uint8_t *pb = c->index + c->entry_off[b];
	return bytes_cmp(pa + 2, td__le16(pa), pb + 2, td__le16(pb));
}

static uint64_t entry_desc_off(const struct td_hrry_rcore *c, uint32_t i)
{
	const uint8_t *p = c->index + c->entry_off[i];
	return td__le64(p + 2 + td__le16(p));
}

static int offset_cmp(const void *ctx, uint32_t a, uint32_t b)
{
	const struct td_hrry_rcore *c = ctx;
	uint64_t x = entry_desc_off(c, a), y = entry_desc_off(c, b);
	return x < y ? -1 : x > y;
}

static int index_head(struct td_hrry_rcore *c, const uint8_t *ix,
		      struct td_hrry_err *err)
{
	if ((c->file_flags & TD_HRRY_FILE_HAS_INDEX_CRC32C) &&
	    td_hrry_crc32c(0, ix, c->index_length) != c->index_crc32c)
		return fail(c, err, TD_HRRY_E_INDEX_CRC32C_MISMATCH,
			    c->index_offset,
			    "CRC-32C of the index does not match the trailer");
	c->index = ix;
	c->entry_count = td__le64(ix);
	if (c->entry_count > (c->index_length - 8) / ENTRY_MIN ||
	    c->entry_count > UINT32_MAX)
		return fail(c, err, TD_HRRY_E_INVALID_HEADER, c->index_offset,
			    "entry_count larger than the index can hold");
	/* entry_off u64, by_name u32, by_offset u32 per entry: bounded by
	 * index_length / 35 * 16, below the index's own size. */
	want(c, TD_HRRY_NEED_MEMORY, 0, c->entry_count * 16);
	c->state = S_INDEX_MEM;
	return 0;
}

static int index_body(struct td_hrry_rcore *c, void *mem,
		      struct td_hrry_err *err)
{
	const uint8_t *ix = c->index;
	uint64_t n = c->entry_count, pos = 8, len = c->index_length;
	uint64_t io = c->index_offset;
	c->entry_off = mem;
	c->by_name = (uint32_t *)(c->entry_off + n);
	c->by_offset = c->by_name + n;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t at = pos;
		if (len - pos < 2)
			return fail(c, err, TD_HRRY_E_INVALID_HEADER, io + pos,
				    "index entry truncated");
		uint16_t nl = td__le16(ix + pos);
		if (nl == 0)
			return fail(c, err, TD_HRRY_E_TENSOR_NAME_EMPTY,
				    io + pos, "index entry with an empty name");
		if (len - pos - 2 < (uint64_t)nl + 32)
			return fail(c, err, TD_HRRY_E_INVALID_HEADER, io + pos,
				    "index entry truncated");
		if (!td__utf8_valid(ix + pos + 2, nl))
			return fail(c, err, TD_HRRY_E_INVALID_HEADER,
				    io + pos + 2,
				    "tensor name is not valid UTF-8");
		if (td__le32(ix + pos + 2 + nl + 28))
			return fail(c, err, TD_HRRY_E_INVALID_HEADER,
				    io + pos + 2 + nl + 28,
				    "index entry flags are not zero");
		c->entry_off[i] = at;
		c->by_name[i] = (uint32_t)i;
		c->by_offset[i] = (uint32_t)i;
		pos += 2 + (uint64_t)nl + 32;
	}
	td__hrry_heapsort(c, c->by_name, n, name_cmp);
	for (uint64_t i = 1; i < n; i++)
		if (!name_cmp(c, c->by_name[i - 1], c->by_name[i]))
			return fail(c, err, TD_HRRY_E_DUPLICATE_TENSOR_NAME,
				    io + c->entry_off[c->by_name[i]],
				    "two index entries have the same name");
	if (pos != len)
		return fail(c, err, TD_HRRY_E_INVALID_HEADER, io + pos,
			    "index entries do not fill index_length");
	if (c->file_flags & TD_HRRY_FILE_SORTED_INDEX)
		for (uint64_t i = 1; i < n; i++)
			if (name_cmp(c, (uint32_t)(i - 1), (uint32_t)i) >= 0)
				return fail(c, err, TD_HRRY_E_INVALID_HEADER,
					    io + c->entry_off[i],
					    "SORTED_INDEX set but names are "
					    "not strictly increasing");
	uint64_t limit = c->kv_offset ? c->kv_offset : c->index_offset;
	for (uint64_t i = 0; i < n; i++) {
		struct td_hrry_entry e;
		uint64_t end;
		td_hrry_rcore_entry(c, i, &e);
		uint64_t at = io + c->entry_off[i] + 2 + e.name_len;
		if (e.descriptor_offset < c->first_descriptor_offset ||
		    e.descriptor_offset % 8 || e.descriptor_length < 20 ||
		    td__add_ovf(e.descriptor_offset, e.descriptor_length,
				&end) ||
		    end > limit ||
		    td__add_ovf(e.data_offset, e.data_length, &end) ||
		    end > limit)
			return fail(c, err, TD_HRRY_E_INVALID_HEADER, at,
				    "index entry: descriptor or data range "
				    "out of place");
	}
	td__hrry_heapsort(c, c->by_offset, n, offset_cmp);
	if (c->kv_offset) {
		want(c, TD_HRRY_NEED_READ, c->kv_offset, c->kv_length);
		c->state = S_KV;
	} else {
		c->state = S_DONE;
	}
	return 0;
}

/* ---- KV (§8) ---- */

/* Size of one value payload of tag at kv[pos, len), 0 with *kind on error. */
static int kv_payload(const uint8_t *kv, uint64_t len, uint64_t *pos,
		      uint8_t tag, uint64_t base, struct td_hrry_err *err)
{
	uint64_t p = *pos, n;
	switch (tag) {
	case TD_HRRY_KV_STRING:
	case TD_HRRY_KV_BYTES:
		if (len - p < 4)
			goto trunc;
		n = td__le32(kv + p);
		if (len - p - 4 < n)
			goto trunc;
		if (tag == TD_HRRY_KV_STRING &&
		    !td__utf8_valid(kv + p + 4, n))
			return td__hrry_fail(err, TD_HRRY_E_INVALID_HEADER,
					     base + p + 4,
					     "KV string is not valid UTF-8");
		p += 4 + n;
		break;
	case TD_HRRY_KV_INT64:
	case TD_HRRY_KV_UINT64:
	case TD_HRRY_KV_FLOAT64:
		if (len - p < 8)
			goto trunc;
		p += 8;
		break;
	case TD_HRRY_KV_BOOL:
		if (len - p < 1)
			goto trunc;
		if (kv[p] > 1)
			return td__hrry_fail(err, TD_HRRY_E_INVALID_HEADER,
					     base + p,
					     "KV bool is not 0x00 or 0x01");
		p += 1;
		break;
	default:
		return td__hrry_fail(err, TD_HRRY_E_INVALID_HEADER, base + p,
				     "unknown KV value tag");
	}
	*pos = p;
	return 0;
trunc:
	return td__hrry_fail(err, TD_HRRY_E_INVALID_HEADER, base + p,
			     "KV value truncated");
}

static const uint8_t *kv_key(const struct td_hrry_rcore *c, uint32_t i,
			     uint16_t *kl)
{
	const uint8_t *p = c->kv + c->kv_off[i];
	*kl = td__le16(p);
	return p + 2;
}

static int key_cmp(const void *ctx, uint32_t a, uint32_t b)
{
	const struct td_hrry_rcore *c = ctx;
	uint16_t la, lb;
	const uint8_t *ka = kv_key(c, a, &la), *kb = kv_key(c, b, &lb);
	return bytes_cmp(ka, la, kb, lb);
}

static int kv_head(struct td_hrry_rcore *c, const uint8_t *kv,
		   struct td_hrry_err *err)
{
	c->kv = kv;
	if (c->kv_length < 4)
		return fail(c, err, TD_HRRY_E_INVALID_HEADER, c->kv_offset,
			    "KV section shorter than its count");
	c->kv_count = td__le32(kv);
	if (c->kv_count > (c->kv_length - 4) / 5)
		return fail(c, err, TD_HRRY_E_INVALID_HEADER, c->kv_offset,
			    "kv_count larger than the KV section can hold");
	want(c, TD_HRRY_NEED_MEMORY, 0, (uint64_t)c->kv_count * 8);
	c->state = S_KV_MEM;
	return 0;
}

static int kv_body(struct td_hrry_rcore *c, void *mem, struct td_hrry_err *err)
{
	const uint8_t *kv = c->kv;
	uint64_t len = c->kv_length, pos = 4, base = c->kv_offset;
	int rc;
	c->kv_off = mem;
	c->kv_by_key = c->kv_off + c->kv_count;
	for (uint32_t i = 0; i < c->kv_count; i++) {
		c->kv_off[i] = (uint32_t)pos;
		c->kv_by_key[i] = i;
		if (len - pos < 2)
			return fail(c, err, TD_HRRY_E_INVALID_HEADER,
				    base + pos, "KV entry truncated");
		uint16_t kl = td__le16(kv + pos);
		if (kl == 0)
			return fail(c, err, TD_HRRY_E_KV_KEY_EMPTY, base + pos,
				    "KV entry with an empty key");
		if (len - pos - 2 < (uint64_t)kl + 1)
			return fail(c, err, TD_HRRY_E_INVALID_HEADER,
				    base + pos, "KV entry truncated");
		if (!td__utf8_valid(kv + pos + 2, kl) ||
		    memchr(kv + pos + 2, 0, kl))
			return fail(c, err, TD_HRRY_E_INVALID_HEADER,
				    base + pos + 2,
				    "KV key is not UTF-8 without NUL");
		pos += 2 + (uint64_t)kl;
		uint8_t tag = kv[pos++];
		if (tag == TD_HRRY_KV_ARRAY) {
			if (len - pos < 5)
				return fail(c, err, TD_HRRY_E_INVALID_HEADER,
					    base + pos, "KV array truncated");
			uint8_t et = kv[pos];
			uint32_t cnt = td__le32(kv + pos + 1);
			if (et < 1 || et > 6)
				return fail(c, err, TD_HRRY_E_INVALID_HEADER,
					    base + pos,
					    "KV array element tag not "
					    "0x01-0x06");
			pos += 5;
			for (uint32_t k = 0; k < cnt; k++) {
				rc = kv_payload(kv, len, &pos, et, base, err);
				if (rc) {
					c->state = S_FAILED;
					return rc;
				}
			}
		} else {
			rc = kv_payload(kv, len, &pos, tag, base, err);
			if (rc) {
				c->state = S_FAILED;
				return rc;
			}
		}
	}
	td__hrry_heapsort(c, c->kv_by_key, c->kv_count, key_cmp);
	for (uint32_t i = 1; i < c->kv_count; i++)
		if (!key_cmp(c, c->kv_by_key[i - 1], c->kv_by_key[i]))
			return fail(c, err, TD_HRRY_E_DUPLICATE_KV_KEY,
				    base + c->kv_off[c->kv_by_key[i]],
				    "two KV entries have the same key");
	if (pos != len)
		return fail(c, err, TD_HRRY_E_INVALID_HEADER, base + pos,
			    "KV entries do not fill kv_length");
	c->state = S_DONE;
	return 0;
}

int td_hrry_rcore_supply(struct td_hrry_rcore *c, const void *buf,
			 uint64_t got, struct td_hrry_err *err)
{
	if (c->state == S_DONE || c->state == S_FAILED || !buf)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "nothing was asked for");
	if (c->need.kind == TD_HRRY_NEED_READ && got < c->need.len)
		return fail(c, err, TD_HRRY_E_UNEXPECTED_EOF,
			    c->need.offset + got,
			    "the file ended before the requested range");
	switch (c->state) {
	case S_HEADER:
		return header(c, buf, err);
	case S_TRAILER:
		return trailer(c, buf, err);
	case S_INDEX:
		return index_head(c, buf, err);
	case S_INDEX_MEM:
		return index_body(c, (void *)(uintptr_t)buf, err);
	case S_KV:
		return kv_head(c, buf, err);
	case S_KV_MEM:
		return kv_body(c, (void *)(uintptr_t)buf, err);
	}
	return -EINVAL;
}

/* ---- after open ---- */

void td_hrry_rcore_entry(const struct td_hrry_rcore *c, uint64_t i,
			 struct td_hrry_entry *e)
{
	const uint8_t *p = c->index + c->entry_off[i];
	uint16_t nl = td__le16(p);
	e->name = (const char *)p + 2;
	e->name_len = nl;
	p += 2 + nl;
	e->descriptor_offset = td__le64(p);
	e->descriptor_length = td__le32(p + 8);
	e->data_offset = td__le64(p + 12);
	e->data_length = td__le64(p + 20);
}

int td_hrry_rcore_find(const struct td_hrry_rcore *c, const char *name,
		       size_t name_len, uint64_t *out, struct td_hrry_err *err)
{
	uint64_t lo = 0, hi = c->entry_count;
	bool sorted = c->file_flags & TD_HRRY_FILE_SORTED_INDEX;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		/* SORTED_INDEX: the index itself is in name order */
		uint32_t i = sorted ? (uint32_t)mid : c->by_name[mid];
		const uint8_t *p = c->index + c->entry_off[i];
		int r = bytes_cmp((const uint8_t *)name, name_len, p + 2,
				  td__le16(p));
		if (!r) {
			*out = i;
			return 0;
		}
		if (r < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return td__hrry_fail(err, TD_HRRY_E_TENSOR_NOT_FOUND, 0,
			     "no tensor of that name");
}

uint64_t td_hrry_rcore_offset_rank(const struct td_hrry_rcore *c, uint64_t i)
{
	/* binary search by (descriptor_offset) among the sorted positions;
	 * offsets may tie only in invalid files, so scan the tie run */
	uint64_t want_off = entry_desc_off(c, (uint32_t)i);
	uint64_t lo = 0, hi = c->entry_count;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (entry_desc_off(c, c->by_offset[mid]) < want_off)
			lo = mid + 1;
		else
			hi = mid;
	}
	while (lo < c->entry_count && c->by_offset[lo] != i)
		lo++;
	return lo;
}

uint64_t td_hrry_rcore_at_offset_rank(const struct td_hrry_rcore *c,
				      uint64_t pos)
{
	return c->by_offset[pos];
}

/* Decode one value payload at p (validated at open). */
static const uint8_t *kv_value(const uint8_t *p, uint8_t tag,
			       struct td_hrry_kv_value *v)
{
	v->kind = (enum td_hrry_kv_kind)tag;
	switch (tag) {
	case TD_HRRY_KV_STRING:
	case TD_HRRY_KV_BYTES:
		v->data_len = td__le32(p);
		v->data = p + 4;
		return p + 4 + v->data_len;
	case TD_HRRY_KV_INT64:
		v->i64_value = (int64_t)td__le64(p);
		return p + 8;
	case TD_HRRY_KV_UINT64:
		v->u64_value = td__le64(p);
		return p + 8;
	case TD_HRRY_KV_FLOAT64: {
		uint64_t u = td__le64(p);
		memcpy(&v->f64_value, &u, sizeof(u));
		return p + 8;
	}
	case TD_HRRY_KV_BOOL:
		v->bool_value = p[0] != 0;
		return p + 1;
	}
	return p;
}

void td_hrry_rcore_kv(const struct td_hrry_rcore *c, uint32_t i,
		      struct td_hrry_kv_entry *out)
{
	const uint8_t *p = c->kv + c->kv_off[i];
	memset(out, 0, sizeof(*out));
	out->key_len = td__le16(p);
	out->key = (const char *)p + 2;
	p += 2 + out->key_len;
	uint8_t tag = *p++;
	if (tag == TD_HRRY_KV_ARRAY) {
		struct td_hrry_kv_value *v = &out->value;
		v->kind = TD_HRRY_KV_ARRAY;
		v->item_kind = (enum td_hrry_kv_kind)p[0];
		v->item_count = td__le32(p + 1);
		v->data = p + 5;
		/* data_len: the packed items, walked once */
		const uint8_t *q = v->data;
		for (size_t k = 0; k < v->item_count; k++) {
			struct td_hrry_kv_value it;
			q = kv_value(q, p[0], &it);
		}
		v->data_len = (size_t)(q - v->data);
	} else {
		kv_value(p, tag, &out->value);
	}
}

void td_hrry_kv_item(const struct td_hrry_kv_value *a, size_t k,
		     struct td_hrry_kv_value *item)
{
	const uint8_t *q = a->data;
	uint8_t tag = (uint8_t)a->item_kind;
	memset(item, 0, sizeof(*item));
	switch (tag) {
	case TD_HRRY_KV_INT64:
	case TD_HRRY_KV_UINT64:
	case TD_HRRY_KV_FLOAT64:
		kv_value(q + 8 * k, tag, item);
		return;
	case TD_HRRY_KV_BOOL:
		kv_value(q + k, tag, item);
		return;
	}
	for (size_t i = 0; i < k; i++)
		q = kv_value(q, tag, item);
	kv_value(q, tag, item);
}

/* ---- per tensor ---- */

static int rebase(int rc, struct td_hrry_err *err, uint64_t base)
{
	if (rc && err)
		err->offset += base;
	return rc;
}

int td_hrry_rcore_check_desc(const struct td_hrry_rcore *c,
			     const struct td_hrry_entry *e, const uint8_t *buf,
			     struct td_hrry_desc *d, struct td_hrry_err *err)
{
	uint64_t base = e->descriptor_offset;
	memset(d, 0, sizeof(*d));
	/* step 7: only meaningful when the bytes are a descriptor at all */
	if (!memcmp(buf, "HRRY", 4) && td__le32(buf + 6) != e->descriptor_length)
		return td__hrry_fail(err, TD_HRRY_E_DESCRIPTOR_LENGTH_MISMATCH,
				     base + 6,
				     "index descriptor_length differs from "
				     "the descriptor's own field");
	int rc = td_hrry_desc_decode(buf, e->descriptor_length, d, err);
	if (rc)
		return rebase(rc, err, base);
	/* step 9 */
	if (d->buffer_count >= 1 && e->data_offset % c->alignment)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_LAYOUT, base,
				     "data_offset is not A-aligned");
	uint64_t sum = 0;
	for (uint32_t k = 0; k < d->buffer_count; k++) {
		if (k > 0) {
			uint64_t a = c->alignment;
			if (td__add_ovf(sum, a - 1, &sum))
				goto overflow;
			sum &= ~(a - 1);
		}
		if (td__add_ovf(sum, d->buffers[k].byte_size, &sum))
			goto overflow;
	}
	if (sum != e->data_length)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_LAYOUT, base,
				     "buffer sizes and padding do not add up "
				     "to the index data_length");
	return 0;
overflow:
	return td__hrry_fail(err, TD_HRRY_E_INVALID_LAYOUT, base,
			     "buffer sizes overflow");
}

int td_hrry_rcore_check_supported(const struct td_hrry_entry *e,
				  const struct td_hrry_desc *d,
				  struct td_hrry_err *err)
{
	uint64_t base = e->descriptor_offset, size, end;
	int rc = td_hrry_desc_supported(d, err);
	if (rc)
		return rebase(rc, err, base);
	if (d->layout_tag == TD_HRRY_LAYOUT_COMPOSITE)
		return 0;
	if (d->buffer_count != 1 || td_hrry_dense_size(d, &size) ||
	    td__add_ovf(d->byte_offset, size, &end) ||
	    end > d->buffers[0].byte_size)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_LAYOUT, base,
				     "dense contents do not fit buffer 0");
	return 0;
}

void td_hrry_buffer_range(const struct td_hrry_entry *e,
			  const struct td_hrry_desc *d, uint32_t alignment,
			  uint32_t k, uint64_t *offset, uint64_t *len)
{
	/* cannot overflow: td_hrry_rcore_check_desc summed the same terms
	 * and they end inside the file */
	uint64_t off = e->data_offset;
	for (uint32_t i = 0; i < k; i++)
		off = (off + d->buffers[i].byte_size + alignment - 1) &
		      ~((uint64_t)alignment - 1);
	*offset = off;
	*len = d->buffers[k].byte_size;
}

/* ---- composites (§7) ---- */

int td_hrry_cwalk_init(struct td_hrry_cwalk *w, const struct td_hrry_rcore *c,
		       uint64_t head_entry, struct td_hrry_err *err)
{
	memset(w, 0, sizeof(*w));
	w->c = c;
	if (head_entry >= c->entry_count)
		return td__hrry_fail(err, TD_HRRY_E_TENSOR_NOT_FOUND, 0,
				     "no such entry");
	w->pos = td_hrry_rcore_offset_rank(c, head_entry);
	w->next = head_entry;
	return 0;
}

int td_hrry_cwalk_step(struct td_hrry_cwalk *w)
{
	return w->done ? TD_HRRY_STEP_DONE : TD_HRRY_STEP_NEED;
}

int td_hrry_cwalk_feed(struct td_hrry_cwalk *w, const struct td_hrry_desc *d,
		       struct td_hrry_err *err)
{
	struct td_hrry_entry e;
	td_hrry_rcore_entry(w->c, w->next, &e);
	bool head = d->layout_tag == TD_HRRY_LAYOUT_COMPOSITE;
	if (w->fed == 0 && !head)
		return td__hrry_fail(err, TD_HRRY_E_NOT_A_COMPOSITE,
				     e.descriptor_offset,
				     "the named tensor is not a composite head");
	if (w->fed > 0)
		w->left[w->depth - 1]--;
	w->fed++;
	if (head) {
		if (w->depth >= TD_HRRY_MAX_NESTING)
			return td__hrry_fail(
				err, TD_HRRY_E_COMPOSITE_NESTING_TOO_DEEP,
				e.descriptor_offset,
				"composites nested deeper than 8");
		w->left[w->depth++] = d->member_count;
	}
	while (w->depth > 0 && w->left[w->depth - 1] == 0)
		w->depth--;
	if (w->depth == 0) {
		w->done = true;
		return 0;
	}
	if (++w->pos >= w->c->entry_count)
		return td__hrry_fail(err, TD_HRRY_E_TORN_COMPOSITE,
				     e.descriptor_offset,
				     "composite ends before all its members");
	w->next = td_hrry_rcore_at_offset_rank(w->c, w->pos);
	return 0;
}

static uint64_t off_of(const uint64_t *offsets, size_t i)
{
	return offsets ? offsets[i] : 0;
}

/* member volumes add up in 128 bits: a head volume may exceed 2^64 */
__extension__ typedef unsigned __int128 u128;

/* Π shape in 128 bits; false when it overflows even that. */
static bool volume(const struct td_hrry_desc *d, u128 *v)
{
	u128 n = 1;
	for (uint32_t i = 0; i < d->rank; i++) {
		if (d->shape[i] && n > (~(u128)0) / d->shape[i])
			return false;
		n *= d->shape[i];
	}
	*v = n;
	return true;
}

static bool boxes_overlap(const struct td_hrry_desc *a,
			  const struct td_hrry_desc *b)
{
	for (uint32_t i = 0; i < a->rank; i++) {
		uint64_t a0 = a->shard_offset[i], a1 = a0 + a->shape[i];
		uint64_t b0 = b->shard_offset[i], b1 = b0 + b->shape[i];
		if (a1 <= b0 || b1 <= a0)
			return false;
	}
	return true;
}

/* Index just past the subtree that starts at descs[o]. */
static size_t subtree_end(const struct td_hrry_desc *const *descs,
			  size_t count, size_t o)
{
	uint64_t need = 1;
	while (need > 0 && o < count) {
		need--;
		if (descs[o]->layout_tag == TD_HRRY_LAYOUT_COMPOSITE)
			need += descs[o]->member_count;
		o++;
	}
	return o;
}

/*
 * One member of an overlay composite (specs/hurray.md): it has a
 * composite-member section, the base comes first and only first, and the
 * base spans the head.
 */
static int check_overlay_member(const struct td_hrry_desc *h,
				const struct td_hrry_desc *d, uint32_t m,
				bool has_ms, uint64_t at,
				struct td_hrry_err *err)
{
	if (!has_ms)
		return td__hrry_fail(
			err,
			TD_HRRY_E_COMPOSITE_MEMBER_FLAG_MISMATCH,
			at,
			"overlay member without a "
			"composite-member section");
	if ((m == 0) != (d->member_role == TD_HRRY_ROLE_BASE))
		return td__hrry_fail(
			err,
			TD_HRRY_E_COMPOSITE_OVERLAY_BASE_NOT_FIRST,
			at,
			"the base must be the first overlay "
			"member and the only one");
	if (m == 0) {
		bool span = true;
		for (uint32_t k = 0; span && k < d->rank; k++)
			span = d->shard_offset[k] == 0 &&
			       d->shape[k] == h->shape[k];
		if (!span)
			return td__hrry_fail(
				err,
				TD_HRRY_E_COMPOSITE_OVERLAY_BASE_NOT_SPANNING,
				at,
				"overlay base does not span the "
				"head");
	}
	return 0;
}

/* Check the subtree at descs[*i] (a head); *i moves past it. */
static int check_tree(const struct td_hrry_desc *const *descs, size_t count,
		      const uint64_t *offsets, size_t *i, unsigned depth,
		      struct td_hrry_err *err)
{
	size_t hi = *i;
	const struct td_hrry_desc *h = descs[hi];
	if (depth > TD_HRRY_MAX_NESTING)
		return td__hrry_fail(err, TD_HRRY_E_COMPOSITE_NESTING_TOO_DEEP,
				     off_of(offsets, hi),
				     "composites nested deeper than 8");
	if (h->rule == TD_HRRY_RULE_OVERLAY && h->member_count == 0)
		return td__hrry_fail(err, TD_HRRY_E_COMPOSITE_OVERLAY_EMPTY,
				     off_of(offsets, hi),
				     "overlay composite without members");
	bool sharded = h->rule == TD_HRRY_RULE_PARTITION ||
		       h->rule == TD_HRRY_RULE_OVERLAY;
	u128 sum = 0, hv = 0;
	size_t first = hi + 1;
	*i = hi + 1;
	for (uint32_t m = 0; m < h->member_count; m++) {
		if (*i >= count)
			return td__hrry_fail(
				err, TD_HRRY_E_COMPOSITE_MEMBER_COUNT_MISMATCH,
				off_of(offsets, hi),
				"fewer members than member_count");
		size_t mi = *i;
		const struct td_hrry_desc *d = descs[mi];
		uint64_t at = off_of(offsets, mi);
		if (d->type_tag != h->type_tag)
			return td__hrry_fail(
				err, TD_HRRY_E_COMPOSITE_MEMBER_TYPE_MISMATCH,
				at, "member type differs from the head's");
		bool has_ms = d->flags & TD_HRRY_DESC_HAS_COMPOSITE_MEMBER;
		if (sharded) {
			if (!(d->flags & TD_HRRY_DESC_HAS_SHARD))
				return td__hrry_fail(
					err,
					TD_HRRY_E_COMPOSITE_MEMBER_MISSING_SHARD,
					at, "member without a shard section");
			bool same = d->rank == h->rank;
			for (uint32_t k = 0; same && k < d->rank; k++)
				same = d->parent_shape[k] == h->shape[k];
			if (!same)
				return td__hrry_fail(
					err,
					TD_HRRY_E_COMPOSITE_MEMBER_PARENT_SHAPE_MISMATCH,
					at,
					"member parent_shape differs from the "
					"head's shape");
		}
		if (h->rule == TD_HRRY_RULE_OVERLAY) {
			int rc = check_overlay_member(h, d, m, has_ms, at, err);
			if (rc)
				return rc;
		} else if (has_ms) {
			return td__hrry_fail(
				err, TD_HRRY_E_COMPOSITE_MEMBER_FLAG_MISMATCH,
				at,
				"partition/group member with a "
				"composite-member section");
		}
		if (h->rule == TD_HRRY_RULE_PARTITION) {
			u128 v;
			if (!volume(d, &v))
				return td__hrry_fail(
					err, TD_HRRY_E_INVALID_LAYOUT, at,
					"member volume overflows");
			sum += v;
			/* direct members only: step over nested subtrees */
			for (size_t o = first; o < mi;
			     o = subtree_end(descs, count, o)) {
				if (boxes_overlap(descs[o], d))
					return td__hrry_fail(
						err,
						TD_HRRY_E_COMPOSITE_PARTITION_OVERLAP,
						at,
						"partition members overlap");
			}
		}
		if (d->layout_tag == TD_HRRY_LAYOUT_COMPOSITE) {
			int rc = check_tree(descs, count, offsets, i,
					    depth + 1, err);
			if (rc)
				return rc;
		} else {
			(*i)++;
		}
	}
	if (h->rule == TD_HRRY_RULE_PARTITION) {
		if (!volume(h, &hv))
			return td__hrry_fail(err, TD_HRRY_E_INVALID_LAYOUT,
					     off_of(offsets, hi),
					     "head volume overflows");
		if (sum != hv)
			return td__hrry_fail(err,
					     TD_HRRY_E_COMPOSITE_PARTITION_GAP,
					     off_of(offsets, hi),
					     "partition members do not cover "
					     "the head");
	}
	return 0;
}

int td_hrry_composite_check(const struct td_hrry_desc *const *descs,
			    size_t count, const uint64_t *offsets,
			    struct td_hrry_err *err)
{
	size_t i = 0;
	if (count == 0 || descs[0]->layout_tag != TD_HRRY_LAYOUT_COMPOSITE)
		return td__hrry_fail(err, TD_HRRY_E_NOT_A_COMPOSITE,
				     off_of(offsets, 0),
				     "the first node is not a composite head");
	int rc = check_tree(descs, count, offsets, &i, 1, err);
	if (rc)
		return rc;
	if (i != count)
		return td__hrry_fail(err,
				     TD_HRRY_E_COMPOSITE_MEMBER_COUNT_MISMATCH,
				     off_of(offsets, i),
				     "more nodes than the composite's members");
	return 0;
}

int td_hrry_desc_len_check(const struct td_hrry_entry *e,
			   struct td_hrry_err *err)
{
	/* descriptor_length is a u32 bounded only by the file's size, and a
	 * sparse file has any size it claims */
	if (e->descriptor_length > TD_HRRY_MAX_DESC_LEN)
		return td__hrry_fail(err, TD_HRRY_E_TOO_LARGE,
				     e->descriptor_offset,
				     "descriptor_length over tensord's 16 MiB "
				     "cap");
	return 0;
}
