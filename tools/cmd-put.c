/* SPDX-License-Identifier: MIT */
/* tensorctl put: publish a file's bytes (raw, or a .npy file) as a tensor. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "input.h"
#include "npy.h"
#include "tensorctl.h"
#include "tgm-load.h"

/* "unknown dtype 'x' (valid: u8, i8, ...)" */
static int bad_dtype(const char *dtype)
{
	char valid[256];
	size_t o = 0;

	valid[0] = 0;
	for (uint32_t d = 0; td_tensor_dtype_name(d) && o < sizeof(valid);
	     d++)
		o += (size_t)snprintf(valid + o, sizeof(valid) - o, "%s%s",
				      d ? ", " : "", td_tensor_dtype_name(d));
	return tctl_usage("put", "unknown dtype '%s' (valid: %s; or numpy's "
			  "names: uint8 ... float64)", dtype, valid);
}

/* What the bytes are: from --dtype/--shape, or from a .npy header. */
struct spec {
	const char *dtype_s, *shape_s; /* as given (NULL: not given) */
	int dtype;
	uint32_t ndim;
	uint64_t shape[TD_ENTRY_MAX_DIMS];
	uint64_t want;  /* the data's bytes */
	unsigned swap;  /* big-endian .npy data: the width to swap, else 0 */
	const char *of; /* "", or what the bytes counted are (a .npy's) */
	char shape_buf[TD_ENTRY_MAX_DIMS * 21 + 8];
};

/* Read exactly want bytes of in into the loan's buffer. */
static int fill(struct tctl_in *in, struct td_alloc *a, const struct spec *s)
{
	uint64_t got = 0, want = s->want;
	uint8_t extra;
	int rc;

	if (in->regular && in->size != want)
		goto mismatch;
	rc = want ? tctl_in_read(in, td_alloc_data(a, 0), want, &got) : 0;
	if (rc)
		return rc;
	if (got == want) {
		/* one byte more says the input is too long */
		rc = tctl_in_read(in, &extra, 1, &got);
		if (rc)
			return rc;
		if (!got)
			return TCTL_OK;
		return tctl_fail(TCTL_REFUSED, "input", EFBIG,
				 "%s has more than the %llu bytes%s shape %s "
				 "of %s needs",
				 in->path, (unsigned long long)want, s->of,
				 s->shape_s, s->dtype_s);
	}
mismatch:
	return tctl_fail(TCTL_REFUSED, "input", EINVAL,
			 "%s has %llu bytes%s, shape %s of %s needs %llu",
			 in->path,
			 (unsigned long long)(in->regular ? in->size : got),
			 s->of,
			 s->shape_s, s->dtype_s, (unsigned long long)want);
}

/* --dtype and --shape into *s (either may be missing for a .npy). */
static int parse_given(struct spec *s)
{
	if (s->dtype_s) {
		s->dtype = td_tensor_dtype_from_name(s->dtype_s);
		if (s->dtype < 0)
			return bad_dtype(s->dtype_s);
	}
	if (!s->shape_s)
		return TCTL_OK;
	/* what is wrong: a 17th dimension or one past 2^64-1 was said
	 * "dimensions as 2,3 or 2x3", as if the form were */
	switch (tctl_parse_shape(s->shape_s, s->shape, &s->ndim)) {
	case 0:
		return TCTL_OK;
	case -E2BIG:
		return tctl_usage("put", "bad shape '%s' (more than %d "
				  "dimensions)",
				  s->shape_s, TD_ENTRY_MAX_DIMS);
	case -ERANGE:
		return tctl_usage("put", "bad shape '%s' (a dimension more "
				  "than 18446744073709551615)",
				  s->shape_s);
	default:
		return tctl_usage("put", "bad shape '%s' (dimensions as "
				  "2,3, 2x3 or (2, 3), at most %d)",
				  s->shape_s, TD_ENTRY_MAX_DIMS);
	}
}

/* The header's dtype and shape into *s; what was given must agree. */
static int from_header(struct tctl_in *in, struct spec *s)
{
	struct td_npy_header h;
	int rc = tctl_npy_read_header(in, &h), o = 0;

	if (rc)
		return rc;
	if (s->dtype_s && (uint32_t)s->dtype != h.dtype)
		return tctl_fail(TCTL_REFUSED, "input", EINVAL,
				 "--dtype %s does not match %s's header: %s",
				 s->dtype_s, in->path,
				 td_tensor_dtype_name(h.dtype));
	for (uint32_t i = 0; i < h.ndim; i++)
		o += snprintf(s->shape_buf + o,
			      sizeof(s->shape_buf) - (size_t)o, "%s%llu",
			      i ? "," : "", (unsigned long long)h.shape[i]);
	if (s->shape_s &&
	    (s->ndim != h.ndim ||
	     memcmp(s->shape, h.shape, h.ndim * sizeof(*h.shape))))
		return tctl_fail(TCTL_REFUSED, "input", EINVAL,
				 "--shape %s does not match %s's header: %s",
				 s->shape_s, in->path,
				 h.ndim ? s->shape_buf : "'' (0-d)");
	s->dtype = (int)h.dtype;
	s->dtype_s = td_tensor_dtype_name(h.dtype);
	s->ndim = h.ndim;
	memcpy(s->shape, h.shape, sizeof(h.shape));
	s->shape_s = s->shape_buf;
	s->of = " of data after its .npy header";
	/* tensors hold host-order elements, as load does for a .tgm */
	if (h.order == (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
				? TD_NPY_ORDER_BIG
				: TD_NPY_ORDER_LITTLE))
		s->swap = td_tensor_dtype_size(h.dtype);
	return TCTL_OK;
}

/* The data's bytes in s->want; a 0-d shape said as such. */
static int size_of(struct spec *s)
{
	if (!s->ndim)
		s->shape_s = "'' (0-d)"; /* the errors said "shape  of" */
	s->want = td_tensor_dtype_size((uint32_t)s->dtype);
	for (uint32_t i = 0; i < s->ndim; i++)
		if (__builtin_mul_overflow(s->want, s->shape[i], &s->want))
			return tctl_fail(TCTL_REFUSED, "input", EOVERFLOW,
					 "shape %s is too large", s->shape_s);
	return TCTL_OK;
}

/*
 * The loan filled from in (swapped when the .npy is big-endian) and
 * published; the version in *version. TCTL_OK or reported.
 */
static int publish(struct tctl_in *in, const struct spec *s,
		   struct td_publish *p, uint64_t *version)
{
	struct td_error e = {0};
	struct td_alloc *a = NULL;
	struct td_client *c;
	uint64_t want = s->want;
	int rc = tctl_connect(&c);

	if (rc)
		return rc;
	/* the bytes go straight into the daemon's buffer: no copy */
	rc = td_client_alloc(c, 1, &want, &a, &e);
	if (rc < 0)
		rc = tctl_refused(p->name, rc, &e);
	else
		rc = fill(in, a, s);
	if (!rc && s->swap)
		tctl_swap_in_place(td_alloc_data(a, 0), want, s->swap);
	if (!rc) {
		p->dtype = (uint32_t)s->dtype;
		p->ndim = s->ndim;
		p->shape = s->shape;
		rc = td_client_publish_alloc(c, a, p, version, &e);
		rc = rc < 0 ? tctl_refused(p->name, rc, &e) : TCTL_OK;
	} else {
		td_alloc_free(a);
	}
	td_client_close(c);
	return rc;
}

static int print_put(const char *name, uint64_t version, uint64_t bytes)
{
	if (tctl_json) {
		struct json_object *j = json_object_new_object();

		json_object_object_add(j, "name", json_object_new_string(name));
		json_object_object_add(j, "version",
				       json_object_new_uint64(version));
		json_object_object_add(j, "bytes",
				       json_object_new_uint64(bytes));
		return tctl_json_print(j);
	}
	printf("%s version %llu\n", name, (unsigned long long)version);
	return TCTL_OK;
}

int cmd_put(int argc, char **argv)
{
	enum { O_DTYPE = TCTL_OPT_FIRST_OWN, O_SHAPE, O_META, O_PIN, O_FMT };
	static const struct option opts[] = {
		{"dtype", required_argument, NULL, O_DTYPE},
		{"shape", required_argument, NULL, O_SHAPE},
		{"meta", required_argument, NULL, O_META},
		{"pin", no_argument, NULL, O_PIN},
		{"format", required_argument, NULL, O_FMT},
		TCTL_COMMON_OPTIONS};
	const char *path, *format = NULL;
	uint64_t version = 0;
	struct td_publish p = {0};
	struct spec s = {.of = ""};
	struct tctl_in in;
	int rc, o, npy;

	while ((o = tctl_getopt(argc, argv, "", opts, &rc)) != -1) {
		if (o == O_DTYPE)
			s.dtype_s = optarg;
		else if (o == O_SHAPE)
			s.shape_s = optarg;
		else if (o == O_META)
			p.meta = optarg;
		else if (o == O_PIN)
			p.flags = TD_PUBLISH_PIN;
		else if (o == O_FMT)
			format = optarg;
		else
			return rc;
	}
	if (argc - optind != 2)
		return tctl_operands("put", argc, argv, 2,
				     "needs NAME and FILE (- for stdin)");
	p.name = argv[optind];
	path = argv[optind + 1];
	p.meta_len = p.meta ? strlen(p.meta) : 0;
	rc = tctl_npy_format("put", format, path, &npy);
	if (rc)
		return rc;
	if (!npy && (!s.dtype_s || !s.shape_s)) {
		/* `put x run.tgm` said only this, not where the file goes */
		int kind = strcmp(path, "-") ? tctl_file_kind(path)
					     : TCTL_KIND_NONE;
		const char *what = kind == TCTL_KIND_NPY
					   ? "one: add --format npy"
					   : tctl_kind_what(kind);

		return tctl_usage("put", "--dtype and --shape are required "
				  "(but for a .npy file)%s%s",
				  what ? "; this is " : "", what ? what : "");
	}
	rc = parse_given(&s);
	if (!rc && !npy)
		rc = size_of(&s);
	if (rc)
		return rc;
	rc = tctl_in_open(&in, path);
	/* a file of /proc or /sys says 0 bytes and holds more: read to its
	 * end as a stream (it said "has 0 bytes"); an empty file reads as
	 * one too */
	if (!rc && in.regular && !in.size)
		in.regular = false;
	if (!rc && npy && !(rc = from_header(&in, &s)))
		rc = size_of(&s);
	/* a regular file of another size is said before any ALLOC: for a
	 * mistyped huge shape the daemon would only say it exceeds
	 * --max-bytes */
	if (!rc && in.regular && in.size != s.want)
		rc = fill(&in, NULL, &s);
	/* a stream's size is the shape's (after a .npy header, read) */
	in.progress.total = in.progress.done + s.want;
	if (!rc)
		rc = publish(&in, &s, &p, &version);
	tctl_in_close(&in);
	return rc ? rc : print_put(p.name, version, s.want);
}
