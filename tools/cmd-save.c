/* SPDX-License-Identifier: MIT */
/*
 * tensorctl save: write tensors from the daemon as one buffered, hashed
 * Tensogram message (../shared/specs/tensogram.md §16), or, past what the
 * daemon lets tensorctl lease at once, one such message per batch it
 * could hold (a .tgm file is a sequence of messages). Each object's
 * base metadata holds its name; a tensor whose metadata is a JSON object
 * (what `load` stores) gets those keys back, so load -> save -> load
 * keeps names and attributes. The message is written as it is made:
 * tensors are hashed, then written, straight from their mappings, so
 * tensorctl's memory does not grow with the tensors' bytes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <json-c/json.h>

#include "output.h"
#include "td-json.h"
#include "td-zarr.h"
#include "tensorctl.h"
#include "tgm-desc.h"

#ifndef TD_VERSION
#define TD_VERSION "unknown"
#endif

static enum td_tgm_dtype tgm_dtype(uint32_t d)
{
	switch (d) {
	case TD_TENSOR_I8:
		return TD_TGM_INT8;
	case TD_TENSOR_I16:
		return TD_TGM_INT16;
	case TD_TENSOR_I32:
		return TD_TGM_INT32;
	case TD_TENSOR_I64:
		return TD_TGM_INT64;
	case TD_TENSOR_U8:
		return TD_TGM_UINT8;
	case TD_TENSOR_U16:
		return TD_TGM_UINT16;
	case TD_TENSOR_U32:
		return TD_TGM_UINT32;
	case TD_TENSOR_U64:
		return TD_TGM_UINT64;
	case TD_TENSOR_F16:
		return TD_TGM_FLOAT16;
	case TD_TENSOR_F32:
		return TD_TGM_FLOAT32;
	case TD_TENSOR_F64:
		return TD_TGM_FLOAT64;
	default:
		return TD_TGM_DTYPE_UNKNOWN;
	}
}

/*
 * A tensor the message can hold as it is: one dense plane in C order,
 * not quantized (a .tgm object has no place for scales). Returns NULL or
 * why not.
 */
static const char *unsavable(const struct td_tensor *t)
{
	if (tgm_dtype(td_tensor_dtype(t)) == TD_TGM_DTYPE_UNKNOWN)
		return "its dtype has no .tgm equivalent";
	if (td_tensor_ndim(t) > TD_TGM_MAX_DIMS)
		return "it has too many dimensions";
	return tctl_dense_unsavable(t);
}

/*
 * Where td_tgm_message_write() sends each message: the shared output
 * rules (output.h), opened at the first message's begin: by its length
 * when it is the only one, else unsized (a batch was written because the
 * lease caps were reached, and more follow). ts[i] (NULL: not a leased
 * plane) is the tensor objs[i] reads from.
 */
struct save_sink {
	const char *out;
	struct tctl_out o;
	bool opened;  /* tctl_out_open() was called: commit or abort */
	bool unsized; /* several messages: the total is not known */
	int rc;       /* the output's tensorctl status once it failed */
	struct td_tensor *const *ts;
	size_t page;
};

static int sink_begin(void *ctx, uint64_t total)
{
	struct save_sink *s = ctx;

	if (s->opened) /* the next message of a batched save */
		return 0;
	s->opened = true;
	s->rc = tctl_out_open(&s->o, s->out,
	                      TCTL_OUT_BINARY |
	                              (s->unsized ? TCTL_OUT_UNSIZED : 0),
	                      s->unsized ? 0 : total);
	return s->rc ? -EIO : 0;
}

static int sink_write(void *ctx, const void *p, size_t n)
{
	struct save_sink *s = ctx;

	s->rc = tctl_out_write(&s->o, p, n);
	return s->rc ? -EIO : 0;
}

/*
 * Bytes of a tensor hashed or written: the pages wholly inside them leave
 * this process's page tables (MADV_DONTNEED), so that touching every
 * tensor's mapping does not make tensorctl as large as the store. Only a
 * leased memfd plane's: a shared (or private read-only) mapping of the
 * daemon's file, whose bytes stay there and come back on the next read;
 * never a copy on the heap (inline or copied out), whose bytes it would
 * zero, nor a dma-buf's.
 */
static void sink_done(void *ctx, size_t i, const void *p, size_t n)
{
	struct save_sink *s = ctx;
	uintptr_t a = (uintptr_t)p, b = a + n;

	if (!s->ts[i] || td_tensor_plane_kind(s->ts[i], 0) != TD_PLANE_MEMFD)
		return;
	a = (a + s->page - 1) & ~(uintptr_t)(s->page - 1);
	b &= ~(uintptr_t)(s->page - 1);
	if (b > a)
		(void)madvise((void *)a, b - a, MADV_DONTNEED);
}

/*
 * The message of objs[0..n) written as it is made (td_tgm_message_write():
 * each tensor's bytes straight from its mapping, hashed in a first pass)
 * through s (opened by its first message; the caller commits or aborts);
 * its length added to *len. TCTL_OK or a reported status.
 */
static int write_message(struct save_sink *s,
                         const struct td_tgm_enc_object *objs, size_t n,
                         struct td_tensor *const *ts, uint64_t *len)
{
	struct td_tgm_sink k = {sink_begin, sink_write, sink_done, s};
	struct td_err te = {0};
	uint64_t l = 0;
	int r;

	s->ts = ts;
	r = td_tgm_message_write(objs, n, TD_VERSION, &k, &l, &te);
	if (r < 0 && s->rc)
		return s->rc; /* reported by the output */
	if (r < 0)
		return tctl_fail(TCTL_REFUSED, "input", EINVAL,
		                 "encoding the message: %s%s%s",
		                 te.field ? te.field : "", te.field ? ": " : "",
		                 te.reason);
	*len += l;
	return TCTL_OK;
}

/* messages: more than 1 when the lease caps made batches of them */
static int print_saved(const char *out, size_t n, uint64_t len,
                       size_t messages)
{
	char size[32];

	if (tctl_json) {
		struct json_object *j = json_object_new_object();

		json_object_object_add(j, "path", json_object_new_string(out));
		json_object_object_add(j, "objects",
				       json_object_new_uint64(n));
		json_object_object_add(j, "bytes", json_object_new_uint64(len));
		json_object_object_add(j, "messages",
		                       json_object_new_uint64(messages));
		return tctl_json_print(j);
	}
	if (messages > 1)
		printf("%s: %zu object(s) in %zu messages, %s\n", out, n,
		       messages, tctl_size(size, len));
	else
		printf("%s: %zu object(s), %s\n", out, n,
		       tctl_size(size, len));
	return TCTL_OK;
}

/*
 * Whether load would not give a JSON object back as one: when its keys
 * but name and _reserved_ (the writer's own) are none, load reads no
 * metadata; tensord_meta alone, that value as metadata kept whole
 * (td_tgm_meta_saved()). Such an object is kept whole as its text.
 */
static bool not_loaded_back(const void *meta, size_t len)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *o, *v;
	size_t others = 0;
	const char *k;

	if (!tok)
		return false;
	o = json_tokener_parse_ex(tok, meta, (int)len);
	json_tokener_free(tok);
	if (!json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		return false;
	}
	TD_JSON_EACH(o, k, v)
		others += strcmp(k, "name") && strcmp(k, "_reserved_") &&
		          strcmp(k, "tensord_meta");
	json_object_put(o);
	return !others;
}

/*
 * A tensor whose metadata is a JSON object gets its keys back as the
 * object's attributes (json/ reads it); other metadata is kept whole,
 * and so is an object load would not give back as such.
 * attrs[i] owns what objs[i].attrs points at.
 */
static int json_attrs(struct td_tgm_enc_object *objs, uint8_t **attrs,
                      size_t n, struct td_err *te)
{
	for (size_t i = 0; i < n; i++) {
		int rc = td_json_to_cbor(objs[i].meta, objs[i].meta_len,
		                         &attrs[i], &objs[i].attrs_len);

		if (rc == -E2BIG) {
			te->reason = "metadata has more than 2^20 CBOR items, "
			             "more than a .tgm reader takes";
			return rc;
		}
		if (rc < 0) {
			te->reason = "out of memory";
			return -ENOMEM;
		}
		if (rc && not_loaded_back(objs[i].meta, objs[i].meta_len)) {
			free(attrs[i]);
			attrs[i] = NULL;
			objs[i].attrs_len = 0;
		}
		objs[i].attrs = attrs[i];
	}
	return 0;
}

/* Every name of the catalogue but rings' into *names (pointing into
 * *list): 0, or a tensorctl status. */
static int all_names(struct td_client *c, struct td_entry **list,
		     size_t *list_n, const char ***names, size_t *n)
{
	struct td_error e = {0};
	int r = td_client_list(c, NULL, list, list_n, &e);

	if (r < 0)
		return tctl_refused("list", r, &e);
	*names = calloc(*list_n + 1, sizeof(**names));
	if (!*names)
		return tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
	for (size_t i = 0; i < *list_n; i++)
		if (!((*list)[i].flags & TD_ENTRY_RING))
			(*names)[(*n)++] = (*list)[i].name;
	if (!*n)
		return tctl_fail(TCTL_REFUSED, "input", ENOENT,
				 "no tensors to save");
	return 0;
}

/* take_one(): a name of the LIST deleted since, or with --skip-unsavable
 * a tensor the file cannot hold, left out */
#define GONE (-1)

/*
 * -o FILE.npy or FILE.zarr: a file of another kind, which save would have
 * written as a .tgm message under that name (np.load then said it is no
 * NumPy file). TCTL_OK, or the usage error naming what writes one;
 * --format tgm writes the .tgm all the same.
 */
static int foreign_name(const char *out)
{
	size_t n = strlen(out);

	if (n >= 4 && !strcmp(out + n - 4, ".npy"))
		return tctl_usage("save", "%s: save writes a .tgm or .hrry "
				  "file; a .npy file holds one tensor: "
				  "tensorctl get NAME -o %s (or --format tgm "
				  "for a .tgm under this name)", out, out);
	if (n >= 5 && !strcmp(out + n - 5, ".zarr"))
		return tctl_usage("save", "%s: save writes a .tgm or .hrry "
				  "file; a Zarr hierarchy is a folder: "
				  "tensorctl zarr export %s [NAME...] (or "
				  "--format tgm for a .tgm under this name)",
				  out, out);
	return TCTL_OK;
}

/*
 * What save_tgm() holds: ts[i] leased and described in objs[i] (attrs[i]
 * its attributes once encoded), for i < kept: the batch the next message
 * is written from; what was written so far (saved objects, len bytes,
 * messages) through sink.
 */
struct held {
	struct td_tensor **ts;
	struct td_tgm_enc_object *objs;
	uint8_t **attrs;
	size_t kept;
	struct save_sink *sink;
	size_t saved, messages;
	uint64_t len;
};

/* json_attrs() refused: "encoding the message: ..." */
static int attrs_refused(const struct td_err *te)
{
	return tctl_fail(TCTL_REFUSED, "input", EINVAL,
	                 "encoding the message: %s%s%s",
	                 te->field ? te->field : "", te->field ? ": " : "",
	                 te->reason);
}

/*
 * The batch h holds written as one message, then released: a connection
 * may hold 4096 leases, a uid what its --uid-limit leases says
 * (docs/protocol.md §4), fewer than a store may have tensors, and a
 * message needs every object of it at once (its header holds every
 * object's hash, the data follows). Each tensor is what its GET read, as
 * when all were held until the end; they were copied into memory and
 * held there, as many as the store had past the caps. TCTL_OK or a
 * reported status; *released whether h held any (released since).
 */
static int write_batch(struct held *h, bool more, bool *released)
{
	struct td_err te = {0};
	int rc;

	*released = h->kept != 0;
	if (!h->kept)
		return TCTL_OK;
	/* more follow: the output's total is not known at its begin */
	h->sink->unsized |= more;
	if (json_attrs(h->objs, h->attrs, h->kept, &te) < 0)
		return attrs_refused(&te);
	rc = write_message(h->sink, h->objs, h->kept, h->ts, &h->len);
	for (size_t i = 0; i < h->kept; i++) {
		td_tensor_release(h->ts[i]);
		h->ts[i] = NULL;
		free(h->attrs[i]);
		h->attrs[i] = NULL;
	}
	if (rc)
		return rc;
	h->saved += h->kept;
	h->messages++;
	h->kept = 0;
	return TCTL_OK;
}

/* GET name (pre: already leased) into h's next slot and describe it
 * there: 0, GONE, or a tensorctl status (listed: name came from the LIST
 * of every tensor; skip: --skip-unsavable). A lease refused (ENOBUFS:
 * the connection's cap; EDQUOT: the uid's) is asked again once h's batch
 * is written and released. */
static int take_one(struct td_client *c, const char *name, bool listed,
		    bool skip, struct td_tensor *pre, struct held *h)
{
	struct td_error e = {0};
	struct td_tensor **t = &h->ts[h->kept];
	struct td_tgm_enc_object *obj;
	const char *why;
	bool released = false;
	int r;

	*t = pre; /* leased with the others (tctl_get_together) */
	r = pre ? 0 : td_client_get(c, name, t, &e);

	if (r == -ENOBUFS || r == -EDQUOT) {
		int w = write_batch(h, true, &released);

		if (w)
			return w;
	}
	if (released) {
		e = (struct td_error){0};
		t = &h->ts[h->kept];
		r = td_client_get(c, name, t, &e);
	}
	if (r < 0) {
		*t = NULL;
		return tctl_gone_since_list("save", name, r, listed)
		               ? GONE
		               : tctl_refused(name, r, &e);
	}
	r = tctl_fence_wait(name, *t, -1);
	if (r)
		return r;
	why = unsavable(*t);
	if (why && tctl_unsavable_left_out(name, why, skip)) {
		td_tensor_release(*t);
		*t = NULL;
		return GONE;
	}
	if (why)
		return tctl_fail(TCTL_REFUSED, "input", EINVAL,
				 "%s: cannot be saved: %s", name, why);
	/* tensors hold host-order elements; the writer says "little",
	 * which is what every supported host has */
	if (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ &&
	    td_tensor_dtype_size(td_tensor_dtype(*t)) > 1)
		return tctl_fail(TCTL_REFUSED, "input", ENOTSUP,
				 "%s: big-endian hosts cannot save yet", name);
	obj = &h->objs[h->kept];
	*obj = (struct td_tgm_enc_object){0};
	obj->dtype = tgm_dtype(td_tensor_dtype(*t));
	obj->ndim = td_tensor_ndim(*t);
	obj->shape = td_tensor_shape(*t);
	obj->data = td_tensor_plane_data(*t, 0);
	obj->data_len = td_tensor_bytes(*t);
	obj->name = name;
	obj->meta = td_tensor_meta(*t, &obj->meta_len);
	h->kept++;
	return 0;
}

/* take_one() of each of names[0..n) into h (listed[i]: the name came
 * from a LIST; NULL: all did), up to TD_MANY_MAX of them leased at one
 * instant first (into pre), else one by one: 0 or a tensorctl status. */
static int take_all(struct td_client *c, const char **names, size_t n,
		    const bool *listed, bool skip, struct td_tensor **pre,
		    struct held *h)
{
	int rc = 0;

	tctl_get_together(c, names, n, pre);
	for (size_t i = 0; i < n && !rc; i++) {
		rc = take_one(c, names[i], !listed || listed[i], skip, pre[i],
		              h);
		pre[i] = NULL; /* take_one's now */
		if (rc == GONE)
			rc = 0;
	}
	return rc;
}

static int save_tgm(int argc, char **argv)
{
	static const struct option opts[] = {
		{"output", required_argument, NULL, 'o'},
		{"format", required_argument, NULL, 'f'}, /* tgm here */
		{"skip-unsavable", no_argument, NULL, 'k'},
		TCTL_COMMON_OPTIONS};
	const char *out = NULL;
	const char **names = NULL;
	struct td_tensor **ts = NULL, **pre = NULL;
	struct td_tgm_enc_object *objs = NULL;
	uint8_t **attrs = NULL;
	struct td_entry *list = NULL;
	struct tctl_names given = {0};
	struct td_client *c = NULL;
	struct save_sink sink = {.page = (size_t)sysconf(_SC_PAGESIZE)};
	struct held h = {.sink = &sink};
	size_t n = 0, list_n = 0;
	bool listed = false, skip = false, as_tgm = false;
	int rc = TCTL_USAGE, o;

	while ((o = tctl_getopt(argc, argv, "o:", opts, &rc)) != -1) {
		if (o == 'f' && !strcmp(optarg, "tgm")) {
			as_tgm = true; /* hrry went to cmd_save_hrry() already */
			continue;
		}
		if (o == 'f') {
			rc = tctl_usage("save", "bad --format '%s' (valid: tgm, "
					"hrry)", optarg);
			goto out;
		}
		if (o == 'k') {
			skip = true;
			continue;
		}
		if (o != 'o')
			goto out;
		out = optarg;
	}
	if (!out) {
		rc = tctl_usage("save", "needs -o FILE (- for stdout)");
		goto out;
	}
	if (tctl_json && tctl_out_is_stdout(out)) {
		rc = tctl_usage("save", "--json and -o %s both write to stdout",
				out);
		goto out;
	}
	if (!as_tgm && (rc = foreign_name(out)) != TCTL_OK)
		goto out;
	rc = tctl_connect(&c);
	if (rc)
		goto out;
	/* the names given, or (none) every tensor, as for .hrry */
	if (optind < argc) { /* NAME/ stands for every tensor under it */
		rc = tctl_names_expand(c, "save", argv + optind,
				       (size_t)(argc - optind), false, &given);
		if (rc)
			goto out;
		names = (const char **)given.v;
		n = given.n;
	} else if ((rc = all_names(c, &list, &list_n, &names, &n)) != 0) {
		goto out;
	} else {
		listed = true;
	}
	ts = calloc(n, sizeof(*ts));
	objs = calloc(n, sizeof(*objs));
	attrs = calloc(n, sizeof(*attrs));
	pre = calloc(n, sizeof(*pre));
	if (!ts || !objs || !attrs || !pre) {
		rc = tctl_fail(TCTL_REFUSED, "io", ENOMEM, "out of memory");
		goto out;
	}
	sink.out = out;
	h.ts = ts;
	h.objs = objs;
	h.attrs = attrs;
	rc = take_all(c, names, n, listed ? NULL : given.listed, skip, pre,
		      &h);
	if (!rc && !h.kept && !h.saved)
		rc = tctl_fail(TCTL_REFUSED, "input", ENOENT,
		               "no tensors to save");
	/* the last batch (the only one, sized, unless the caps were met) */
	if (!rc)
		rc = write_batch(&h, false, &(bool){false});
	if (!rc)
		rc = tctl_out_commit(&sink.o);
	else if (sink.opened)
		tctl_out_abort(&sink.o);
	/* with -o - the message is the output: nothing else on stdout */
	if (!rc && !tctl_out_is_stdout(out))
		rc = print_saved(out, h.saved, h.len, h.messages);
out:
	for (size_t i = 0; ts && i < n; i++)
		td_tensor_release(ts[i]);
	for (size_t i = 0; pre && i < n; i++)
		td_tensor_release(pre[i]);
	free(pre);
	for (size_t i = 0; attrs && i < n; i++)
		free(attrs[i]);
	free(attrs);
	td_client_close(c);
	if (!given.v)
		free(names);
	tctl_names_fini(&given);
	td_entry_list_free(list, list_n);
	free(ts);
	free(objs);
	return rc;
}

/* .hrry by the -o name or --format hrry (hrry.c), else a .tgm message */
int cmd_save(int argc, char **argv)
{
	if (tctl_hrry_wanted(argc, argv, 0, NULL))
		return cmd_save_hrry(argc, argv);
	return save_tgm(argc, argv);
}
