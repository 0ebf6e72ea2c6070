/* SPDX-License-Identifier: MIT */
/*
 * Snapshots (tensord --snapshot, docs/snapshot.md): a restart restores
 * the same bytes, versions, flags and metadata; the file is a Hurray file
 * any reader opens; a SIGKILL at every step of a save leaves a whole
 * snapshot; a corrupt one is moved aside and the daemon starts empty; a
 * tensor that fails the PUBLISH checks is skipped alone; both file I/O
 * engines (TENSORD_IO=uring|sync) and the fallback when io_uring is
 * forbidden. Small tensors (MiB); the GiB figures are bench/'s.
 *
 * No wall-clock thresholds: waits are polls with a generous bound.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hrry.h" /* td_hrry_crc32c */
#include "tensord/hrry.h"
#include "tensord/tensord.h"
#include "testclient.h"
#include "testutil.h"

TestSuite(snapshot, .timeout = TU_TEST_TIMEOUT_S);

#define WAIT_MS 20000

struct snapdir {
	char dir[64];
	char file[128];
	char log[128];
};

static void snapdir_make(struct snapdir *s)
{
	snprintf(s->dir, sizeof(s->dir), "/tmp/td-snap-XXXXXX");
	cr_assert_not_null(tu_mkdtemp(s->dir));
	snprintf(s->file, sizeof(s->file), "%s/snap.hrry", s->dir);
	snprintf(s->log, sizeof(s->log), "%s/log", s->dir);
}

static void snapdir_rm(struct snapdir *s)
{
	DIR *d = opendir(s->dir);
	struct dirent *e;
	char p[400];

	cr_assert_not_null(d);
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", s->dir, e->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(s->dir);
}

/* A file in the folder whose name starts with prefix (NULL: none). */
static bool dir_has(const struct snapdir *s, const char *prefix)
{
	DIR *d = opendir(s->dir);
	struct dirent *e;
	bool found = false;

	cr_assert_not_null(d);
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, prefix, strlen(prefix)))
			found = true;
	closedir(d);
	return found;
}

static bool log_has(const struct snapdir *s, const char *text)
{
	char *l = tu_slurp(s->log);
	bool r = strstr(l, text) != NULL;

	free(l);
	return r;
}

static void start(struct tu_daemon *d, struct snapdir *s, const char *io,
		  const char *interval)
{
	const char *extra[] = {"--snapshot", s->file, "--snapshot-interval",
			       interval, NULL};

	cr_assert_eq(setenv("TENSORD_IO", io, 1), 0);
	tu_daemon_start_log(d, "info", extra, s->log, NULL);
}

static struct td_client *conn(const struct tu_daemon *d)
{
	struct td_client *c = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_connect(d->sock, &c, &e), 0, "%s", e.reason);
	return c;
}

/* The bytes of (name, version): any restored tensor can be checked. */
static uint8_t byte_of(const char *name, uint64_t version, size_t i)
{
	uint8_t h = 0;

	for (const char *p = name; *p; p++)
		h = (uint8_t)(h * 31 + (uint8_t)*p);
	return (uint8_t)(h + version * 13 + i * 7);
}

struct tensor {
	const char *name;
	uint32_t dtype;
	uint32_t ndim;
	uint64_t shape[2];
	size_t len;
	uint32_t flags;
	const char *meta;
	bool fence;
	uint64_t version; /* filled by put */
};

/* A dense 1-D (s1 == 0) or 2-D tensor of len bytes, no flags or meta. */
static struct tensor mk(const char *name, uint32_t dtype, uint64_t s0,
			uint64_t s1, size_t len)
{
	struct tensor t = {.name = name,
			   .dtype = dtype,
			   .ndim = s1 ? 2 : 1,
			   .shape = {s0, s1},
			   .len = len};

	return t;
}

/*
 * Publish t from a memfd of ours whose bytes are those of its next
 * version (the daemon's counter, known from the previous reply: next is
 * passed in), so byte_of() holds for it.
 */
static void put(struct td_client *c, struct tensor *t, uint64_t next)
{
	int fd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int ev = t->fence ? eventfd(1, EFD_CLOEXEC) : -1;
	uint8_t *b = malloc(t->len ? t->len : 1);
	struct td_publish p = {
		.name = t->name,
		.flags = t->flags | (t->fence ? TD_PUBLISH_FENCE : 0),
		.dtype = t->dtype,
		.ndim = t->ndim,
		.shape = t->shape,
		.fd_count = 1,
		.fds = &fd,
		.fence_fd = ev,
		.meta = t->meta,
		.meta_len = t->meta ? strlen(t->meta) : 0,
	};
	struct td_error e = {0};

	cr_assert_geq(fd, 0);
	for (size_t i = 0; i < t->len; i++)
		b[i] = byte_of(t->name, next, i);
	cr_assert_eq(write(fd, b, t->len), (ssize_t)t->len);
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	cr_assert_eq(td_client_publish(c, &p, &t->version, &e), 0, "%s: %s",
		     t->name, e.reason);
	cr_assert_eq(t->version, next, "%s: version %llu, expected %llu",
		     t->name, (unsigned long long)t->version,
		     (unsigned long long)next);
	free(b);
	close(fd);
	if (ev >= 0)
		close(ev);
}

/* What GET returns for t: its bytes, version, dtype, shape, meta, flags. */
static void check(struct td_client *c, const struct tensor *t)
{
	struct td_tensor *x;
	struct td_error e = {0};
	const uint8_t *b;

	cr_assert_eq(td_client_get(c, t->name, &x, &e), 0, "%s: %s", t->name,
		     e.reason);
	cr_assert_eq(td_tensor_version(x), t->version, "%s", t->name);
	cr_assert_eq(td_tensor_dtype(x), t->dtype, "%s", t->name);
	cr_assert_eq(td_tensor_ndim(x), t->ndim, "%s", t->name);
	for (uint32_t k = 0; k < t->ndim; k++)
		cr_assert_eq(td_tensor_shape(x)[k], t->shape[k]);
	cr_assert_eq(td_tensor_bytes(x), t->len, "%s", t->name);
	b = td_tensor_plane_data(x, 0);
	for (size_t i = 0; i < t->len; i++)
		cr_assert_eq(b[i], byte_of(t->name, t->version, i),
			     "%s byte %zu", t->name, i);
	tc_check_rest(c, x, t->name, t->meta, t->fence, t->flags, WAIT_MS);
}

/* A daemon started again on s (sync, a save every 30 s) has t back as
 * check() sees it; then it stops. */
static void restart_holds(struct tu_daemon *d, struct snapdir *s,
			  const struct tensor *t)
{
	struct td_client *c;

	start(d, s, "sync", "30");
	c = conn(d);
	check(c, t);
	td_client_close(c);
	tu_daemon_stop(d, true);
}

static size_t count(struct td_client *c)
{
	struct td_entry *list;
	struct td_error e = {0};
	size_t n;

	cr_assert_eq(td_client_list(c, "", &list, &n, &e), 0, "%s", e.reason);
	td_entry_list_free(list, n);
	return n;
}

/* The version the daemon hands out next (a throw-away put, deleted). */
static uint64_t next_version(struct td_client *c)
{
	static const uint64_t shape = 1;
	struct td_publish p = {.name = "probe",
			       .dtype = TD_TENSOR_U8,
			       .ndim = 1,
			       .shape = &shape};
	struct td_error e = {0};
	uint8_t b = 0;
	uint64_t v;

	cr_assert_eq(td_client_put(c, &p, &b, 1, &v, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_delete(c, p.name, NULL, &e), 0, "%s",
		     e.reason);
	return v + 1;
}

/* Every kind the store holds: plain, typed, pinned with metadata, empty,
 * fenced, replaced; and one deleted. */
#define NSET 6
static void put_set(struct td_client *c, struct tensor *set)
{
	struct td_error e = {0};
	uint64_t v = next_version(c);
	struct tensor tmp;

	set[0] = mk("a/plain", TD_TENSOR_U8, 4096, 0, 4096);
	set[1] = mk("a/f32", TD_TENSOR_F32, 3, 5, 60);
	set[2] = mk("a/pinned", TD_TENSOR_U8, 77, 0, 77);
	set[2].flags = TD_PUBLISH_PIN;
	set[2].meta = "{\"k\": \"v\"}";
	set[3] = mk("a/empty", TD_TENSOR_U8, 0, 0, 0);
	set[4] = mk("a/fenced", TD_TENSOR_U16, 64, 0, 128);
	set[4].fence = true;
	set[5] = mk("a/replaced", TD_TENSOR_U8, 100, 0, 100);
	for (unsigned i = 0; i < NSET; i++)
		put(c, &set[i], v++);
	set[5].shape[0] = set[5].len = 3000;
	put(c, &set[5], v++);
	tmp = mk("a/deleted", TD_TENSOR_U8, 10, 0, 10);
	put(c, &tmp, v++);
	cr_assert_eq(td_client_delete(c, tmp.name, NULL, &e), 0);
}

/* The file any Hurray reader sees: our names, dtypes, shapes, bytes. */
static void check_file(const char *path, const struct tensor *set,
		       unsigned n)
{
	struct td_hrry_transport tr;
	struct td_hrry_file_reader *r = NULL;
	struct td_hrry_err e = {0};
	uint64_t kvn = 0, tn = 0;
	bool format = false;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(td_hrry_transport_fd(fd, &tr), 0);
	cr_assert_eq(td_hrry_file_reader_new(&tr, &r, &e), 0, "%s: %s",
		     td_hrry_error_name(e.kind), e.reason);
	cr_assert_eq(td_hrry_file_reader_tensor_count(r, &tn), 0);
	cr_assert_eq(tn, n, "%llu Hurray tensors", (unsigned long long)tn);
	for (unsigned i = 0; i < n; i++) {
		struct td_hrry_tensor t = {0};
		const uint8_t *b;

		cr_assert_eq(td_hrry_file_reader_read_tensor(
				     r, set[i].name, strlen(set[i].name), &t,
				     &e),
			     0, "%s: %s: %s", set[i].name,
			     td_hrry_error_name(e.kind), e.reason);
		cr_assert_eq(t.data_len, set[i].len, "%s", set[i].name);
		if (set[i].dtype == TD_TENSOR_F32) {
			cr_assert_eq(t.desc.type_tag, TD_HRRY_TYPE_FLOAT32);
			cr_assert_eq(t.desc.rank, 2);
			cr_assert_eq(t.desc.shape[0], 3);
			cr_assert_eq(t.desc.shape[1], 5);
		}
		b = t.data;
		for (size_t k = 0; k < set[i].len; k++)
			cr_assert_eq(b[k], byte_of(set[i].name,
						   set[i].version, k));
		td_hrry_tensor_fini(&t);
	}
	cr_assert_eq(td_hrry_file_reader_kv_count(r, &kvn), 0);
	for (uint64_t i = 0; i < kvn; i++) {
		struct td_hrry_kv_entry kv;

		cr_assert_eq(td_hrry_file_reader_kv_entry(r, i, &kv), 0);
		if (kv.key_len == 16 && !memcmp(kv.key, "tensord.snapshot", 16))
			format = kv.value.kind == TD_HRRY_KV_UINT64 &&
				 kv.value.u64_value == 2;
	}
	cr_assert(format, "no KV tensord.snapshot = 2");
	td_hrry_file_reader_free(&r);
	close(fd);
}

static bool uring_here(void)
{
	struct io_uring ring;
	int rc = io_uring_queue_init(4, &ring, 0);

	if (rc < 0)
		return false;
	io_uring_queue_exit(&ring);
	return true;
}

static void need_uring(void)
{
	if (!uring_here())
		cr_skip_test("io_uring is not available to this process "
			     "(io_uring_queue_init failed): the io_uring "
			     "path cannot be exercised here");
}

static const char *engine_line(const char *io)
{
	return !strcmp(io, "uring") ? "file I/O: io_uring"
				    : "file I/O: sync";
}

static void restart_restores(const char *io)
{
	struct snapdir s;
	struct tu_daemon d;
	struct tensor set[NSET];
	struct td_client *c;
	struct tensor after = mk("a/after", TD_TENSOR_U8, 8, 0, 8);
	uint64_t maxv = 0;

	snapdir_make(&s);
	start(&d, &s, io, "30");
	cr_assert(log_has(&s, engine_line(io)), "%s", tu_slurp(s.log));
	c = conn(&d);
	put_set(c, set);
	td_client_close(c);
	/* no save yet (30 s); the clean stop writes it */
	cr_assert_eq(access(s.file, F_OK), -1);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "saved 6 tensors"), "%s", tu_slurp(s.log));
	check_file(s.file, set, NSET);

	start(&d, &s, io, "30");
	c = conn(&d);
	cr_assert_eq(count(c), NSET);
	for (unsigned i = 0; i < NSET; i++) {
		check(c, &set[i]);
		if (set[i].version > maxv)
			maxv = set[i].version;
	}
	/* the version counter came back: newer is still newer */
	put(c, &after, next_version(c));
	cr_assert_gt(after.version, maxv + 1);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "restored 6 of 6 tensors"), "%s",
		  tu_slurp(s.log));
	cr_assert(!dir_has(&s, "snap.hrry.tmp"));
	snapdir_rm(&s);
}

Test(snapshot, a_restart_restores_bytes_versions_and_metadata_sync)
{
	restart_restores("sync");
}

Test(snapshot, a_restart_restores_bytes_versions_and_metadata_uring)
{
	need_uring();
	restart_restores("uring");
}

/* ---- SIGKILL during a save ---- */

/*
 * Whatever snapshot is on disk: a Hurray file whose every version is
 * whole (byte_of), holding at least the base names.
 */
static void check_any(struct snapdir *s, const char *io, unsigned base)
{
	struct tu_daemon d;
	struct td_client *c;
	struct td_entry *list;
	struct td_error e = {0};
	size_t n;

	start(&d, s, io, "30");
	c = conn(&d);
	cr_assert_eq(td_client_list(c, "", &list, &n, &e), 0, "%s", e.reason);
	cr_assert_geq(n, base, "%zu tensors after a kill", n);
	for (size_t i = 0; i < n; i++) {
		struct tensor t = mk(list[i].name, list[i].dtype,
				     list[i].bytes, 0, list[i].bytes);

		t.version = list[i].version;
		check(c, &t);
	}
	td_entry_list_free(list, n);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	/* the cut save's temp file went at start */
	cr_assert(!dir_has(s, "snap.hrry.tmp"));
}

/* KV tensord.next_version of the snapshot on disk. */
static uint64_t file_next_version(const char *path)
{
	struct td_hrry_transport tr;
	struct td_hrry_file_reader *r = NULL;
	struct td_hrry_err e = {0};
	uint64_t kvn = 0, v = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(td_hrry_transport_fd(fd, &tr), 0);
	cr_assert_eq(td_hrry_file_reader_new(&tr, &r, &e), 0, "%s: %s",
		     td_hrry_error_name(e.kind), e.reason);
	cr_assert_eq(td_hrry_file_reader_kv_count(r, &kvn), 0);
	for (uint64_t i = 0; i < kvn; i++) {
		struct td_hrry_kv_entry kv;

		cr_assert_eq(td_hrry_file_reader_kv_entry(r, i, &kv), 0);
		if (kv.key_len == 20 &&
		    !memcmp(kv.key, "tensord.next_version", 20))
			v = kv.value.u64_value;
	}
	td_hrry_file_reader_free(&r);
	close(fd);
	cr_assert_gt(v, 0, "no KV tensord.next_version");
	return v;
}

/*
 * The version a started daemon numbers next: the snapshot's counter, or
 * what FILE.lock put on record when a crash lost versions numbered
 * after the last save.
 */
static uint64_t started_next_version(const struct snapdir *s)
{
	char lock[160], *l, *at;
	uint64_t v = file_next_version(s->file), r = 0;

	snprintf(lock, sizeof(lock), "%s.lock", s->file);
	l = tu_slurp(lock);
	at = strstr(l, "\nnext_version ");
	if (at)
		r = strtoull(at + strlen("\nnext_version "), NULL, 10);
	free(l);
	return r > v ? r : v;
}

static void kill_every_step(const char *io)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor base[3] = {
		mk("k/one", TD_TENSOR_U8, 1536 << 10, 0, 1536 << 10),
		mk("k/two", TD_TENSOR_U8, 1536 << 10, 0, 1536 << 10),
		mk("k/three", TD_TENSOR_U8, 100, 0, 100),
	};
	unsigned killed = 0, n;
	bool completed = false;

	snapdir_make(&s);
	start(&d, &s, io, "30");
	c = conn(&d);
	n = (unsigned)next_version(c);
	for (unsigned i = 0; i < 3; i++)
		put(c, &base[i], n++);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "saved 3 tensors"));

	for (unsigned step = 1; !completed && step < 200; step++) {
		char knob[16];
		struct tensor t = mk("k/new", TD_TENSOR_U8, 3 << 20, 0,
				     3 << 20);
		int st;

		cr_assert_eq(truncate(s.log, 0), 0);
		snprintf(knob, sizeof(knob), "%u", step);
		setenv("TD_TEST_SNAPSHOT_KILL_AT", knob, 1);
		start(&d, &s, io, "0");
		unsetenv("TD_TEST_SNAPSHOT_KILL_AT");
		/*
		 * the put is the only change: a save starts after its reply
		 * (interval 0), and its version is the counter on disk (the
		 * snapshot's, or FILE.lock's after a kill)
		 */
		c = conn(&d);
		put(c, &t, started_next_version(&s));
		td_client_close(c);
		/* killed at that step, or the save ran to its end */
		for (int i = 0; i < WAIT_MS / 10; i++) {
			if (waitpid(d.pid, &st, WNOHANG) == d.pid) {
				cr_assert(WIFSIGNALED(st) &&
						  WTERMSIG(st) == SIGKILL,
					  "status %#x", st);
				d.pid = 0;
				break;
			}
			if (log_has(&s, "snapshot: saved")) {
				completed = true;
				break;
			}
			usleep(10000);
		}
		if (completed) {
			tu_daemon_stop(&d, true);
		} else {
			cr_assert_eq(d.pid, 0, "neither killed nor saved");
			unlink(d.sock);
			rmdir(d.dir);
			killed++;
		}
		check_any(&s, io, 3);
	}
	cr_assert(completed, "the save never completed");
	/* header, records, KV/index, fsync, rename, folder fsync at least */
	cr_assert_geq(killed, 5, "only %u kill points", killed);
	snapdir_rm(&s);
}

Test(snapshot, sigkill_at_every_step_of_a_save_keeps_a_whole_snapshot_sync,
     .timeout = 240)
{
	kill_every_step("sync");
}

Test(snapshot, sigkill_at_every_step_of_a_save_keeps_a_whole_snapshot_uring,
     .timeout = 240)
{
	need_uring();
	kill_every_step("uring");
}

/* ---- bad snapshots ---- */

/* The file's bytes b (len, malloc'ed: freed), written back in place. */
static void put_back(const char *path, uint8_t *b, size_t len)
{
	FILE *f = fopen(path, "wb");

	cr_assert_not_null(f);
	cr_assert_eq(fwrite(b, 1, len, f), len);
	fclose(f);
	free(b);
}

/* A saved snapshot of set, the daemon stopped. */
static void saved(struct snapdir *s, struct tensor *set)
{
	struct tu_daemon d;
	struct td_client *c;

	snapdir_make(s);
	start(&d, s, "sync", "30");
	c = conn(&d);
	put_set(c, set);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* One tensor a saved by d on s (made already), the daemon stopped. */
static void saved_one(struct tu_daemon *d, struct snapdir *s,
		      struct tensor *a)
{
	struct td_client *c;

	start(d, s, "sync", "30");
	c = conn(d);
	put(c, a, next_version(c));
	td_client_close(c);
	tu_daemon_stop(d, true);
}

static void starts_empty_and_moves_aside(struct snapdir *s,
					 const char *reason)
{
	struct tu_daemon d;
	struct td_client *c;

	cr_assert_eq(truncate(s->log, 0), 0);
	start(&d, s, "sync", "30");
	c = conn(&d);
	cr_assert_eq(count(c), 0);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(s, reason), "want \"%s\": %s", reason,
		  tu_slurp(s->log));
	cr_assert(log_has(s, "moved aside to"), "%s", tu_slurp(s->log));
	cr_assert(dir_has(s, "snap.hrry.corrupt-"));
	/* nothing changed: no new snapshot was written in its place */
	cr_assert(access(s->file, F_OK) < 0);
}

Test(snapshot, a_corrupt_index_starts_empty_and_moves_the_file_aside)
{
	struct snapdir s;
	struct tensor set[NSET];
	uint8_t *b;
	size_t len;
	uint64_t io;

	saved(&s, set);
	b = tu_read_file(s.file, &len);
	memcpy(&io, b + len - 40, 8); /* trailer: index_offset */
	b[io + 12] ^= 0x20;           /* a byte inside the first name */
	put_back(s.file, b, len);
	starts_empty_and_moves_aside(&s, "IndexCrc32cMismatch");
	snapdir_rm(&s);
}

/*
 * The restore reads the index whole, as every Hurray reader does: a
 * snapshot whose trailer declared an index of 600 MiB (a sparse file of
 * that size, all zeros) had the daemon allocate and read it all before
 * it refused it (InvalidHeader). The declared length is now checked
 * against the 512 MiB cap first: refused at once (TooLarge), started
 * empty, the file moved aside as for any corrupt snapshot.
 */
Test(snapshot, a_declared_index_over_the_cap_is_refused_unread)
{
	struct snapdir s;
	uint8_t h[64] = "HRRYFILE", t[40] = {0};
	uint64_t il = 600ull << 20;
	int fd;

	snapdir_make(&s);
	h[8] = 1;
	h[17] = 0x10; /* alignment 4096 */
	h[20] = 64;   /* first_descriptor_offset */
	for (int i = 0; i < 8; i++) {
		t[i] = (uint8_t)(UINT64_C(64) >> (8 * i));
		t[8 + i] = (uint8_t)(il >> (8 * i));
	}
	memcpy(t + 36, "HRRY", 4);
	fd = open(s.file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, h, 64, 0), 64);
	cr_assert_eq(pwrite(fd, t, 40, (off_t)(64 + il)), 40);
	close(fd);
	fd = open(s.log, O_WRONLY | O_CREAT | O_CLOEXEC, 0600); /* truncated */
	cr_assert_geq(fd, 0);
	close(fd);
	starts_empty_and_moves_aside(&s, "TooLarge");
	cr_assert(log_has(&s, "index_length over tensord's 512 MiB cap"), "%s",
		  tu_slurp(s.log));
	snapdir_rm(&s);
}

Test(snapshot, garbage_and_truncated_files_start_empty)
{
	struct snapdir s;
	struct tensor set[NSET];
	FILE *f;

	saved(&s, set);
	cr_assert_eq(truncate(s.file, 1000), 0);
	starts_empty_and_moves_aside(&s, "at byte");
	f = fopen(s.file, "wb");
	fputs("not a Hurray file at all, but long enough to have a header "
	      "and a trailer, if it were one............................",
	      f);
	fclose(f);
	starts_empty_and_moves_aside(&s, "InvalidFileMagic");
	snapdir_rm(&s);
}

/* Where the value of KV key in the file starts (after its tag). */
static size_t find_kv(const uint8_t *b, size_t len, const char *key)
{
	size_t k = strlen(key);

	for (size_t i = 2; i + k + 1 < len; i++)
		if (b[i - 2] == (k & 0xff) && b[i - 1] == k >> 8 &&
		    !memcmp(b + i, key, k))
			return i + k + 1;
	cr_assert_fail("KV key %s not in the file", key);
	return 0;
}

/* The u64 value of KV key in the snapshot file, set to v in place. */
static void set_kv_u64(const char *file, const char *key, uint64_t v)
{
	size_t len;
	uint8_t *b = tu_read_file(file, &len);

	memcpy(b + find_kv(b, len, key), &v, 8);
	put_back(file, b, len);
}

static uint32_t crc_le(uint32_t crc, uint64_t v, size_t bytes)
{
	uint8_t b[8];

	for (size_t i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	return td_hrry_crc32c(crc, b, bytes);
}

/*
 * The first value of NAME's KV key #crc made right again for its KV
 * values as they are now, computed as docs/snapshot.md ("Checksums")
 * writes it: for a test that damages a value on purpose and needs it
 * believed, to reach the checks behind the checksum.
 */
static void fix_meta_crc(const char *path, const char *name)
{
	static const char *const field[] = {"version", "flags", "blob",
					    "meta", "files"};
	struct td_hrry_kv_value v[5] = {0};
	struct td_hrry_transport tr;
	struct td_hrry_file_reader *r = NULL;
	struct td_hrry_err e = {0};
	uint64_t kvn = 0;
	uint32_t crc;
	char key[200];
	uint8_t *b;
	size_t len, at;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	cr_assert_geq(fd, 0);
	cr_assert_eq(td_hrry_transport_fd(fd, &tr), 0);
	cr_assert_eq(td_hrry_file_reader_new(&tr, &r, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_hrry_file_reader_kv_count(r, &kvn), 0);
	for (uint64_t i = 0; i < kvn; i++) {
		struct td_hrry_kv_entry kv;

		cr_assert_eq(td_hrry_file_reader_kv_entry(r, i, &kv), 0);
		for (int f = 0; f < 5; f++) {
			snprintf(key, sizeof(key), "tensord:%s#%s", name,
				 field[f]);
			if (kv.key_len == strlen(key) &&
			    !memcmp(kv.key, key, kv.key_len))
				v[f] = kv.value;
		}
	}
	crc = crc_le(0, strlen(name), 4);
	crc = td_hrry_crc32c(crc, name, strlen(name));
	crc = crc_le(crc_le(crc, v[0].u64_value, 8), v[1].u64_value, 8);
	crc = crc_le(crc, v[2].data_len, 4);
	crc = td_hrry_crc32c(crc, v[2].data, v[2].data_len);
	crc = crc_le(crc, v[3].data_len, 4);
	crc = td_hrry_crc32c(crc, v[3].data, v[3].data_len);
	crc = crc_le(crc, v[4].item_count, 4);
	for (size_t i = 0; i < v[4].item_count; i++)
		crc = crc_le(crc, v[4].items[i].u64_value, 8);
	td_hrry_file_reader_free(&r);
	close(fd);
	b = tu_read_file(path, &len);
	snprintf(key, sizeof(key), "tensord:%s#crc", name);
	at = find_kv(b, len, key) + 4; /* u32 length */
	for (int i = 0; i < 4; i++)
		b[at + i] = (uint8_t)(crc >> (8 * i));
	put_back(path, b, len);
}

/*
 * A flipped bit in a version's KV values (here a/plain's dtype, which
 * would restore the same bytes as another type) or in a plane's bytes:
 * the version is not restored, the log says where, the others are, and
 * the file stays as FILE.partial-<time>.
 */
static void damaged_is_skipped(struct snapdir *s, unsigned want_restored,
			       const char *why)
{
	struct tu_daemon d;
	struct td_client *c;
	char line[200];

	cr_assert_eq(truncate(s->log, 0), 0);
	start(&d, s, "sync", "30");
	c = conn(&d);
	cr_assert_eq(count(c), want_restored);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(s, why), "want \"%s\": %s", why, tu_slurp(s->log));
	snprintf(line, sizeof(line), "restored %u of %u tensors",
		 want_restored, want_restored + 1);
	cr_assert(log_has(s, line), "%s", tu_slurp(s->log));
	cr_assert(dir_has(s, "snap.hrry.partial-"));
}

/* After a restart, every tensor of set but set[skip] is back. */
static void others_restored(struct snapdir *s, const struct tensor *set,
			    unsigned skip)
{
	struct tu_daemon d;
	struct td_client *c;

	start(&d, s, "sync", "30");
	c = conn(&d);
	for (unsigned i = 0; i < NSET; i++)
		if (i != skip)
			check(c, &set[i]);
	td_client_close(c);
	tu_daemon_stop(&d, true);
}

/* XOR byte off of NAME's KV #blob in the file with x; the byte was. */
static uint8_t blob_xor(const char *path, const char *name, size_t off,
			uint8_t x)
{
	char key[200];
	uint8_t *b, was;
	size_t len, at;

	snprintf(key, sizeof(key), "tensord:%s#blob", name);
	b = tu_read_file(path, &len);
	at = find_kv(b, len, key) + 4; /* u32 length */
	was = b[at + off];
	b[at + off] ^= x;
	put_back(path, b, len);
	return was;
}

Test(snapshot, a_version_that_fails_the_publish_checks_is_skipped_alone)
{
	struct snapdir s;
	struct tensor set[NSET];

	saved(&s, set);
	/* a/plain's blob now says dma-buf: its memfd fails PUBLISH */
	cr_assert_eq(blob_xor(s.file, "a/plain", 24, 1 ^ 2), 1,
		     "storage_kind of a memfd tensor");
	fix_meta_crc(s.file, "a/plain");
	damaged_is_skipped(&s, NSET - 1, "not restoring \"a/plain\"");
	cr_assert(log_has(&s, "storage_kind"), "%s", tu_slurp(s.log));
	others_restored(&s, set, 0);
	snapdir_rm(&s);
}

Test(snapshot, a_flipped_bit_in_a_kv_value_is_caught_by_its_checksum)
{
	struct snapdir s;
	struct tensor set[NSET];

	saved(&s, set);
	/* the dtype: f32 would come back as another */
	blob_xor(s.file, "a/f32", 12, 0x01);
	damaged_is_skipped(&s, NSET - 1,
			   "not restoring \"a/f32\": its KV values do not "
			   "match their checksum (KV #crc)");
	others_restored(&s, set, 1);
	snapdir_rm(&s);
}

Test(snapshot, a_flipped_bit_in_a_plane_is_caught_by_its_checksum)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor big = mk("big", TD_TENSOR_U8, 5 << 19, 0, 5 << 19);
	struct tensor small = mk("small", TD_TENSOR_U8, 100, 0, 100);
	uint8_t *b, head[64];
	size_t len, at = 0;

	snapdir_make(&s);
	start(&d, &s, "sync", "30");
	c = conn(&d);
	put(c, &big, next_version(c));
	put(c, &small, next_version(c));
	td_client_close(c);
	tu_daemon_stop(&d, true);
	/* big's bytes in the file: found by their pattern */
	for (size_t i = 0; i < sizeof(head); i++)
		head[i] = byte_of(big.name, big.version, i);
	b = tu_read_file(s.file, &len);
	for (size_t i = 0; i + sizeof(head) <= len && !at; i += 4096)
		if (!memcmp(b + i, head, sizeof(head)))
			at = i;
	cr_assert(at, "big's bytes not found in the file");
	b[at + (3 << 19) + 5] ^= 0x80; /* in its second MiB */
	put_back(s.file, b, len);
	damaged_is_skipped(&s, 1,
			   "not restoring \"big\": bytes 1048576-2097151 of "
			   "Hurray tensor \"big\" do not match their "
			   "checksum (KV #crc)");
	restart_holds(&d, &s, &small);
	snapdir_rm(&s);
}

/* Replace every occurrence of from (same length) in b. */
static unsigned replace_all(uint8_t *b, size_t len, const char *from,
			    const char *to)
{
	size_t k = strlen(from);
	unsigned n = 0;

	for (size_t i = 0; i + k <= len; i++)
		if (!memcmp(b + i, from, k)) {
			memcpy(b + i, to, k);
			n++;
		}
	return n;
}

/*
 * A snapshot of format 1 (before checksums: no #crc keys) restores
 * unchecked; one that says format 2 and lacks them restores nothing.
 */
Test(snapshot, format_1_restores_without_checksums_format_2_needs_them)
{
	struct snapdir s;
	struct tensor set[NSET];
	struct tu_daemon d;
	struct td_client *c;
	uint8_t *b;
	size_t len, at;

	saved(&s, set);
	b = tu_read_file(s.file, &len);
	/* the keys gone (renamed to keys tensord does not know) */
	cr_assert_eq(replace_all(b, len, "#crc", "#cr_"), NSET);
	put_back(s.file, b, len);
	cr_assert_eq(truncate(s.log, 0), 0);
	start(&d, &s, "sync", "30");
	c = conn(&d);
	cr_assert_eq(count(c), 0);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "KV key #crc is missing"), "%s",
		  tu_slurp(s.log));
	snapdir_rm(&s);

	saved(&s, set);
	b = tu_read_file(s.file, &len);
	cr_assert_eq(replace_all(b, len, "#crc", "#cr_"), NSET);
	at = find_kv(b, len, "tensord.snapshot");
	cr_assert_eq(b[at], 2);
	b[at] = 1;
	put_back(s.file, b, len);
	cr_assert_eq(truncate(s.log, 0), 0);
	start(&d, &s, "sync", "30");
	c = conn(&d);
	cr_assert_eq(count(c), NSET);
	for (unsigned i = 0; i < NSET; i++)
		check(c, &set[i]);
	next_version(c); /* a change: the stop saves */
	td_client_close(c);
	tu_daemon_stop(&d, true);
	/* and the next save writes format 2 again */
	check_file(s.file, set, NSET);
	snapdir_rm(&s);
}

/* ---- the engine choice ---- */

/* In the daemon's child: io_uring_setup answers EPERM (like systemd's
 * SystemCallFilter= or a container's seccomp profile). */
static void forbid_io_uring(void)
{
	if (tu_deny_syscall(__NR_io_uring_setup, EPERM) < 0)
		_exit(125);
}

Test(snapshot, a_forbidden_io_uring_falls_back_and_says_why)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor t = mk("f/x", TD_TENSOR_U8, 5000, 0, 5000);
	const char *extra[] = {"--snapshot", s.file, NULL};

	snapdir_make(&s);
	cr_assert_eq(setenv("TENSORD_IO", "auto", 1), 0);
	tu_daemon_start_log(&d, "info", extra, s.log, forbid_io_uring);
	c = conn(&d);
	put(c, &t, next_version(c));
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "file I/O: sync (pread/pwrite): io_uring "
			      "unavailable: io_uring_setup is forbidden"),
		  "%s", tu_slurp(s.log));
	cr_assert(log_has(&s, "saved 1 tensors"), "%s", tu_slurp(s.log));
	/* and what it wrote comes back */
	cr_assert_eq(truncate(s.log, 0), 0);
	tu_daemon_start_log(&d, "info", extra, s.log, forbid_io_uring);
	c = conn(&d);
	check(c, &t);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	snapdir_rm(&s);
}

static int run_daemon(const char *sock, const char *snap)
{
	const char *bin = getenv("TD_TENSORD");
	char *argv[] = {(char *)bin, "--socket", (char *)sock, "--snapshot",
			(char *)snap, NULL};
	char *out;
	int rc;

	cr_assert_not_null(bin);
	rc = tu_run_capture(argv, &out);
	free(out);
	return rc;
}

/*
 * SIGTERM while the daemon starts, before it reads the snapshot (here
 * raised just before it opens FILE.lock): the restore's nested loop
 * runs took main's uv_stop() and the daemon listened and ran on, the
 * stop lost (`systemctl stop` waited for its timeout, then SIGKILL). It
 * now restores the snapshot whole, then stops as asked.
 */
Test(snapshot, a_stop_asked_for_before_the_restore_is_not_lost,
     .timeout = 90)
{
	struct snapdir s;
	struct tu_daemon d;
	struct tensor a = mk("stop/a", TD_TENSOR_U8, 100, 0, 100);
	const char *bin = getenv("TD_TENSORD");
	char sock[160], lock[160], spec[200], *out;
	char *argv[] = {(char *)bin, "--socket", sock, "--snapshot", s.file,
			NULL};
	int rc;

	cr_assert_not_null(bin);
	snapdir_make(&s);
	snprintf(sock, sizeof(sock), "%s/td.sock", s.dir);
	snprintf(lock, sizeof(lock), "%s.lock", s.file);
	snprintf(spec, sizeof(spec), "%d:%s", SIGTERM, lock);
	saved_one(&d, &s, &a);
	tu_shim_on("TD_RAISE_BEFORE_OPEN_RDWR", spec);
	rc = tu_run_capture_in(argv, &out, 20);
	tu_shim_off("TD_RAISE_BEFORE_OPEN_RDWR");
	free(out);
	cr_expect_eq(rc, 0, "exit status %d", rc);
	/* the snapshot is left as it was, and whole */
	restart_holds(&d, &s, &a);
	snapdir_rm(&s);
}

/* FILE.lock's next_version at lock (0: no such line yet). */
static uint64_t lock_next_or_0(const char *lock)
{
	char *l = tu_slurp(lock), *at = l ? strstr(l, "\nnext_version ") : NULL;
	uint64_t n = at ? strtoull(at + 14, NULL, 10) : 0;

	free(l);
	return n;
}

/*
 * A full disk under FILE.lock when the daemon starts and numbers its
 * first version: the record is not written (logged). It was not tried
 * again until half a block (32 768 versions) later, and then only its
 * digits were written, at their offset in a file still empty: the
 * numbers handed out were never on record, though the disk had room
 * again, and a crash then numbered new versions as old ones. Now the
 * next version tries again (whole lines) until it is on record.
 */
Test(snapshot, a_version_record_refused_by_a_full_disk_is_written_later,
     .timeout = 90)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor a = mk("rec/a", TD_TENSOR_U8, 100, 0, 100);
	struct tensor b = mk("rec/b", TD_TENSOR_U8, 100, 0, 100);
	char mnt[160], fill[200], snap[200], lock[220];
	const char *extra[] = {"--snapshot", snap, "--snapshot-interval",
			       "3600", NULL};
	static char block[4096];
	uint64_t on_record = 0;
	int fd, e;

	snapdir_make(&s);
	snprintf(mnt, sizeof(mnt), "%s/m", s.dir);
	snprintf(fill, sizeof(fill), "%s/fill", mnt);
	snprintf(snap, sizeof(snap), "%s/snap.hrry", mnt);
	snprintf(lock, sizeof(lock), "%s.lock", snap);
	cr_assert_eq(mkdir(mnt, 0700), 0);
	if ((e = -tu_private_tmpfs(mnt, "size=64k")) > 0) {
		rmdir(mnt);
		snapdir_rm(&s);
		cr_skip_test("kernel feature missing: a mount namespace with "
			     "a tmpfs (%s; root needed): a full disk under "
			     "FILE.lock not checked",
			     strerror(e));
	}
	fd = open(fill, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	cr_assert_geq(fd, 0);
	while (write(fd, block, sizeof(block)) > 0)
		;
	close(fd);
	cr_assert_eq(setenv("TENSORD_IO", "sync", 1), 0);
	tu_daemon_start_log(&d, "info", extra, s.log, NULL);
	c = conn(&d);
	put(c, &a, next_version(c));
	cr_expect(log_has(&s, "cannot put version numbers"), "%s",
		  tu_slurp(s.log));
	cr_assert_eq(unlink(fill), 0);
	put(c, &b, b.version = a.version + 1);
	for (int i = 0; i < WAIT_MS / 10 && on_record <= b.version; i++) {
		put(c, &b, b.version + 1);
		on_record = lock_next_or_0(lock);
		usleep(10000);
	}
	cr_expect_gt(on_record, b.version,
		     "version %llu handed out, %llu on record in %s",
		     (unsigned long long)b.version,
		     (unsigned long long)on_record, lock);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	umount(mnt);
	rmdir(mnt);
	snapdir_rm(&s);
}

Test(snapshot, a_bad_tensord_io_or_a_missing_folder_stops_the_start)
{
	struct snapdir s;
	char sock[160], missing[160];

	snapdir_make(&s);
	snprintf(sock, sizeof(sock), "%s/td.sock", s.dir);
	snprintf(missing, sizeof(missing), "%s/no/such/snap.hrry", s.dir);
	cr_assert_eq(setenv("TENSORD_IO", "fast", 1), 0);
	cr_assert_eq(run_daemon(sock, s.file), 1);
	cr_assert_eq(setenv("TENSORD_IO", "sync", 1), 0);
	cr_assert_eq(run_daemon(sock, missing), 1);
	unsetenv("TENSORD_IO");
	snapdir_rm(&s);
}

/* ---- a disk that refuses, a fence that never signals, odd files ---- */

static unsigned log_count(const struct snapdir *s, const char *text)
{
	char *l = tu_slurp(s->log);
	unsigned n = 0;

	for (const char *p = l; (p = strstr(p, text)); p += strlen(text))
		n++;
	free(l);
	return n;
}

/*
 * With --snapshot-interval 0, a save that cannot even start (a folder
 * where FILE.tmp goes) used to be retried from its own timer's callback
 * in the same loop pass, for ever: no client served, SIGTERM never
 * heard. Now a failed save waits 1 s, then 2, 4, ... before the next.
 */
Test(snapshot, a_save_that_cannot_start_backs_off_and_the_daemon_serves,
     .timeout = 60)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor t = mk("b/x", TD_TENSOR_U8, 100, 0, 100);
	char tmp[160];
	unsigned fails;

	snapdir_make(&s);
	snprintf(tmp, sizeof(tmp), "%s.tmp", s.file);
	cr_assert_eq(mkdir(tmp, 0700), 0);
	start(&d, &s, "sync", "0");
	c = conn(&d);
	put(c, &t, next_version(c));
	usleep(2500 * 1000);
	/* the loop still serves */
	cr_assert_eq(count(c), 1);
	td_client_close(c);
	/* and hears SIGTERM (a wedged daemon times the test out here);
	 * its final save fails the same way, which its status says */
	tu_daemon_stop_status(&d, true, 1);
	fails = log_count(&s, "snapshot: saving");
	cr_assert(fails >= 1 && fails <= 6, "%u failed saves in 2.5 s: %s",
		  fails, tu_slurp(s.log));
	cr_assert(log_has(&s, "cannot remove"), "%s", tu_slurp(s.log));
	cr_assert(log_has(&s, "retried in 1 s at the earliest"), "%s",
		  tu_slurp(s.log));
	rmdir(tmp);
	snapdir_rm(&s);
}

/* A snapshot metric of the daemon serving /metrics at path. */
static unsigned long long snap_metric(const char *path, const char *name)
{
	return tu_metric_unix(path, name);
}

/* Until the snapshot metric name reads at least want (WAIT_MS). */
static void snap_metric_wait(const char *path, const char *name,
			     unsigned long long want)
{
	for (int i = 0; snap_metric(path, name) < want; i++) {
		cr_assert_lt(i, WAIT_MS / 10, "%s stayed under %llu", name,
			     want);
		usleep(10000);
	}
}

/*
 * What an operator alerts on: /metrics says how saves went, when the
 * last whole one ended, what it wrote, and whether the store holds a
 * change the file does not. Before, only the log said (docs/snapshot.md
 * said "STATUS and /metrics report nothing of snapshots yet").
 */
Test(snapshot, metrics_say_how_saves_went_and_when_the_last_one_ended,
     .timeout = 60)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor t = mk("m/x", TD_TENSOR_U8, 100, 0, 100);
	char tmp[160], http[160], addr[170];
	const char *extra[] = {"--snapshot", s.file, "--snapshot-interval",
			       "0", "--http", addr, NULL};
	time_t before, after;
	unsigned long long when;

	snapdir_make(&s);
	extra[1] = s.file;
	snprintf(http, sizeof(http), "%s/http", s.dir);
	snprintf(addr, sizeof(addr), "unix:%s", http);
	/* a folder where FILE.tmp goes: every save fails */
	snprintf(tmp, sizeof(tmp), "%s.tmp", s.file);
	cr_assert_eq(mkdir(tmp, 0700), 0);
	cr_assert_eq(setenv("TENSORD_IO", "sync", 1), 0);
	tu_daemon_start_log(&d, "info", extra, s.log, NULL);
	cr_assert_eq(snap_metric(http, "tensord_snapshot_unsaved"), 0);
	c = conn(&d);
	put(c, &t, next_version(c));
	snap_metric_wait(http, "tensord_snapshot_saves_total{result=\"failed\"}",
			 1);
	cr_assert_eq(snap_metric(http, "tensord_snapshot_saves_total{result="
				       "\"ok\"}"), 0);
	cr_assert_eq(snap_metric(http, "tensord_snapshot_unsaved"), 1);
	cr_assert_eq(snap_metric(http,
				 "tensord_snapshot_last_save_timestamp_seconds"),
		     0);

	before = time(NULL);
	cr_assert_eq(rmdir(tmp), 0); /* the next save (1 s on) works */
	snap_metric_wait(http, "tensord_snapshot_saves_total{result=\"ok\"}",
			 1);
	after = time(NULL);
	when = snap_metric(http, "tensord_snapshot_last_save_timestamp_seconds");
	cr_assert(when >= (unsigned long long)before &&
		  when <= (unsigned long long)after,
		  "last save at %llu, not in [%lld, %lld]", when,
		  (long long)before, (long long)after);
	cr_assert_eq(snap_metric(http, "tensord_snapshot_last_save_tensors"),
		     1);
	cr_assert_eq(snap_metric(http, "tensord_snapshot_last_save_bytes"),
		     100);
	cr_assert_eq(snap_metric(http, "tensord_snapshot_unsaved"), 0);
	td_client_close(c);
	tu_daemon_stop(&d, false);
	snapdir_rm(&s);
}

/* Without --snapshot, /metrics has no snapshot lines at all. */
Test(snapshot, metrics_have_no_snapshot_lines_without_a_snapshot)
{
	struct snapdir s;
	struct tu_daemon d;
	char http[160], addr[170];
	const char *extra[] = {"--http", addr, NULL};

	snapdir_make(&s);
	snprintf(http, sizeof(http), "%s/http", s.dir);
	snprintf(addr, sizeof(addr), "unix:%s", http);
	tu_daemon_start_log(&d, "info", extra, s.log, NULL);
	/* present: the metric the store always has */
	(void)tu_metric_unix(http, "tensord_state_images_total");
	cr_assert_not(tu_metrics_has(http, "tensord_snapshot_"));
	tu_daemon_stop(&d, false);
	snapdir_rm(&s);
}

/*
 * A version whose fence has not signalled is left out of a save, and
 * the snapshot stays dirty; with interval 0 that made a full save after
 * every save, about a thousand a second. Now the next one waits 1 s,
 * then longer, and the version is saved once its fence signals.
 */
Test(snapshot, a_fence_that_does_not_signal_does_not_make_saves_loop,
     .timeout = 60)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct td_error e = {0};
	int fd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int ev = eventfd(0, EFD_CLOEXEC);
	uint64_t shape[1] = {64}, one = 1;
	struct td_publish p = {.name = "f/late",
			       .flags = TD_PUBLISH_FENCE,
			       .dtype = TD_TENSOR_U8,
			       .ndim = 1,
			       .shape = shape,
			       .fd_count = 1,
			       .fds = &fd,
			       .fence_fd = ev};
	unsigned saves;

	cr_assert(fd >= 0 && ev >= 0);
	cr_assert_eq(ftruncate(fd, 64), 0);
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	snapdir_make(&s);
	start(&d, &s, "sync", "0");
	c = conn(&d);
	cr_assert_eq(td_client_publish(c, &p, NULL, &e), 0, "%s", e.reason);
	usleep(2500 * 1000);
	saves = log_count(&s, "snapshot: saved");
	cr_assert(saves >= 1 && saves <= 6, "%u saves in 2.5 s: %s", saves,
		  tu_slurp(s.log));
	cr_assert(log_has(&s, "saved 0 tensors"), "%s", tu_slurp(s.log));
	/* signalled: the final save has it */
	cr_assert_eq(write(ev, &one, sizeof(one)), (ssize_t)sizeof(one));
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "saved 1 tensors"), "%s", tu_slurp(s.log));
	close(fd);
	close(ev);
	snapdir_rm(&s);
}

/* A FIFO where the snapshot goes was opened blocking: the start hung,
 * deaf to SIGTERM. Now it is moved aside like any file not a snapshot. */
Test(snapshot, a_fifo_at_the_snapshot_path_is_moved_aside, .timeout = 60)
{
	struct snapdir s;

	snapdir_make(&s);
	fclose(fopen(s.log, "w"));
	cr_assert_eq(mkfifo(s.file, 0600), 0);
	starts_empty_and_moves_aside(&s, "not a regular file");
	snapdir_rm(&s);
}

/*
 * A snapshot the daemon cannot open for another reason than its absence
 * (here a symbolic link to itself; a file its user may not read is the
 * same) is not damaged: it is neither moved aside nor replaced, and the
 * daemon does not start.
 */
Test(snapshot, a_snapshot_that_cannot_be_opened_stops_the_start)
{
	struct snapdir s;
	char sock[160];
	struct stat st;

	snapdir_make(&s);
	snprintf(sock, sizeof(sock), "%s/td.sock", s.dir);
	cr_assert_eq(symlink("snap.hrry", s.file), 0);
	cr_assert_eq(run_daemon(sock, s.file), 1);
	cr_assert_eq(lstat(s.file, &st), 0);
	cr_assert(S_ISLNK(st.st_mode), "the link was replaced");
	cr_assert_not(dir_has(&s, "snap.hrry.corrupt-"));
	snapdir_rm(&s);
}

/*
 * A restart with --max-bytes 65536 under the shim's var=val leaves
 * PREFIX/big out; its file stays whole in FILE.partial-<time> while FILE
 * gets the versions restored and one published since. The log holds
 * says.
 */
static void kept_copy_case(const char *prefix, const char *var,
			   const char *val, const char *says)
{
	char nbig[32], nsmall[32], nlater[32], kept[400] = "";
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor big, small, later;
	const char *extra[] = {"--snapshot", s.file, "--snapshot-interval",
			       "0", "--max-bytes", "65536", NULL};
	DIR *dir;
	struct dirent *de;

	snprintf(nbig, sizeof(nbig), "%s/big", prefix);
	snprintf(nsmall, sizeof(nsmall), "%s/small", prefix);
	snprintf(nlater, sizeof(nlater), "%s/later", prefix);
	big = mk(nbig, TD_TENSOR_U8, 1 << 20, 0, 1 << 20);
	small = mk(nsmall, TD_TENSOR_U8, 100, 0, 100);
	later = mk(nlater, TD_TENSOR_U8, 10, 0, 10);
	snapdir_make(&s);
	start(&d, &s, "sync", "30");
	c = conn(&d);
	put(c, &big, next_version(c));
	put(c, &small, next_version(c));
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert_eq(truncate(s.log, 0), 0);
	cr_assert_eq(setenv("TENSORD_IO", "sync", 1), 0);
	tu_shim_on(var, val);
	tu_daemon_start_log(&d, "info", extra, s.log, NULL);
	tu_shim_off(var);
	c = conn(&d);
	cr_assert_eq(count(c), 1);
	check(c, &small);
	put(c, &later, next_version(c)); /* a save replaces FILE */
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, says), "%s", tu_slurp(s.log));
	cr_assert(log_has(&s, "1 tensors not restored; ") &&
			  log_has(&s, " kept as "),
		  "%s", tu_slurp(s.log));
	dir = opendir(s.dir);
	while ((de = readdir(dir)))
		if (!strncmp(de->d_name, "snap.hrry.partial-", 18))
			snprintf(kept, sizeof(kept), "%s/%s", s.dir,
				 de->d_name);
	closedir(dir);
	cr_assert(kept[0], "no kept copy: %s", tu_slurp(s.log));
	/* the copy has both tensors, bytes and all; FILE the ones
	 * restored, and the one published since */
	check_file(kept, (struct tensor[]){big, small}, 2);
	check_file(s.file, (struct tensor[]){small, later}, 2);
	snapdir_rm(&s);
}

/*
 * Versions a restart leaves out (here: --max-bytes now smaller than one
 * of them) used to vanish from the file at the next save. The file as it
 * was stays under FILE.partial-<time>, whole.
 */
Test(snapshot, versions_left_out_at_a_restart_stay_in_a_kept_copy,
     .timeout = 60)
{
	/* a machine that cannot hold p/big either: it used to be reserved
	 * (and copied) in full before --max-bytes left it out */
	kept_copy_case("p", "TD_FAIL_FALLOCATE_OVER", "65536",
		       "not restoring \"p/big\": 1048576 more bytes exceed "
		       "--max-bytes");
}

/*
 * The version counter in a snapshot (its KV has no checksum) set to
 * 2^64 - 1: the next publishes got 2^64 - 1 and then 0, which no
 * newer-than wait sees and the next start refused. A counter beyond
 * 2^55 is ignored now (docs/snapshot.md says why 2^55), and versions
 * go on from the restored ones.
 */
Test(snapshot, a_version_counter_out_of_range_is_ignored, .timeout = 60)
{
	struct snapdir s;
	struct tensor set[NSET];
	struct tu_daemon d;
	struct td_client *c;
	uint64_t v;

	saved(&s, set);
	set_kv_u64(s.file, "tensord.next_version", UINT64_MAX);
	cr_assert_eq(truncate(s.log, 0), 0);
	start(&d, &s, "sync", "30");
	c = conn(&d);
	cr_assert_eq(count(c), NSET);
	v = next_version(c);
	cr_assert(v > set[NSET - 1].version && v < 1000, "next version %llu",
		  (unsigned long long)v);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "out of range; ignored"), "%s", tu_slurp(s.log));
	snapdir_rm(&s);
}

/*
 * A counter below 2^62 but past 2^56: a followed name's bell packs a
 * version as version << 8 | entry (proto/follow.h), so version 2^60
 * read as version 0 there, "no version": the follower of a name
 * published after such a restore waited for nothing. A counter is
 * ignored past 2^55 now (it was past 2^62), and versions go on from
 * the restored ones.
 */
Test(snapshot, a_version_counter_past_the_follow_layout_is_ignored,
     .timeout = 60)
{
	static const uint64_t shape = 8;
	struct snapdir s;
	struct tensor set[NSET];
	struct tu_daemon d;
	struct td_client *c;
	struct td_follow *f = NULL;
	struct td_tensor *t = NULL;
	struct td_publish p = {.name = "a/followed", .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &shape};
	struct td_error e = {0};
	uint8_t bytes[8] = {0};
	uint64_t v = 0;

	saved(&s, set);
	set_kv_u64(s.file, "tensord.next_version", UINT64_C(1) << 60);
	start(&d, &s, "sync", "30");
	c = conn(&d);
	cr_assert_eq(td_client_follow(c, p.name, &f, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_put(c, &p, bytes, sizeof(bytes), &v, &e), 0,
		     "%s", e.reason);
	cr_assert_eq(td_follow_next(f, 2000, &t, &e), 0,
		     "version %llu not followed: %s", (unsigned long long)v,
		     e.reason);
	cr_assert_eq(td_tensor_version(t), v);
	cr_assert(v > set[NSET - 1].version && v < 1000, "version %llu",
		  (unsigned long long)v);
	td_tensor_release(t);
	td_follow_close(f);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	snapdir_rm(&s);
}

/*
 * Versions numbered after the last save, then a crash (SIGKILL: no final
 * save): the restart counted on from the last save's counter, so the
 * next PUBLISH got a number handed out before the crash, to other bytes
 * (a client that had it saw "no change", one waiting for newer than it
 * missed that version and the next ones). The numbers are put on record
 * (FILE.lock) before they are handed out, and a restart after a crash
 * counts on from there; a clean stop records the counter exactly, so a
 * clean restart skips nothing.
 */
Test(snapshot, a_crash_after_the_last_save_never_numbers_a_version_twice,
     .timeout = 60)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor a = mk("n/a", TD_TENSOR_U8, 64, 0, 64);
	struct tensor b = mk("n/b", TD_TENSOR_U8, 64, 0, 64);
	uint64_t before, v;

	snapdir_make(&s);
	saved_one(&d, &s, &a);
	start(&d, &s, "sync", "30");
	c = conn(&d);
	/* a clean restart goes on from the counter exactly */
	put(c, &b, a.version + 1);
	put(c, &a, b.version + 1);
	before = a.version;
	td_client_close(c);
	/* no save since (30 s): the crash loses both */
	tu_daemon_kill(&d);
	cr_assert_eq(truncate(s.log, 0), 0);
	start(&d, &s, "sync", "30");
	c = conn(&d);
	cr_assert_eq(count(c), 1, "the last save held n/a only");
	a.version = before - 2;
	check(c, &a);
	v = next_version(c);
	cr_assert_gt(v, before, "version %llu after a crash that lost %llu",
		     (unsigned long long)v, (unsigned long long)before);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "counting on from"), "%s", tu_slurp(s.log));
	snapdir_rm(&s);
}

/* TD__VERSION_BLOCK (daemon/sd.h): numbers put on record at a time */
#define VERSION_BLOCK 65536

/* FILE.lock's "next_version N" */
static uint64_t lock_next_version(const struct snapdir *s)
{
	char lock[160], *l, *at;
	uint64_t r = 0;

	snprintf(lock, sizeof(lock), "%s.lock", s->file);
	l = tu_slurp(lock);
	at = strstr(l, "\nnext_version ");
	cr_assert_not_null(at, "%s", l);
	r = strtoull(at + strlen("\nnext_version "), NULL, 10);
	free(l);
	return r;
}

/* The shim's hold on a file: PATH.hold (held while it exists) and
 * PATH.held (made when a call is held). */
struct hold {
	char path[160], hold[176], held[176];
};

/*
 * Start a daemon on s (sync engine, interval) whose fsync or fdatasync
 * (the shim's var) of FILE + suffix is held while h->hold exists (not
 * yet: hold_on() makes it).
 */
static struct td_client *start_held(struct tu_daemon *d, struct snapdir *s,
				    const char *var, const char *suffix,
				    const char *interval, struct hold *h)
{
	snprintf(h->path, sizeof(h->path), "%s%s", s->file, suffix);
	snprintf(h->hold, sizeof(h->hold), "%s.hold", h->path);
	snprintf(h->held, sizeof(h->held), "%s.held", h->path);
	tu_shim_on(var, h->path);
	start(d, s, "sync", interval);
	tu_shim_off(var);
	return conn(d);
}

static void hold_on(const struct hold *h)
{
	int fd = open(h->hold, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);

	cr_assert_geq(fd, 0, "%s: %s", h->hold, strerror(errno));
	close(fd);
}

/*
 * FILE.lock's number was written and fdatasync'ed on the loop when the
 * counter reached it: every client waited for the disk once per block
 * (a slow disk's pause, every 65 536 versions). It is written ahead on
 * a thread now, from the half of the block on: with the shim holding
 * that fdatasync (a disk as slow as we like), the daemon goes on
 * numbering versions and answering requests, and once the write is
 * let go, numbers past the first block are on record before they are
 * handed out.
 */
Test(snapshot, the_version_record_is_written_ahead_off_the_loop,
     .timeout = 240)
{
	static const uint64_t shape = 1;
	struct td_publish p = {
	        .name = "w", .dtype = TD_TENSOR_U8, .ndim = 1, .shape = &shape};
	struct td_error e = {0};
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct hold h;
	uint64_t first, v = 0;
	uint8_t b = 0;

	snapdir_make(&s);
	c = start_held(&d, &s, "TD_HOLD_FDATASYNC", ".lock", "30", &h);
	first = next_version(c) - 1; /* its block is on record: not held */
	cr_assert_gt(lock_next_version(&s), first);
	hold_on(&h);
	while (v < first + VERSION_BLOCK / 2 + 16)
		cr_assert_eq(td_client_put(c, &p, &b, 1, &v, &e), 0, "%s",
			     e.reason);
	/* the thread was handed the write at the half: it reaches the
	 * held fdatasync in its time (a loaded machine delays it) */
	for (int waited = 0; access(h.held, F_OK) < 0; waited += 10) {
		cr_assert_lt(waited, TU_WAIT_S * 1000,
			     "at version %llu, half a block past %llu, the "
			     "next block is not being put on record",
			     (unsigned long long)v, (unsigned long long)first);
		poll(NULL, 0, 10);
	}
	/* the disk still holds that write: the loop answers all the same */
	for (int i = 0; i < 100; i++)
		cr_assert_eq(td_client_put(c, &p, &b, 1, &v, &e), 0, "%s",
			     e.reason);
	cr_assert_eq(count(c), 1);
	cr_assert_eq(access(h.hold, F_OK), 0);
	unlink(h.hold);
	/* past the first block: each number on record before it is used */
	while (v < first + VERSION_BLOCK + 16)
		cr_assert_eq(td_client_put(c, &p, &b, 1, &v, &e), 0, "%s",
			     e.reason);
	cr_assert_gt(lock_next_version(&s), v);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	/* the clean stop leaves the counter itself */
	cr_assert_eq(lock_next_version(&s), v + 1);
	snapdir_rm(&s);
}

/*
 * FILE.lock's next_version damaged (edited by hand, a bad disk): a
 * negative one wrapped to 2^64-5 and one past 2^64-1 was clamped, and the
 * start said the last tensord "may have numbered versions up to
 * 18446744073709551610", which no daemon did; a line of no digits said
 * nothing. The start now says what is wrong with the number, takes
 * nothing from it, and numbers on from the snapshot's counter.
 */
Test(snapshot, a_damaged_lock_number_is_named_not_counted_from,
     .timeout = 90)
{
	static const struct {
		const char *num, *why;
	} bad[] = {
		{"-5", "next_version '-5' is negative"},
		{"99999999999999999999999",
		 "next_version '99999999999999999999999' is past 2^64-1"},
		{"36028797018963969", "is past the largest version number"},
		{"00000000000000000012ab", "is not a number"},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct snapdir s;
		struct tu_daemon d;
		struct td_client *c;
		char lock[160], text[128];
		uint64_t v;
		int n;

		snapdir_make(&s);
		snprintf(lock, sizeof(lock), "%s.lock", s.file);
		n = snprintf(text, sizeof(text), "%-20d\nnext_version %s\n",
			     1, bad[i].num);
		put_back(lock, (uint8_t *)strdup(text), (size_t)n);
		start(&d, &s, "sync", "30");
		c = conn(&d);
		v = next_version(c);
		td_client_close(c);
		tu_daemon_stop(&d, true);
		cr_expect_lt(v, 10, "%s: counted on to %llu", bad[i].num,
			     (unsigned long long)v);
		cr_expect(log_has(&s, bad[i].why), "%s: want \"%s\": %s",
			  bad[i].num, bad[i].why, tu_slurp(s.log));
		cr_expect(!log_has(&s, "may have been handed out"), "%s: %s",
			  bad[i].num, tu_slurp(s.log));
		snapdir_rm(&s);
	}
}

/* Until path exists (false: not within TU_WAIT_S). */
static bool await_file(const char *path)
{
	const struct timespec ms = {0, 1000000};

	for (int waited = 0; waited < TU_WAIT_S * 1000; waited++) {
		if (access(path, F_OK) == 0)
			return true;
		nanosleep(&ms, NULL);
	}
	return false;
}

/*
 * Without io_uring (TENSORD_IO=sync) the save's fsync of FILE.tmp, a
 * whole file's writeback (50-110 ms here, far more on a slow disk), ran
 * on the loop: no client was served until it returned. It runs on
 * libuv's thread pool now. The shim holds that fsync for as long as the
 * test likes: a new client connects and lists while it is held (before,
 * the connect waited for ever: this test's timeout), and the save ends
 * once it is let go.
 */
Test(snapshot, the_sync_engines_fsync_leaves_the_loop_serving,
     .timeout = 60)
{
	static const uint64_t shape = 1;
	struct td_publish p = {
	        .name = "f", .dtype = TD_TENSOR_U8, .ndim = 1, .shape = &shape};
	struct td_error e = {0};
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c, *c2;
	struct hold h;
	uint64_t v;
	uint8_t b = 7;

	snapdir_make(&s);
	c = start_held(&d, &s, "TD_HOLD_FSYNC", ".tmp", "0", &h);
	hold_on(&h);
	cr_assert_eq(td_client_put(c, &p, &b, 1, &v, &e), 0, "%s", e.reason);
	cr_assert(await_file(h.held), "the save's fsync of %s never came", h.path);
	c2 = conn(&d);
	cr_assert_eq(count(c2), 1);
	cr_assert_eq(access(h.hold, F_OK), 0);
	cr_assert_neq(access(s.file, F_OK), 0, "the save ended before");
	unlink(h.hold);
	cr_assert(await_file(s.file), "the save did not end");
	td_client_close(c2);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	snapdir_rm(&s);
}

/*
 * A snapshot of a format newer than this daemon reads (a downgrade after
 * an upgrade) was called "not a tensord snapshot", moved aside as
 * FILE.corrupt-<time> and the daemon started empty: the newer tensord,
 * run again, would read the empty snapshot saved meanwhile and not the
 * moved one. It is not damaged, so it stops the start like a file that
 * cannot be read, says what it is, and stays as it is.
 */
Test(snapshot, a_snapshot_of_a_newer_format_stops_the_start_and_stays,
     .timeout = 90)
{
	struct snapdir s;
	struct tu_daemon d;
	struct tensor a = mk("fmt/a", TD_TENSOR_U8, 100, 0, 100);
	const char *bin = getenv("TD_TENSORD");
	char sock[160], *out;
	char *argv[] = {(char *)bin, "--socket", sock, "--snapshot", s.file,
			NULL};

	snapdir_make(&s);
	snprintf(sock, sizeof(sock), "%s/td.sock", s.dir);
	saved_one(&d, &s, &a);
	set_kv_u64(s.file, "tensord.snapshot", 3);
	cr_assert_eq(tu_run_capture_all(argv, &out), 1, "%s", out);
	cr_expect(strstr(out, "a tensord snapshot of format 3, newer than "
			      "this tensord reads") &&
			  strstr(out, "not starting"),
		  "%s", out);
	free(out);
	cr_assert(!dir_has(&s, "snap.hrry.corrupt"), "moved aside");
	/* the newer daemon (format 2 again, here) finds it whole */
	set_kv_u64(s.file, "tensord.snapshot", 2);
	restart_holds(&d, &s, &a);
	snapdir_rm(&s);
}

/*
 * A Hurray file at the snapshot path that is not a tensord snapshot (its
 * tensord.snapshot says no format of ours) is moved aside whole: its
 * tensord.next_version raised the daemon's counter before, though
 * nothing of the file was used.
 */
Test(snapshot, a_foreign_hurray_file_leaves_the_version_counter_alone,
     .timeout = 60)
{
	struct snapdir s;
	struct tensor set[NSET];
	struct tu_daemon d;
	struct td_client *c;
	uint64_t v;

	saved(&s, set);
	set_kv_u64(s.file, "tensord.next_version", 5000);
	set_kv_u64(s.file, "tensord.snapshot", 0);
	cr_assert_eq(truncate(s.log, 0), 0);
	start(&d, &s, "sync", "30");
	c = conn(&d);
	cr_assert_eq(count(c), 0);
	v = next_version(c);
	cr_assert_lt(v, 100, "next version %llu", (unsigned long long)v);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "not a tensord snapshot"), "%s",
		  tu_slurp(s.log));
	snapdir_rm(&s);
}

/*
 * --snapshot naming a symbolic link to the snapshot: saves replace the
 * file it names (FILE.tmp beside that), and the link stays a link; a
 * rename over the link made it a regular file before, the target
 * keeping its old bytes.
 */
Test(snapshot, a_link_to_the_snapshot_stays_a_link, .timeout = 60)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor a = mk("l/a", TD_TENSOR_U8, 10, 0, 10);
	struct tensor b = mk("l/b", TD_TENSOR_U8, 20, 0, 20);
	char link[160];
	const char *extra[] = {"--snapshot", link, NULL};
	struct stat st;

	snapdir_make(&s);
	snprintf(link, sizeof(link), "%s/link.hrry", s.dir);
	saved_one(&d, &s, &a);
	cr_assert_eq(symlink("snap.hrry", link), 0);
	tu_daemon_start_log(&d, "info", extra, s.log, NULL);
	c = conn(&d);
	check(c, &a);
	put(c, &b, next_version(c));
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert_eq(lstat(link, &st), 0);
	cr_assert(S_ISLNK(st.st_mode), "the link became a file");
	check_file(s.file, (struct tensor[]){a, b}, 2);
	snapdir_rm(&s);
}

/* ---- saving while clients work ---- */

Test(snapshot, saves_while_clients_replace_tensors_stay_whole)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor big = mk("w/big", TD_TENSOR_U8, 8 << 20, 0, 8 << 20);
	struct tensor small = mk("w/small", TD_TENSOR_U8, 64, 0, 64);

	snapdir_make(&s);
	/*
	 * Interval 0: a save starts right after each change, so most of
	 * these requests meet one in progress (8 MiB is 32 loop
	 * iterations of the sync engine). Every save holds the versions it
	 * writes; what ends up on disk is whole whatever was replaced.
	 */
	start(&d, &s, "sync", "0");
	c = conn(&d);
	for (unsigned i = 0; i < 20; i++) {
		put(c, &big, next_version(c));
		put(c, &small, next_version(c));
		check(c, &small);
		check(c, &big);
	}
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "snapshot: saved"), "%s", tu_slurp(s.log));
	check_any(&s, "sync", 2);
	snapdir_rm(&s);
}

/* ---- a file size limit (RLIMIT_FSIZE: systemd's LimitFSIZE=) ---- */

#define FSIZE_LIMIT (64u << 10)

static void limit_fsize(void)
{
	struct rlimit rl = {FSIZE_LIMIT, FSIZE_LIMIT};

	if (setrlimit(RLIMIT_FSIZE, &rl) < 0)
		_exit(125);
}

/*
 * Growing a file past RLIMIT_FSIZE raises SIGXFSZ, which killed the
 * daemon (its default action): a client's ALLOC over the limit (the
 * memfd's ftruncate) or a save whose file grew past it. Ignored, the
 * ALLOC is refused with EFBIG and the save fails like any disk error:
 * logged, FILE.tmp removed, the previous snapshot kept, the daemon up.
 */
Test(snapshot, a_file_size_limit_fails_a_save_not_the_daemon, .timeout = 60)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct td_error e = {0};
	struct tensor a = mk("z/a", TD_TENSOR_U8, 4096, 0, 4096);
	struct tensor b = mk("z/b", TD_TENSOR_U8, 40000, 0, 40000);
	struct tensor b2 = mk("z/b2", TD_TENSOR_U8, 40000, 0, 40000);
	const char *extra[] = {"--snapshot", s.file, "--snapshot-interval",
			       "30", NULL};
	uint64_t shape = FSIZE_LIMIT * 2, v;
	struct td_publish p = {.name = "z/big",
			       .dtype = TD_TENSOR_U8,
			       .ndim = 1,
			       .shape = &shape};
	uint8_t *big = calloc(1, shape), *before, *after;
	size_t blen, alen;
	int rc;

	cr_assert_not_null(big);
	snapdir_make(&s);
	saved_one(&d, &s, &a);
	before = tu_read_file(s.file, &blen);

	/* the same, under a file size limit the next save outgrows */
	tu_daemon_start_log(&d, "info", extra, s.log, limit_fsize);
	c = conn(&d);
	rc = td_client_put(c, &p, big, shape, &v, &e);
	cr_assert_eq(rc, -EFBIG, "an ALLOC over RLIMIT_FSIZE: %d (%s)", rc,
		     e.reason);
	put(c, &b, next_version(c));
	put(c, &b2, next_version(c));
	cr_assert_eq(count(c), 3);
	td_client_close(c);
	/* the final save fails: the exit status says so (it was 0, and
	 * systemd showed a stop that lost data as a clean one) */
	tu_daemon_stop_status(&d, true, 1);
	cr_assert(log_has(&s, "File too large"), "%s", tu_slurp(s.log));
	cr_assert(log_has(&s, "exit status 1: the final snapshot save failed"),
		  "%s", tu_slurp(s.log));
	/* no promise of a retry that a stopping daemon cannot keep */
	cr_assert(log_has(&s, "not retried: the daemon is stopping") &&
			  !log_has(&s, "retried in"),
		  "%s", tu_slurp(s.log));
	cr_assert(!dir_has(&s, "snap.hrry.tmp"));
	after = tu_read_file(s.file, &alen);
	cr_assert(alen == blen && !memcmp(before, after, blen),
		  "the previous snapshot changed");

	start(&d, &s, "sync", "30");
	c = conn(&d);
	cr_assert_eq(count(c), 1);
	check(c, &a);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	free(big);
	free(before);
	free(after);
	snapdir_rm(&s);
}

/*
 * A read of the snapshot that fails (EIO: the disk, for now) is no sign
 * that the file is damaged. It was taken for one: moved aside as
 * FILE.corrupt-<time> and the daemon started empty, so the next start
 * did not read it either and the tensors were gone unless someone
 * noticed. Now it is handled like a file that cannot be opened: the
 * start stops, the file stays, and the next start restores it. The
 * shim (raise-before-open.c) fails the first pread of the file.
 */
/*
 * The shim fails a pread of the snapshot (the first; with at, the one
 * at that offset): the start stops (saying says and then, when not
 * NULL), the
 * file stays as it was, neither moved aside nor kept as partial, and the
 * next start restores it.
 */
static void read_error_case(const char *at, const char *says,
			    const char *then)
{
	const char *bin = getenv("TD_TENSORD");
	struct snapdir s;
	struct tu_daemon d;
	struct tensor a = mk("e/a", TD_TENSOR_U8, 5000, 0, 5000);
	char sock[160], *out;
	uint8_t *before, *after;
	size_t blen, alen;

	cr_assert_not_null(bin);
	snapdir_make(&s);
	snprintf(sock, sizeof(sock), "%s/td.sock", s.dir);
	saved_one(&d, &s, &a);
	before = tu_read_file(s.file, &blen);
	/* only the daemon's environment: it is exec'ed with ours */
	tu_shim_on("TD_FAIL_PREAD", s.file);
	if (at)
		cr_assert_eq(setenv("TD_FAIL_PREAD_AT", at, 1), 0);
	cr_assert_eq(setenv("TENSORD_IO", "sync", 1), 0);
	{
		char *argv[] = {(char *)bin, "--socket", sock, "--snapshot",
				s.file, NULL};

		cr_expect_eq(tu_run_capture_all(argv, &out), 1, "%s", out);
	}
	cr_expect(!says || (strstr(out, says) && strstr(out, then)), "%s",
		  out);
	free(out);
	unsetenv("TD_FAIL_PREAD_AT");
	tu_shim_off("TD_FAIL_PREAD");
	cr_expect(!dir_has(&s, "snap.hrry.partial"), "kept as partial");
	cr_expect(!dir_has(&s, "snap.hrry.corrupt"), "moved aside");
	after = tu_read_file(s.file, &alen);
	cr_expect(alen == blen && !memcmp(before, after, blen));

	restart_holds(&d, &s, &a);
	free(before);
	free(after);
	snapdir_rm(&s);
}

Test(snapshot, a_read_error_stops_the_start_and_keeps_the_file,
     .timeout = 90)
{
	read_error_case(NULL, NULL, NULL);
}

/*
 * The folder's fsync fails after the rename: the new snapshot is FILE
 * already. The log said "the previous one is kept", which was false.
 */
Test(snapshot, a_failed_folder_fsync_says_the_new_snapshot_is_in_place,
     .timeout = 60)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor a = mk("f/a", TD_TENSOR_U8, 100, 0, 100);

	snapdir_make(&s);
	tu_shim_on("TD_FAIL_FSYNC", s.dir);
	start(&d, &s, "sync", "30");
	tu_shim_off("TD_FAIL_FSYNC");
	c = conn(&d);
	put(c, &a, next_version(c));
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "fsync of") &&
			  log_has(&s, "the new one is in place") &&
			  !log_has(&s, "the previous one is kept"),
		  "%s", tu_slurp(s.log));
	check_file(s.file, &a, 1);
	snapdir_rm(&s);
}

/*
 * --snapshot naming what is not a regular file, itself (a folder, a
 * device: `--snapshot /dev/null`) or through a link (to a folder, a
 * device, a FIFO): it used to be renamed FILE.corrupt-<time> wherever
 * it was, and the next save put a regular file in its place; a link to
 * /tmp moved /tmp aside, a link to /dev/zero replaced /dev/zero. Now the
 * daemon does not start, says why, and leaves everything as it was.
 */
static void refused_untouched(struct snapdir *s, const char *snap,
			      const char *what, const char *target,
			      mode_t type)
{
	const char *bin = getenv("TD_TENSORD");
	char sock[160], aside[200];
	char *argv[] = {(char *)bin, "--socket", sock, "--snapshot",
			(char *)snap, NULL};
	char *out;
	struct stat st;
	int rc;

	snprintf(sock, sizeof(sock), "%s/td.sock", s->dir);
	rc = tu_run_capture_all(argv, &out);
	cr_expect_eq(rc, 1, "%s: the daemon started: %s", what, out);
	cr_expect(strstr(out, what) && strstr(out, "not starting"), "%s",
		  out);
	free(out);
	cr_assert_eq(lstat(target, &st), 0, "%s is gone", target);
	cr_expect_eq(st.st_mode & S_IFMT, type, "%s was replaced", target);
	snprintf(aside, sizeof(aside), "%s.corrupt-", strrchr(target, '/') + 1);
	cr_expect_not(dir_has(s, aside), "%s moved aside", target);
}

Test(snapshot, a_folder_or_device_at_the_snapshot_path_is_left_alone,
     .timeout = 60)
{
	struct snapdir s;
	char dir[160], keep[200], fifo[160], dev[160];

	snapdir_make(&s);
	snprintf(dir, sizeof(dir), "%s/target", s.dir);
	snprintf(keep, sizeof(keep), "%s/keep", dir);
	snprintf(fifo, sizeof(fifo), "%s/ff", s.dir);
	snprintf(dev, sizeof(dev), "%s/null", s.dir);
	cr_assert_eq(mkdir(dir, 0700), 0);
	fclose(fopen(keep, "w"));
	cr_assert_eq(mkfifo(fifo, 0600), 0);

	refused_untouched(&s, dir, "is a folder", dir, S_IFDIR);
	cr_assert_eq(symlink("target", s.file), 0);
	refused_untouched(&s, s.file, "is a folder", dir, S_IFDIR);
	cr_expect_eq(access(keep, F_OK), 0);
	cr_assert_eq(unlink(s.file), 0);
	cr_assert_eq(symlink("ff", s.file), 0);
	refused_untouched(&s, s.file, "is a FIFO", fifo, S_IFIFO);
	/* a device of our own, not /dev/null: a regression must not
	 * rename the machine's */
	if (mknod(dev, S_IFCHR | 0600, makedev(1, 3)) == 0) {
		refused_untouched(&s, dev, "is a character device", dev,
				  S_IFCHR);
		cr_assert_eq(unlink(s.file), 0);
		cr_assert_eq(symlink("null", s.file), 0);
		refused_untouched(&s, s.file, "is a character device", dev,
				  S_IFCHR);
	}
	unlink(keep);
	rmdir(dir);
	snapdir_rm(&s);
}

/*
 * The daemon ended, bounded (a daemon that starts is ended after 10 s:
 * 124), with what it said; want in it and "not starting".
 */
static void start_refused(const char *snap, const char *want)
{
	const char *bin = getenv("TD_TENSORD");
	char sock[200];
	char *argv[] = {"/usr/bin/timeout", "10", (char *)bin, "--socket",
			sock, "--snapshot", (char *)snap, NULL};
	char *out;

	snprintf(sock, sizeof(sock), "%.150s.sock", snap);
	cr_expect_eq(tu_run_capture_all(argv, &out), 1, "%s", out);
	cr_expect(strstr(out, want) && strstr(out, "not starting"),
		  "want \"%s\": %s", want, out);
	free(out);
	unlink(sock);
}

/*
 * Another user's symbolic link at FILE, in a sticky world-writable
 * folder (`--snapshot /tmp/td.hrry`, planted before the first start): the
 * daemon resolved it itself (realpath), where the kernel's
 * protected_symlinks rule does not look, then moved the file it named
 * aside as corrupt (renamed a root file) and would have replaced it at
 * the next save. Now it does not start, and nothing is touched.
 */
Test(snapshot, another_users_link_at_the_snapshot_path_is_not_followed,
     .timeout = 60)
{
	struct snapdir s;
	char victim[160], link2[160], buf[8] = "";
	FILE *f;

	cr_assert_eq(geteuid(), 0, "this test runs as root (as CI does)");
	snapdir_make(&s);
	cr_assert_eq(chmod(s.dir, 01777), 0);
	snprintf(victim, sizeof(victim), "%s/victim", s.dir);
	snprintf(link2, sizeof(link2), "%s/link2", s.dir);
	f = fopen(victim, "w");
	cr_assert_not_null(f);
	fputs("keep", f);
	fclose(f);
	/* another uid's link, straight or behind one of root's */
	for (int i = 0; i < 2; i++) {
		const char *theirs = i ? link2 : s.file;

		cr_assert_eq(symlink("victim", theirs), 0);
		cr_assert_eq(lchown(theirs, 4242, 4242), 0);
		if (i)
			cr_assert_eq(symlink("link2", s.file), 0);
		start_refused(s.file, "is a symbolic link of uid 4242");
		cr_expect_not(dir_has(&s, "victim.corrupt"), "moved aside");
		f = fopen(victim, "r");
		cr_assert_not_null(f, "the victim is gone");
		cr_expect_eq(fread(buf, 1, 4, f), 4);
		fclose(f);
		cr_expect_str_eq(buf, "keep");
		cr_expect_not(dir_has(&s, "victim.tmp"));
		unlink(s.file);
		unlink(link2);
	}
	snapdir_rm(&s);
}

/*
 * A snapshot another user could have written (theirs, or writable by
 * its group or every user): its versions came back under any name, past --policy and
 * the quotas (restored versions are no uid's). Now it is not read, the
 * daemon says why and does not start, and the file stays as it is; made
 * the daemon's (or root's) again, it is restored whole.
 */
Test(snapshot, a_snapshot_another_user_could_write_is_not_read,
     .timeout = 90)
{
	struct snapdir s;
	struct tu_daemon d;
	struct tensor a = mk("own/a", TD_TENSOR_U8, 100, 0, 100);

	cr_assert_eq(geteuid(), 0, "this test runs as root (as CI does)");
	snapdir_make(&s);
	saved_one(&d, &s, &a);
	cr_assert_eq(chmod(s.file, 0666), 0);
	start_refused(s.file, "is writable by every user (mode 0666)");
	/* a group's members other than the daemon's user, likewise */
	cr_assert_eq(chmod(s.file, 0620), 0);
	start_refused(s.file, "is writable by its group (mode 0620)");
	cr_assert_eq(chmod(s.file, 0600), 0);
	cr_assert_eq(chown(s.file, 4242, 4242), 0);
	start_refused(s.file, "belongs to uid 4242");
	cr_expect_not(dir_has(&s, "snap.hrry.corrupt"), "moved aside");
	check_file(s.file, &a, 1);
	cr_assert_eq(chown(s.file, 0, 0), 0);
	restart_holds(&d, &s, &a);
	snapdir_rm(&s);
}

/*
 * --snapshot "" (a unit's unset variable) or a folder's name ending in
 * '/' is a bad command line, exit 2: "" was taken, locked ".lock" in the
 * daemon's working folder and failed every save (rename to ""). And so
 * is --socket "".
 */
Test(snapshot, empty_snapshot_or_socket_paths_are_a_bad_command_line,
     .timeout = 60)
{
	static const char *const bad[] = {"", "state/"};
	const char *bin = getenv("TD_TENSORD");
	struct snapdir s;
	char sock[160];
	char *out;

	snapdir_make(&s);
	snprintf(sock, sizeof(sock), "%s/td.sock", s.dir);
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		/* bounded: a daemon that starts is ended after 3 s (124) */
		char *argv[] = {"/usr/bin/timeout", "3", (char *)bin,
				"--socket", sock,
				"--snapshot", (char *)bad[i], NULL};
		int rc = tu_run_capture_all(argv, &out);

		cr_expect_eq(rc, 2, "'%s': %s", bad[i], out);
		cr_expect(strstr(out, "--snapshot: want a file path"), "%s",
			  out);
		free(out);
	}
	/* --socket "" likewise: bind() autobound an abstract address no
	 * client can name, and the log said "listening on " */
	{
		char *argv[] = {"/usr/bin/timeout", "3", (char *)bin,
				"--socket", "", NULL};
		int rc = tu_run_capture_all(argv, &out);

		cr_expect_eq(rc, 2, "--socket '': %s", out);
		cr_expect(strstr(out, "--socket: want a path"), "%s", out);
		free(out);
	}
	snapdir_rm(&s);
}

/*
 * Two daemons on one snapshot (two sockets, one --snapshot): the second
 * one's start removed the first's FILE.tmp, their saves removed and
 * renamed each other's FILE.tmp (a save could rename the other's
 * half-written file over FILE), and each stop replaced the other's
 * tensors. The second one now does not start and names the first; a
 * first one killed by SIGKILL leaves no stale lock behind.
 */
Test(snapshot, a_second_daemon_on_the_same_snapshot_does_not_start,
     .timeout = 90)
{
	struct snapdir s;
	struct tu_daemon d;
	struct tensor a = mk("two/a", TD_TENSOR_U8, 100, 0, 100);
	const char *bin = getenv("TD_TENSORD");
	char sock[160], pid[32], *out;
	char *argv[] = {(char *)bin, "--socket", sock, "--snapshot", s.file,
			NULL};

	snapdir_make(&s);
	snprintf(sock, sizeof(sock), "%s/second.sock", s.dir);
	saved_one(&d, &s, &a);
	start(&d, &s, "sync", "30");
	cr_assert_eq(tu_run_capture_all(argv, &out), 1, "%s", out);
	snprintf(pid, sizeof(pid), "pid %d", (int)d.pid);
	cr_expect(strstr(out, "in use by another tensord") && strstr(out, pid),
		  "%s", out);
	free(out);
	cr_expect_eq(access(sock, F_OK), -1, "the second one listened");

	/* the first is killed, mid-life: its lock goes with it */
	tu_daemon_kill(&d);
	restart_holds(&d, &s, &a);
	snapdir_rm(&s);
}

/*
 * A link to a snapshot not written yet (a first start, the link made
 * ahead, say to a bigger disk): the first save renamed over the link,
 * which became the snapshot itself, and the file it named was never
 * written. The file it names is now the one written, and read back.
 */
Test(snapshot, a_link_to_a_snapshot_not_there_yet_is_followed,
     .timeout = 60)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor a = mk("l/first", TD_TENSOR_U8, 10, 0, 10);
	char link[160];
	const char *extra[] = {"--snapshot", link, NULL};
	struct stat st;

	snapdir_make(&s);
	snprintf(link, sizeof(link), "%s/link.hrry", s.dir);
	cr_assert_eq(symlink("snap.hrry", link), 0);
	cr_assert_eq(setenv("TENSORD_IO", "sync", 1), 0);
	tu_daemon_start_log(&d, "info", extra, s.log, NULL);
	c = conn(&d);
	put(c, &a, next_version(c));
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert_eq(lstat(link, &st), 0);
	cr_assert(S_ISLNK(st.st_mode), "the link became a file");
	check_file(s.file, &a, 1);
	tu_daemon_start_log(&d, "info", extra, s.log, NULL);
	c = conn(&d);
	check(c, &a);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	snapdir_rm(&s);
}

/* ---- a descriptor limit (RLIMIT_NOFILE: systemd's LimitNOFILE=) ---- */

#define NOFILE_LIMIT 200u
#define NOFILE_TENSORS 190u

static void limit_nofile(void)
{
	struct rlimit rl = {NOFILE_LIMIT, NOFILE_LIMIT};

	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		_exit(125);
}

/*
 * A restart under a descriptor limit smaller than the snapshot needs
 * (one per plane): the restore took descriptors until the limit, the
 * reserve kept for root included, and the daemon came up refusing
 * every connection, root's too, so nothing could even be listed or
 * deleted. It now stops before the reserve; the rest is left out (the
 * file kept as FILE.partial-<time>) and root gets in.
 */
Test(snapshot, a_restore_leaves_the_descriptor_reserve_to_root,
     .timeout = 90)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	const char *extra[] = {"--snapshot", s.file, NULL};
	static char names[NOFILE_TENSORS][16];
	struct tensor t;
	size_t n;

	snapdir_make(&s);
	start(&d, &s, "sync", "30");
	c = conn(&d);
	for (unsigned i = 0; i < NOFILE_TENSORS; i++) {
		snprintf(names[i], sizeof(names[i]), "fd/%u", i);
		t = mk(names[i], TD_TENSOR_U8, 8, 0, 8);
		put(c, &t, next_version(c));
	}
	td_client_close(c);
	tu_daemon_stop(&d, true);

	cr_assert_eq(setenv("TENSORD_IO", "sync", 1), 0);
	tu_daemon_start_log(&d, "info", extra, s.log, limit_nofile);
	c = conn(&d); /* as root: the reserve is root's */
	n = count(c);
	cr_expect(n > 0 && n < NOFILE_TENSORS, "%zu restored", n);
	cr_expect(log_has(&s, "would eat into the reserve"), "%s",
		  tu_slurp(s.log));
	cr_expect(dir_has(&s, "snap.hrry.partial-"));
	td_client_close(c);
	tu_daemon_stop(&d, true);
	snapdir_rm(&s);
}

/*
 * A fence still unsignalled at the stop: no later save picks its
 * version up, so the final save goes without the name, and the version
 * an earlier save held is gone from the file too. That was logged at
 * debug level only; the stop now warns, naming it.
 */
Test(snapshot, a_fence_unsignalled_at_the_stop_is_warned_about,
     .timeout = 60)
{
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct td_error e = {0};
	struct tensor a = mk("f/stop", TD_TENSOR_U8, 64, 0, 64);
	int fd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int ev = eventfd(0, EFD_CLOEXEC);
	struct td_publish p = {.name = a.name,
			       .flags = TD_PUBLISH_FENCE,
			       .dtype = TD_TENSOR_U8,
			       .ndim = 1,
			       .shape = a.shape,
			       .fd_count = 1,
			       .fds = &fd,
			       .fence_fd = ev};

	cr_assert(fd >= 0 && ev >= 0);
	cr_assert_eq(ftruncate(fd, 64), 0);
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	snapdir_make(&s);
	saved_one(&d, &s, &a);
	check_file(s.file, &a, 1);

	start(&d, &s, "sync", "30");
	c = conn(&d);
	cr_assert_eq(td_client_publish(c, &p, NULL, &e), 0, "%s", e.reason);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "not saving \"f/stop\": its fence is not "
			      "signalled yet; the final save goes without it"),
		  "%s", tu_slurp(s.log));
	close(fd);
	close(ev);
	snapdir_rm(&s);
}

/*
 * A read of a tensor's bytes fails (EIO) at the restore, past the
 * header, index and KV: no sign of damage either. The version used to be
 * skipped as if damaged and the daemon started without it: the next
 * save replaced FILE without it (only FILE.partial-<time> held it, and
 * no start reads that). Now the start stops, as for a read error before
 * the KV, and FILE stays as it is for a start that can read it.
 */
Test(snapshot, a_read_error_in_a_tensors_bytes_stops_the_start_too,
     .timeout = 90)
{
	/* alignment 4096: the one tensor's bytes start at 4096 */
	read_error_case("4096", "reading \"e/a\"", "the file stays as it is");
}

/*
 * The same left-out version on a file system without hard links (link()
 * refused: EPERM): FILE.partial-<time> could not be made, the log said
 * "the next save replaces it", and the next save did: p/big was gone
 * for good. The file is copied there instead.
 */
Test(snapshot, a_kept_copy_is_made_where_links_are_refused, .timeout = 60)
{
	kept_copy_case("q", "TD_FAIL_LINK", "1", "not restoring \"q/big\"");
}

/* ---- no room to restore: the start stops, nothing is dropped ---- */

/*
 * m/big (1 MiB) and m/small saved; a start with extra arguments under
 * the shim's var=val (and TD_FAIL_CREATE=FILE.partial-* with create)
 * exits with status 1 saying says (and then), the file stays as it was (not kept as
 * partial, not moved aside), and the next start restores both.
 */
static void no_room_case(const char *var, const char *val, bool create,
			 const char *extra, const char *says,
			 const char *then)
{
	const char *bin = getenv("TD_TENSORD");
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor big = mk("m/big", TD_TENSOR_U8, 1 << 20, 0, 1 << 20);
	struct tensor small = mk("m/small", TD_TENSOR_U8, 100, 0, 100);
	char sock[160], pat[200], *out;
	uint8_t *before, *after;
	size_t blen, alen;

	cr_assert_not_null(bin);
	snapdir_make(&s);
	snprintf(sock, sizeof(sock), "%s/td.sock", s.dir);
	start(&d, &s, "sync", "30");
	c = conn(&d);
	put(c, &big, next_version(c));
	put(c, &small, next_version(c));
	td_client_close(c);
	tu_daemon_stop(&d, true);
	before = tu_read_file(s.file, &blen);
	/* only the daemon's environment: it is exec'ed with ours */
	tu_shim_on(var, val);
	cr_assert_eq(setenv("TD_FAIL_FALLOCATE_ERRNO", "28", 1), 0);
	snprintf(pat, sizeof(pat), "%s.partial-*", s.file);
	if (create)
		cr_assert_eq(setenv("TD_FAIL_CREATE", pat, 1), 0);
	cr_assert_eq(setenv("TENSORD_IO", "sync", 1), 0);
	{
		char *argv[] = {(char *)bin, "--socket", sock, "--snapshot",
				s.file, extra ? "--max-bytes" : NULL,
				(char *)extra, NULL};

		cr_expect_eq(tu_run_capture_all(argv, &out), 1, "%s", out);
	}
	cr_expect(strstr(out, says) && (!then || strstr(out, then)), "%s",
		  out);
	free(out);
	unsetenv("TD_FAIL_CREATE");
	unsetenv("TD_FAIL_FALLOCATE_ERRNO");
	tu_shim_off(var);
	cr_expect(!dir_has(&s, "snap.hrry.partial"), "kept as partial");
	cr_expect(!dir_has(&s, "snap.hrry.corrupt"), "moved aside");
	after = tu_read_file(s.file, &alen);
	cr_expect(alen == blen && !memcmp(before, after, blen),
		  "the file changed");
	/* room again: everything comes back */
	start(&d, &s, "sync", "30");
	c = conn(&d);
	cr_expect_eq(count(c), 2);
	check(c, &big);
	check(c, &small);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	free(before);
	free(after);
	snapdir_rm(&s);
}

/*
 * A memfd for a tensor's bytes that cannot be made (ENOSPC: a tmpfs or
 * memfd size limit, a memory cgroup) says nothing about the file. The
 * version was left out of the restore and the file kept as
 * FILE.partial-<time>, which no start reads: the tensors came back only
 * by hand, and where the copy failed too the next save dropped them for
 * good. Now the start stops with the reason and the file stays; the
 * operator makes room (or leaves versions out with --max-bytes, below).
 */
Test(snapshot, a_memfd_out_of_room_stops_the_start_and_keeps_the_file,
     .timeout = 90)
{
	no_room_case("TD_FAIL_FALLOCATE_OVER", "65536", false, NULL,
		     "cannot be restored (no room for \"m/big\": a memfd of "
		     "1048576 bytes: cannot reserve memory for the memfd: No "
		     "space left on device): not starting; the file stays as "
		     "it is",
		     NULL);
}

/*
 * A version --max-bytes leaves out is kept in FILE.partial-<time>; when
 * that copy cannot be made (no hard links, and the folder full), the
 * next save dropped the version for good, with a line in the log. Now
 * the start stops and the file stays.
 */
Test(snapshot, a_left_out_version_whose_copy_fails_stops_the_start,
     .timeout = 90)
{
	no_room_case("TD_FAIL_LINK", "1", true, "65536",
		     "1 tensors not restored, and keeping ",
		     ".partial-<time> failed (No space left on device): not "
		     "starting; the file stays as it is");
}

/* ---- the loop's work per turn while many small tensors are saved ---- */

/*
 * The daemon runs under tests/malloc-count.c (LD_PRELOAD), which counts
 * its allocations per loop turn (between two epoll waits) and its memcmp
 * calls. ASan replaces malloc itself: not built into a sanitized binary
 * (as tests/test-recycle.c's heap tests), the plain build runs it.
 */
#ifndef __SANITIZE_ADDRESS__
#include "malloc-count.h"

#define MANY 1000

static void wait_log(const struct snapdir *s, const char *text)
{
	/* the test's timeout bounds it */
	while (!log_has(s, text))
		usleep(10000);
}

static void put_small(struct td_client *c, unsigned i)
{
	static const uint64_t shape = 64;
	struct td_publish p = {.dtype = TD_TENSOR_U8,
			       .ndim = 1,
			       .shape = &shape};
	struct td_error e = {0};
	uint8_t b[64];
	char name[32];
	uint64_t v;

	snprintf(name, sizeof(name), "many/t%04u", i);
	memset(b, (int)i, sizeof(b));
	p.name = name;
	cr_assert_eq(td_client_put(c, &p, b, sizeof(b), &v, &e), 0, "%s",
		     e.reason);
}

/*
 * A save of 1000 small tensors: no loop turn does the work of all of
 * them, and the comparisons do not grow with their square. A client
 * request waited ~3 s while a save of 5000 ran: the writer compared
 * every pair of its 27 000 KV keys (twice), and the save's start
 * prepared every version (fstat, blob copy, keys, ~3.5 allocations
 * each) in the turn that started it. Now keys are sorted, and versions
 * are prepared a few at a time as their records come (at most 16 per
 * pass, each turn of the sync engine at most 64 requests).
 */
Test(snapshot, a_save_of_many_tensors_does_little_work_per_loop_turn,
     .timeout = 240)
{
	const char *shim = getenv("TD_MALLOC_COUNT");
	char path[32] = "/tmp/td-heap-XXXXXX", text[64];
	volatile struct td_malloc_counts *n;
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	uint64_t cmp0, cmps, turn;

	cr_assert(shim, "TD_MALLOC_COUNT is not set (run through meson test)");
	n = tu_counts_map(path);
	snapdir_make(&s);
	/* only the daemon's environment: it is exec'ed with ours */
	cr_assert_eq(setenv("LD_PRELOAD", shim, 1), 0);
	cr_assert_eq(setenv("TD_MALLOC_COUNT_FILE", path, 1), 0);
	start(&d, &s, "sync", "0"); /* a save right after each change */
	unsetenv("LD_PRELOAD");
	unsetenv("TD_MALLOC_COUNT_FILE");
	c = conn(&d);
	for (unsigned i = 0; i < MANY; i++)
		put_small(c, i);
	snprintf(text, sizeof(text), "saved %u tensors", MANY);
	wait_log(&s, text);
	cr_assert_gt(n->turns, 0, "the daemon ran without the shim");
	/* one more: one save of MANY + 1, counted from here */
	n->turn_max = 0;
	cmp0 = n->memcmp;
	put_small(c, MANY);
	snprintf(text, sizeof(text), "saved %u tensors", MANY + 1);
	wait_log(&s, text);
	turn = n->turn_max;
	cmps = n->memcmp - cmp0;
	cr_log_info("save of %u tensors: at most %llu allocations in one "
		    "loop turn, %llu memcmp calls",
		    MANY + 1, (unsigned long long)turn,
		    (unsigned long long)cmps);
	/* all of them in one turn: ~3.5 allocations each */
	cr_assert_lt(turn, MANY / 4, "%llu allocations in one loop turn",
		     (unsigned long long)turn);
	/* every pair of ~6000 keys, twice: ~36 000 per tensor */
	cr_assert_lt(cmps / (MANY + 1), 1000, "%llu memcmp calls",
		     (unsigned long long)cmps);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	munmap((void *)n, 4096);
	unlink(path);
	snapdir_rm(&s);
}
#endif /* !__SANITIZE_ADDRESS__ */

/* ---- PUBLISH_MANY and saves (docs/protocol.md §6.10) ---- */

#define STEP_NAMES 8

static const char *step_names[STEP_NAMES] = {"st/0", "st/1", "st/2", "st/3",
					     "st/4", "st/5", "st/6", "st/7"};

struct stepper {
	const struct tu_daemon *d;
	atomic_uint steps;
};

/* PUBLISH_MANY of the eight names, each byte of a step the step's, until
 * the daemon goes (the writer sees the kill as a failed call). */
static void *stepper_main(void *arg)
{
	struct stepper *st = arg;
	struct td_client *c = conn(st->d);
	static const uint64_t shape[1] = {64};
	struct td_publish p[STEP_NAMES];
	uint64_t size = 64;

	for (int i = 0; i < STEP_NAMES; i++)
		p[i] = (struct td_publish){.name = step_names[i],
					   .dtype = TD_TENSOR_U8, .ndim = 1,
					   .shape = shape};
	for (unsigned s = 1;; s++) {
		struct td_alloc *a[STEP_NAMES];
		int rc = 0, n = 0;

		for (; n < STEP_NAMES && rc == 0; n++) {
			rc = td_client_alloc_ex(c, 1, &size,
						s % 2 ? TD_ALLOC_RECYCLE : 0,
						&a[n], NULL);
			if (rc == 0)
				memset(td_alloc_data(a[n], 0), (int)(s % 251),
				       64);
		}
		if (rc == 0)
			rc = td_client_publish_many(c, STEP_NAMES, a, p, NULL,
						    NULL);
		else
			while (--n > 0)
				td_alloc_free(a[n - 1]);
		if (rc < 0)
			break;
		atomic_store(&st->steps, s);
	}
	td_client_close(c);
	return NULL;
}

/*
 * A daemon saving after every change (--snapshot-interval 0) while a
 * client publishes eight names a step with PUBLISH_MANY, killed in the
 * middle: whatever save it last finished, the restart has the eight
 * names from one step, never some of one and some of another.
 */
Test(snapshot, a_save_never_splits_a_publish_many)
{
	struct snapdir s;
	struct tu_daemon d;
	struct stepper st = {0};
	struct td_client *c;
	struct td_tensor *t[STEP_NAMES];
	struct td_error e = {0};
	pthread_t th;
	uint8_t b;

	snapdir_make(&s);
	start(&d, &s, "sync", "0");
	st.d = &d;
	cr_assert_eq(pthread_create(&th, NULL, stepper_main, &st), 0);
	/* a few saves into the steps, then the crash */
	while (atomic_load(&st.steps) < 200 || !log_has(&s, "saved 8"))
		usleep(1000);
	tu_daemon_kill(&d);
	cr_assert_eq(pthread_join(th, NULL), 0);
	start(&d, &s, "sync", "30");
	c = conn(&d);
	cr_assert_eq(td_client_get_many(c, STEP_NAMES, step_names, t, &e), 0,
		     "%s", e.reason);
	b = ((const uint8_t *)td_tensor_plane_data(t[0], 0))[0];
	for (int i = 0; i < STEP_NAMES; i++) {
		const uint8_t *x = td_tensor_plane_data(t[i], 0);

		for (int k = 0; k < 64; k++)
			cr_assert_eq(x[k], b, "name %d byte %d: step %u, not %u",
				     i, k, x[k], b);
		td_tensor_release(t[i]);
	}
	td_client_close(c);
	tu_daemon_stop(&d, false);
	snapdir_rm(&s);
}

/* ---- which names a snapshot keeps (--snapshot-prefix, --snapshot-skip) */

/* start() with these options more (NULL-ended), the sync engine */
static void start_sel(struct tu_daemon *d, struct snapdir *s,
		      const char *interval, const char *const *sel)
{
	const char *extra[16] = {"--snapshot", s->file, "--snapshot-interval",
				 interval};
	size_t n = 4;

	while (sel && *sel && n < 15)
		extra[n++] = *sel++;
	extra[n] = NULL;
	cr_assert_eq(setenv("TENSORD_IO", "sync", 1), 0);
	tu_daemon_start_log(d, "info", extra, s->log, NULL);
}

static void absent(struct td_client *c, const char *name)
{
	struct td_tensor *x = NULL;
	struct td_error e = {0};

	cr_assert_eq(td_client_get(c, name, &x, &e), -ENOENT,
		     "%s is there", name);
}

/*
 * A stream under cam/ beside model weights: only model/ goes into the
 * file, and only model/ comes back. The start says what is kept.
 */
Test(snapshot, only_the_names_under_snapshot_prefix_are_kept, .timeout = 60)
{
	static const char *const sel[] = {"--snapshot-prefix", "model/",
					  "--snapshot-prefix", "calib/", NULL};
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor w = mk("model/w", TD_TENSOR_F32, 3, 5, 60);
	struct tensor k = mk("calib/t", TD_TENSOR_U8, 100, 0, 100);
	struct tensor cam = mk("cam/0", TD_TENSOR_U8, 4096, 0, 4096);
	struct tensor set[2];
	uint64_t v;

	snapdir_make(&s);
	start_sel(&d, &s, "30", sel);
	cr_assert(log_has(&s, "keeps the names under \"model/\", \"calib/\""),
		  "%s", tu_slurp(s.log));
	c = conn(&d);
	v = next_version(c);
	put(c, &cam, v++);
	put(c, &w, v++);
	put(c, &k, v++);
	/* "model" without its '/' is not under "model/" */
	cam.name = "model";
	put(c, &cam, v++);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "saved 2 tensors"), "%s", tu_slurp(s.log));
	/* the file, by the Hurray reader: the kept two and nothing else */
	set[0] = k; /* name order */
	set[1] = w;
	check_file(s.file, set, 2);

	start_sel(&d, &s, "30", sel);
	c = conn(&d);
	cr_assert_eq(count(c), 2);
	check(c, &w);
	check(c, &k);
	absent(c, "cam/0");
	absent(c, "model");
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "restored 2 of 2 tensors"), "%s",
		  tu_slurp(s.log));
	snapdir_rm(&s);
}

/* --snapshot-skip wins over --snapshot-prefix, and works alone. */
Test(snapshot, snapshot_skip_wins_over_snapshot_prefix, .timeout = 60)
{
	static const char *const both[] = {"--snapshot-skip", "cam/raw/",
					   "--snapshot-prefix", "cam/", NULL};
	static const char *const skip[] = {"--snapshot-skip", "cam/", NULL};
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor t[3] = {mk("cam/0", TD_TENSOR_U8, 64, 0, 64),
			      mk("cam/raw/0", TD_TENSOR_U8, 64, 0, 64),
			      mk("model/w", TD_TENSOR_U8, 64, 0, 64)};
	uint64_t v;

	snapdir_make(&s);
	start_sel(&d, &s, "30", both);
	cr_assert(log_has(&s, "keeps the names under \"cam/\", but not those "
			      "under \"cam/raw/\""),
		  "%s", tu_slurp(s.log));
	c = conn(&d);
	v = next_version(c);
	for (int i = 0; i < 3; i++)
		put(c, &t[i], v++);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	check_file(s.file, &t[0], 1);

	/* alone: every name but those under it */
	cr_assert_eq(unlink(s.file), 0);
	start_sel(&d, &s, "30", skip);
	cr_assert(log_has(&s, "keeps every name but those under \"cam/\""),
		  "%s", tu_slurp(s.log));
	c = conn(&d);
	v = next_version(c);
	for (int i = 0; i < 3; i++)
		put(c, &t[i], v++);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	check_file(s.file, &t[2], 1);
	snapdir_rm(&s);
}

/*
 * Saving after every change (--snapshot-interval 0), a stream of frames
 * under --snapshot-skip made a save of every tensor per frame; now none
 * (counted in the log, one "saving" line per save, and by FILE's inode,
 * which each save's rename replaces), while a kept name's change still
 * makes one.
 */
Test(snapshot, a_stream_of_a_skipped_name_makes_no_save, .timeout = 60)
{
	/* probe: next_version()'s throw-away name, kept out too */
	static const char *const sel[] = {"--snapshot-skip", "cam/",
					  "--snapshot-skip", "probe", NULL};
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor w = mk("model/w", TD_TENSOR_U8, 4096, 0, 4096);
	struct tensor cam = mk("cam/0", TD_TENSOR_U8, 8192, 0, 8192);
	struct td_error e = {0};
	struct stat st;
	uint64_t v;
	ino_t ino;

	snapdir_make(&s);
	start_sel(&d, &s, "0", sel);
	c = conn(&d);
	v = next_version(c);
	cr_assert(!log_has(&s, "snapshot: saving"), "%s", tu_slurp(s.log));
	put(c, &w, v++);
	/* one change of a kept name: one save (the test's timeout bounds
	 * the wait) */
	while (log_count(&s, "snapshot: saved") < 1)
		usleep(10000);
	cr_assert_eq(stat(s.file, &st), 0);
	ino = st.st_ino;

	/* 200 frames, replaced, then deleted: not one save */
	for (int i = 0; i < 200; i++)
		put(c, &cam, v++);
	cr_assert_eq(td_client_delete(c, cam.name, NULL, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(count(c), 1); /* a round trip: every change is in */
	cr_assert_eq(stat(s.file, &st), 0);
	cr_assert_eq(st.st_ino, ino, "FILE was replaced: %s", tu_slurp(s.log));

	/* a kept name's change: one save more */
	put(c, &w, v++);
	while (log_count(&s, "snapshot: saved") < 2)
		usleep(10000);
	td_client_close(c);
	/* nothing changed since: no final save either. Each frame made a
	 * save (or the stop's final one) before. */
	tu_daemon_stop(&d, true);
	cr_assert_eq(log_count(&s, "snapshot: saving"), 2, "%s",
		     tu_slurp(s.log));
	cr_assert(!log_has(&s, "final save"), "%s", tu_slurp(s.log));
	check_file(s.file, &w, 1);
	snapdir_rm(&s);
}

/*
 * Options narrowed between two runs: the file still holds cam/0. The
 * restore brings back what the file holds (the user may have narrowed
 * them by mistake: the bytes are the only copy), says how many are no
 * longer kept, and writes nothing for it; the next save (a kept name's
 * change) leaves them out.
 */
Test(snapshot, names_no_longer_kept_are_restored_then_left_out,
     .timeout = 60)
{
	static const char *const sel[] = {"--snapshot-skip", "cam/", NULL};
	struct snapdir s;
	struct tu_daemon d;
	struct td_client *c;
	struct tensor t[3] = {mk("cam/0", TD_TENSOR_U8, 64, 0, 64),
			      mk("cam/1", TD_TENSOR_U8, 64, 0, 64),
			      mk("model/w", TD_TENSOR_U8, 64, 0, 64)};
	struct tensor w2 = mk("model/w2", TD_TENSOR_U8, 64, 0, 64);
	uint64_t v;

	snapdir_make(&s);
	start_sel(&d, &s, "30", NULL);
	c = conn(&d);
	v = next_version(c);
	for (int i = 0; i < 3; i++)
		put(c, &t[i], v++);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	check_file(s.file, t, 3);

	/* narrowed: all three back, two of them not kept, nothing saved */
	start_sel(&d, &s, "30", sel);
	c = conn(&d);
	cr_assert_eq(count(c), 3);
	for (int i = 0; i < 3; i++)
		check(c, &t[i]);
	td_client_close(c);
	tu_daemon_stop(&d, true);
	cr_assert(log_has(&s, "restored 3 of 3 tensors"), "%s",
		  tu_slurp(s.log));
	cr_assert_eq(log_count(&s, "2 of the tensors restored are of names "
				   "it no longer keeps"),
		     1, "%s", tu_slurp(s.log));
	check_file(s.file, t, 3);

	/* a kept change: the save holds the kept names only */
	start_sel(&d, &s, "30", sel);
	c = conn(&d);
	put(c, &w2, next_version(c));
	td_client_close(c);
	tu_daemon_stop(&d, true);
	{
		struct tensor kept[2] = {t[2], w2};

		check_file(s.file, kept, 2);
	}
	snapdir_rm(&s);
}

/*
 * A bad prefix is a bad command line (status 2) that names the option
 * and why, as --http-prefix's; a good one without --snapshot is warned
 * about like --snapshot-interval.
 */
Test(snapshot, bad_snapshot_prefixes_are_a_bad_command_line, .timeout = 60)
{
	static const char *const opt[] = {"--snapshot-prefix",
					  "--snapshot-skip"};
	static const char *const bad[][2] = {
		{"", "empty"},
		{"/cam", "starts with '/'"},
		{"cam/../etc", "\"..\""},
		{"cam//0", "\"//\""},
		{"cam 0", "outside [A-Za-z0-9._:/@+-]"},
		{"cam\n0", "outside [A-Za-z0-9._:/@+-]"},
	};
	const char *bin = getenv("TD_TENSORD");
	struct snapdir s;
	char sock[160], want[128];
	char *out;

	snapdir_make(&s);
	snprintf(sock, sizeof(sock), "%s/td.sock", s.dir);
	for (size_t o = 0; o < 2; o++) {
		for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
			/* bounded: a daemon that starts is ended after 3 s */
			char *argv[] = {"/usr/bin/timeout", "3", (char *)bin,
					"--socket", sock, "--snapshot", s.file,
					(char *)opt[o], (char *)bad[i][0],
					NULL};
			int rc = tu_run_capture_all(argv, &out);

			snprintf(want, sizeof(want), "%s '", opt[o]);
			cr_expect_eq(rc, 2, "%s '%s': %s", opt[o], bad[i][0],
				     out);
			cr_expect(strstr(out, want) &&
					  strstr(out, "not a valid name "
						      "prefix") &&
					  strstr(out, bad[i][1]),
				  "%s '%s': %s", opt[o], bad[i][0], out);
			free(out);
		}
		/* without --snapshot: a warning, as --snapshot-interval */
		{
			char *argv[] = {"/usr/bin/timeout", "-s", "INT", "1",
					(char *)bin, "--socket", sock,
					(char *)opt[o], "cam/", NULL};

			tu_run_capture_all(argv, &out);
			snprintf(want, sizeof(want),
				 "%s has no effect without --snapshot FILE",
				 opt[o]);
			cr_expect(strstr(out, want), "%s", out);
			free(out);
		}
	}
	cr_assert_eq(access(s.file, F_OK), -1);
	snapdir_rm(&s);
}
