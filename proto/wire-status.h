/* SPDX-License-Identifier: MIT */
/*
 * STATUS (docs/protocol.md §11): what the daemon holds and who is
 * connected, for operators (`tensorctl status`). Served when the HELLO
 * reply has TD_WIRE_FEAT_STATUS. Request body: u32 flags (0). And
 * RING_WAKE, the event-loop side of rings (below).
 */
#ifndef TD_PROTO_WIRE_STATUS_H
#define TD_PROTO_WIRE_STATUS_H

#include "wire.h"

#define TD_WIRE_FEAT_STATUS 0x40u /* TD_OP_STATUS */
/* the STATUS reply ends with u64 byte_reserve (sent only to a client
 * whose HELLO named this feature: an older decoder refuses the tail) */
#define TD_WIRE_FEAT_STATUS_RESERVE 0x1000000u
/* each STATUS uid row ends with u64 pinned_use, pinned_limit, and a uid
 * charged no bytes has a row when it has pinned figures to show (in use,
 * a limit line of its own, the asker), once (sent only to a client whose
 * HELLO named this feature: an older decoder reads other rows) */
#define TD_WIRE_FEAT_STATUS_PINNED 0x10000000u

/* Rows one reply carries at most; the totals count every one. */
#define TD_WIRE_STATUS_MAX_CLIENTS 512
#define TD_WIRE_STATUS_MAX_UIDS 256
#define TD_WIRE_STATUS_MAX_COMM 16 /* /proc/PID/comm, without the NUL */

/* td_wire_status_rep.scope */
enum td_wire_status_scope {
	TD_WIRE_STATUS_ALL = 0, /* every client and uid */
	TD_WIRE_STATUS_UID = 1, /* only the asking uid's */
};

struct td_wire_status_req {
	uint32_t flags; /* none defined: 0 */
};

struct td_wire_status_client {
	uint32_t pid, uid;
	uint32_t import_in; /* enum td_import: how the daemon takes its fds */
	uint32_t leases, allocs, watches, waiters;
	uint64_t bytes_held; /* bytes of the versions it leases */
	uint64_t requests;   /* datagrams it sent */
	uint64_t refusals;   /* error replies that were refusals */
	uint64_t age_ms;     /* since it connected */
	struct td_wire_str comm;
};

struct td_wire_status_uid {
	uint32_t uid;
	uint64_t bytes;  /* charged to it (versions, allocs, rings) */
	uint64_t quota;  /* its limit, 0 = none */
	uint64_t pinned; /* bytes of its PIN-flagged current versions */
	/* TD_WIRE_FEAT_STATUS_PINNED: the bytes counted against its
	 * `pinned` limit (other uids' versions and rings it leases or may
	 * take as a follower, docs/policy.md §5), and that limit (0 none) */
	uint64_t pinned_use, pinned_limit;
};

/* Refusal kinds (counters and the audit log). */
enum td_wire_refusal {
	TD_REFUSED_PERMISSION = 0, /* -EACCES, -EPERM */
	TD_REFUSED_QUOTA = 1,      /* -EDQUOT, -ENOSPC, -ENOBUFS */
	TD_REFUSED_INPUT = 2,      /* malformed or invalid requests */
	TD_REFUSED_KINDS = 3,
};

struct td_wire_status_rep {
	struct td_wire_str ident; /* "tensord 0.1.0" */
	uint32_t scope;           /* enum td_wire_status_scope */
	uint32_t daemon_uid;
	uint64_t uptime_ms;
	uint32_t import_opt; /* --import: enum td_import (AUTO = negotiate) */
	uint32_t rings;
	uint64_t tensors; /* current versions */
	uint64_t bytes;   /* accounted, all uids */
	uint64_t max_bytes;
	uint64_t requests; /* datagrams from every client */
	uint64_t evictions;
	uint64_t refused[TD_REFUSED_KINDS];
	uint64_t log_suppressed; /* audit lines left out by the rate limit */
	uint64_t policy_reloads; /* SIGHUP reloads that took effect */
	uint32_t clients_total;  /* connected, all uids */
	uint32_t client_count;   /* rows below (scope and cap applied) */
	struct td_wire_status_client *clients;
	uint32_t uid_count;
	struct td_wire_status_uid *uids;
	/* Encode and decode: does the reply end with byte_reserve
	 * (TD_WIRE_FEAT_STATUS_RESERVE)? The decoder's caller sets it. */
	bool has_reserve;
	/* Encode and decode: do the uid rows carry pinned_use and
	 * pinned_limit (TD_WIRE_FEAT_STATUS_PINNED)? The decoder's caller
	 * sets it; with it, a uid repeated in the rows is refused. */
	bool has_pinned;
	/* bytes of max_bytes only root and the daemon's uid may fill */
	uint64_t byte_reserve;
};

/*
 * Encode: clients/uids are read from m. Decode: into the caller's
 * clients[client_cap] and uids[uid_cap] (m->clients/m->uids set by the
 * caller), -EOVERFLOW when a count passes its cap; strings borrow body.
 */
int64_t td_wire_status_req_encode(const struct td_wire_status_req *m,
				  uint8_t *buf, size_t cap);
int td_wire_status_req_decode(const uint8_t *body, size_t len,
			      struct td_wire_status_req *m,
			      struct td_err *err);
int64_t td_wire_status_rep_encode(const struct td_wire_status_rep *m,
				  uint8_t *buf, size_t cap);
int td_wire_status_rep_decode(const uint8_t *body, size_t len,
			      struct td_wire_status_rep *m,
			      uint32_t client_cap, uint32_t uid_cap,
			      struct td_err *err);

/*
 * RING_WAKE (docs/protocol.md §12), served with TD_WIRE_FEAT_RING_WAKE.
 * Request: td_wire_ring_close_req (u64 id). A subscription's id with one
 * eventfd attached registers it as that reader row's wake-up; a ring's
 * id from its producer, no fd, asks for every registered eventfd: the
 * reply lists (row, gen) and attaches the fds in that order.
 */
#define TD_WIRE_FEAT_RING_WAKE 0x80u

struct td_wire_ring_wake_ent {
	uint32_t row, gen;
};

struct td_wire_ring_wake_rep {
	uint32_t count; /* <= TD_WIRE_MAX_FDS */
	struct td_wire_ring_wake_ent ents[TD_WIRE_MAX_FDS];
};

int64_t td_wire_ring_wake_rep_encode(const struct td_wire_ring_wake_rep *m,
				     uint8_t *buf, size_t cap);
int td_wire_ring_wake_rep_decode(const uint8_t *body, size_t len,
				 struct td_wire_ring_wake_rep *m,
				 struct td_err *err);

/*
 * FOLLOW (docs/protocol.md §13), served with TD_WIRE_FEAT_FOLLOW: a
 * consumer that takes each new version of a name from shared memory
 * (proto/follow.h). Request: td_wire_ring_sub_req (name, flags
 * TD_WIRE_REQ_SCM). Reply: the follow's id, the bell's entry count, and
 * two fds: the bell (read-only) and the follower's row (read-write).
 * FOLLOW_CLOSE: td_wire_ring_close_req (the follow's id), empty reply.
 * FOLLOW_WAKE: td_wire_ring_close_req (the follow's id) with one timerfd
 * attached, which the daemon fires at a change of the name while the
 * row waits by fd (TD_FOLLOW_WAIT_FD); empty reply.
 */
#define TD_WIRE_FEAT_FOLLOW 0x200u
#define TD_WIRE_FOLLOW_FDS 2 /* bell, row */
/* FOLLOW's TD_WIRE_FOLLOW_SPARE flag (wire.h) is served */
#define TD_WIRE_FEAT_FOLLOW_SPARE 0x400u
/*
 * Readers asleep on their own row's word (docs/fastpath.md, "One futex
 * word per sleeper"): RING_CREATE's TD_WIRE_RING_ROW_WAKE is served, the
 * daemon wakes a ring's TD_RING_WAIT_ROW rows when the ring closes, and a
 * bell's TD_FOLLOW_WAIT_ROW rows at every change.
 */
#define TD_WIRE_FEAT_WAKE_ROWS 0x800u
/*
 * Rows with owner tokens (docs/fastpath.md, "A row that changed hands"):
 * RING_CREATE's TD_WIRE_RING_ROW_OWNER is served; the daemon then gives a
 * ring's rows out with td_ring_owner_of(the subscription's id) in them.
 */
#define TD_WIRE_FEAT_ROW_OWNER 0x1000u
/*
 * Staged publishes (docs/protocol.md §13, "Staged publishes"): PUBLISH's
 * TD_WIRE_PUB_STAGE and TD_WIRE_PUB_FIRED, the bell's stage line, the
 * row's `taken`, and STAGE_PAGE (opcode 20). Request:
 * td_wire_ring_sub_req (the name; flags TD_WIRE_REQ_SCM). Reply: a
 * td_wire_follow_rep with id = the page's generation, entry_count 0 and
 * one fd: the name's trigger page, read-write to the producer whose
 * stage it fires, read-only to a follower of the name.
 */
#define TD_WIRE_FEAT_STAGE 0x40000u
/*
 * Staged take-backs (docs/protocol.md §13): ALLOC's TD_WIRE_ALLOC_STAGE
 * and the ALLOC reply's stage section, with TD_WIRE_FEAT_STAGE.
 */
#define TD_WIRE_FEAT_STAGE_TAKEBACK 0x80000u
/*
 * A word per name in the trigger page (proto/follow.h, "trigger page"):
 * a producer that names it fires the stage of a name at the word
 * td_follow_trig_slot() of that name, which the bell's stage_slot names
 * to its followers; without it, word 0 for every name.
 */
#define TD_WIRE_FEAT_STAGE_SLOT 0x400000u
/*
 * The word of a stage named in its reply (docs/protocol.md §13): a stage
 * section to a producer that names it ends with u32 stage_slot, the word
 * of the trigger page the daemon staged it at (1..63: the name's own,
 * td_follow_trig_slot(), unless another stage of the connection has
 * that one, then a free one), which the producer fires at. Without it,
 * a name whose own word another stage has is not staged.
 */
#define TD_WIRE_FEAT_STAGE_WORD 0x800000u
/*
 * A follow the daemon ends (docs/protocol.md §13, "A follow the daemon
 * ends"): the row's `ended` word says why before its follower is woken.
 * Named by a client that reads it; a follower without it whose follow a
 * policy reload ends has its connection closed.
 */
#define TD_WIRE_FEAT_FOLLOW_END 0x20000000u

struct td_wire_follow_rep {
	uint64_t id;
	uint32_t entry_count; /* == TD_FOLLOW_ENTRIES of its layout */
	uint32_t layout;      /* TD_FOLLOW_LAYOUT */
	uint32_t fd_count;    /* == TD_WIRE_FOLLOW_FDS */
	struct td_wire_fdent fds[TD_WIRE_FOLLOW_FDS];
};

int64_t td_wire_follow_rep_encode(const struct td_wire_follow_rep *m,
				  uint8_t *buf, size_t cap);
int td_wire_follow_rep_decode(const uint8_t *body, size_t len,
			      struct td_wire_follow_rep *m,
			      struct td_err *err);

/* "permission", "quota", "input"; NULL when out of range. */
const char *td_wire_refusal_name(uint32_t kind);

#endif
