/* SPDX-License-Identifier: MIT */
/* tensorctl get: a tensor's raw bytes (planes in order), or its description. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "td-json.h"
#include "tensorctl.h"

#define GET_USAGE                                                             \
	"usage: tensorctl get NAME [--version N | --newer N [--timeout MS]] " \
	"[-o FILE] [--json]\n"

static int write_all(int fd, const uint8_t *p, uint64_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len > (1u << 30) ? 1u << 30 : len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (uint64_t)n;
	}
	return 0;
}

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
	for (uint32_t i = 0; i < td_tensor_plane_count(t); i++)
		printf("%s{\"size\":%llu,\"stride\":%llu}", i ? "," : "",
		       (unsigned long long)td_tensor_plane_size(t, i),
		       (unsigned long long)td_tensor_plane_stride(t, i));
	printf("],\"bytes\":%llu,\"fence\":%s,",
	       (unsigned long long)td_tensor_bytes(t),
	       td_tensor_has_fence(t) ? "true" : "false");
	meta = td_tensor_meta(t, &mlen);
	tctl_json_meta(stdout, meta, mlen);
	printf("}\n");
}

int cmd_get(int argc, char **argv)
{
	const char *name = NULL, *out = NULL;
	uint64_t version = 0, newer = 0, tmo = 0;
	int have_version = 0, have_newer = 0, have_tmo = 0, json = 0;
	struct td_error e = {0};
	struct td_tensor *t = NULL;
	struct td_client *c;
	int rc, fd, timeout;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--version") && v) {
			have_version = 1;
			if (tctl_parse_u64(argv[++i], &version))
				goto usage;
		} else if (!strcmp(a, "--newer") && v) {
			have_newer = 1;
			if (tctl_parse_u64(argv[++i], &newer))
				goto usage;
		} else if (!strcmp(a, "--timeout") && v) {
			have_tmo = 1;
			if (tctl_parse_u64(argv[++i], &tmo) || tmo > INT32_MAX)
				goto usage;
		} else if (!strcmp(a, "-o") && v) {
			out = argv[++i];
		} else if (!strcmp(a, "--socket") && v) {
			tctl_socket = argv[++i];
		} else if (!strcmp(a, "--json")) {
			json = 1;
		} else if (a[0] == '-' || name) {
			goto usage;
		} else {
			name = a;
		}
	}
	if (!name || (have_version && have_newer) || (have_tmo && !have_newer))
		goto usage;
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
		return tctl_refused(name, rc, &e);
	}
	rc = td_tensor_fence_wait(t, timeout);
	if (rc < 0) {
		fprintf(stderr, "tensorctl: %s: fence: %s\n", name,
			strerror(-rc));
		rc = TCTL_REFUSED;
		goto out;
	}
	if (json) {
		describe(name, t);
		rc = TCTL_OK;
		goto out;
	}
	fd = out ? open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
		 : STDOUT_FILENO;
	if (fd < 0) {
		fprintf(stderr, "tensorctl: %s: %s\n", out, strerror(errno));
		rc = TCTL_USAGE;
		goto out;
	}
	rc = 0;
	for (uint32_t i = 0; i < td_tensor_plane_count(t) && !rc; i++)
		rc = write_all(fd, td_tensor_plane_data(t, i),
			       td_tensor_plane_size(t, i));
	if (out && close(fd) < 0 && !rc)
		rc = -errno;
	if (rc < 0)
		fprintf(stderr, "tensorctl: write: %s\n", strerror(-rc));
	rc = rc < 0 ? TCTL_USAGE : TCTL_OK;
out:
	td_tensor_release(t);
	td_client_close(c);
	return rc;
usage:
	fputs(GET_USAGE, stderr);
	return TCTL_USAGE;
}
