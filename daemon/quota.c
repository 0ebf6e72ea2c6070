/* SPDX-License-Identifier: MIT */
/*
 * What may be held and who may touch what: bytes charged per uid and in
 * total against --max-bytes and the uid quotas (policy.c), and the
 * access policy gate every request passes. Eviction, which makes room
 * under these limits, is store.c's: it retires versions.
 */
#include "store.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- accounting ---- */

static struct td__uidacct *uid_find(const struct td__store *s, uid_t uid)
{
	for (size_t i = 0; i < s->nuids; i++)
		if (s->uids[i].uid == uid)
			return &s->uids[i];
	return NULL;
}

uint64_t td__acct_bytes(const struct td__store *s, uid_t uid)
{
	const struct td__uidacct *u = uid_find(s, uid);

	return u ? u->bytes : 0;
}

/* Charge n bytes to uid and the total. -ENOMEM leaves both unchanged. */
int td__acct_add(struct td__store *s, uid_t uid, uint64_t n)
{
	struct td__uidacct *u = uid_find(s, uid);

	if (n == 0)
		return 0;
	if (!u) {
		if (s->nuids == s->uids_cap) {
			size_t cap = s->uids_cap ? s->uids_cap * 2 : 16;
			struct td__uidacct *a =
				realloc(s->uids, cap * sizeof(*a));

			if (!a)
				return -ENOMEM;
			s->uids = a;
			s->uids_cap = cap;
		}
		u = &s->uids[s->nuids++];
		*u = (struct td__uidacct){uid, 0, 0, 0};
	}
	u->bytes += n;
	s->total += n;
	return 0;
}

void td__acct_sub(struct td__store *s, uid_t uid, uint64_t n)
{
	s->total -= n;
	td__acct_sub_uid(s, uid, n);
}

void td__acct_sub_uid(struct td__store *s, uid_t uid, uint64_t n)
{
	struct td__uidacct *u = uid_find(s, uid);

	if (!u)
		return;
	/* clamped: a version charged to the total only (restore) */
	u->bytes -= n < u->bytes ? n : u->bytes;
	if (u->bytes == 0)
		*u = s->uids[--s->nuids];
}
void td__acct_pin(struct td__store *s, struct td__version *v, bool on)
{
	struct td__uidacct *u;

	if (on == v->pin_counted || !(v->flags & TD_WIRE_PUB_PIN) ||
	    (on && v->unowned))
		return;
	/* counted only where it is charged (its bytes are in u's, so
	 * u stays while it is counted) */
	u = uid_find(s, v->uid);
	if (!u)
		return;
	if (on)
		u->pinned += v->acct;
	else
		u->pinned -= v->acct < u->pinned ? v->acct : u->pinned;
	v->pin_counted = on;
}

uint64_t td__acct_pinned(const struct td__store *s, uid_t uid)
{
	const struct td__uidacct *u = uid_find(s, uid);

	return u ? u->pinned : 0;
}

uint64_t td__acct_cap(const struct td__store *s, uid_t uid)
{
	uint64_t max = s->d->opts.max_bytes;

	return td__uid_is_admin(uid) ? max : max - td__byte_reserve(max);
}

/* Would n more bytes charged to uid fit its part of --max-bytes (the
 * reserve kept from tenants) and uid's quota? */
bool td__acct_fits(const struct td__store *s, uid_t uid, uint64_t n)
{
	uint64_t max = td__acct_cap(s, uid), t = s->total;
	uint64_t qmax = td__tenant_quota(uid);
	uint64_t mine = td__acct_bytes(s, uid);

	return !(max && (t + n < t || t + n > max)) &&
	       !(qmax && (mine + n < mine || mine + n > qmax));
}
/*
 * Fairness when --max-bytes is short (docs/policy.md §4): an allocation
 * by uid evicts its own versions, or those of uids holding more than a
 * fair share, max_bytes / the number of uids holding bytes.
 */
bool td__acct_evictable(const struct td__store *s, uid_t owner, uid_t uid,
			bool over_uid, uint64_t fair)
{
	const struct td__uidacct *u;

	if (owner == uid)
		return true;
	if (over_uid)
		return false;
	u = uid_find(s, owner);
	return u && u->bytes > u->picked + fair;
}

void td__acct_pick(struct td__store *s, uid_t owner, uint64_t n)
{
	struct td__uidacct *u = uid_find(s, owner);

	if (u)
		u->picked += n;
}

void td__acct_unpick_all(struct td__store *s)
{
	for (size_t i = 0; i < s->nuids; i++)
		s->uids[i].picked = 0;
}

uint64_t td__acct_fair_share(const struct td__store *s, uid_t uid)
{
	return s->d->opts.max_bytes /
	       (uint64_t)(s->nuids + (uid_find(s, uid) ? 0 : 1));
}

bool td__acct_over_max(const struct td__store *s, uint64_t add,
		       uint64_t freed)
{
	uint64_t max = s->d->opts.max_bytes, t = s->total - freed;

	return max && (t + add < t || t + add > max);
}

/* ---- access policy ---- */

/*
 * May p do perm on name? Without --policy everyone may; the daemon's own
 * uid (its operator) always may.
 */
bool td__access_may(const struct td__peer *p, unsigned perm, const char *name,
		size_t len)
{
	const struct td__policy *pol = td__d->policy;
	struct td__cred c = {p->uid, p->gid, p->groups, p->ngroups};

	if (!pol || p->uid == geteuid())
		return true;
	return td__policy_allows(pol, &c, perm, name, len);
}

size_t td__access_skip(const struct td__peer *p, unsigned perm,
		       const struct td__policy_names *nm, size_t i)
{
	struct td__cred c = {p->uid, p->gid, p->groups, p->ngroups};

	if (!td__d->policy || p->uid == geteuid())
		return i;
	return td__policy_skip(td__d->policy, &c, perm, nm, i);
}

bool td__access_reads_all(const struct td__peer *p)
{
	return !td__d->policy || p->uid == geteuid();
}

/*
 * The answer scans every rule (td__policy_covers), and comes again at
 * every GET of w's recyclable buffers while it is yes: it is kept per
 * reader, for its last writer and the policy of this reload (a 220 KB
 * policy of 1022 long prefixes took a GET's CPU in the daemon from 25
 * to 270 us, every GET).
 */
bool td__access_reads_writes_of(struct td__peer *p, const struct td__peer *w)
{
	struct td__cred rc = {p->uid, p->gid, p->groups, p->ngroups};
	struct td__cred wc = {w->uid, w->gid, w->groups, w->ngroups};
	uint64_t reloads = td__d->stats.policy_reloads;

	if (td__access_reads_all(p))
		return true;
	if (p->cov_writer == w->serial && p->cov_reloads == reloads)
		return p->cov_ok;
	p->cov_ok = td__policy_covers(td__d->policy, &rc, &wc,
				      w->uid == geteuid());
	p->cov_writer = w->serial;
	p->cov_reloads = reloads;
	td__log(TD_LOG_DEBUG, "policy: uid %u %s read every name uid %u may "
		"write (rules scanned)", (unsigned)p->uid,
		p->cov_ok ? "may" : "may not", (unsigned)w->uid);
	return p->cov_ok;
}

bool td__access_any(struct td__peer *p, unsigned perm)
{
	const struct td__policy *pol = td__d->policy;
	struct td__cred c = {p->uid, p->gid, p->groups, p->ngroups};
	uint64_t gen = td__d->stats.policy_reloads + 1;
	uint8_t bit = (uint8_t)(1u << perm);

	if (!pol || p->uid == geteuid())
		return true;
	/* every rule is looked at: once per connection, perm and policy
	 * (a peer's credentials are those it connected with) */
	if (p->any_gen != gen) {
		p->any_gen = gen;
		p->any_known = 0;
	}
	if (!(p->any_known & bit)) {
		p->any_known |= bit;
		if (td__policy_any(pol, &c, perm))
			p->any_yes |= bit;
		else
			p->any_yes &= (uint8_t)~bit;
	}
	return p->any_yes & bit;
}

/* The -EACCES reply; false, so that callers can write `if (!check) return`. */
bool td__access_check(struct td__peer *p, const struct td_wire_hdr *h,
		    unsigned perm, struct td_wire_str name)
{
	if (td__access_may(p, perm, name.ptr, name.len))
		return true;
	td__peer_error(p, h->opcode, h->request_id, -EACCES,
		       "uid %u may not %s \"%.*s\" (policy %s)",
		       (unsigned)p->uid,
		       perm == TD__PERM_WRITE ? "write" : "read",
		       (int)name.len, name.ptr, td__d->opts.policy_path);
	return false;
}
