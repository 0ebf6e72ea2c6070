/* SPDX-License-Identifier: MIT */
/*
 * tensord internals shared by the daemon's files (not installed).
 *
 *   main.c      options, signals, start and clean shutdown
 *   log.c       the log and the daemon instance every file reaches
 *   server.c    the listening socket (path policy, stale-socket check)
 *   peer.c      one connection: recvmsg/sendmsg with SCM_RIGHTS, the
 *               outgoing queue, HELLO and import negotiation
 *   dispatch.c  the opcode table: every request to its handler
 *   store.c ... the store's files (store.h), ring.c the rings,
 *               follow.c followed names
 *   plane.c     descriptor policy: plane checks, seals, memfds
 *   cred.c      whom the daemon may pull fds from (the connected process,
 *               while its credentials are still the connection's)
 *   tenant.c    per-uid limits and the descriptor reserve
 *
 * docs/architecture.md has one paragraph per file and the order of their
 * dependencies.
 *
 * Single-threaded: everything runs on one libuv loop, so the scratch
 * buffers in struct td__daemon are shared by every connection (a message
 * is fully handled before the next is read).
 */
#ifndef TD_DAEMON_H
#define TD_DAEMON_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "wire.h"

/* ---- intrusive doubly linked list (wayland style) ---- */

struct td__list {
	struct td__list *prev, *next;
};

static inline void td__list_init(struct td__list *l)
{
	l->prev = l->next = l;
}

static inline bool td__list_empty(const struct td__list *l)
{
	return l->next == l;
}

/* Insert e before head (i.e. at the tail). */
static inline void td__list_add_tail(struct td__list *head, struct td__list *e)
{
	e->prev = head->prev;
	e->next = head;
	head->prev->next = e;
	head->prev = e;
}

static inline void td__list_del(struct td__list *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->prev = e->next = e;
}

#define td__container_of(ptr, type, member)                                   \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* ---- logging ---- */

enum td__log_level {
	TD_LOG_ERROR = 0,
	TD_LOG_WARN = 1,
	TD_LOG_INFO = 2,
	TD_LOG_DEBUG = 3,
};

/* log.c: to stderr, at most td__log_level */
extern int td__log_level;
void td__log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* "error", "warn", "info" or "debug": its TD_LOG_*, else -1. */
int td__log_level_parse(const char *name);

/* Close the fds that are >= 0 and set them to -1. */
void td__close_fds(int *fds, unsigned n);

/*
 * At most one log line per interval for something a client can cause over
 * and over (EMFILE at accept, refused pidfd imports): the log stays small
 * whatever the load. The caller reports r->suppressed in the line it
 * logs and resets it.
 */
struct td__ratelimit {
	uint64_t next_ms; /* CLOCK_MONOTONIC ms before which lines are held */
	unsigned long suppressed;
};
#define TD__LOG_INTERVAL_MS 10000
bool td__ratelimit_ok(struct td__ratelimit *r, unsigned interval_ms);

/* ---- per-peer limits (docs/protocol.md, "Limits") ---- */

#define TD__MAX_LEASES 4096 /* leases held by one connection */
#define TD__MAX_ALLOCS 64   /* unpublished allocs of one connection */
/* recyclable buffers kept per connection (docs/fastpath.md, "Recycled
 * loans"); the oldest is dropped beyond it. A connection's streams whose
 * consumers keep a frame until the next leave one a plane there between
 * publishes: sixteen names of four planes */
#define TD__MAX_FREEBUFS 64
#define TD__MAX_WATCHES 256
#define TD__MAX_WAITERS 256    /* parked GETs, GET_MANYs, subscribes */
#define TD__TFD_POOL 4 /* fence timerfds kept by one connection */
/* staged publishes of one connection: one per lent loan, as the library
 * keeps one per name for 16 names (docs/fastpath.md) */
#define TD__PEER_STAGES 16
#define TD__RX_BATCH 32        /* datagrams read per wakeup */
/* datagrams a uid's connections are read in all, a loop turn (peer.c),
 * and the handling time after which it reads no more that turn */
#define TD__RX_UID_TURN 64
#define TD__RX_UID_TURN_NS 1000000
#define TD__TXQ_MAX_MSGS 1024  /* queued replies before the peer is cut */
#define TD__TXQ_MAX_BYTES (4u << 20)
/*
 * fds sent to one peer and not yet read by it. The kernel charges fds in
 * flight to the sending uid (ours) and refuses every sendmsg with
 * ETOOMANYREFS past RLIMIT_NOFILE, so a client that stops reading would
 * otherwise starve everyone. A synchronous client has at most one reply
 * (<= 9 fds) unread; this leaves room for pipelining.
 */
#define TD__MAX_FDS_INFLIGHT 128
#define TD__MAX_GROUPS 32 /* supplementary gids kept per peer (policy) */

/* ---- per-uid limits (tenant.c, docs/policy.md §5) ---- */

enum td__lim {
	TD__LIM_CONNS,   /* connections */
	TD__LIM_FDS,     /* descriptors held for the uid */
	TD__LIM_LEASES,  /* leases (GET, ring GET) */
	TD__LIM_PINNED,  /* bytes of other uids' versions and rings it holds */
	TD__LIM_WATCHES,
	TD__LIM_WAITERS, /* parked GETs */
	TD__LIM_RINGS,
	TD__LIM_QUEUED,  /* bytes of replies queued to its connections */
	TD__LIM_COUNT
};
extern const char *const td__lim_names[TD__LIM_COUNT]; /* policy.c */
/* Limits in bytes take N[K|M|G|T]; the others are plain counts. */
static inline bool td__lim_is_bytes(int k)
{
	return k == TD__LIM_PINNED || k == TD__LIM_QUEUED;
}
/* descriptors root and the daemon's uid keep for accepting and answering */
#define TD__FD_SLACK 16

/* ---- daemon ---- */

/* --snapshot-prefix and --snapshot-skip: at most this many of each */
#define TD__SNAPSHOT_MAX_PREFIXES 64

struct td__opts {
	const char *socket_path; /* resolved */
	uint32_t import;         /* enum td_import: AUTO or forced */
	uint64_t max_bytes;      /* 0 = unlimited */
	uint64_t uid_max_bytes;  /* per-uid default quota, 0 = none */
	bool uid_max_bytes_set;  /* --uid-max-bytes given */
	/* --uid-limit KEY=N: for every uid without a policy limit line */
	uint64_t uid_limit[TD__LIM_COUNT];
	unsigned uid_limit_set; /* bit per enum td__lim */
	const char *policy_path; /* NULL = everyone may do everything */
	int socket_mode;         /* chmod of the socket file, -1 = umask */
	gid_t socket_gid;        /* chown of the socket file, -1 = ours */
	const char *http_addr;   /* --http, NULL = no HTTP store */
	const char *http_prefix; /* --http-prefix, NULL = nothing exported */
	unsigned http_max_connections, http_timeout; /* s */
	const char *http_cors;   /* --http-cors, NULL = no CORS headers */
	/* $TENSORD_TEST_NO_PEERPIDFD: take the pidfd_open fallback (tests) */
	bool no_peerpidfd;
	/* $TENSORD_TEST_HIDE_FEATURES: HELLO feature bits left out of the
	 * reply, as a daemon that predates them would (tests) */
	uint32_t hide_features;
	/* a ring's RING_WAKE generations wrap after this one: 2^32 - 1, or
	 * $TENSORD_TEST_RING_WAKE_GEN_MAX (tests, at least 2) */
	uint32_t wake_gen_max;
	/* trigger pages' generations wrap after this one: 2^32 - 1, or
	 * $TENSORD_TEST_TRIG_GEN_MAX (tests; 1: every page is 1) */
	uint32_t trig_gen_max;
	/* $TENSORD_TEST_FIRST_VERSION: the store's first version number
	 * (tests of the 30 bits of a trigger word; 0: 1) */
	uint64_t first_version;
	/* --own-fences-only: no producer's eventfd to a reader without
	 * TD_WIRE_FEAT_FENCE_OWN (fence.c) */
	bool own_fences_only;
	const char *snapshot_path;     /* --snapshot, NULL = none */
	uint64_t snapshot_interval_ms; /* --snapshot-interval */
	/* --snapshot-prefix, --snapshot-skip (argv's strings): which names
	 * a snapshot keeps (snapshot.c, td__snapshot_keeps) */
	const char *snapshot_keep[TD__SNAPSHOT_MAX_PREFIXES];
	const char *snapshot_skip[TD__SNAPSHOT_MAX_PREFIXES];
	unsigned snapshot_nkeep, snapshot_nskip;
};

struct td__store;
struct td__server;

/*
 * Counters: what STATUS reports beyond the store's own figures
 * (status.c) and what /metrics shows (http.c). Replies are indexed by
 * opcode (every opcode is below TD__STAT_OPS).
 */
#define TD__STAT_OPS 32
struct td__stats {
	uint64_t started_ms; /* uv_now() at start */
	uint64_t evictions;  /* versions evicted (store.c) */
	/*
	 * Store records a request's bookkeeping looked at (store.c):
	 * names eviction's walks visit, buffer-id table entries a plane's
	 * id is looked up among. Grows with the work a PUBLISH does, so a
	 * test sees a walk over every name where one is not needed.
	 */
	uint64_t visits;
	/*
	 * Follower rows the bells' walks looked at (follow.c): a commit
	 * visits the rows in use, a name with one follower one or two a
	 * walk, not every row a bell has room for.
	 */
	uint64_t row_visits;
	/* fd store state images written, and the loop turns their
	 * writing took (fdstore-image.c) */
	uint64_t state_images, state_image_turns;
	uint64_t seals_off_loop; /* memfds a request's seal made (sealer.c) */
	uint64_t seal_yields; /* seal jobs that gave their thread to another uid */
	uint64_t reads_deferred; /* connections read at a later turn (peer.c) */
	uint64_t refused[3]; /* error replies by enum td_wire_refusal */
	uint64_t replies[TD__STAT_OPS][2]; /* [op][status < 0] (peer.c) */
	uint64_t refused_access, refused_space, refused_quota; /* by errno */
	uint64_t log_suppressed; /* audit lines the rate limit left out */
	uint64_t policy_reloads; /* SIGHUP reloads that took effect */
	/* audit log token bucket: lines it may still write, refilled */
	double audit_tokens;
	uint64_t audit_ms; /* uv_now() of the last refill */
};

struct td__daemon {
	uv_loop_t *loop;
	struct td__opts opts;
	pid_t pid;
	int pidfd; /* pidfd_open(getpid()), sent in HELLO replies; -1 */
	/* CPUs of the host (td__cpus): parked GETs answered together
	 * that are as many are a crowd (lease.c, TD_WIRE_F_CROWD) */
	uint32_t cpus;
	struct td__server *server;
	struct td__store *store;
	struct td__policy *policy; /* --policy, NULL without */
	struct td__list peers; /* struct td__peer.link */
	uv_idle_t reaper;      /* drops peers marked dead, outside callbacks */
	bool reaper_on;
	/* SIGINT/SIGTERM seen: uv_stop() alone is lost when it comes
	 * during a nested uv_run (the snapshot restore at the start) */
	bool stop_asked;
	uint64_t requests; /* datagrams received from all peers (RING_STAT) */
	struct td__stats stats;
	uv_signal_t sighup; /* policy reload (status.c) */
	/* scratch, see the file comment */
	uint8_t rx[TD_WIRE_MAX_MSG];
	uint8_t tx[TD_WIRE_MAX_MSG];
	char reason[TD_WIRE_MAX_REASON + 1];
};

/* The one daemon of the process (log.c), set by main.c. */
extern struct td__daemon *td__d;

/* ---- the opcode table (dispatch.c) ---- */

enum {
	TD__OP_FDS = 1,   /* may carry fds (others are refused with them) */
	TD__OP_PARKS = 2, /* may be parked and answered later */
	TD__OP_EARLY = 4, /* allowed before HELLO */
};

struct td__op;
struct td__peer;

/* One request as the dispatcher hands it to its handler. */
struct td__req {
	const struct td_wire_hdr *h;
	const uint8_t *body; /* h->body_len bytes */
	int *fds;            /* owned: the handler closes what it keeps not */
	unsigned nfds;       /* 0 unless op->flags has TD__OP_FDS */
	const struct td__op *op;
};

/* What handles one opcode. */
typedef void td__handler(struct td__peer *p, const struct td__req *rq);

struct td__op {
	uint16_t opcode;
	uint8_t perm;  /* TD__PERM_* on the name it names (0: none) */
	uint8_t flags; /* TD__OP_* */
	td__handler *fn;
};

/* Install the dispatcher as peer.c's handlers and the ring hooks. */
void td__dispatch_init(void);

/* ---- http.c (docs/zarr.md): the read-only HTTP store ---- */

/* Whether --http ADDR has a form the store takes: 0, or -EINVAL, why. */
int td__http_addr_check(const char *addr, const char **why);
/* Listen on --http when given (0), or -1 after logging why. */
int td__http_start(struct td__daemon *d);
/* Close every HTTP connection (their leases) and the listener. */
void td__http_stop(struct td__daemon *d);

/* ---- server.c ---- */

int td__server_start(struct td__daemon *d);
/* Stop listening and remove the socket file. Idempotent. */
void td__server_stop(struct td__daemon *d);

/* ---- peer.c ---- */

struct td__peer {
	struct td__list link; /* td__daemon.peers */
	uv_poll_t poll;
	int fd;
	pid_t pid; /* SO_PEERCRED */
	uid_t uid;
	gid_t gid;
	gid_t groups[TD__MAX_GROUPS]; /* SO_PEERGROUPS, cut at the cap */
	unsigned ngroups;
	unsigned fds_inflight; /* sent since the socket was last seen empty */
	int pidfd; /* the peer's pidfd (SO_PEERPIDFD or pidfd_open), -1 */
	/*
	 * pidfd names the very process that connected (SO_PEERPIDFD). Without
	 * it (pidfd_open by number, which a reused pid could fool) HELLO's
	 * probe must prove the process holds this connection's other end.
	 */
	bool pidfd_exact;
	bool hello;
	uint32_t features; /* the TD_WIRE_FEAT_* its HELLO named */
	bool dead;       /* marked for the reaper; sends are dropped */
	bool writable_wait;
	uint32_t import_in; /* TD_IMPORT_PIDFD or TD_IMPORT_SCM */
	struct td__list txq;
	size_t txq_bytes;
	unsigned txq_count;
	unsigned txq_fds;  /* our dups held by queued messages */
	unsigned fds_held; /* socket and pidfd, counted for uid (tenant.c) */
	/* fence.c: released leases' timerfds, disarmed, for its next
	 * fenced GETs (counted for uid as fds) */
	int tfd_pool[TD__TFD_POOL];
	unsigned n_tfd_pool;
	/* operators (status.c): STATUS rows and the audit log */
	char comm[16 + 1];       /* /proc/PID/comm at connect */
	uint64_t requests;       /* datagrams received */
	uint64_t refusals;       /* error replies that were refusals */
	uint64_t since_ms;       /* uv_now() at connect */
	uint8_t refusals_logged; /* bit per enum td_wire_refusal */
	/* quota.c: td__access_any's answers under the policy of reload
	 * any_gen - 1 (0: none yet): a bit per perm known, a bit granted */
	uint64_t any_gen;
	uint8_t any_known, any_yes;
	/* this connection's number, never reused (peer.c) */
	uint64_t serial;
	/*
	 * quota.c, td__access_reads_writes_of: its last answer for this
	 * reader, about the writer of serial cov_writer under the policy
	 * of reload cov_reloads (cov_writer 0: none). The answer scans the
	 * policy's rules; a reader GETting one writer's buffers asks it at
	 * every GET.
	 */
	uint64_t cov_writer, cov_reloads;
	bool cov_ok;
	/* owned by store.c */
	struct td__list leases, allocs, watches, waiters;
	unsigned n_leases, n_allocs, n_watches, n_waiters;
	/* its follows' holds of versions no longer current (follow.c's
	 * hold_take and hold_drop), for STATUS without a walk of every
	 * followed name's rows */
	unsigned follow_holds;
	uint64_t follow_held_bytes;
	/* ended follows and trigger pages whose fds stay open for its pull
	 * (follow-linger.c) */
	unsigned lingering;
	/* the trigger page (its serial) whose fd its last STAGE_PAGE reply
	 * named by number, and `requests` then: until its next request it
	 * may still pull it (td__trig_linger) */
	uint64_t page_serial, page_mark;
	struct td__list freebufs; /* its recyclable buffers, oldest first */
	unsigned n_freebufs;
	/* the alloc the last PUBLISH with TD_WIRE_PUB_LOAN lent, 0 none */
	uint64_t loan_id;
	/*
	 * Rewriting the latest version (TD_WIRE_ALLOC_REWRITE, loan.c): the
	 * version this connection published last from a REWRITE alloc
	 * (rw_len 0: none yet) and, while rw_alloc is nonzero, the alloc
	 * that took that version's buffers back, on store->rewrites: a GET
	 * of rw_name then waits for its publish, for TD__REWRITE_WAIT_MS
	 * from rw_since (uv_now() at the take-back) at most.
	 */
	struct td__list rw_link;
	uint64_t rw_number, rw_alloc, rw_since;
	uint16_t rw_len;
	char rw_name[TD_WIRE_MAX_NAME + 1];
	/*
	 * Staged publishes (follow.c, docs/fastpath.md "A followed publish
	 * without the daemon's hop"): the bells whose stage this connection
	 * may fire, n_stages of them, one per loan (stage_alloc[i] is the
	 * alloc bell stage[i]'s stage is of; a name has one stage), and its
	 * stages committed and not yet answered (fired[]: alloc id 0 free),
	 * which their FIRED notices are answered with.
	 */
	void *stage[TD__PEER_STAGES];
	uint64_t stage_alloc[TD__PEER_STAGES];
	uint32_t stage_slot[TD__PEER_STAGES]; /* its word of trig */
	unsigned n_stages;
	struct td__trig *trig; /* its trigger page, NULL until staged */
	/* its uid's share of this loop turn spent: read at the next one,
	 * in the order cut short (peer.c, defer) */
	struct td__list defer_link;
	bool deferred;
	/* sealer.c: its request whose seals are made off the loop, NULL
	 * none; nothing more is read from it meanwhile (peer.c) */
	struct td__seal_job *sealing, *seal_spare; /* and its last one */
	struct td__fired {
		uint64_t alloc, version;
		bool rewrite; /* that alloc was rewritable (loan.c) */
	} fired[TD__PEER_STAGES];
};

/*
 * A producer's trigger page (docs/protocol.md §13, "Staged publishes";
 * trig.c): one per connection that was ever staged, made at its first
 * stage (td__peer_trig: NULL when it cannot be), freed with the
 * connection or renewed (td__peer_trig_free, its stages settled
 * already). Its two fds count as its uid's.
 */
struct td_follow_trigger;
struct td__shown_cred;
struct td__trig_names;
/* who was shown a shared mapping (shown.h, shown.c) */
struct td__shown {
	struct td__shown_cred **c;
	uint32_t n, cap;
	/* a credential could not be kept (out of memory): nobody can say
	 * who may still read, so a reload counts it as one who may not */
	bool lost;
};
struct td__trig {
	int rw, ro;
	struct td_follow_trigger *map;
	uint32_t gen;
	uint64_t serial; /* never the same twice (the bell's stage_page) */
	uid_t uid;
	/* the followers handed it (STAGE_PAGE): a name is staged on it
	 * only while every one of them may read that name (follow.c) */
	struct td__shown shown;
	struct td__trig_names *names; /* each word's last name (trig.c) */
};
struct td__trig *td__peer_trig(struct td__peer *p);
void td__peer_trig_free(struct td__peer *p);
/*
 * follow-linger.c: t is about to be freed; its fds stay open (t->rw,
 * t->ro taken: -1) while a connection alive may still pull them (its
 * last STAGE_PAGE reply named them by number, no request since), counted
 * in t->uid's fds (charge of them) until the last one's next request or
 * end. false: nobody may (the fds are still t's).
 */
bool td__trig_linger(struct td__trig *t, unsigned charge);
/*
 * The word of p's trigger page for a new stage: want (the name's own,
 * or 0) when no stage of p has it, else with any the first free word
 * from 1 (TD_WIRE_FEAT_STAGE_WORD: the reply names it), else
 * TD_FOLLOW_TRIG_SLOTS: none (no stage; two stages on one word would
 * overwrite each other's).
 */
uint32_t td__peer_trig_slot(const struct td__peer *p, uint32_t want,
			    bool any);
/* t's word slot is staged for name from now on */
void td__trig_named(struct td__trig *t, uint32_t slot, const char *name,
		    size_t len);
/* Whether p may read every name t's words were ever staged for. */
bool td__trig_readable(const struct td__trig *t, const struct td__peer *p);

/* peer.c: bell b (follow.c's) stages alloc id of p at word slot; b's
 * stage is no longer p's; p's stage of alloc id was committed as
 * version, which its FIRED notice is answered with (a slot of its own;
 * a producer that fires without notices overwrites the first, whose late
 * notice is then a PUBLISH). */
void td__peer_stage_add(struct td__peer *p, void *b, uint64_t id,
			uint32_t slot);
void td__peer_stage_drop(struct td__peer *p, const void *b);
void td__peer_fired_note(struct td__peer *p, uint64_t id, uint64_t version,
			 bool rewrite);

/* The index of p's stage of alloc id, or -1. */
static inline int td__peer_staged(const struct td__peer *p, uint64_t id)
{
	for (unsigned i = 0; i < p->n_stages; i++)
		if (p->stage_alloc[i] == id)
			return (int)i;
	return -1;
}

/* p's committed stage of alloc id not answered yet, or NULL. */
static inline struct td__fired *td__peer_fired(struct td__peer *p,
					       uint64_t id)
{
	for (unsigned i = 0; id && i < TD__PEER_STAGES; i++)
		if (p->fired[i].alloc == id)
			return &p->fired[i];
	return NULL;
}

/*
 * What peer.c hands up (dispatch.c registers them, so peer.c calls no
 * file above it): one datagram of n bytes in td__d->rx with nfds owned
 * fds, and a peer about to be freed.
 */
struct td__peer_handlers {
	void (*datagram)(struct td__peer *p, size_t n, int *fds,
			 unsigned nfds);
	void (*gone)(struct td__peer *p);
};
void td__peer_handlers_set(const struct td__peer_handlers *h);
/*
 * sealer.c: the datagram p sent, of len bytes with its fds (owned),
 * handled again now that its seals are made (p->sealing NULL again),
 * as a received one is; then p is read again.
 */
void td__peer_replay(struct td__peer *p, const uint8_t *msg, size_t len,
		     int *fds, unsigned nfds);

/* Take a freshly accepted (CLOEXEC, NONBLOCK) socket; closes it on error. */
int td__peer_take_fd(struct td__daemon *d, int fd);
/* Mark a peer dead; the reaper frees it after the current callback. */
void td__peer_kill(struct td__peer *p, const char *why);
/* Drop every peer now (shutdown). */
void td__peer_drop_all(struct td__daemon *d);

/* Where reply bodies are encoded: d->tx after the header. */
#define TD__TX_BODY(d) ((d)->tx + TD_WIRE_HDR_LEN)
#define TD__TX_CAP (TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN)

/*
 * Send a message whose body_len bytes are already at TD__TX_BODY(d). fds
 * are borrowed: attached with SCM_RIGHTS (duplicated if the message has to
 * wait in the queue). A peer whose queue grows over its budget is killed.
 */
void td__peer_send(struct td__peer *p, uint16_t op, uint32_t flags,
		   uint64_t request_id, int32_t status, size_t body_len,
		   const int *fds, unsigned nfds);
/* Error reply (status < 0) with a formatted reason. */
void td__peer_error(struct td__peer *p, uint16_t op, uint64_t request_id,
		    int status, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* The empty success reply to h (RELEASE, UNWATCH, RING_CLOSE). */
void td__peer_done(struct td__peer *p, const struct td_wire_hdr *h);
/* The -ENOMEM reply to h. */
void td__peer_nomem(struct td__peer *p, const struct td_wire_hdr *h);
/* rc of a body's decode: < 0 sends the error reply (e names the field)
 * and is true, so that handlers can `if (td__peer_bad_body(...)) return`. */
bool td__peer_bad_body(struct td__peer *p, const struct td_wire_hdr *h,
		       int rc, const struct td_err *e);
/* HELLO: import negotiation and the daemon's limits. */
td__handler td__peer_hello;

/* ---- cred.c (docs/reliability.md, "Trust model") ---- */

/*
 * May the daemon pull fds from p's process now: it is alive, its real,
 * effective and saved uid and gid equal the connection's SO_PEERCRED, and
 * it is dumpable (what the kernel asks of that uid pulling by itself).
 * Call it after pulling and before using what was pulled: a change in
 * between is then seen. 0, or -EPERM/-ESRCH with a reason in why.
 */
int td__peer_pull_check(const struct td__peer *p, char *why, size_t cap);
/*
 * Is fd (pulled from p's process) the other end of p's connection? 0,
 * -ESRCH when it is not, other -errno when it cannot be told (no
 * unix_diag in the kernel).
 */
int td__peer_is_other_end(const struct td__peer *p, int fd);

/* ---- tenant.c ---- */

/* Root and the daemon's own uid: the reserve is theirs, no default limits. */
bool td__uid_is_admin(uid_t uid);
/*
 * The bytes of --max-bytes kept for root and the daemon's own uid
 * (docs/policy.md §4): 1/16 of the cap, at most 1 GiB; none without a
 * cap. Other uids' charges stop at max_bytes less this.
 */
#define TD__BYTES_RESERVE_MAX (1ull << 30)
static inline uint64_t td__byte_reserve(uint64_t max_bytes)
{
	return max_bytes / 16 < TD__BYTES_RESERVE_MAX ? max_bytes / 16
						      : TD__BYTES_RESERVE_MAX;
}
/* Compute the defaults; fds_open: the daemon's own descriptors now (the
 * HTTP store's are added). 0, or -EMFILE (logged) when the limit cannot
 * hold --http-max-connections. */
int td__tenants_init(struct td__daemon *d, unsigned fds_open);
void td__tenants_fini(void);
/* A policy reload: each uid's limits resolved again (its limit lines). */
void td__tenants_resolve(void);
/*
 * Would n more of k fit uid's limit (and, for fds, the daemon's reserve)?
 * 0, -EDQUOT (the uid's limit) or -EMFILE (the reserve) with the numbers
 * in why.
 */
int td__tenant_check(uid_t uid, enum td__lim k, uint64_t n, char *why,
		     size_t cap);
/* Count n more of k for uid (no check). 0 or -ENOMEM. */
int td__tenant_add(uid_t uid, enum td__lim k, uint64_t n);
/* one datagram of uid's share of this loop turn (TD__RX_UID_TURN, and
 * TD__RX_UID_TURN_NS of handling, which rx_spent counts): false when
 * spent; td__tenant_rx_turn starts the next turn; rx_wait counts uid's
 * connections waiting for a turn (peer.c), rx_waits: any? */
bool td__tenant_rx_take(uid_t uid);
void td__tenant_rx_spent(uid_t uid, uint64_t ns);
void td__tenant_rx_turn(void);
void td__tenant_rx_wait(uid_t uid, int delta);
bool td__tenant_rx_waits(uid_t uid);
/* check, then add */
int td__tenant_take(uid_t uid, enum td__lim k, uint64_t n, char *why,
		    size_t cap);
void td__tenant_sub(uid_t uid, enum td__lim k, uint64_t n);
uint64_t td__tenant_held(uid_t uid, enum td__lim k);
uint64_t td__tenant_limit(uid_t uid, enum td__lim k); /* 0 = none */
/* The uids the daemon counts now (every connected uid among them):
 * their number, and the i-th of them (i below that number). */
size_t td__tenant_count(void);
uid_t td__tenant_uid(size_t i);
/* A hold of uid on a ring (foreign: another uid's), and its end */
int td__tenant_ring_hold(uid_t uid, bool foreign, uint64_t pin, char *why,
			 size_t cap);
void td__tenant_ring_unhold(uid_t uid, bool foreign, uint64_t pin);
/* May uid make a ring with in_use made? 0, or -ENOBUFS past the reserve */
int td__tenant_ring_room(uid_t uid, unsigned in_use, char *why, size_t cap);
/*
 * Would n more descriptors of a version restored from a snapshot (no
 * uid's, counted as uid 0) leave the reserve whole? A restore that took
 * it left even root unable to connect. 0 or -EMFILE with why.
 */
int td__tenant_restore_check(uint64_t n, char *why, size_t cap);
uint64_t td__tenant_fds(void); /* held for all clients together */
/*
 * uid's byte quota: its quota line, else --uid-max-bytes, else half of
 * --max-bytes for uids other than root and the daemon's (0 = none).
 */
uint64_t td__tenant_quota(uid_t uid);

/* ---- the store (store.h has its records) ---- */

/* store.c */
int td__store_new(struct td__daemon *d);
void td__store_free(struct td__daemon *d);
/*
 * Memory held outside versions and allocs (rings): charged to uid and
 * the total like an ALLOC, evicting unleased unpinned versions first. 0,
 * or -ENOSPC/-EDQUOT/-ENOMEM with the error reply already sent; given
 * back by td__store_disown (uid's share) and td__store_uncharge_total.
 */
int td__store_charge(struct td__peer *p, const struct td_wire_hdr *h,
		     uint64_t bytes);
/* uid's share of bytes goes, the total's stays (a ring that left its
 * creator's account: daemon/ring.c), until td__store_uncharge_total. */
void td__store_disown(uid_t uid, uint64_t bytes);
void td__store_uncharge_total(uint64_t bytes);
/*
 * Rings in the catalogue (docs/fastpath.md, "Rings in the catalogue"):
 * a name is a tensor or a live ring, never both (td__store_name_taken
 * for RING_CREATE, td__ring_find for PUBLISH). GET leases on a ring slot
 * are store leases (per-peer budget, RELEASE, disconnect) that call back
 * into ring.c; parked GETs on a ring are store waiters, kept on a list of
 * their own that a 1 ms ring poll retries while any of them names a live
 * ring (struct td__ring_hooks).
 */
bool td__store_name_taken(struct td_wire_str name);
/*
 * The error for a ring name that has no ring: -ENOENT, or for a
 * RING_SUBSCRIBE (subscribe) of a name a tensor has -EINVAL, sent at once
 * and never parked: no ring can be made there while the tensor has it
 * (one meaning per name), so a parked one waited on a user's mistake, for
 * ever without a timeout, where a FOLLOW of a ring is refused at once.
 */
void td__store_no_ring(struct td__peer *p, const struct td_wire_hdr *h,
		       struct td_wire_str name, bool subscribe);
/* Release what a dying peer holds, one file each. */
void td__store_peer_gone(struct td__peer *p);
/*
 * more records were freed (e.g. dropped connections); past a threshold
 * the tables shrink and free heap goes back to the system (malloc_trim).
 */
void td__store_trim(unsigned more);
/* How many released lease records wait for reuse (td__store_trim). */
unsigned td__store_lease_spares(void);
void td__loan_peer_gone(struct td__peer *p);
void td__lease_peer_gone(struct td__peer *p);
/* After a policy reload: refuse parked GETs of names no longer readable. */
void td__lease_policy_changed(void);
void td__catalog_peer_gone(struct td__peer *p);
/* Register lease.c's ring hooks (td__ring_hooks_set). */
void td__lease_init(void);

/* quota.c: the access policy gate. Without --policy everyone may; the
 * daemon's own uid (its operator) always may. */
bool td__access_may(const struct td__peer *p, unsigned perm,
		    const char *name, size_t len);
struct td__policy_names;
/* The first of nm's names at or after i that p may do perm on (nm->count
 * when none): td__policy_skip, i itself without a policy to obey. */
size_t td__access_skip(const struct td__peer *p, unsigned perm,
		       const struct td__policy_names *nm, size_t i);
/* May p read every name (no --policy, or the daemon's own uid)? */
bool td__access_reads_all(const struct td__peer *p);
/* May p read every name w may write (td__policy_covers)? Kept in p
 * for w until the next reload. */
bool td__access_reads_writes_of(struct td__peer *p, const struct td__peer *w);
/* May p do perm on some name? Looks at every rule once per connection,
 * perm and policy reload; the answer is kept in p. */
bool td__access_any(struct td__peer *p, unsigned perm);
/* td__access_may, else the -EACCES reply and false. */
bool td__access_check(struct td__peer *p, const struct td_wire_hdr *h,
		      unsigned perm, struct td_wire_str name);

/* The request handlers of the opcode table. */
td__handler td__loan_alloc, td__publish, td__lease_get, td__lease_release,
	td__catalog_list, td__catalog_stat, td__catalog_delete,
	td__catalog_watch, td__catalog_unwatch, td__ring_create,
	td__ring_subscribe, td__ring_close, td__ring_stat, td__ring_wake,
	td__follow, td__follow_close, td__follow_wake, td__stage_page,
	td__publish_many, td__lease_get_many;

/* ---- follow.c (docs/fastpath.md, "Following a name") ---- */

/* Register the store's bell hooks (td__store_bell_set). */
void td__follow_init(void);
/* End a dying peer's follows (their holds, rows, emptied bells). */
void td__follow_peer_gone(struct td__peer *p);
/* After a policy reload: end the follows of names it took read of from
 * a uid their bell was shown to (follow.c, bell_end). */
void td__follow_policy_changed(void);
/* p sent a request since, or is gone: the fds its ended follows and
 * freed trigger pages kept open for its pull close (follow-linger.c;
 * p->lingering of them). */
void td__follow_linger_end(struct td__peer *p);
/* p's follow holds of versions no longer current (each a lease, as
 * hold_take counts it): how many into *n, their bytes into *bytes. */
void td__follow_peer_held(const struct td__peer *p, uint32_t *n,
			  uint64_t *bytes);
/* p's stages settled, those it fired committed: before each request of
 * p; with end (p is going), those it did not fire cancelled. */
void td__stage_owner(struct td__peer *p, bool end);

/* ---- ring.c (docs/fastpath.md) ---- */

#define TD__MAX_RINGS 256 /* rings in the daemon */
/* of them, kept for root and the daemon's own uid (tenant.c) */
#define TD__RINGS_RESERVE (TD__MAX_RINGS / 16)

struct td__ring;

/*
 * What ring.c calls back into the store through (lease.c registers them,
 * so ring.c calls no file above it): a lease record on ring slot `slot`
 * for p (0 and *id, -ENOBUFS, -ENOMEM), and a retry of every parked GET
 * that names a live ring (true while any does).
 */
struct td__ring_hooks {
	/* the ring's holds (its uid's rings and pinned) are ring.c's */
	int (*lease)(struct td__peer *p, struct td__ring *r, uint32_t slot,
		     uint64_t *id);
	bool (*poll)(void);
	/* a ring was made: GETs parked on its name join the poll (true if
	 * any did), RING_SUBSCRIBEs parked on it are answered */
	bool (*adopt)(struct td_wire_str name);
	/* park a RING_SUBSCRIBE (TD_WIRE_RSUB_WAIT) of a ring not made yet
	 * until adopt or its deadline answers it; refusals are sent */
	void (*park_sub)(struct td__peer *p, const struct td__req *rq,
			 const struct td_wire_ring_sub_req *m);
};
void td__ring_hooks_set(const struct td__ring_hooks *h);
/* Clear a dying peer's reader rows; close the rings it produces. */
void td__ring_peer_gone(struct td__peer *p);
/* After a policy reload: end the rings it took write or read of
 * (ring.c; docs/policy.md, "Reloading: SIGHUP"). */
void td__ring_policy_changed(void);
/* The live ring (its producer attached) named n, or NULL. */
struct td__ring *td__ring_find(struct td_wire_str n);
/* r's LIST/STAT entry; kinds: set TD_WIRE_ENT_RING. Borrows r's name. */
void td__ring_entry(struct td__ring *r, bool kinds, struct td_wire_entry *e);
/* r's id: never the same for two rings of the daemon's life. */
uint64_t td__ring_id(const struct td__ring *r);
/*
 * Live rings whose name starts with prefix and sorts after `after`, in
 * byte-wise name order, into out[TD__MAX_RINGS]. Returns the count.
 */
unsigned td__ring_list(struct td_wire_str prefix, struct td_wire_str after,
		       struct td__ring **out);
/*
 * Serve a GET (enum td_wire_get_mode) from r: lease a slot and reply.
 * 1: answered (the lease, or an error reply); 0: nothing to lease yet (no
 * version, none newer); -EAGAIN: the latest version is being rewritten,
 * its publish is on the way; -EINPROGRESS: the latest version is
 * published but its slot fence has not signalled. EXACT is always
 * answered.
 */
int td__ring_try_get(struct td__peer *p, uint16_t op, uint64_t request_id,
		     uint32_t flags, uint32_t mode, uint64_t version,
		     struct td__ring *r);
/*
 * A GET of r in this pass of the poll (td__ring_hooks.poll) found its
 * latest version busy (-EAGAIN, -EINPROGRESS): the other GETs parked on
 * r wait for the next pass instead of trying the same shared words (a
 * lease and its drop, with a wake of the producer, each) in this one.
 */
bool td__ring_busy(struct td__ring *r);
/* r's plane sizes into size[TD_WIRE_RING_MAX_PLANES]; their count. */
uint32_t td__ring_planes(struct td__ring *r, uint64_t *size);
/* A leased slot: the ring's read-only data memfd (r's, valid while the
 * lease is) and where each plane of the slot is in it. */
struct td__ring_slot {
	uint32_t slot;
	uint64_t version;
	uint64_t ring_id; /* never reused while the daemon runs */
	int fd;
	uint64_t off[TD_WIRE_RING_MAX_PLANES];
};
/*
 * Lease r's latest slot without a connection, as a GET of r's name does
 * (the HTTP store): 0 and *out; -ENOENT no version yet; -EAGAIN the slot
 * is being rewritten; -EINPROGRESS its fence has not signalled; -EBADMSG
 * a corrupt header. Ended with td__ring_unlease(r, out->slot).
 */
int td__ring_lease_latest(struct td__ring *r, struct td__ring_slot *out);
/* A GET lease on r's slot ends (RELEASE, disconnect, HTTP response);
 * uid: the holder's, (uid_t)-1 for the daemon's own (HTTP). */
void td__ring_unlease(struct td__ring *r, uint32_t slot, uid_t uid);
/* Start the 1 ms poll of parked ring GETs (td__ring_hooks.poll). */
void td__ring_poll_arm(void);

/* ---- ring-row.c: the shared words of a ring's reader rows ---- */

struct td_ring_hdr;
struct td_ring_readers;
/* Row i goes to the subscription sub_id (its token, on a ring with
 * TD_RING_ROW_OWNER), holding and having taken nothing. */
void td__ring_row_give(struct td_ring_hdr *h, struct td_ring_readers *rd,
		       uint32_t i, uint64_t sub_id);
/* Row i is nobody's: holds nothing, never stops the producer. */
void td__ring_row_free(struct td_ring_hdr *h, struct td_ring_readers *rd,
		       uint32_t i);
/* Wake the readers asleep on their own rows among the first n, and the
 * producer asleep for a slot (the ring closed). */
void td__ring_rows_wake(struct td_ring_readers *rd, uint32_t n);

/* ---- audit.c: what peer.c reports for operators ---- */

/* Record what STATUS shows of a new peer (its command name). */
void td__audit_peer_init(struct td__peer *p);
/*
 * Count an error reply to p and, if it is a refusal (permission, quota,
 * bad input), log it: once per peer and kind, under a rate limit.
 */
void td__audit_refusal(struct td__peer *p, uint16_t op, int status,
		       const char *reason);

/* ---- status.c: what operators see and do ---- */
/* Note the start time and reload the policy on SIGHUP. */
void td__status_start(struct td__daemon *d);
/* Reload --policy now: the new one, or the old one kept. 0 or -errno. */
int td__policy_reload(struct td__daemon *d);
td__handler td__status;

/* ---- plane.c ---- */

enum td__plane_type {
	TD__PLANE_MEMFD = 1, /* tmpfs/hugetlbfs file with seals */
	TD__PLANE_DMABUF = 2,
};

struct td__plane_info {
	enum td__plane_type type;
	uint64_t size;
	dev_t dev;
	ino_t ino;
};

/*
 * Check a received descriptor before it is used as a plane: its kind
 * (memfd on tmpfs/hugetlbfs with F_SEAL_SHRINK, or a dma-buf) and size.
 * 0 or -errno with a static reason in *why.
 */
int td__plane_probe(int fd, struct td__plane_info *pi, const char **why);
/* A fence must be an eventfd or a sync_file. 0 or -EINVAL. */
int td__fence_check(int fd, const char **why);
/*
 * sealer.c: a request's write seals, made off the loop (docs/
 * architecture.md, "Threads"). td__sealer_want, for a memfd the request
 * needs sealed (pi: its file): 1 queued for the seal (the request
 * must then park, td__sealer_park), 0 sealed already, or -errno with
 * *why (a seal of it failed off the loop before this replay of the
 * request). td__sealer_park: the datagram of rq and its fds (taken, set
 * to -1) wait with the queued seals; nothing more of p is read until
 * they are done and the datagram is handled again; 0, or -EDQUOT /
 * -EMFILE (those descriptors, its uid's while they wait, over its
 * limit: tenant.c) or -ENOMEM with the reason in why (the queue
 * dropped). td__sealer_drop: the queue dropped (a request that
 * failed after it queued).
 */
int td__sealer_want(int fd, const struct td__plane_info *pi, const char **why);
int td__sealer_park(struct td__peer *p, const struct td__req *rq, char *why,
		    size_t why_cap);
void td__sealer_drop(void);
void td__sealer_peer_gone(struct td__peer *p);
unsigned td__sealer_waiting(void);
/*
 * closer.c: the close of a descriptor that may free TD__CLOSER_MIN bytes
 * or more goes to a thread (docs/architecture.md, "Threads"); started
 * before anything holds a plane, stopped after the store is gone (it
 * closes what is queued first). Without the thread, close(2) here.
 */
#define TD__CLOSER_MIN (4ull << 20)
/* at most this much memory queued for the closer at once (closer.c) */
#define TD__CLOSER_BACKLOG (1ull << 30)
void td__closer_start(void);
/*
 * Start one of the daemon's threads (the closers, td-snap-lock): every
 * signal blocked in it (signals stay the loop's), 64 KiB of stack, named
 * name for ps; detached or not. 0, or the pthread_create error (logged
 * by the caller, which then does the work on the loop).
 */
int td__thread_start(pthread_t *t, void *(*fn)(void *), const char *name,
		     bool detached);
void td__closer_close(int fd, uint64_t size);
void td__closer_stop(void);
/*
 * A peer's descriptor whose close(2) may wait (a file of a filesystem,
 * td__fd_foreign: a FUSE FLUSH; a lingering TCP socket): closed by a
 * thread of its own. The loop never waits for it.
 */
void td__closer_foreign(int fd);
/* plane.c: whether fd is such a file; asks no filesystem */
bool td__fd_foreign(int fd);
/* Close a descriptor a peer sent or the daemon pulled from one. */
void td__close_peer_fd(int fd);
/*
 * memfd_create + ftruncate + SHRINK|GROW seals, and fallocate when
 * `reserve` (else the client that asked reserves it: TD_WIRE_ALLOC_RESERVE).
 */
int td__plane_create(uint64_t size, bool reserve, int *out_fd,
		     const char **why);
/*
 * A ring's slots memfd: hugetlbfs pages when `huge` and the machine has
 * them, else tmpfs (MADV_HUGEPAGE advised when `huge`), allocated now
 * when `reserve`; size sealed. *flags: TD_WIRE_RING_HUGETLB, _THP,
 * _UNRESERVED. 0 or -errno with *why.
 */
int td__plane_create_ring(uint64_t len, bool huge, bool reserve,
			  uint32_t *flags, int *out, const char **why);
/*
 * A read-only descriptor of a sealed memfd for consumers (fchmod 0444 and
 * a fresh O_RDONLY open), so a consumer can neither write through the fd
 * nor re-open it read-write. 0 and *out_fd (new, CLOEXEC) or -errno.
 */
int td__plane_readonly(int fd, int *out_fd, const char **why);

/* ---- fence.c (store.h has the rest) ---- */

/* p is gone (its leases first): the timerfds it kept, closed. */
void td__fence_peer_gone(struct td__peer *p);
/* At start, on the loop: the set of watched fences (else at first need). */
void td__fence_init(void);
/* At shutdown, every version freed: the watched set closed. */
void td__fence_fini(void);

/* ---- policy.c (docs/policy.md) ---- */

#define TD__POLICY_MAX_BYTES (256u << 10) /* policy file */
#define TD__POLICY_MAX_LINE 1024
#define TD__POLICY_MAX_RULES 1024 /* allow lines */
#define TD__POLICY_MAX_QUOTAS 1024
#define TD__POLICY_MAX_LIMITS 4096 /* limit lines */

/* DMABUF: may publish dma-buf planes (consumers could write into them) */
enum { TD__PERM_READ = 1, TD__PERM_WRITE = 2, TD__PERM_DMABUF = 4 };
enum { TD__WHO_ANY = 0, TD__WHO_UID = 1, TD__WHO_GID = 2, TD__WHO_HTTP = 3 };

struct td__rule {
	uint8_t kind; /* TD__WHO_* */
	uint8_t perm; /* TD__PERM_* bits */
	uint32_t id;
	uint16_t len; /* prefix bytes; 0 = every name */
	char prefix[TD_WIRE_MAX_NAME + 1];
};

struct td__quota {
	uint32_t uid;
	uint64_t bytes;
};

/* limit uid=N KEY VALUE */
struct td__limit {
	uint32_t uid;
	uint32_t key; /* enum td__lim */
	uint64_t value;
};

/*
 * The allow rules compiled at parse time into a trie of their prefixes
 * (td__policy_allows walks the name's bytes, not the rules). A node's
 * grant masks hold bit q (q = a TD__PERM_* set, 0..7) when one rule ending
 * there has every bit of q: r and w lines stay two rules, as in §3.
 */
struct td__pnode {
	uint32_t child;   /* first child; 0 = none (the root is node 0) */
	uint32_t sibling; /* next child of the same parent; 0 = none */
	uint32_t grant;   /* first of its uid/gid grants in pol->grants */
	uint16_t ngrant;
	uint8_t byte;     /* the prefix byte that leads here */
	uint8_t any;      /* grant mask of its `any` rules */
	uint8_t http;     /* grant mask of its `http` rules */
};

/* A node's uid and gid rules, sorted by (kind, id), masks merged. */
struct td__grant {
	uint32_t id;
	uint8_t kind; /* TD__WHO_UID or TD__WHO_GID */
	uint8_t mask; /* grant mask, as struct td__pnode's */
};

struct td__policy {
	struct td__rule *rules;
	unsigned nrules;
	struct td__pnode *nodes; /* the trie of the rules' prefixes */
	unsigned nnodes;
	struct td__grant *grants;
	unsigned ngrants;
	struct td__quota *quotas;
	unsigned nquotas;
	struct td__limit *limits;
	unsigned nlimits;
};

/* Who asks: a peer's SO_PEERCRED uid/gid and SO_PEERGROUPS. */
struct td__cred {
	uid_t uid;
	gid_t gid;
	const gid_t *groups;
	unsigned ngroups;
};

/*
 * Parse a policy file held in buf (no I/O). 0, or -errno with the 1-based
 * line in *line (0: the file as a whole) and a static reason in *why; on
 * failure *pol is empty. td__policy_fini() what it fills.
 */
int td__policy_parse(const char *buf, size_t len, struct td__policy *pol,
		     unsigned *line, const char **why);
void td__policy_fini(struct td__policy *pol);
/* Read and parse path, logging the reason on failure. 0 or -errno. */
int td__policy_load(const char *path, struct td__policy *pol);
/* Does a rule grant every bit of perm on name to c? O(len) trie walk,
 * plus a binary search of each node's grants for c's uid and gids. */
bool td__policy_allows(const struct td__policy *pol,
		       const struct td__cred *c, unsigned perm,
		       const char *name, size_t len);
/*
 * The smallest name >= name (len bytes) that c may do perm on, for LIST
 * to jump over what c may not read: 0 when name itself is allowed; 1
 * with out (TD_WIRE_MAX_NAME bytes) and *out_len set to a prefix P >
 * name that a rule grants, every name in [name, P) refused; -ENOENT when
 * no name >= name is allowed. Looks at the nodes on name's way and at
 * most once at each node hanging off it (the policy's size, never the
 * store's).
 */
int td__policy_next(const struct td__policy *pol, const struct td__cred *c,
		    unsigned perm, const char *name, size_t len, char *out,
		    size_t *out_len);
/* A sorted array of names, as td__policy_skip reads it. */
struct td__policy_names {
	/* name i's bytes, its length in *len */
	const char *(*at)(const void *ctx, size_t i, size_t *len);
	/* the index of the first name >= key (count when none) */
	size_t (*find)(const void *ctx, const char *key, size_t len);
	const void *ctx;
	size_t count;
};
/*
 * The index of the first of nm's names at or after i that c may do perm
 * on (nm->count when none). Each refused name costs one
 * td__policy_next and one find, then the next is at or past another
 * granting prefix: at most one round per granting prefix, however many
 * refused names lie between.
 */
size_t td__policy_skip(const struct td__policy *pol,
		       const struct td__cred *c, unsigned perm,
		       const struct td__policy_names *nm, size_t i);
/* Is c one of the WHO of rule r (c NULL: an HTTP reader, which only
 * `http` lines name; those name nobody on the socket)? */
bool td__policy_who(const struct td__rule *r, const struct td__cred *c);
/* Does an `allow http` line grant reading name (HTTP readers)? */
bool td__policy_allows_http(const struct td__policy *pol, const char *name,
			    size_t len);
/*
 * May reader read every name writer may write (writer_all: writer may
 * write every name, as the daemon's own uid may)?
 */
bool td__policy_covers(const struct td__policy *pol,
		       const struct td__cred *reader,
		       const struct td__cred *writer, bool writer_all);
/* Does any rule grant perm to c, on any prefix? */
bool td__policy_any(const struct td__policy *pol, const struct td__cred *c,
		    unsigned perm);
/* uid's quota line, else dflt (0 = none). pol may be NULL. */
uint64_t td__policy_quota(const struct td__policy *pol, uid_t uid,
			  uint64_t dflt);
/* A limit's VALUE (key: enum td__lim): N[K|M|G|T] for the byte limits, a
 * plain number for the counts. 0 or -EINVAL. */
int td__policy_limit_value(int key, const char *p, size_t len,
			   uint64_t *out);
/* uid's `limit` line for key into *v (0 = none): true when there is one. */
bool td__policy_limit(const struct td__policy *pol, uid_t uid,
		      enum td__lim key, uint64_t *v);

#endif
