/* SPDX-License-Identifier: MIT */
/*
 * The policy's compiled matcher (daemon/policy.c, docs/policy.md §3
 * "Matching"): td__policy_allows walks a trie of the rules' prefixes, so a
 * LIST of many names does not cost names × rules. Its answers must be
 * exactly those of the linear scan it replaced (kept below as the
 * reference: any rule with every bit of the permission, a WHO that
 * matches the client and a prefix of the name), over random policies,
 * clients, permissions and names; and the work per name must not grow
 * with the number of rules (a step counter compiled into this test's
 * copy of policy.c only, TD__POLICY_STEPS). No timing is asserted.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "xorshift.h"

/* policy.c logs through these; the tests have no daemon loop */
int td__log_level = TD_LOG_ERROR;
struct td__daemon *td__d;
extern unsigned long long td__policy_steps;

void td__log(int level, const char *fmt, ...)
{
	(void)level;
	(void)fmt;
}

/* ---- the reference: the linear evaluator the trie replaced (a rule's
 * WHO matched as the daemon matches it) ---- */

static bool ref_allows(const struct td__policy *pol,
		       const struct td__cred *c, unsigned perm,
		       const char *name, size_t len)
{
	for (unsigned i = 0; i < pol->nrules; i++) {
		const struct td__rule *r = &pol->rules[i];

		if ((r->perm & perm) != perm || !td__policy_who(r, c))
			continue;
		if (len >= r->len && memcmp(name, r->prefix, r->len) == 0)
			return true;
	}
	return false;
}

/* ---- random policies ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static unsigned rnd(unsigned n)
{
	return tu_xorshift(&rng, n);
}

/* A valid name prefix of 1..max bytes from a small alphabet, so that
 * prefixes overlap and nest: no leading '/', no "//" (no '.' at all). */
static void rnd_prefix(char *out, unsigned max)
{
	static const char abc[] = "ab1/";
	unsigned len = 1 + rnd(max), i;

	for (i = 0; i < len; i++) {
		char ch = abc[rnd(4)];

		if (ch == '/' && (i == 0 || out[i - 1] == '/'))
			ch = 'a';
		out[i] = ch;
	}
	out[i] = 0;
}

/* A policy text of n allow lines (and a quota, to show they mix). */
static char *rnd_policy(unsigned n, unsigned ids)
{
	static const char *const perms[] = {"r", "w", "rw", "dmabuf"};
	size_t cap = (size_t)n * 64 + 64, off = 0;
	char *buf = malloc(cap);

	cr_assert(buf);
	off += (size_t)snprintf(buf + off, cap - off, "quota uid=1 1M\n");
	for (unsigned i = 0; i < n; i++) {
		char who[32], pfx[16];
		unsigned k = rnd(8);
		const char *perm = perms[rnd(4)];

		if (k < 3)
			snprintf(who, sizeof(who), "uid=%u", rnd(ids));
		else if (k < 6)
			snprintf(who, sizeof(who), "gid=%u", rnd(ids));
		else if (k == 6)
			snprintf(who, sizeof(who), "any");
		else {
			snprintf(who, sizeof(who), "http");
			perm = "r";
		}
		if (rnd(16) == 0)
			strcpy(pfx, "*");
		else
			rnd_prefix(pfx, 6);
		off += (size_t)snprintf(buf + off, cap - off,
					"allow %s %s %s\n", who, perm, pfx);
	}
	return buf;
}

static void parse_ok(const char *text, struct td__policy *pol)
{
	unsigned line;
	const char *why = NULL;
	int rc = td__policy_parse(text, strlen(text), pol, &line, &why);

	cr_assert_eq(rc, 0, "line %u: %s", line, why ? why : "");
}

/* Every permission set for one client and name against the reference. */
static unsigned check_name(const struct td__policy *pol,
			   const struct td__cred *c, const char *name)
{
	size_t len = strlen(name);

	for (unsigned perm = 0; perm < 9; perm++) {
		bool want = ref_allows(pol, c, perm, name, len);
		bool got = td__policy_allows(pol, c, perm, name, len);

		cr_assert_eq(got, want,
			     "uid %u gid %u (%u groups) perm %u \"%s\": "
			     "trie %d, linear %d (%u rules)",
			     c ? c->uid : 0, c ? c->gid : 0,
			     c ? c->ngroups : 0, perm, name, got, want,
			     pol->nrules);
	}
	return 9;
}

/*
 * A random client of uid, gid and up to 4 groups among ids into *c, its
 * groups in groups; NULL (an HTTP reader) where http, drawn all the
 * same so the draws that follow do not change.
 */
static const struct td__cred *rnd_cred(struct td__cred *c, gid_t *groups,
				       unsigned ids, bool http)
{
	*c = (struct td__cred){rnd(ids), rnd(ids), groups, rnd(5)};
	for (unsigned g = 0; g < c->ngroups; g++)
		groups[g] = rnd(ids);
	return http ? NULL : c;
}

/* Random clients and names (HTTP readers too) against the reference. */
static unsigned check_policy(const struct td__policy *pol, unsigned ids)
{
	unsigned checked = 0;

	for (unsigned ci = 0; ci < 12; ci++) {
		gid_t groups[4];
		struct td__cred c;
		const struct td__cred *cp = rnd_cred(&c, groups, ids, ci == 0);
		for (unsigned k = 0; k < 40; k++) {
			char name[16];
			unsigned r = pol->nrules ? rnd(pol->nrules) : 0;

			if (k == 0)
				name[0] = 0; /* "" */
			else if (k < 4 && pol->nrules)
				strcpy(name, pol->rules[r].prefix);
			else
				rnd_prefix(name, 9);
			checked += check_name(pol, cp, name);
		}
	}
	return checked;
}

/*
 * Round round of rounds of random policies: *n rules (up to 40; up to
 * the cap in the last 20 rounds) among *ids ids, few so that rules of
 * one client pile up on one prefix, parsed into pol. Its text, to be
 * freed after td__policy_fini.
 */
static char *rnd_round_policy(unsigned round, unsigned rounds,
			      struct td__policy *pol, unsigned *n,
			      unsigned *ids)
{
	char *text;

	*n = round < rounds - 20 ? rnd(40) : 1 + rnd(TD__POLICY_MAX_RULES);
	*ids = 2 + rnd(6);
	text = rnd_policy(*n, *ids);
	parse_ok(text, pol);
	return text;
}

Test(policy, the_trie_answers_exactly_as_the_linear_scan_did)
{
	unsigned checked = 0, grants = 0;

	for (unsigned round = 0; round < 400; round++) {
		unsigned n, ids;
		struct td__policy pol;
		char *text = rnd_round_policy(round, 400, &pol, &n, &ids);

		cr_assert_eq(pol.nrules, n);
		grants += pol.ngrants;
		checked += check_policy(&pol, ids);
		td__policy_fini(&pol);
		free(text);
	}
	cr_assert_gt(grants, 0);
	cr_assert_gt(checked, 400u * 12 * 40 * 9 - 1);
}

Test(policy, separate_r_and_w_lines_do_not_make_one_rw_rule)
{
	struct td__policy pol;
	struct td__cred u = {5, 5, NULL, 0};

	/* the reference grants READ|WRITE only through one rule with both */
	parse_ok("allow uid=5 r cam/\nallow uid=5 w cam/\n"
		 "allow uid=5 rw both/\nallow any r x\nallow any w x\n",
		 &pol);
	cr_assert(td__policy_allows(&pol, &u, TD__PERM_READ, "cam/0", 5));
	cr_assert(td__policy_allows(&pol, &u, TD__PERM_WRITE, "cam/0", 5));
	cr_assert_not(td__policy_allows(&pol, &u,
					TD__PERM_READ | TD__PERM_WRITE,
					"cam/0", 5));
	cr_assert(td__policy_allows(&pol, &u, TD__PERM_READ | TD__PERM_WRITE,
				    "both/0", 6));
	cr_assert_not(td__policy_allows(&pol, &u,
					TD__PERM_READ | TD__PERM_WRITE, "x1",
					2));
	cr_assert_not(td__policy_allows(&pol, &u, TD__PERM_DMABUF, "both/0",
					6));
	td__policy_fini(&pol);
}

/* Steps to answer, for every name of a fixed set under n rules of the
 * same random shape, a permission no rule grants (r, w and dmabuf at
 * once): the walk goes as deep as the trie lets it for every name. */
static unsigned long long steps_for(unsigned n, char (*names)[16],
				    unsigned nnames)
{
	char *text;
	struct td__policy pol;
	struct td__cred c = {7, 7, NULL, 0};
	unsigned long long before;

	rng = 0x1234567u; /* the same rule mix for every n */
	text = rnd_policy(n, 64);
	parse_ok(text, &pol);
	free(text);
	before = td__policy_steps;
	for (unsigned i = 0; i < nnames; i++)
		cr_assert_not(td__policy_allows(
			&pol, &c,
			TD__PERM_READ | TD__PERM_WRITE | TD__PERM_DMABUF,
			names[i], strlen(names[i])));
	before = td__policy_steps - before;
	td__policy_fini(&pol);
	return before;
}

Test(policy, the_work_per_name_does_not_grow_with_the_rules)
{
	enum { NAMES = 2000 };
	static char names[NAMES][16];
	unsigned long long few, many;

	rng = 0xabcdefu;
	for (unsigned i = 0; i < NAMES; i++)
		rnd_prefix(names[i], 12);
	few = steps_for(64, names, NAMES);
	many = steps_for(TD__POLICY_MAX_RULES, names, NAMES);
	/* the linear scan looked at 64 and 1024 rules a name: 16x; the trie
	 * looks at the nodes on the name's way (deeper ones where more
	 * rules fill it in, up to the name's length) and binary-searches
	 * their grants (log of the rules at one prefix): 2.3x here */
	cr_assert_gt(few, 0);
	cr_assert_lt(many, 4 * few, "64 rules: %llu steps, 1024: %llu", few,
		     many);
	cr_assert_lt(many * 8, (unsigned long long)NAMES * 1024);
	/* and never more than a name's bytes allow: each byte is one node
	 * and at most 4 siblings here, each node one check and at most
	 * 2 binary searches of at most 11 probes (no groups) */
	cr_assert_leq(many, (unsigned long long)NAMES * (13 * 5 + 13 * 23));
}

/* ---- the next readable name (LIST's jump over refused names) ---- */

static int ref_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int r = memcmp(a, b, alen < blen ? alen : blen);

	if (r)
		return r;
	return alen < blen ? -1 : alen > blen;
}

/* The reference: name itself, else the smallest granting prefix above
 * it (the smallest readable string, as every readable one has such a
 * prefix at or below it, and one below it that is not its prefix ends
 * below it too). */
static int ref_next(const struct td__policy *pol, const struct td__cred *c,
		    unsigned perm, const char *name, size_t len,
		    const char **out, size_t *out_len)
{
	const struct td__rule *best = NULL;

	if (ref_allows(pol, c, perm, name, len))
		return 0;
	for (unsigned i = 0; i < pol->nrules; i++) {
		const struct td__rule *r = &pol->rules[i];

		if ((r->perm & perm) != perm || !td__policy_who(r, c))
			continue;
		if (ref_cmp(r->prefix, r->len, name, len) > 0 &&
		    (!best ||
		     ref_cmp(r->prefix, r->len, best->prefix, best->len) < 0))
			best = r;
	}
	if (!best)
		return -ENOENT;
	*out = best->prefix;
	*out_len = best->len;
	return 1;
}

Test(policy, the_next_readable_name_is_the_smallest_granted_one_above)
{
	unsigned checked = 0, jumps = 0, ends = 0;

	rng = 0x5eed5u;
	for (unsigned round = 0; round < 300; round++) {
		unsigned n, ids;
		struct td__policy pol;
		char *text = rnd_round_policy(round, 300, &pol, &n, &ids);

		for (unsigned ci = 0; ci < 8; ci++) {
			gid_t groups[4];
			struct td__cred c;
			const struct td__cred *cp =
				rnd_cred(&c, groups, ids, ci == 0);
			for (unsigned k = 0; k < 30; k++) {
				char name[16], out[TD_WIRE_MAX_NAME];
				const char *want_p = NULL;
				size_t len, got_len = 0, want_len = 0;
				unsigned perm = rnd(8);
				int got, want;

				if (k == 0)
					name[0] = 0;
				else
					rnd_prefix(name, 9);
				len = strlen(name);
				want = ref_next(&pol, cp, perm, name, len,
						&want_p, &want_len);
				got = td__policy_next(&pol, cp, perm, name, len,
						      out, &got_len);
				cr_assert_eq(got, want, "\"%s\" perm %u: %d, "
					     "want %d", name, perm, got, want);
				if (want == 1) {
					cr_assert_eq(got_len, want_len);
					cr_assert_eq(memcmp(out, want_p,
							    want_len), 0,
						     "\"%s\": \"%.*s\", want "
						     "\"%.*s\"", name,
						     (int)got_len, out,
						     (int)want_len, want_p);
					jumps++;
				}
				ends += want < 0;
				checked++;
			}
		}
		td__policy_fini(&pol);
		free(text);
	}
	/* every kind of answer was seen, many times */
	cr_assert_gt(jumps, 1000);
	cr_assert_gt(ends, 1000);
	cr_assert_gt(checked - jumps - ends, 1000);
}

/* A sorted store of names for td__policy_skip, its reads counted. */
struct names {
	char (*v)[16];
	size_t n;
	unsigned long long reads;
};

static const char *names_at(const void *ctx, size_t i, size_t *len)
{
	struct names *nm = (struct names *)ctx;

	nm->reads++;
	*len = strlen(nm->v[i]);
	return nm->v[i];
}

static size_t names_find(const void *ctx, const char *key, size_t len)
{
	struct names *nm = (struct names *)ctx;
	size_t lo = 0, hi = nm->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		nm->reads++;
		if (ref_cmp(nm->v[mid], strlen(nm->v[mid]), key, len) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * 40 tenants t00/..t39/, uid 7 reading 3 of them (and gid 9 one more);
 * `per` names under each other tenant, 10 under each readable one.
 * Lists it as LIST does, 4 names a page; the names listed must be the
 * readable ones, in order.
 */
static unsigned long long list_steps(unsigned per, unsigned *pages)
{
	static const unsigned mine[] = {7, 23, 24, 39};
	struct td__policy pol;
	gid_t groups[1] = {9};
	struct td__cred c = {7, 100, groups, 1};
	struct names nm = {0};
	char text[4096];
	size_t off = 0, want = 0, got = 0, n = 0;
	unsigned long long before;

	for (unsigned t = 0; t < 40; t++) {
		bool rd = t == 7 || t == 23 || t == 39;

		off += (size_t)snprintf(text + off, sizeof(text) - off,
					"allow %s r t%02u/\n",
					t == 24 ? "gid=9"
					: rd	? "uid=7"
						: "uid=8",
					t);
	}
	parse_ok(text, &pol);
	nm.v = calloc((size_t)40 * per, sizeof(*nm.v));
	cr_assert(nm.v);
	for (unsigned t = 0; t < 40; t++) {
		bool rd = false;

		for (unsigned k = 0; k < 4; k++)
			rd |= mine[k] == t;
		for (unsigned k = 0; k < (rd ? 10 : per); k++)
			snprintf(nm.v[n++], 16, "t%02u/%06u", t, k);
		/* and names outside every tenant, between them */
		snprintf(nm.v[n++], 16, "t%02u~", t);
	}
	nm.n = n;
	*pages = 0;
	before = td__policy_steps;
	{
		const struct td__policy_names pn = {names_at, names_find, &nm,
						    nm.n};
		size_t i = 0;

		for (;;) {
			unsigned page = 0;

			(*pages)++;
			while (page < 4 &&
			       (i = td__policy_skip(&pol, &c, TD__PERM_READ,
						    &pn, i)) < nm.n) {
				size_t len = strlen(nm.v[i]);

				/* the next readable one, by the reference */
				while (want < nm.n &&
				       !ref_allows(&pol, &c, TD__PERM_READ,
						   nm.v[want],
						   strlen(nm.v[want])))
					want++;
				cr_assert_eq(i, want, "listed \"%.*s\"",
					     (int)len, nm.v[i]);
				want++;
				got++;
				page++;
				i++;
			}
			if (i >= nm.n)
				break;
		}
	}
	before = td__policy_steps - before + nm.reads;
	cr_assert_eq(got, 40u, "listed %zu of the 40 readable names", got);
	free(nm.v);
	td__policy_fini(&pol);
	return before;
}

Test(policy, a_list_jumps_over_refused_names_without_looking_at_them)
{
	unsigned pages_few, pages_many;
	unsigned long long few = list_steps(100, &pages_few);
	unsigned long long many = list_steps(2000, &pages_many);

	cr_assert_eq(pages_few, pages_many);
	/* 36 other tenants of 100 or 2000 names each: the walk looked at
	 * every one of them (3600 and 72000 steps and more); the jumps
	 * look at the trie (the policy's size) and binary-search the
	 * names, a log of their count: the same work but for ~5 more
	 * probes per search, a handful of searches per page */
	cr_assert_lt(many, few + 5 * 5 * 60, "100 a tenant: %llu steps, "
		     "2000: %llu", few, many);
	cr_assert_lt(many, 3600);
}
