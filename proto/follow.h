/* SPDX-License-Identifier: MIT */
/*
 * proto/follow: the shared-memory layout of a FOLLOW (docs/fastpath.md,
 * "Following a name"): a plain-API consumer of a stream that takes each
 * new version of a name without a message to the daemon.
 *
 * The daemon keeps, per followed name, one "bell" memfd:
 *
 *   header   written by the daemon only; followers map it read-only. A
 *            hot line (seq, the futex word; latest, which version and
 *            which entry) and TD_FOLLOW_ENTRIES entries, each the body
 *            of the GET reply a consumer would have received for one
 *            version, with every fd left out (fd -1: the consumer maps
 *            the buffer from its own cache, by buffer id).
 *
 * and per follower one "row" memfd of one page, read-write for that
 * follower and the daemon only: which version it holds, whether it
 * sleeps. A follower can write only its own row.
 *
 * A hold is a lease the daemon learns about only when it needs to: when
 * a version stops being the latest (replaced, deleted, evicted) the
 * daemon scans the rows and takes a reference on the version for every
 * row that holds it, dropped once the row holds something else. The
 * order is the ring's (docs/fastpath.md, "Why a held slot is never
 * rewritten"): daemon *store latest; bump seq; load held* against
 * follower *exchange held; load seq; load latest*.
 *
 * All words are native-endian C11 atomics: a bell never leaves the host.
 * Every index read from shared memory is bounds-checked by its reader.
 */
#ifndef TD_PROTO_FOLLOW_H
#define TD_PROTO_FOLLOW_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TD_FOLLOW_MAGIC 0x574c4654u /* "TFLW" little-endian */
#define TD_FOLLOW_LAYOUT 1

#define TD_FOLLOW_PAGE 4096u
/* Entries in a bell: the latest version's and those of held versions.
 * Never more are needed than rows + 1; when all are in use the latest
 * version is named with TD_FOLLOW_ENTRY_NONE and followers GET it. */
#define TD_FOLLOW_ENTRIES 16u
#define TD_FOLLOW_ENTRY_LEN 4096u /* header + body, one page */
#define TD_FOLLOW_ENTRY_BODY (TD_FOLLOW_ENTRY_LEN - 16u)
/* Followers of one name at a time. */
#define TD_FOLLOW_MAX_ROWS 64u

/* latest's entry byte when the version has no entry: its reply would not
 * fit, it carries a fence (an fd), or every entry is in use. A follower
 * takes such a version with a GET of that exact version. */
#define TD_FOLLOW_ENTRY_NONE 0xffu

/* row.held of a row that holds nothing */
#define TD_FOLLOW_NONE 0u

/* row.waiting */
#define TD_FOLLOW_WAIT_FUTEX 1u /* asleep on header.seq */
#define TD_FOLLOW_WAIT_FD 2u    /* waits for its timerfd (FOLLOW_WAKE) */
/* asleep on this row's own `waiting` word, with a daemon that serves
 * TD_WIRE_FEAT_WAKE_ROWS: the daemon swaps it to 0 and wakes that word */
#define TD_FOLLOW_WAIT_ROW 4u

struct td_follow_hdr {
	/* written once by the daemon; informational (followers use the
	 * FOLLOW reply) */
	uint32_t magic;
	uint32_t layout;
	uint32_t entry_count;
	uint32_t entry_len;
	/* followers of the name now (rows in use), stored by the daemon at
	 * every FOLLOW and follow end; 0 from a daemon before it: unknown.
	 * A follower plans its poll with it (docs/fastpath.md, "Waiting") */
	_Atomic uint32_t followers;
	uint8_t pad0[44];
	/* the line written on every version */
	_Alignas(64) _Atomic uint32_t seq; /* futex word: +1 per change */
	_Atomic uint32_t flags;            /* reserved, 0 */
	/* version << 8 | entry; 0 = the name has no version now */
	_Atomic uint64_t latest;
	uint8_t pad1[48];
	/*
	 * The staged publish (docs/fastpath.md, "A followed publish
	 * without the daemon's hop"), written by the daemon only: the
	 * version a producer may fire, stage_version << 8 | entry (0:
	 * none), and the generation of the trigger page that fires it
	 * (STAGE_PAGE hands it out; a new producer, a new page). A
	 * daemon before TD_WIRE_FEAT_STAGE leaves both 0.
	 */
	_Alignas(64) _Atomic uint64_t stage;
	_Atomic uint32_t stage_gen;
	/* the word of that page that fires it (td_follow_trig_slot; 0 for
	 * a producer without TD_WIRE_FEAT_STAGE_SLOT, and from a daemon
	 * before it) */
	_Atomic uint32_t stage_slot;
	/*
	 * Which trigger page stage_gen names, by a number the daemon never
	 * gives twice (64 bits: stage_gen wraps after 2^32 pages, and a
	 * follower that kept the page of an old generation come round took
	 * it for the new producer's), stored before stage_gen; 0 from a
	 * daemon before it. The page a follower maps (STAGE_PAGE) is that
	 * of this number when it reads the same before and after the call.
	 */
	_Atomic uint64_t stage_page;
};

struct td_follow_entry {
	/* the version whose reply body this is; 0 while written */
	_Atomic uint64_t version;
	uint32_t len; /* body bytes */
	uint32_t pad;
	uint8_t body[TD_FOLLOW_ENTRY_BODY];
};

struct td_follow_row {
	/* the version this follower reads, TD_FOLLOW_NONE for none */
	_Alignas(64) _Atomic uint64_t held;
	_Atomic uint32_t waiting; /* 0 or TD_FOLLOW_WAIT_* */
	/* 0, or why the daemon ended this follow (TD_WIRE_FEAT_FOLLOW_END):
	 * EACCES, a policy reload took read of the name from this
	 * follower's uid; ESTALE, from another uid the bell was shown to
	 * (follow again: a new bell). Stored before the row is woken and
	 * given up; 0 from a daemon before it. */
	_Atomic uint32_t ended;
	/* the newest version this follower took (it stores it; 0 from an
	 * older library): a commit of a staged version wakes no row that
	 * took it already from the stage */
	_Atomic uint64_t taken;
	/*
	 * While `waiting` is TD_FOLLOW_WAIT_ROW: td_follow_trig_at() of the
	 * trigger word this follower sleeps on beside its row (futex_waitv),
	 * stored before `waiting`, when the value it expects there is no
	 * FIRED word of a version newer than the one it waits after; else 0.
	 * A fire of a newer version then changes the word and its producer
	 * wakes it, so the daemon's commit of a fired stage at that word
	 * leaves such a row asleep (0 from an older library: woken).
	 */
	_Atomic uint64_t trig_sleep;
};

/*
 * A trigger page: one per producer connection the daemon staged (a
 * connection has one stage at a time), its words written by that
 * producer (read-write mapping) and the daemon;
 * followers map it read-only and sleep on their name's word beside their
 * row (futex_waitv). A name's word is td_follow_trig_slot() of it (the
 * bell's stage_slot), so that a producer's fires of its other names
 * wake no follower of this one; word 0 serves every name of a producer
 * without TD_WIRE_FEAT_STAGE_SLOT. Each word is
 * (uint32_t)(version << 2) | TD_FOLLOW_TRIG_*: the daemon stores STAGED(v); the producer's compare-exchange makes it
 * FIRED(v) when its next publish is the staged one, the daemon's makes
 * it CANCELLED(v) when something else comes first; whoever wins
 * decides. The producer wakes the word after it fires.
 */
#define TD_FOLLOW_TRIG_STAGED 1u
#define TD_FOLLOW_TRIG_FIRED 2u
#define TD_FOLLOW_TRIG_CANCELLED 3u

struct td_follow_trigger {
	_Alignas(64) _Atomic uint32_t word;
	uint32_t pad;
};

#define TD_FOLLOW_TRIG_LEN TD_FOLLOW_PAGE
#define TD_FOLLOW_TRIG_SLOTS                                                  \
	(TD_FOLLOW_TRIG_LEN / sizeof(struct td_follow_trigger))

/* The word of a name (FNV-1a of its bytes): 1..TD_FOLLOW_TRIG_SLOTS-1. */
static inline uint32_t td_follow_trig_slot(const char *name, size_t len)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)name[i]) * 16777619u;
	return 1 + h % (uint32_t)(TD_FOLLOW_TRIG_SLOTS - 1);
}

static inline uint32_t td_follow_trig(uint64_t version, uint32_t state)
{
	return (uint32_t)(version << 2) | state;
}

/* row.trig_sleep of word slot of the trigger page of generation gen
 * (never 0: a page's generation is not) */
static inline uint64_t td_follow_trig_at(uint32_t gen, uint32_t slot)
{
	return (uint64_t)gen << 32 | slot;
}

_Static_assert(offsetof(struct td_follow_hdr, seq) == 64, "hot line");
_Static_assert(offsetof(struct td_follow_hdr, stage) == 128, "stage line");
_Static_assert(offsetof(struct td_follow_hdr, stage_page) == 144,
	       "stage_page (docs/protocol.md, 13)");
_Static_assert(sizeof(struct td_follow_hdr) <= TD_FOLLOW_PAGE, "hdr page");
_Static_assert(sizeof(struct td_follow_trigger) == 64, "a word a line");
_Static_assert(sizeof(struct td_follow_entry) == TD_FOLLOW_ENTRY_LEN,
	       "entry layout");
_Static_assert(sizeof(struct td_follow_row) <= TD_FOLLOW_PAGE, "row page");
_Static_assert(offsetof(struct td_follow_row, taken) == 16 &&
		       offsetof(struct td_follow_row, trig_sleep) == 24,
	       "row layout (docs/protocol.md, 13)");

/* File sizes: the header page, then the entries; a row is one page. */
#define TD_FOLLOW_BELL_LEN                                                    \
	(TD_FOLLOW_PAGE + TD_FOLLOW_ENTRIES * TD_FOLLOW_ENTRY_LEN)
#define TD_FOLLOW_ROW_LEN TD_FOLLOW_PAGE

static inline struct td_follow_entry *td_follow_entry_at(void *bell,
							 uint32_t e)
{
	return (struct td_follow_entry *)((uint8_t *)bell + TD_FOLLOW_PAGE +
					  (size_t)e * TD_FOLLOW_ENTRY_LEN);
}

static inline uint64_t td_follow_latest_pack(uint64_t version, uint32_t entry)
{
	return version << 8 | (entry & 0xffu);
}

/*
 * Re-read `latest` to check a hold or a sleep decided on an earlier read:
 * `seq` first (the daemon stores latest with release order, then bumps
 * seq, a seq_cst read-modify-write), as td_ring_latest_recheck.
 */
static inline uint64_t td_follow_latest_recheck(const struct td_follow_hdr *h)
{
	(void)atomic_load(&((struct td_follow_hdr *)h)->seq);
	return atomic_load(&((struct td_follow_hdr *)h)->latest);
}

#endif
