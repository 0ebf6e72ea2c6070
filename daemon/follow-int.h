/* SPDX-License-Identifier: MIT */
/*
 * What daemon/follow.c and daemon/follow-admit.c share: the bells of
 * followed names and their rows (docs/fastpath.md, "Following a name").
 */
#ifndef TD_DAEMON_FOLLOW_INT_H
#define TD_DAEMON_FOLLOW_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "store.h"
#include "follow.h"
#include "shown.h"

#define MAX_BELLS 256           /* followed names in the daemon */
#define MAX_FOLLOWS_PER_PEER 64 /* follows of one connection */
#define BELL_FDS 2              /* a bell's descriptors: fd_rw, fd_ro */
/* followed names one uid may pay for, so that one uid cannot take every
 * bell of the daemon (as rings: TD__MAX_RINGS / 4 per uid by default;
 * root and the daemon's uid, the operators, have no such limit) */
#define MAX_BELLS_PER_UID (MAX_BELLS / 4)
/* a name's rows one uid may hold (root and the daemon's uid: all), so
 * that one reader of a name cannot keep every other from following it */
#define MAX_ROWS_PER_UID (TD_FOLLOW_MAX_ROWS / 2)
#define CTL_MEMFD                                                             \
	(TD__MEMFD_SEALABLE | TD__MEMFD_RESERVE | TD__MEMFD_SEAL_SIZE)

struct follower {
	struct td__peer *peer; /* NULL: the row is free */
	uint64_t id;
	int row_fd;
	int wake_fd; /* FOLLOW_WAKE's eventfd, -1 none */
	struct td_follow_row *row;
	/* the retired version this row holds, referenced, or NULL */
	struct td__version *held;
	uint64_t pinned; /* held's bytes counted as the peer uid's pinned */
	/* the bell's current version's bytes counted as the peer uid's
	 * pinned (td__follow_pin): the row may take it with no message */
	uint64_t cur_pin;
	/*
	 * A GET lease of the peer uid's on the version this row charges
	 * for (the current one by cur_pin, or held by pinned), which then
	 * counts nothing of its own (td__follow_cover); NULL none. When
	 * the row's charge of that version ends, the lease takes it on.
	 */
	struct td__lease *cover;
	bool spare; /* TD_WIRE_FOLLOW_SPARE: td__follow_admit */
	/* its FOLLOW's reply named the fds by number (no
	 * TD_WIRE_REQ_SCM): the peer pulls them; peer->requests then */
	bool by_number;
	uint64_t req_mark;
};

/*
 * A staged publish (docs/fastpath.md, "A followed publish without the
 * daemon's hop"): owner's lent loan alloc_id, written into entry `entry`
 * as version sv->number, which owner fires through the trigger page.
 */
struct stage {
	struct td__peer *owner; /* NULL: nothing staged */
	uint64_t alloc_id;
	struct td__version *sv; /* what the commit makes current */
	uint32_t entry;
	uint32_t slot; /* its word in the owner's trigger page */
};

struct bell {
	struct td__list link;
	int fd_rw, fd_ro;
	struct stage st;
	/* the producer whose trigger page the bell names (stage_gen), NULL
	 * none: followers get that page, read-only (STAGE_PAGE) */
	struct td__peer *trig_owner;
	struct td_follow_hdr *hdr;
	uint64_t cur; /* the version `latest` names, 0 none */
	const struct td__version *cur_v;
	uint64_t entry_of[TD_FOLLOW_ENTRIES]; /* version in each entry */
	unsigned followers;
	/* whose fds count holds the bell's descriptors: a follower's */
	uid_t uid;
	/* made by a spare follow: counts in the spare half of the bells
	 * (td__follow_admit) for as long as it lives */
	bool spare;
	/*
	 * Which rows are in use: bit i set while rows[i].peer is, and of
	 * those, which hold a retired version (rows[i].held). Kept exact as
	 * rows are taken and given back (td__follow, follower_end; hold_take,
	 * hold_drop), so a commit visits the rows in use, not all 64
	 * (td__row_next).
	 */
	uint64_t used, holding;
	struct follower rows[TD_FOLLOW_MAX_ROWS];
	/* every connection that followed the name on this bell: a reload
	 * that takes read from one ends them all (bell_end) */
	struct td__shown shown;
	uint16_t name_len;
	char name[TD_WIRE_MAX_NAME + 1];
};

_Static_assert(TD_FOLLOW_MAX_ROWS <= 64, "a bell's row masks are 64 bits");
/* every row of a bell, as a mask */
#define ROWS_ALL                                                              \
	(TD_FOLLOW_MAX_ROWS == 64 ? ~0ull : (1ull << TD_FOLLOW_MAX_ROWS) - 1)

/*
 * The lowest row of *mask, taken out of it, or -1 when it is empty; each
 * row it gives counts in the daemon's row visits (/metrics). A walk:
 * for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;). It walks
 * the mask it started with: a row given back meanwhile is still visited,
 * one taken meanwhile is not.
 */
static inline int td__row_next(uint64_t *mask)
{
	int i;

	if (!*mask)
		return -1;
	i = __builtin_ctzll(*mask);
	*mask &= *mask - 1;
	td__d->stats.row_visits++;
	return i;
}

extern struct td__list td__bells;
extern unsigned td__bell_count;

struct bell *td__bell_named(const char *name, size_t len);

/*
 * The bytes a hold of v counts as uid's pinned, by GET's rule
 * (daemon/lease.c, docs/policy.md §4): another uid's version, or one
 * that left its publisher's quota (or a restored one), its acct.
 */
static inline uint64_t td__follow_pin(const struct td__version *v, uid_t uid)
{
	return v && (v->uid != uid || v->unowned) ? v->acct : 0;
}

/* Whether f's charge counts v now (b's current version, or its hold). */
static inline bool td__row_charges(const struct bell *b,
				   const struct follower *f,
				   const struct td__version *v)
{
	return (b->cur_v == v && f->cur_pin) || (f->held == v && f->pinned);
}

/*
 * f starts to charge pin bytes of v (a FOLLOW's current version, or a
 * row whose covered lease went): a GET lease of its uid on v that no row
 * covers counts nothing of its own from now on, covered by f (the other
 * order of td__follow_cover_find). Nothing when f covers one already.
 */
void td__follow_cover_lease(struct follower *f, const struct td__version *v,
			    uint64_t pin);

/* f's charge of its covered lease's version ended: the lease counts
 * its bytes, or another row of the uid covers it on. */
void td__follow_cover_end(struct follower *f);

/* Room for one more follow of p (spare: TD_WIRE_FOLLOW_SPARE): 0, or
 * the refusal sent and -errno. */
int td__follow_admit(struct td__peer *p, const struct td_wire_hdr *h,
		     struct td_wire_str name, bool spare);
/* p's follows, every name's */
unsigned td__peer_follows(const struct td__peer *p);

/*
 * follow-linger.c: b's follows are about to end (bell_end): a follower
 * whose peer may not have pulled its fds yet (by number, no request
 * since its FOLLOW) keeps them open, its row_fd and b's fd_ro taken
 * (then -1), until td__follow_linger_end(its peer).
 */
void td__follow_linger(struct bell *b);

#endif
