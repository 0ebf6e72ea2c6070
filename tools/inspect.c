/* SPDX-License-Identifier: MIT */
/* tensorctl inspect: decode a file and print its structure, by magic. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "tensorctl.h"

int tctl_read_file(const char *path, uint8_t **out, size_t *out_len)
{
	int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : 0;
	size_t cap = 1 << 16, len = 0;
	uint8_t *buf = NULL;
	int rc = 0;

	if (fd < 0)
		return -errno;
	buf = malloc(cap);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	for (;;) {
		if (len == cap) {
			uint8_t *nb = cap > SIZE_MAX / 2 ? NULL
							 : realloc(buf, cap * 2);
			if (!nb) {
				rc = -ENOMEM;
				goto out;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*out = buf;
	*out_len = len;
	buf = NULL;
out:
	free(buf);
	if (fd > 0)
		close(fd);
	return rc;
}

int cmd_inspect(int argc, char **argv)
{
	const char *path = NULL;
	int json = 0;
	uint8_t *buf;
	size_t len;
	int rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!path)
			path = argv[i];
		else
			path = NULL, i = argc;
	}
	if (!path) {
		fprintf(stderr, "usage: tensorctl inspect [--json] FILE\n");
		return TCTL_USAGE;
	}
	rc = tctl_read_file(path, &buf, &len);
	if (rc < 0) {
		fprintf(stderr, "tensorctl: %s: %s\n", path, strerror(-rc));
		return TCTL_USAGE;
	}
	/* formats with a magic first; the blob has none and is the default */
	if (inspect_hrry_sniff(buf, len))
		rc = inspect_hrry(buf, len, json);
	else if (inspect_tgm_sniff(buf, len))
		rc = inspect_tgm(buf, len, json);
	else
		rc = inspect_blob(buf, len, json);
	free(buf);
	return rc;
}

void tctl_print_td_err(const struct td_err *e, int json)
{
	if (!json) {
		fprintf(stderr, "refused: %s", td_err_kind_name(e->kind));
		if (e->field)
			fprintf(stderr, " field %s", e->field);
		if (e->has_value)
			fprintf(stderr, " value %llu",
				(unsigned long long)e->value);
		if (e->kind == TD_ERR_TRUNCATED)
			fprintf(stderr, " (need %llu, have %llu)",
				(unsigned long long)e->need,
				(unsigned long long)e->have);
		fprintf(stderr, " at offset %llu: %s\n",
			(unsigned long long)e->offset,
			e->reason ? e->reason : "");
		return;
	}
	printf("{\"error\":{\"kind\":");
	json_cstr(stdout, td_err_kind_name(e->kind));
	printf(",\"field\":");
	json_cstr(stdout, e->field);
	if (e->has_value)
		printf(",\"value\":%llu", (unsigned long long)e->value);
	else
		printf(",\"value\":null");
	printf(",\"offset\":%llu", (unsigned long long)e->offset);
	if (e->kind == TD_ERR_TRUNCATED)
		printf(",\"need\":%llu,\"have\":%llu",
		       (unsigned long long)e->need,
		       (unsigned long long)e->have);
	printf(",\"message\":");
	json_cstr(stdout, e->reason);
	printf("}}\n");
}
