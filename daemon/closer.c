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
 * be a FUSE FLUSH that its server never answers, or a lingering socket's
 * wait, so threads of their own close them, never the loop and never the
 * big planes' thread (which one such close would stop). What waits is a
 * list that grows with what peers send, closed first in, first out. A
 * close that does not return holds its thread; the next one queued while
 * no thread is free starts another, up to TD__CLOSER_PEERS: so up to that
 * many closes that never return (each a peer's doing) leave the others
 * going, and past it they wait behind them, each one of the daemon's
 * descriptors, as a plane would, until a server answers or dies. Started
 * at the first one; at the daemon's stop they are left to the process's
 * exit, which ends a wait that would otherwise have no end.
 */
#define TD__CLOSER_PEERS 8

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int *fds;     /* a ring of cap: n queued from head on */
	size_t head, n, cap;
	unsigned threads, idle; /* started, and waiting for work */
	bool failed;
} fq = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *foreign_main(void *arg)
{
	(void)arg;
	for (;;) {
		int fd;

		pthread_mutex_lock(&fq.mu);
		fq.idle++;
		while (!fq.n)
			pthread_cond_wait(&fq.cv, &fq.mu);
		fq.idle--;
		fd = fq.fds[fq.head];
		fq.head = (fq.head + 1) % fq.cap;
		fq.n--;
		pthread_mutex_unlock(&fq.mu);
		close(fd);
	}
	return NULL;
}

/* One more thread, when none waits for work (lock held): false if none
 * runs at all. */
static bool foreign_start(void)
{
	pthread_t t;
	int rc;

	if (fq.failed || fq.idle > fq.n || fq.threads >= TD__CLOSER_PEERS)
		return fq.threads > 0;
	rc = td__thread_start(&t, foreign_main, "td-closer-peer", true);
	if (rc) {
		if (!fq.threads)
			td__log(TD_LOG_WARN, "peers' files are closed on the "
					     "loop: pthread_create: %s",
				strerror(rc));
		fq.failed = true;
		return fq.threads > 0;
	}
	fq.threads++;
	return true;
}

/* Room for one more in the ring (lock held). */
static bool foreign_room(void)
{
	size_t cap = fq.cap ? fq.cap * 2 : 64;
	int *m;

	if (fq.n < fq.cap)
		return true;
	m = malloc(cap * sizeof(*m));
	if (!m)
		return false;
	for (size_t i = 0; i < fq.n; i++)
		m[i] = fq.fds[(fq.head + i) % fq.cap];
	free(fq.fds);
	fq.fds = m;
	fq.head = 0;
	fq.cap = cap;
	return true;
}

void td__closer_foreign(int fd)
{
	if (fd < 0)
		return;
	pthread_mutex_lock(&fq.mu);
	if (!foreign_start() || !foreign_room()) {
		pthread_mutex_unlock(&fq.mu);
		close(fd);
		return;
	}
	fq.fds[(fq.head + fq.n++) % fq.cap] = fd;
	pthread_cond_signal(&fq.cv);
	pthread_mutex_unlock(&fq.mu);
}
