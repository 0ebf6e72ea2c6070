/* SPDX-License-Identifier: MIT */
/*
 * The last close of a big plane, off the loop (docs/architecture.md,
 * "Threads").
 *
 * Closing the daemon's descriptor of a memfd nobody else holds or maps
 * any more is the kernel freeing every page of it, inside close(2): 140-
 * 160 ms for 1 GiB on the VM of bench/README.md (tensord-stallbench),
 * during which the loop would serve no client. A plane of
 * TD__CLOSER_MIN bytes or more is therefore handed to one thread whose
 * only job is close(2): the loop writes the descriptor's number into a
 * pipe and forgets it; the thread reads it and closes it. At most
 * TD__CLOSER_BACKLOG bytes (half of --max-bytes when that is less) wait
 * there at once; past that the loop closes, as below. The number stays
 * taken until then, so the loop cannot be given it again while the
 * thread still has to close it. Everything else the close means (the
 * uid's descriptor count, the buffer table, the fd store) is done on the
 * loop before, as for any close. No thread (pthread_create or pipe2
 * refused, or $TENSORD_CLOSER=0) or a full pipe: the loop closes it
 * itself, as it did before.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"

/* what the loop hands the thread: a descriptor and what it may free
 * (no padding: every byte written to the pipe is set, which valgrind
 * checks) */
struct job {
	uint64_t bytes;
	int64_t fd;
};

static struct {
	bool on;
	int rd, wr; /* the pipe: the thread reads, the loop writes */
	pthread_t thread;
	/* handed and not closed yet: the loop adds, the thread subtracts */
	_Atomic uint64_t backlog;
} cl = {.rd = -1, .wr = -1};

static void *closer_main(void *arg)
{
	struct job j;

	(void)arg;
	for (;;) {
		ssize_t n = read(cl.rd, &j, sizeof(j));

		if (n == (ssize_t)sizeof(j)) {
			close((int)j.fd);
			atomic_fetch_sub(&cl.backlog, j.bytes);
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else {
			return NULL; /* end of file: td__closer_stop() */
		}
	}
}

/*
 * The most memory queued for the thread at once: the store has uncharged
 * it already, so this much more than --max-bytes may still be held for
 * a moment. Past it the loop closes itself (and waits, as before): a
 * client that frees faster than the thread can cannot grow the queue.
 */
static uint64_t backlog_cap(void)
{
	uint64_t max = td__d ? td__d->opts.max_bytes : 0;

	return max && max / 2 < TD__CLOSER_BACKLOG ? max / 2
						   : TD__CLOSER_BACKLOG;
}

int td__thread_start(pthread_t *t, void *(*fn)(void *), const char *name,
		     bool detached)
{
	pthread_attr_t at;
	sigset_t all, old;
	int rc;

	/* signals stay the loop's: the thread starts with all blocked */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 64u << 10);
	if (detached)
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(t, &at, fn, NULL);
	pthread_attr_destroy(&at);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0) /* named for ps and /proc/PID/task/TID/comm */
		pthread_setname_np(*t, name);
	return rc;
}

void td__closer_start(void)
{
	const char *env = getenv("TENSORD_CLOSER");
	int p[2], rc;

	if (cl.on)
		return;
	/* for a baseline (tensord-stallbench): the close on the loop */
	if (env && !strcmp(env, "0")) {
		td__log(TD_LOG_INFO, "big planes are closed on the loop "
				     "(TENSORD_CLOSER=0)");
		return;
	}
	if (pipe2(p, O_CLOEXEC) < 0) {
		td__log(TD_LOG_WARN, "big planes are closed on the loop: "
				     "pipe2: %s",
			strerror(errno));
		return;
	}
	/* a full pipe is a close on the loop, never a wait */
	(void)fcntl(p[1], F_SETFL, O_NONBLOCK);
	cl.rd = p[0];
	cl.wr = p[1];
	rc = td__thread_start(&cl.thread, closer_main, "td-closer", false);
	if (rc) {
		td__log(TD_LOG_WARN, "big planes are closed on the loop: "
				     "pthread_create: %s",
			strerror(rc));
		close(cl.rd);
		close(cl.wr);
		cl.rd = cl.wr = -1;
		return;
	}
	cl.on = true;
}

void td__closer_close(int fd, uint64_t size)
{
	struct job j = {size, fd};

	if (fd < 0)
		return;
	if (cl.on && size >= TD__CLOSER_MIN &&
	    atomic_load(&cl.backlog) + size <= backlog_cap()) {
		/* before the write: the thread may subtract it at once */
		atomic_fetch_add(&cl.backlog, size);
		if (write(cl.wr, &j, sizeof(j)) == (ssize_t)sizeof(j))
			return;
		atomic_fetch_sub(&cl.backlog, size);
	}
	close(fd);
}

void td__closer_stop(void)
{
	if (!cl.on)
		return;
	/* the thread closes what is queued, reads the end, and returns */
	close(cl.wr);
	pthread_join(cl.thread, NULL);
	close(cl.rd);
	cl.rd = cl.wr = -1;
	cl.on = false;
}

/*
 * A peer's descriptor of a filesystem (td__fd_foreign): its close(2) may
 * be a FUSE FLUSH that its server never answers, so a thread of its own
 * closes it, never the loop and never the big planes' thread (which one
 * such close would stop). What waits is a list that grows with what
 * peers send; a file that never closes holds one daemon descriptor, as
 * a plane would, until its server answers or dies. Started at the first
 * one; at the daemon's stop it is left to the process's exit, which ends
 * a wait that would otherwise have no end.
 */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int *fds;
	size_t n, cap;
	bool on, failed;
	pthread_t thread;
} fq = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *foreign_main(void *arg)
{
	(void)arg;
	for (;;) {
		int fd;

		pthread_mutex_lock(&fq.mu);
		while (!fq.n)
			pthread_cond_wait(&fq.cv, &fq.mu);
		fd = fq.fds[--fq.n];
		pthread_mutex_unlock(&fq.mu);
		close(fd);
	}
	return NULL;
}

static bool foreign_start(void)
{
	int rc;

	if (fq.on || fq.failed)
		return fq.on;
	rc = td__thread_start(&fq.thread, foreign_main, "td-closer-peer",
			      true);
	if (rc) {
		td__log(TD_LOG_WARN, "peers' files are closed on the loop: "
				     "pthread_create: %s",
			strerror(rc));
		fq.failed = true;
		return false;
	}
	fq.on = true;
	return true;
}

void td__closer_foreign(int fd)
{
	if (fd < 0)
		return;
	if (!foreign_start()) {
		close(fd);
		return;
	}
	pthread_mutex_lock(&fq.mu);
	if (fq.n == fq.cap) {
		size_t cap = fq.cap ? fq.cap * 2 : 64;
		int *m = realloc(fq.fds, cap * sizeof(*m));

		if (!m) {
			pthread_mutex_unlock(&fq.mu);
			close(fd);
			return;
		}
		fq.fds = m;
		fq.cap = cap;
	}
	fq.fds[fq.n++] = fd;
	pthread_cond_signal(&fq.cv);
	pthread_mutex_unlock(&fq.mu);
}
