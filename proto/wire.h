/* SPDX-License-Identifier: MIT */
/*
 * proto/wire: the tensord socket protocol (docs/protocol.md), sans-I/O.
 *
 * One AF_UNIX SOCK_SEQPACKET datagram = one message = a 32-byte header and
 * a body. fds never enter this layer: messages carry fd *numbers* (the
 * sender's, for pidfd_getfd) and the header's fd_count says how many
 * descriptors the transport attached with SCM_RIGHTS. Decoded structs borrow
 * the input buffer (strings and byte strings point into it).
 *
 * All integers little-endian. Primitive encodings in bodies:
 *   u32/i32/u64: fixed width; str: u16 length + UTF-8 bytes (no NUL);
 *   bytes: u32 length + bytes.
 */
#ifndef TD_PROTO_WIRE_H
#define TD_PROTO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define TD_WIRE_MAGIC 0x31574454u /* "TDW1" in little-endian byte order */
#define TD_WIRE_VERSION 1
#define TD_WIRE_HDR_LEN 32

/* Named caps: every length and count a peer sends is bounded by one. */
#define TD_WIRE_MAX_MSG (64 * 1024)  /* whole datagram */
#define TD_WIRE_MAX_FDS 16           /* fds attached to one datagram */
#define TD_WIRE_MAX_NAME 255         /* tensor name bytes */
#define TD_WIRE_MAX_META (16 * 1024) /* user metadata bytes per tensor */
#define TD_WIRE_MAX_PLANES 8         /* fd-table entries per tensor */
#define TD_WIRE_MAX_REASON 1024      /* error reason bytes */
#define TD_WIRE_MAX_DIMS 16          /* LIST/STAT shape entries */
/* Blob bytes in one message: what is left after header and other fields. */
#define TD_WIRE_MAX_BLOB (TD_WIRE_MAX_MSG - TD_WIRE_MAX_META - 1024)

/* Header flags */
#define TD_WIRE_F_REPLY 0x1u  /* a reply to request_id */
#define TD_WIRE_F_NOTIFY 0x2u /* unsolicited notification (request_id 0) */
/* on a GET reply, to a client that named TD_WIRE_FEAT_GET_CROWD: one
 * change answered this GET and as many others parked, or more, as the
 * daemon's host has CPUs (docs/protocol.md §6.4) */
#define TD_WIRE_F_CROWD 0x4u

enum td_wire_op {
	TD_OP_HELLO = 1,
	TD_OP_ALLOC = 2,
	TD_OP_PUBLISH = 3,
	TD_OP_GET = 4,
	TD_OP_RELEASE = 5,
	TD_OP_LIST = 6,
	TD_OP_STAT = 7,
	TD_OP_DELETE = 8,
	TD_OP_WATCH = 9,
	TD_OP_UNWATCH = 10,
	/* rings, the fast path (docs/protocol.md §10, docs/fastpath.md) */
	TD_OP_RING_CREATE = 11,
	TD_OP_RING_SUBSCRIBE = 12,
	TD_OP_RING_CLOSE = 13,
	TD_OP_RING_STAT = 14,
	/* the daemon's state for operators (proto/wire-status.h) */
	TD_OP_STATUS = 15,
	/* ring wake-ups through eventfds (proto/wire-status.h) */
	TD_OP_RING_WAKE = 16,
	/* following a name without a message per version (wire-status.h) */
	TD_OP_FOLLOW = 17,
	TD_OP_FOLLOW_CLOSE = 18,
	TD_OP_FOLLOW_WAKE = 19,
	/* wire-status.h, TD_WIRE_FEAT_STAGE */
	TD_OP_STAGE_PAGE = 20,
	/* several names in one step (TD_WIRE_FEAT_MANY, below) */
	TD_OP_PUBLISH_MANY = 21,
	TD_OP_GET_MANY = 22,
	TD_OP_NOTIFY = 0x100, /* daemon -> client only */
};

/* Import paths (how a descriptor crosses between two processes). */
enum td_import {
	TD_IMPORT_AUTO = 0,
	TD_IMPORT_PIDFD = 1, /* receiver pulls with pidfd_getfd(pid, fd) */
	TD_IMPORT_SCM = 2,   /* sender attaches with SCM_RIGHTS */
};

struct td_wire_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t opcode;
	uint32_t flags;
	uint32_t fd_count; /* SCM_RIGHTS fds attached to this datagram */
	uint64_t request_id;
	uint32_t body_len; /* == datagram length - TD_WIRE_HDR_LEN */
	int32_t status;    /* replies: 0 or -errno; otherwise 0 */
};

struct td_wire_str {
	const char *ptr; /* borrowed; not NUL-terminated */
	uint16_t len;
};

struct td_wire_bytes {
	const uint8_t *ptr; /* borrowed */
	uint32_t len;
};

/*
 * Decode and validate a header at the start of a received datagram of len
 * bytes: length >= 32 (-ENODATA), magic (-EBADMSG), version (-EPROTONOSUPPORT),
 * body_len == len - 32 (-EBADMSG), len <= TD_WIRE_MAX_MSG (-EMSGSIZE),
 * fd_count <= TD_WIRE_MAX_FDS (-E2BIG). Opcode is NOT checked here (the
 * daemon answers unknown opcodes with -EOPNOTSUPP). 0 or -errno + *err.
 */
int td_wire_hdr_decode(const uint8_t *buf, size_t len, struct td_wire_hdr *h,
		       struct td_err *err);
/* Write h into out[0, 32). */
void td_wire_hdr_encode(const struct td_wire_hdr *h, uint8_t *out);
/*
 * The opcode and request id of a datagram that may be no valid message
 * (too short, bad magic, truncated): what a reply to it can echo so the
 * sender can match it. Fields the len bytes do not reach are 0.
 */
void td_wire_hdr_peek(const uint8_t *buf, size_t len, uint16_t *opcode,
		      uint64_t *request_id);

/* ---- body cursors (used by the message codecs, exposed for tests) ---- */

struct td_wire_rd {
	const uint8_t *p;
	size_t len;
	size_t off;
	int rc; /* first error (sticky), 0 while fine */
	struct td_err *err;
};

struct td_wire_wr {
	uint8_t *p;
	size_t cap;
	size_t off;
	bool overflow; /* sticky: a put did not fit */
};

void td_wire_rd_init(struct td_wire_rd *rd, const uint8_t *body, size_t len,
		     struct td_err *err);
uint32_t td_wire_rd_u32(struct td_wire_rd *rd, const char *field);
int32_t td_wire_rd_i32(struct td_wire_rd *rd, const char *field);
uint64_t td_wire_rd_u64(struct td_wire_rd *rd, const char *field);
/* str/bytes: length bounded by max (else -EOVERFLOW, FORGED_LENGTH). */
struct td_wire_str td_wire_rd_str(struct td_wire_rd *rd, uint16_t max,
				  const char *field);
struct td_wire_bytes td_wire_rd_bytes(struct td_wire_rd *rd, uint32_t max,
				      const char *field);
/* 0 when the whole body was consumed without error, else -errno. */
int td_wire_rd_end(struct td_wire_rd *rd);

void td_wire_wr_init(struct td_wire_wr *wr, uint8_t *buf, size_t cap);
void td_wire_wr_u32(struct td_wire_wr *wr, uint32_t v);
void td_wire_wr_i32(struct td_wire_wr *wr, int32_t v);
void td_wire_wr_u64(struct td_wire_wr *wr, uint64_t v);
void td_wire_wr_str(struct td_wire_wr *wr, const char *s, size_t len);
void td_wire_wr_bytes(struct td_wire_wr *wr, const void *p, size_t len);

/* ---- messages ----
 * Each message has _encode(msg, buf, cap) -> body bytes written or -ENOBUFS,
 * and _decode(body, len, msg, err) -> 0 or -errno (-ENODATA truncated,
 * -EOVERFLOW a length over its cap, -EBADMSG trailing bytes / bad value).
 * Encode writes only the body; callers prepend the header.
 */

/*
 * HELLO feature bits (docs/protocol.md §6.1): what the daemon serves
 * beyond the version-1 protocol. A client that sends a features word in
 * its HELLO gets the daemon's in the reply; one that sends none (every
 * client before them) gets the reply it always got.
 */
#define TD_WIRE_FEAT_CAT_KINDS 0x1u     /* LIST/STAT flag TD_WIRE_CAT_KINDS */
#define TD_WIRE_FEAT_CAT_RECYCLE 0x2u   /* ... and TD_WIRE_CAT_RECYCLE */
#define TD_WIRE_FEAT_ALLOC_RECYCLE 0x4u /* ALLOC flag TD_WIRE_ALLOC_RECYCLE */
#define TD_WIRE_FEAT_GET_HELD 0x8u      /* held ids on GET */
#define TD_WIRE_FEAT_PUB_LOAN 0x10u     /* PUBLISH flag TD_WIRE_PUB_LOAN */
#define TD_WIRE_FEAT_RELEASE_QUIET 0x20u /* RELEASE flag TD_WIRE_REL_QUIET */
/* 0x40 TD_WIRE_FEAT_STATUS, 0x80 TD_WIRE_FEAT_RING_WAKE, 0x200 _FOLLOW,
 * 0x400 _FOLLOW_SPARE, 0x800 _WAKE_ROWS: wire-status.h */
#define TD_WIRE_FEAT_DELETE_IF 0x100u   /* DELETE's `version` condition */
/* 0x1000 TD_WIRE_FEAT_ROW_OWNER: wire-status.h */
#define TD_WIRE_FEAT_REWRITE 0x2000u    /* ALLOC flag TD_WIRE_ALLOC_REWRITE */
/* ALLOC flag TD_WIRE_ALLOC_RESERVE, RING_CREATE flag TD_WIRE_RING_RESERVE */
#define TD_WIRE_FEAT_RESERVE 0x4000u
/* header flag TD_WIRE_F_CROWD on GET replies; a client names it too */
#define TD_WIRE_FEAT_GET_CROWD 0x8000u
/* ALLOC flag TD_WIRE_ALLOC_NAMED (loans bound to a name) */
#define TD_WIRE_FEAT_ALLOC_NAME 0x10000u
/* RELEASE flag TD_WIRE_REL_ALLOC: an unpublished alloc given up */
#define TD_WIRE_FEAT_ALLOC_FREE 0x20000u
/* 0x40000 TD_WIRE_FEAT_STAGE, 0x80000 _STAGE_TAKEBACK: wire-status.h */
/* RING_SUBSCRIBE flag TD_WIRE_RSUB_WAIT: parked until the ring exists */
#define TD_WIRE_FEAT_SUB_WAIT 0x100000u
/*
 * GET replies carry, for a version fenced by an eventfd, a fence of the
 * caller's own in its place: a timerfd the daemon fires when the
 * producer's eventfd signals (docs/protocol.md §6.4, "A fence of one's
 * own"). Without it, every consumer is handed the producer's eventfd.
 */
#define TD_WIRE_FEAT_FENCE_OWN 0x200000u
/*
 * PUBLISH_MANY and GET_MANY (docs/protocol.md §6.10): several names
 * published, or leased, in one step of the daemon, all or none.
 * (0x400000 _STAGE_SLOT, 0x800000 _STAGE_WORD, 0x1000000
 * _STATUS_RESERVE: wire-status.h)
 */
#define TD_WIRE_FEAT_MANY 0x2000000u
/* PUBLISH (and PUBLISH_MANY element) flag TD_WIRE_PUB_IF: a condition on
 * the name's current version, checked where the publish commits */
#define TD_WIRE_FEAT_PUB_IF 0x4000000u
/* GET_MANY flag TD_WIRE_MANY_NEWER: parked until its first name has a
 * version newer than the request's (docs/protocol.md §6.10) */
#define TD_WIRE_FEAT_MANY_WAIT 0x8000000u
/* 0x10000000 TD_WIRE_FEAT_STATUS_PINNED: wire-status.h */

/* HELLO request */
struct td_wire_hello_req {
	uint32_t import_pref;  /* enum td_import */
	int32_t probe_fd;      /* a client fd the daemon may try to pull, -1 */
	struct td_wire_str client_name;
	/* optional: TD_WIRE_FEAT_* the client knows; 0 = left out */
	uint32_t features;
};
/* HELLO reply; attaches the daemon's pidfd when out_pidfd != 0 */
struct td_wire_hello_rep {
	uint32_t daemon_pid;
	uint32_t import_in;  /* how this peer's fds reach the daemon */
	uint32_t out_pidfd;  /* 1: a pidfd of the daemon is attached */
	int32_t probe_fd;    /* a daemon fd the client may try to pull, -1 */
	uint32_t max_msg, max_fds, max_name, max_meta, max_planes;
	uint64_t max_bytes;  /* daemon memory limit, 0 = none */
	struct td_wire_str ident; /* "tensord 0.1.0" */
	/* optional: TD_WIRE_FEAT_* the daemon serves, only in reply to a
	 * request that sent features; 0 = left out */
	uint32_t features;
};

/* One fd-table entry as the daemon describes its own descriptors. */
struct td_wire_fdent {
	int32_t fd;         /* the daemon's fd number (for pidfd_getfd) */
	uint64_t buffer_id; /* stable id of the buffer while the daemon runs */
};

/*
 * A buffer_id with this bit names a ring's data memfd in a GET reply: all
 * the ring's slots, of which the planes use one. Map only the pages the
 * planes cover (the rest is other slots). Stored buffers never have it.
 */
#define TD_WIRE_BUF_WINDOW (1ull << 63)

/* Request flags shared by fd-returning requests (ALLOC, GET) */
#define TD_WIRE_REQ_SCM 0x1u /* attach the fds with SCM_RIGHTS */
/*
 * FOLLOW request flag, served with TD_WIRE_FEAT_FOLLOW_SPARE
 * (wire-status.h): a follow the client can do without (the one
 * td_client_get_newer makes by itself), admitted only while it leaves
 * at least half of the name's rows and of the bells (the daemon's, the
 * uid's) to follows that ask without it; -ENOBUFS otherwise.
 * RING_SUBSCRIBE, which shares the request body, refuses it.
 */
#define TD_WIRE_FOLLOW_SPARE 0x2u
/*
 * RING_SUBSCRIBE request flag, served with TD_WIRE_FEAT_SUB_WAIT: no
 * ring of the name yet parks the request until one is created or
 * `timeout_ms` (a u32 after the flags, present with this flag alone;
 * TD_WIRE_WAIT_FOREVER: no limit) runs out, -ETIMEDOUT. FOLLOW and
 * STAGE_PAGE, which share the request body, refuse it.
 */
#define TD_WIRE_RSUB_WAIT 0x4u

/*
 * ALLOC request flag: a recyclable loan (docs/fastpath.md, "Recycled
 * loans"): not write-sealed at PUBLISH, and its buffers go back to the
 * producer's connection when the version is retired and unleased.
 */
#define TD_WIRE_ALLOC_RECYCLE 0x2u
/*
 * ALLOC request flag (TD_WIRE_FEAT_PUB_LOAN): before this ALLOC, the
 * loan the last TD_WIRE_PUB_LOAN reply lent goes back to the free list
 * (the client will not use it: other sizes). No-op when it was published.
 */
#define TD_WIRE_ALLOC_UNLOAN 0x4u
/*
 * ALLOC request flag (TD_WIRE_FEAT_REWRITE; with RECYCLE only): the
 * version this connection published last from a REWRITE alloc, when it
 * is still the current version of its name, the uid may still write
 * that name, and nobody holds it (no lease, no follower's hold), stops
 * being current and its buffers make this alloc (docs/fastpath.md,
 * "Rewriting the latest version"). Until this alloc is published or
 * dropped, for a second at most, a GET of that name waits for the
 * publish as a GET of a ring being rewritten does. Otherwise an ordinary
 * RECYCLE ALLOC.
 */
#define TD_WIRE_ALLOC_REWRITE 0x8u
/*
 * ALLOC request flag (TD_WIRE_FEAT_REWRITE; with RECYCLE only): the alloc
 * is rewritable as with TD_WIRE_ALLOC_REWRITE (its PUBLISH makes the
 * version the one a later REWRITE ALLOC may take back, and a loan that
 * PUBLISH lends is rewritable too), but nothing is taken back now.
 */
#define TD_WIRE_ALLOC_REWRITABLE 0x10u
/*
 * ALLOC request flag (TD_WIRE_FEAT_RESERVE): the client reserves the
 * memory of the planes this ALLOC makes (fallocate on its own fd before
 * it writes; docs/protocol.md §6.2). The daemon sizes and seals them as
 * ever but leaves their pages unallocated, so making a big plane does not
 * stop its loop for every other client, and the reply names them
 * (td_wire_alloc_rep.unreserved). Recycled planes were reserved when made.
 */
#define TD_WIRE_ALLOC_RESERVE 0x20u
/*
 * ALLOC request flag (TD_WIRE_FEAT_ALLOC_NAME): the request names the
 * tensor its loan will be published as (td_wire_alloc_req.name, right
 * after the sizes). The uid must be allowed to write that name, the
 * alloc may be published under that name only, and a recyclable buffer
 * a reader that may not read every name its producer may write was
 * sent under that name may be lent to it (docs/fastpath.md, "Across
 * names"); an ALLOC without a name is lent only buffers no such reader
 * was sent.
 */
#define TD_WIRE_ALLOC_NAMED 0x40u
/*
 * ALLOC request flag (TD_WIRE_FEAT_STAGE_TAKEBACK, docs/protocol.md §13; with
 * REWRITE and NAMED only): the client can fire a staged publish, so a
 * take-back of a followed name may be staged, and the reply then carries
 * a stage section (td_wire_alloc_rep.stage_version).
 */
#define TD_WIRE_ALLOC_STAGE 0x80u
/* buffer ids a RECYCLE ALLOC or an SCM GET may advertise (the client
 * holds them mapped) */
#define TD_WIRE_MAX_HELD 16
/* the words of a trigger page (proto/follow.h TD_FOLLOW_TRIG_SLOTS) */
#define TD_WIRE_STAGE_SLOTS 64

struct td_wire_alloc_req {
	uint32_t flags; /* TD_WIRE_REQ_SCM | TD_WIRE_ALLOC_RECYCLE | _UNLOAN */
	uint32_t plane_count; /* <= TD_WIRE_MAX_PLANES */
	uint64_t sizes[TD_WIRE_MAX_PLANES];
	/* only with TD_WIRE_ALLOC_NAMED: a tensor name (u16 length, bytes) */
	struct td_wire_str name;
	/*
	 * Optional trailing field (added after version 1): u32 held_count
	 * (1..TD_WIRE_MAX_HELD; absent = 0), u64 held[held_count]. Only with
	 * TD_WIRE_ALLOC_RECYCLE; ids are nonzero, distinct, not windows.
	 */
	uint32_t held_count;
	uint64_t held[TD_WIRE_MAX_HELD];
};
/*
 * ALLOC reply. A plane the daemon recycled from the buffers the request
 * advertised has fd -1 and buffer_id = that held id; nothing is attached
 * for it (with TD_WIRE_REQ_SCM only the planes with fd >= 0 are, in
 * order). Only replies to a request with held ids can contain fd -1.
 */
struct td_wire_alloc_rep {
	uint64_t alloc_id;
	uint32_t fd_count;
	struct td_wire_fdent fds[TD_WIRE_MAX_PLANES];
	/*
	 * Optional trailing u32, only in reply to TD_WIRE_ALLOC_RESERVE (left
	 * out when 0): bit i, plane i was made for this ALLOC and its memory
	 * is not reserved; the client reserves it. Only planes with fd >= 0.
	 * Never in a PUBLISH reply's loan (a loan makes no plane).
	 */
	uint32_t unreserved;
	/*
	 * Optional, only in reply to TD_WIRE_ALLOC_STAGE, never with
	 * unreserved (a take-back makes no plane): the loan is staged as
	 * version stage_version of the name, fired through the trigger page
	 * of generation stage_gen, as a PUBLISH reply's stage. 0: not
	 * staged, and the section (u64, u32) is left out. Never in a
	 * PUBLISH reply's loan (that reply has a stage section of its own).
	 * stage_slot, with TD_WIRE_FEAT_STAGE_WORD: the word of the trigger
	 * page it fires at (1..TD_WIRE_STAGE_SLOTS-1), the section's last
	 * u32; 0: left out (the word is the name's own, or 0).
	 */
	uint64_t stage_version;
	uint32_t stage_gen;
	uint32_t stage_slot;
};

#define TD_WIRE_PUB_PIN 0x1u /* never evict this version */
/*
 * PUBLISH flag (TD_WIRE_FEAT_PUB_LOAN, docs/protocol.md §6.3): the reply
 * also carries the producer's next recyclable loan of the same plane
 * sizes, taken from its free list (alloc_id 0 when there is none), so a
 * streaming producer makes one round trip per handoff instead of two.
 */
#define TD_WIRE_PUB_LOAN 0x2u
/* with TD_WIRE_PUB_LOAN: attach the loan's fds (the client's
 * TD_WIRE_REQ_SCM of ALLOC; PUBLISH's bit 0x1 is PIN) */
#define TD_WIRE_PUB_LOAN_SCM 0x4u
/*
 * PUBLISH flags (TD_WIRE_FEAT_STAGE, docs/protocol.md §13, "Staged
 * publishes"): with TD_WIRE_PUB_LOAN, STAGE says the client can fire a
 * staged publish, so the reply may carry a stage section; FIRED says
 * this PUBLISH is the notice of the stage of alloc_id the client fired.
 */
#define TD_WIRE_PUB_STAGE 0x8u
#define TD_WIRE_PUB_FIRED 0x10u
/*
 * PUBLISH flag (TD_WIRE_FEAT_PUB_IF, docs/protocol.md §6.3, "A publish
 * with a condition"): the body carries a u64 `expect` right after the fd
 * table, and the name is published only while its current version is
 * `expect`; expect 0: only while the name has no current version. Refused
 * with -EEXIST (expect 0, the name has a version) or -ESTALE (another
 * version, or none), nothing kept. Without the flag the field is absent,
 * so each condition, and its absence, has one encoding. Not with FIRED
 * (that publish is committed already).
 */
#define TD_WIRE_PUB_IF 0x20u

struct td_wire_publish_req {
	struct td_wire_str name;
	uint32_t flags; /* TD_WIRE_PUB_PIN | TD_WIRE_PUB_LOAN | _LOAN_SCM */
	uint64_t alloc_id; /* 0: the planes are the producer's own fds */
	struct td_wire_bytes meta;
	struct td_wire_bytes blob; /* reference mode, pid = producer */
	uint32_t fd_count;         /* <= TD_WIRE_MAX_PLANES + 1 (fence) */
	int32_t fds[TD_WIRE_MAX_PLANES + 1]; /* producer fd numbers */
	uint64_t expect; /* on the wire only with TD_WIRE_PUB_IF */
	/*
	 * Optional trailing field, only with TD_WIRE_PUB_LOAN: u32
	 * held_count (1..TD_WIRE_MAX_HELD; absent = 0), u64 held[]: the
	 * buffer ids the client holds mapped, as for ALLOC.
	 */
	uint32_t held_count;
	uint64_t held[TD_WIRE_MAX_HELD];
};
/*
 * PUBLISH reply: the version, then, only in reply to TD_WIRE_PUB_LOAN,
 * an ALLOC reply body (the loan; alloc_id 0 and no planes: no loan),
 * whose fds are attached with TD_WIRE_PUB_LOAN_SCM as an ALLOC reply's
 * with TD_WIRE_REQ_SCM (held planes: fd -1, nothing attached).
 */
struct td_wire_publish_rep {
	uint64_t version;
	bool has_loan; /* the reply carries the loan section */
	struct td_wire_alloc_rep loan;
	/*
	 * Optional, after a loan, only in reply to TD_WIRE_PUB_STAGE: the
	 * loan is staged as version stage_version of the name, fired
	 * through the trigger page of generation stage_gen (STAGE_PAGE),
	 * at its word stage_slot when not 0 (as an ALLOC reply's). 0: not
	 * staged, and the section is left out.
	 */
	uint64_t stage_version;
	uint32_t stage_gen;
	uint32_t stage_slot;
};

enum td_wire_get_mode {
	TD_GET_LATEST = 0,
	TD_GET_EXACT = 1,
	TD_GET_NEWER = 2, /* wait for a version > version */
};
#define TD_WIRE_WAIT_FOREVER UINT32_MAX

struct td_wire_get_req {
	struct td_wire_str name;
	uint32_t mode;
	uint32_t flags; /* TD_WIRE_REQ_SCM */
	uint64_t version;
	uint32_t timeout_ms; /* 0 = do not wait */
	/*
	 * Optional trailing field (added after version 1): u32 held_count
	 * (1..TD_WIRE_MAX_HELD; absent = 0), u64 held[held_count]: buffer ids
	 * the client has mapped, so the reply need not attach them. Only with
	 * TD_WIRE_REQ_SCM (a pidfd client pulls only what it lacks); ids are
	 * nonzero, distinct, not windows (as for ALLOC).
	 */
	uint32_t held_count;
	uint64_t held[TD_WIRE_MAX_HELD];
};
/*
 * GET reply. To a request with held ids, an entry whose buffer_id is one
 * of them has fd -1 and nothing attached (with TD_WIRE_REQ_SCM only the
 * entries with fd >= 0 are, in order); a fence is always attached. Only
 * replies to a request with held ids can contain fd -1.
 */
struct td_wire_get_rep {
	uint64_t version;
	uint64_t lease_id;
	struct td_wire_bytes meta;
	struct td_wire_bytes blob; /* pid = daemon, handles index fds[] */
	uint32_t fd_count;
	struct td_wire_fdent fds[TD_WIRE_MAX_PLANES + 1];
};

/*
 * RELEASE flag, an optional trailing u32 (TD_WIRE_FEAT_RELEASE_QUIET;
 * absent = 0, a present 0 is refused): no reply when the release
 * succeeds (a failure is still answered). The client does not wait for
 * the daemon; the request is ordered before its next one.
 */
#define TD_WIRE_REL_QUIET 0x1u
/*
 * RELEASE flag (TD_WIRE_FEAT_ALLOC_FREE): lease_id is the id of an
 * unpublished alloc of this connection, which the client gives up: the
 * daemon drops it and closes its buffers (never recycled: the client may
 * have left them unreserved), as it would at the connection's end.
 * -ENOENT when the connection has no such alloc.
 */
#define TD_WIRE_REL_ALLOC 0x2u

struct td_wire_release_req {
	uint64_t lease_id; /* with TD_WIRE_REL_ALLOC: an alloc id */
	uint32_t flags;    /* TD_WIRE_REL_QUIET | TD_WIRE_REL_ALLOC */
};

/*
 * LIST and STAT request flags: an optional trailing u32 (added after
 * version 1 shipped; absent = 0, and a present field is never 0, so every
 * body has one encoding). A client that sets TD_WIRE_CAT_KINDS reads
 * TD_WIRE_ENT_RING in entries; without it rings are listed and STATed as
 * plain entries, which decoders that predate the bit accept.
 */
#define TD_WIRE_CAT_KINDS 0x1u
/* entry flags besides TD_WIRE_PUB_PIN: the name is a ring (docs/fastpath.md),
 * version = its latest (0: none yet), lease_count = GET leases on it */
#define TD_WIRE_ENT_RING 0x2u
/* request bit: the client reads TD_WIRE_ENT_RECYCLE (sent with KINDS) */
#define TD_WIRE_CAT_RECYCLE 0x2u
/* entry flag: a recyclable version (not write-sealed: it trusts its
 * producer not to write after publishing), only to TD_WIRE_CAT_RECYCLE */
#define TD_WIRE_ENT_RECYCLE 0x4u

/* A tensor's summary in LIST and STAT replies. */
struct td_wire_entry {
	struct td_wire_str name;
	uint64_t version;
	uint32_t dtype;
	uint32_t ndim; /* <= TD_WIRE_MAX_DIMS */
	uint64_t shape[TD_WIRE_MAX_DIMS];
	uint64_t bytes;       /* sum of plane sizes */
	uint32_t lease_count; /* leases on this version */
	uint32_t flags; /* TD_WIRE_PUB_PIN | TD_WIRE_ENT_RING | _RECYCLE */
	struct td_wire_bytes meta;
};

struct td_wire_list_req {
	struct td_wire_str prefix; /* "" = all */
	struct td_wire_str after;  /* resume after this name, "" = start */
	uint32_t flags; /* TD_WIRE_CAT_KINDS | _RECYCLE; optional on the wire */
};
/* LIST reply: u32 count, u32 more, then count entries. */
int td_wire_list_rep_begin(struct td_wire_wr *wr); /* reserves the counts */
int td_wire_entry_put(struct td_wire_wr *wr, const struct td_wire_entry *e);
void td_wire_list_rep_finish(struct td_wire_wr *wr, uint32_t count,
			     uint32_t more);
/* Reading: init, then next() until it returns 0 (end) or <0 (error). */
struct td_wire_list_rd {
	struct td_wire_rd rd;
	uint32_t count, more, seen;
};
int td_wire_list_rep_init(struct td_wire_list_rd *lr, const uint8_t *body,
			  size_t len, struct td_err *err);
int td_wire_list_rep_next(struct td_wire_list_rd *lr,
			  struct td_wire_entry *e);

struct td_wire_name_req { /* STAT, DELETE */
	struct td_wire_str name;
};
/* STAT request: the name, then the optional flags (as LIST) */
struct td_wire_stat_req {
	struct td_wire_str name;
	uint32_t flags; /* TD_WIRE_CAT_KINDS | _RECYCLE; optional on the wire */
};
/* STAT reply body = one entry; DELETE reply = u64 version removed */

/*
 * DELETE request (TD_WIRE_FEAT_DELETE_IF, docs/protocol.md §6.7): the
 * name, then an optional u64: remove the name only while that is its
 * current version (-ESTALE otherwise). Absent = 0 = whatever is current;
 * a present 0 is refused (one encoding per body). The body of version 1
 * is td_wire_name_req, which this decodes too.
 */
struct td_wire_delete_req {
	struct td_wire_str name;
	uint64_t version;
};

#define TD_WIRE_WATCH_PREFIX 0x1u
struct td_wire_watch_req {
	struct td_wire_str name; /* a name, or a prefix with the flag */
	uint32_t flags;
};
struct td_wire_watch_rep {
	uint64_t watch_id;
};
/* UNWATCH request: u64 watch_id; empty reply */

enum td_wire_event {
	TD_EVENT_PUBLISHED = 1,
	TD_EVENT_DELETED = 2,
};
struct td_wire_notify {
	uint64_t watch_id;
	uint32_t event;
	uint64_t version;
	struct td_wire_str name;
};

/* Error reply body: str reason (<= TD_WIRE_MAX_REASON). */

/* Additions (docs/protocol.md, "Additions to the first contract"): named
 * structs for the bodies above that were only described in comments. */
struct td_wire_delete_rep { /* DELETE reply */
	uint64_t version;   /* the version that was the latest */
};
struct td_wire_unwatch_req { /* UNWATCH request */
	uint64_t watch_id;
};
struct td_wire_error { /* body of every reply with status < 0 */
	struct td_wire_str reason; /* UTF-8, no NUL; encode cuts at the cap */
};

/*
 * PUBLISH_MANY and GET_MANY (TD_WIRE_FEAT_MANY, docs/protocol.md §6.10):
 * 1..TD_WIRE_MANY_MAX names in one request, committed (or leased) in
 * one step of the daemon, all or none. A refusal names the element.
 */
#define TD_WIRE_MANY_MAX 64

/* One PUBLISH_MANY element: a PUBLISH request body (§6.3) without
 * TD_WIRE_PUB_LOAN, _LOAN_SCM, _STAGE or _FIRED, and how many of its
 * fd-table entries ride in the datagram (0 or its fd_count; the
 * elements' attached fds follow each other in element order). */
struct td_wire_pub_elem {
	uint32_t attached;
	struct td_wire_bytes body;
};
/* PUBLISH_MANY request: u32 count, then per element u32 attached and
 * bytes body. */
struct td_wire_publish_many_req {
	uint32_t count; /* 1..TD_WIRE_MANY_MAX */
	struct td_wire_pub_elem el[TD_WIRE_MANY_MAX];
};
/* PUBLISH_MANY reply: u32 count (the request's), u64 version[count]. */
struct td_wire_publish_many_rep {
	uint32_t count;
	uint64_t versions[TD_WIRE_MANY_MAX];
};
/*
 * GET_MANY request flag (TD_WIRE_FEAT_MANY_WAIT): the body goes on, after
 * the names, with u64 version and u32 timeout_ms (present exactly when
 * the flag is): the request waits, as a GET NEWER does, until names[0]
 * has a version newer than `version` (0: any), then leases the latest
 * version of every name in that one step.
 */
#define TD_WIRE_MANY_NEWER 0x2u
/* GET_MANY request: u32 flags (TD_WIRE_REQ_SCM, TD_WIRE_MANY_NEWER), u32
 * count, str names (distinct), [u64 version, u32 timeout_ms]. The latest
 * version of each; no held ids. */
struct td_wire_get_many_req {
	uint32_t flags;
	uint32_t count; /* 1..TD_WIRE_MANY_MAX */
	struct td_wire_str names[TD_WIRE_MANY_MAX];
	/* only with TD_WIRE_MANY_NEWER: */
	uint64_t version;    /* newer than this version of names[0] */
	uint32_t timeout_ms; /* 0 = do not wait, TD_WIRE_WAIT_FOREVER */
};
/* GET_MANY reply: u32 count, then per name bytes: a GET reply body
 * (§6.4). With TD_WIRE_REQ_SCM every entry's fd is attached, the
 * elements' in element order (at most TD_WIRE_MAX_FDS in all). */
struct td_wire_get_many_rep {
	uint32_t count;
	struct td_wire_bytes reps[TD_WIRE_MANY_MAX];
};

#define TD_WIRE_CODEC(type)                                                   \
	int64_t td_wire_##type##_encode(const struct td_wire_##type *m,       \
					uint8_t *buf, size_t cap);            \
	int td_wire_##type##_decode(const uint8_t *body, size_t len,          \
				    struct td_wire_##type *m,                 \
				    struct td_err *err);

TD_WIRE_CODEC(publish_many_req)
TD_WIRE_CODEC(publish_many_rep)
TD_WIRE_CODEC(get_many_req)
TD_WIRE_CODEC(get_many_rep)
TD_WIRE_CODEC(hello_req)
TD_WIRE_CODEC(hello_rep)
TD_WIRE_CODEC(alloc_req)
TD_WIRE_CODEC(alloc_rep)
TD_WIRE_CODEC(publish_req)
TD_WIRE_CODEC(publish_rep)
TD_WIRE_CODEC(get_req)
TD_WIRE_CODEC(get_rep)
TD_WIRE_CODEC(release_req)
TD_WIRE_CODEC(list_req)
TD_WIRE_CODEC(name_req)
TD_WIRE_CODEC(stat_req)
TD_WIRE_CODEC(entry)
TD_WIRE_CODEC(watch_req)
TD_WIRE_CODEC(watch_rep)
TD_WIRE_CODEC(notify)
TD_WIRE_CODEC(delete_req)
TD_WIRE_CODEC(delete_rep)
TD_WIRE_CODEC(unwatch_req)
TD_WIRE_CODEC(error)

#undef TD_WIRE_CODEC

/* ---- rings: the fast path (docs/protocol.md §10) ---- */

#define TD_WIRE_RING_MAX_PLANES 4 /* == TD_RING_MAX_PLANES (proto/ring.h) */
#define TD_WIRE_RING_FDS 3        /* header, readers, data */

/* RING_CREATE request flags (with TD_WIRE_REQ_SCM) */
#define TD_WIRE_RING_HUGE 0x2u /* back the slots with huge pages if any */
/* the producer wakes readers asleep on their own rows: the daemon sets
 * TD_RING_ROW_WAKE in the header (TD_WIRE_FEAT_WAKE_ROWS) */
#define TD_WIRE_RING_ROW_WAKE 0x4u
/* the producer reads owner tokens in rows: the daemon gives rows out with
 * them and sets TD_RING_ROW_OWNER in the header (TD_WIRE_FEAT_ROW_OWNER) */
#define TD_WIRE_RING_ROW_OWNER 0x8u
/* the producer reserves the slots' memory itself (TD_WIRE_FEAT_RESERVE,
 * docs/protocol.md §10): the daemon makes them without allocating it */
#define TD_WIRE_RING_RESERVE 0x10u
/* ring reply flags: what backs the slots */
#define TD_WIRE_RING_HUGETLB 0x1u /* MFD_HUGETLB pages */
#define TD_WIRE_RING_THP 0x2u     /* tmpfs, MADV_HUGEPAGE advised */
/* only to TD_WIRE_RING_RESERVE: the slots' memory is not allocated yet */
#define TD_WIRE_RING_UNRESERVED 0x4u

struct td_wire_ring_create_req {
	struct td_wire_str name;
	uint32_t flags; /* TD_WIRE_REQ_SCM | TD_WIRE_RING_HUGE | _ROW_WAKE
			 * | _ROW_OWNER | _RESERVE */
	uint32_t slot_count;   /* 2..64 */
	uint32_t reader_count; /* 1..32 */
	uint32_t dtype;
	uint32_t ndim; /* <= TD_WIRE_MAX_DIMS */
	uint64_t shape[TD_WIRE_MAX_DIMS];
	uint32_t plane_count; /* 1..TD_WIRE_RING_MAX_PLANES */
	uint64_t plane_sizes[TD_WIRE_RING_MAX_PLANES];
};

/* RING_CREATE and RING_SUBSCRIBE reply: the geometry and three fds. */
struct td_wire_ring_rep {
	uint64_t id;           /* ring id (create) or subscription id */
	uint32_t flags;        /* TD_WIRE_RING_HUGETLB | _THP | _UNRESERVED */
	uint32_t row;          /* the subscriber's reader row; producer: -1 */
	uint32_t reader_count;
	uint32_t slot_count;
	uint32_t plane_count;
	uint64_t plane_off[TD_WIRE_RING_MAX_PLANES];
	uint64_t plane_size[TD_WIRE_RING_MAX_PLANES];
	uint64_t slot_stride;
	uint64_t data_len;
	uint32_t dtype;
	uint32_t ndim;
	uint64_t shape[TD_WIRE_MAX_DIMS];
	uint32_t fd_count; /* == TD_WIRE_RING_FDS */
	struct td_wire_fdent fds[TD_WIRE_RING_FDS];
};

struct td_wire_ring_sub_req {
	struct td_wire_str name;
	uint32_t flags; /* TD_WIRE_REQ_SCM, TD_WIRE_RSUB_WAIT */
	uint32_t timeout_ms; /* with TD_WIRE_RSUB_WAIT alone, else 0 */
};

struct td_wire_ring_close_req { /* a ring id or a subscription id */
	uint64_t id;
};

/* RING_STAT request: td_wire_name_req. Reply: */
struct td_wire_ring_stat_rep {
	uint64_t id;
	uint32_t slot_count;
	uint32_t reader_count;
	uint32_t subscribers;
	uint32_t flags;          /* TD_RING_CLOSED when the producer left */
	uint64_t latest_version; /* from the header, 0 = none yet */
	uint64_t requests;       /* datagrams the daemon has received, all
				    peers, since it started (a debug count) */
};

#define TD_WIRE_CODEC(type)                                                   \
	int64_t td_wire_##type##_encode(const struct td_wire_##type *m,       \
					uint8_t *buf, size_t cap);            \
	int td_wire_##type##_decode(const uint8_t *body, size_t len,          \
				    struct td_wire_##type *m,                 \
				    struct td_err *err);

TD_WIRE_CODEC(ring_create_req)
TD_WIRE_CODEC(ring_rep)
TD_WIRE_CODEC(ring_sub_req)
TD_WIRE_CODEC(ring_close_req)
TD_WIRE_CODEC(ring_stat_rep)

#undef TD_WIRE_CODEC

/*
 * Names (tensor names, watch prefixes): 1..TD_WIRE_MAX_NAME bytes of
 * printable ASCII from [A-Za-z0-9._:/@+-], no leading '/', no "..", no
 * "//", not ending in '/'. Returns 0 or -EINVAL with a static reason in
 * *reason. A prefix (allow_empty) may be "" and may end in '/'.
 */
int td_wire_name_check(const char *s, size_t len, bool prefix,
		       const char **reason);

/* Opcode name for logs ("PUBLISH"), "UNKNOWN" otherwise. */
const char *td_wire_op_name(uint16_t op);

#endif
