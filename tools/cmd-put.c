/* SPDX-License-Identifier: MIT */
/* tensorctl put: publish a file's bytes as a tensor. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "input.h"
#include "tensorctl.h"

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

/* Read exactly want bytes of in into the loan's buffer. */
static int fill(struct tctl_in *in, struct td_alloc *a, uint64_t want,
		const char *shape_s, const char *dtype)
{
	uint64_t got = 0;
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
				 "%s has more than the %llu bytes shape %s "
				 "of %s needs",
				 in->path, (unsigned long long)want, shape_s,
				 dtype);
	}
mismatch:
	return tctl_fail(TCTL_REFUSED, "input", EINVAL,
			 "%s has %llu bytes, shape %s of %s needs %llu",
			 in->path,
			 (unsigned long long)(in->regular ? in->size : got),
			 shape_s, dtype, (unsigned long long)want);
}

int cmd_put(int argc, char **argv)
{
	enum { O_DTYPE = TCTL_OPT_FIRST_OWN, O_SHAPE, O_META, O_PIN };
	static const struct option opts[] = {
		{"dtype", required_argument, NULL, O_DTYPE},
		{"shape", required_argument, NULL, O_SHAPE},
		{"meta", required_argument, NULL, O_META},
		{"pin", no_argument, NULL, O_PIN},
		TCTL_COMMON_OPTIONS};
	const char *name, *path, *meta = NULL, *dtype = NULL;
	const char *shape_s = NULL;
	uint64_t shape[TD_ENTRY_MAX_DIMS], want, version = 0;
	struct td_publish p = {0};
	struct td_error e = {0};
	struct td_client *c;
	struct td_alloc *a = NULL;
	struct tctl_in in;
	uint32_t ndim = 0;
	int rc, d, o, pin = 0;

	while ((o = tctl_getopt(argc, argv, "", opts, &rc)) != -1) {
		switch (o) {
		case O_DTYPE:
			dtype = optarg;
			break;
		case O_SHAPE:
			shape_s = optarg;
			break;
		case O_META:
			meta = optarg;
			break;
		case O_PIN:
			pin = 1;
			break;
		default:
			return rc;
		}
	}
	if (argc - optind != 2)
		return tctl_usage("put", "needs NAME and FILE (- for stdin)");
	name = argv[optind];
	path = argv[optind + 1];
	if (!dtype || !shape_s)
		return tctl_usage("put", "--dtype and --shape are required");
	d = td_tensor_dtype_from_name(dtype);
	if (d < 0)
		return bad_dtype(dtype);
	if (tctl_parse_shape(shape_s, shape, &ndim) < 0)
		return tctl_usage("put", "bad shape '%s' (dimensions as "
				  "2,3 or 2x3, at most %d)",
				  shape_s, TD_ENTRY_MAX_DIMS);
	if (!ndim)
		shape_s = "'' (0-d)"; /* the errors below said "shape  of" */
	want = td_tensor_dtype_size((uint32_t)d);
	for (uint32_t i = 0; i < ndim; i++)
		if (__builtin_mul_overflow(want, shape[i], &want))
			return tctl_fail(TCTL_REFUSED, "input", EOVERFLOW,
					 "shape %s is too large", shape_s);
	rc = tctl_in_open(&in, path);
	if (rc)
		return rc;
	/* a regular file of another size is said before any ALLOC: for a
	 * mistyped huge shape the daemon would only say it exceeds
	 * --max-bytes */
	if (in.regular && in.size != want) {
		rc = fill(&in, NULL, want, shape_s, dtype);
		tctl_in_close(&in);
		return rc;
	}
	in.progress.total = want; /* a stream's size is the shape's */
	rc = tctl_connect(&c);
	if (rc) {
		tctl_in_close(&in);
		return rc;
	}
	/* the bytes go straight into the daemon's buffer: no copy */
	rc = td_client_alloc(c, 1, &want, &a, &e);
	if (rc < 0)
		rc = tctl_refused(name, rc, &e);
	else
		rc = fill(&in, a, want, shape_s, dtype);
	tctl_in_close(&in);
	if (rc) {
		td_alloc_free(a);
		td_client_close(c);
		return rc;
	}
	p.name = name;
	p.flags = pin ? TD_PUBLISH_PIN : 0;
	p.dtype = (uint32_t)d;
	p.ndim = ndim;
	p.shape = shape;
	p.meta = meta;
	p.meta_len = meta ? strlen(meta) : 0;
	rc = td_client_publish_alloc(c, a, &p, &version, &e);
	td_client_close(c);
	if (rc < 0)
		return tctl_refused(name, rc, &e);
	if (tctl_json) {
		struct json_object *j = json_object_new_object();

		json_object_object_add(j, "name", json_object_new_string(name));
		json_object_object_add(j, "version",
				       json_object_new_uint64(version));
		json_object_object_add(j, "bytes", json_object_new_uint64(want));
		return tctl_json_print(j);
	}
	printf("%s version %llu\n", name, (unsigned long long)version);
	return TCTL_OK;
}
