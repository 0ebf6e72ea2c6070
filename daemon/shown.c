/* SPDX-License-Identifier: MIT */
/*
 * The credentials a shared mapping was shown to (shown.h).
 */
#include "shown.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct td__shown_cred {
	uid_t uid;
	gid_t gid;
	unsigned ngroups;
	gid_t groups[];
};

static bool same(const struct td__shown_cred *c, const struct td__peer *p)
{
	return c->uid == p->uid && c->gid == p->gid &&
	       c->ngroups == p->ngroups &&
	       !memcmp(c->groups, p->groups, p->ngroups * sizeof(gid_t));
}

bool td__shown_add(struct td__shown *s, const struct td__peer *p)
{
	struct td__shown_cred *c;

	if (p->uid == geteuid())
		return false;
	for (uint32_t i = 0; i < s->n; i++)
		if (same(s->c[i], p))
			return false;
	if (s->n == s->cap) {
		/* cannot overflow: one entry per distinct credential of a
		 * connection, far fewer than UINT32_MAX / 2 */
		uint32_t cap = s->cap ? s->cap * 2 : 4;
		struct td__shown_cred **a = realloc(s->c, cap * sizeof(*a));

		if (!a) {
			s->lost = true;
			return true;
		}
		s->c = a;
		s->cap = cap;
	}
	c = malloc(sizeof(*c) + p->ngroups * sizeof(gid_t));
	if (!c) {
		s->lost = true;
		return true;
	}
	c->uid = p->uid;
	c->gid = p->gid;
	c->ngroups = p->ngroups;
	memcpy(c->groups, p->groups, p->ngroups * sizeof(gid_t));
	s->c[s->n++] = c;
	return true;
}

bool td__shown_may(const struct td__shown *s, unsigned perm,
		   const char *name, size_t len)
{
	const struct td__policy *pol = td__d->policy;

	if (!pol)
		return true;
	if (s->lost)
		return false;
	for (uint32_t i = 0; i < s->n; i++) {
		const struct td__shown_cred *c = s->c[i];
		struct td__cred cr = {c->uid, c->gid, c->groups, c->ngroups};

		if (!td__policy_allows(pol, &cr, perm, name, len))
			return false;
	}
	return true;
}

void td__shown_fini(struct td__shown *s)
{
	for (uint32_t i = 0; i < s->n; i++)
		free(s->c[i]);
	free(s->c);
	*s = (struct td__shown){0};
}
