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
/* The first 8 bytes of path when it is a regular file: 1, else 0. */
static int regular_magic(const char *path, uint8_t magic[8])
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	int r = 0;

	if (fd < 0)
		return 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    pread(fd, magic, 8, 0) == 8)
		r = 1;
	close(fd);
	return r;
}

/* What inspect_tgm_sniff_src() allows before a file's first message. */
#define SNIFF_WINDOW 4096

/*
 * A stream (stdin, a pipe): a .npy its header, the rest counted as it
 * passes, never held; anything else held in a mapped spool file in
 * $TMPDIR (tgm_stream_spool(), as load - holds it), not on the heap: a
 * .tgm stream a message at a time, up to max bytes held at once
 * (tgm-file.h); what starts as a Hurray file (whose index and data are
 * anywhere: read by offset), or has no .tgm message within its first
 * 4 KiB (a blob), read whole up to max.
 */
static int inspect_stream(const char *path, struct tctl_in *in,
			  uint64_t max)
{
	struct tgm_stream st;
	struct td_tgm_span sp;
	struct tgm_src s;
	const uint8_t *buf = NULL;
	size_t len;
	int rc, first = 0;

	tgm_stream_init(&st, in, max);
	rc = tgm_stream_head(&st, 8);
	if (!rc && tctl_npy_sniff(st.buf, (size_t)st.have)) {
		/* its header, the rest counted as it passes */
		rc = tctl_npy_inspect_stream(path, in, st.buf,
					     (size_t)st.have);
		tgm_stream_fini(&st);
		return rc;
	}
	if (!rc)
		rc = tgm_stream_spool(&st);
	if (!rc && !inspect_hrry_sniff(st.buf, (size_t)st.have)) {
		first = tgm_stream_next(&st, &sp, &s);
		if (first < 0)
			rc = -first;
	}
	/* inspect_tgm_sniff_src()'s rule: the magic first, or a message
	 * within the window */
	if (!rc && first >= 0 &&
	    ((st.have >= 8 && !memcmp(st.buf, "TENSOGRM", 8)) ||
	     (first == 1 && sp.offset < SNIFF_WINDOW))) {
		if (first == 1)
			rc = inspect_tgm_stream(&st, &sp, &s, tctl_json);
		else /* the magic, no whole message: said as for a file */
			rc = inspect_tgm_stream(&st, NULL, NULL, tctl_json);
		tgm_stream_fini(&st);
		return rc;
	}
	if (!rc)
		rc = tgm_stream_rest(&st, &buf, &len);
	if (!rc && inspect_hrry_sniff(buf, len))
		rc = inspect_hrry(path, buf, len, tctl_json);
	else if (!rc)
		rc = inspect_blob(path, buf, len, tctl_json);
	tgm_stream_fini(&st);
	return rc;
}

/*
 * A .tgm file on disk is read with pread, what inspect prints only (its
 * frames' headers and descriptors; a hashed frame's payload streamed
 * through the hash); anything else as a whole; a stream as
 * inspect_stream() says.
 */
static int inspect_input(const char *path, uint64_t max)
{
	struct tctl_in in;
	struct tgm_src s;
	uint8_t *buf = NULL;
	size_t len;
	int rc = tctl_in_open(&in, path);

	if (rc)
		return rc;
	if (!in.regular || in.is_stdin) {
		rc = inspect_stream(path, &in, max);
		tctl_in_close(&in);
		return rc;
	}
	s = (struct tgm_src){ .path = in.path, .fd = in.fd, .size = in.size };
	rc = inspect_tgm_sniff_src(&s) ? inspect_tgm(&s, tctl_json) : -1;
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
	/* formats with a magic first; the blob has none and is the default */
	if (tctl_npy_sniff(buf, len))
		rc = tctl_npy_inspect(path, buf, len);
	else if (inspect_hrry_sniff(buf, len))
		rc = inspect_hrry(path, buf, len, tctl_json);
	else if (inspect_tgm_sniff_src(&s))
		rc = inspect_tgm(&s, tctl_json);
	else
		rc = inspect_blob(path, buf, len, tctl_json);
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
	uint8_t magic[8];
	int rc, o;

	while ((o = tctl_getopt(argc, argv, "", opts, &rc)) != -1) {
		if (o != O_MAX_BYTES)
			return rc;
		if (tctl_opt_number("inspect", "--max-bytes", optarg, true, 0,
				    UINT64_MAX, "bytes", &max))
			return TCTL_USAGE;
	}
	if (argc - optind != 1)
		return tctl_operands("inspect", argc, argv, 1,
				     "needs one FILE (- for stdin)");
	/* a Hurray file on disk: inspect reads its header, index, KV and
	 * descriptors (pread), not its tensors: a file of any size; a
	 * .npy file its header */
	if (strcmp(argv[optind], "-") && regular_magic(argv[optind], magic)) {
		if (inspect_hrry_sniff(magic, sizeof(magic)))
			return inspect_hrry(argv[optind], NULL, 0, tctl_json);
		if (tctl_npy_sniff(magic, sizeof(magic)))
			return tctl_npy_inspect(argv[optind], NULL, 0);
	}
	return inspect_input(argv[optind], max);
}

