/* SPDX-License-Identifier: MIT */
/*
 * tensorctl get: a tensor's raw bytes (planes in order) or a .npy file, or
 * its description.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "td-json.h"
#include "output.h"
#include "tensorctl.h"

static void describe(const char *name, const struct td_tensor *t)
{
	const float *sc;
	const int32_t *zp;
	const int64_t *st;
	const void *meta;
	uint32_t nsc, nzp, nst;
	size_t mlen;
	int32_t axis = td_tensor_quant(t, &sc, &nsc, &zp, &nzp);
	static const char *const sn[] = {"format", "color_space",
					  "color_transfer", "color_encoding",
					  "color_range"};

	printf("{\"name\":");
	td_json_cstr(stdout, name);
	printf(",\"version\":%llu,\"dtype\":",
	       (unsigned long long)td_tensor_version(t));
	td_json_cstr(stdout, td_tensor_dtype_name(td_tensor_dtype(t)));
	printf(",\"shape\":");
	tctl_print_shape(stdout, td_tensor_shape(t), td_tensor_ndim(t), 1);
	st = td_tensor_strides(t, &nst);
	printf(",\"strides\":");
	if (st) {
		for (uint32_t i = 0; i < nst; i++)
			printf("%c%lld", i ? ',' : '[', (long long)st[i]);
		printf("]");
	} else {
		printf("null");
	}
	printf(",\"quant_axis\":%d,\"quant_scales\":[", axis);
	for (uint32_t i = 0; i < nsc; i++) {
		if (i)
			putchar(',');
		td_json_double(stdout, sc[i]);
	}
	printf("],\"quant_zero_points\":[");
	for (uint32_t i = 0; i < nzp; i++)
		printf("%s%d", i ? "," : "", zp[i]);
	printf("]");
	for (unsigned i = 0; i < 5; i++) {
		printf(",\"%s\":", sn[i]);
		td_json_cstr(stdout, td_tensor_string(t, i));
	}
	printf(",\"planes\":[");
	for (uint32_t i = 0; i < td_tensor_plane_count(t); i++) {
		int kind = td_tensor_plane_kind(t, i);

		/* modifier: a dma-buf's DRM format modifier (0 linear) */
		printf("%s{\"size\":%llu,\"stride\":%llu,\"kind\":\"%s\","
		       "\"modifier\":%llu}",
		       i ? "," : "",
		       (unsigned long long)td_tensor_plane_size(t, i),
		       (unsigned long long)td_tensor_plane_stride(t, i),
		       td_tensor_plane_fd(t, i) < 0 ? "inline"
		       : kind == TD_PLANE_DMABUF    ? "dma-buf"
		       : kind == TD_PLANE_MEMFD     ? "memfd"
		                                    : "other",
		       (unsigned long long)td_tensor_plane_modifier(t, i));
	}
	printf("],\"bytes\":%llu,\"fence\":%s,",
	       (unsigned long long)td_tensor_bytes(t),
	       td_tensor_has_fence(t) ? "true" : "false");
	meta = td_tensor_meta(t, &mlen);
	tctl_json_meta(stdout, meta, mlen);
	printf("}\n");
}

/* The planes in order, through the shared output rules (output.h). */
static int write_planes(const struct td_tensor *t, const char *name,
			const char *out)
{
	struct tctl_out o;
	int rc = tctl_out_open(&o, out, TCTL_OUT_BINARY, td_tensor_bytes(t));

	for (uint32_t i = 0; i < td_tensor_plane_count(t) && !rc; i++)
		rc = tctl_out_write(&o, td_tensor_plane_data(t, i),
				    td_tensor_plane_size(t, i));
	if (rc) {
		tctl_out_abort(&o);
		return rc;
	}
	return tctl_out_commit(&o);
}

int cmd_get(int argc, char **argv)
{
	enum { O_VERSION = TCTL_OPT_FIRST_OWN, O_NEWER, O_TIMEOUT, O_FMT };
	static const struct option opts[] = {
		{"version", required_argument, NULL, O_VERSION},
		{"newer", required_argument, NULL, O_NEWER},
		{"timeout", required_argument, NULL, O_TIMEOUT},
		{"output", required_argument, NULL, 'o'},
		{"format", required_argument, NULL, O_FMT},
		TCTL_COMMON_OPTIONS};
	const char *name, *out = NULL, *format = NULL;
	uint64_t version = 0, newer = 0, tmo = 0;
	int have_version = 0, have_newer = 0, have_tmo = 0;
	struct td_error e = {0};
	struct td_tensor *t = NULL;
	struct td_client *c;
	int rc, o, timeout, npy;
	int (*emit)(const struct td_tensor *, const char *, const char *);

	while ((o = tctl_getopt(argc, argv, "o:", opts, &rc)) != -1) {
		switch (o) {
		case O_VERSION:
			have_version = 1;
			if (tctl_opt_number("get", "--version", optarg, false,
					    0, UINT64_MAX, "", &version))
				return TCTL_USAGE;
			break;
		case O_NEWER:
			have_newer = 1;
			if (tctl_opt_number("get", "--newer", optarg, false, 0,
					    UINT64_MAX, "", &newer))
				return TCTL_USAGE;
			break;
		case O_TIMEOUT:
			have_tmo = 1;
			if (tctl_opt_number("get", "--timeout", optarg, false,
					    0, INT32_MAX, "milliseconds", &tmo))
				return TCTL_USAGE;
			break;
		case 'o':
			out = optarg;
			break;
		case O_FMT:
			format = optarg;
			break;
		default:
			return rc;
		}
	}
	if (argc - optind != 1)
		return tctl_operands("get", argc, argv, 1, "needs one NAME");
	name = argv[optind];
	if (*name && name[strlen(name) - 1] == '/')
		return tctl_usage("get", "%s: get writes one tensor; a NAME "
				  "ending in '/' is every tensor under it: "
				  "tensorctl save -o FILE %s, or zarr export "
				  "DIR %s", name, name, name);
	if (have_version && have_newer)
		return tctl_usage("get", "--version and --newer exclude each "
				  "other");
	if (tctl_json && out && tctl_out_is_stdout(out))
		return tctl_usage("get", "--json and -o %s both write to stdout",
				  out);
	rc = tctl_npy_format("get", format, out, &npy);
	if (rc)
		return rc;
	emit = npy ? tctl_npy_write : write_planes;
	timeout = have_tmo ? (int)tmo : -1;
	rc = tctl_connect(&c);
	if (rc)
		return rc;
	if (have_version)
		rc = td_client_get_version(c, name, version, &t, &e);
	else if (have_newer)
		rc = td_client_get_newer(c, name, newer, timeout, &t, &e);
	else
		rc = td_client_get(c, name, &t, &e);
	if (rc < 0) {
		td_client_close(c);
		return tctl_refused_glob("get", name, name, rc, &e,
					 "get takes one NAME, not a pattern: "
					 "tensorctl ls PREFIX lists the names",
					 NULL);
	}
	rc = tctl_fence_wait(name, t, timeout);
	if (!rc && !tctl_json)
		rc = emit(t, name, out);
	else if (!rc && (!out || !(rc = emit(t, name, out))))
		describe(name, t); /* and with -o FILE, once it is written */
	/* released before exit even after a signal stopped the write */
	td_tensor_release(t);
	td_client_close(c);
	return rc;
}
