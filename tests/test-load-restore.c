/* SPDX-License-Identifier: MIT */
/*
 * A failed load (tensorctl load of a .tgm file, of a stream, of a Hurray
 * file; zarr import) puts back what it replaced (docs/tensorctl.md, "All
 * or nothing"): the same bytes, dtype, shape and metadata, as a new
 * version, never over a version someone else published meanwhile; a
 * version it cannot keep (a uid's leases limit) it does not replace.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tensord/tensord.h"
#include "testutil.h"
#include "tgm-desc.h"

#define NOBODY 65534

static const uint8_t orig[6] = {9, 8, 7, 6, 5, 4};
static const char orig_meta[] = "{\"k\":\"orig\"}";

/* x as u16[3] with orig's bytes and metadata, by client c: its version */
static uint64_t put_x(struct td_client *c, const char *name)
{
	uint64_t shape[1] = {3}, v = 0;
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U16,
			       .ndim = 1, .shape = shape,
			       .meta = orig_meta,
			       .meta_len = sizeof(orig_meta) - 1};

	cr_assert_eq(td_client_put(c, &p, orig, sizeof(orig), &v, NULL), 0);
	return v;
}

/* name holds exactly what put_x() published, at a version after v0 */
static void expect_orig(struct td_client *c, const char *name, uint64_t v0)
{
	struct td_tensor *t = NULL;
	const void *m;
	size_t ml;

	cr_assert_eq(td_client_get(c, name, &t, NULL), 0, "%s is gone", name);
	cr_expect_gt(td_tensor_version(t), v0, "put back as a new version");
	cr_expect_eq(td_tensor_dtype(t), TD_TENSOR_U16);
	cr_expect_eq(td_tensor_ndim(t), 1);
	cr_expect_eq(td_tensor_shape(t)[0], 3);
	cr_expect_eq(td_tensor_bytes(t), sizeof(orig));
	cr_expect(!memcmp(td_tensor_plane_data(t, 0), orig, sizeof(orig)),
		  "the bytes it had");
	m = td_tensor_meta(t, &ml);
	cr_expect(ml == sizeof(orig_meta) - 1 && !memcmp(m, orig_meta, ml),
		  "the metadata it had");
	td_tensor_release(t);
}

static uint64_t version_of(struct td_client *c, const char *name)
{
	struct td_entry e;
	uint64_t v = 0;

	if (td_client_stat(c, name, &e, NULL) == 0) {
		v = e.version;
		td_entry_fini(&e);
	}
	return v;
}

/* One .tgm message of u8[4] objects named names[0..n). */
static uint8_t *tgm_message(const char *const *names, size_t n, size_t *len)
{
	static const uint8_t data[4] = {1, 2, 3, 4};
	uint64_t shape[1] = {4};
	struct td_tgm_enc_object ob[4];
	uint8_t *msg;

	for (size_t i = 0; i < n; i++)
		ob[i] = (struct td_tgm_enc_object){
			.dtype = TD_TGM_UINT8, .ndim = 1, .shape = shape,
			.data = data, .data_len = 4, .name = names[i]};
	cr_assert_eq(td_tgm_message_encode(ob, n, "t", &msg, len, NULL), 0);
	return msg;
}

static bool starts_daemon(const char *out)
{
	static const char want[] = "{\"error\":{\"kind\":\"daemon\",";

	return !strncmp(out, want, sizeof(want) - 1);
}

static void write_all(int fd, const void *b, size_t n)
{
	cr_assert_eq(write(fd, b, n), (ssize_t)n);
}

static char *text(const char *path)
{
	char *s = tu_slurp(path);

	cr_assert(s, "%s", path);
	return s;
}

static int ctl(struct tu_daemon *d, const char *in, char **out, char **err,
	       const char *a, const char *b, const char *c, const char *e)
{
	char o[160], r[160];
	struct tu_ctl_how h;
	int rc;

	snprintf(o, sizeof(o), "%s/out", d->dir);
	snprintf(r, sizeof(r), "%s/err", d->dir);
	h = (struct tu_ctl_how){.in = in, .out = o, .err = r};
	rc = tu_ctl_run(d->sock, h, NULL, a, b, c, e, NULL);
	*out = text(o);
	*err = text(r);
	return rc;
}

/* x, then a ring's name: the daemon refuses the second, and x, which the
 * load had replaced, is put back. A file, then the same as a stream. */
Test(load_restore, a_refused_load_puts_back_what_it_replaced)
{
	static const char *const names[] = {"x", "y", "busy"};
	uint64_t shape[1] = {4}, v0;
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
				  .shape = shape};
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *ring;
	char path[160], *out, *err;
	uint8_t *msg;
	size_t len;
	int fd;

	tu_daemon_start(&d, "error");
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	cr_assert_eq(td_ring_create(c, "busy", &rd, &ring, NULL), 0);
	v0 = put_x(c, "x");
	snprintf(path, sizeof(path), "%s/three.tgm", d.dir);
	msg = tgm_message(names, 3, &len);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	write_all(fd, msg, len);
	close(fd);
	free(msg);

	cr_expect_eq(ctl(&d, NULL, &out, &err, "load", path, NULL, NULL), 1);
	cr_expect(strstr(err, "2 of 3 object(s) published before this "
			      "failure; 1 deleted again"),
		  "%s", err);
	cr_expect(strstr(err, "1 replaced version(s) put back"), "%s", err);
	/* the ring's refusal, said as the daemon's */
	cr_expect(strstr(err, "tensorctl: busy: ") &&
			  !strstr(err, "not replaced"),
		  "%s", err);
	free(out);
	free(err);
	expect_orig(c, "x", v0);
	cr_expect_eq(version_of(c, "y"), 0, "y left behind");

	/* --json: the error says what was put back */
	v0 = version_of(c, "x");
	cr_expect_eq(ctl(&d, NULL, &out, &err, "load", path, "--json", NULL),
		     1);
	cr_expect(starts_daemon(out) &&
			  strstr(out, "\"restored\":[{\"name\":\"x\","
				      "\"version\":") &&
			  strstr(out, "\"not_restored\":[]"),
		  "%s", out);
	free(out);
	free(err);
	expect_orig(c, "x", v0);

	/* a stream, `load -`: the same */
	v0 = version_of(c, "x");
	cr_expect_eq(ctl(&d, path, &out, &err, "load", "-", NULL, NULL), 1);
	cr_expect(strstr(err, "1 replaced version(s) put back"), "%s", err);
	free(out);
	free(err);
	expect_orig(c, "x", v0);

	/* --partial keeps the new x: nothing to put back */
	cr_expect_eq(ctl(&d, NULL, &out, &err, "load", path, "--partial",
			 NULL),
		     1);
	cr_expect(!strstr(err, "put back"), "%s", err);
	free(out);
	free(err);
	{
		struct td_tensor *t;

		cr_assert_eq(td_client_get(c, "x", &t, NULL), 0);
		cr_expect_eq(td_tensor_dtype(t), TD_TENSOR_U8);
		td_tensor_release(t);
	}
	td_ring_close(ring);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* Hurray (load FILE.hrry) and zarr import: x, then a ring's name. */
Test(load_restore, hurray_load_and_zarr_import_put_back_too)
{
	uint64_t shape[1] = {4}, v0;
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
				  .shape = shape};
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *ring;
	char hrry[160], zdir[160], *out, *err;


	tu_daemon_start(&d, "error");
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	snprintf(hrry, sizeof(hrry), "%s/b.hrry", d.dir);
	snprintf(zdir, sizeof(zdir), "%s/z", d.dir);
	/* a backup of x and zz, then zz becomes a ring, x new bytes */
	cr_assert_eq(td_client_put(c,
				   &(struct td_publish){.name = "x",
							.dtype = TD_TENSOR_U8,
							.ndim = 1,
							.shape = shape},
				   "abcd", 4, NULL, NULL),
		     0);
	cr_assert_eq(td_client_put(c,
				   &(struct td_publish){.name = "zz",
							.dtype = TD_TENSOR_U8,
							.ndim = 1,
							.shape = shape},
				   "efgh", 4, NULL, NULL),
		     0);
	{
		char *const save[] = {getenv("TD_TENSORCTL"), "--socket",
				      d.sock, "save", "-o", hrry, "x", "zz",
				      NULL};
		char *const zarr[] = {getenv("TD_TENSORCTL"), "--socket",
				      d.sock, "zarr", "export", zdir, "x",
				      "zz", NULL};
		char *o;

		cr_assert_eq(tu_run_capture_all(save, &o), 0, "%s", o);
		free(o);
		cr_assert_eq(tu_run_capture_all(zarr, &o), 0, "%s", o);
		free(o);
	}
	cr_assert_eq(td_client_delete(c, "zz", NULL, NULL), 0);
	cr_assert_eq(td_ring_create(c, "zz", &rd, &ring, NULL), 0);
	v0 = put_x(c, "x");

	cr_expect_eq(ctl(&d, NULL, &out, &err, "load", hrry, NULL, NULL), 1);
	cr_expect(strstr(err, "1 replaced version(s) put back"), "%s", err);
	free(out);
	free(err);
	expect_orig(c, "x", v0);

	v0 = version_of(c, "x");
	cr_expect_eq(ctl(&d, NULL, &out, &err, "zarr", "import", zdir, NULL),
		     1);
	cr_expect(strstr(err, "1 replaced version(s) put back"), "%s", err);
	free(out);
	free(err);
	expect_orig(c, "x", v0);
	td_ring_close(ring);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * `load -` from a FIFO: message 1 replaces x and w; then another client
 * publishes x; then message 2 fails (a ring's name). The roll back
 * leaves the other client's x alone, and says so, and puts w back.
 */
Test(load_restore, a_version_published_meanwhile_is_left_alone)
{
	static const char *const m1[] = {"x", "w"}, *const m2[] = {"busy"};
	uint64_t shape[1] = {4}, v0, vw, vl, vo;
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
				  .shape = shape};
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *ring;
	char fifo[160], o[160], r[160], *err;
	uint8_t *msg;
	size_t len;
	pid_t pid;
	int fd, st;

	tu_daemon_start(&d, "error");
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	cr_assert_eq(td_ring_create(c, "busy", &rd, &ring, NULL), 0);
	v0 = put_x(c, "x");
	vw = put_x(c, "w");
	snprintf(fifo, sizeof(fifo), "%s/fifo", d.dir);
	snprintf(o, sizeof(o), "%s/out", d.dir);
	snprintf(r, sizeof(r), "%s/err", d.dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	pid = tu_fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		struct tu_ctl_how h = {.in = fifo, .out = o, .err = r};

		_exit(tu_ctl_run(d.sock, h, NULL, "load", "-", NULL));
	}
	fd = open(fifo, O_WRONLY | O_CLOEXEC);
	cr_assert(fd >= 0);
	msg = tgm_message(m1, 2, &len);
	write_all(fd, msg, len);
	free(msg);
	/* the load's w, published after its x (a hang guard, not a
	 * timing) */
	for (int i = 0; (vl = version_of(c, "w")) == vw && i < 2000; i++)
		nanosleep(&(struct timespec){0, 10000000}, NULL);
	cr_assert_neq(vl, vw, "the load never published w");
	cr_assert_neq(version_of(c, "x"), v0);
	vo = put_x(c, "x"); /* someone else's, the same bytes */
	msg = tgm_message(m2, 1, &len);
	write_all(fd, msg, len);
	free(msg);
	close(fd);
	st = tu_wait_child(pid, 30, "load -");
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d", st);
	err = text(r);
	cr_expect(strstr(err, "not rolled back (replaced since)"), "%s", err);
	cr_expect(strstr(err, "1 replaced version(s) put back"), "%s", err);
	free(err);
	cr_expect_eq(version_of(c, "x"), vo, "the other client's x clobbered");
	expect_orig(c, "w", vl);
	td_ring_close(ring);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * Past a uid's leases limit (--uid-limit leases=2) a load cannot keep
 * what it would replace: it replaces a and b (holding their versions),
 * then refuses to replace c, and puts a and b back; c never changed.
 */
Test(load_restore, past_the_lease_cap_it_does_not_replace)
{
	static const char *const more[] = {"--socket-mode", "0666",
					   "--uid-limit", "leases=2", NULL};
	static const char *const names[] = {"a", "b", "c"};
	struct tu_daemon d;
	struct td_client *c;
	char dir[160], path[200], o[200], r[200], *err;
	uint64_t v[3];
	struct tu_ctl_how h;
	uint8_t *msg;
	size_t len;
	int fd, rc;

	tu_daemon_start_args(&d, "error", more);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	snprintf(dir, sizeof(dir), "%s/home", d.dir);
	cr_assert_eq(mkdir(dir, 0755), 0);
	cr_assert_eq(chown(dir, NOBODY, NOBODY), 0);
	snprintf(path, sizeof(path), "%s/abc.tgm", dir);
	snprintf(o, sizeof(o), "%s/out", dir);
	snprintf(r, sizeof(r), "%s/err", dir);
	msg = tgm_message(names, 3, &len);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	write_all(fd, msg, len);
	close(fd);
	free(msg);
	h = (struct tu_ctl_how){.out = o, .err = r, .uid = NOBODY};
	/* nobody's own a, b, c first (its load of the same file) */
	rc = tu_ctl_run(d.sock, h, NULL, "load", path, NULL);
	cr_assert_eq(rc, 0, "%s", (err = text(r)));
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	for (int i = 0; i < 3; i++)
		v[i] = version_of(c, names[i]);

	rc = tu_ctl_run(d.sock, h, NULL, "load", path, NULL);
	err = text(r);
	cr_expect_eq(rc, 1, "%s", err);
	cr_expect(strstr(err, "c: not replaced: its version ") &&
			  strstr(err, "could not be kept to put back"),
		  "%s", err);
	cr_expect(strstr(err, "2 replaced version(s) put back"), "%s", err);
	free(err);
	for (int i = 0; i < 2; i++)
		cr_expect_gt(version_of(c, names[i]), v[i], "%s", names[i]);
	cr_expect_eq(version_of(c, "c"), v[2], "c was replaced");
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* A .tgm file at path of u8 objects names[i] of lens[i] bytes, each
 * byte fill[i]. */
static void tgm_file(const char *path, const char *const *names,
		     const size_t *lens, const uint8_t *fill, size_t n)
{
	struct td_tgm_enc_object ob[4];
	uint64_t shape[4];
	uint8_t *data[4], *msg;
	size_t len;
	int fd;

	for (size_t i = 0; i < n; i++) {
		shape[i] = lens[i];
		data[i] = malloc(lens[i]);
		cr_assert(data[i]);
		memset(data[i], fill[i], lens[i]);
		ob[i] = (struct td_tgm_enc_object){
			.dtype = TD_TGM_UINT8, .ndim = 1, .shape = &shape[i],
			.data = data[i], .data_len = lens[i],
			.name = names[i]};
	}
	cr_assert_eq(td_tgm_message_encode(ob, n, "t", &msg, &len, NULL), 0);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	cr_assert(fd >= 0);
	write_all(fd, msg, len);
	close(fd);
	free(msg);
	for (size_t i = 0; i < n; i++)
		free(data[i]);
}

/*
 * The quota refuses a later object (--uid-max-bytes 3000): x, which the
 * load replaced, comes back with its bytes, although the quota cannot
 * hold the copy beside the load's x (the load's goes first).
 */
Test(load_restore, a_quota_refusal_puts_back_what_it_replaced)
{
	static const char *const more[] = {"--socket-mode", "0666",
					   "--uid-max-bytes", "3000", NULL};
	static const char *const n1[] = {"x"}, *const n2[] = {"x", "big"};
	struct tu_daemon d;
	struct td_client *c;
	struct td_tensor *t;
	char dir[160], p1[200], p2[200], o[200], r[200], *err;
	uint8_t want[1200];
	struct tu_ctl_how h;
	uint64_t v0;
	int rc;

	tu_daemon_start_args(&d, "error", more);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	snprintf(dir, sizeof(dir), "%s/home", d.dir);
	cr_assert_eq(mkdir(dir, 0755), 0);
	cr_assert_eq(chown(dir, NOBODY, NOBODY), 0);
	snprintf(p1, sizeof(p1), "%s/x.tgm", dir);
	snprintf(p2, sizeof(p2), "%s/xbig.tgm", dir);
	snprintf(o, sizeof(o), "%s/out", dir);
	snprintf(r, sizeof(r), "%s/err", dir);
	tgm_file(p1, n1, (size_t[]){1200}, (uint8_t[]){0xa5}, 1);
	tgm_file(p2, n2, (size_t[]){1200, 4000}, (uint8_t[]){0x5a, 1}, 2);
	h = (struct tu_ctl_how){.out = o, .err = r, .uid = NOBODY};
	rc = tu_ctl_run(d.sock, h, NULL, "load", p1, NULL);
	cr_assert_eq(rc, 0, "%s", (err = text(r)));
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	v0 = version_of(c, "x");

	rc = tu_ctl_run(d.sock, h, NULL, "load", p2, NULL);
	err = text(r);
	cr_expect_eq(rc, 1, "%s", err);
	cr_expect(strstr(err, "1 replaced version(s) put back"), "%s", err);
	free(err);
	cr_assert_eq(td_client_get(c, "x", &t, NULL), 0, "x is gone");
	cr_expect_gt(td_tensor_version(t), v0);
	memset(want, 0xa5, sizeof(want));
	cr_expect_eq(td_tensor_bytes(t), sizeof(want));
	cr_expect(!memcmp(td_tensor_plane_data(t, 0), want, sizeof(want)),
		  "x has not the bytes it had");
	td_tensor_release(t);
	cr_expect_eq(version_of(c, "big"), 0);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/*
 * Ctrl-C after the load's first publish (the raise-before-open shim's
 * TD_RAISE_AFTER_PUBLISH): the roll back puts x back before tensorctl
 * dies of the signal.
 */
Test(load_restore, sigint_puts_back_what_it_replaced)
{
	static const char *const names[] = {"x", "y"};
	struct tu_daemon d;
	struct td_client *c;
	char path[160], spec[32], *out, *err;
	uint64_t v0;
	int rc;

	tu_daemon_start(&d, "error");
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	v0 = put_x(c, "x");
	snprintf(path, sizeof(path), "%s/xy.tgm", d.dir);
	tgm_file(path, names, (size_t[]){8, 8}, (uint8_t[]){1, 2}, 2);
	snprintf(spec, sizeof(spec), "%d:1", SIGINT);
	tu_shim_on("TD_RAISE_AFTER_PUBLISH", spec);
	rc = ctl(&d, NULL, &out, &err, "load", path, NULL, NULL);
	tu_shim_off("TD_RAISE_AFTER_PUBLISH");
	cr_expect_eq(rc, 128 + SIGINT, "exit %d: %s", rc, err);
	cr_expect(strstr(err, "interrupted by signal 2") &&
			  strstr(err, "1 replaced version(s) put back"),
		  "%s", err);
	free(out);
	free(err);
	expect_orig(c, "x", v0);
	cr_expect_eq(version_of(c, "y"), 0);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}
