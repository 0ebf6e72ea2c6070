/* SPDX-License-Identifier: MIT */
/* libtensord internals shared by the files of libclient/. */
#ifndef TD_LIBCLIENT_CLIENT_H
#define TD_LIBCLIENT_CLIENT_H

#include <pthread.h>
#include <sys/types.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "follow.h"
#include "pace.h"
#include "tensord/tensord.h"
#include "wire-status.h"
#include "wire.h"

/* Unused mappings kept per client (the policy in tensord.h). */
#define TD__CACHE_MAX 64

/*
 * One imported daemon buffer, keyed by the daemon's buffer_id; a window
 * (TD_WIRE_BUF_WINDOW: a ring's slots) by buffer_id and the pages mapped.
 */
struct td__map {
	struct td__map *next; /* all maps of the client */
	struct td__map *prev;
	uint64_t buffer_id;
	int fd;
	void *addr;   /* NULL when len is 0 */
	uint64_t off; /* file offset of addr (0 unless a window) */
	size_t len;
	int kind;        /* TD_PLANE_* (gpu.h) */
	unsigned refs;   /* tensors using it */
	uint64_t used;   /* LRU clock value of the last release */
};

/*
 * A buffer of a recyclable loan (TD_ALLOC_RECYCLE), kept mapped writable
 * after publish so the daemon can hand it back by id: no fd, no mmap.
 */
struct td__loanbuf {
	struct td__loanbuf *next, *prev;
	uint64_t buffer_id;
	int fd;
	void *addr; /* writable; NULL when size is 0 */
	uint64_t size;
	bool busy;     /* in a live loan */
	uint64_t used; /* LRU clock value of the last publish */
	uint32_t name_hash; /* of the name it was last published as */
};

/* FNV-1a of a name: which idle buffers were a name's (produce.c) */
static inline uint32_t td__name_hash(const char *name, size_t len)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)name[i]) * 16777619u;
	return h;
}

/*
 * Idle recyclable loan buffers kept per client, which ALLOC and PUBLISH
 * advertise as held (TD_WIRE_MAX_HELD of them: those last published as
 * the loan's name, produce.c): a producer of many streams keeps each
 * one's last two versions' buffers, one per plane, which come back as
 * its next loans (the one before is free only once a consumer that
 * keeps a frame until the next has let go); four planes for each name
 * it keeps a loan for (TD__LENT_MAX). Past TD_WIRE_MAX_HELD buffers,
 * only within TD__LOAN_CACHE_BYTES (loans.c).
 */
#define TD__LOAN_CACHE 128
#define TD__LOAN_CACHE_BYTES (1ull << 30)

/* A queued NOTIFY. */
struct td__event {
	struct td__event *next;
	struct td_event ev;
};

/*
 * An asynchronous GET (libclient/loop.c): on c->asyncs while it waits for
 * its reply, then on c->done until td_client_process() calls fn. Made
 * whole at request time, so a reply never needs memory to be delivered.
 */
struct td__async {
	struct td__async *next;
	uint64_t id; /* request id of the GET */
	td_get_fn fn;
	void *ud;
	int status;
	struct td_tensor *t; /* NULL unless status == 0 */
	struct td_error err;
	/* asked while a reconnect was under way (c->queued): what to send
	 * once HELLO is answered */
	char name[TD_NAME_MAX + 1];
	uint64_t after;
	uint32_t timeout_ms;
};

/*
 * A watch the client asked for, kept so that a reconnect can ask again.
 * id is what the application holds; daemon_id what the daemon now uses.
 */
struct td__watchrec {
	struct td__watchrec *next;
	uint64_t id, daemon_id;
	/* the WATCH a loop's reconnect sent for it, its reply not read yet
	 * (catalog.c, td__rewatch_send), 0: none */
	uint64_t pending;
	uint32_t flags;
	char name[TD_NAME_MAX + 1];
};

/* Buffer ids of a connection that is gone: the daemon never sends it. */
#define TD__BUF_STALE (UINT64_MAX >> 1)

/* A received message: header, body in the client's buffer, fds owned. */
struct td__msg {
	struct td_wire_hdr hdr;
	const uint8_t *body;
	size_t body_len;
	int fds[TD_WIRE_MAX_FDS];
	unsigned nfds;
};

/*
 * td_client_get_newer served by a follow of the name (follow.c;
 * docs/fastpath.md, "get_newer rides a follow"): a name the client asked
 * for again, newer than what it got last, is followed, so a consumer
 * loop of the plain API takes each version without a message. Two
 * follows a name: the tensor got last may still be held while the next
 * is asked for.
 */
#define TD__GF_NAMES 16
#define TD__GF_FOLLOWS 2
struct td__gf {
	char name[TD_WIRE_MAX_NAME + 1]; /* "" = a free slot */
	uint64_t last; /* the version get_newer gave for it last */
	uint64_t used; /* c->gf_clock at its last use: the oldest goes */
	struct td_follow *f[TD__GF_FOLLOWS]; /* made when first needed */
	bool no;   /* FOLLOW refused: always the GET path for it */
	bool busy; /* a call is taking through one of its follows */
};

/*
 * Lent loans a client keeps, one per name (loans.c; docs/fastpath.md,
 * "Streams"): a producer of several named streams on one connection
 * gets each one's next loan in its PUBLISH reply.
 */
#define TD__LENT_MAX 16
/* a producer of that many streams of four planes keeps each one's two
 * last versions' buffers idle, to be lent back to it (produce.c) */
_Static_assert(2 * 4 * TD__LENT_MAX <= TD__LOAN_CACHE,
	       "a loan cache per name");
/* stages one connection has at once: one per lent loan (stage.c) */
#define TD__STAGES TD__LENT_MAX

/* rings of one client whose reader rows td_sub_next prefetches */
#define TD__PROD_ROWS 4
/* rows of one ring it prefetches at most */
#define TD__PROD_ROW_LINES 4

/*
 * Whose turn it is to make one kind of callback (td_client_process():
 * watch events, finished asynchronous GETs, the ring walk), lock held:
 * one thread at a time, so that a callback never runs beside another of
 * its kind nor overtakes it. A call that finds another thread's turn
 * leaves the work to it without waiting (skipped), and td_client_fd()
 * stays quiet for that work until the turn ends (that thread's loop
 * would spin on it).
 */
struct td__turn {
	pthread_t by;   /* whose it is, while depth > 0 */
	unsigned depth; /* its calls deep (a callback may process again) */
	bool skipped;   /* another thread's call left work to it */
};

/*
 * Take the turn: true, or false (skipped noted) when another thread has
 * it, or when nest is false and this thread has it already.
 */
static inline bool td__turn_take(struct td__turn *t, bool nest)
{
	pthread_t self = pthread_self();

	if (t->depth && !(nest && pthread_equal(t->by, self))) {
		t->skipped = true;
		return false;
	}
	t->by = self;
	t->depth++;
	return true;
}

/* End a td__turn_take(): whether another call skipped work (the last
 * end of a turn only; it is then forgotten). */
static inline bool td__turn_give(struct td__turn *t)
{
	bool skipped = t->skipped;

	if (--t->depth)
		return false;
	t->skipped = false;
	return skipped;
}

/* Is the work of this kind left to the thread whose turn it is (then
 * td_client_fd() is quiet for it)? */
static inline bool td__turn_left(const struct td__turn *t)
{
	return t->depth && t->skipped;
}

/*
 * What conn.c, the connection core, hands up to the files above it; set
 * by connect.c at connect (callbacks, so that no call leads back up).
 */
struct td__msg;
struct td__client_ops {
	void (*free)(struct td_client *c); /* the last reference went */
	/* TD_CLIENT_RECONNECT of a broken connection (lock held) */
	int (*reconnect)(struct td_client *c, struct td_error *err);
	/* the same for an event loop, never waiting: its next step
	 * (connect.c, reconnect_step; the TD__RC_* states below) */
	int (*reconnect_step)(struct td_client *c, struct td_error *err);
	/* the connection broke: what waits for a reply will get none */
	void (*broken)(struct td_client *c, int code);
	/* a reply conn.c does not wait for: true when taken */
	bool (*reply)(struct td_client *c, struct td__msg *m);
	void (*ready)(struct td_client *c); /* the event queue changed */
};

struct td_client {
	const struct td__client_ops *ops;
	pthread_mutex_t lock; /* everything below */
	unsigned refs;        /* the handle + every live tensor and loan */
	int sock;             /* -1 once closed */
	int dead;             /* sticky -errno after a framing violation */
	int daemon_pidfd;     /* -1 when none */
	pid_t pid;            /* the process that connected: its own */
	unsigned fork_gen;    /* td__client_foreign() */
	/* td_client_close() was called: read without the lock by the
	 * rings' fast path (ring.c, prod_usable) */
	_Atomic bool closed;
	unsigned lock_gen;    /* the fork whose child remade lock, turns */
	/*
	 * The reader rows of the rings this client produces (td_ring_create:
	 * the first row of each, at most TD__PROD_ROWS rings; NULL where
	 * none) and how many rows of each to prefetch. td_sub_next
	 * prefetches them when it finds a new version (ring.c, try_hold).
	 * Written with the lock held, read without it: the values are only
	 * ever prefetched, and a prefetch of a ring closed meanwhile reads
	 * nothing and cannot fault.
	 */
	_Atomic(const void *) prod_rows[TD__PROD_ROWS];
	_Atomic uint32_t prod_row_n[TD__PROD_ROWS];
	uint32_t path_in;     /* enum td_import */
	bool pidfd_forced;    /* TENSORD_IMPORT=pidfd: never fall back */
	uint32_t path_out;
	/* hello.features: TD_WIRE_FEAT_* this daemon serves (td__has) */
	struct td_wire_hello_rep hello;
	char ident[64];
	uint64_t next_id;
	struct td__event *ev_head, *ev_tail;
	/*
	 * Watch events queued (OVERFLOWED ones not counted), the most kept
	 * (0 none), and those dropped that no OVERFLOWED event holds yet
	 * (it had no memory either): td__event_take() gives them then.
	 */
	unsigned ev_count, ev_limit;
	uint64_t ev_lost;
	/* the RECONNECTED event queued (outside the bound), NULL if none */
	struct td__event *ev_recon;
	/*
	 * Event loops (libclient/loop.c): epfd is what td_client_fd() hands
	 * out; it polls readable when the socket is readable or when efd is,
	 * and efd is kept readable exactly while something is queued here
	 * (events, finished asynchronous GETs).
	 */
	int epfd, efd;
	bool efd_on;
	/*
	 * TD_CLIENT_RECONNECT in a loop: after a failed try the broken
	 * socket leaves epfd (its hang-up would wake the loop at once) and
	 * rfd, a timerfd in epfd, wakes it for the next; rtries counts the
	 * tries that failed in a row (the wait doubles up to a second).
	 */
	int rfd;
	unsigned rtries;
	/*
	 * The asynchronous reconnect of td_client_process() (connect.c,
	 * ops->reconnect_step): rsock the new socket (-1: no try under way),
	 * rstate where the try is (TD__RC_*), rby its deadline (CLOCK_MONOTONIC
	 * ns, -1: none), rretry_ms the wait before connect() is tried again
	 * on a full listen queue, rhello_id the HELLO's request id. GETs
	 * asked meanwhile wait on queued until HELLO is answered.
	 */
	int rsock;
	int rstate;
	int64_t rby;
	unsigned rretry_ms;
	uint64_t rhello_id;
	struct td__async *queued, *queued_tail;
	struct td__async *asyncs;          /* GETs waiting for a reply */
	struct td__async *done, *done_tail; /* replied, not yet delivered */
	bool closing; /* td_client_close() began: no new asynchronous GET */
	td_event_fn ev_fn; /* td_client_set_event_handler(), NULL = none */
	void *ev_ud;
	/* td_client_process()'s callbacks, one thread at a time each:
	 * watch events, finished GETs (loop.c, deliver) */
	struct td__turn ev_turn, get_turn;
	struct td_sub *subs; /* subscriptions with a handler (ring.c) */
	/* follows with a td_follow_fd(), fired when the connection goes
	 * (follow.c, td__follow_conn_gone) */
	struct td_follow *fd_follows;
	/*
	 * td__sub_deliver() walking them (one walk at a time, and not
	 * nested either). A call that found the walk under way quietened the
	 * subscriptions' fds (so that its loop does not spin on them), and
	 * the walk then owes another of all of them (sub_again), which
	 * keeps efd readable until it is done.
	 */
	struct td__turn sub_turn;
	bool sub_again;
	/* broadcast when a walk ends: td_sub_close() from another thread
	 * waits for it (the walk reads the next one's fd, calls its fn) */
	pthread_cond_t sub_walked;
	struct td__map *maps; /* list of every mapping */
	unsigned idle_maps;   /* maps with refs == 0 */
	struct td__loanbuf *loans; /* recyclable loan buffers */
	unsigned idle_loans;       /* loans with busy == false */
	uint64_t idle_bytes;       /* their bytes */
	uint64_t loan_imports;     /* loan buffers imported (an fd each) */
	/*
	 * The next loans PUBLISH replies lent (TD_WIRE_PUB_LOAN), not yet
	 * handed out: one per name (a loan is lent for the name of the
	 * publish that asked), n_lent of them, oldest first; lent_last:
	 * the alloc id of the one lent last, which is what the daemon's
	 * UNLOAN gives back (0: none). unloan: the daemon still holds that
	 * one, which this client dropped, to be returned by the next ALLOC
	 * (TD_WIRE_ALLOC_UNLOAN); the others go back by id (loans.c).
	 */
	struct td_alloc *lent[TD__LENT_MAX];
	unsigned n_lent;
	uint64_t lent_last;
	uint64_t lent_clock; /* stream PUBLISHes so far (a lent loan's age) */
	bool unloan;
	/*
	 * TD_ALLOC_REWRITE (produce.c): loans of fewer bytes than this are
	 * plain stream loans ($TENSORD_REWRITE_MIN, bytes).
	 */
	uint64_t rewrite_min;
	/* alloc to publish of the last TD_ALLOC_REWRITE loan, 0 none yet;
	 * shorter than rewrite_fill_ns ($TENSORD_REWRITE_FILL_US): a stream
	 * loan */
	int64_t rw_fill_ns, rewrite_fill_ns;
	/* the name of the last rewritable loan published, the one the
	 * daemon may take back (rw_last_len 0: none yet) */
	uint16_t rw_last_len;
	char rw_last[TD_WIRE_MAX_NAME];
	/* new planes reserved here (TD_WIRE_ALLOC_RESERVE), not in the
	 * daemon; $TENSORD_ALLOC_RESERVE=daemon: false */
	bool reserve_self;
	/* plain loans write-sealed here before PUBLISH (td__alloc_seal);
	 * $TENSORD_SEAL=daemon: false, the daemon seals them */
	bool seal_self;
	/*
	 * td_client_publish_alloc_nowait (produce.c): the PUBLISH sent and
	 * not answered yet (pub_id 0: none) and its loan until then;
	 * pub_err: a failure read and not yet returned (code 0: none);
	 * pub_version: what the last one published (0: none, or not known).
	 */
	uint64_t pub_id;
	struct td_alloc *pub_alloc;
	uint32_t pub_flags;
	uint64_t pub_version;
	struct td_error pub_err;
	uint64_t clock;
	/* td_client_set_interrupt(): asked when a signal interrupts the
	 * wait for a reply, NULL never (conn.c, reply_wait); with
	 * TD_INTR_SEND in intr_flags (td_client_set_interrupt_ex) also the
	 * wait of a send the socket's full buffer holds up (send_wait) */
	int (*intr_fn)(void *ud);
	void *intr_ud;
	uint32_t intr_flags;
	/*
	 * How long the daemon may hold the request whose reply is waited for
	 * (ms, 0: it answers at once): a GET or RING_SUBSCRIBE that parks
	 * sets its finite timeout here for its call (lock held), so that a
	 * signal asks intr_fn only once the reply is that much plus
	 * INTR_GRACE_NS late (reply_wait); one that parks without limit
	 * leaves 0 (no grace would cover it).
	 */
	uint32_t park_ms;
	/* TD_CLIENT_RECONNECT (connect.c) */
	bool reconnect;
	uint32_t pref;  /* import preference, for the next HELLO */
	uint32_t hello_ms; /* connect and HELLO deadline (0: none) */
	uint32_t epoch; /* +1 per reconnect: ids of older ones are void */
	char path[108]; /* the socket path connected to */
	struct td__watchrec *watches;
	uint64_t next_watch; /* application watch ids */
	/* a loop's reconnect: WATCH replies still to come, watches made
	 * again so far (TD_EVENT_TYPE_RECONNECTED waits for the last) */
	unsigned rw_left, rw_ok;
	/*
	 * How the reply to a GET that may park is waited for (pace.h, as
	 * ring waits): it comes when another client publishes, so polling
	 * for it briefly saves a wake-up. Other replies are not polled for:
	 * the daemon has to run to make them, on the CPU a poll would take.
	 */
	struct td_pace pace_get;
	struct td__gf gf[TD__GF_NAMES];
	uint64_t gf_clock;
	bool gf_off; /* TENSORD_GET_FOLLOW=0: get_newer always GETs */
	/* TENSORD_WAKE_ROWS=0: ring and follow sleepers share one futex
	 * word (what libtensord did before TD_WIRE_FEAT_WAKE_ROWS) */
	bool rows_off;
	/*
	 * Staged publishes (stage.c, docs/fastpath.md "A followed publish
	 * without the daemon's hop"): the stages PUBLISH and REWRITE ALLOC
	 * replies offered, one per loan (st[]: alloc 0 a free one; the
	 * daemon keeps TD__STAGES a connection), and the one offered last
	 * and not yet spent (st_alloc 0: none); the trigger page that fires
	 * them (st_page of generation st_pgen: one per connection); and for
	 * each of the last TD__STAGES names published from a stream or
	 * rewritable loan the descriptor of its last PUBLISH (desc[];
	 * desc_last the one the last PUBLISH kept, TD__STAGES none): a stage
	 * repeats it, so only a publish of the same name with the same one
	 * fires. stage_off: TENSORD_STAGE=0.
	 */
	struct td__stage {
		uint64_t alloc, version;
		uint32_t gen;
		uint32_t slot; /* the reply's word, 0: the name's own */
	} st[TD__STAGES];
	uint64_t st_alloc, st_version;
	uint32_t st_gen, st_pgen;
	struct td_follow_trigger *st_page;
	struct td__desc {
		uint8_t *buf; /* name, pin, meta, blob: stage.c */
		uint32_t len, cap;
		uint64_t used; /* desc_clock at its last keep or fire */
	} desc[TD__STAGES];
	unsigned desc_last;
	uint64_t desc_clock;
	bool stage_off;
	uint8_t *rbuf; /* TD_WIRE_MAX_MSG receive buffer */
	uint8_t *sbuf; /* TD_WIRE_MAX_MSG send buffer */
};

/*
 * Does the daemon serve feature f (TD_WIRE_FEAT_*)? It said so in its
 * HELLO reply; a daemon that predates feature bits serves none.
 */
static inline bool td__has(const struct td_client *c, uint32_t f)
{
	return (c->hello.features & f) == f;
}

/*
 * Do this client's ring readers and followers sleep on their own row's
 * word (docs/fastpath.md, "One futex word per sleeper")? Only with a
 * daemon that wakes such rows too.
 */
static inline bool td__wake_rows(const struct td_client *c)
{
	return !c->rows_off && td__has(c, TD_WIRE_FEAT_WAKE_ROWS);
}

/* Fill *err (may be NULL) and return code. fmt describes a local failure. */
int td__fail(struct td_error *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

void td__client_ref(struct td_client *c);   /* lock held */
void td__client_unref(struct td_client *c); /* lock NOT held */

/*
 * One request/reply round trip, lock held. body is in c->sbuf after the
 * header room (TD_WIRE_HDR_LEN); fds are attached with SCM_RIGHTS (borrowed).
 * On success the reply is in *rep (body in c->rbuf until the next call; the
 * caller owns rep->fds and must td__msg_close_fds()). A reply with a
 * negative status returns that status with the daemon's reason in *err and
 * its fds closed.
 */
int td__call(struct td_client *c, uint16_t op, size_t body_len,
	     const int *fds, unsigned nfds, struct td__msg *rep,
	     struct td_error *err);
/* td__call, polling for the reply first as planned by pace (NULL: not). */
int td__call_paced(struct td_client *c, uint16_t op, size_t body_len,
		   const int *fds, unsigned nfds, struct td_pace *pace,
		   struct td__msg *rep, struct td_error *err);
/*
 * td__call in two halves, for a request whose reply is read later:
 * td__request sends it and gives its id; td__reply waits for the reply
 * to id (as td__call does, other messages set aside meanwhile).
 */
int td__request(struct td_client *c, uint16_t op, size_t body_len,
		const int *fds, unsigned nfds, uint64_t *id,
		struct td__msg *rep, struct td_error *err);
int td__reply(struct td_client *c, uint16_t op, uint64_t id,
	      struct td_pace *pace, struct td__msg *rep, struct td_error *err);
/* td__call without fds, waiting for the reply until CLOCK_MONOTONIC ns
 * `by` at most: -ETIMEDOUT then, and the reply, when it comes, is
 * dropped as a stray one (td__msg_aside). */
int td__call_by(struct td_client *c, uint16_t op, size_t body_len,
		int64_t by, struct td__msg *rep, struct td_error *err);
void td__msg_close_fds(struct td__msg *m);
/* Send one request without waiting: its reply is dropped when it comes. */
int td__send(struct td_client *c, uint16_t op, size_t body_len,
	     uint64_t *id);
/* Receive one datagram (flags: MSG_DONTWAIT or 0), lock held. */
int td__msg_recv(struct td_client *c, struct td__msg *m, int flags);
/*
 * The next watch event into *ev, if any (lock held): 1, else 0. Frees
 * its record, keeps efd's readiness right.
 */
int td__event_take(struct td_client *c, struct td_event *ev);
/* Queue a watch event (or count it dropped: the limit, no memory). */
void td__event_queue(struct td_client *c, const struct td_event *ev);
/* Queue the RECONNECTED event, outside the bound, one at most. */
void td__event_reconnected(struct td_client *c, uint64_t restored);
/* Count forks (td__fork_gen) from the first connect on. */
void td__fork_watch(void);

/* Deal with a message nobody waits for: queue it or drop it, close fds. */
void td__msg_aside(struct td_client *c, struct td__msg *m);

/* ring.c: call the handlers of subscriptions that have a version or
 * ended; no lock held. Returns how many calls. */
int td__sub_deliver(struct td_client *c);

/* loop.c: make epfd/efd for a new handle; close them. */
int td__loop_open(struct td_client *c);
void td__loop_close(struct td_client *c);
/* loop.c: make efd readable iff something is queued (lock held). */
void td__loop_ready(struct td_client *c);
/* loop.c: a reply to an asynchronous GET? Then consume it: true. */
bool td__loop_reply(struct td_client *c, struct td__msg *m);
/* loop.c: fail every pending asynchronous GET with status (lock held). */
void td__loop_fail(struct td_client *c, int status);
/* loop.c: fail every GET queued for a reconnect with status (lock held). */
void td__loop_fail_queued(struct td_client *c, int status,
			  const struct td_error *why);
/* loop.c: send the GETs queued for a reconnect (connected, lock held). */
void td__loop_send_queued(struct td_client *c);
/* loop.c: fd in epfd (on) or out of it, if there is an epfd (lock held). */
void td__loop_watch(struct td_client *c, int fd, bool on);
/* loop.c: the reconnect timer (rfd) fires at CLOCK_MONOTONIC ns `at`,
 * never if at < 0 (lock held). 0, or -errno when there is no timer. */
int td__loop_timer(struct td_client *c, int64_t at);
/*
 * ops->reconnect_step (connect.c): TD_CLIENT_RECONNECT without waiting
 * (lock held, the connection broken): the next step of the try under
 * way, or a new try (a non-blocking connect, HELLO sent), each step made
 * when rsock or rfd wakes the loop. 0: connected (as td__client_usable);
 * -EINPROGRESS: the try goes on; else the try failed (-errno, *err says
 * why), nothing of it left open, the GETs queued for it failed. The
 * states of a try (c->rstate):
 */
enum { TD__RC_IDLE, TD__RC_CONNECTING, TD__RC_HELLO, TD__RC_HELLO_OLD };
/* loop.c: at close, cancel and deliver every asynchronous GET (no lock). */
void td__loop_cancel(struct td_client *c);
/* conn.c: the status and reason of an error reply into *err. */
int td__reply_error(const struct td__msg *m, int status,
		    struct td_error *err);

/*
 * tensor.c: turn a GET reply into a tensor. nowait: a lease that cannot be
 * handed out is released without waiting for the daemon's answer (the
 * caller is itself inside a receive loop). Lock held; closes m's fds.
 */
int td__get_reply(struct td_client *c, struct td__msg *m, bool nowait,
		  struct td_tensor **out, struct td_error *err);
/*
 * tensor.c: a tensor from a follow entry's GET reply body (every fd left
 * out: its buffers come from the mapping cache), held through f's row.
 * -ENOENT when a buffer is not mapped here (err untouched). Lock held.
 */
struct td_follow;
int td__tensor_from_entry(struct td_client *c, const uint8_t *body,
			  size_t len, uint64_t version, struct td_follow *f,
			  void (*let_go)(struct td_follow *f),
			  struct td_tensor **out, struct td_error *err);
/* tensor.c: a GET (mode TD_GET_*) and its reply as a tensor (lock NOT
 * held). */
int td__get_common(struct td_client *c, const char *name, uint32_t mode,
		   uint64_t version, uint32_t timeout_ms,
		   struct td_tensor **out, struct td_error *err);
/* follow.c: the connection is gone: every td_follow_fd() of c polls
 * readable, so an event loop's td_follow_poll() says -EPIPE (lock held). */
void td__follow_conn_gone(struct td_client *c);
/* follow.c: a tensor held through f's row is released (lock held). */
void td__follow_let_go(struct td_follow *f);
/*
 * follow.c: td_client_get_newer through a follow of the name (lock NOT
 * held). *served false: nothing was done (or it turned out the GET path
 * is needed: the name has no version now), and *timeout_ms is what is
 * left of the wait; true: the result is the return value.
 */
int td__gf_get_newer(struct td_client *c, const char *name, uint64_t after,
		     int *timeout_ms, struct td_tensor **out,
		     struct td_error *err, bool *served);
/* follow.c: a GET NEWER of name gave version v (lock NOT held). */
void td__gf_note(struct td_client *c, const char *name, uint64_t v);
/* follow.c: end every follow get_newer made (lock NOT held). */
void td__gf_close_all(struct td_client *c);
/* tensor.c: t, got by a GET for f, is f's tensor (lock held): its
 * release ends its lease and calls let_go(f), so that f goes on. */
void td__tensor_follow(struct td_tensor *t, struct td_follow *f,
		       void (*let_go)(struct td_follow *f));
/* tensor.c: encode a GET request into c->sbuf; returns the body length. */
int64_t td__get_encode(struct td_client *c, const char *name, uint32_t mode,
		       uint64_t version, uint32_t timeout_ms);

/*
 * A request whose body is one u64 id (RING_CLOSE, RING_WAKE, FOLLOW_CLOSE,
 * FOLLOW_WAKE) with nfds fds attached; the reply's fds are closed. Lock
 * held. 0 or -errno.
 */
int td__call_id(struct td_client *c, uint16_t op, uint64_t id,
		const int *fds, unsigned nfds);
/*
 * A new timerfd sent with a wake-up request (RING_WAKE, FOLLOW_WAKE) for
 * id, made on the connection of epoch, served with HELLO feature
 * `feature`: the fd, or -errno (-EOPNOTSUPP, -ECONNRESET, -ECHILD in a
 * child of fork(); nothing left open). No lock held.
 */
int td__wake_fd(struct td_client *c, uint16_t op, uint64_t id, uint32_t epoch,
		uint32_t feature);
/* The same with a timerfd of the caller's (kept open whatever the
 * answer): 0 or -errno. A follow made anew keeps its fd this way. */
int td__wake_attach(struct td_client *c, uint16_t op, uint64_t id,
		    uint32_t epoch, uint32_t feature, int fd);

/* Import daemon fd `remote` (pidfd path) or take `scm` (SCM path): -> fd. */
int td__import_fd(struct td_client *c, int32_t remote, int *scm, int *fd);

/*
 * Map cache (lock held). A window buffer_id maps [lo, hi) of the file
 * widened to whole pages; any other maps the whole file (lo, hi unused).
 */
int td__map_get(struct td_client *c, uint64_t buffer_id, int32_t remote,
		int *scm, uint64_t lo, uint64_t hi, struct td__map **out);
void td__map_put(struct td_client *c, struct td__map *m);
void td__maps_drop(struct td_client *c, bool all);
/* Drop the idle recyclable loan buffers (all: every one). Returns how many. */
unsigned td__loans_drop(struct td_client *c, bool all);
/* Forget the lent next loan without a message (the client is going). */
void td__next_loan_forget(struct td_client *c);
/* The trigger page and descriptor of staged publishes go (lock held or
 * the client freed). */
void td__stage_forget(struct td_client *c);
/* stage.c: STAGE_PAGE, the name's trigger page mapped (lock held); the
 * reply waited for until `by` (td__call_by; -1 ever). */
int td__stage_page_map(struct td_client *c, const char *name, bool rw,
		       int64_t by, uint32_t *gen, void **page,
		       struct td_error *err);
/*
 * stage.c (lock held): the PUBLISH flags req of loan alloc_id (named: a
 * stream or rewritable loan named for a name), published as
 * name, adds: TD_WIRE_PUB_FIRED when it repeats the staged descriptor
 * of the staged loan and fired its stage, TD_WIRE_PUB_STAGE when the
 * daemon may stage its next loan. td__stage_note: the stage a reply
 * offers.
 */
uint32_t td__stage_flags(struct td_client *c, uint64_t alloc_id, bool named,
			 const char *name,
			 const struct td_wire_publish_req *req);
void td__stage_note(struct td_client *c, const struct td_wire_publish_rep *r);
/* stage.c: a PUBLISH failed: the descriptor it sent is not the name's
 * last version's, which a take-back's stage repeats (lock held). */
void td__stage_refused(struct td_client *c);
/* stage.c: loan alloc_id of this connection ends unpublished: its stage,
 * if offered, goes with it (lock held). */
void td__stage_drop(struct td_client *c, uint64_t alloc_id);
/*
 * stage.c (lock held): TD_WIRE_ALLOC_STAGE for ALLOC req when it is a
 * REWRITE ALLOC of a name whose take-back the daemon may stage (the last
 * publish kept was of that name), else 0; td__stage_note_alloc: the
 * stage its reply offers.
 */
uint32_t td__stage_alloc_flag(struct td_client *c,
			      const struct td_wire_alloc_req *req);
void td__stage_note_alloc(struct td_client *c,
			  const struct td_wire_alloc_rep *r);
/* A new connection (lock held): the lent loan named an alloc of the old
 * daemon; drop it (its buffers idle), and forget a give-back. */
void td__next_loan_reset(struct td_client *c);
/* An unsigned count from the environment, or dflt when it is unset,
 * not a number or over max (wait.c). */
uint64_t td__env_u64(const char *name, uint64_t dflt, uint64_t max);
/* c->rewrite_min and rewrite_fill_ns from $TENSORD_REWRITE_MIN and
 * $TENSORD_REWRITE_FILL_US, c->reserve_self from $TENSORD_ALLOC_RESERVE,
 * c->seal_self from $TENSORD_SEAL, or the defaults (rewrite.c). */
void td__produce_env(struct td_client *c);
/* rewrite.c: whether a loan of these planes is rewritable (flags, the
 * alloc's); whether to ask for the take-back now (marked: that). */
bool td__rewrite_marked(const struct td_client *c, uint32_t flags,
			bool recycle, uint32_t plane_count,
			const uint64_t *sizes);
bool td__rewrite_now(const struct td_client *c, bool marked,
		     const char *name, size_t name_len);
/* The reply to the PUBLISH of td_client_publish_alloc_nowait, read while
 * waiting for another (lock held): take its outcome, close its fds. */
void td__pub_answered(struct td_client *c, struct td__msg *m);
/* The connection it was sent on is gone (lock held): forget it, its
 * outcome unknown (code: what the next producing call returns). */
void td__pub_forget(struct td_client *c, int code);

/*
 * A wait plan from $TENSORD_RING_SPIN_US / $TENSORD_RING_SPIN_MAX_US
 * (defaults 20 and 200 us; docs/fastpath.md, "Waiting"): rings and the
 * replies of the socket alike.
 */
void td__pace_init_env(struct td_pace *p);

/* CLOCK_MONOTONIC in ns. */
int64_t td__now_ns(void);

/* The spin-wait hint of the CPU (PAUSE, YIELD); nothing elsewhere. */
static inline void td__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

/* forks of this process so far, as its children count them (conn.c) */
extern unsigned td__fork_gen;
/*
 * Whether c was made by another process: this one is a child of fork()
 * that inherited it, whose socket is the parent's, so it neither sends
 * nor reads on it. No system call: a pthread_atfork() child handler
 * counts forks. Inline: every ring call on the fast path checks it.
 */
static inline bool td__client_foreign(const struct td_client *c)
{
	return c->fork_gen != td__fork_gen;
}
/*
 * c->lock: every lock of it goes through here. In a child of fork() an
 * inherited handle's mutex may be held by a thread of the parent that
 * does not exist here (one waiting in td_client_get_newer, say), and
 * would never be unlocked: the child makes it anew, once per fork,
 * before its first lock, so that its calls fail with -ECHILD instead of
 * hanging.
 */
void td__client_lock(struct td_client *c);
/*
 * 0 when the connection can be used, reconnecting first when it broke and
 * TD_CLIENT_RECONNECT is set (lock held); else -errno with *err.
 */
/*
 * PUBLISH_MANY and GET_MANY (many.c; lock held): the PUBLISH body of
 * loan a published as p into buf (bytes or -errno; the fds to attach in
 * tab[*nattach]); a published loan's buffers idle in the cache; an
 * earlier PUBLISH sent without waiting answered first (its failure);
 * the tensors of GET_MANY reply m (n names), all or none (none: every
 * lease it granted released, its fds closed, nothing it mapped kept).
 */
int64_t td__publish_body(struct td_client *c, struct td_alloc *a,
			 const struct td_publish *p, uint8_t *buf, size_t cap,
			 int *tab, uint32_t *nattach, struct td_error *err);
void td__published_idle(struct td_client *c, struct td_alloc *a);
int td__pub_settle(struct td_client *c, struct td_error *err);
int td__tensors_many(struct td_client *c, struct td__msg *m, uint32_t n,
		     struct td_tensor **out, struct td_error *err);
int td__client_usable(struct td_client *c, struct td_error *err);

/* catalog.c: WATCH name with flags into *daemon_id (lock held). */
int td__watch_send(struct td_client *c, const char *name, uint32_t flags,
		   uint64_t *daemon_id, struct td_error *err);
/*
 * catalog.c, a loop's reconnect (lock held): every watch's WATCH sent
 * without waiting; TD_EVENT_TYPE_RECONNECTED is queued once the last
 * reply is read (td__rewatch_reply: true when m was one; at once when
 * there is no watch).
 */
void td__rewatch_send(struct td_client *c);
bool td__rewatch_reply(struct td_client *c, struct td__msg *m);

/* Decode a wire str into a NUL-terminated buffer of cap bytes. */
void td__str_copy(char *dst, size_t cap, struct td_wire_str s);

#endif
