/* SPDX-License-Identifier: MIT */
/*
 * proto/ring: the shared-memory layout of a tensord ring (docs/fastpath.md)
 * and its pure helpers. No syscalls here: the daemon and the client library
 * map the memfds and wait on the futex words; this file only says where
 * everything lives and how a value read from shared memory is checked.
 *
 * A ring is three memfds the daemon creates:
 *
 *   header   written by the producer (and the daemon on close); consumers
 *            map it read-only. Hot words and one state line per slot.
 *   readers  one 64-byte row per consumer (which slot it holds, whether it
 *            sleeps) plus the producer's "waiting for a free slot" words.
 *            Everybody of the ring maps it read-write.
 *   data     slot_count slots of slot_stride bytes; planes inside a slot at
 *            fixed offsets. Producer read-write, consumers read-only.
 *
 * Everything a reader needs to find bytes (slot count, stride, plane
 * offsets) comes from the daemon's reply, never from the header: shared
 * memory only carries indices and versions, and every index read from it
 * is bounds-checked against the private copy (td_ring_latest_unpack).
 *
 * All words are native-endian C11 atomics: a ring never leaves the host.
 */
#ifndef TD_PROTO_RING_H
#define TD_PROTO_RING_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TD_RING_MAGIC 0x474e5254u /* "TRNG" little-endian */
/* 2: row.taken; 3: row.wake_gen, waiting 2; 4: waiting 4, TD_RING_ROW_WAKE;
 * 5: owner tokens in held and waiting, taken's fresh mark, _ROW_OWNER */
#define TD_RING_LAYOUT 5

/* Named caps. */
#define TD_RING_MAX_SLOTS 64   /* slot index fits the low 8 bits of latest */
#define TD_RING_MIN_SLOTS 2    /* the latest one plus one to write */
#define TD_RING_MAX_READERS 32 /* subscriptions of one ring at a time */
#define TD_RING_MAX_PLANES 4   /* planes per slot */
#define TD_RING_MAX_DIMS 16
/* Largest slot (all planes): 16 GiB, so stride * slots stays far from
 * overflow and a typo does not ask the daemon for an exabyte. */
#define TD_RING_MAX_SLOT_BYTES (16ull << 30)

#define TD_RING_PAGE 4096u
#define TD_RING_HUGE_PAGE (2u << 20)

/* row.held when the row holds nothing: as the daemon leaves it (a free
 * or reset row), and as its subscriber leaves it. Any value that is not
 * a slot index holds nothing; the two tell a subscriber, by what its
 * next hold's exchange replaces, whether the daemon reset its row since
 * (docs/fastpath.md, "Why a held slot is never rewritten"). */
#define TD_RING_NONE UINT32_MAX
#define TD_RING_RELEASED (UINT32_MAX - 1)
/* row.taken of a row nobody owns: it never stops the producer reusing the
 * latest slot (a new subscriber's row starts at 0: "took nothing yet"). */
#define TD_RING_TAKEN_ANY UINT64_MAX
/* row.taken of a row just given to the owner `tok` (TD_RING_ROW_OWNER):
 * took nothing yet, like 0, but the owner's own (no version reaches 2^56:
 * `latest` packs it above 8 bits) */
#define TD_RING_TAKEN_FRESH (UINT64_C(0xfe) << 56)

/* header.flags */
#define TD_RING_CLOSED 0x1u /* the producer is gone: no more versions */
/* the daemon serves GETs of the ring: keep the latest version readable
 * (policy like row.taken; the slot's `leases` word guards the bytes) */
#define TD_RING_KEEP_LATEST 0x2u
/* set at RING_CREATE (TD_WIRE_RING_ROW_WAKE): the producer and the daemon
 * wake a reader asleep on its own row (TD_RING_WAIT_ROW); without it every
 * sleeper shares header.seq (TD_RING_WAIT_FUTEX), as before layout 4 */
#define TD_RING_ROW_WAKE 0x4u
/*
 * set at RING_CREATE (TD_WIRE_RING_ROW_OWNER): every row the daemon gives
 * out carries its owner's token (td_ring_owner_of) in the high 24 bits of
 * `held` and `waiting`, and `taken` starts at TD_RING_TAKEN_FRESH | token.
 * A subscriber writes its row only by compare-exchanges that expect its
 * token (or its own last `taken`), so none lands in a row the daemon freed
 * or gave to someone else since (docs/fastpath.md, "A row that changed
 * hands"). The low 8 bits mean what the whole word meant before.
 */
#define TD_RING_ROW_OWNER 0x8u

struct td_ring_slot_state {
	/* version published in this slot; 0 while being written or never */
	_Atomic uint64_t version;
	/* holds by the daemon itself: GET leases on the ring's slot */
	_Atomic uint32_t leases;
	/*
	 * The slot's fence (a futex word): TD_RING_FENCE_NONE for a version
	 * published ready, _PENDING for one published before the work
	 * writing it finished (td_ring_publish_fenced), _SIGNALLED once the
	 * producer said it did (_ABANDONED: the daemon, at close). Stored
	 * by the producer before the release
	 * store of `version`, so a reader that validated its hold sees this
	 * version's value or a later signal, never a previous version's.
	 */
	_Atomic uint32_t fence;
};

/* td_ring_slot_state.fence */
#define TD_RING_FENCE_NONE 0u
#define TD_RING_FENCE_PENDING 1u
#define TD_RING_FENCE_SIGNALLED 2u
/* set by the daemon when the ring closes with the fence still pending:
 * nobody will signal it */
#define TD_RING_FENCE_ABANDONED 3u

struct td_ring_hdr {
	/* written once by the daemon; informational (readers use the reply) */
	uint32_t magic;
	uint32_t layout;
	uint32_t slot_count;
	uint32_t reader_count;
	uint64_t slot_stride;
	uint64_t data_len;
	uint8_t pad0[32];
	/* one cache line written on every publish */
	_Alignas(64) _Atomic uint32_t seq; /* futex word: +1 per publish */
	_Atomic uint32_t flags; /* TD_RING_CLOSED, _KEEP_LATEST, _ROW_WAKE */
	_Atomic uint64_t latest;           /* version << 8 | slot; 0 = none */
	uint8_t pad1[48];
	struct td_ring_slot_state slots[TD_RING_MAX_SLOTS];
};

/* row.waiting */
#define TD_RING_WAIT_FUTEX 1u /* asleep on header.seq */
#define TD_RING_WAIT_FD 2u    /* waits for its eventfd (an event loop) */
/* asleep on this row's own `waiting` word (header flag TD_RING_ROW_WAKE):
 * a waker swaps it to 0, then wakes that word (td__futex_wake_word) */
#define TD_RING_WAIT_ROW 4u

struct td_ring_row {
	_Atomic uint32_t held;    /* slot index, TD_RING_NONE or _RELEASED */
	_Atomic uint32_t waiting; /* 0 or TD_RING_WAIT_* */
	/* newest version this reader took (policy for reusing the latest
	 * slot, see docs/fastpath.md; `held` alone guards the bytes) */
	_Atomic uint64_t taken;
	/* daemon-written: which timerfd wakes this row (RING_WAKE); 0 none,
	 * else never the value the producer was last given for this row,
	 * so its cached fd is known stale when the row changes hands (the
	 * 32-bit count wraps: "unique" alone was not) */
	_Atomic uint32_t wake_gen;
	uint8_t pad[44]; /* one row per cache line */
};

/* readers.prod_waiting: 0, or what the producer sleeps for */
#define TD_RING_PROD_SLOT 1u /* a free slot (td_ring_acquire) */
#define TD_RING_PROD_READ 2u /* its readers' takes (td_ring_wait_read) */

struct td_ring_readers {
	/* futex word the producer sleeps on when every slot is held */
	_Alignas(64) _Atomic uint32_t release_seq;
	_Atomic uint32_t prod_waiting; /* TD_RING_PROD_* while it sleeps */
	uint8_t pad[56];
	struct td_ring_row rows[TD_RING_MAX_READERS];
};

/* ---- row words with owner tokens (TD_RING_ROW_OWNER) ---- */

#define TD_RING_TOKEN_SHIFT 8
#define TD_RING_LOW 0xffu
/* the token of a free row's `held` (TD_RING_NONE) and never an owner's */
#define TD_RING_TOKEN_FREE 0xffffffu

/* The token of the subscription `sub_id` (the daemon's id for it, which
 * both sides know): 1 .. 0xfffffe, never 0 (a free row's `waiting`) nor
 * TD_RING_TOKEN_FREE. Consecutive ids have different tokens; two ids
 * 2^24 - 2 apart share one, and the ids are daemon-wide (every ring and
 * subscription takes one), so a row's next owner may share its last
 * owner's (docs/fastpath.md, "A row that changed hands"). */
static inline uint32_t td_ring_owner_of(uint64_t sub_id)
{
	return (uint32_t)(sub_id % (TD_RING_TOKEN_FREE - 1)) + 1;
}

/* A row word (held, waiting) of the owner tok, low bits `low`. */
static inline uint32_t td_ring_owned(uint32_t tok, uint32_t low)
{
	return tok << TD_RING_TOKEN_SHIFT | (low & TD_RING_LOW);
}

/* The slot a row's `held` holds, any other value (TD_RING_NONE's or
 * _RELEASED's low byte) holding nothing. The same for a word with a
 * token and one without: slot indices and both marks fit 8 bits. */
static inline uint32_t td_ring_held_slot(uint32_t held)
{
	return held & TD_RING_LOW;
}

/* What a row's `taken` says was taken: a fresh mark is nothing (0). */
static inline uint64_t td_ring_took(uint64_t taken)
{
	return taken != TD_RING_TAKEN_ANY && taken >= TD_RING_TAKEN_FRESH
		       ? 0
		       : taken;
}

_Static_assert(TD_RING_MAX_SLOTS <= (TD_RING_NONE & TD_RING_LOW) - 1,
	       "slot indices, NONE and RELEASED differ in the low byte");
_Static_assert(sizeof(_Atomic uint32_t) == 4 && sizeof(_Atomic uint64_t) == 8,
	       "lock-free atomics of plain size");
_Static_assert(offsetof(struct td_ring_hdr, seq) == 64, "hot line");
_Static_assert(sizeof(struct td_ring_hdr) == 128 + 16 * TD_RING_MAX_SLOTS,
	       "header layout");
_Static_assert(sizeof(struct td_ring_row) == 64, "row layout");
_Static_assert(sizeof(struct td_ring_readers) ==
		       64 + 64 * TD_RING_MAX_READERS,
	       "readers layout");

/* File sizes of the two control memfds (whole pages). */
#define TD_RING_HDR_LEN TD_RING_PAGE
#define TD_RING_READERS_LEN (3 * TD_RING_PAGE)
_Static_assert(sizeof(struct td_ring_hdr) <= TD_RING_HDR_LEN, "hdr fits");
_Static_assert(sizeof(struct td_ring_readers) <= TD_RING_READERS_LEN,
	       "readers fit");

/* Geometry of a ring's data memfd: computed by the daemon, sent to all. */
struct td_ring_geom {
	uint32_t slot_count;
	uint32_t plane_count;
	uint64_t plane_off[TD_RING_MAX_PLANES]; /* inside a slot */
	uint64_t plane_size[TD_RING_MAX_PLANES];
	uint64_t slot_stride; /* page (or huge page) multiple */
	uint64_t data_len;    /* slot_count * slot_stride */
};

/*
 * Lay out plane_count planes of the given sizes in each of slot_count
 * slots: planes at 64-byte aligned offsets inside a slot, slots at `align`
 * (TD_RING_PAGE or TD_RING_HUGE_PAGE) multiples. Every count and size is
 * checked against the caps and for overflow. 0 or -EINVAL / -EFBIG with a
 * static reason in *why.
 */
int td_ring_geom_compute(uint32_t slot_count, uint32_t plane_count,
			 const uint64_t *plane_size, uint64_t align,
			 struct td_ring_geom *g, const char **why);

/*
 * Check a geometry received from the daemon (a client never trusts even
 * that blindly: it sizes mmap calls): the same rules as compute, plus
 * planes inside their slot and data_len == slot_count * slot_stride.
 * 0 or -EBADMSG.
 */
int td_ring_geom_check(const struct td_ring_geom *g);

static inline uint64_t td_ring_latest_pack(uint64_t version, uint32_t slot)
{
	return version << 8 | (slot & 0xffu);
}

/*
 * Read `latest` to check a decision a subscriber made from an earlier
 * read of it (its hold, its sleep): `seq` first, then `latest`. The
 * producer stores `latest` with release order only and then bumps `seq`,
 * a seq_cst read-modify-write, which is what its store-load orders rest
 * on; a seq_cst load of `seq` here either comes before that bump in the
 * single total order, so the producer's later loads (of `held`, of
 * `waiting`) see what this subscriber stored before it, or reads from it
 * (or a later bump), so this load of `latest` sees the new value
 * (docs/fastpath.md, "Why a held slot is never rewritten").
 */
static inline uint64_t td_ring_latest_recheck(const struct td_ring_hdr *h)
{
	(void)atomic_load(&h->seq);
	return atomic_load(&h->latest);
}

/*
 * Split a `latest` word read from shared memory. 0 when it names no
 * version yet (*version = 0), 1 with *slot < slot_count and *version > 0,
 * -EBADMSG when the slot index is out of range (a corrupt header).
 */
static inline int td_ring_latest_unpack(uint64_t latest, uint32_t slot_count,
					uint32_t *slot, uint64_t *version)
{
	*version = latest >> 8;
	*slot = (uint32_t)(latest & 0xffu);
	if (latest == 0)
		return 0;
	if (*slot >= slot_count || *version == 0)
		return -EBADMSG;
	return 1;
}

#endif
