/* SPDX-License-Identifier: MIT */
/*
 * tensorctl's streams in bounded memory: `load -` and `inspect -` read a
 * .tgm stream a message at a time (tools/tgm-stream.c), and `save -o
 * F.tgm` past the lease caps writes a message per batch it holds instead
 * of copying the tensors past the caps into memory. Memory is measured
 * as tensorctl's peak resident size (wait4's ru_maxrss) against the
 * data's size; what the streams give is compared with the file's path.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensord/tensord.h"
#include "testutil.h"

TestSuite(tgm_stream, .timeout = TU_TEST_TIMEOUT_S);

#define NOBODY 65534


/* Word k of tensor i: distinct across tensors and offsets. */
static uint64_t word(unsigned i, uint64_t k)
{
	uint64_t z = ((uint64_t)i << 40) + k + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Publish name as u64 tensor i of bytes bytes. */
static void publish(struct td_client *c, const char *name, unsigned i,
                    uint64_t bytes)
{
	struct td_error e = {0};
	struct td_alloc *al;
	uint64_t size = bytes, shape = bytes / 8, *w;
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U64,
	                       .ndim = 1, .shape = &shape};

	cr_assert_eq(td_client_alloc(c, 1, &size, &al, &e), 0, "%s",
	             e.reason);
	w = td_alloc_data(al, 0);
	for (uint64_t k = 0; k < bytes / 8; k++)
		w[k] = word(i, k);
	cr_assert_eq(td_client_publish_alloc(c, al, &p, NULL, &e), 0, "%s",
	             e.reason);
}

/* Whether name holds tensor i's bytes bytes. */
static bool holds(struct td_client *c, const char *name, unsigned i,
                  uint64_t bytes)
{
	struct td_error e = {0};
	struct td_tensor *t;
	const uint64_t *w;
	bool ok;

	if (td_client_get(c, name, &t, &e) < 0)
		return false;
	w = td_tensor_plane_data(t, 0);
	ok = td_tensor_bytes(t) == bytes;
	for (uint64_t k = 0; ok && k < bytes / 8; k++)
		ok = w[k] == word(i, k);
	td_tensor_release(t);
	return ok;
}

/* How many tensors have a name starting with prefix. */
static size_t under(struct td_client *c, const char *prefix)
{
	struct td_entry *list = NULL;
	size_t n = 0, k = 0;

	cr_assert_eq(td_client_list(c, NULL, &list, &n, NULL), 0);
	for (size_t i = 0; i < n; i++)
		k += !strncmp(list[i].name, prefix, strlen(prefix));
	td_entry_list_free(list, n);
	return k;
}

/* tensorctl as h says (tu_ctl_run) */
#define run(d, h, ...) tu_ctl_run((d)->sock, *(h), __VA_ARGS__)

/* A file's text (NUL-ended; "" when it is missing). */
static char *text(const char *path)
{
	size_t n;
	uint8_t *b = tu_try_read_file(path, &n);
	char *s = strndup(b ? (const char *)b : "", b ? n : 0);

	free(b);
	return s;
}

/* dst = the files srcs[0..n) one after another, junk (len bytes, may be
 * NULL) before each. */
static uint64_t concat(const char *dst, const char *const *srcs, size_t n,
                       const void *junk, size_t len)
{
	FILE *f = fopen(dst, "wb");
	uint64_t total = 0;

	cr_assert(f);
	for (size_t i = 0; i < n; i++) {
		size_t m;
		uint8_t *b = tu_read_file(srcs[i], &m);

		cr_assert(b, "%s", srcs[i]);
		if (junk && len)
			cr_assert_eq(fwrite(junk, 1, len, f), len);
		cr_assert_eq(fwrite(b, 1, m, f), m);
		total += m + (junk ? len : 0);
		free(b);
	}
	cr_assert_eq(fclose(f), 0);
	return total;
}

#define MSG_N 4
#define MSG_BYTES ((uint64_t)32 << 20)

/*
 * stream = MSG_N messages of one MSG_BYTES u64 tensor each (t0..t3,
 * tensor i's words; saved one by one, deleted again): its length.
 */
static uint64_t big_stream(struct tu_daemon *d, struct td_client *c,
                           const char *stream)
{
	char name[32], file[MSG_N][160], out[160], err[160];
	const char *files[MSG_N];
	uint64_t total;
	char *a;

	snprintf(out, sizeof(out), "%s/out", d->dir);
	snprintf(err, sizeof(err), "%s/err", d->dir);
	for (unsigned i = 0; i < MSG_N; i++) {
		struct tu_ctl_how h = {.out = out, .err = err};

		snprintf(name, sizeof(name), "t%u", i);
		snprintf(file[i], sizeof(file[i]), "%s/m%u.tgm", d->dir, i);
		files[i] = file[i];
		publish(c, name, i, MSG_BYTES);
		cr_assert_eq(run(d, &h, NULL, "save", "-o", file[i], name,
		                 NULL),
		             0, "%s", (a = text(err)));
		cr_assert_eq(td_client_delete(c, name, NULL, NULL), 0);
	}
	total = concat(stream, files, MSG_N, NULL, 0);
	for (unsigned i = 0; i < MSG_N; i++)
		unlink(file[i]);
	return total;
}

/*
 * A stream of MSG_N messages of one MSG_BYTES tensor each, `load -`
 * peaks under half the stream (it held the stream whole: 128 MiB read
 * into memory before the first message was decoded), and so does
 * `inspect -`, whose report is the file's, byte for byte; the tensors
 * come back bit for bit.
 */
Test(tgm_stream, load_and_inspect_of_stdin_hold_one_message)
{
	struct tu_daemon d;
	struct td_client *c;
	char stream[160], out[160], err[160], out2[160];
	uint64_t total, peak = 0;
	char *a, *b;
	int rc;

	tu_daemon_start(&d, "error");
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	snprintf(out, sizeof(out), "%s/out", d.dir);
	snprintf(out2, sizeof(out2), "%s/out2", d.dir);
	snprintf(err, sizeof(err), "%s/err", d.dir);
	snprintf(stream, sizeof(stream), "%s/stream.tgm", d.dir);
	total = big_stream(&d, c, stream);

	{
		struct tu_ctl_how h = {.in = stream, .out = out, .err = err};

		rc = run(&d, &h, &peak, "load", "-", "--prefix", "s/", NULL);
		cr_assert_eq(rc, 0, "%s", (a = text(err)));
	}
	cr_log_info("load - peaked at %" PRIu64 " KiB", peak >> 10);
	cr_expect(TU_BOUNDED(peak, total / 2),
	             "load - peaked at %" PRIu64 " MiB for a %" PRIu64
	             " MiB stream of %u messages",
	             peak >> 20, total >> 20, MSG_N);
	for (unsigned i = 0; i < MSG_N; i++) {
		char s[200];

		snprintf(s, sizeof(s), "s/t%u", i);
		cr_expect(holds(c, s, i, MSG_BYTES), "%s: bytes differ", s);
	}

	{
		struct tu_ctl_how hf = {.out = out2, .err = err};
		struct tu_ctl_how hs = {.in = stream, .out = out, .err = err};

		rc = run(&d, &hs, &peak, "inspect", "-", NULL);
		cr_expect_eq(rc, 0, "%s", (a = text(err)));
		cr_log_info("inspect - peaked at %" PRIu64 " KiB", peak >> 10);
		cr_expect(TU_BOUNDED(peak, total / 2),
		             "inspect - peaked at %" PRIu64 " MiB for a %" PRIu64
		             " MiB stream",
		             peak >> 20, total >> 20);
		cr_expect_eq(run(&d, &hf, NULL, "inspect", stream, NULL), 0);
		a = text(out);
		b = text(out2);
		cr_expect_str_eq(a, b);
		cr_expect(strstr(a, "4 message(s)"), "%s", a);
		free(a);
		free(b);
	}
	unlink(stream);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/* A vector's path. */
static const char *vec(char *buf, size_t cap, const char *name)
{
	snprintf(buf, cap, "%s/%s", tu_vectors_or_skip("tgm", "tgm stream"),
	         name);
	return buf;
}

/* Replace every "was" in s by "now" (no longer than was). */
static void replace(char *s, const char *was, const char *now)
{
	size_t wl = strlen(was), nl = strlen(now);

	cr_assert_leq(nl, wl);
	for (char *p; (p = strstr(s, was)) != NULL;) {
		memcpy(p, now, nl);
		memmove(p + nl, p + wl, strlen(p + wl) + 1);
	}
}

/* Every " version N" of s without its N. */
static void unversion(char *s)
{
	for (char *p = s; (p = strstr(p, " version ")) != NULL;) {
		char *q = p += 9;

		while (*q >= '0' && *q <= '9')
			q++;
		memmove(p, q, strlen(q) + 1);
	}
}

/*
 * The vectors one after another, junk between them (a cut message at
 * the end), on stdin with a --max-bytes under the stream's size but over
 * each message's: load publishes what load of the file publishes (the
 * same names, made distinct across messages, dtypes, shapes, bytes,
 * metadata; big-endian objects swapped) and says the same, inspect
 * prints the same report, text and JSON. A stream was read whole up to
 * --max-bytes: refused, EFBIG.
 */
Test(tgm_stream, stdin_gives_what_the_file_gives)
{
	static const char *const names[] = {
	        "multi_message.tgm", "garbage_between.tgm", "simple_f32.tgm",
	        "multi_object.tgm",  "two-msg.tgm",         "streaming-tail.tgm",
	        "mars_metadata.tgm", "simple_f32.tgm",      "corrupt_truncated.tgm"};
	enum { N = sizeof(names) / sizeof(names[0]) };
	static const char junk[] = "TENSOGRM junk 39277777 \0\0\0";
	char v[N][256], stream[160], out[160], out2[160], err[160], err2[160];
	const char *files[N];
	struct tu_daemon d;
	struct td_client *c;
	struct td_entry *list = NULL;
	size_t list_n = 0, from_file = 0;
	char max[32];
	uint64_t total;
	char *a, *b;

	tu_daemon_start(&d, "error");
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	for (size_t i = 0; i < N; i++)
		files[i] = vec(v[i], sizeof(v[i]), names[i]);
	snprintf(stream, sizeof(stream), "%s/stream.tgm", d.dir);
	snprintf(out, sizeof(out), "%s/out", d.dir);
	snprintf(out2, sizeof(out2), "%s/out2", d.dir);
	snprintf(err, sizeof(err), "%s/err", d.dir);
	snprintf(err2, sizeof(err2), "%s/err2", d.dir);
	total = concat(stream, files, N, junk, sizeof(junk));
	/* each message and the junk before it fit, the stream does not */
	snprintf(max, sizeof(max), "%" PRIu64, total / 2);

	for (int json = 0; json < 2; json++) {
		struct tu_ctl_how hf = {.out = out2, .err = err2};
		struct tu_ctl_how hs = {.in = stream, .out = out, .err = err};
		int rf, rs;

		rf = json ? run(&d, &hf, NULL, "inspect", "--json", stream,
		                NULL)
		          : run(&d, &hf, NULL, "inspect", stream, NULL);
		rs = json ? run(&d, &hs, NULL, "inspect", "--json", "-",
		                "--max-bytes", max, NULL)
		          : run(&d, &hs, NULL, "inspect", "-", "--max-bytes",
		                max, NULL);
		a = text(out);
		b = text(out2);
		cr_expect_eq(rs, rf, "%s", (a = text(err)));
		cr_expect_str_eq(a, b);
		free(a);
		free(b);
	}

	{
		struct tu_ctl_how hf = {.out = out2, .err = err2};
		struct tu_ctl_how hs = {.in = stream, .out = out, .err = err};
		int rf = run(&d, &hf, NULL, "load", stream, "--prefix", "f/",
		             NULL);
		int rs = run(&d, &hs, NULL, "load", "-", "--prefix", "s/",
		             "--max-bytes", max, NULL);

		a = text(err);
		b = text(err2);
		cr_assert_eq(rf, 0, "%s", b);
		cr_expect_eq(rs, 0, "%s", a);
		replace(b, stream, "-");
		cr_expect_str_eq(a, b);
		free(a);
		free(b);
		a = text(out);
		b = text(out2);
		replace(a, "s/", "x/");
		replace(b, "f/", "x/");
		/* the versions differ: the names, dtypes, shapes in order */
		unversion(a);
		unversion(b);
		cr_expect_str_eq(a, b);
		free(a);
		free(b);
	}
	cr_assert_eq(td_client_list(c, NULL, &list, &list_n, NULL), 0);
	for (size_t i = 0; i < list_n; i++) {
		struct td_tensor *f, *s;
		char sn[TD_NAME_MAX + 1];
		const void *fm, *sm;
		size_t fl, sl;

		if (strncmp(list[i].name, "f/", 2))
			continue;
		from_file++;
		snprintf(sn, sizeof(sn), "s/%s", list[i].name + 2);
		cr_assert_eq(td_client_get(c, list[i].name, &f, NULL), 0);
		cr_assert_eq(td_client_get(c, sn, &s, NULL), 0, "%s", sn);
		cr_expect_eq(td_tensor_dtype(f), td_tensor_dtype(s), "%s", sn);
		cr_expect_eq(td_tensor_ndim(f), td_tensor_ndim(s), "%s", sn);
		cr_expect_eq(td_tensor_bytes(f), td_tensor_bytes(s), "%s", sn);
		cr_expect(!memcmp(td_tensor_shape(f), td_tensor_shape(s),
		                  td_tensor_ndim(f) * sizeof(uint64_t)),
		          "%s", sn);
		cr_expect(!memcmp(td_tensor_plane_data(f, 0),
		                  td_tensor_plane_data(s, 0),
		                  td_tensor_bytes(f)),
		          "%s: bytes differ", sn);
		fm = td_tensor_meta(f, &fl);
		sm = td_tensor_meta(s, &sl);
		cr_expect(fl == sl && (!fl || !memcmp(fm, sm, fl)),
		          "%s: metadata differs", sn);
		td_tensor_release(f);
		td_tensor_release(s);
	}
	cr_expect_gt(from_file, 8, "%zu objects", from_file);
	td_entry_list_free(list, list_n);
	unlink(stream);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/*
 * Errors on stdin: a message whose hash does not match publishes none of
 * its objects and deletes what the messages before it published (the
 * file's rule, all or nothing: nothing of the file is published), with
 * the message's number and the frame named; a message larger than
 * --max-bytes is EFBIG naming --max-bytes, nothing left published; a
 * stream cut inside its last message loads the whole ones and says how
 * many bytes it skipped, as for the file. Each with a --max-bytes under
 * the stream's size (which refused the stream whole, EFBIG, whatever it
 * held).
 */
Test(tgm_stream, stdin_errors_are_the_files)
{
	struct tu_daemon d;
	struct td_client *c;
	char v[2][256], stream[160], out[160], err[160], max[32];
	const char *good[2];
	uint8_t *bad;
	size_t bl;
	uint64_t total;
	struct tu_ctl_how h;
	char *a;
	int rc;

	tu_daemon_start(&d, "error");
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	snprintf(stream, sizeof(stream), "%s/stream.tgm", d.dir);
	snprintf(out, sizeof(out), "%s/out", d.dir);
	snprintf(err, sizeof(err), "%s/err", d.dir);
	h = (struct tu_ctl_how){.in = stream, .out = out, .err = err};

	/* simple_f32, then simple_f32 with its data's hash broken */
	good[0] = vec(v[0], sizeof(v[0]), "simple_f32.tgm");
	good[1] = vec(v[1], sizeof(v[1]), "simple_f32.tgm");
	total = concat(stream, good, 2, NULL, 0);
	bad = tu_read_file(stream, &bl);
	cr_assert_eq(bl, 2 * 592);
	bad[592 + 416] ^= 0x40; /* the second message's first data byte */
	{
		FILE *f = fopen(stream, "wb");

		cr_assert_eq(fwrite(bad, 1, bl, f), bl);
		fclose(f);
	}
	free(bad);
	snprintf(max, sizeof(max), "%" PRIu64, total - 1);
	rc = run(&d, &h, NULL, "load", "-", "--prefix", "h/", "--max-bytes",
	         max, NULL);
	a = text(err);
	cr_expect_eq(rc, 1, "%s", a);
	cr_expect(strstr(a, "-: message 1: ") &&
	                  strstr(a, "hash mismatch"),
	          "%s", a);
	cr_expect(!strstr(a, "more than"), "%s", a);
	free(a);
	cr_expect_eq(under(c, "h/"), 0,
	             "a message before the bad one is left published");

	/* a message over --max-bytes: simple_f32 (592 bytes), then
	 * multi_object (one message of 1120) with 800 */
	good[1] = vec(v[1], sizeof(v[1]), "multi_object.tgm");
	concat(stream, good, 2, NULL, 0);
	rc = run(&d, &h, NULL, "load", "-", "--prefix", "m/", "--max-bytes",
	         "800", NULL);
	a = text(err);
	cr_expect_eq(rc, 1, "%s", a);
	cr_expect(strstr(a, "standard input: more than ") &&
	                  strstr(a, "--max-bytes") &&
	                  strstr(a, "deleted again"),
	          "%s", a);
	free(a);
	cr_expect_eq(under(c, "m/"), 0, "left published");

	/* cut inside the last message: the first loads, the cut is said */
	{
		uint8_t *b = tu_read_file(good[0], &bl);
		FILE *f = fopen(stream, "wb");

		cr_assert_eq(fwrite(b, 1, bl, f), bl);
		cr_assert_eq(fwrite(b, 1, 300, f), 300);
		fclose(f);
		free(b);
	}
	rc = run(&d, &h, NULL, "load", "-", "--prefix", "c/", "--max-bytes",
	         "800", NULL);
	a = text(err);
	cr_expect_eq(rc, 0, "%s", a);
	cr_expect(strstr(a, "-: 300 bytes outside any whole "
	                    "message skipped"),
	          "%s", a);
	free(a);
	cr_expect_eq(under(c, "c/"), 1);
	unlink(stream);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

#define CAP_N 16
#define CAP_BYTES ((uint64_t)8 << 20)

/*
 * save -o F.tgm past a uid's lease cap (--uid-limit leases=4) writes one
 * message per batch of 4 it holds, each written and released before the
 * next is leased: its peak stays under a quarter of the tensors' bytes
 * (past the cap it copied the tensors it held into memory, and kept the
 * copies until the end: 12 of 16 here, 96 MiB). The file loads back bit
 * for bit.
 */
Test(tgm_stream, save_past_the_lease_cap_holds_one_batch)
{
	static const char *const more[] = {"--socket-mode", "0666",
	                                   "--uid-limit", "leases=4", NULL};
	struct tu_daemon d;
	struct td_client *c;
	char dir[160], path[200], out[200], err[200], name[40];
	uint64_t total = CAP_N * CAP_BYTES, peak = 0;
	struct tu_ctl_how h;
	char *a;
	int rc;

	tu_daemon_start_args(&d, "error", more);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	snprintf(dir, sizeof(dir), "%s/home", d.dir);
	cr_assert_eq(mkdir(dir, 0755), 0);
	cr_assert_eq(chown(dir, NOBODY, NOBODY), 0);
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	for (unsigned i = 0; i < CAP_N; i++) {
		snprintf(name, sizeof(name), "m/%02u", i);
		publish(c, name, i, CAP_BYTES);
	}
	snprintf(path, sizeof(path), "%s/m.tgm", dir);
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(err, sizeof(err), "%s/err", dir);
	h = (struct tu_ctl_how){.out = out, .err = err, .uid = NOBODY};
	rc = run(&d, &h, &peak, "save", "-o", path, "m/", NULL);
	cr_assert_eq(rc, 0, "%s", (a = text(err)));
	a = text(out);
	cr_expect(strstr(a, ": 16 object(s) in 4 messages"), "%s", a);
	free(a);
	cr_log_info("save past the cap peaked at %" PRIu64 " KiB",
	            peak >> 10);
	cr_expect(TU_BOUNDED(peak, total / 4),
	             "save past the cap peaked at %" PRIu64 " MiB for %" PRIu64
	             " MiB of tensors",
	             peak >> 20, total >> 20);

	h.uid = 0;
	rc = run(&d, &h, NULL, "inspect", path, NULL);
	a = text(out);
	cr_expect_eq(rc, 0, "%s", a);
	cr_expect(strstr(a, "4 message(s)") && !strstr(a, "MISMATCH") &&
	                  !strstr(a, "skipped"),
	          "%s", a);
	free(a);
	rc = run(&d, &h, NULL, "load", path, "--prefix", "b/", NULL);
	cr_assert_eq(rc, 0, "%s", (a = text(err)));
	for (unsigned i = 0; i < CAP_N; i++) {
		snprintf(name, sizeof(name), "b/m_%02u", i);
		cr_expect(holds(c, name, i, CAP_BYTES), "%s: bytes differ",
		          name);
	}
	unlink(path);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/*
 * Folders a and b hold the same names, folders and file bytes (as far
 * down as they go): how many files, -1 (said) when they differ.
 */
static long same_tree(const char *a, const char *b)
{
	DIR *d = opendir(a);
	struct dirent *e;
	long n = 0, k = 0;

	cr_assert(d, "%s", a);
	while (n >= 0 && (e = readdir(d)) != NULL) {
		char pa[512], pb[512];
		struct stat sa, sb;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		k++;
		snprintf(pa, sizeof(pa), "%s/%s", a, e->d_name);
		snprintf(pb, sizeof(pb), "%s/%s", b, e->d_name);
		if (lstat(pa, &sa) < 0 || lstat(pb, &sb) < 0 ||
		    S_ISDIR(sa.st_mode) != S_ISDIR(sb.st_mode)) {
			cr_log_error("%s: not as %s", pb, pa);
			n = -1;
		} else if (S_ISDIR(sa.st_mode)) {
			long m = same_tree(pa, pb);

			n = m < 0 ? -1 : n + m;
		} else {
			size_t la, lb;
			uint8_t *ba = tu_read_file(pa, &la),
			        *bb = tu_read_file(pb, &lb);

			if (la != lb || memcmp(ba, bb, la)) {
				cr_log_error("%s: bytes differ from %s", pb,
				             pa);
				n = -1;
			} else {
				n++;
			}
			free(ba);
			free(bb);
		}
	}
	closedir(d);
	/* nothing in b that a lacks */
	d = opendir(b);
	cr_assert(d, "%s", b);
	while ((e = readdir(d)) != NULL)
		k -= strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	if (k) {
		cr_log_error("%s: %ld entries more than %s", b, -k, a);
		n = -1;
	}
	return n;
}

/* Whether path exists (as anything). */
static bool exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/*
 * zarr export --from - of a stream of MSG_N 32 MiB messages, its last
 * one, peaks under half the stream (it read the stream whole before the
 * scan began): tensorctl holds the message it exports; the hierarchy is
 * the one --from FILE writes, file for file, byte for byte, and what it
 * prints the same. A stream cut inside that message is the file's error
 * (no message 3: the file has 3), status 1, and no folder made.
 */
Test(tgm_stream, zarr_export_of_stdin_holds_one_message)
{
	struct tu_daemon d;
	struct td_client *c;
	char stream[160], out[160], out2[160], err[160], zs[160], zf[160],
	        cs[160], cf[160], msg[8];
	uint64_t total, peak = 0;
	char *a, *b;
	int rc, rf;

	tu_daemon_start(&d, "error");
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	snprintf(out, sizeof(out), "%s/out", d.dir);
	snprintf(out2, sizeof(out2), "%s/out2", d.dir);
	snprintf(err, sizeof(err), "%s/err", d.dir);
	snprintf(stream, sizeof(stream), "%s/stream.tgm", d.dir);
	snprintf(zs, sizeof(zs), "%s/zs", d.dir);
	snprintf(zf, sizeof(zf), "%s/zf", d.dir);
	snprintf(msg, sizeof(msg), "%u", MSG_N - 1);
	total = big_stream(&d, c, stream);

	{
		struct tu_ctl_how hs = {.in = stream, .out = out, .err = err};
		struct tu_ctl_how hf = {.out = out2, .err = err};

		rc = run(&d, &hs, &peak, "zarr", "export", zs, "--from", "-",
		         "--message", msg, NULL);
		cr_assert_eq(rc, 0, "%s", (a = text(err)));
		rc = run(&d, &hf, NULL, "zarr", "export", zf, "--from", stream,
		         "--message", msg, NULL);
		cr_assert_eq(rc, 0, "%s", (a = text(err)));
	}
	cr_log_info("zarr export --from - peaked at %" PRIu64 " KiB",
	            peak >> 10);
	cr_expect(TU_BOUNDED(peak, total / 2),
	          "zarr export --from - peaked at %" PRIu64 " MiB for a "
	          "%" PRIu64 " MiB stream of %u messages",
	          peak >> 20, total >> 20, MSG_N);
	/* zarr.json, the array's and its chunk */
	cr_expect_eq(same_tree(zf, zs), 3);
	a = text(out);
	b = text(out2);
	replace(a, zs, zf);
	cr_expect_str_eq(a, b);
	free(a);
	free(b);

	/* cut 1000 bytes before the end: inside the last message */
	cr_assert_eq(truncate(stream, (off_t)(total - 1000)), 0);
	snprintf(cs, sizeof(cs), "%s/cs", d.dir);
	snprintf(cf, sizeof(cf), "%s/cf", d.dir);
	{
		struct tu_ctl_how hs = {.in = stream, .out = out, .err = err};
		struct tu_ctl_how hf = {.out = out2, .err = out2};

		rc = run(&d, &hs, NULL, "zarr", "export", cs, "--from", "-",
		         "--message", msg, NULL);
		rf = run(&d, &hf, NULL, "zarr", "export", cf, "--from", stream,
		         "--message", msg, NULL);
		a = text(err);
		b = text(out2);
	}
	cr_expect_eq(rf, 1, "%s", b);
	cr_expect_eq(rc, rf, "%s", a);
	cr_expect(strstr(a, "-: no message 3 (the file has 3)"), "%s", a);
	replace(b, stream, "-");
	cr_expect_str_eq(a, b);
	free(a);
	free(b);
	cr_expect(!exists(cs), "%s made", cs);
	cr_expect(!exists(cf), "%s made", cf);
	unlink(stream);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/* A .npy file at path: u64 of shape (count,), its data data bytes of
 * zeros (a hole: written in no time, read as zeros). */
static void npy_file(const char *path, uint64_t count, uint64_t data)
{
	char dict[128];
	uint8_t pre[10] = "\x93NUMPY\x01\x00";
	int n = snprintf(dict, sizeof(dict),
	                 "{'descr': '<u8', 'fortran_order': False, "
	                 "'shape': (%" PRIu64 ",), }",
	                 count);
	FILE *f = fopen(path, "wb");

	/* padded with spaces and a '\n' to a multiple of 64 in all */
	while ((10 + n + 1) % 64)
		dict[n++] = ' ';
	dict[n++] = '\n';
	pre[8] = (uint8_t)n;
	pre[9] = (uint8_t)(n >> 8);
	cr_assert(f);
	cr_assert_eq(fwrite(pre, 1, 10, f), 10);
	cr_assert_eq(fwrite(dict, 1, (size_t)n, f), (size_t)n);
	cr_assert_eq(fclose(f), 0);
	cr_assert_eq(truncate(path, (off_t)(10 + n + data)), 0);
}

/*
 * inspect - of a 128 MiB .npy reads its header and counts the rest: it
 * peaks under half the input (it read it whole, up to --max-bytes, which
 * refused one past it: EFBIG; none now, nothing is held); what it prints
 * is what inspect FILE prints, text and JSON. One cut short (8 bytes of data missing) is the
 * file's "short" status 1, and so is a header cut short.
 */
Test(tgm_stream, inspect_of_npy_stdin_reads_its_header)
{
	struct tu_daemon d;
	char npy[160], out[160], out2[160], err[160];
	uint64_t count = ((uint64_t)128 << 20) / 8, peak = 0;
	char *a, *b;
	int rc, rf;

	tu_daemon_start(&d, "error");
	snprintf(npy, sizeof(npy), "%s/big.npy", d.dir);
	snprintf(out, sizeof(out), "%s/out", d.dir);
	snprintf(out2, sizeof(out2), "%s/out2", d.dir);
	snprintf(err, sizeof(err), "%s/err", d.dir);
	for (int cut = 0; cut < 3; cut++) {
		struct tu_ctl_how hs = {.in = npy, .out = out, .err = out};
		struct tu_ctl_how hf = {.out = out2, .err = out2};

		if (cut < 2)
			npy_file(npy, count, count * 8 - (cut ? 8 : 0));
		else /* the header's first 20 bytes */
			cr_assert_eq(truncate(npy, 20), 0);
		for (int json = 0; json < 2; json++) {
			/* JSON: under a --max-bytes the data is over */
			rc = json ? run(&d, &hs, &peak, "inspect", "--json",
			                "--max-bytes", "64M", "-", NULL)
			          : run(&d, &hs, &peak, "inspect", "-", NULL);
			rf = json ? run(&d, &hf, NULL, "inspect", "--json", npy,
			                NULL)
			          : run(&d, &hf, NULL, "inspect", npy, NULL);
			a = text(out);
			b = text(out2);
			cr_expect_eq(rf, cut ? 1 : 0, "%s", b);
			cr_expect_eq(rc, rf, "%s", a);
			replace(b, npy, "-");
			cr_expect_str_eq(a, b);
			if (!cut && !json)
				cr_expect(strstr(a, ": ok\n"), "%s", a);
			if (cut == 1 && !json)
				cr_expect(strstr(a, "short: 134217720 bytes "
				                    "follow the header"),
				          "%s", a);
			free(a);
			free(b);
			cr_log_info("inspect - of a .npy peaked at %" PRIu64
			            " KiB",
			            peak >> 10);
			cr_expect(TU_BOUNDED(peak, count * 4),
			          "inspect - of a .npy peaked at %" PRIu64
			          " MiB for %" PRIu64 " MiB",
			          peak >> 20, (count * 8) >> 20);
		}
	}
	unlink(npy);
	tu_daemon_stop(&d, false);
}

/* A 64x48 NV12 image (two planes: no single-array form) as name. */
static void publish_nv12(struct td_client *c, const char *name)
{
	struct td_error e = {0};
	struct td_alloc *al;
	uint64_t size = 64 * 48 * 3 / 2, shape[] = {48, 64};
	struct td_plane planes[2] = {{0, 0, 64, 64 * 48},
	                             {0, 64 * 48, 64, 64 * 24}};
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
	                       .ndim = 2, .shape = shape, .format = "NV12",
	                       .plane_count = 2, .planes = planes};

	cr_assert_eq(td_client_alloc(c, 1, &size, &al, &e), 0, "%s",
	             e.reason);
	memset(td_alloc_data(al, 0), 7, size);
	cr_assert_eq(td_client_publish_alloc(c, al, &p, NULL, &e), 0, "%s",
	             e.reason);
}

/* How many entries of folder dir start with prefix. */
static int entries(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	cr_assert(d, "%s", dir);
	while ((e = readdir(d)) != NULL)
		n += !strncmp(e->d_name, prefix, strlen(prefix));
	closedir(d);
	return n;
}

/*
 * zarr export past a uid's lease cap (--uid-limit leases=4) writes the
 * arrays it holds into its new folder, a batch of 4 at a time, and
 * releases them before it leases the next: its peak stays under half the
 * tensors' bytes (it copied those it held into memory, and kept the
 * copies until the end: 12 of 16 here). DIR is the one root's export
 * (no cap: every tensor held at once) writes, byte for byte, also where
 * a name of the first batch and one of the last make the same node name
 * (b/00 and b_00: b_00 and b_00_1). A tensor it refuses after batches
 * were written fails the export: exit 1, no DIR, no new folder left.
 */
Test(tgm_stream, zarr_export_past_the_lease_cap_holds_one_batch)
{
	static const char *const more[] = {"--socket-mode", "0666",
	                                   "--uid-limit", "leases=4", NULL};
	struct tu_daemon d;
	struct td_client *c;
	char home[160], capped[200], root[200], bad[200], out[200], out2[200],
	        err[200], name[40];
	uint64_t total = CAP_N * CAP_BYTES, peak = 0;
	struct tu_ctl_how h;
	char *a, *b;
	int rc;

	tu_daemon_start_args(&d, "error", more);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	snprintf(home, sizeof(home), "%s/home", d.dir);
	cr_assert_eq(mkdir(home, 0755), 0);
	cr_assert_eq(chown(home, NOBODY, NOBODY), 0);
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	for (unsigned i = 0; i < CAP_N; i++) {
		snprintf(name, sizeof(name), "b/%02u", i);
		publish(c, name, i, CAP_BYTES);
	}
	publish(c, "b_00", CAP_N, 4096);
	publish_nv12(c, "z/nv12");
	snprintf(capped, sizeof(capped), "%s/capped", home);
	snprintf(root, sizeof(root), "%s/root", d.dir);
	snprintf(bad, sizeof(bad), "%s/bad", home);
	snprintf(out, sizeof(out), "%s/out", home);
	snprintf(out2, sizeof(out2), "%s/out2", home);
	snprintf(err, sizeof(err), "%s/err", home);
	h = (struct tu_ctl_how){.out = out, .err = err, .uid = NOBODY};

	/* the NV12 image last: refused once 4 batches were written */
	rc = run(&d, &h, NULL, "zarr", "export", bad, NULL);
	a = text(err);
	cr_expect_eq(rc, 1, "%s", a);
	cr_expect(strstr(a, "z/nv12: cannot be exported"), "%s", a);
	free(a);
	cr_expect(!exists(bad), "%s made", bad);
	cr_expect_eq(entries(home, ".tensorctl-"), 0,
	             "a new folder left in %s", home);
	cr_assert_eq(td_client_delete(c, "z/nv12", NULL, NULL), 0);

	rc = run(&d, &h, &peak, "zarr", "export", capped, NULL);
	cr_assert_eq(rc, 0, "%s", (a = text(err)));
	cr_log_info("zarr export past the cap peaked at %" PRIu64 " KiB",
	            peak >> 10);
	cr_expect(TU_BOUNDED(peak, total / 2),
	          "zarr export past the cap peaked at %" PRIu64 " MiB for "
	          "%" PRIu64 " MiB of tensors",
	          peak >> 20, total >> 20);
	h = (struct tu_ctl_how){.out = out2, .err = err};
	rc = run(&d, &h, NULL, "zarr", "export", root, NULL);
	cr_assert_eq(rc, 0, "%s", (a = text(err)));
	/* the root group, and a zarr.json and a chunk per array */
	cr_expect_eq(same_tree(root, capped), 1 + 2 * (CAP_N + 1));
	{
		char p[260];

		snprintf(p, sizeof(p), "%s/b_00_1/zarr.json", capped);
		cr_expect(exists(p), "%s missing", p);
	}
	a = text(out);
	b = text(out2);
	replace(a, capped, root);
	cr_expect_str_eq(a, b);
	free(a);
	free(b);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}
