/* SPDX-License-Identifier: MIT */
/*
 * Per-uid limits on what a client can make the daemon hold (issue 18,
 * docs/policy.md §5): connections, descriptors, leases, bytes pinned by
 * leases on other uids' versions, watches, parked GETs, rings and queued
 * reply bytes; and the daemon's reserves of descriptors, ring slots and
 * bytes (td__byte_reserve, charged in quota.c), kept for root and its
 * own uid so that an operator can still list, put and get, and the
 * offenders' connections can still be closed, whatever the tenants hold.
 *
 * Each uid's counts live in a small table (linear search: uids are few,
 * and the table keeps its capacity, so a warm handoff allocates nothing).
 * A uid's limits are resolved when its entry is made, and again for
 * every entry at a policy reload (a connected uid holds an entry as
 * long as it is connected): the policy's `limit uid=N KEY V` line;
 * else, for every uid but root and the daemon's own (which have none),
 * `--uid-limit KEY=V` or the built-in default.
 */
#include "daemon.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* What each kind counts, for the refusal. */
static const char *const what[TD__LIM_COUNT] = {
	[TD__LIM_CONNS] = "connections",
	[TD__LIM_FDS] = "descriptors (connections, planes, fences, rings, "
			"follows, queued replies)",
	[TD__LIM_LEASES] = "leases",
	[TD__LIM_PINNED] = "bytes of other uids' versions and rings it holds",
	[TD__LIM_WATCHES] = "watches",
	/* a GET_MANY parks with TD_WIRE_MANY_NEWER (lease.c, park) */
	[TD__LIM_WAITERS] = "parked GETs, GET_MANYs waiting for a newer "
			    "version and RING_SUBSCRIBEs",
	[TD__LIM_RINGS] = "rings",
	[TD__LIM_QUEUED] = "bytes of replies queued to it",
};

struct tenant {
	uid_t uid;
	uint64_t held[TD__LIM_COUNT];
	uint64_t limit[TD__LIM_COUNT]; /* 0 = none */
	uint64_t rx_turn; /* the loop turn rx_used counts */
	unsigned rx_used; /* datagrams read of its connections then */
	uint64_t rx_ns;   /* and the time their handling took */
	unsigned rx_waiting; /* its connections waiting for a turn (peer.c) */
};

static struct {
	struct td__daemon *d;
	struct tenant *t;
	size_t n, cap;
	uint64_t fds;   /* every tenant's, together */
	uint64_t dflt[TD__LIM_COUNT]; /* for uids that are not admins */
	uint64_t fd_limit, fd_base, fd_reserve;
	uint64_t rx_turn; /* loop turns (td__tenant_rx_turn) */
	size_t last; /* the tenant found last: most often the next too */
} T;

bool td__uid_is_admin(uid_t uid)
{
	return uid == 0 || uid == geteuid();
}

static uint64_t resolve(uid_t uid, enum td__lim k)
{
	const struct td__daemon *d = T.d;
	uint64_t v;

	if (td__policy_limit(d->policy, uid, k, &v))
		return v;
	/* T.dflt holds --uid-limit where given */
	return td__uid_is_admin(uid) ? 0 : T.dflt[k];
}

static struct tenant *find(uid_t uid)
{
	if (T.last < T.n && T.t[T.last].uid == uid)
		return &T.t[T.last];
	for (size_t i = 0; i < T.n; i++)
		if (T.t[i].uid == uid) {
			T.last = i;
			return &T.t[i];
		}
	return NULL;
}

static struct tenant *get(uid_t uid)
{
	struct tenant *t = find(uid);

	if (t)
		return t;
	if (T.n == T.cap) {
		size_t cap = T.cap ? T.cap * 2 : 16;
		struct tenant *a = realloc(T.t, cap * sizeof(*a));

		if (!a)
			return NULL;
		T.t = a;
		T.cap = cap;
	}
	t = &T.t[T.n++];
	memset(t, 0, sizeof(*t));
	t->uid = uid;
	for (int k = 0; k < TD__LIM_COUNT; k++)
		t->limit[k] = resolve(uid, (enum td__lim)k);
	return t;
}

bool td__tenant_rx_take(uid_t uid)
{
	/* $TENSORD_UID_TURN=0: no share, each connection read 32 datagrams
	 * a wake-up as before (the baseline of tensord-stallbench --flood) */
	static int off = -1;
	struct tenant *t;

	if (off < 0) {
		const char *env = getenv("TENSORD_UID_TURN");

		off = env && !strcmp(env, "0");
	}
	t = off ? NULL : find(uid);
	if (!t)
		return true;
	if (t->rx_turn != T.rx_turn) {
		t->rx_turn = T.rx_turn;
		t->rx_used = 0;
		t->rx_ns = 0;
	}
	/* a share of reads and of time: 64 slow requests took as long as
	 * their uid liked, another uid waiting behind them all */
	if (t->rx_used >= TD__RX_UID_TURN || t->rx_ns >= TD__RX_UID_TURN_NS)
		return false;
	t->rx_used++;
	return true;
}

void td__tenant_rx_spent(uid_t uid, uint64_t ns)
{
	struct tenant *t = find(uid);

	/* counted in the turn of its take (rx_take): a handling that ended
	 * a turn's requests counts for none after it */
	if (t && t->rx_turn == T.rx_turn)
		t->rx_ns += ns;
}

void td__tenant_rx_turn(void)
{
	T.rx_turn++;
}

void td__tenant_rx_wait(uid_t uid, int delta)
{
	struct tenant *t = find(uid);

	if (t)
		t->rx_waiting += (unsigned)delta;
}

bool td__tenant_rx_waits(uid_t uid)
{
	const struct tenant *t = find(uid);

	return t && t->rx_waiting;
}

void td__tenants_resolve(void)
{
	/* what is held above a lowered limit is not taken back: the next
	 * charge is refused (docs/policy.md, "Reloading") */
	for (size_t i = 0; i < T.n; i++)
		for (int k = 0; k < TD__LIM_COUNT; k++)
			T.t[i].limit[k] = resolve(T.t[i].uid, (enum td__lim)k);
}

uint64_t td__tenant_limit(uid_t uid, enum td__lim k)
{
	const struct tenant *t = find(uid);

	return t ? t->limit[k] : resolve(uid, k);
}

uint64_t td__tenant_held(uid_t uid, enum td__lim k)
{
	const struct tenant *t = find(uid);

	return t ? t->held[k] : 0;
}

size_t td__tenant_count(void)
{
	return T.n;
}

uid_t td__tenant_uid(size_t i)
{
	return T.t[i].uid;
}

int td__tenant_check(uid_t uid, enum td__lim k, uint64_t n, char *why,
		     size_t cap)
{
	const struct tenant *t = find(uid);
	uint64_t held = t ? t->held[k] : 0;
	uint64_t lim = t ? t->limit[k] : resolve(uid, k);

	if (lim && (held + n < held || held + n > lim)) {
		snprintf(why, cap,
			 "uid %u is at its %s limit: %llu %s held, %llu more "
			 "asked, limit %llu",
			 (unsigned)uid, td__lim_names[k],
			 (unsigned long long)held, what[k],
			 (unsigned long long)n, (unsigned long long)lim);
		return -EDQUOT;
	}
	if (k == TD__LIM_FDS && n) {
		/*
		 * The reserve: past fd_limit - fd_reserve only root and the
		 * daemon's own uid get descriptors, and they stop a few short
		 * of the limit, which accepting and answering need.
		 */
		bool admin = td__uid_is_admin(uid);
		uint64_t room = T.fd_limit - T.fd_base -
				(admin ? TD__FD_SLACK : T.fd_reserve);

		if (T.fds + n > room) {
			snprintf(why, cap,
				 "the daemon is down to its reserve of "
				 "descriptors (%llu of %llu in use by clients, "
				 "%llu kept for root and its own uid)",
				 (unsigned long long)T.fds,
				 (unsigned long long)(T.fd_limit - T.fd_base),
				 (unsigned long long)T.fd_reserve);
			return -EMFILE;
		}
	}
	return 0;
}

int td__tenant_add(uid_t uid, enum td__lim k, uint64_t n)
{
	struct tenant *t;

	if (!n)
		return 0;
	t = get(uid);
	if (!t)
		return -ENOMEM;
	t->held[k] += n;
	if (k == TD__LIM_FDS)
		T.fds += n;
	return 0;
}

int td__tenant_take(uid_t uid, enum td__lim k, uint64_t n, char *why,
		    size_t cap)
{
	int rc = td__tenant_check(uid, k, n, why, cap);

	if (rc == 0 && td__tenant_add(uid, k, n) < 0) {
		snprintf(why, cap, "out of memory");
		rc = -ENOMEM;
	}
	return rc;
}

void td__tenant_sub(uid_t uid, enum td__lim k, uint64_t n)
{
	struct tenant *t = find(uid);
	bool empty = true;

	if (!t || !n)
		return;
	n = n < t->held[k] ? n : t->held[k];
	t->held[k] -= n;
	if (k == TD__LIM_FDS)
		T.fds -= n;
	for (int i = 0; i < TD__LIM_COUNT; i++)
		empty = empty && t->held[i] == 0;
	/* the table keeps its capacity: no heap call on the next add */
	if (empty)
		*t = T.t[--T.n];
}

/*
 * The last TD__RINGS_RESERVE slots of the daemon's ring table are kept
 * for root and its own uid, as the last descriptors are: tenants at
 * their rings limits (four uids at the default of 64), or a reader that
 * keeps closed rings alive (they count against its pinned bytes, and
 * against no uid's rings), filled the table and left the operator no
 * ring. 0, or -ENOBUFS with why.
 */
int td__tenant_ring_room(uid_t uid, unsigned in_use, char *why, size_t cap)
{
	if (td__uid_is_admin(uid) ||
	    in_use < TD__MAX_RINGS - TD__RINGS_RESERVE)
		return 0;
	snprintf(why, cap,
		 "the daemon is down to its reserve of rings (%u of %d in "
		 "use, %d kept for root and its own uid)",
		 in_use, TD__MAX_RINGS, TD__RINGS_RESERVE);
	return -ENOBUFS;
}

/*
 * The first of uid's subscriptions to and slot leases on a ring another
 * uid created (foreign) counts it as one of uid's rings, and pin bytes
 * as pinned (the ring's; ring-hold.c counts the holds):
 * such holds keep a closed ring, and its slot in the daemon's table,
 * alive, so a reader that subscribed to each ring a producer made and
 * never left filled the table. 0, or -EDQUOT with why; nothing taken
 * then.
 */
int td__tenant_ring_hold(uid_t uid, bool foreign, uint64_t pin, char *why,
			 size_t cap)
{
	uint64_t n = foreign;
	int rc = td__tenant_check(uid, TD__LIM_RINGS, n, why, cap);

	if (rc == 0)
		rc = td__tenant_check(uid, TD__LIM_PINNED, pin, why, cap);
	if (rc < 0)
		return rc;
	if (td__tenant_add(uid, TD__LIM_RINGS, n) < 0 ||
	    td__tenant_add(uid, TD__LIM_PINNED, pin) < 0) {
		td__tenant_sub(uid, TD__LIM_RINGS, n);
		snprintf(why, cap, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

void td__tenant_ring_unhold(uid_t uid, bool foreign, uint64_t pin)
{
	td__tenant_sub(uid, TD__LIM_RINGS, foreign);
	td__tenant_sub(uid, TD__LIM_PINNED, pin);
}

int td__tenant_restore_check(uint64_t n, char *why, size_t cap)
{
	uint64_t room = T.fd_limit - T.fd_base - T.fd_reserve;

	if (T.fds + n < T.fds || T.fds + n > room) {
		snprintf(why, cap,
			 "%llu more descriptors would eat into the reserve "
			 "kept for root and its own uid (%llu of %llu in use, "
			 "%llu kept; raise the limit: LimitNOFILE=)",
			 (unsigned long long)n, (unsigned long long)T.fds,
			 (unsigned long long)(T.fd_limit - T.fd_base),
			 (unsigned long long)T.fd_reserve);
		return -EMFILE;
	}
	return 0;
}

uint64_t td__tenant_fds(void)
{
	return T.fds;
}

int td__tenants_init(struct td__daemon *d, unsigned fds_open)
{
	struct rlimit rl;
	uint64_t budget, http;

	T.d = d;
	T.fd_limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
				     rl.rlim_cur != RLIM_INFINITY
			     ? (uint64_t)rl.rlim_cur
			     : 1024;
	/*
	 * The HTTP store's descriptors are the daemon's own, counted for
	 * no uid: a socket per connection and, while a chunk goes by
	 * sendfile(), a duplicate of its plane; its listening socket and
	 * libmicrohttpd's epoll fd. Unauthenticated readers took them out
	 * of what clients may hold and out of the reserve: at a limit of
	 * 80, 63 idle HTTP connections left root no descriptor to accept
	 * its socket connection with.
	 */
	http = d->opts.http_addr
		       ? 2 * (uint64_t)d->opts.http_max_connections + 2
		       : 0;
	if (http && fds_open + http + 2 * TD__FD_SLACK > T.fd_limit) {
		td__log(TD_LOG_ERROR,
			"--http-max-connections %u needs %llu descriptors; "
			"RLIMIT_NOFILE %llu leaves %llu: lower it, or raise "
			"the limit (LimitNOFILE=)",
			d->opts.http_max_connections, (unsigned long long)http,
			(unsigned long long)T.fd_limit,
			(unsigned long long)(T.fd_limit > fds_open +
							      2 * TD__FD_SLACK
						     ? T.fd_limit - fds_open -
							       2 * TD__FD_SLACK
						     : 0));
		return -EMFILE;
	}
	T.fd_base = fds_open + http;
	if (T.fd_base + 2 * TD__FD_SLACK > T.fd_limit)
		T.fd_base = T.fd_limit > 2 * TD__FD_SLACK
				    ? T.fd_limit - 2 * TD__FD_SLACK
				    : 0;
	/* 1/16 of the limit, at least 64 and at most 4096 */
	T.fd_reserve = T.fd_limit / 16;
	T.fd_reserve = T.fd_reserve < 64     ? 64
		       : T.fd_reserve > 4096 ? 4096
					     : T.fd_reserve;
	if (T.fd_base + T.fd_reserve + TD__FD_SLACK > T.fd_limit)
		T.fd_reserve = T.fd_limit - T.fd_base - TD__FD_SLACK;
	budget = T.fd_limit - T.fd_base - T.fd_reserve;
	/*
	 * Defaults for uids other than root and the daemon's own: a quarter
	 * of what clients may hold, so that one uid never takes it all;
	 * connections at 1/32 of the descriptors (each holds 2).
	 */
	T.dflt[TD__LIM_FDS] = budget / 4 ? budget / 4 : 1;
	T.dflt[TD__LIM_CONNS] = budget / 32 < 8      ? 8
				: budget / 32 > 1024 ? 1024
						     : budget / 32;
	T.dflt[TD__LIM_LEASES] = 16384;
	T.dflt[TD__LIM_PINNED] = d->opts.max_bytes / 4;
	T.dflt[TD__LIM_WATCHES] = 4096;
	T.dflt[TD__LIM_WAITERS] = 4096;
	T.dflt[TD__LIM_RINGS] = TD__MAX_RINGS / 4;
	T.dflt[TD__LIM_QUEUED] = 64u << 20;
	for (int k = 0; k < TD__LIM_COUNT; k++)
		if (d->opts.uid_limit_set & (1u << k))
			T.dflt[k] = d->opts.uid_limit[k];
	td__log(TD_LOG_INFO,
		"descriptors: limit %llu, %llu kept for root and uid %u; "
		"bytes: --max-bytes %llu, %llu kept for them; "
		"each other uid without a limit line: conns %llu, fds %llu, "
		"leases %llu, pinned %llu, bytes %llu",
		(unsigned long long)T.fd_limit,
		(unsigned long long)T.fd_reserve, (unsigned)geteuid(),
		(unsigned long long)d->opts.max_bytes,
		(unsigned long long)td__byte_reserve(d->opts.max_bytes),
		(unsigned long long)T.dflt[TD__LIM_CONNS],
		(unsigned long long)T.dflt[TD__LIM_FDS],
		(unsigned long long)T.dflt[TD__LIM_LEASES],
		(unsigned long long)T.dflt[TD__LIM_PINNED],
		(unsigned long long)(d->opts.uid_max_bytes_set
					     ? d->opts.uid_max_bytes
					     : d->opts.max_bytes / 2));
	return 0;
}

uint64_t td__tenant_quota(uid_t uid)
{
	const struct td__daemon *d = T.d;

	if (!d)
		return 0;
	if (d->opts.uid_max_bytes_set)
		return td__policy_quota(d->policy, uid, d->opts.uid_max_bytes);
	/* without --uid-max-bytes: half the cap for uids but the admins */
	return td__policy_quota(d->policy, uid,
				td__uid_is_admin(uid) ? 0
						      : d->opts.max_bytes / 2);
}

void td__tenants_fini(void)
{
	free(T.t);
	T.t = NULL;
	T.n = T.cap = 0;
	T.fds = 0;
}
