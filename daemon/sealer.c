/* SPDX-License-Identifier: MIT */
/*
 * A request's write seals, made off the loop (docs/architecture.md,
 * "Threads").
 *
 * PUBLISH write-seals a plain loan's memfd (td__memfd_seal_publish,
 * transport/os.c), and that one fcntl(2) can take long: the kernel
 * walks every page (about 10 ms a GiB here) and, while anything else
 * holds one of them (a pipe it was vmspliced into, O_DIRECT or io_uring
 * I/O, a device), waits about 150 ms before it refuses. On the loop, every client of the
 * daemon would wait with it, at any producer's will. So the loop only
 * looks (F_GET_SEALS); a memfd still to seal is queued here
 * (td__sealer_want) and the request parks (td__sealer_park): its
 * datagram and fds wait in a job, its connection is not read meanwhile
 * (peer.c), so its later requests stay behind it, and libuv's thread
 * pool makes the seals. Back on the loop the datagram is handled again
 * from its start (td__peer_replay), every check with it (anything may
 * have changed meanwhile), and finds its memfds sealed, or the failed
 * seal's errno and reason here. A producer through libtensord seals its
 * own loans before it publishes (its time, its wait), so only other
 * clients' requests come here.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store.h"
#include "os.h"

/* at most this many memfds a request seals: a PUBLISH_MANY's all */
#define SEAL_MAX (TD_WIRE_MANY_MAX * TD__TABLE_MAX)
/*
 * Jobs on the pool at once. The pool has four threads (libuv's default)
 * and io.c's fsyncs share it: two are always left to them, however many
 * connections wait for seals. The others wait here, shared out by uid
 * (seal_next): one tenant's many connections, or one request of
 * hundreds of slow seals, hold another uid's seal back by one seal at
 * most, not by all of theirs.
 */
#define SEAL_THREADS 2
/* a job this big or less is kept for its connection's next one */
#define SPARE_MAX 4096

struct seal {
	int fd; /* the daemon's dup, closed on the loop when done */
	int rc; /* td__memfd_seal_publish's, set by the thread */
	uint64_t dev, ino, size;
	const char *why; /* static */
};

struct td__seal_job {
	uv_work_t work;
	/*
	 * While it waits for a thread: the first waiting job of its uid is
	 * in S.queue (one a uid), the uid's later ones in its more, in the
	 * order they came.
	 */
	struct td__list link, more;
	struct td__peer *p; /* NULL once gone */
	/* p gone (killed, or the daemon stopping): the thread makes no
	 * more of its seals, an answer nobody would read */
	_Atomic bool gone;
	/* another uid waits: the thread leaves the rest for its next turn
	 * after the seal under way (set on the loop) */
	_Atomic bool yield;
	bool failed; /* a seal failed: the rest are not made */
	uid_t uid; /* p's: its fds below count as that uid's */
	unsigned nseal, nfds;
	unsigned next; /* the first seal not made yet */
	int fds[TD_WIRE_MAX_FDS]; /* the request's, as it came */
	size_t len, cap; /* cap: bytes after msg's start */
	struct seal *seal; /* nseal, after msg */
	uint8_t msg[];     /* the datagram, header and body */
};

static struct {
	struct seal q[SEAL_MAX]; /* the request's queued seals */
	unsigned n;
	/* the job whose request is handled again now, or NULL */
	const struct td__seal_job *replay;
	unsigned waiting, running; /* jobs not done; on the pool */
	struct td__list queue;     /* a uid's first job waiting for a thread */
	struct td__seal_job *run[SEAL_THREADS]; /* those on the pool */
} S = {.queue = {&S.queue, &S.queue}};

/* $TENSORD_SEALER=0: the seals on the loop, as before (for the
 * baseline of tensord-stallbench --seal) */
static bool on_loop(void)
{
	static int on = -1;

	if (on < 0) {
		const char *env = getenv("TENSORD_SEALER");

		on = env && !strcmp(env, "0");
		if (on)
			td__log(TD_LOG_INFO, "write seals are made on the "
					     "loop (TENSORD_SEALER=0)");
	}
	return on;
}

int td__sealer_want(int fd, const struct td__plane_info *pi, const char **why)
{
	uint64_t dev = pi->dev, ino = pi->ino;
	int rc = td__memfd_seal_check(fd, why);

	if (rc <= 0)
		return rc;
	if (on_loop())
		return td__memfd_seal_publish(fd, why);
	if (S.replay) {
		/* its seal failed off the loop: that answer, not a wait */
		for (unsigned i = 0; i < S.replay->nseal; i++) {
			const struct seal *s = &S.replay->seal[i];

			if (s->dev == dev && s->ino == ino && s->rc < 0) {
				*why = s->why;
				return s->rc;
			}
		}
		*why = "the file changed while its seal was being made";
		return -EAGAIN;
	}
	for (unsigned i = 0; i < S.n; i++)
		if (S.q[i].dev == dev && S.q[i].ino == ino)
			return 1;
	if (S.n == SEAL_MAX) {
		*why = "too many memfds to seal";
		return -E2BIG;
	}
	S.q[S.n].fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (S.q[S.n].fd < 0) {
		*why = "cannot keep the memfd to seal it";
		return -errno;
	}
	S.q[S.n].rc = -ECANCELED;
	S.q[S.n].why = "not sealed: the daemon stopped, or a seal before it "
		       "failed";
	S.q[S.n].dev = dev;
	S.q[S.n].size = pi->size;
	S.q[S.n++].ino = ino;
	return 1;
}

void td__sealer_drop(void)
{
	for (unsigned i = 0; i < S.n; i++)
		close(S.q[i].fd);
	S.n = 0;
}

/*
 * On a pool thread: the seals, in the order the request needs them, up
 * to the first that fails (the request is refused with it: the rest
 * would only wait too), until its connection is gone (a kill, the
 * daemon's stop: a stop waits one seal at most, not a PUBLISH_MANY's
 * hundreds), or until another uid waits for a thread: the rest are made
 * at the job's next turn. Each fd is the job's own.
 */
static void seal_work(uv_work_t *w)
{
	struct td__seal_job *j = w->data;
	unsigned i = j->next;

	while (i < j->nseal && !atomic_load(&j->gone)) {
		j->seal[i].rc = td__memfd_seal_publish(j->seal[i].fd,
						       &j->seal[i].why);
		if (j->seal[i++].rc < 0) {
			j->failed = true;
			break;
		}
		if (atomic_load(&j->yield))
			break;
	}
	j->next = i;
}

/* A job's end, on the loop: its request handled again, or its fds
 * closed when its peer went. */
static void job_end(struct td__seal_job *j)
{
	struct td__peer *p = j->p;

	S.waiting--;
	td__tenant_sub(j->uid, TD__LIM_FDS, j->nfds + j->nseal);
	for (unsigned i = 0; i < j->nseal; i++) {
		/* the last reference if its peer went: pages freed */
		td__closer_close(j->seal[i].fd, j->seal[i].size);
		td__d->stats.seals_off_loop += j->seal[i].rc == 0;
	}
	if (!p) {
		td__close_fds(j->fds, j->nfds);
	} else {
		p->sealing = NULL;
		S.replay = j;
		td__peer_replay(p, j->msg, j->len, j->fds, j->nfds);
		S.replay = NULL;
	}
	/* kept for the connection's next one (a PUBLISH's size): none
	 * allocated a handoff, and an idle connection keeps 4 KiB at most */
	if (p && !p->dead && !p->seal_spare && j->cap <= SPARE_MAX)
		p->seal_spare = j;
	else
		free(j);
}

static void seal_done(uv_work_t *w, int status);

/*
 * Whether each job on the pool must leave its seals after the one under
 * way: while a job of another uid waits. S.queue holds one job a uid.
 */
static void yield_update(void)
{
	for (unsigned t = 0; t < SEAL_THREADS; t++) {
		struct td__seal_job *r = S.run[t];
		struct td__list *e;
		bool other = false;

		for (e = S.queue.next; r && !other && e != &S.queue;
		     e = e->next)
			other = td__container_of(e, struct td__seal_job, link)
					->uid != r->uid;
		/* and no more once the other uids' jobs have their thread:
		 * a yield then would only queue it again for nothing */
		if (r)
			atomic_store(&r->yield, other);
	}
}

/* The first waiting job of uid, or NULL */
static struct td__seal_job *queued_of(uid_t uid)
{
	for (struct td__list *e = S.queue.next; e != &S.queue; e = e->next) {
		struct td__seal_job *q =
			td__container_of(e, struct td__seal_job, link);

		if (q->uid == uid)
			return q;
	}
	return NULL;
}

/*
 * j to wait for a thread, behind its uid's jobs when new, or ahead of
 * them when it comes back for the rest of its seals (it came first);
 * either way its uid's turn is after every other uid's waiting now.
 */
static void enqueue(struct td__seal_job *j, bool back)
{
	struct td__seal_job *h = queued_of(j->uid);

	td__list_init(&j->more);
	if (h && !back) {
		td__list_add_tail(&h->more, &j->link);
		return;
	}
	if (h) {
		/* h and those behind it wait behind j now, in order */
		td__list_del(&h->link);
		while (!td__list_empty(&h->more)) {
			struct td__list *e = h->more.prev;

			td__list_del(e);
			td__list_add_tail(j->more.next, e);
		}
		td__list_add_tail(j->more.next, &h->link);
	}
	td__list_add_tail(&S.queue, &j->link);
}

/* Whether a job of uid is on the pool */
static bool running_of(uid_t uid)
{
	for (unsigned t = 0; t < SEAL_THREADS; t++)
		if (S.run[t] && S.run[t]->uid == uid)
			return true;
	return false;
}

/*
 * Out of S.queue: the first uid with no job on the pool, else the first
 * (uids take turns: a uid's next job waits at the end); its next job,
 * if any, waits at the end for the uid's next turn.
 */
static struct td__seal_job *dequeue(void)
{
	struct td__seal_job *j = NULL, *n;
	struct td__list *e;

	for (e = S.queue.next; e != &S.queue && !j; e = e->next) {
		struct td__seal_job *q =
			td__container_of(e, struct td__seal_job, link);

		if (!running_of(q->uid))
			j = q;
	}
	if (!j)
		j = td__container_of(S.queue.next, struct td__seal_job, link);
	td__list_del(&j->link);
	if (!td__list_empty(&j->more)) {
		n = td__container_of(j->more.next, struct td__seal_job, link);
		td__list_del(&n->link);
		td__list_init(&n->more);
		while (!td__list_empty(&j->more)) {
			e = j->more.next;
			td__list_del(e);
			td__list_add_tail(&n->more, e);
		}
		td__list_add_tail(&S.queue, &n->link);
	}
	return j;
}

/* The next waiting jobs onto the pool; those whose peer went, ended. */
static void seal_next(void)
{
	while (S.running < SEAL_THREADS && !td__list_empty(&S.queue)) {
		struct td__seal_job *j = dequeue();
		unsigned t = 0;

		if (!j->p) {
			job_end(j); /* every rc not made still -ECANCELED */
			continue;
		}
		while (S.run[t])
			t++;
		S.run[t] = j;
		S.running++;
		atomic_store(&j->yield, false);
		/* cannot fail: the arguments are valid */
		uv_queue_work(td__d->loop, &j->work, seal_work, seal_done);
	}
	yield_update();
}

/*
 * Back from the pool (cancelled: every rc still -ECANCELED): the request
 * handled again, or, when it left seals for another uid's turn, back in
 * the queue.
 */
static void seal_done(uv_work_t *w, int status)
{
	struct td__seal_job *j = w->data;

	for (unsigned t = 0; t < SEAL_THREADS; t++)
		if (S.run[t] == j)
			S.run[t] = NULL;
	S.running--;
	if (status == 0 && j->p && !j->failed && j->next < j->nseal) {
		td__d->stats.seal_yields++;
		enqueue(j, true);
	} else {
		job_end(j);
	}
	seal_next();
}

int td__sealer_park(struct td__peer *p, const struct td__req *rq, char *why,
		    size_t why_cap)
{
	size_t len = TD_WIRE_HDR_LEN + rq->h->body_len;
	size_t off = (len + 7) & ~(size_t)7; /* the records, aligned */
	size_t cap = off + S.n * sizeof(struct seal);
	struct td__seal_job *j;
	int rc;

	/*
	 * The request's fds and the dups to seal stay the daemon's while it
	 * waits: the uid's, as every descriptor a client makes it hold.
	 */
	rc = td__tenant_check(p->uid, TD__LIM_FDS, rq->nfds + S.n, why,
			      why_cap);
	if (rc == 0 && td__tenant_add(p->uid, TD__LIM_FDS, rq->nfds + S.n) < 0)
		rc = -ENOMEM;
	if (rc < 0) {
		td__sealer_drop();
		return rc;
	}

	j = p->seal_spare;
	p->seal_spare = NULL;
	if (!j || j->cap < cap) {
		free(j);
		j = malloc(sizeof(*j) + cap);
		if (j)
			j->cap = cap;
	}
	if (!j || rq->nfds > TD_WIRE_MAX_FDS) {
		free(j);
		td__tenant_sub(p->uid, TD__LIM_FDS, rq->nfds + S.n);
		td__sealer_drop();
		snprintf(why, why_cap, "out of memory");
		return -ENOMEM;
	}
	j->work.data = j;
	j->p = p;
	atomic_init(&j->gone, false);
	atomic_init(&j->yield, false);
	j->failed = false;
	j->next = 0;
	j->uid = p->uid;
	j->len = len;
	/* body and header are the datagram as received (dispatch.c) */
	memcpy(j->msg, rq->body - TD_WIRE_HDR_LEN, len);
	j->seal = (struct seal *)(void *)(j->msg + off);
	memcpy(j->seal, S.q, S.n * sizeof(struct seal));
	j->nseal = S.n;
	S.n = 0;
	j->nfds = rq->nfds;
	for (unsigned i = 0; i < rq->nfds; i++) {
		j->fds[i] = rq->fds[i];
		rq->fds[i] = -1;
	}
	S.waiting++;
	p->sealing = j;
	enqueue(j, false);
	seal_next();
	return 0;
}

void td__sealer_peer_gone(struct td__peer *p)
{
	if (p->sealing) {
		p->sealing->p = NULL;
		atomic_store(&p->sealing->gone, true);
	}
	p->sealing = NULL;
	free(p->seal_spare);
	p->seal_spare = NULL;
}

unsigned td__sealer_waiting(void)
{
	return S.waiting;
}
