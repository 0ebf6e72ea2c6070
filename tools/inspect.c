/* SPDX-License-Identifier: MIT */
/* tensorctl inspect: decode a file and print its structure, by magic. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "input.h"
#include "td-json.h"
#include "tensorctl.h"
#include "tgm-file.h"

/* A regular file that starts as a Hurray file (never waits on a FIFO). */
static int regular_hrry(const char *path)
{
	uint8_t magic[8];
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	int r = 0;

	if (fd < 0)
		return 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    pread(fd, magic, sizeof(magic), 0) == (ssize_t)sizeof(magic))
		r = inspect_hrry_sniff(magic, sizeof(magic));
	close(fd);
	return r;
}

/*
 * A .tgm file on disk is read with pread, what inspect prints only (its
 * frames' headers and descriptors; a hashed frame's payload streamed
 * through the hash); anything else as a whole, a stream up to max.
 */
static int inspect_input(const char *path, uint64_t max)
{
	struct tctl_in in;
	struct tgm_src s;
	uint8_t *buf = NULL;
	size_t len;
	int rc = tctl_tgm_open(&s, &in, path, max, &buf);

	if (rc)
		return rc;
	if (s.fd >= 0) {
		rc = inspect_tgm_sniff_src(&s) ? inspect_tgm(&s, tctl_json)
					       : -1;
		if (rc < 0 && s.io_err)
			rc = tgm_src_fail(&s);
		if (rc >= 0) {
			tctl_in_close(&in);
			return rc;
		}
		/* not a .tgm file: a blob, read whole as before */
		rc = tctl_in_slurp(&in, max, &buf, &len);
		tctl_in_close(&in);
		if (rc)
			return rc;
		s.fd = -1;
		s.buf = buf;
		s.size = len;
	} else {
		len = (size_t)s.size;
	}
	/* formats with a magic first; the blob has none and is the default */
	if (inspect_hrry_sniff(buf, len))
		rc = inspect_hrry(path, buf, len, tctl_json);
	else if (inspect_tgm_sniff_src(&s))
		rc = inspect_tgm(&s, tctl_json);
	else
		rc = inspect_blob(buf, len, tctl_json);
	free(buf);
	return rc;
}

int cmd_inspect(int argc, char **argv)
{
	enum { O_MAX_BYTES = TCTL_OPT_FIRST_OWN };
	static const struct option opts[] = {
		{"max-bytes", required_argument, NULL, O_MAX_BYTES},
		TCTL_COMMON_OPTIONS};
	uint64_t max = TCTL_STREAM_MAX;
	int rc, o;

	while ((o = tctl_getopt(argc, argv, "", opts, &rc)) != -1) {
		if (o != O_MAX_BYTES)
			return rc;
		if (tctl_parse_size(optarg, &max))
			return tctl_usage("inspect", "bad --max-bytes '%s' "
					  "(bytes, or with K, M, G, T)",
					  optarg);
	}
	if (argc - optind != 1)
		return tctl_usage("inspect", "needs one FILE (- for stdin)");
	/* a Hurray file on disk: inspect reads its header, index, KV and
	 * descriptors (pread), not its tensors: a file of any size */
	if (strcmp(argv[optind], "-") && regular_hrry(argv[optind]))
		return inspect_hrry(argv[optind], NULL, 0, tctl_json);
	return inspect_input(argv[optind], max);
}

void tctl_print_td_err(const struct td_err *e, int json)
{
	if (!json) {
		fprintf(stderr, "tensorctl: refused: %s",
			td_err_kind_name(e->kind));
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
	td_json_cstr(stdout, td_err_kind_name(e->kind));
	printf(",\"field\":");
	td_json_cstr(stdout, e->field);
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
	td_json_cstr(stdout, e->reason);
	/* what every tensorctl error carries, after the decoder's detail */
	printf(",\"errno\":%d,\"reason\":", -td_err_kind_errno(e->kind));
	td_json_cstr(stdout, e->reason);
	printf("}}\n");
}
