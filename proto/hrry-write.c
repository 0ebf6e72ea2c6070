/* SPDX-License-Identifier: MIT */
/*
 * The Hurray writer core (specs/hurray.md §15, §16, §17.1): one forward
 * pass, handed out as slices (bytes it owns, zero runs, or "the caller's
 * buffer k"). It keeps offsets and a few bytes of staging; index entries
 * belong to the driver. Pure: no I/O, no allocation.
 */
#include "hrry.h"

#include <errno.h>
#include <string.h>

#include "bytes.h"

enum { P_IDLE, P_HEADER, P_TENSOR, P_FINISH };

enum {
	T_DESC,
	T_PAD_A,
	T_BUFFER,
	T_BUFFER_PAD,
	T_PAD_8,
	T_END,
};

enum {
	F_KV_COUNT,
	F_KV_KEYLEN,
	F_KV_KEY,
	F_KV_TAG,
	F_KV_VALUE,
	F_KV_DATA,
	F_KV_PAD,
	F_IX_COUNT,
	F_IX_NAMELEN,
	F_IX_NAME,
	F_IX_FIELDS,
	F_TRAILER,
	F_END,
};

static uint64_t align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) & ~(a - 1);
}

int td_hrry_wcore_init(struct td_hrry_wcore *w,
		       const struct td_hrry_writer_options *opts,
		       struct td_hrry_err *err)
{
	memset(w, 0, sizeof(*w));
	uint32_t a = opts && opts->data_buffer_alignment ?
			     opts->data_buffer_alignment :
			     TD_HRRY_DEFAULT_ALIGNMENT;
	if ((a & (a - 1)) || a < TD_HRRY_MIN_ALIGNMENT ||
	    a > TD_HRRY_MAX_ALIGNMENT)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "data_buffer_alignment must be a power "
				     "of two in [4096, 2 MiB]");
	if (opts && opts->head_padding > TD_HRRY_HEAD_PAD_UPSTREAM)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "unknown head_padding");
	w->alignment = a;
	w->sorted_index = opts && opts->sorted_index;
	w->head_padding = opts ? opts->head_padding : 0;
	uint8_t *h = w->scratch;
	memset(h, 0, 64);
	memcpy(h, "HRRYFILE", 8);
	h[8] = 1;
	td__put_le32(h + 12, TD_HRRY_FILE_HAS_INDEX_CRC32C |
				     (w->sorted_index ?
					      TD_HRRY_FILE_SORTED_INDEX : 0));
	td__put_le32(h + 16, a);
	td__put_le64(h + 20, 64);
	td__put_le64(h + 28, UINT64_MAX);
	w->phase = P_HEADER;
	w->step = 0;
	return 0;
}

static bool name_ok(const char *name, size_t len)
{
	return name && len >= 1 && len <= TD_HRRY_MAX_NAME_LEN &&
	       td__utf8_valid((const uint8_t *)name, len);
}

int td_hrry_wcore_begin_tensor(struct td_hrry_wcore *w, const char *name,
			       size_t name_len, const struct td_hrry_desc *in,
			       struct td_hrry_wentry *e,
			       struct td_hrry_err *err)
{
	if (w->phase != P_IDLE)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "previous slices not yet emitted");
	if (!name_ok(name, name_len))
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "tensor name must be 1-65535 bytes of "
				     "UTF-8");
	bool head = in->layout_tag == TD_HRRY_LAYOUT_COMPOSITE;
	if (!w->allow_unsupported) {
		uint64_t size;
		int rc = td_hrry_desc_supported(in, err);
		if (rc)
			return rc;
		if (!head &&
		    (in->buffer_count != 1 || in->byte_offset != 0 ||
		     td_hrry_dense_size(in, &size) ||
		     in->buffers[0].byte_size != size))
			return td__hrry_fail(
				err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				"a tensor needs one buffer of exactly its "
				"dense size at byte_offset 0");
	}
	struct td_hrry_desc *d = &w->check;
	*d = *in;
	if (!w->allow_unsupported) {
		/* tensord writes host buffers: CPU, producer-synced,
		 * standard memory, alignment 64 (§14) */
		for (uint32_t k = 0; k < d->buffer_count; k++) {
			d->buffers[k].alignment = 64;
			d->buffers[k].device_tag = 0;
			d->buffers[k].sync_mode = 0;
			d->buffers[k].memory_class = 0;
		}
	}
	/* Encode, then decode what was encoded: the writer never emits a
	 * descriptor its own reader would refuse. */
	int n = td_hrry_desc_encode(d, w->desc, sizeof(w->desc), err);
	if (n < 0)
		return n;
	int rc = td_hrry_desc_decode(w->desc, (size_t)n, d, err);
	if (rc)
		return rc;
	w->desc_len = (uint32_t)n;
	w->head = head;
	w->buffer_count = in->buffer_count;
	for (uint32_t k = 0; k < in->buffer_count; k++)
		w->buffer_len[k] = in->buffers[k].byte_size;
	/* offsets: all sums below are checked against 2^63 */
	uint64_t pos = w->pos, data, end;
	if (pos > (UINT64_MAX >> 2))
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, pos,
				     "file too large");
	uint64_t after = pos + (uint64_t)n;
	if (head && w->head_padding == TD_HRRY_HEAD_PAD_SPEC)
		data = align_up(after, 8);
	else
		data = align_up(after, w->alignment);
	end = data;
	for (uint32_t k = 0; k < w->buffer_count; k++) {
		if (k > 0)
			end = align_up(end, w->alignment);
		if (td__add_ovf(end, w->buffer_len[k], &end) ||
		    end > (UINT64_MAX >> 2))
			return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT,
					     pos, "tensor too large");
	}
	e->name = name;
	e->name_len = name_len;
	e->descriptor_offset = pos;
	e->descriptor_length = (uint32_t)n;
	e->data_offset = data;
	e->data_length = end - data;
	w->phase = P_TENSOR;
	w->step = T_DESC;
	w->k = 0;
	w->cur_len = 0;
	w->cur_done = 0;
	return 0;
}

/* ---- KV encoding helpers ---- */

static uint64_t kv_value_len(const struct td_hrry_kv_value *v,
			     enum td_hrry_kv_kind kind)
{
	switch (kind) {
	case TD_HRRY_KV_STRING:
	case TD_HRRY_KV_BYTES:
		return 4 + (uint64_t)v->data_len;
	case TD_HRRY_KV_BOOL:
		return 1;
	default:
		return 8;
	}
}

/* Two byte strings in the order of their bytes, a prefix first. */
static int bytes_cmp(const void *a, size_t la, const void *b, size_t lb)
{
	int r = memcmp(a, b, la < lb ? la : lb);

	if (r)
		return r;
	return la < lb ? -1 : la > lb;
}

/* KV entry numbers by key bytes (the duplicate check) */
static int kv_key_cmp(const void *ctx, uint32_t a, uint32_t b)
{
	const struct td_hrry_kv_entry *kv = ctx;

	return bytes_cmp(kv[a].key, kv[a].key_len, kv[b].key, kv[b].key_len);
}

/*
 * Two entries with one key? With scratch (count u32), the keys are
 * sorted and neighbours compared: O(n log n). Without, every pair is:
 * O(n^2), which for a tensord snapshot of 5000 versions (27 000 keys)
 * held its loop for seconds; only for a handful of keys.
 */
static int kv_dups(const struct td_hrry_kv_entry *kv, size_t count,
		   uint32_t *scratch, struct td_hrry_err *err)
{
	bool dup = false;

	if (scratch) {
		for (size_t i = 0; i < count; i++)
			scratch[i] = (uint32_t)i;
		td__hrry_heapsort(kv, scratch, count, kv_key_cmp);
		for (size_t i = 1; i < count && !dup; i++)
			dup = !kv_key_cmp(kv, scratch[i - 1], scratch[i]);
	} else {
		for (size_t i = 1; i < count && !dup; i++)
			for (size_t j = 0; j < i && !dup; j++)
				dup = kv[j].key_len == kv[i].key_len &&
				      !memcmp(kv[j].key, kv[i].key,
					      kv[i].key_len);
	}
	return dup ? td__hrry_fail(err, TD_HRRY_E_DUPLICATE_KV_KEY, 0,
				   "two KV entries have the same key")
		   : 0;
}

static int kv_total(const struct td_hrry_kv_entry *kv, size_t count,
		    uint64_t *total, struct td_hrry_err *err)
{
	uint64_t n = 4;
	for (size_t i = 0; i < count; i++) {
		const struct td_hrry_kv_entry *e = &kv[i];
		const struct td_hrry_kv_value *v = &e->value;
		if (!e->key || e->key_len == 0)
			return td__hrry_fail(err, TD_HRRY_E_KV_KEY_EMPTY, 0,
					     "KV key is empty");
		if (e->key_len > 65535 ||
		    !td__utf8_valid((const uint8_t *)e->key, e->key_len) ||
		    memchr(e->key, 0, e->key_len))
			return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
					     "KV key must be 1-65535 bytes of "
					     "UTF-8 without NUL");
		n += 2 + (uint64_t)e->key_len + 1;
		size_t items = 1;
		const struct td_hrry_kv_value *it = v;
		enum td_hrry_kv_kind kind = v->kind;
		if (v->kind == TD_HRRY_KV_ARRAY) {
			if (v->item_count == 0 || !v->items ||
			    v->item_kind < TD_HRRY_KV_STRING ||
			    v->item_kind > TD_HRRY_KV_BYTES)
				return td__hrry_fail(
					err, TD_HRRY_E_INVALID_ARGUMENT, 0,
					"KV array must be non-empty with a "
					"scalar, string or bytes item kind");
			if (v->item_count > UINT32_MAX)
				return td__hrry_fail(
					err, TD_HRRY_E_INVALID_ARGUMENT, 0,
					"KV array too long");
			n += 5;
			items = v->item_count;
			it = v->items;
			kind = v->item_kind;
		} else if (v->kind < TD_HRRY_KV_STRING ||
			   v->kind > TD_HRRY_KV_BYTES) {
			return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
					     "unknown KV kind");
		}
		for (size_t k = 0; k < items; k++) {
			const struct td_hrry_kv_value *x = &it[k];
			if (v->kind == TD_HRRY_KV_ARRAY && x->kind != kind)
				return td__hrry_fail(
					err, TD_HRRY_E_INVALID_ARGUMENT, 0,
					"KV array items of mixed kinds");
			if ((kind == TD_HRRY_KV_STRING ||
			     kind == TD_HRRY_KV_BYTES) &&
			    (x->data_len > UINT32_MAX ||
			     (x->data_len && !x->data)))
				return td__hrry_fail(
					err, TD_HRRY_E_INVALID_ARGUMENT, 0,
					"KV string/bytes value too long or "
					"NULL");
			if (kind == TD_HRRY_KV_STRING &&
			    !td__utf8_valid(x->data, x->data_len))
				return td__hrry_fail(
					err, TD_HRRY_E_INVALID_ARGUMENT, 0,
					"KV string is not UTF-8");
			n += kv_value_len(x, kind);
			if (n > UINT32_MAX)
				return td__hrry_fail(
					err, TD_HRRY_E_INVALID_ARGUMENT, 0,
					"KV section above 4 GiB");
		}
	}
	*total = n;
	return 0;
}

/* The checks of td_hrry_check_kv, and the KV section's length. */
static int kv_check_total(const struct td_hrry_kv_entry *kv, size_t count,
			  uint32_t *scratch, uint64_t *total,
			  struct td_hrry_err *err)
{
	if (count > UINT32_MAX)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "too many KV entries");
	int rc = kv_total(kv, count, total, err);
	return rc ? rc : kv_dups(kv, count, scratch, err);
}

int td_hrry_check_kv(const struct td_hrry_kv_entry *kv, size_t count,
		     uint32_t *scratch, struct td_hrry_err *err)
{
	uint64_t n;
	return kv_check_total(kv, count, scratch, &n, err);
}

/* entry numbers by name bytes (SORTED_INDEX) */
static int wname_cmp(const void *ctx, uint32_t a, uint32_t b)
{
	const struct td_hrry_wentry *e = ctx;

	return bytes_cmp(e[a].name, e[a].name_len, e[b].name, e[b].name_len);
}

int td_hrry_wcore_begin_finish(struct td_hrry_wcore *w,
			       const struct td_hrry_kv_entry *kv,
			       size_t kv_count, uint32_t *kv_order,
			       struct td_hrry_wentry *entries,
			       uint64_t count, uint32_t *order,
			       struct td_hrry_err *err)
{
	uint64_t total = 0;
	if (w->phase != P_IDLE)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "previous slices not yet emitted");
	if (count > UINT32_MAX || (w->sorted_index && count && !order))
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "too many entries or no order scratch");
	/* once: the checks used to run twice, the second for the length */
	int rc = kv_check_total(kv, kv_count, kv_order, &total, err);
	if (rc)
		return rc;
	if (!kv_count)
		total = 0;
	/* never write what a reader refuses (TD_HRRY_MAX_*): names are at
	 * most 65535 bytes, so the sum cannot overflow */
	uint64_t ix_len = 8;
	for (uint64_t i = 0; i < count; i++)
		ix_len += 2 + (uint64_t)entries[i].name_len + 32;
	if (ix_len > TD_HRRY_MAX_INDEX_LEN || total > TD_HRRY_MAX_KV_LEN)
		return td__hrry_fail(err, TD_HRRY_E_TOO_LARGE, 0,
				     ix_len > TD_HRRY_MAX_INDEX_LEN ?
					     "index over tensord's 512 MiB cap" :
					     "KV over tensord's 1 GiB cap");
	w->kv = kv;
	w->kv_count = kv_count;
	w->kv_i = 0;
	w->item_i = 0;
	w->entries = entries;
	w->entry_count = count;
	w->entry_i = 0;
	w->order = w->sorted_index ? order : NULL;
	if (w->order) {
		for (uint64_t i = 0; i < count; i++)
			order[i] = (uint32_t)i;
		td__hrry_heapsort(entries, order, count, wname_cmp);
	}
	w->kv_length = (uint32_t)total;
	w->kv_offset = kv_count ? w->pos : 0;
	w->crc = 0;
	w->phase = P_FINISH;
	w->step = kv_count ? F_KV_COUNT : F_IX_COUNT;
	w->cur_len = 0;
	w->cur_done = 0;
	return 0;
}

/* ---- slices ---- */

static void set_bytes(struct td_hrry_wcore *w, const uint8_t *p, uint64_t n)
{
	w->cur.kind = TD_HRRY_SLICE_BYTES;
	w->cur.ptr = p;
	w->cur.len = n;
	w->cur_len = n;
	w->cur_done = 0;
}

static void set_zeros(struct td_hrry_wcore *w, uint64_t n)
{
	w->cur.kind = TD_HRRY_SLICE_ZEROS;
	w->cur.ptr = NULL;
	w->cur.len = n;
	w->cur_len = n;
	w->cur_done = 0;
}

/* Produce the next tensor-record slice; false at the end. */
static bool tensor_slice(struct td_hrry_wcore *w)
{
	for (;;) {
		switch (w->step) {
		case T_DESC:
			w->step = T_PAD_A;
			set_bytes(w, w->desc, w->desc_len);
			return true;
		case T_PAD_A: {
			uint64_t to = w->head && w->head_padding ==
							 TD_HRRY_HEAD_PAD_SPEC ?
					      align_up(w->pos, 8) :
					      align_up(w->pos, w->alignment);
			w->step = w->buffer_count ? T_BUFFER : T_PAD_8;
			if (to > w->pos) {
				set_zeros(w, to - w->pos);
				return true;
			}
			break;
		}
		case T_BUFFER:
			w->step = T_BUFFER_PAD;
			if (w->buffer_len[w->k]) {
				w->cur.kind = TD_HRRY_SLICE_BUFFER;
				w->cur.ptr = NULL;
				w->cur.buffer = w->k;
				w->cur.len = w->buffer_len[w->k];
				w->cur_len = w->cur.len;
				w->cur_done = 0;
				return true;
			}
			break;
		case T_BUFFER_PAD:
			if (++w->k >= w->buffer_count) {
				w->step = T_PAD_8;
				break;
			}
			w->step = T_BUFFER;
			if (align_up(w->pos, w->alignment) > w->pos) {
				set_zeros(w, align_up(w->pos, w->alignment) -
						     w->pos);
				return true;
			}
			break;
		case T_PAD_8:
			w->step = T_END;
			if (align_up(w->pos, 8) > w->pos) {
				set_zeros(w, align_up(w->pos, 8) - w->pos);
				return true;
			}
			break;
		default:
			return false;
		}
	}
}

/* the value being emitted: the entry's own, or array item item_i */
static const struct td_hrry_kv_value *
cur_value(const struct td_hrry_wcore *w, enum td_hrry_kv_kind *kind)
{
	const struct td_hrry_kv_value *v = &w->kv[w->kv_i].value;
	if (v->kind == TD_HRRY_KV_ARRAY) {
		*kind = v->item_kind;
		return &v->items[w->item_i];
	}
	*kind = v->kind;
	return v;
}

static size_t cur_items(const struct td_hrry_wcore *w)
{
	const struct td_hrry_kv_value *v = &w->kv[w->kv_i].value;
	return v->kind == TD_HRRY_KV_ARRAY ? v->item_count : 1;
}

static const struct td_hrry_wentry *cur_entry(const struct td_hrry_wcore *w)
{
	uint64_t i = w->order ? w->order[w->entry_i] : w->entry_i;
	return &w->entries[i];
}

/* One KV value (or array item): a scalar, or the length of its bytes. */
static void kv_value_slice(struct td_hrry_wcore *w)
{
	uint8_t *s = w->scratch;
	enum td_hrry_kv_kind kind;
	const struct td_hrry_kv_value *v;

	v = cur_value(w, &kind);
	switch (kind) {
	case TD_HRRY_KV_STRING:
	case TD_HRRY_KV_BYTES:
		td__put_le32(s, (uint32_t)v->data_len);
		w->step = F_KV_DATA;
		set_bytes(w, s, 4);
		return;
	case TD_HRRY_KV_INT64:
		td__put_le64(s, (uint64_t)v->i64_value);
		break;
	case TD_HRRY_KV_UINT64:
		td__put_le64(s, v->u64_value);
		break;
	case TD_HRRY_KV_FLOAT64: {
		uint64_t u;
		memcpy(&u, &v->f64_value, 8);
		td__put_le64(s, u);
		break;
	}
	case TD_HRRY_KV_BOOL:
		s[0] = v->bool_value ? 1 : 0;
		break;
	default:
		break;
	}
	w->step = F_KV_DATA;
	set_bytes(w, s, kind == TD_HRRY_KV_BOOL ? 1 : 8);
	w->cur_scalar = true;
}

/* The trailer, once the index is out: where index and KV are, the CRC. */
static void trailer_slice(struct td_hrry_wcore *w)
{
	uint8_t *s = w->scratch;

	w->in_index = false;
	w->index_length = w->pos - w->index_offset;
	td__put_le64(s, w->index_offset);
	td__put_le64(s + 8, w->index_length);
	td__put_le64(s + 16, w->kv_offset);
	td__put_le32(s + 24, w->kv_length);
	td__put_le32(s + 28, w->crc);
	td__put_le32(s + 32, 0);
	memcpy(s + 36, "HRRY", 4);
	w->step = F_END;
	set_bytes(w, s, 40);
}

static bool finish_slice(struct td_hrry_wcore *w)
{
	uint8_t *s = w->scratch;
	enum td_hrry_kv_kind kind;
	const struct td_hrry_kv_value *v;
	for (;;) {
		switch (w->step) {
		case F_KV_COUNT:
			td__put_le32(s, (uint32_t)w->kv_count);
			w->step = F_KV_KEYLEN;
			set_bytes(w, s, 4);
			return true;
		case F_KV_KEYLEN:
			td__put_le16(s, (uint16_t)w->kv[w->kv_i].key_len);
			w->step = F_KV_KEY;
			set_bytes(w, s, 2);
			return true;
		case F_KV_KEY:
			w->step = F_KV_TAG;
			set_bytes(w, (const uint8_t *)w->kv[w->kv_i].key,
				  w->kv[w->kv_i].key_len);
			return true;
		case F_KV_TAG: {
			const struct td_hrry_kv_value *e = &w->kv[w->kv_i].value;
			s[0] = (uint8_t)e->kind;
			w->item_i = 0;
			w->step = F_KV_VALUE;
			if (e->kind == TD_HRRY_KV_ARRAY) {
				s[1] = (uint8_t)e->item_kind;
				td__put_le32(s + 2, (uint32_t)e->item_count);
				set_bytes(w, s, 6);
			} else {
				set_bytes(w, s, 1);
			}
			return true;
		}
		case F_KV_VALUE:
			kv_value_slice(w);
			return true;
		case F_KV_DATA:
			v = cur_value(w, &kind);
			bool scalar = w->cur_scalar;
			w->cur_scalar = false;
			/* next item, next entry, or the end of KV */
			if (++w->item_i < cur_items(w)) {
				w->step = F_KV_VALUE;
			} else if (++w->kv_i < w->kv_count) {
				w->step = F_KV_KEYLEN;
			} else {
				w->step = F_KV_PAD;
			}
			if (!scalar && v->data_len) {
				set_bytes(w, v->data, v->data_len);
				return true;
			}
			break;
		case F_KV_PAD:
			w->step = F_IX_COUNT;
			if (align_up(w->pos, 8) > w->pos) {
				set_zeros(w, align_up(w->pos, 8) - w->pos);
				return true;
			}
			break;
		case F_IX_COUNT:
			w->index_offset = w->pos;
			w->in_index = true;
			td__put_le64(s, w->entry_count);
			w->step = w->entry_count ? F_IX_NAMELEN : F_TRAILER;
			set_bytes(w, s, 8);
			return true;
		case F_IX_NAMELEN:
			td__put_le16(s, (uint16_t)cur_entry(w)->name_len);
			w->step = F_IX_NAME;
			set_bytes(w, s, 2);
			return true;
		case F_IX_NAME:
			w->step = F_IX_FIELDS;
			set_bytes(w, (const uint8_t *)cur_entry(w)->name,
				  cur_entry(w)->name_len);
			return true;
		case F_IX_FIELDS: {
			const struct td_hrry_wentry *e = cur_entry(w);
			td__put_le64(s, e->descriptor_offset);
			td__put_le32(s + 8, e->descriptor_length);
			td__put_le64(s + 12, e->data_offset);
			td__put_le64(s + 20, e->data_length);
			td__put_le32(s + 28, 0);
			w->step = ++w->entry_i < w->entry_count ? F_IX_NAMELEN :
								  F_TRAILER;
			set_bytes(w, s, 32);
			return true;
		}
		case F_TRAILER:
			trailer_slice(w);
			return true;
		default:
			return false;
		}
	}
}

int td_hrry_wcore_next(struct td_hrry_wcore *w, struct td_hrry_slice *s)
{
	if (w->cur_done < w->cur_len) {
		*s = w->cur;
		s->len = w->cur_len - w->cur_done;
		if (s->kind == TD_HRRY_SLICE_BYTES)
			s->ptr = w->cur.ptr + w->cur_done;
		s->skip = s->kind == TD_HRRY_SLICE_BUFFER ? w->cur_done : 0;
		return TD_HRRY_STEP_NEED;
	}
	bool more = false;
	switch (w->phase) {
	case P_HEADER:
		if (w->step == 0) {
			w->step = 1;
			set_bytes(w, w->scratch, 64);
			more = true;
		}
		break;
	case P_TENSOR:
		more = tensor_slice(w);
		break;
	case P_FINISH:
		more = finish_slice(w);
		break;
	default:
		break;
	}
	if (!more) {
		w->phase = P_IDLE;
		return TD_HRRY_STEP_DONE;
	}
	*s = w->cur;
	s->skip = 0;
	return TD_HRRY_STEP_NEED;
}

void td_hrry_wcore_advance(struct td_hrry_wcore *w, uint64_t n)
{
	if (n > w->cur_len - w->cur_done)
		n = w->cur_len - w->cur_done;
	if (w->in_index && w->cur.kind == TD_HRRY_SLICE_BYTES)
		w->crc = td_hrry_crc32c(w->crc, w->cur.ptr + w->cur_done,
					(size_t)n);
	w->cur_done += n;
	w->pos += n;
}
