/* SPDX-License-Identifier: MIT */
/*
 * The blocking Hurray handles of <tensord/hrry.h> (specs/hurray.md
 * §17.3): a thin driver over the sans-I/O core of proto/hrry.h. It moves
 * bytes through the caller's transport, retries short reads and partial
 * writes, and owns the memory the core asks for.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hrry.h"

struct td_hrry_file_reader {
	struct td_hrry_transport t;
	struct td_hrry_rcore c;
	void *index, *kv, *mem_index, *mem_kv; /* owned unless views */
	bool index_view, kv_view;
	const uint8_t **desc_bytes; /* per entry, cached raw descriptor */
	uint8_t *desc_owned;        /* per entry: 1 when desc_bytes[i] is ours */
	struct td_hrry_kv_value **kv_items; /* per KV entry, lazily */
};

struct td_hrry_file_writer {
	struct td_hrry_transport t;
	bool poisoned, finished;
	struct td_hrry_wentry *entries;
	uint64_t count, cap;
	uint32_t *set; /* open-addressing set of entry numbers + 1 */
	uint64_t set_cap;
	struct td_hrry_wcore core;
};

/* ---- transport helpers ---- */

static int io_fail(struct td_hrry_err *err, int rc, uint64_t off,
		   const char *reason)
{
	td__hrry_fail(err, TD_HRRY_E_IO, off, reason);
	if (err)
		err->code = rc;
	return rc;
}

static int read_full(const struct td_hrry_transport *t, uint64_t off,
		     void *buf, uint64_t len, struct td_hrry_err *err)
{
	uint8_t *p = buf;
	uint64_t done = 0;
	if (!t->read_at)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "transport cannot read");
	while (done < len) {
		size_t got = 0;
		uint64_t want = len - done;
		if (want > (1u << 30))
			want = 1u << 30;
		int rc = t->read_at(t->ctx, off + done, p + done, (size_t)want,
				    &got);
		if (rc < 0)
			return io_fail(err, rc, off + done,
				       "transport read failed");
		if (got == 0)
			return td__hrry_fail(err, TD_HRRY_E_UNEXPECTED_EOF,
					     off + done,
					     "the file ended before the "
					     "requested range");
		if (got > want)
			return io_fail(err, -EIO, off + done,
				       "transport read more than asked");
		done += got;
	}
	return 0;
}

/*
 * Bytes [off, off+len): a view when the transport has them, else a copy
 * in *owned (malloc). *out points at them either way.
 */
static int fetch(const struct td_hrry_transport *t, uint64_t off,
		 uint64_t len, const void **out, void **owned,
		 struct td_hrry_err *err)
{
	*owned = NULL;
	if (len > SIZE_MAX)
		return td__hrry_fail(err, TD_HRRY_E_NO_MEMORY, off,
				     "range larger than the address space");
	if (t->view_at) {
		int rc = t->view_at(t->ctx, off, (size_t)len, out);
		if (rc < 0)
			return rc == -ENODATA ?
				       td__hrry_fail(err,
						     TD_HRRY_E_UNEXPECTED_EOF,
						     off,
						     "the file ended before the "
						     "requested range") :
				       io_fail(err, rc, off,
					       "transport view failed");
		return 0;
	}
	void *p = malloc(len ? (size_t)len : 1);
	if (!p)
		return td__hrry_fail(err, TD_HRRY_E_NO_MEMORY, off,
				     "out of memory");
	int rc = read_full(t, off, p, len, err);
	if (rc) {
		free(p);
		return rc;
	}
	*out = p;
	*owned = p;
	return 0;
}

static void release(struct td_hrry_transport *t)
{
	if (t->release)
		t->release(t->ctx);
	t->release = NULL;
	t->ctx = NULL;
}

/* ---- reader ---- */

static void reader_destroy(struct td_hrry_file_reader *r)
{
	if (r->desc_bytes)
		for (uint64_t i = 0; i < r->c.entry_count; i++)
			if (r->desc_owned[i])
				free((void *)(uintptr_t)r->desc_bytes[i]);
	free(r->desc_bytes);
	free(r->desc_owned);
	if (r->kv_items)
		for (uint32_t i = 0; i < r->c.kv_count; i++)
			free(r->kv_items[i]);
	free(r->kv_items);
	if (!r->index_view)
		free(r->index);
	if (!r->kv_view)
		free(r->kv);
	free(r->mem_index);
	free(r->mem_kv);
	release(&r->t);
	free(r);
}

int td_hrry_file_reader_new(const struct td_hrry_transport *transport,
			    struct td_hrry_file_reader **out,
			    struct td_hrry_err *err)
{
	struct td_hrry_need need;
	uint8_t small[TD_HRRY_HEADER_LEN];
	int rc;
	*out = NULL;
	struct td_hrry_file_reader *r = calloc(1, sizeof(*r));
	if (!r) {
		struct td_hrry_transport t = *transport;
		release(&t);
		return td__hrry_fail(err, TD_HRRY_E_NO_MEMORY, 0,
				     "out of memory");
	}
	r->t = *transport;
	td_hrry_rcore_init(&r->c, r->t.size);
	while ((rc = td_hrry_rcore_step(&r->c, &need, err)) ==
	       TD_HRRY_STEP_NEED) {
		const void *buf;
		void *owned = NULL;
		if (need.kind == TD_HRRY_NEED_MEMORY) {
			/* sized by the core from bounded counts (§13) */
			owned = calloc(1, need.len ? (size_t)need.len : 1);
			if (!owned) {
				rc = td__hrry_fail(err, TD_HRRY_E_NO_MEMORY, 0,
						   "out of memory");
				goto fail;
			}
			if (!r->mem_index)
				r->mem_index = owned;
			else
				r->mem_kv = owned;
			buf = owned;
		} else if (r->c.index_length == 0) {
			/* header and trailer (the trailer not parsed yet):
			 * the core does not keep them */
			rc = read_full(&r->t, need.offset, small, need.len, err);
			if (rc)
				goto fail;
			buf = small;
		} else {
			/* index, then KV: kept (borrowed by the core) */
			rc = fetch(&r->t, need.offset, need.len, &buf, &owned,
				   err);
			if (rc)
				goto fail;
			if (!r->c.index) {
				r->index = owned;
				r->index_view = owned == NULL;
			} else {
				r->kv = owned;
				r->kv_view = owned == NULL;
			}
		}
		rc = td_hrry_rcore_supply(&r->c, buf, need.len, err);
		if (rc)
			goto fail;
	}
	if (rc < 0)
		goto fail;
	r->desc_bytes = calloc(r->c.entry_count ? r->c.entry_count : 1,
			       sizeof(*r->desc_bytes));
	r->desc_owned = calloc(r->c.entry_count ? r->c.entry_count : 1, 1);
	r->kv_items = calloc(r->c.kv_count ? r->c.kv_count : 1,
			     sizeof(*r->kv_items));
	if (!r->desc_bytes || !r->desc_owned || !r->kv_items) {
		rc = td__hrry_fail(err, TD_HRRY_E_NO_MEMORY, 0,
				   "out of memory");
		goto fail;
	}
	*out = r;
	return 0;
fail:
	reader_destroy(r);
	return rc;
}

void td_hrry_file_reader_free(struct td_hrry_file_reader **pr)
{
	if (!pr || !*pr)
		return;
	reader_destroy(*pr);
	*pr = NULL;
}

int td_hrry_file_reader_tensor_count(const struct td_hrry_file_reader *r,
				     uint64_t *count)
{
	if (!r || !count)
		return -EINVAL;
	*count = r->c.entry_count;
	return 0;
}

int td_hrry_file_reader_entry(const struct td_hrry_file_reader *r,
			      uint64_t index, struct td_hrry_entry *out)
{
	if (!r || !out || index >= r->c.entry_count)
		return -EINVAL;
	td_hrry_rcore_entry(&r->c, index, out);
	return 0;
}

int td_hrry_file_reader_tensor_name(const struct td_hrry_file_reader *r,
				    uint64_t index, const char **name,
				    size_t *name_len)
{
	struct td_hrry_entry e;
	int rc = td_hrry_file_reader_entry(r, index, &e);
	if (rc)
		return rc;
	*name = e.name;
	*name_len = e.name_len;
	return 0;
}

uint32_t td_hrry_file_reader_alignment(const struct td_hrry_file_reader *r)
{
	return r->c.alignment;
}

uint32_t td_hrry_file_reader_flags(const struct td_hrry_file_reader *r)
{
	return r->c.file_flags;
}

void td_hrry_file_reader_index(const struct td_hrry_file_reader *r,
			       uint64_t *offset, uint64_t *length,
			       uint32_t *crc32c)
{
	if (offset)
		*offset = r->c.index_offset;
	if (length)
		*length = r->c.index_length;
	if (crc32c)
		*crc32c = r->c.index_crc32c;
}

/* Descriptor of entry i, decoded and checked (§13 steps 7-9). */
static int load_desc(struct td_hrry_file_reader *r, uint64_t i,
		     struct td_hrry_entry *e, struct td_hrry_desc *d,
		     struct td_hrry_err *err)
{
	td_hrry_rcore_entry(&r->c, i, e);
	if (!r->desc_bytes[i]) {
		const void *buf;
		void *owned;
		int rc = td_hrry_desc_len_check(e, err);
		if (!rc)
			rc = fetch(&r->t, e->descriptor_offset,
				   e->descriptor_length, &buf, &owned, err);
		if (rc)
			return rc;
		r->desc_bytes[i] = buf;
		r->desc_owned[i] = owned != NULL;
	}
	return td_hrry_rcore_check_desc(&r->c, e, r->desc_bytes[i], d, err);
}

static int find(struct td_hrry_file_reader *r, const char *name,
		size_t name_len, uint64_t *i, struct td_hrry_err *err)
{
	if (!r || (!name && name_len))
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "no reader or name");
	return td_hrry_rcore_find(&r->c, name, name_len, i, err);
}

int td_hrry_file_reader_read_descriptor(struct td_hrry_file_reader *r,
					const char *name, size_t name_len,
					struct td_hrry_desc *out,
					struct td_hrry_err *err)
{
	struct td_hrry_entry e;
	uint64_t i;
	int rc = find(r, name, name_len, &i, err);
	if (rc)
		return rc;
	return load_desc(r, i, &e, out, err);
}

/* Steps 10-11 and the data range of a supported tensor. */
static int data_range(const struct td_hrry_entry *e,
		      const struct td_hrry_desc *d, uint64_t *off,
		      uint64_t *len, struct td_hrry_err *err)
{
	int rc = td_hrry_rcore_check_supported(e, d, err);
	if (rc)
		return rc;
	if (d->layout_tag == TD_HRRY_LAYOUT_COMPOSITE) {
		*off = e->data_offset;
		*len = 0;
		return 0;
	}
	td_hrry_dense_size(d, len); /* checked above */
	*off = e->data_offset + d->byte_offset;
	return 0;
}

void td_hrry_tensor_fini(struct td_hrry_tensor *t)
{
	if (!t)
		return;
	free(t->owned_);
	t->owned_ = NULL;
	t->data = NULL;
	t->data_len = 0;
}

static int read_one(struct td_hrry_file_reader *r, uint64_t i,
		    struct td_hrry_tensor *out, struct td_hrry_err *err)
{
	uint64_t off, len;
	int rc = load_desc(r, i, &out->entry, &out->desc, err);
	if (!rc)
		rc = data_range(&out->entry, &out->desc, &off, &len, err);
	if (rc)
		return rc;
	if (out->desc.layout_tag == TD_HRRY_LAYOUT_COMPOSITE)
		return 0;
	rc = fetch(&r->t, off, len, &out->data, &out->owned_, err);
	if (rc)
		return rc;
	out->data_len = len;
	return 0;
}

int td_hrry_file_reader_read_tensor(struct td_hrry_file_reader *r,
				    const char *name, size_t name_len,
				    struct td_hrry_tensor *out,
				    struct td_hrry_err *err)
{
	uint64_t i;
	memset(out, 0, sizeof(*out));
	int rc = find(r, name, name_len, &i, err);
	if (!rc)
		rc = read_one(r, i, out, err);
	if (rc) {
		td_hrry_tensor_fini(out);
		memset(out, 0, sizeof(*out));
	}
	return rc;
}

int td_hrry_file_reader_read_tensor_into(struct td_hrry_file_reader *r,
					 const char *name, size_t name_len,
					 void *dst, uint64_t cap,
					 struct td_hrry_desc *desc,
					 struct td_hrry_err *err)
{
	struct td_hrry_entry e;
	struct td_hrry_desc local;
	struct td_hrry_desc *d = desc ? desc : &local;
	uint64_t i, off, len;
	int rc = find(r, name, name_len, &i, err);
	if (!rc)
		rc = load_desc(r, i, &e, d, err);
	if (!rc)
		rc = data_range(&e, d, &off, &len, err);
	if (rc)
		return rc;
	if (len > cap) {
		td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, off,
			      "destination smaller than the tensor");
		if (err)
			err->code = -ENOBUFS;
		return -ENOBUFS;
	}
	if (r->t.view_at && len) {
		const void *v;
		void *owned;
		rc = fetch(&r->t, off, len, &v, &owned, err);
		if (rc)
			return rc;
		memcpy(dst, v, (size_t)len);
		return 0;
	}
	return read_full(&r->t, off, dst, len, err);
}

void td_hrry_composite_fini(struct td_hrry_composite *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->node_count; i++)
		td_hrry_tensor_fini(&c->nodes[i].tensor);
	free(c->nodes);
	c->nodes = NULL;
	c->node_count = 0;
}

int td_hrry_file_reader_read_composite(struct td_hrry_file_reader *r,
				       const char *name, size_t name_len,
				       struct td_hrry_composite *out,
				       struct td_hrry_err *err)
{
	struct td_hrry_cwalk w;
	const struct td_hrry_desc **descs = NULL;
	uint64_t *offs = NULL;
	size_t cap = 0, n = 0;
	uint32_t stack[TD_HRRY_MAX_NESTING + 1], left[TD_HRRY_MAX_NESTING + 1];
	uint32_t depth = 0;
	uint64_t i;
	int rc;
	memset(out, 0, sizeof(*out));
	rc = find(r, name, name_len, &i, err);
	if (!rc)
		rc = td_hrry_cwalk_init(&w, &r->c, i, err);
	while (!rc && td_hrry_cwalk_step(&w) == TD_HRRY_STEP_NEED) {
		if (n == cap) {
			/* one node per index entry at most: bounded */
			size_t nc = cap ? 2 * cap : 8;
			struct td_hrry_node *nn =
				realloc(out->nodes, nc * sizeof(*nn));
			if (!nn) {
				rc = td__hrry_fail(err, TD_HRRY_E_NO_MEMORY, 0,
						   "out of memory");
				break;
			}
			out->nodes = nn;
			cap = nc;
		}
		struct td_hrry_node *node = &out->nodes[n];
		memset(node, 0, sizeof(*node));
		out->node_count = ++n;
		rc = load_desc(r, w.next, &node->tensor.entry,
			       &node->tensor.desc, err);
		if (rc)
			break;
		/* preorder bookkeeping: parent = the innermost open head */
		while (depth > 0 && left[depth - 1] == 0)
			depth--;
		node->depth = depth;
		node->parent = depth ? stack[depth - 1] : UINT32_MAX;
		if (depth)
			left[depth - 1]--;
		if (node->tensor.desc.layout_tag == TD_HRRY_LAYOUT_COMPOSITE &&
		    depth <= TD_HRRY_MAX_NESTING) {
			stack[depth] = (uint32_t)(n - 1);
			left[depth] = node->tensor.desc.member_count;
			depth++;
		}
		rc = td_hrry_cwalk_feed(&w, &node->tensor.desc, err);
	}
	if (!rc) {
		descs = malloc(n * sizeof(*descs));
		offs = malloc(n * sizeof(*offs));
		if (!descs || !offs)
			rc = td__hrry_fail(err, TD_HRRY_E_NO_MEMORY, 0,
					   "out of memory");
	}
	if (!rc) {
		for (size_t k = 0; k < n; k++) {
			descs[k] = &out->nodes[k].tensor.desc;
			offs[k] = out->nodes[k].tensor.entry.descriptor_offset;
		}
		rc = td_hrry_composite_check(descs, n, offs, err);
	}
	for (size_t k = 0; !rc && k < n; k++) {
		struct td_hrry_tensor *t = &out->nodes[k].tensor;
		uint64_t off, len;
		rc = data_range(&t->entry, &t->desc, &off, &len, err);
		if (!rc && t->desc.layout_tag != TD_HRRY_LAYOUT_COMPOSITE) {
			rc = fetch(&r->t, off, len, &t->data, &t->owned_, err);
			t->data_len = rc ? 0 : len;
		}
	}
	free(descs);
	free(offs);
	if (rc)
		td_hrry_composite_fini(out);
	return rc;
}

int td_hrry_file_reader_kv_count(const struct td_hrry_file_reader *r,
				 uint64_t *count)
{
	if (!r || !count)
		return -EINVAL;
	*count = r->c.kv_count;
	return 0;
}

int td_hrry_file_reader_kv_entry(const struct td_hrry_file_reader *r,
				 uint64_t index, struct td_hrry_kv_entry *out)
{
	if (!r || !out || index >= r->c.kv_count)
		return -EINVAL;
	td_hrry_rcore_kv(&r->c, (uint32_t)index, out);
	struct td_hrry_kv_value *v = &out->value;
	if (v->kind != TD_HRRY_KV_ARRAY)
		return 0;
	/* items are decoded once, on first use, and kept with the reader
	 * (the reader is logically const: this is a cache) */
	struct td_hrry_kv_value **slot =
		&((struct td_hrry_file_reader *)(uintptr_t)r)->kv_items[index];
	if (v->item_count > TD_HRRY_MAX_KV_ITEMS)
		return -EFBIG; /* each item in the file may be one byte */
	if (!*slot && v->item_count) {
		struct td_hrry_kv_value *items =
			calloc(v->item_count, sizeof(*items));
		if (!items)
			return -ENOMEM;
		for (size_t k = 0; k < v->item_count; k++)
			td_hrry_kv_item(v, k, &items[k]);
		*slot = items;
	}
	v->items = *slot;
	return 0;
}

/* ---- writer ---- */

static int writer_fail(struct td_hrry_file_writer *w, int rc)
{
	w->poisoned = true;
	return rc;
}

static int emit(struct td_hrry_file_writer *w, const void *const *buffers,
		struct td_hrry_err *err)
{
	static const uint8_t zeros[4096];
	struct td_hrry_slice s;
	while (td_hrry_wcore_next(&w->core, &s) == TD_HRRY_STEP_NEED) {
		const uint8_t *p;
		uint64_t len = s.len;
		switch (s.kind) {
		case TD_HRRY_SLICE_BYTES:
			p = s.ptr;
			break;
		case TD_HRRY_SLICE_ZEROS:
			p = zeros;
			if (len > sizeof(zeros))
				len = sizeof(zeros);
			break;
		default:
			p = (const uint8_t *)buffers[s.buffer] + s.skip;
			break;
		}
		if (len > (1u << 30))
			len = 1u << 30;
		size_t put = 0;
		int rc = w->t.write(w->t.ctx, p, (size_t)len, &put);
		if (rc < 0)
			return io_fail(err, rc, w->core.pos,
				       "transport write failed");
		if (put == 0 || put > len)
			return io_fail(err, -EIO, w->core.pos,
				       "transport accepted no bytes");
		td_hrry_wcore_advance(&w->core, put);
	}
	return 0;
}

int td_hrry_file_writer_new(const struct td_hrry_transport *transport,
			    const struct td_hrry_writer_options *opts,
			    struct td_hrry_file_writer **out,
			    struct td_hrry_err *err)
{
	*out = NULL;
	struct td_hrry_file_writer *w = calloc(1, sizeof(*w));
	if (!w) {
		struct td_hrry_transport t = *transport;
		release(&t);
		return td__hrry_fail(err, TD_HRRY_E_NO_MEMORY, 0,
				     "out of memory");
	}
	w->t = *transport;
	int rc = w->t.write ? 0 :
			      td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
					    "transport cannot write");
	if (!rc)
		rc = td_hrry_wcore_init(&w->core, opts, err);
	if (!rc)
		rc = emit(w, NULL, err);
	if (rc) {
		release(&w->t);
		free(w);
		return rc;
	}
	*out = w;
	return 0;
}

static int writer_usable(struct td_hrry_file_writer *w,
			 struct td_hrry_err *err)
{
	if (!w)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "no writer");
	if (w->poisoned)
		return td__hrry_fail(err, TD_HRRY_E_WRITER_POISONED, 0,
				     "an earlier call on this writer failed");
	if (w->finished)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "the writer is finished");
	return 0;
}

static uint64_t name_hash(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
	return h;
}

/* Slot for name in the set: holds 0 (free) or the matching entry + 1. */
static uint32_t *set_slot(struct td_hrry_file_writer *w, const char *name,
			  size_t len)
{
	uint64_t m = w->set_cap - 1, i = name_hash(name, len) & m;
	for (;; i = (i + 1) & m) {
		uint32_t v = w->set[i];
		if (!v)
			return &w->set[i];
		const struct td_hrry_wentry *e = &w->entries[v - 1];
		if (e->name_len == len && !memcmp(e->name, name, len))
			return &w->set[i];
	}
}

/* Room for one more entry and its name; -ENOMEM. */
static int reserve(struct td_hrry_file_writer *w)
{
	if (w->count == w->cap) {
		uint64_t nc = w->cap ? 2 * w->cap : 16;
		struct td_hrry_wentry *ne =
			realloc(w->entries, nc * sizeof(*ne));
		if (!ne)
			return -ENOMEM;
		w->entries = ne;
		w->cap = nc;
	}
	if (2 * (w->count + 1) > w->set_cap) {
		uint64_t nc = w->set_cap ? 2 * w->set_cap : 64;
		uint32_t *old = w->set;
		uint64_t oc = w->set_cap;
		w->set = calloc(nc, sizeof(*w->set));
		if (!w->set) {
			w->set = old;
			return -ENOMEM;
		}
		w->set_cap = nc;
		for (uint64_t i = 0; i < oc; i++)
			if (old[i]) {
				const struct td_hrry_wentry *e =
					&w->entries[old[i] - 1];
				*set_slot(w, e->name, e->name_len) = old[i];
			}
		free(old);
	}
	return 0;
}

static int check_new_name(struct td_hrry_file_writer *w, const char *name,
			  size_t len, struct td_hrry_err *err)
{
	if (!name || len == 0 || len > TD_HRRY_MAX_NAME_LEN)
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "tensor name must be 1-65535 bytes");
	if (reserve(w))
		return td__hrry_fail(err, TD_HRRY_E_NO_MEMORY, 0,
				     "out of memory");
	if (*set_slot(w, name, len))
		return td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
				     "a tensor of that name was already "
				     "written");
	return 0;
}

static int write_record(struct td_hrry_file_writer *w, const char *name,
			size_t len, const struct td_hrry_desc *d,
			const void *const *buffers, struct td_hrry_err *err)
{
	int rc = check_new_name(w, name, len, err);
	if (rc)
		return rc;
	char *copy = malloc(len);
	if (!copy)
		return td__hrry_fail(err, TD_HRRY_E_NO_MEMORY, 0,
				     "out of memory");
	memcpy(copy, name, len);
	struct td_hrry_wentry *e = &w->entries[w->count];
	rc = td_hrry_wcore_begin_tensor(&w->core, copy, len, d, e, err);
	if (rc) {
		free(copy);
		return rc;
	}
	w->count++;
	*set_slot(w, copy, len) = (uint32_t)w->count;
	return emit(w, buffers, err);
}

int td_hrry_file_writer_write_tensor(struct td_hrry_file_writer *w,
				     const char *name, size_t name_len,
				     const struct td_hrry_desc *d,
				     const void *const *buffers,
				     struct td_hrry_err *err)
{
	int rc = writer_usable(w, err);
	if (rc)
		return rc;
	bool missing = d && d->buffer_count && !buffers;
	for (uint32_t k = 0; d && buffers && k < d->buffer_count &&
			     k < TD_HRRY_MAX_BUFFERS; k++)
		missing |= d->buffers[k].byte_size && !buffers[k];
	if (!d || d->layout_tag == TD_HRRY_LAYOUT_COMPOSITE || missing)
		return writer_fail(w, td__hrry_fail(err,
						    TD_HRRY_E_INVALID_ARGUMENT,
						    0,
						    "composite heads go "
						    "through write_composite; "
						    "buffers are needed"));
	rc = write_record(w, name, name_len, d, buffers, err);
	return rc ? writer_fail(w, rc) : 0;
}

int td_hrry_file_writer_write_composite(struct td_hrry_file_writer *w,
					const struct td_hrry_node *nodes,
					size_t count, struct td_hrry_err *err)
{
	int rc = writer_usable(w, err);
	if (rc)
		return rc;
	if (!nodes || count == 0)
		return writer_fail(w, td__hrry_fail(err,
						    TD_HRRY_E_INVALID_ARGUMENT,
						    0, "no nodes"));
	const struct td_hrry_desc **descs = malloc(count * sizeof(*descs));
	if (!descs)
		return writer_fail(w, td__hrry_fail(err, TD_HRRY_E_NO_MEMORY,
						    0, "out of memory"));
	for (size_t i = 0; i < count; i++)
		descs[i] = &nodes[i].tensor.desc;
	/* the whole tree first (§15 step 2): nothing is written when a
	 * rule fails, and every node is a tensor tensord can write */
	rc = td_hrry_composite_check(descs, count, NULL, err);
	free(descs);
	for (size_t i = 0; !rc && i < count; i++) {
		const struct td_hrry_tensor *t = &nodes[i].tensor;
		rc = td_hrry_desc_supported(&t->desc, err);
		if (!rc && t->desc.layout_tag != TD_HRRY_LAYOUT_COMPOSITE &&
		    (t->data_len != t->desc.buffers[0].byte_size ||
		     (t->data_len && !t->data)))
			rc = td__hrry_fail(err, TD_HRRY_E_INVALID_ARGUMENT, 0,
					   "node data_len differs from its "
					   "buffer size");
	}
	for (size_t i = 0; !rc && i < count; i++) {
		const struct td_hrry_tensor *t = &nodes[i].tensor;
		const void *bufs[1] = {t->data};
		rc = write_record(w, t->entry.name, t->entry.name_len,
				  &t->desc, bufs, err);
	}
	return rc ? writer_fail(w, rc) : 0;
}

int td_hrry_file_writer_finish(struct td_hrry_file_writer *w,
			       const struct td_hrry_kv_entry *kv,
			       size_t kv_count, struct td_hrry_err *err)
{
	int rc = writer_usable(w, err);
	if (rc)
		return rc;
	/* scratch: the index's order (SORTED_INDEX), then the KV keys'
	 * (the duplicate check sorts them rather than compare every pair) */
	uint64_t n_order = w->core.sorted_index ? w->count : 0;
	uint32_t *order = NULL;
	if (n_order + kv_count) {
		order = kv_count > SIZE_MAX / sizeof(*order) - n_order
				? NULL
				: malloc((n_order + kv_count) * sizeof(*order));
		if (!order)
			return writer_fail(w, td__hrry_fail(
						      err, TD_HRRY_E_NO_MEMORY,
						      0, "out of memory"));
	}
	rc = td_hrry_wcore_begin_finish(&w->core, kv, kv_count,
					order ? order + n_order : NULL,
					w->entries, w->count,
					n_order ? order : NULL, err);
	if (!rc)
		rc = emit(w, NULL, err);
	free(order);
	if (rc)
		return writer_fail(w, rc);
	w->finished = true;
	return 0;
}

void td_hrry_file_writer_free(struct td_hrry_file_writer **pw)
{
	if (!pw || !*pw)
		return;
	struct td_hrry_file_writer *w = *pw;
	for (uint64_t i = 0; i < w->count; i++)
		free((void *)(uintptr_t)w->entries[i].name);
	free(w->entries);
	free(w->set);
	release(&w->t);
	free(w);
	*pw = NULL;
}
