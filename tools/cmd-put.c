/* SPDX-License-Identifier: MIT */
/* tensorctl put: publish a file's bytes as a tensor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorctl.h"

#define PUT_USAGE                                                             \
	"usage: tensorctl put NAME --dtype T --shape D,D,.. [--meta STR] "    \
	"[--pin] FILE|-\n"

int cmd_put(int argc, char **argv)
{
	const char *name = NULL, *path = NULL, *meta = NULL, *dtype = NULL;
	const char *shape_s = NULL;
	uint64_t shape[TD_ENTRY_MAX_DIMS], want, version = 0;
	struct td_publish p = {0};
	struct td_error e = {0};
	struct td_client *c;
	uint32_t ndim = 0;
	uint8_t *buf;
	size_t len;
	int rc, d, pin = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--dtype") && i + 1 < argc)
			dtype = argv[++i];
		else if (!strcmp(a, "--shape") && i + 1 < argc)
			shape_s = argv[++i];
		else if (!strcmp(a, "--meta") && i + 1 < argc)
			meta = argv[++i];
		else if (!strcmp(a, "--socket") && i + 1 < argc)
			tctl_socket = argv[++i];
		else if (!strcmp(a, "--pin"))
			pin = 1;
		else if (a[0] == '-' && a[1])
			goto usage;
		else if (!name)
			name = a;
		else if (!path)
			path = a;
		else
			goto usage;
	}
	if (!name || !path || !dtype || !shape_s)
		goto usage;
	d = td_tensor_dtype_from_name(dtype);
	if (d < 0) {
		fprintf(stderr, "tensorctl: unknown dtype '%s'\n", dtype);
		return TCTL_USAGE;
	}
	if (tctl_parse_shape(shape_s, shape, &ndim) < 0) {
		fprintf(stderr, "tensorctl: bad shape '%s'\n", shape_s);
		return TCTL_USAGE;
	}
	want = td_tensor_dtype_size((uint32_t)d);
	for (uint32_t i = 0; i < ndim; i++)
		if (__builtin_mul_overflow(want, shape[i], &want)) {
			fprintf(stderr, "tensorctl: shape too large\n");
			return TCTL_REFUSED;
		}
	rc = tctl_read_file(path, &buf, &len);
	if (rc < 0) {
		fprintf(stderr, "tensorctl: %s: %s\n", path, strerror(-rc));
		return TCTL_USAGE;
	}
	if (len != want) {
		fprintf(stderr, "tensorctl: %s has %zu bytes, shape %s of %s "
			"needs %llu\n", path, len, shape_s, dtype,
			(unsigned long long)want);
		free(buf);
		return TCTL_REFUSED;
	}
	rc = tctl_connect(&c);
	if (rc) {
		free(buf);
		return rc;
	}
	p.name = name;
	p.flags = pin ? TD_PUBLISH_PIN : 0;
	p.dtype = (uint32_t)d;
	p.ndim = ndim;
	p.shape = shape;
	p.meta = meta;
	p.meta_len = meta ? strlen(meta) : 0;
	rc = td_client_put(c, &p, buf, len, &version, &e);
	free(buf);
	td_client_close(c);
	if (rc < 0)
		return tctl_refused(name, rc, &e);
	printf("%s version %llu\n", name, (unsigned long long)version);
	return TCTL_OK;
usage:
	fputs(PUT_USAGE, stderr);
	return TCTL_USAGE;
}
