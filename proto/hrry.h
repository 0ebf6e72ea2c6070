/* SPDX-License-Identifier: MIT */
/*
 * The sans-I/O Hurray core (../shared/specs/hurray.md §17.1). It never
 * blocks and does no I/O and no allocation: the reader core says which
 * byte range (or how much working memory) it needs next and the driver
 * supplies it; the writer core hands out the next slice to emit and the
 * driver reports how much went out. Every range is validated (§13) before
 * it is requested, so a hostile trailer or index never makes the driver
 * read or allocate more than the file holds.
 *
 * Types and error kinds are those of the public <tensord/hrry.h>; the
 * blocking handles there (td_hrry_file_reader_* / _writer_*) are a thin
 * driver over this core (proto/hrry-file.c). The daemon drives the same
 * steps from its event loop.
 *
 * Reader open, driver loop:
 *
 *	td_hrry_rcore_init(&c, file_size);
 *	while ((rc = td_hrry_rcore_step(&c, &need, &err)) == TD_HRRY_STEP_NEED) {
 *		if (need.kind == TD_HRRY_NEED_READ)   read need.len bytes at
 *			need.offset into a buffer that lives as long as c;
 *		else (TD_HRRY_NEED_MEMORY)            get need.len writable
 *			bytes, 8-aligned, that live as long as c;
 *		rc = td_hrry_rcore_supply(&c, buf, got, &err);  (< 0: stop)
 *	}
 *	rc == TD_HRRY_STEP_DONE: open; per-tensor calls below are pure.
 */
#ifndef TD_PROTO_HRRY_H
#define TD_PROTO_HRRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensord/hrry.h"

/* ---- errors ---- */

/* Fill *err (may be NULL) and return td_hrry_error_errno(kind). */
int td__hrry_fail(struct td_hrry_err *err, enum td_hrry_error kind,
		  uint64_t offset, const char *reason);

/* In-place heapsort of v[0, n) by cmp(ctx, a, b) (no allocation). */
typedef int (*td__hrry_cmp_fn)(const void *ctx, uint32_t a, uint32_t b);
void td__hrry_heapsort(const void *ctx, uint32_t *v, uint64_t n,
		       td__hrry_cmp_fn cmp);

/* CRC-32C (Castagnoli) continuing from crc (start with 0). */
uint32_t td_hrry_crc32c(uint32_t crc, const void *buf, size_t len);

/* ---- reader core ---- */

enum td_hrry_step {
	TD_HRRY_STEP_DONE = 0, /* nothing more needed */
	TD_HRRY_STEP_NEED = 1, /* see struct td_hrry_need */
};

enum td_hrry_need_kind {
	TD_HRRY_NEED_READ = 1,   /* bytes [offset, offset + len) of the file */
	TD_HRRY_NEED_MEMORY = 2, /* len bytes of 8-aligned working memory */
};

struct td_hrry_need {
	enum td_hrry_need_kind kind;
	uint64_t offset;
	uint64_t len;
};

/*
 * Reader core state; caller's memory (init, no fini: it owns nothing).
 * Fields are read-only for drivers once open is DONE.
 */
struct td_hrry_rcore {
	uint64_t file_size;
	int state; /* private */
	struct td_hrry_need need; /* the outstanding request */
	/* header */
	uint8_t minor;
	uint32_t file_flags;
	uint32_t alignment;
	uint64_t first_descriptor_offset;
	uint64_t tensor_count_hint;
	/* trailer */
	uint64_t index_offset, index_length, kv_offset;
	uint32_t kv_length, index_crc32c;
	/* supplied, borrowed until the core is dropped */
	const uint8_t *index; /* index_length bytes */
	const uint8_t *kv;    /* kv_length bytes, NULL when no KV */
	uint64_t entry_count;
	uint32_t kv_count;
	uint64_t *entry_off;   /* offset of entry i inside the index */
	uint32_t *by_name;     /* entry numbers sorted by name bytes */
	uint32_t *by_offset;   /* entry numbers sorted by descriptor_offset */
	uint32_t *kv_off;      /* offset of KV entry i inside the KV section */
	uint32_t *kv_by_key;   /* scratch for the duplicate-key check */
};

void td_hrry_rcore_init(struct td_hrry_rcore *c, uint64_t file_size);
/*
 * Advance open: TD_HRRY_STEP_NEED with *need filled, TD_HRRY_STEP_DONE,
 * or -errno (the file is refused; *err says why). Calling it again after
 * NEED without supplying returns the same need.
 */
int td_hrry_rcore_step(struct td_hrry_rcore *c, struct td_hrry_need *need,
		       struct td_hrry_err *err);
/*
 * Supply the outstanding need: for READ, buf holds got bytes from
 * need.offset (got < need.len: TD_HRRY_E_UNEXPECTED_EOF); for MEMORY, buf
 * is the memory (got ignored). Index and KV bytes and memory are borrowed
 * until the core is dropped; header and trailer bytes are not kept.
 * 0 or -errno (the check that consumed the bytes failed).
 */
int td_hrry_rcore_supply(struct td_hrry_rcore *c, const void *buf,
			 uint64_t got, struct td_hrry_err *err);

/* After DONE: entry i in index order (i < entry_count). */
void td_hrry_rcore_entry(const struct td_hrry_rcore *c, uint64_t i,
			 struct td_hrry_entry *e);
/* Name lookup (§13 step 6): binary search; 0 and *i, or TensorNotFound. */
int td_hrry_rcore_find(const struct td_hrry_rcore *c, const char *name,
		       size_t name_len, uint64_t *i, struct td_hrry_err *err);
/*
 * Position of entry i in descriptor_offset order, and the entry at a
 * position (composites are laid out in that order, §7).
 */
uint64_t td_hrry_rcore_offset_rank(const struct td_hrry_rcore *c, uint64_t i);
uint64_t td_hrry_rcore_at_offset_rank(const struct td_hrry_rcore *c,
				      uint64_t pos);
/* KV entry i (< kv_count); array items through td_hrry_kv_item(). */
void td_hrry_rcore_kv(const struct td_hrry_rcore *c, uint32_t i,
		      struct td_hrry_kv_entry *out);
/*
 * Item k (< item_count) of an ARRAY value decoded by the core (its
 * data/data_len hold the packed items; items is NULL). O(k) for string and
 * bytes arrays, O(1) otherwise.
 */
void td_hrry_kv_item(const struct td_hrry_kv_value *array, size_t k,
		     struct td_hrry_kv_value *item);

/*
 * Per tensor, before the driver reads (or allocates for) the entry's
 * descriptor: 0, or TooLarge when descriptor_length is over
 * TD_HRRY_MAX_DESC_LEN (the tensor is refused, the file stays open).
 */
int td_hrry_desc_len_check(const struct td_hrry_entry *e,
			   struct td_hrry_err *err);
/*
 * Per tensor, after the driver has read the entry's descriptor bytes
 * [descriptor_offset, + descriptor_length): §13 steps 7-9 (length fields,
 * decode, buffer placement against data_offset/data_length). 0 or -errno;
 * offsets in *err are absolute.
 */
int td_hrry_rcore_check_desc(const struct td_hrry_rcore *c,
			     const struct td_hrry_entry *e, const uint8_t *buf,
			     struct td_hrry_desc *d, struct td_hrry_err *err);
/*
 * §13 steps 10-11: support check, then dense contents fit buffer 0.
 * 0 or -errno.
 */
int td_hrry_rcore_check_supported(const struct td_hrry_entry *e,
				  const struct td_hrry_desc *d,
				  struct td_hrry_err *err);
/* Absolute file range of buffer k of a checked tensor (§4). */
void td_hrry_buffer_range(const struct td_hrry_entry *e,
			  const struct td_hrry_desc *d, uint32_t alignment,
			  uint32_t k, uint64_t *offset, uint64_t *len);
/* Dense byte count of a supported tensor (Π shape × element size). */
int td_hrry_dense_size(const struct td_hrry_desc *d, uint64_t *size);
/* Element size in bytes of a tag with a tensord dtype, 0 otherwise. */
unsigned td_hrry_type_size(uint8_t type_tag);
/* tensord blob dtype (proto/blob.h) of a supported tag, -1 otherwise; and
 * the reverse (0 for an unknown dtype). */
int td_hrry_type_to_dtype(uint8_t type_tag);
uint8_t td_hrry_type_from_dtype(uint32_t dtype);

/*
 * Composite walk (§7): membership by descriptor_offset order, driven like
 * open. Start at the head's entry; each NEED asks for the descriptor of
 * entry `next` (decoded and checked by the driver with
 * td_hrry_rcore_check_desc) to be fed; DONE when the tree is closed. The
 * driver keeps the fed descriptors in preorder (node i = i-th fed) and
 * finally calls td_hrry_composite_check() on them.
 */
struct td_hrry_cwalk {
	const struct td_hrry_rcore *c;
	uint64_t pos;       /* offset-order position of the next record */
	uint64_t next;      /* entry number wanted next (NEED) */
	uint32_t depth;     /* open heads */
	uint32_t left[TD_HRRY_MAX_NESTING + 1]; /* members still due per level */
	uint64_t fed;
	bool done;
};
int td_hrry_cwalk_init(struct td_hrry_cwalk *w, const struct td_hrry_rcore *c,
		       uint64_t head_entry, struct td_hrry_err *err);
/* NEED (w->next is the entry wanted) or DONE. */
int td_hrry_cwalk_step(struct td_hrry_cwalk *w);
/* Feed the decoded descriptor of w->next. 0 or -errno. */
int td_hrry_cwalk_feed(struct td_hrry_cwalk *w, const struct td_hrry_desc *d,
		       struct td_hrry_err *err);
/*
 * The member rules of §7 on a whole tree in preorder (descs[0] the head;
 * offsets[i] the node's file offset for error reports, may be NULL).
 * Also used by the writer before it emits a composite. 0 or -errno.
 */
int td_hrry_composite_check(const struct td_hrry_desc *const *descs,
			    size_t count, const uint64_t *offsets,
			    struct td_hrry_err *err);

/* ---- writer core ---- */

enum td_hrry_slice_kind {
	TD_HRRY_SLICE_BYTES = 1,  /* emit ptr[0, len) */
	TD_HRRY_SLICE_ZEROS = 2,  /* emit len zero bytes */
	TD_HRRY_SLICE_BUFFER = 3, /* emit the caller's buffer `buffer`, len bytes */
};

struct td_hrry_slice {
	enum td_hrry_slice_kind kind;
	const uint8_t *ptr;
	uint64_t len;
	uint32_t buffer;
	uint64_t skip; /* BUFFER: bytes of it already emitted */
};

/* One index entry the writer keeps (name borrowed from the driver). */
struct td_hrry_wentry {
	const char *name;
	size_t name_len;
	uint64_t descriptor_offset;
	uint32_t descriptor_length;
	uint64_t data_offset;
	uint64_t data_length;
};

/*
 * Writer core state; caller's memory. Usage per phase:
 *   td_hrry_wcore_init()                    -> slices: header
 *   td_hrry_wcore_begin_tensor()            -> slices: one record
 *   td_hrry_wcore_begin_finish()            -> slices: KV, index, trailer
 * and after each begin: while (td_hrry_wcore_next(w, &s) == NEED) {
 * emit s; td_hrry_wcore_advance(w, s.len); }. Index entries are the
 * driver's (an array it grows): td_hrry_wcore_begin_tensor fills one.
 */
struct td_hrry_wcore {
	uint32_t alignment;
	uint32_t head_padding;
	bool sorted_index;
	uint64_t pos; /* bytes emitted so far */
	int phase;    /* private */
	int step;     /* private */
	uint32_t buffer_count;
	uint64_t buffer_len[TD_HRRY_MAX_BUFFERS];
	uint32_t k;
	bool head;
	/* finish */
	const struct td_hrry_kv_entry *kv;
	size_t kv_count, kv_i;
	struct td_hrry_wentry *entries;
	uint32_t *order;
	uint64_t entry_count, entry_i;
	uint64_t kv_offset, index_offset, index_length;
	uint32_t kv_length, crc;
	uint32_t item_i;
	uint8_t scratch[64];
	uint8_t desc[8192];
	uint32_t desc_len;
	/* tests and seed generators only: accept any valid descriptor */
	bool allow_unsupported;
	/* private */
	struct td_hrry_slice cur;
	uint64_t cur_len, cur_done;
	bool cur_scalar, in_index;
	struct td_hrry_desc check;
};

/* 0, or -EINVAL (bad alignment / option) with *err. Header is next. */
int td_hrry_wcore_init(struct td_hrry_wcore *w,
		       const struct td_hrry_writer_options *opts,
		       struct td_hrry_err *err);
/* Exact descriptor length d encodes to (descriptor_length). */
int td_hrry_desc_encoded_len(const struct td_hrry_desc *d, uint32_t *len,
			     struct td_hrry_err *err);
/* Encode d into buf[0, cap); returns bytes written or -errno. */
int td_hrry_desc_encode(const struct td_hrry_desc *d, uint8_t *buf,
			size_t cap, struct td_hrry_err *err);
/*
 * Start one record. d must be a supported tensor or a composite head
 * (checked: §14, buffer sizes); e receives its index entry (name
 * borrowed: keep it alive until finish). 0 or -errno.
 */
int td_hrry_wcore_begin_tensor(struct td_hrry_wcore *w, const char *name,
			       size_t name_len, const struct td_hrry_desc *d,
			       struct td_hrry_wentry *e,
			       struct td_hrry_err *err);
/*
 * Start the end of the file: KV kv[0, kv_count) (validated first, as
 * td_hrry_check_kv with kv_order as its scratch), the index of
 * entries[0, count) (order: scratch of count u32 the core sorts when
 * sorted_index, may be NULL otherwise), trailer. 0 or -errno.
 */
int td_hrry_wcore_begin_finish(struct td_hrry_wcore *w,
			       const struct td_hrry_kv_entry *kv,
			       size_t kv_count, uint32_t *kv_order,
			       struct td_hrry_wentry *entries,
			       uint64_t count, uint32_t *order,
			       struct td_hrry_err *err);
/* TD_HRRY_STEP_NEED with the next slice, or DONE for this phase. */
int td_hrry_wcore_next(struct td_hrry_wcore *w, struct td_hrry_slice *s);
/* The driver emitted n bytes of the current slice (n <= s.len). */
void td_hrry_wcore_advance(struct td_hrry_wcore *w, uint64_t n);

/*
 * Checks shared by writer and reader on names/KV (UTF-8, lengths, no
 * key twice). scratch: count u32 the duplicate check sorts, in
 * O(n log n); NULL compares every pair (O(n^2): a few keys only).
 */
int td_hrry_check_kv(const struct td_hrry_kv_entry *kv, size_t count,
		     uint32_t *scratch, struct td_hrry_err *err);

#endif
