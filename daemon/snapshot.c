/* SPDX-License-Identifier: MIT */
/*
 * Snapshots: every current version in one HRRYFILE (docs/snapshot.md for
 * the mapping), so tensors survive a stop, a reboot or a run without
 * systemd. This file starts and stops them: the paths, the I/O engine
 * and the buffers, the restore at start, the final save at the stop.
 * The work is in snapshot-save.c and snapshot-restore.c, over
 * snapshot-buf.c (bounce buffers, state) and snapshot-map.c (KV keys).
 */
#include "snapshot-int.h"
#include "sd.h" /* TD__VERSION_BLOCK */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *file_kind(mode_t m)
{
	return S_ISDIR(m)    ? "a folder"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
	       : S_ISFIFO(m) ? "a FIFO"
	       : S_ISSOCK(m) ? "a socket"
			     : "not a regular file";
}

/* FILE.lock's second line: "next_version N", N in 20 digits */
#define LOCK_NEXT "next_version "
#define LOCK_DIGITS 20
/* FILE.lock's two lines for N into line (96 bytes): their length. */
static int lock_line(char *line, uint64_t n)
{
	return snprintf(line, 96, "%-*ld\n" LOCK_NEXT "%0*" PRIu64 "\n",
			LOCK_DIGITS, (long)getpid(), LOCK_DIGITS, n);
}

/*
 * Write N as FILE.lock's number (fdatasync'ed). 0 or -errno. Both lines
 * are written, the same bytes but for the number: a record that could
 * not be written at the start (a full disk) left the file empty, and
 * the digits alone at their offset were no "next_version" line.
 */
static int lock_put(uint64_t n)
{
	char line[96];
	int len = lock_line(line, n);

	errno = 0;
	if (pwrite(td__snap.lock_fd, line, (size_t)len, 0) != len)
		return errno ? -errno : -EIO;
	return fdatasync(td__snap.lock_fd) < 0 ? -errno : 0;
}

/*
 * The last daemon's next_version N (the line's text at s): N, or 0 with
 * what is wrong with it logged. strtoull took a damaged one as a number
 * ("-5" wrapped to 2^64-5, "99999999999999999999999" clamped to 2^64-1,
 * "abc" as 0): the start said "version numbers up to
 * 18446744073709551610 may have been handed out by the last tensord"
 * of a number no daemon handed out, then that the counter was out of
 * range, and said nothing of a line that was no number at all.
 */
static uint64_t lock_next(const char *s)
{
	size_t len = strcspn(s, "\n");
	const char *why = NULL;
	unsigned long long v = 0;
	char *end, shown[25];
	size_t n;

	errno = 0;
	if (*s == '-')
		why = "is negative";
	else if (*s < '0' || *s > '9' ||
		 ((v = strtoull(s, &end, 10)), end != s + len))
		why = "is not a number";
	else if (errno == ERANGE)
		why = "is past 2^64-1";
	else if (v > TD__VERSION_MAX)
		why = "is past the largest version number, 2^55";
	if (!why)
		return v;
	/* the file's bytes: at most 24, and nothing that drives a terminal */
	n = len < sizeof(shown) - 1 ? len : sizeof(shown) - 1;
	for (size_t i = 0; i < n; i++)
		shown[i] = (unsigned char)s[i] < 0x20 ||
				   (unsigned char)s[i] >= 0x7f
			   ? '?'
			   : s[i];
	shown[n] = 0;
	td__log(TD_LOG_WARN, "snapshot: %s.lock: next_version '%s%s' %s: "
			     "ignored (no version numbers of the last tensord "
			     "on record: if it crashed after its last save, a "
			     "new version may be numbered as one it handed "
			     "out)",
		td__snap.path, shown, len > n ? "..." : "", why);
	return 0;
}

/*
 * Our pid, and the last daemon's "next_version" kept as it is until a
 * version is numbered (td__snap.reserved): the first line is what a
 * second daemon reads, the second what the restore raises the counter
 * to. Both are fixed-width and written in place: a truncation first
 * could reach the disk without the bytes after it (a power loss), and
 * the number on record would be gone. -1 with errno when it cannot be
 * written.
 */
static int lock_record(int fd)
{
	char old[96], line[96];
	const char *at;
	ssize_t got = pread(fd, old, sizeof(old) - 1, 0);
	int n;

	old[got > 0 ? got : 0] = 0;
	if ((at = strstr(old, "\n" LOCK_NEXT)))
		td__snap.reserved = lock_next(at + 1 + strlen(LOCK_NEXT));
	n = lock_line(line, td__snap.reserved);
	if (pwrite(fd, line, (size_t)n, 0) != n ||
	    (got > n && ftruncate(fd, n) < 0))
		return -1;
	return 0;
}

/*
 * FILE.lock's number is written ahead, on a thread ("td-snap-lock"):
 * when half of the block on record is handed out the loop asks for the
 * next block and goes on numbering from the half still on record while
 * the thread writes and fdatasyncs it (a slow disk's pause, once per
 * TD__VERSION_BLOCK versions, was every client's). The loop waits for
 * the thread only when it reaches the number on record before the
 * write is done (a disk slower than half a block of versions), or at
 * the first version after the start, as it waited for its own write
 * before. No thread (pthread_create refused): the loop writes, as
 * before. done: no version at or past it was numbered, on disk; want:
 * what the loop asked for (> done: being written).
 */
static struct {
	bool started, stop;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t want, done;
	int err;    /* the last write's, for the loop to log */
	bool fresh; /* a write is done that the loop has not looked at */
	bool failing; /* the last write failed: retried at each version */
} rec = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *rec_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&rec.mu);
	for (;;) {
		uint64_t n = rec.want;
		int rc;

		if (n <= rec.done) {
			if (rec.stop)
				break;
			pthread_cond_wait(&rec.cv, &rec.mu);
			continue;
		}
		pthread_mutex_unlock(&rec.mu);
		rc = lock_put(n);
		pthread_mutex_lock(&rec.mu);
		/* a failure is logged by the loop and numbers go on, as
		 * when the loop wrote */
		rec.done = n;
		rec.err = rc;
		rec.fresh = true;
		pthread_cond_broadcast(&rec.cv);
	}
	pthread_mutex_unlock(&rec.mu);
	return NULL;
}

static void rec_start(void)
{
	int rc;

	rec.done = td__snap.reserved; /* what the file says now */
	rec.want = rec.done;
	rec.fresh = rec.failing = false;
	rec.stop = false;
	rc = td__thread_start(&rec.thread, rec_main, "td-snap-lock", false);
	if (rc) {
		td__log(TD_LOG_WARN, "snapshot: version numbers are put on "
				     "record from the loop: pthread_create: "
				     "%s",
			strerror(rc));
		return;
	}
	rec.started = true;
}

/* the thread's last write is done and it is gone (idempotent) */
static void rec_stop(void)
{
	if (!rec.started)
		return;
	pthread_mutex_lock(&rec.mu);
	rec.stop = true;
	pthread_cond_broadcast(&rec.cv);
	pthread_mutex_unlock(&rec.mu);
	pthread_join(rec.thread, NULL);
	rec.started = false;
}

static void rec_log(uint64_t upto, int rc)
{
	td__log(TD_LOG_ERROR, "snapshot: cannot put version numbers "
			      "up to %" PRIu64 " on record in %s.lock "
			      "(%s): a restart after a crash may number "
			      "new versions as ones handed out before",
		upto, td__snap.path, strerror(-rc));
}

uint64_t td__snapshot_reserve(uint64_t next)
{
	const uint64_t half = TD__VERSION_BLOCK / 2;
	uint64_t ceil;
	int rc;

	if (!td__snap.on || td__snap.lock_fd < 0)
		return UINT64_MAX;
	if (!rec.started) {
		rc = lock_put(next + TD__VERSION_BLOCK);
		if (rc < 0)
			rec_log(next + TD__VERSION_BLOCK, rc);
		return next + TD__VERSION_BLOCK;
	}
	pthread_mutex_lock(&rec.mu);
	if (next >= rec.done) {
		/* nothing on record for next yet: wait, as the loop did */
		if (rec.want <= next)
			rec.want = next + TD__VERSION_BLOCK;
		pthread_cond_broadcast(&rec.cv);
		while (rec.done <= next)
			pthread_cond_wait(&rec.cv, &rec.mu);
	}
	if (rec.fresh) {
		/* said once when it starts failing, and when it ends */
		if (rec.err < 0 && !rec.failing)
			rec_log(rec.done, rec.err);
		else if (!rec.err && rec.failing)
			td__log(TD_LOG_INFO, "snapshot: version numbers up to "
					     "%" PRIu64 " are on record in "
					     "%s.lock again",
				rec.done, td__snap.path);
		rec.failing = rec.err < 0;
		rec.fresh = false;
		rec.err = 0;
	}
	if (rec.failing) {
		/* not on record: tried again (once the try in progress is
		 * done), and asked here again at the next version, rather
		 * than half a block later, for a disk with room again */
		if (rec.want == rec.done) {
			rec.want = next + TD__VERSION_BLOCK;
			pthread_cond_broadcast(&rec.cv);
		}
		pthread_mutex_unlock(&rec.mu);
		return next + 1;
	}
	if (rec.want == rec.done && next + half >= rec.done) {
		/* half a block left: the next one is written meanwhile */
		rec.want = next + TD__VERSION_BLOCK;
		pthread_cond_broadcast(&rec.cv);
	}
	/* asked again at the half, or where the number on record ends */
	ceil = rec.want == rec.done ? rec.done - half : rec.done;
	pthread_mutex_unlock(&rec.mu);
	return ceil;
}

/*
 * After the restore: count on from the numbers the last daemon may have
 * handed out (it did not stop cleanly: its last save is older than
 * them). The first new one puts a block on record (td__snapshot_reserve).
 */
static void reserve_start(void)
{
	struct td__store_info si = {0};

	td__store_info(&si);
	if (td__snap.lock_fd >= 0 && td__snap.reserved > si.next_version) {
		td__log(TD_LOG_INFO, "snapshot: version numbers up to %" PRIu64
				     " may have been handed out by the last "
				     "tensord (%s.lock): counting on from %"
				     PRIu64,
			td__snap.reserved - 1, td__snap.path,
			td__snap.reserved);
		td__store_set_next_version(td__snap.reserved);
	}
}

/*
 * One daemon per snapshot: two on one FILE removed and renamed each
 * other's FILE.tmp (a save could rename the other's half-written file
 * over FILE), and each stop replaced the other's tensors. FILE.lock,
 * beside FILE, is flock'ed for the daemon's life (released by the
 * kernel however it ends, so a SIGKILL leaves nothing stale) and holds
 * its pid, for the message of the next one.
 */
static int snap_lock(const char *path)
{
	char *name = malloc(strlen(path) + 6), pid[24] = "";
	int fd, n, e;

	if (!name)
		return -ENOMEM;
	sprintf(name, "%s.lock", path);
	fd = open(name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
		e = errno;
		if (fd >= 0 && e == EWOULDBLOCK) {
			n = (int)pread(fd, pid, sizeof(pid) - 1, 0);
			pid[n > 0 ? n : 0] = 0;
			pid[strcspn(pid, " \n")] = 0;
			td__log(TD_LOG_ERROR, "--snapshot %s is in use by "
					      "another tensord (pid %s, "
					      "holding %s): not starting",
				path, *pid ? pid : "?", name);
			close(fd);
			free(name);
			return -EBUSY;
		}
		/* a folder out of inodes, a lock file of another user's:
		 * the tensors still come back, unguarded */
		td__log(TD_LOG_WARN, "--snapshot %s: cannot lock %s (%s): "
				     "another tensord on the same snapshot "
				     "would not be kept off, and no version "
				     "numbers are put on record (a restart "
				     "after a crash may number versions as "
				     "ones handed out before)",
			path, name, strerror(e));
		if (fd >= 0)
			close(fd);
		free(name);
		return 0;
	}
	if (lock_record(fd) < 0)
		td__log(TD_LOG_DEBUG, "snapshot: writing %s: %s", name,
			strerror(errno));
	free(name);
	td__snap.lock_fd = fd;
	return 0;
}

/*
 * What the link at p names, as a path (relative to p's folder when the
 * link's text is relative); p is freed. NULL when it cannot be read.
 */
static char *link_next(char *p)
{
	char buf[PATH_MAX], *q, *slash;
	ssize_t n = readlink(p, buf, sizeof(buf) - 1);

	if (n < 0) {
		q = NULL;
	} else {
		buf[n] = 0;
		slash = strrchr(p, '/');
		if (buf[0] == '/' || !slash)
			q = strdup(buf);
		else if (asprintf(&q, "%.*s/%s", (int)(slash - p), p,
				  buf) < 0)
			q = NULL;
	}
	free(p);
	return q;
}

/*
 * The name a link (or chain of links) to no file yet leads to: where the
 * first save goes. realpath() refuses such a link, which then stayed
 * --snapshot itself: the first save renamed over the link, making it a
 * regular file, and the file it named was never written (a link to a
 * bigger disk silently saved on the small one). NULL when it is not
 * that (a loop: the open refuses it).
 */
static char *dangling_target(const char *path)
{
	char *p = strdup(path);
	struct stat st;

	for (int hops = 0; p && hops < 40; hops++) {
		if (lstat(p, &st) < 0) {
			if (errno == ENOENT)
				return p;
			break;
		}
		if (!S_ISLNK(st.st_mode))
			break;
		p = link_next(p);
	}
	free(p);
	return NULL;
}

/*
 * The first link in the chain at path (links to links included) that
 * belongs to neither the daemon's uid nor root: its uid, or -1 when
 * there is none. The daemon reads such a link itself (realpath,
 * readlink), which the kernel's protected_symlinks rule does not see: a
 * link another user planted at FILE in a sticky world-writable folder
 * (`--snapshot /tmp/td.hrry`, the file not made yet or moved aside)
 * pointed the restore's move aside and every save's rename at any file
 * the daemon may write (root: /etc/shadow).
 */
static long foreign_link_uid(const char *path, char *at, size_t atlen)
{
	char *p = strdup(path);
	struct stat st;
	long uid = -1;

	for (int hops = 0; p && hops < 40; hops++) {
		if (lstat(p, &st) < 0 || !S_ISLNK(st.st_mode))
			break;
		if (st.st_uid != geteuid() && st.st_uid != 0) {
			uid = (long)st.st_uid;
			snprintf(at, atlen, "%s", p);
			break;
		}
		p = link_next(p);
	}
	free(p);
	return uid;
}

/* Such a link at path: logged, -1 (not starting). */
static int foreign_link(const char *path)
{
	char link[PATH_MAX];
	long uid = foreign_link_uid(path, link, sizeof(link));

	if (uid < 0)
		return 0;
	td__log(TD_LOG_ERROR, "--snapshot %s: %s is a symbolic link of uid "
			      "%ld, neither the daemon's (%u) nor root's: not "
			      "followed (another user's link could point the "
			      "daemon's saves at any file it may write): not "
			      "starting, and it is left as it is; make it a "
			      "link of uid %u or root, or point --snapshot at "
			      "the file itself",
		path, link, uid, (unsigned)geteuid(), (unsigned)geteuid());
	return -1;
}

/*
 * Which names the snapshot keeps, said once at the start when the
 * options narrow it (docs/snapshot.md, "Which names").
 */
static void say_selection(void)
{
	const struct td__opts *o = &td__d->opts;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	if (!o->snapshot_nkeep && !o->snapshot_nskip)
		return;
	f = open_memstream(&buf, &len);
	if (!f)
		return;
	fputs(o->snapshot_nkeep ? "the names under" : "every name", f);
	for (unsigned i = 0; i < o->snapshot_nkeep; i++)
		fprintf(f, "%s \"%s\"", i ? "," : "", o->snapshot_keep[i]);
	if (o->snapshot_nskip)
		fputs(o->snapshot_nkeep ? ", but not those under"
					: " but those under",
		      f);
	for (unsigned i = 0; i < o->snapshot_nskip; i++)
		fprintf(f, "%s \"%s\"", i ? "," : "", o->snapshot_skip[i]);
	if (fclose(f) == 0)
		td__log(TD_LOG_INFO, "snapshot %s keeps %s "
				     "(--snapshot-prefix, --snapshot-skip); a "
				     "change of any other name makes no save",
			td__snap.path, buf);
	free(buf);
}

/*
 * The restore at start: the whole snapshot, or, when the fd store
 * restored (it is newer), nothing of it but the versions the store's
 * image named and did not bring back (a stored fd missing: systemd
 * drops those past FileDescriptorStoreMax), which used to be lost
 * though the snapshot held them. 0 or -errno (not starting).
 */
static int restore(bool fdstore_used)
{
	size_t missed = td__fdstore_missed_count();
	int rc = 0;

	say_selection();
	if (fdstore_used && missed)
		td__log(TD_LOG_INFO, "snapshot %s: the fd store's state (newer) "
				     "was restored but for %zu versions: "
				     "reading those",
			td__snap.path, missed);
	else if (fdstore_used)
		td__log(TD_LOG_INFO, "snapshot %s not read: the fd store's "
				     "state (newer) was restored",
			td__snap.path);
	td__snap.only_missed = fdstore_used && missed;
	if (!fdstore_used || missed)
		rc = td__snap_restore();
	td__snap.only_missed = false;
	td__fdstore_missed_free();
	return rc;
}

int td__snapshot_start(struct td__daemon *d, const char *path,
		       uint64_t interval_ms, bool fdstore_used)
{
	const char *knob = getenv("TD_TEST_SNAPSHOT_KILL_AT");
	char *slash, *real = NULL;
	struct stat st;
	int rc;

	if (foreign_link(path) < 0)
		return -EPERM;
	/*
	 * A symbolic link to a snapshot: the file it names is read and
	 * replaced (FILE.tmp beside it), not the link, which a rename
	 * would turn into a regular file while the target kept old bytes.
	 */
	if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) &&
	    ((real = realpath(path, NULL)) ||
	     (errno == ENOENT && (real = dangling_target(path))))) {
		td__log(TD_LOG_INFO, "--snapshot %s is a link to %s: saving "
				     "there",
			path, real);
		path = real;
	}
	/*
	 * What FILE names must be ours to replace: a regular file, or
	 * nothing yet. A device, a folder, or anything but a regular file
	 * reached through a link, is left alone and the daemon does not
	 * start: it used to be moved aside as corrupt and replaced by the
	 * next save (`--snapshot /dev/null`, or a link to /tmp, renamed
	 * /dev/null or /tmp themselves). A FIFO or a socket in the folder
	 * itself is moved aside by the restore (leftovers, no data).
	 */
	if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) &&
	    !S_ISLNK(st.st_mode) &&
	    (real || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))) {
		td__log(TD_LOG_ERROR, "--snapshot %s is %s, not a snapshot "
				      "file: not starting, and it is left as "
				      "it is; point --snapshot at a regular "
				      "file (or a path not there yet)",
			path, file_kind(st.st_mode));
		free(real);
		return -EINVAL;
	}
	td__snap.d = d;
	td__snap.interval_ms = interval_ms;
	td__snap.path = strdup(path);
	td__snap.tmp = malloc(strlen(path) + 5);
	td__snap.dir = strdup(path);
	if (!td__snap.path || !td__snap.tmp || !td__snap.dir) {
		rc = -ENOMEM;
		goto fail;
	}
	sprintf(td__snap.tmp, "%s.tmp", path);
	slash = strrchr(td__snap.dir, '/');
	if (!slash)
		strcpy(td__snap.dir, ".");
	else if (slash == td__snap.dir)
		slash[1] = 0;
	else
		*slash = 0;
	if (stat(td__snap.dir, &st) < 0 || !S_ISDIR(st.st_mode) ||
	    access(td__snap.dir, W_OK) < 0) {
		rc = -errno ? -errno : -ENOTDIR;
		td__log(TD_LOG_ERROR, "--snapshot %s: the folder %s is not a "
				      "writable folder",
			path, td__snap.dir);
		goto fail;
	}
	if ((rc = snap_lock(path)) < 0)
		goto fail;
	if (td__snap.lock_fd >= 0)
		rec_start();
	if (knob)
		td__snap.kill_at = strtoull(knob, NULL, 10);
	if ((knob = getenv("TD_TEST_SNAPSHOT_RESTORE_KILL_AT")))
		td__snap.restore_kill_at = strtoull(knob, NULL, 10);
	rc = td__io_init(d->loop);
	if (rc == 0)
		rc = td__snap_pool_init();
	if (rc < 0)
		goto fail;
	uv_timer_init(d->loop, &td__snap.timer);
	td__snap.on = true;
	td__fdstore_also_reserve(td__snapshot_reserve);
	/* a save a SIGKILL cut short */
	if (unlink(td__snap.tmp) == 0)
		td__log(TD_LOG_INFO, "snapshot: removed %s, left by a save "
				     "that did not finish",
			td__snap.tmp);
	else if (errno != ENOENT)
		td__log(TD_LOG_ERROR, "snapshot: cannot remove %s (%s): every "
				      "save fails until it is gone",
			td__snap.tmp, strerror(errno));
	if ((rc = restore(fdstore_used)) < 0) {
		/* the fd store keeps its images as they were: the next
		 * start reads the snapshot again */
		td__snap.on = false;
		uv_close((uv_handle_t *)&td__snap.timer, NULL);
		td__io_fini();
		td__snap_pool_fini();
		goto fail;
	}
	td__fdstore_release(); /* the whole snapshot is in the store */
	reserve_start();
	uv_update_time(d->loop);
	td__snap.last_ms = uv_now(d->loop);
	if (fdstore_used)
		td__snapshot_dirty(NULL, 0); /* the snapshot catches up */
	free(real);
	return 0;
fail:
	rec_stop();
	if (td__snap.lock_fd >= 0)
		close(td__snap.lock_fd);
	td__snap.lock_fd = -1;
	free(real);
	free(td__snap.path);
	free(td__snap.tmp);
	free(td__snap.dir);
	td__snap.path = td__snap.tmp = td__snap.dir = NULL;
	return rc;
}

/*
 * A clean stop: every number handed out is below the counter, so the
 * next start counts on from it exactly (the final save has it too, unless
 * that failed).
 */
static void stop_record(void)
{
	struct td__store_info si = {0};

	td__store_info(&si);
	if (td__snap.lock_fd >= 0 && lock_put(si.next_version) < 0)
		td__log(TD_LOG_DEBUG, "snapshot: writing %s.lock: %s",
			td__snap.path, strerror(errno));
}

int td__snapshot_fini(void)
{
	bool failed;

	if (!td__snap.on)
		return 0;
	td__snap_save_final();
	failed = td__snap.final_failed;
	rec_stop(); /* before the clean stop's own number */
	stop_record();
	td__snap.on = false;
	uv_close((uv_handle_t *)&td__snap.timer, NULL);
	td__io_fini();
	td__snap_pool_fini();
	close(td__snap.lock_fd);
	td__snap.lock_fd = -1;
	free(td__snap.path);
	free(td__snap.tmp);
	free(td__snap.dir);
	td__snap.path = td__snap.tmp = td__snap.dir = NULL;
	return failed ? -1 : 0;
}
