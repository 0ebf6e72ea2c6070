/* SPDX-License-Identifier: MIT */
/*
 * tensorctl load: publish every data object of a .tgm file (every message,
 * or the one --message names) as a tensor (../shared/specs/tensogram.md
 * §15 import subset, §18 naming; names made distinct across the file).
 * All or nothing: everything is checked before anything is published (of
 * a stream, a message at a time: one that fails deletes again what the
 * ones before it published), and when the daemon refuses an object
 * (quota, policy) the versions already published are deleted again,
 * unless --partial.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <json-c/json.h>

#include "input.h"
#include "keep.h"
#include "td-json.h"
#include "output.h"
#include "tensorctl.h"
#include "tgm-desc.h"
#include "tgm.h"
#include "wire.h"

#include "tgm-load.h"

static uint32_t blob_dtype(enum td_tgm_dtype t)
{
	switch (t) {
	case TD_TGM_INT8:
		return TD_TENSOR_I8;
	case TD_TGM_INT16:
		return TD_TENSOR_I16;
	case TD_TGM_INT32:
		return TD_TENSOR_I32;
	case TD_TGM_INT64:
		return TD_TENSOR_I64;
	case TD_TGM_UINT8:
		return TD_TENSOR_U8;
	case TD_TGM_UINT16:
		return TD_TENSOR_U16;
	case TD_TGM_UINT32:
		return TD_TENSOR_U32;
	case TD_TGM_UINT64:
		return TD_TENSOR_U64;
	case TD_TGM_FLOAT16:
		return TD_TENSOR_F16;
	case TD_TGM_FLOAT32:
		return TD_TENSOR_F32;
	case TD_TGM_FLOAT64:
		return TD_TENSOR_F64;
	default:
		return UINT32_MAX; /* refused by the import check first */
	}
}

int tctl_tgm_refuse(const struct load *l, long obj, const char *fmt, ...)
{
	char what[1024], where[64] = "";
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (obj >= 0)
		snprintf(where, sizeof(where), " object %ld", obj);
	return tctl_fail(TCTL_REFUSED, "input", EBADMSG,
	                 "%s: message %" PRIu64 "%s: %s", l->path,
	                 l->msg_index, where, what);
}

/* The value a refused descriptor field had, for the message. */
static const char *field_value(const struct td_tgm_desc *d, const char *f)
{
	if (!f)
		return NULL;
	if (!strcmp(f, "type"))
		return d->type;
	if (!strcmp(f, "dtype"))
		return d->dtype_name;
	if (!strcmp(f, "encoding"))
		return d->encoding;
	if (!strcmp(f, "filter"))
		return d->filter;
	if (!strcmp(f, "compression"))
		return d->compression;
	return NULL;
}

static int meta_frame(struct load *l, struct tgm_src *s, uint64_t base,
                      const struct td_tgm_frame *fr, struct td_tgm_meta **out)
{
	struct td_err e = {0};
	uint8_t *payload;
	int rc = tgm_frame_payload(s, base, fr, &payload);

	if (rc == -EIO)
		return tgm_src_fail(s);
	if (rc < 0)
		return tctl_tgm_refuse(l, -1, "%s frame at offset %" PRIu64
		                       ": out of memory", fr->name, fr->offset);
	rc = td_tgm_meta_new(payload, fr->payload_len, out, &e);
	free(payload);
	if (rc < 0)
		return tctl_tgm_refuse(l, -1, "%s frame at offset %" PRIu64 ": %s",
		              fr->name, fr->offset, e.reason);
	return 0;
}

/* Object l->count from a type-9 frame; TCTL_OK or reported. */
static int collect_object(struct load *l, struct tgm_src *s, uint64_t base,
                          const struct td_tgm_frame *fr)
{
	struct obj *ob;
	struct td_err e = {0};
	int rc;

	if (l->count == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		struct obj *n = realloc(l->objs, cap * sizeof(*n));
		if (!n)
			return tctl_tgm_refuse(l, -1, "out of memory");
		l->objs = n;
		l->cap = cap;
	}
	ob = &l->objs[l->count];
	memset(ob, 0, sizeof(*ob));
	rc = tgm_object_read(s, base, fr, &ob->o, &ob->cbor, &e);
	if (rc < 0) {
		free(ob->cbor);
		ob->cbor = NULL;
	}
	if (rc == -EIO)
		return tgm_src_fail(s);
	if (rc == -ENOMEM)
		return tctl_tgm_refuse(l, (long)l->count, "out of memory");
	if (rc < 0)
		return tctl_tgm_refuse(l, (long)l->count,
		                       "descriptor: %s%s%s at offset %" PRIu64,
		                       e.field ? e.field : "",
		                       e.field ? ": " : "", e.reason, e.offset);
	ob->data_off = base + ob->o.data_offset;
	l->count++;
	return 0;
}

int tctl_tgm_collect(struct load *l, struct tgm_src *s,
                     const struct td_tgm_span *sp)
{
	struct td_tgm_meta *pending = NULL;
	struct tgm_walk w;
	struct td_tgm_frame fr;
	struct td_err e = {0};
	int rc;

	rc = tgm_walk_open(&w, s, sp->offset, sp->length, &e);
	if (s->io_err)
		return tgm_src_fail(s);
	if (rc < 0)
		return tctl_tgm_refuse(l, -1, "%s at offset %" PRIu64, e.reason,
		              e.offset);
	while ((rc = tgm_walk_next(&w, &fr, &e)) == 1) {
		struct td_tgm_meta **slot = NULL;
		struct obj *ob;
		int ok;

		/* read whole below (and hashed before): its declared size
		 * is checked first, a sparse file declares any */
		if (tgm_is_meta_frame(fr.type) &&
		    fr.payload_len > TGM_META_MAX)
			return tctl_fail(TCTL_REFUSED, "input", EFBIG,
			                 "%s: message %" PRIu64 ": %s frame at "
			                 "offset %" PRIu64 ": %" PRIu64 " bytes "
			                 "of metadata, over tensorctl's 16 MiB "
			                 "limit for a metadata frame (the daemon "
			                 "takes 16 KiB per tensor)",
			                 l->path, l->msg_index, fr.name,
			                 fr.offset, fr.payload_len);
		ok = fr.has_hash ? tgm_frame_hash_ok(s, sp->offset, &fr) : 1;

		/* a frame that says it is hashed must match its hash */
		if (ok < 0)
			return tgm_src_fail(s);
		if (!ok)
			return tctl_tgm_refuse(l, -1,
			              "%s frame at offset %" PRIu64
			              ": hash mismatch",
			              fr.name, fr.offset);
		switch (fr.type) {
		case TD_TGM_HEADER_METADATA_FRAME:
			slot = &l->header;
			break;
		case TD_TGM_FOOTER_METADATA_FRAME:
			slot = &l->footer;
			break;
		case TD_TGM_PRECEDER_METADATA_FRAME: {
			struct td_tgm_meta **p =
			        realloc(l->preceders,
			                (l->preceder_count + 1) * sizeof(*p));
			if (!p)
				return tctl_tgm_refuse(l, -1, "out of memory");
			l->preceders = p;
			p[l->preceder_count] = NULL;
			rc = meta_frame(l, s, sp->offset, &fr,
			                &p[l->preceder_count]);
			if (rc)
				return rc;
			pending = p[l->preceder_count++];
			continue;
		}
		case TD_TGM_NTENSOR_FRAME:
			break;
		default:
			continue; /* index and hash frames: nothing to load */
		}
		if (slot) {
			/* a second frame of a kind replaces the first */
			td_tgm_meta_free(*slot);
			*slot = NULL;
			rc = meta_frame(l, s, sp->offset, &fr, slot);
			if (rc)
				return rc;
			continue;
		}
		rc = collect_object(l, s, sp->offset, &fr);
		if (rc)
			return rc;
		ob = &l->objs[l->count - 1];
		ob->meta = pending;
		ob->meta_index = pending ? 0 : l->count - 1;
		pending = NULL;
	}
	if (s->io_err)
		return tgm_src_fail(s);
	if (rc < 0)
		return tctl_tgm_refuse(l, -1, "%s at offset %" PRIu64, e.reason,
		              e.offset);
	return 0;
}

/* Import checks, names and attributes of every object. */
static int prepare(struct load *l, const char *variable_key,
                   const char *prefix)
{
	size_t plen = strlen(prefix);
	int rc = 0;

	for (size_t i = 0; i < l->count && !rc; i++) {
		struct obj *ob = &l->objs[i];
		const struct td_tgm_desc *d = &ob->o.desc;
		char raw[1024];
		struct td_err e = {0};

		if (td_tgm_desc_check_import(d, ob->o.data_len, &e) < 0) {
			const char *v = field_value(d, e.field);

			if (v)
				rc = tctl_tgm_refuse(l, (long)i,
				            "%s \"%s\" is not "
				            "supported (%s)",
				            e.field, v, e.reason);
			else
				rc = tctl_tgm_refuse(l, (long)i, "%s: %s", e.field,
				            e.reason);
			break;
		}
		ob->dtype = blob_dtype(d->dtype);
		/* tensors hold host-order elements; an absent byte_order
		 * already means host order (§15) */
		if (td_tgm_dtype_width(d->dtype) > 1 &&
		    d->byte_order != TD_TGM_ORDER_NATIVE)
			ob->swap = (d->byte_order == TD_TGM_ORDER_BIG) !=
			           (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__);
		rc = tctl_tgm_obj_name(l, i, variable_key, raw, sizeof(raw));
		if (rc)
			break;
		/* main() checked that the prefix leaves room */
		memcpy(ob->name, prefix, plen);
		td_tgm_name_sanitize(raw, ob->name + plen,
		                     BASE_NAME_MAX + 1 - plen);
		/* what save wrote as tensord_meta comes back as it was;
		 * other keys are the metadata, as JSON */
		rc = td_tgm_meta_saved(ob->meta, ob->meta_index,
		                       (uint8_t **)&ob->attrs, &ob->attrs_len);
		if (rc == -ENOMEM) {
			rc = tctl_fail(TCTL_REFUSED, "io", ENOMEM,
			               "out of memory");
			break;
		}
		rc = rc ? 0
		        : td_json_tgm_attrs(ob->meta, ob->meta_index,
		                            &ob->attrs, &ob->attrs_len, &e);
		if (rc < 0) {
			rc = tctl_tgm_refuse(l, (long)i, "metadata: %s", e.reason);
			break;
		}
		if (ob->attrs_len > TD_WIRE_MAX_META)
			rc = tctl_tgm_refuse(l, (long)i,
			            "metadata is %zu bytes as JSON, more "
			            "than a tensor carries (%u)",
			            ob->attrs_len, TD_WIRE_MAX_META);
	}
	return rc;
}

int tctl_tgm_obj_name(struct load *l, size_t i, const char *variable_key,
                      char *raw, size_t cap)
{
	struct obj *ob = &l->objs[i];
	struct td_err e = {0};
	int rc;

	/* attributes: a preceder, else the footer (streaming, where the
	 * header's base is written before any object), else the header */
	if (!ob->meta)
		ob->meta = l->footer && td_tgm_meta_base_count(l->footer) > i
		                   ? l->footer
		                   : l->header;
	rc = td_tgm_object_name(ob->meta, ob->meta_index, ob->o.cbor,
	                        ob->o.cbor_len, variable_key, raw, cap, &e);
	if (rc < 0)
		return tctl_tgm_refuse(l, (long)i, "descriptor: %s", e.reason);
	/* object_<i> counts objects, not base entries (a preceder's entry
	 * is its base[0]) */
	if (rc == 0)
		snprintf(raw, cap, "object_%zu", i);
	return 0;
}

void tctl_copy_swapped(uint8_t *dst, const uint8_t *src, uint64_t len,
                         unsigned width)
{
	for (uint64_t i = 0; i < len; i += width)
		for (unsigned k = 0; k < width; k++)
			dst[i + k] = src[i + width - 1 - k];
}

void tctl_swap_in_place(uint8_t *p, uint64_t len, unsigned width)
{
	for (uint64_t i = 0; i + width <= len; i += width)
		for (unsigned k = 0; k < width / 2; k++) {
			uint8_t t = p[i + k];

			p[i + k] = p[i + width - 1 - k];
			p[i + width - 1 - k] = t;
		}
}

/* What fill() reads at a time: a multiple of every element width. */
#define FILL_PIECE ((uint64_t)4 << 20)

/*
 * size bytes of s at off into dst (the daemon's buffer, mapped shared
 * here), swapped when swap_width is not 0: a piece at a time, each
 * piece's whole pages then leaving this process's page tables
 * (MADV_DONTNEED: the bytes stay in the daemon's memfd), so that a large
 * object does not make tensorctl as large as it. 0 or -EIO.
 */
static int fill(struct tgm_src *s, uint64_t off, uint8_t *dst, uint64_t size,
                unsigned swap_width)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);

	for (uint64_t at = 0; at < size;) {
		uint64_t n = size - at < FILL_PIECE ? size - at : FILL_PIECE;
		uintptr_t a = (uintptr_t)(dst + at), b = a + n;

		if (tgm_src_read(s, off + at, dst + at, n) < 0)
			return -EIO;
		if (swap_width)
			tctl_swap_in_place(dst + at, n, swap_width);
		a = (a + page - 1) & ~(page - 1);
		b &= ~(page - 1);
		if (b > a)
			(void)madvise((void *)a, b - a, MADV_DONTNEED);
		at += n;
	}
	return 0;
}

/*
 * Publish one object; its version in *version. TCTL_OK or reported. Its
 * bytes go from the source straight into the daemon's buffer (pread for
 * a file), swapped there when they are big-endian (fill()): a file cut
 * short meanwhile is an error (UnexpectedEof), never a SIGBUS.
 */
static int publish_one(struct obj *ob, struct tgm_src *s,
                       struct td_client *c, struct tctl_keep *k,
                       struct json_object *sk, uint64_t *version)
{
	const struct td_tgm_desc *d = &ob->o.desc;
	struct td_publish p;
	struct td_error e;
	struct td_alloc *a;
	uint64_t size;
	uint8_t *dst;
	int rc;

	do { /* again while the name changes under the load (keep.h) */
		p = (struct td_publish){.name = ob->name};
		e = (struct td_error){0};
		size = ob->o.data_len;
		rc = tctl_keep_before(k, c, &p);
		if (rc)
			return rc;
		rc = td_client_alloc(c, 1, &size, &a, &e);
		if (rc < 0)
			return tctl_refused(ob->name, rc, &e);
		dst = td_alloc_data(a, 0);
		if (fill(s, ob->data_off, dst, size,
		         ob->swap ? td_tgm_dtype_width(d->dtype) : 0) < 0) {
			td_alloc_free(a);
			return tgm_src_fail(s);
		}
		p.dtype = ob->dtype;
		p.ndim = d->shape_count;
		p.shape = d->shape;
		p.meta = ob->attrs;
		p.meta_len = ob->attrs_len;
		rc = td_client_publish_alloc(c, a, &p, version, &e);
		rc = tctl_keep_after(k, c, ob->name, rc, &e, *version, sk);
	} while (rc == TCTL_KEEP_AGAIN);
	return rc;
}

static struct json_object *published_json(struct obj **objs,
                                          const uint64_t *versions, size_t n,
                                          struct json_object *arr)
{
	for (size_t i = 0; arr && i < n; i++) {
		const struct obj *ob = objs[i];
		const struct td_tgm_desc *d = &ob->o.desc;
		struct json_object *j, *shape;

		if (!versions[i])
			continue; /* skipped (--no-replace) */
		j = json_object_new_object();
		shape = json_object_new_array();

		for (uint32_t k = 0; k < d->shape_count; k++)
			json_object_array_add(
			        shape, json_object_new_uint64(d->shape[k]));
		json_object_object_add(j, "name",
		                       json_object_new_string(ob->name));
		json_object_object_add(j, "version",
		                       json_object_new_uint64(versions[i]));
		json_object_object_add(
		        j, "dtype",
		        json_object_new_string(td_tensor_dtype_name(ob->dtype)));
		json_object_object_add(j, "shape", shape);
		json_object_object_add(j, "byte_swapped",
		                       json_object_new_boolean(ob->swap));
		json_object_array_add(arr, j);
	}
	return arr;
}

static int print_published(struct obj **objs, const uint64_t *versions,
                           size_t n, struct json_object *sk)
{
	struct json_object *o;

	if (tctl_json) {
		o = json_object_new_object();
		json_object_object_add(
		        o, "published",
		        published_json(objs, versions, n,
		                       json_object_new_array()));
		if (sk)
			json_object_object_add(o, "skipped",
			                       json_object_get(sk));
		return tctl_json_print(o);
	}

	for (size_t i = 0; i < n; i++) {
		const struct obj *ob = objs[i];
		const struct td_tgm_desc *d = &ob->o.desc;

		if (!versions[i])
			continue; /* skipped (--no-replace) */

		printf("%s version %" PRIu64 " %s", ob->name, versions[i],
		       td_tensor_dtype_name(ob->dtype));
		tctl_print_shape(stdout, d->shape, d->shape_count, 0);
		printf("%s\n", ob->swap ? " (byte-swapped)" : "");
	}
	return TCTL_OK;
}

/*
 * Publishing objects, all or nothing unless partial: the objects of a
 * file at once, a stream's a message at a time (each message checked
 * whole first). With no_replace a name that exists is skipped (version
 * 0), said and in "skipped", and the status is TCTL_SKIPPED when all
 * else went.
 */
struct pubs {
	const char *path;
	bool partial, no_replace, started;
	struct td_client *c; /* connected at the first object */
	struct obj **objs;   /* every object given, n of them */
	uint64_t *versions;  /* of objs[0..i), tried so far */
	size_t n, cap, i, done, skipped;
	struct json_object *sk;
	struct tctl_keep keep; /* what was published, and replaced */
};

/* Publish objs[0..n) after those before: TCTL_OK or reported. */
static int pubs_add(struct pubs *pr, struct obj **objs, size_t n,
                    struct tgm_src *s)
{
	int rc = TCTL_OK;

	if (pr->n + n > pr->cap) {
		size_t cap = pr->cap ? pr->cap : 8;
		struct obj **no;
		uint64_t *nv;

		while (cap < pr->n + n)
			cap *= 2;
		no = realloc(pr->objs, cap * sizeof(*no));
		if (no)
			pr->objs = no;
		nv = no ? realloc(pr->versions, cap * sizeof(*nv)) : NULL;
		if (nv)
			pr->versions = nv;
		if (!no || !nv)
			return tctl_fail(TCTL_REFUSED, "io", ENOMEM,
			                 "out of memory");
		pr->cap = cap;
	}
	memcpy(pr->objs + pr->n, objs, n * sizeof(*objs));
	pr->n += n;
	if (!pr->c && (rc = tctl_connect(&pr->c)) != TCTL_OK)
		return rc;
	if (!pr->started) {
		pr->started = true;
		pr->sk = pr->no_replace ? json_object_new_array() : NULL;
		/* the error says what was kept, or put back */
		tctl_json_hold();
		tctl_keep_init(&pr->keep, pr->partial, pr->no_replace);
		/* Ctrl-C: stop between two objects and roll back, as for a
		 * refusal (it killed tensorctl with what it had published
		 * left behind) */
		tctl_publish_guard(1);
	}
	for (; !rc && !(rc = tctl_publish_check(pr->path)) && pr->i < pr->n;
	     pr->i++) {
		size_t i = pr->i;

		pr->versions[i] = 0;
		rc = publish_one(pr->objs[i], s, pr->c, &pr->keep,
		                 pr->sk, &pr->versions[i]);
		if (rc == TCTL_SKIPPED) {
			pr->versions[i] = 0;
			pr->skipped++;
			rc = TCTL_OK;
		} else if (!rc) {
			pr->done++;
		}
	}
	return rc;
}

/*
 * The end of publishing, rc the status so far: what was published is
 * rolled back on a failure unless partial, and said. The status.
 */
static int pubs_end(struct pubs *pr, int rc)
{
	size_t i = pr->i, n = pr->n;

	if (!pr->started) {
		td_client_close(pr->c);
		return rc;
	}
	if (rc && pr->partial && pr->done)
		tctl_say("%zu of %zu object(s) published before this "
		         "failure, kept (--partial)",
		         pr->done, n);
	else if (rc && pr->done)
		tctl_say("%zu of %zu object(s) published before this "
		         "failure; %zu deleted again",
		         pr->done, n, tctl_keep_roll_back(&pr->keep, pr->c));
	/* under --json the error object is the whole answer */
	if (!rc || (pr->partial && !tctl_json))
		print_published(pr->objs, pr->versions, i, pr->sk);
	else if (pr->partial) {
		tctl_json_held_add("published",
		               published_json(pr->objs, pr->versions, i,
		                              json_object_new_array()));
		if (pr->sk)
			tctl_json_held_add("skipped", json_object_get(pr->sk));
	}
	if (!rc && pr->skipped)
		rc = TCTL_SKIPPED;
	tctl_publish_guard(0);
	tctl_keep_fini(&pr->keep);
	json_object_put(pr->sk);
	free(pr->objs);
	free(pr->versions);
	td_client_close(pr->c);
	return rc;
}

/* Every object of a file: all or nothing unless partial. */
static int publish(struct obj **objs, size_t n, struct tgm_src *s,
                   bool partial, bool no_replace)
{
	struct pubs pr = {.path = s->path, .partial = partial,
	                  .no_replace = no_replace};

	return pubs_end(&pr, pubs_add(&pr, objs, n, s));
}

void tctl_tgm_load_fini(struct load *l)
{
	for (size_t i = 0; i < l->count; i++) {
		free(l->objs[i].attrs);
		free(l->objs[i].cbor);
	}
	free(l->objs);
	for (size_t i = 0; i < l->preceder_count; i++)
		td_tgm_meta_free(l->preceders[i]);
	free(l->preceders);
	td_tgm_meta_free(l->header);
	td_tgm_meta_free(l->footer);
}

/*
 * Not one .tgm message in the file: said once (not also as skipped
 * bytes), and a .npy file, which a user may well hand to load, is told
 * where it goes.
 */
static int no_message(struct tgm_src *s, const char *path)
{
	uint8_t m[6];
	bool npy = s->size >= sizeof(m) &&
	           tgm_src_read(s, 0, m, sizeof(m)) == 0 &&
	           !memcmp(m, "\x93NUMPY", sizeof(m));

	return tctl_fail(TCTL_REFUSED, "input", ENOENT,
	                 "%s: no complete .tgm message found%s", path,
	                 npy ? " (a NumPy .npy file: tensorctl put NAME FILE "
	                       "publishes it)"
	                     : "");
}

/* Every object of every loaded message, names distinct across them. */
static int gather(struct load *ls, size_t nl, struct obj ***out, size_t *n)
{
	struct obj **objs;
	char **names;
	size_t total = 0, k = 0;
	int rc = TCTL_OK;

	for (size_t i = 0; i < nl; i++)
		total += ls[i].count;
	objs = calloc(total ? total : 1, sizeof(*objs));
	names = calloc(total ? total : 1, sizeof(*names));
	if (!objs || !names)
		rc = tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	for (size_t i = 0; !rc && i < nl; i++)
		for (size_t j = 0; j < ls[i].count; j++, k++) {
			objs[k] = &ls[i].objs[j];
			names[k] = objs[k]->name;
		}
	if (!rc && td_tgm_names_unique(names, total, TD_NAME_MAX + 1) < 0)
		rc = tctl_fail(TCTL_REFUSED, "input", ENAMETOOLONG,
		               "%s: names do not fit with their suffixes",
		               ls[0].path);
	free(names);
	if (rc) {
		free(objs);
		return rc;
	}
	*out = objs;
	*n = total;
	return TCTL_OK;
}

struct load_opts {
	const char *path, *variable_key, *prefix;
	uint64_t max_bytes, message;
	bool one_message, partial, no_replace;
};

enum {
	O_MESSAGE = TCTL_OPT_FIRST_OWN,
	O_VARKEY,
	O_PREFIX,
	O_PARTIAL,
	O_MAX_BYTES,
	O_FORMAT,
	O_NO_REPLACE,
};

/* every option of load, .tgm's and Hurray's (hrry.c's refuses some) */
static const struct option opts[] = {
        {"message", required_argument, NULL, O_MESSAGE},
        {"variable-key", required_argument, NULL, O_VARKEY},
        /* zarr export's name for the same path */
        {"name-key", required_argument, NULL, O_VARKEY},
        {"prefix", required_argument, NULL, O_PREFIX},
        {"partial", no_argument, NULL, O_PARTIAL},
        {"max-bytes", required_argument, NULL, O_MAX_BYTES},
        {"format", required_argument, NULL, O_FORMAT},
        {"no-replace", no_argument, NULL, O_NO_REPLACE},
        TCTL_COMMON_OPTIONS};

static int load_opts(int argc, char **argv, struct load_opts *lo)
{
	int rc, o;

	*lo = (struct load_opts){.prefix = "", .max_bytes = TCTL_STREAM_MAX};
	while ((o = tctl_getopt(argc, argv, "", opts, &rc)) != -1) {
		switch (o) {
		case O_MESSAGE:
			lo->one_message = true;
			if (tctl_opt_number("load", "--message", optarg,
			                    false, 0, UINT64_MAX, "",
			                    &lo->message))
				return TCTL_USAGE;
			break;
		case O_VARKEY:
			lo->variable_key = optarg;
			break;
		case O_PREFIX:
			lo->prefix = optarg;
			break;
		case O_PARTIAL:
			lo->partial = true;
			break;
		case O_NO_REPLACE:
			lo->no_replace = true;
			break;
		case O_MAX_BYTES:
			if (tctl_opt_number("load", "--max-bytes", optarg,
			                    true, 0, UINT64_MAX, "bytes",
			                    &lo->max_bytes))
				return TCTL_USAGE;
			break;
		case O_FORMAT:
			/* hrry went to cmd_load_hrry() already */
			if (strcmp(optarg, "tgm"))
				return tctl_usage("load", "bad --format '%s' "
				                  "(valid: tgm, hrry)", optarg);
			break;
		default:
			return rc;
		}
	}
	if (argc - optind != 1)
		return tctl_operands("load", argc, argv, 1,
				     "needs one FILE.tgm (- for stdin)");
	lo->path = argv[optind];
	if (tctl_check_prefix("load", lo->prefix, BASE_NAME_MAX - 16))
		return TCTL_USAGE;
	return -1;
}

/* The names of l's objects made distinct from each other and from those
 * of the messages before (gather()'s rule, the same names: a name keeps
 * what the ones before it made of it); ns holds those before, so each
 * message costs its own names, not the stream's so far. */
static int names_so_far(struct load *l, struct td_tgm_names *ns, size_t *nn)
{
	char **names;
	int rc;

	if (!l->count)
		return TCTL_OK;
	names = calloc(l->count, sizeof(*names));
	if (!names)
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	for (size_t j = 0; j < l->count; j++)
		names[j] = l->objs[j].name;
	rc = td_tgm_names_add(ns, names, l->count);
	free(names);
	*nn += l->count;
	if (rc == -ENOMEM)
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	if (rc < 0)
		return tctl_fail(TCTL_REFUSED, "input", ENAMETOOLONG,
		                 "%s: names do not fit with their suffixes",
		                 l->path);
	return TCTL_OK;
}

/* Publish the objects of l (a stream's message, held in s). */
static int publish_message(struct pubs *pr, struct load *l,
                           struct tgm_src *s)
{
	struct obj **objs;
	int rc;

	if (!l->count)
		return TCTL_OK;
	objs = calloc(l->count, sizeof(*objs));
	if (!objs)
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	for (size_t j = 0; j < l->count; j++)
		objs[j] = &l->objs[j];
	rc = pubs_add(pr, objs, l->count, s);
	free(objs);
	return rc;
}

/*
 * A stream (stdin, a pipe): its messages one at a time (tgm_stream), each
 * checked whole (hashes, descriptors, names), then its objects published
 * and its bytes let go before the next is read: tensorctl holds one
 * message, not the stream. All or nothing as for a file, but a message
 * is checked once the ones before it are published: one that fails
 * (or a daemon's refusal) deletes them again, unless --partial. A Hurray
 * stream (its index is found by its trailer, its last 40 bytes: nothing
 * decodes before the end) is spooled to an unnamed file in $TMPDIR and
 * read from there as a file on disk is; a .tgm stream's messages are
 * held in such a file too, mapped (tgm_stream_spool()).
 */
static int load_stream(const struct load_opts *lo, struct tctl_in *in,
                       int argc, char **argv)
{
	struct pubs pr = {.path = in->path, .partial = lo->partial,
	                  .no_replace = lo->no_replace};
	struct tgm_stream st;
	struct td_tgm_span sp;
	struct tgm_src s;
	struct load *ls = NULL;
	struct td_tgm_names *ns = NULL;
	size_t nl = 0, cap = 0, nn = 0;
	uint64_t idx = 0, covered = 0, len;
	int rc, more = 0;

	tgm_stream_init(&st, in, lo->max_bytes);
	if (td_tgm_names_new(TD_NAME_MAX + 1, 0, &ns) < 0) {
		tgm_stream_fini(&st);
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	}
	rc = tgm_stream_head(&st, 8);
	if (!rc && inspect_hrry_sniff(st.buf, (size_t)st.have)) {
		int spool;

		/* to an unnamed file, then read as a file is: not held */
		rc = tctl_in_spool(in, st.buf, (size_t)st.have, lo->max_bytes,
				   &spool);
		if (!rc)
			rc = tctl_load_hrry_stdin(argc, argv, spool);
		td_tgm_names_free(ns);
		tgm_stream_fini(&st);
		return rc;
	}
	/* a message is held whole while it is checked, then copied into
	 * the daemon's buffers: held in a mapped spool, not on the heap,
	 * it is not tensorctl's memory beside them */
	if (!rc)
		rc = tgm_stream_spool(&st);
	for (; !rc && (more = tgm_stream_next(&st, &sp, &s)) == 1; idx++) {
		covered += sp.length;
		if (lo->one_message && idx != lo->message)
			continue;
		rc = tctl_room(&ls, nl, &cap, sizeof(*ls), 4);
		if (rc)
			break;
		ls[nl] = (struct load){.path = lo->path, .msg_index = idx};
		rc = tctl_tgm_collect(&ls[nl], &s, &sp);
		if (!rc)
			rc = prepare(&ls[nl], lo->variable_key, lo->prefix);
		if (!rc)
			rc = names_so_far(&ls[nl], ns, &nn);
		if (!rc)
			rc = publish_message(&pr, &ls[nl], &s);
		nl++;
	}
	if (!rc && more < 0)
		rc = -more;
	len = tgm_stream_total(&st);
	if (!rc && covered && covered < len)
		tctl_say("%s: %" PRIu64 " bytes outside any whole message "
		         "skipped (junk, or a cut or damaged message; "
		         "'tensorctl inspect' lists where)",
		         lo->path, len - covered);
	if (!rc && !nl && lo->one_message) {
		rc = tctl_fail(TCTL_REFUSED, "input", ENOENT,
		               "%s: no message %" PRIu64
		               " (the file has %" PRIu64 ")",
		               lo->path, lo->message, idx);
	} else if (!rc && !nl) {
		/* no message: the stream is held whole, from its start */
		s = (struct tgm_src){.path = in->path, .fd = -1,
		                     .buf = st.buf, .size = st.have};
		rc = no_message(&s, lo->path);
	}
	if (!rc && !nn) {
		tctl_say("%s: no data object to load", lo->path);
		if (tctl_json)
			rc = print_published(NULL, NULL, 0, NULL);
	}
	rc = pubs_end(&pr, rc);
	for (size_t i = 0; i < nl; i++)
		tctl_tgm_load_fini(&ls[i]);
	free(ls);
	td_tgm_names_free(ns);
	tgm_stream_fini(&st);
	return rc;
}

static int load_tgm(int argc, char **argv)
{
	struct load_opts lo;
	struct load *ls = NULL;
	struct tgm_src s;
	struct tgm_scan sc;
	struct tctl_in in;
	struct td_tgm_span sp;
	struct obj **objs = NULL;
	size_t nl = 0, cap = 0, n = 0;
	uint64_t idx = 0, covered = 0, len;
	int rc = load_opts(argc, argv, &lo);

	if (rc >= 0)
		return rc;
	rc = tctl_in_open(&in, lo.path);
	if (rc)
		return rc;
	/* a stream: a message at a time; a file: read with pread, each
	 * object's bytes once it is published */
	if (!in.regular || in.is_stdin) {
		rc = load_stream(&lo, &in, argc, argv);
		tctl_in_close(&in);
		return rc;
	}
	s = (struct tgm_src){.path = in.path, .fd = in.fd, .size = in.size};
	len = s.size;
	tgm_scan_init(&sc, &s, UINT64_MAX);
	for (; !rc && (rc = tgm_scan_next(&sc, &sp)) == 1; idx++) {
		rc = 0;
		covered += sp.length;
		if (lo.one_message && idx != lo.message)
			continue;
		rc = tctl_room(&ls, nl, &cap, sizeof(*ls), 4);
		if (rc)
			break;
		ls[nl] = (struct load){.path = lo.path, .msg_index = idx};
		rc = tctl_tgm_collect(&ls[nl], &s, &sp);
		if (!rc)
			rc = prepare(&ls[nl], lo.variable_key, lo.prefix);
		nl++;
	}
	if (rc < 0) /* the scan's read failed */
		rc = tgm_src_fail(&s);
	/* the scan steps over junk and cut messages without a word (a file
	 * without one message is said below, whole) */
	if (!rc && covered && covered < len)
		tctl_say("%s: %" PRIu64 " bytes outside any whole message "
		         "skipped (junk, or a cut or damaged message; "
		         "'tensorctl inspect' lists where)",
		         lo.path, len - covered);
	if (!rc && !nl && lo.one_message)
		rc = tctl_fail(TCTL_REFUSED, "input", ENOENT,
		               "%s: no message %" PRIu64
		               " (the file has %" PRIu64 ")",
		               lo.path, lo.message, idx);
	else if (!rc && !nl)
		rc = no_message(&s, lo.path);
	if (!rc)
		rc = gather(ls, nl, &objs, &n);
	if (!rc && !n) {
		tctl_say("%s: no data object to load", lo.path);
		if (tctl_json)
			rc = print_published(NULL, NULL, 0, NULL);
	}
	if (!rc && n)
		rc = publish(objs, n, &s, lo.partial, lo.no_replace);
	for (size_t i = 0; i < nl; i++)
		tctl_tgm_load_fini(&ls[i]);
	free(ls);
	free(objs);
	tctl_in_close(&in);
	return rc;
}

/* a Hurray file by its name or magic (hrry.c), else .tgm messages */
int cmd_load(int argc, char **argv)
{
	if (tctl_hrry_wanted(argc, argv, 1, opts))
		return cmd_load_hrry(argc, argv);
	return load_tgm(argc, argv);
}
