/* SPDX-License-Identifier: MIT */
/*
 * tensorctl load: publish every data object of one .tgm message as a
 * tensor (../shared/specs/tensogram.md §15 import subset, §18 naming).
 * Everything is checked before anything is published, so a refused
 * object never leaves half a message in the daemon.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorctl.h"
#include "tgm-desc.h"
#include "tgm.h"
#include "wire.h"

#define LOAD_USAGE                                                             \
	"usage: tensorctl load FILE.tgm [--message N] "                        \
	"[--variable-key DOT.PATH]\n"

/* Room left after sanitising for a duplicate suffix ("_" + counter). */
#define BASE_NAME_MAX (TD_NAME_MAX - 15)

struct obj {
	struct td_tgm_object o;
	const struct td_tgm_meta *meta; /* where its attributes are */
	size_t meta_index;              /* its entry in meta's base */
	uint32_t dtype;                 /* enum td_tensor_dtype */
	bool swap;                      /* big-endian source: byte-swap */
	char name[TD_NAME_MAX + 1];
	char *attrs; /* JSON, malloc'ed */
	size_t attrs_len;
};

struct load {
	const char *path;
	uint64_t msg_index;
	struct obj *objs;
	size_t count, cap;
	struct td_tgm_meta *header, *footer;
	struct td_tgm_meta **preceders; /* owned, one per type-8 frame */
	size_t preceder_count;
};

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

/* Print "tensorctl: FILE: message N[ object I]: what" and refuse. */
static int refuse(const struct load *l, long obj, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static int refuse(const struct load *l, long obj, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tensorctl: %s: message %" PRIu64, l->path,
	        l->msg_index);
	if (obj >= 0)
		fprintf(stderr, " object %ld", obj);
	fprintf(stderr, ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return TCTL_REFUSED;
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

static int meta_frame(struct load *l, const struct td_tgm_frame *fr,
                      struct td_tgm_meta **out)
{
	struct td_err e = {0};
	int rc = td_tgm_meta_new(fr->payload, fr->payload_len, out, &e);

	if (rc < 0)
		return refuse(l, -1, "%s frame at offset %" PRIu64 ": %s",
		              fr->name, fr->offset, e.reason);
	return 0;
}

/* Walk the message: objects, metadata frames, hashes. */
static int collect(struct load *l, const uint8_t *msg, size_t len)
{
	struct td_tgm_meta *pending = NULL;
	struct td_tgm_walk it;
	struct td_tgm_frame fr;
	struct td_err e = {0};
	int rc;

	rc = td_tgm_walk_init(msg, len, &it, &e);
	if (rc < 0)
		return refuse(l, -1, "%s at offset %" PRIu64, e.reason,
		              e.offset);
	while ((rc = td_tgm_walk_next(&it, &fr, &e)) == 1) {
		struct td_tgm_meta **slot = NULL;
		struct obj *ob;

		/* a frame that says it is hashed must match its hash */
		if (fr.has_hash && td_tgm_frame_verify(&fr, NULL, &e) < 0)
			return refuse(l, -1,
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
				return refuse(l, -1, "out of memory");
			l->preceders = p;
			p[l->preceder_count] = NULL;
			rc = meta_frame(l, &fr, &p[l->preceder_count]);
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
			rc = meta_frame(l, &fr, slot);
			if (rc)
				return rc;
			continue;
		}
		if (l->count == l->cap) {
			size_t cap = l->cap ? 2 * l->cap : 8;
			struct obj *n = realloc(l->objs, cap * sizeof(*n));
			if (!n)
				return refuse(l, -1, "out of memory");
			l->objs = n;
			l->cap = cap;
		}
		ob = &l->objs[l->count];
		memset(ob, 0, sizeof(*ob));
		rc = td_tgm_object_decode(&fr, &ob->o, &e);
		if (rc < 0)
			return refuse(l, (long)l->count,
			              "descriptor: %s%s%s at offset %" PRIu64,
			              e.field ? e.field : "",
			              e.field ? ": " : "", e.reason, e.offset);
		ob->meta = pending;
		ob->meta_index = pending ? 0 : l->count;
		pending = NULL;
		l->count++;
	}
	if (rc < 0)
		return refuse(l, -1, "%s at offset %" PRIu64, e.reason,
		              e.offset);
	return 0;
}

/* Import checks, names and attributes of every object. */
static int prepare(struct load *l, const char *variable_key)
{
	char **names = calloc(l->count ? l->count : 1, sizeof(*names));
	int rc = 0;

	if (!names)
		return refuse(l, -1, "out of memory");
	for (size_t i = 0; i < l->count && !rc; i++) {
		struct obj *ob = &l->objs[i];
		const struct td_tgm_desc *d = &ob->o.desc;
		char raw[1024];
		struct td_err e = {0};

		if (td_tgm_desc_check_import(d, ob->o.data_len, &e) < 0) {
			const char *v = field_value(d, e.field);

			if (v)
				rc = refuse(l, (long)i,
				            "%s \"%s\" is not "
				            "supported (%s)",
				            e.field, v, e.reason);
			else
				rc = refuse(l, (long)i, "%s: %s", e.field,
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
		/* attributes: a preceder, else the footer (streaming, where
		 * the header's base is written before any object), else the
		 * header */
		if (!ob->meta) {
			ob->meta = l->footer && td_tgm_meta_base_count(
			                                l->footer) > i
			                   ? l->footer
			                   : l->header;
		}
		rc = td_tgm_object_name(ob->meta, ob->meta_index, ob->o.cbor,
		                        ob->o.cbor_len, variable_key, raw,
		                        sizeof(raw), &e);
		if (rc < 0) {
			rc = refuse(l, (long)i, "descriptor: %s", e.reason);
			break;
		}
		/* object_<i> counts objects, not base entries (a preceder's
		 * entry is its base[0]) */
		if (rc == 0)
			snprintf(raw, sizeof(raw), "object_%zu", i);
		rc = 0;
		td_tgm_name_sanitize(raw, ob->name, BASE_NAME_MAX + 1);
		names[i] = ob->name;
		rc = td_tgm_meta_attrs_json(ob->meta, ob->meta_index,
		                            &ob->attrs, &ob->attrs_len);
		if (rc < 0) {
			rc = refuse(l, (long)i,
			            rc == -EBADMSG
			                    ? "metadata has a map key that is "
			                      "an array, map or tag (JSON keys "
			                      "are text)"
			                    : "out of memory");
			break;
		}
		if (ob->attrs_len > TD_WIRE_MAX_META)
			rc = refuse(l, (long)i,
			            "metadata is %zu bytes as JSON, more "
			            "than a tensor carries (%u)",
			            ob->attrs_len, TD_WIRE_MAX_META);
	}
	if (!rc && td_tgm_names_unique(names, l->count, TD_NAME_MAX + 1) < 0)
		rc = refuse(l, -1, "names do not fit with their suffixes");
	free(names);
	return rc;
}

static void copy_swapped(uint8_t *dst, const uint8_t *src, uint64_t len,
                         unsigned width)
{
	for (uint64_t i = 0; i < len; i += width)
		for (unsigned k = 0; k < width; k++)
			dst[i + k] = src[i + width - 1 - k];
}

static int publish(struct load *l, struct td_client *c)
{
	for (size_t i = 0; i < l->count; i++) {
		struct obj *ob = &l->objs[i];
		const struct td_tgm_desc *d = &ob->o.desc;
		struct td_publish p = {0};
		struct td_error e = {0};
		struct td_alloc *a;
		uint64_t size = ob->o.data_len, version = 0;
		uint8_t *dst;
		int rc;

		rc = td_client_alloc(c, 1, &size, &a, &e);
		if (rc < 0)
			return tctl_refused(ob->name, rc, &e);
		dst = td_alloc_data(a, 0);
		/* the data may sit at any alignment: bytes only */
		if (ob->swap)
			copy_swapped(dst, ob->o.data, size,
			             td_tgm_dtype_width(d->dtype));
		else if (size)
			memcpy(dst, ob->o.data, size);
		p.name = ob->name;
		p.dtype = ob->dtype;
		p.ndim = d->shape_count;
		p.shape = d->shape;
		p.meta = ob->attrs;
		p.meta_len = ob->attrs_len;
		rc = td_client_publish_alloc(c, a, &p, &version, &e);
		if (rc < 0) {
			fprintf(stderr,
			        "tensorctl: %zu of %zu object(s) "
			        "published before this failure\n",
			        i, l->count);
			return tctl_refused(ob->name, rc, &e);
		}
		printf("%s version %" PRIu64 " %s", ob->name, version,
		       td_tensor_dtype_name(ob->dtype));
		tctl_print_shape(stdout, d->shape, d->shape_count, 0);
		printf("%s\n", ob->swap ? " (byte-swapped)" : "");
	}
	return TCTL_OK;
}

static void load_fini(struct load *l)
{
	for (size_t i = 0; i < l->count; i++)
		free(l->objs[i].attrs);
	free(l->objs);
	for (size_t i = 0; i < l->preceder_count; i++)
		td_tgm_meta_free(l->preceders[i]);
	free(l->preceders);
	td_tgm_meta_free(l->header);
	td_tgm_meta_free(l->footer);
}

int cmd_load(int argc, char **argv)
{
	const char *variable_key = NULL;
	struct load l = {0};
	struct td_tgm_scanner s;
	struct td_tgm_span sp;
	struct td_client *c;
	uint64_t n = 0;
	uint8_t *buf;
	size_t len;
	int rc;

	if (tctl_hrry_wanted(argc, argv, 1))
		return cmd_load_hrry(argc, argv);

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--message") && v) {
			if (tctl_parse_u64(argv[++i], &l.msg_index))
				goto usage;
		} else if (!strcmp(a, "--variable-key") && v) {
			variable_key = argv[++i];
		} else if (!strcmp(a, "--socket") && v) {
			tctl_socket = argv[++i];
		} else if ((a[0] == '-' && a[1]) || l.path) {
			goto usage;
		} else {
			l.path = a;
		}
	}
	if (!l.path)
		goto usage;
	rc = tctl_read_file(l.path, &buf, &len);
	if (rc < 0) {
		fprintf(stderr, "tensorctl: %s: %s\n", l.path, strerror(-rc));
		return TCTL_USAGE;
	}
	td_tgm_scan_init(buf, len, &s);
	while ((rc = td_tgm_scan_next(&s, &sp)) == 1 && n < l.msg_index)
		n++;
	if (rc != 1) {
		fprintf(stderr,
		        "tensorctl: %s: no message %" PRIu64
		        " (the file has %" PRIu64 ")\n",
		        l.path, l.msg_index, n);
		free(buf);
		return TCTL_REFUSED;
	}
	rc = collect(&l, buf + sp.offset, sp.length);
	if (!rc)
		rc = prepare(&l, variable_key);
	if (!rc && !l.count)
		fprintf(stderr,
		        "tensorctl: %s: message %" PRIu64
		        " has no data object\n",
		        l.path, l.msg_index);
	if (!rc && l.count) {
		rc = tctl_connect(&c);
		if (!rc) {
			rc = publish(&l, c);
			td_client_close(c);
		}
	}
	load_fini(&l);
	free(buf);
	return rc;
usage:
	fputs(LOAD_USAGE, stderr);
	return TCTL_USAGE;
}
