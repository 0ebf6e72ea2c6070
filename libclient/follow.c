/* SPDX-License-Identifier: MIT */
/*
 * libtensord: following a name (docs/fastpath.md, "Following a name";
 * layout proto/follow.h). FOLLOW once; then each version is taken from
 * the daemon's bell with a few atomics on this follow's own row, and
 * its buffers come from the client's mapping cache. A version whose
 * entry is missing or whose buffers are not mapped here is taken with a
 * GET of that exact version, held meanwhile through the row so the
 * daemon keeps it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "follow.h"
#include "os.h"
#include "ring-int.h"
#include "wire-status.h"

/* A sleeping follower looks at its connection every TD__HUP_CHECK_NS: a
 * daemon that is gone writes no bell. */

struct td_follow {
	struct td_client *c;
	uint64_t id;
	uint32_t epoch; /* c->epoch of the connection that followed */
	const struct td_follow_hdr *hdr; /* the bell, read-only */
	struct td_follow_row *row;
	uint64_t last; /* newest version returned */
	struct td_pace pace;
	/* when a wait next looks at the connection (a lock and a poll):
	 * once a TD__HUP_CHECK_NS however many waits, not once a wait */
	int64_t hup_at;
	int efd;      /* td_follow_fd()'s timerfd, -1 until then */
	struct td_follow *fd_next; /* c->fd_follows, once efd is made */
	bool out;     /* a tensor held through the row is not released */
	bool closing; /* td_follow_close() waits for that release */
	bool own_word; /* sleeps on row->waiting (td__wake_rows) */
	/*
	 * Staged publishes (docs/fastpath.md, "A followed publish without
	 * the daemon's hop"): the name's trigger page, read-only, of
	 * generation trig_gen and number trig_page (the bell's stage_page;
	 * NULL none); trig_no and no_page, a page it could not have;
	 * stage_ok, whether it takes stages at all (the daemon
	 * serves them, futex_waitv works, TENSORD_STAGE is not 0); skip, a
	 * staged version it cannot take (a buffer it has not mapped): it
	 * waits for its commit.
	 */
	const struct td_follow_trigger *trig;
	uint32_t trig_gen, trig_no;
	uint64_t trig_page, no_page;
	bool stage_ok;
	uint64_t skip;
	char name[TD_WIRE_MAX_NAME + 1];
	uint8_t body[TD_FOLLOW_ENTRY_BODY]; /* an entry, copied */
};

static void follow_unmap(struct td_follow *f)
{
	if (f->trig)
		munmap((void *)f->trig, TD_FOLLOW_TRIG_LEN);
	if (f->hdr)
		munmap((void *)f->hdr, TD_FOLLOW_BELL_LEN);
	if (f->row)
		munmap(f->row, TD_FOLLOW_ROW_LEN);
}

/* Map the reply's two fds: the bell read-only, the row read-write. */
static int follow_take(struct td_client *c, struct td__msg *rep,
		       struct td_follow *f, struct td_error *err)
{
	static const size_t lens[TD_WIRE_FOLLOW_FDS] = {TD_FOLLOW_BELL_LEN,
							TD_FOLLOW_ROW_LEN};
	struct td_wire_follow_rep r;
	struct td_err e = {0};
	void *maps[TD_WIRE_FOLLOW_FDS] = {NULL, NULL};
	int scm[TD_WIRE_MAX_FDS];
	int rc;

	for (unsigned i = 0; i < TD_WIRE_MAX_FDS; i++)
		scm[i] = i < rep->nfds ? rep->fds[i] : -1;
	rep->nfds = 0; /* ours now, in scm[] */
	rc = td_wire_follow_rep_decode(rep->body, rep->body_len, &r, &e);
	if (rc == 0 && (r.fd_count != TD_WIRE_FOLLOW_FDS ||
			r.entry_count != TD_FOLLOW_ENTRIES ||
			r.layout != TD_FOLLOW_LAYOUT))
		rc = -EBADMSG;
	if (rc < 0) {
		rc = td__fail(err, -EBADMSG, "FOLLOW reply: %s",
			      e.reason ? e.reason : "another layout");
		goto out;
	}
	f->id = r.id;
	f->own_word = td__wake_rows(c);
	f->stage_ok = f->own_word && !c->stage_off &&
		      td__has(c, TD_WIRE_FEAT_STAGE);
	for (unsigned i = 0; i < TD_WIRE_FOLLOW_FDS; i++) {
		int fd = -1;

		rc = td__import_fd(c, r.fds[i].fd, &scm[i], &fd);
		if (rc < 0) {
			rc = td__fail(err, rc, "import FOLLOW fd: %s",
				      strerror(-rc));
			goto out;
		}
		maps[i] = mmap(NULL, lens[i],
			       i ? PROT_READ | PROT_WRITE : PROT_READ,
			       MAP_SHARED | MAP_POPULATE, fd, 0);
		rc = -errno;
		close(fd); /* the mapping keeps the file */
		if (maps[i] == MAP_FAILED) {
			maps[i] = NULL;
			rc = td__fail(err, rc, "map FOLLOW fd: %s",
				      strerror(-rc));
			goto out;
		}
	}
	f->hdr = maps[0];
	f->row = maps[1];
	maps[0] = maps[1] = NULL;
	rc = 0;
out:
	for (unsigned i = 0; i < TD_WIRE_FOLLOW_FDS; i++)
		if (maps[i])
			munmap(maps[i], lens[i]);
	for (unsigned i = 0; i < TD_WIRE_MAX_FDS; i++)
		if (scm[i] >= 0)
			close(scm[i]);
	return rc;
}

/* FOLLOW_CLOSE, lock held; errors are moot (the peer may be gone). */
static void send_close(struct td_client *c, uint64_t id)
{
	if (c->sock >= 0 && !c->dead)
		(void)td__call_id(c, TD_OP_FOLLOW_CLOSE, id, NULL, 0);
}

/* FOLLOW name; spare: one get_newer can do without (TD_WIRE_FOLLOW_SPARE,
 * where the daemon serves it) */
static int follow_make(struct td_client *c, const char *name, bool spare,
		       struct td_follow **out, struct td_error *err)
{
	struct td_wire_ring_sub_req q;
	struct td_follow *f;
	struct td__msg rep;
	int64_t len;
	int rc;

	if (!c || !name || !out)
		return td__fail(err, -EINVAL, "missing argument");
	*out = NULL;
	if (strnlen(name, TD_WIRE_MAX_NAME + 1) > TD_WIRE_MAX_NAME)
		return td__fail(err, -EINVAL, "name longer than %d bytes",
				TD_WIRE_MAX_NAME);
	f = calloc(1, sizeof(*f));
	if (!f)
		return td__fail(err, -ENOMEM, "out of memory");
	td__pace_init_env(&f->pace);
	f->efd = -1;
	strcpy(f->name, name);
	q.name = (struct td_wire_str){f->name, (uint16_t)strlen(name)};
	td__client_lock(c);
	rc = td__client_usable(c, err);
	if (rc == 0 && !td__has(c, TD_WIRE_FEAT_FOLLOW))
		rc = td__fail(err, -EOPNOTSUPP,
			      "the daemon does not serve FOLLOW");
	if (rc < 0)
		goto fail;
	q.flags = c->path_out == TD_IMPORT_SCM ? TD_WIRE_REQ_SCM : 0;
	if (spare && td__has(c, TD_WIRE_FEAT_FOLLOW_SPARE))
		q.flags |= TD_WIRE_FOLLOW_SPARE;
	len = td_wire_ring_sub_req_encode(&q, c->sbuf + TD_WIRE_HDR_LEN,
					  TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	if (len < 0) {
		rc = td__fail(err, -EINVAL, "bad tensor name");
		goto fail;
	}
	rc = td__call(c, TD_OP_FOLLOW, (size_t)len, NULL, 0, &rep, err);
	if (rc < 0)
		goto fail;
	rc = follow_take(c, &rep, f, err);
	if (rc < 0) {
		if (f->id)
			send_close(c, f->id);
		goto fail;
	}
	f->c = c;
	f->epoch = c->epoch;
	td__client_ref(c);
	pthread_mutex_unlock(&c->lock);
	*out = f;
	return 0;
fail:
	pthread_mutex_unlock(&c->lock);
	follow_unmap(f);
	free(f);
	return rc;
}

static unsigned gf_shed(struct td_client *c);

int td_client_follow(struct td_client *c, const char *name,
		     struct td_follow **out, struct td_error *err)
{
	int rc = follow_make(c, name, false, out, err);

	/* a daemon limit (follows of the connection, bells or descriptors
	 * of the uid, rows of the name): the follows get_newer made by
	 * itself give way, as if it had never made them */
	if ((rc == -ENOBUFS || rc == -EDQUOT || rc == -EBUSY) && gf_shed(c))
		rc = follow_make(c, name, false, out, err);
	return rc;
}

/* ---- event loops ---- */

static void follow_arm(struct td_follow *f);

int td_follow_fd(struct td_follow *f)
{
	int fd;

	if (!f)
		return -EINVAL;
	/* the parent's fd, whose polls are the parent's (the header) */
	if (td__client_foreign(f->c))
		return -ECHILD;
	if (f->efd >= 0)
		return f->efd;
	fd = td__wake_fd(f->c, TD_OP_FOLLOW_WAKE, f->id, f->epoch,
			 TD_WIRE_FEAT_FOLLOW);
	if (fd >= 0) {
		f->efd = fd;
		/* armed from the start: a loop that polls before its first
		 * td_follow_poll() is woken for a version already there */
		follow_arm(f);
		td__client_lock(f->c);
		f->fd_next = f->c->fd_follows;
		f->c->fd_follows = f;
		/* gone meanwhile: no on_broken will come to fire it */
		if (f->c->sock < 0 || f->c->dead || f->c->epoch != f->epoch)
			(void)td__timerfd_fire(fd);
		pthread_mutex_unlock(&f->c->lock);
	}
	return fd;
}

void td__follow_conn_gone(struct td_client *c)
{
	for (struct td_follow *f = c->fd_follows; f; f = f->fd_next)
		(void)td__timerfd_fire(f->efd);
}

/* ---- taking a version ---- */

static void row_clear(struct td_follow *f)
{
	atomic_store(&f->row->held, TD_FOLLOW_NONE);
}

/*
 * Copy entry e if it holds version v (a seqlock read: the daemon never
 * rewrites the entry of a version a validated hold names; this guards a
 * follower the daemon no longer counts). Its length, or 0.
 */
static size_t entry_copy(struct td_follow *f, uint32_t e, uint64_t v)
{
	const struct td_follow_entry *ent;
	uint32_t len;

	if (e >= TD_FOLLOW_ENTRIES)
		return 0;
	ent = td_follow_entry_at((void *)f->hdr, e);
	if (atomic_load_explicit(&((struct td_follow_entry *)ent)->version,
				 memory_order_acquire) != v)
		return 0;
	len = ent->len;
	if (len > sizeof(f->body))
		return 0;
	memcpy(f->body, ent->body, len);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&((struct td_follow_entry *)ent)->version,
				 memory_order_relaxed) != v)
		return 0;
	return len;
}

/*
 * Version v, held and validated through the row: a tensor from its entry
 * when every buffer is mapped here, else a GET of exactly v (the row
 * keeps v alive meanwhile). 0, -ENOENT (v is gone: look again), -errno.
 */
static int take(struct td_follow *f, uint64_t v, uint32_t e,
		struct td_tensor **out, struct td_error *err)
{
	struct td_client *c = f->c;
	size_t len = entry_copy(f, e, v);
	int rc = -ENOENT;

	td__client_lock(c);
	if (len)
		rc = td__tensor_from_entry(c, f->body, len, v, f,
					   td__follow_let_go, out, err);
	if (rc == 0)
		f->out = true;
	pthread_mutex_unlock(&c->lock);
	if (rc != -ENOENT) {
		if (rc < 0)
			row_clear(f);
		return rc;
	}
	rc = td_client_get_version(c, f->name, v, out, err);
	row_clear(f);
	if (rc == 0) {
		/* a lease, but the follow's all the same: the next call waits
		 * for its release (-EBUSY), as for a tensor from the entry */
		td__client_lock(c);
		td__tensor_follow(*out, f, td__follow_let_go);
		f->out = true;
		pthread_mutex_unlock(&c->lock);
	}
	return rc;
}

/* What STAGE_PAGE may wait at least for its reply: a follow waits on
 * its words, not on the daemon, so a daemon that does not answer (busy,
 * stopped) delays it by this much beyond its own deadline at most. */
#define TRIG_WAIT_NS (50 * 1000 * 1000)

/* The bell's stage_page: which page stage_gen names (0: a daemon
 * before it, and the generation alone tells). */
static uint64_t stage_page(const struct td_follow *f)
{
	return atomic_load_explicit(
		&((struct td_follow_hdr *)f->hdr)->stage_page,
		memory_order_relaxed);
}

/*
 * The trigger page of the bell's stage generation gen, mapped here; the
 * daemon's answer waited for until `by` (CLOCK_MONOTONIC ns, or at
 * least TRIG_WAIT_NS from now): none by then, asked again later. The
 * page kept is the one the bell's stage_page names, not only one of
 * generation gen: generations come round, and a page kept by that alone
 * could be an old producer's, whose word no fire changes any more.
 */
static bool trig_have(struct td_follow *f, uint32_t gen, int64_t by)
{
	struct td_client *c = f->c;
	void *page = NULL;
	uint32_t got = 0;
	uint64_t num = stage_page(f);
	int64_t least = td__now_ns() + TRIG_WAIT_NS;
	int rc = -1;

	if (f->trig && f->trig_gen == gen && f->trig_page == num)
		return true;
	if (!gen || (gen == f->trig_no && num == f->no_page))
		return false;
	td__client_lock(c);
	if (c->epoch == f->epoch)
		rc = td__stage_page_map(c, f->name, false,
					by < least ? least : by, &got, &page,
					NULL);
	/* the page of generation gen and number num: that number both
	 * before and after the call (numbers never come round) */
	if (rc == 0 && (got != gen || stage_page(f) != num)) {
		munmap(page, TD_FOLLOW_TRIG_LEN);
		page = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	if (rc == -ETIMEDOUT)
		return false; /* a daemon slow to answer: later */
	if (!page) {
		/* not this one (a newer producer, or none): not again */
		f->trig_no = gen;
		f->no_page = num;
		return false;
	}
	if (f->trig)
		munmap((void *)f->trig, TD_FOLLOW_TRIG_LEN);
	f->trig = page;
	f->trig_gen = gen;
	f->trig_page = num;
	return true;
}

/*
 * The word of the trigger page that fires this name's stages: the
 * bell's stage_slot, which only the daemon writes (one past the page
 * would be its bug: the first word then, and the commit still wakes).
 */
static uint32_t trig_slot(const struct td_follow *f)
{
	uint32_t slot = atomic_load_explicit(&f->hdr->stage_slot,
					     memory_order_relaxed);

	return slot < TD_FOLLOW_TRIG_SLOTS ? slot : 0;
}

static _Atomic uint32_t *trig_word(const struct td_follow *f)
{
	return (_Atomic uint32_t *)&f->trig[trig_slot(f)].word;
}

/*
 * A staged version newer than after that its producer fired, and this
 * follower may take: its stage word (version << 8 | entry), else 0.
 */
static uint64_t stage_fired(struct td_follow *f, uint64_t after)
{
	struct td_follow_hdr *h = (struct td_follow_hdr *)f->hdr;
	uint64_t st, v;

	if (!f->stage_ok)
		return 0;
	st = atomic_load_explicit(&h->stage, memory_order_acquire);
	v = st >> 8;
	if (!st || v <= after || v == f->skip ||
	    !trig_have(f,
		       atomic_load_explicit(&h->stage_gen,
					    memory_order_relaxed),
		       0))
		return 0;
	if (atomic_load(trig_word(f)) != td_follow_trig(v, TD_FOLLOW_TRIG_FIRED))
		return 0;
	return st;
}

/*
 * Staged version st >> 8, held through the row: a tensor from its entry
 * when every buffer is mapped here. -ENOENT: not taken (the follower
 * waits for the commit, which a GET would not find yet).
 */
static int take_staged(struct td_follow *f, uint64_t st,
		       struct td_tensor **out, struct td_error *err)
{
	struct td_client *c = f->c;
	uint64_t v = st >> 8;
	size_t len = entry_copy(f, (uint32_t)(st & 0xffu), v);
	int rc = -ENOENT;

	if (len) {
		td__client_lock(c);
		rc = td__tensor_from_entry(c, f->body, len, v, f,
					   td__follow_let_go, out, err);
		if (rc == 0)
			f->out = true;
		pthread_mutex_unlock(&c->lock);
	}
	if (rc < 0)
		row_clear(f);
	if (rc == -ENOENT)
		f->skip = v;
	return rc;
}

/* The connection this follow was made on is gone (or going). */
static bool conn_gone(struct td_follow *f)
{
	return td__conn_gone(f->c, f->epoch);
}

/*
 * The row's trig_sleep for a sleep on word tp (NULL: the row alone)
 * that expects tw there: any fire this wait is for changes a word that
 * holds no FIRED version newer than the last one taken, and its
 * producer wakes it, so the daemon's commit of that fire need not wake
 * this row as well. A FIRED word still to take (its buffers not mapped
 * here: skip) is the commit's to wake. The word has 30 bits of the
 * version: one that reads as the last taken's (f->last, the row's
 * `taken`) may be a version 2^30 later, and the daemon wakes this row
 * at the commit of any version that reads so (bell_wake).
 */
static uint64_t trig_sleep_of(const struct td_follow *f,
			      const _Atomic uint32_t *tp, uint32_t tw)
{
	if (!tp || ((tw & 3u) == TD_FOLLOW_TRIG_FIRED &&
		    tw != td_follow_trig(f->last, TD_FOLLOW_TRIG_FIRED)))
		return 0;
	return td_follow_trig_at(
		f->trig_gen,
		(uint32_t)((const struct td_follow_trigger *)(const void *)tp -
			   f->trig));
}

/*
 * Sleep, announced in the row, a slice at a time: on the row's own word
 * when the daemon wakes rows (f->own_word, TD_WIRE_FEAT_WAKE_ROWS), else
 * on the bell's seq with every other follower of the name (ring.c's
 * sleep_on says why one word each).
 */
static void sleep_on(struct td_follow *f, uint32_t seq, uint64_t latest,
		     uint64_t after, int64_t until)
{
	_Atomic uint32_t *w = &f->row->waiting;
	/*
	 * A producer that fires wakes its trigger word, not the rows: read
	 * before the last look, so a fire after it ends the sleep. Mapped
	 * here once a producer of the name has staged (stage_gen), not
	 * only when a stage is seen: a REWRITE ALLOC's stage comes while
	 * its followers sleep already.
	 */
	uint32_t gen = atomic_load_explicit(&f->hdr->stage_gen,
					    memory_order_relaxed);
	_Atomic uint32_t *tp = NULL;
	uint32_t tw = 0;

	/* up to the next look at the connection (follow_wait) */
	if (until < 0 || until > f->hup_at)
		until = f->hup_at;
	if (f->stage_ok && trig_have(f, gen, until)) {
		tp = trig_word(f);
		tw = atomic_load(tp);
	}
	/* before `waiting`: the daemon reads it after `waiting` */
	atomic_store_explicit(&f->row->trig_sleep,
			      trig_sleep_of(f, tp, tw),
			      memory_order_release);
	atomic_store(w, f->own_word ? TD_FOLLOW_WAIT_ROW
				    : TD_FOLLOW_WAIT_FUTEX);
	/* the page tp lies in is still the bell's: a new one of the same
	 * generation wakes the rows asleep before it (seq_cst: the
	 * daemon stores stage_page, then reads `waiting`) */
	if (td_follow_latest_recheck(f->hdr) == latest &&
	    atomic_load((_Atomic uint32_t *)&f->hdr->seq) == seq &&
	    (!tp || atomic_load(&((struct td_follow_hdr *)f->hdr)
					->stage_page) == f->trig_page) &&
	    !stage_fired(f, after)) {
		if (tp) {
			struct timespec ts = {until / 1000000000,
					      until % 1000000000};

			if (td__futex_wait2((const uint32_t *)w,
					    TD_FOLLOW_WAIT_ROW,
					    (const uint32_t *)tp, tw,
					    &ts) == -ENOSYS) {
				/*
				 * No futex_waitv here: the daemon's wake,
				 * which a commit that read trig_sleep
				 * before it went skipped (it moved latest
				 * and seq first: looked at once more)
				 */
				f->stage_ok = false;
				atomic_store(&f->row->trig_sleep, 0);
				if (td_follow_latest_recheck(f->hdr) ==
					    latest &&
				    atomic_load((_Atomic uint32_t *)&f->hdr
							->seq) == seq)
					td__futex_wait_until(
						w, TD_FOLLOW_WAIT_ROW, until);
			}
		} else if (f->own_word) {
			td__futex_wait_until(w, TD_FOLLOW_WAIT_ROW, until);
		} else {
			td__futex_wait_until(
				(_Atomic uint32_t *)&f->hdr->seq, seq, until);
		}
	}
	atomic_store(w, 0);
}

/* 0 while the daemon keeps this follow; once it ended it (the row's
 * `ended`, TD_WIRE_FEAT_FOLLOW_END), -EACCES or -ESTALE with why. */
static int follow_ended(const struct td_follow *f, struct td_error *err)
{
	uint32_t why = atomic_load_explicit(&f->row->ended,
					    memory_order_acquire);

	if (!why)
		return 0;
	if (why == EACCES)
		return td__fail(err, -EACCES, "the daemon ended the follow "
				"of \"%s\": a policy reload took read of it "
				"from this uid", f->name);
	return td__fail(err, -ESTALE, "the daemon ended the follow of "
			"\"%s\": a policy reload took read of it from "
			"another uid its follows were shown to; follow it "
			"again", f->name);
}

static int next_check(struct td_follow *f, struct td_error *err)
{
	struct td_client *c = f->c;
	int rc = 0;

	if (td__client_foreign(c))
		return td__fail(err, -ECHILD, "this follow belongs to the "
				"parent of fork()");
	td__client_lock(c);
	if (f->out)
		rc = td__fail(err, -EBUSY, "release the tensor this follow "
			      "gave last before taking the next");
	else if (c->sock < 0 || c->dead || c->epoch != f->epoch)
		rc = td__fail(err, -EPIPE, "the connection that followed "
			      "\"%s\" is gone: follow it again", f->name);
	else
		rc = follow_ended(f, err);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* Version v was taken: the follow's last, the row's `taken`, and the
 * wait learnt. */
static void took(struct td_follow *f, uint64_t v, struct td_pace_plan *plan)
{
	f->last = v;
	atomic_store_explicit(&f->row->taken, v, memory_order_relaxed);
	/* a fresh read, not td_pace_end's last one: a follow's waits (tens
	 * of us, several followers per CPU) are near the plan's sleep
	 * bound, where a waiter preempted after its last read would be
	 * learnt as short and poll where it should sleep; and one read is
	 * nothing to a handoff through the daemon */
	if (plan->start)
		td_pace_done(&f->pace, plan, td__now_ns());
}

/*
 * The latest version newer than `after`, waiting up to timeout_ms. For
 * get_newer (gf: *served is set): -ETIMEDOUT also for timeout 0, and a
 * name with no version now, or a connection that is gone, leaves it to
 * the GET path (*served false) with *left the wait that remains.
 */
static int follow_wait(struct td_follow *f, uint64_t after, int timeout_ms,
		       struct td_tensor **out, struct td_error *err,
		       bool *served, int *left)
{
	struct td_pace_plan plan = {0};
	int64_t deadline = -2, until;
	uint64_t st;
	int rc;

	/* how many wait with this one (a fan-out's): a crowd sleeps */
	f->pace.waiters = atomic_load_explicit(&f->hdr->followers,
					       memory_order_relaxed);
	for (;;) {
		uint32_t seq = atomic_load(&((struct td_follow_hdr *)f->hdr)
						    ->seq);
		uint64_t latest = atomic_load(
			&((struct td_follow_hdr *)f->hdr)->latest);
		uint64_t v = latest >> 8;

		/* after seq: the daemon stores `ended`, then moves seq */
		if ((rc = follow_ended(f, served ? NULL : err)))
			goto ended;
		if (v > after) {
			/* hold, then check `latest` did not move (the
			 * daemon scans the rows after it moves it) */
			atomic_exchange(&f->row->held, v);
			if (td_follow_latest_recheck(f->hdr) != latest) {
				row_clear(f);
				continue;
			}
			rc = take(f, v, (uint32_t)(latest & 0xffu), out, err);
			if (rc == -ENOENT)
				continue;
			if (rc == 0)
				took(f, v, &plan);
			return rc;
		}
		/* a stage its producer fired: the version before the daemon
		 * commits it (its PUBLISH may not have been read yet) */
		if ((st = stage_fired(f, after))) {
			atomic_exchange(&f->row->held, st >> 8);
			/* still staged, or committed (then latest names it) */
			if (atomic_load(&((struct td_follow_hdr *)f->hdr)
						  ->stage) != st &&
			    td_follow_latest_recheck(f->hdr) >> 8 != st >> 8) {
				row_clear(f);
				continue;
			}
			rc = take_staged(f, st, out, err);
			if (rc == -ENOENT)
				continue;
			if (rc == 0)
				took(f, st >> 8, &plan);
			return rc;
		}
		/* a parked GET also sees a ring; a staged take-back's
		 * producer fires it (or its PUBLISH moves latest) */
		if (served && !latest &&
		    !atomic_load_explicit(&((struct td_follow_hdr *)f->hdr)
						   ->stage,
					  memory_order_relaxed))
			goto get_path;
		/* nothing newer: for get_newer, a daemon that is gone says so
		 * as the GET would (else a poll with timeout 0 would time out
		 * for ever on a bell nobody writes, and never reconnect) */
		if (served && (timeout_ms == 0 || td__past(deadline)) &&
		    conn_gone(f))
			goto get_path;
		if (timeout_ms == 0)
			return td__fail(err, served ? -ETIMEDOUT : -EAGAIN,
					"no version of \"%s\" newer than %llu",
					f->name, (unsigned long long)after);
		if (deadline == -2)
			deadline = td__deadline_of(timeout_ms);
		if (td__past(deadline))
			return td__fail(err, -ETIMEDOUT, "no version of \"%s\" "
					"newer than %llu within %d ms",
					f->name, (unsigned long long)after,
					timeout_ms);
		if (td__pace_wait(&f->pace, &plan, deadline, &until))
			continue;
		/* a daemon that is gone writes no bell: a sleeper looks at
		 * its connection at least once a second, and a stream's
		 * waits (tens of microseconds) not each time */
		if (td__now_ns() >= f->hup_at) {
			bool gone = conn_gone(f);

			if (gone && served)
				goto get_path;
			if (gone)
				return td__fail(err, -EPIPE, "the connection "
						"that followed \"%s\" is gone: "
						"follow it again", f->name);
			f->hup_at = td__now_ns() + TD__HUP_CHECK_NS;
		}
		sleep_on(f, seq, latest, after, until);
	}
ended:
	if (!served)
		return rc;
get_path:
	*served = false;
	if (deadline >= 0)
		*left = td__ms_left(deadline);
	return 0;
}

/*
 * A follow the daemon ended with ESTALE (a reload took read of the name
 * from another uid its bell was shown to) made anew in place, on a new
 * bell: what it returned last, and its waits learnt, stay. One with an
 * event-loop fd keeps that fd (the caller's loop has it registered): a
 * FOLLOW_WAKE of the new follow hands the daemon the same timerfd; the
 * caller takes what is there next, and td_follow_poll() arms the new row
 * after it, as always.
 */
static int follow_again(struct td_follow *f, struct td_error *err)
{
	struct td_follow *n = NULL, keep = *f;
	int rc;

	/* as td_client_follow: get_newer's own follows give way first */
	rc = td_client_follow(f->c, f->name, &n, err);
	if (rc < 0)
		return rc;
	if (f->efd >= 0) {
		rc = td__wake_attach(f->c, TD_OP_FOLLOW_WAKE, n->id, n->epoch,
				     TD_WIRE_FEAT_FOLLOW, f->efd);
		if (rc < 0) {
			td_follow_close(n);
			return td__fail(err, rc, "the daemon ended the follow "
					"of \"%s\" and its fd could not be "
					"handed to a new one: %s", f->name,
					strerror(-rc));
		}
	}
	td__client_lock(f->c);
	follow_unmap(f);
	*f = *n;
	f->last = keep.last;
	f->pace = keep.pace;
	f->efd = keep.efd; /* on c->fd_follows still, at f */
	f->fd_next = keep.fd_next;
	f->c->refs--; /* n's reference: f has one */
	pthread_mutex_unlock(&f->c->lock);
	free(n);
	return 0;
}

int td_follow_next(struct td_follow *f, int timeout_ms,
		   struct td_tensor **out, struct td_error *err)
{
	/* one deadline for the call: a follow made anew waits what is
	 * left of it, so reloads that keep ending the follow cannot
	 * stretch the call past timeout_ms */
	int64_t deadline = timeout_ms > 0 ? td__deadline_of(timeout_ms) : -1;
	int left = timeout_ms, rc;

	if (!f || !out)
		return td__fail(err, -EINVAL, "missing argument");
	*out = NULL;
	for (;;) {
		rc = next_check(f, err);
		if (rc == -ESTALE)
			rc = follow_again(f, err);
		if (rc < 0)
			return rc;
		rc = follow_wait(f, f->last, left, out, err, NULL, NULL);
		if (rc != -ESTALE)
			return rc;
		/* at least 1: 0 would be a poll's -EAGAIN */
		if (deadline >= 0 && (left = td__ms_left(deadline)) == 0)
			left = 1;
	}
}

/*
 * Wait by fd from now: announce it, then look once more (the daemon
 * moves latest, then reads `waiting`), and make the fd readable at once
 * when a newer version is already there.
 */
static void follow_arm(struct td_follow *f)
{
	atomic_store(&f->row->waiting, TD_FOLLOW_WAIT_FD);
	if (td_follow_latest_recheck(f->hdr) >> 8 > f->last)
		(void)td__timerfd_fire(f->efd);
}

int td_follow_poll(struct td_follow *f, struct td_tensor **out,
		   struct td_error *err)
{
	int rc;

	if (!f || !out)
		return td__fail(err, -EINVAL, "missing argument");
	*out = NULL;
	if (f->efd < 0)
		return td__fail(err, -EINVAL, "td_follow_fd() first");
	if (td__client_foreign(f->c))
		return td__fail(err, -ECHILD, "this follow belongs to the "
				"parent of fork()");
	(void)!read(f->efd, &(uint64_t){0}, sizeof(uint64_t));
	atomic_store(&f->row->waiting, 0);
	rc = td_follow_next(f, 0, out, err);
	/* armed again also while the tensor is read: the next version
	 * makes the fd readable */
	if (rc == 0 || rc == -EAGAIN)
		follow_arm(f);
	return rc;
}

/* ---- the end ---- */

/* Lock held: the row lets go, the daemon is told, the memory goes. */
static void follow_finish(struct td_follow *f)
{
	struct td_client *c = f->c;

	/* a child of fork() shares the parent's row: it frees its copy */
	if (!td__client_foreign(c)) {
		row_clear(f);
		/* one the daemon ended is not its any more */
		if (f->epoch == c->epoch && !follow_ended(f, NULL))
			send_close(c, f->id);
	}
	follow_unmap(f);
	if (f->efd >= 0) {
		struct td_follow **pp = &c->fd_follows;

		while (*pp && *pp != f)
			pp = &(*pp)->fd_next;
		if (*pp)
			*pp = f->fd_next;
		close(f->efd);
	}
	free(f);
}

void td__follow_let_go(struct td_follow *f)
{
	if (!td__client_foreign(f->c))
		row_clear(f);
	f->out = false;
	if (f->closing) {
		struct td_client *c = f->c;

		follow_finish(f);
		/* the follow's reference; the tensor's is dropped after */
		c->refs--;
	}
}

void td_follow_close(struct td_follow *f)
{
	struct td_client *c;

	if (!f)
		return;
	c = f->c;
	td__client_lock(c);
	if (f->out) {
		/* the tensor still reads through the row: its release ends
		 * the follow */
		f->closing = true;
		pthread_mutex_unlock(&c->lock);
		return;
	}
	follow_finish(f);
	pthread_mutex_unlock(&c->lock);
	td__client_unref(c);
}

/* ---- get_newer rides a follow (client.h, struct td__gf) ---- */

/* Lock held: the slot of name, or NULL. */
static struct td__gf *gf_find(struct td_client *c, const char *name)
{
	for (unsigned i = 0; i < TD__GF_NAMES; i++)
		if (c->gf[i].name[0] && !strcmp(c->gf[i].name, name))
			return &c->gf[i];
	return NULL;
}

/* Lock held: a follow of g that holds nothing, or NULL to make one
 * (*slot where). -1: none free and no room for one. */
static int gf_pick(struct td__gf *g, struct td_follow **f)
{
	int room = -1;

	for (int i = 0; i < TD__GF_FOLLOWS; i++) {
		if (g->f[i] && !g->f[i]->out) {
			*f = g->f[i];
			return i;
		}
		if (!g->f[i] && room < 0)
			room = i;
	}
	*f = NULL;
	return room;
}

int td__gf_get_newer(struct td_client *c, const char *name, uint64_t after,
		     int *timeout_ms, struct td_tensor **out,
		     struct td_error *err, bool *served)
{
	struct td_follow *f = NULL;
	struct td__gf *g;
	int i, rc = 0;
	bool made = false;

	*served = false;
	if (!c || !name || !out || c->gf_off || td__client_foreign(c))
		return 0;
	td__client_lock(c);
	g = gf_find(c, name);
	/* a name got before, asked for again: newer than what it got last
	 * (a consumer's loop), or once its follows are made, anything */
	if (!g || g->no || g->busy || c->sock < 0 || c->dead ||
	    !td__has(c, TD_WIRE_FEAT_FOLLOW) ||
	    (after != g->last && !g->f[0]) || (i = gf_pick(g, &f)) < 0) {
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	g->busy = true;
	g->used = ++c->gf_clock;
	pthread_mutex_unlock(&c->lock);
	if (!f) {
		/* refused (a ring, the policy, a limit): the GET path */
		made = follow_make(c, name, true, &f, NULL) == 0;
		if (!made)
			f = NULL;
	}
	if (f && next_check(f, NULL) == 0) {
		*served = true;
		*out = NULL;
		rc = follow_wait(f, after, *timeout_ms, out, err, served,
				 timeout_ms);
	}
	td__client_lock(c);
	g->busy = false;
	if (!f)
		g->no = true;
	else if (made)
		g->f[i] = f;
	if (*served && rc == 0)
		g->last = td_tensor_version(*out);
	/* a follow of a connection that is gone ends (made anew after a
	 * reconnect), and one the daemon ended (made anew, on a new bell,
	 * at the next call: the GET path said whether it may) */
	if (f && !*served && !f->out &&
	    (f->epoch != c->epoch || follow_ended(f, NULL)))
		g->f[i] = NULL;
	else
		f = NULL;
	pthread_mutex_unlock(&c->lock);
	if (f)
		td_follow_close(f);
	return rc;
}

/*
 * Lock held: a slot for a name not noted yet. A free one; else the least
 * recently used one without follows that no call used for TD__GF_NAMES
 * calls of any name; else one whose follows hold nothing and that no
 * call used for a while (TD__GF_STALE calls). NULL: the new name stays
 * on the GET path, so names that come and go never make a busy follow
 * end and start again, and a loop over more names than a handle notes
 * follows TD__GF_NAMES of them: taking the slot of a name noted in this
 * turn of the loop would take, every time, the one the loop asks for
 * next, before it could follow.
 */
#define TD__GF_STALE (4 * TD__GF_NAMES)
static struct td__gf *gf_room(struct td_client *c)
{
	struct td__gf *bare = NULL, *stale = NULL;

	for (unsigned i = 0; i < TD__GF_NAMES; i++) {
		struct td__gf *x = &c->gf[i];
		bool held = x->busy;

		if (!x->name[0])
			return x;
		for (int k = 0; k < TD__GF_FOLLOWS; k++)
			held |= x->f[k] && x->f[k]->out;
		if (held)
			continue;
		if (!x->f[0] && !x->f[1] &&
		    x->used + TD__GF_NAMES < c->gf_clock &&
		    (!bare || x->used < bare->used))
			bare = x;
		if ((x->f[0] || x->f[1]) && x->used + TD__GF_STALE < c->gf_clock &&
		    (!stale || x->used < stale->used))
			stale = x;
	}
	return bare ? bare : stale;
}

void td__gf_note(struct td_client *c, const char *name, uint64_t v)
{
	struct td_follow *gone[TD__GF_FOLLOWS] = {NULL};
	struct td__gf *g;

	if (strlen(name) > TD_WIRE_MAX_NAME)
		return;
	td__client_lock(c);
	c->gf_clock++; /* a call, noted or not: what makes a slot stale */
	g = c->gf_off ? NULL : gf_find(c, name);
	if (!g && !c->gf_off) {
		g = gf_room(c);
		if (g) {
			memcpy(gone, g->f, sizeof(gone));
			memset(g, 0, sizeof(*g));
			strcpy(g->name, name);
		}
	}
	if (g) {
		g->last = v;
		g->used = c->gf_clock;
	}
	pthread_mutex_unlock(&c->lock);
	for (int k = 0; k < TD__GF_FOLLOWS; k++)
		td_follow_close(gone[k]);
}

/*
 * End the follows get_newer made that nothing holds and no call uses
 * (their names go on by the GET, and follow again when there is room).
 * How many. Lock NOT held.
 */
static unsigned gf_shed(struct td_client *c)
{
	struct td_follow *f[TD__GF_NAMES * TD__GF_FOLLOWS];
	unsigned n = 0, shed;

	if (!c)
		return 0;
	td__client_lock(c);
	for (unsigned i = 0; i < TD__GF_NAMES; i++)
		for (int k = 0; k < TD__GF_FOLLOWS && !c->gf[i].busy; k++)
			if (c->gf[i].f[k] && !c->gf[i].f[k]->out) {
				f[n++] = c->gf[i].f[k];
				c->gf[i].f[k] = NULL;
			}
	pthread_mutex_unlock(&c->lock);
	shed = n;
	while (n)
		td_follow_close(f[--n]);
	return shed;
}

void td__gf_close_all(struct td_client *c)
{
	struct td_follow *f[TD__GF_NAMES * TD__GF_FOLLOWS];
	unsigned n = 0;

	td__client_lock(c);
	for (unsigned i = 0; i < TD__GF_NAMES; i++) {
		for (int k = 0; k < TD__GF_FOLLOWS; k++)
			if (c->gf[i].f[k])
				f[n++] = c->gf[i].f[k];
		memset(&c->gf[i], 0, sizeof(c->gf[i]));
	}
	pthread_mutex_unlock(&c->lock);
	while (n)
		td_follow_close(f[--n]);
}

/* A follow of the name serves it where it can (td__gf_get_newer); the
 * GET path where none does (TENSORD_GET_FOLLOW=0, a name without a
 * version yet, an older daemon): tensor.c's GET NEWER. */
int td_client_get_newer(struct td_client *c, const char *name,
			uint64_t after, int timeout_ms,
			struct td_tensor **out, struct td_error *err)
{
	bool served;
	int rc = td__gf_get_newer(c, name, after, &timeout_ms, out, err,
				  &served);

	if (served)
		return rc;
	/* an int never reaches UINT32_MAX, so a finite wait stays finite */
	rc = td__get_common(c, name, TD_GET_NEWER, after,
			    timeout_ms < 0 ? TD_WIRE_WAIT_FOREVER
					   : (uint32_t)timeout_ms,
			    out, err);
	if (rc == 0)
		td__gf_note(c, name, td_tensor_version(*out));
	return rc;
}
