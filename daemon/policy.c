/* SPDX-License-Identifier: MIT */
/*
 * The access policy (--policy FILE, docs/policy.md): which uids and gids
 * may read or write which name prefixes (and publish dma-bufs under
 * them), per-uid byte quotas and per-uid limits (tenant.c). The
 * parser takes a buffer and does no I/O, so the fuzz target and the tests
 * drive it directly; every count and length it reads is bounded by a
 * TD__POLICY_MAX_* cap.
 */
#include "daemon.h"
#include "bytes.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_TOKENS 4

/* the KEYs of limit lines (and of --uid-limit) */
const char *const td__lim_names[TD__LIM_COUNT] = {
	[TD__LIM_CONNS] = "conns",     [TD__LIM_FDS] = "fds",
	[TD__LIM_LEASES] = "leases",   [TD__LIM_PINNED] = "pinned",
	[TD__LIM_WATCHES] = "watches", [TD__LIM_WAITERS] = "waiters",
	[TD__LIM_RINGS] = "rings",     [TD__LIM_QUEUED] = "queued",
};

struct tok {
	const char *p;
	size_t len;
};

static bool tok_is(const struct tok *t, const char *s)
{
	return t->len == strlen(s) && memcmp(t->p, s, t->len) == 0;
}

/* Decimal u32 below UINT32_MAX ((uid_t)-1 means "no id"). 0 or -EINVAL. */
static int parse_id(const char *p, size_t len, uint32_t *out)
{
	uint64_t v = 0;

	if (len == 0 || len > 10)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(p[i] - '0');
	}
	if (v >= UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int td__policy_limit_value(int key, const char *p, size_t len,
			   uint64_t *out)
{
	/* counts are plain decimal numbers: no suffix */
	if (!td__lim_is_bytes(key) && len && strchr("KkMmGgTt", p[len - 1]))
		return -EINVAL;
	return td__size_parse(p, len, out);
}

/* "uid=N", "gid=N", "any" or "http". */
static int parse_who(const struct tok *t, uint8_t *kind, uint32_t *id)
{
	if (tok_is(t, "any") || tok_is(t, "http")) {
		*kind = tok_is(t, "any") ? TD__WHO_ANY : TD__WHO_HTTP;
		*id = 0;
		return 0;
	}
	if (t->len > 4 && memcmp(t->p, "uid=", 4) == 0)
		*kind = TD__WHO_UID;
	else if (t->len > 4 && memcmp(t->p, "gid=", 4) == 0)
		*kind = TD__WHO_GID;
	else
		return -EINVAL;
	return parse_id(t->p + 4, t->len - 4, id);
}

/* "uid=N" only (quota and limit lines are per uid). 0 or -EINVAL. */
static int parse_uid(const struct tok *t, uint32_t *uid)
{
	uint8_t kind;

	if (parse_who(t, &kind, uid) < 0 || kind != TD__WHO_UID)
		return -EINVAL;
	return 0;
}

/* limit uid=N KEY VALUE */
static int parse_limit(struct td__policy *pol, const struct tok *t,
		       unsigned n, const char **why)
{
	struct td__limit l = {0};
	int k;

	if (n != 4) {
		*why = "want: limit uid=N KEY VALUE";
		return -EINVAL;
	}
	if (parse_uid(&t[1], &l.uid) < 0) {
		*why = "a limit is per uid: uid=N";
		return -EINVAL;
	}
	for (k = 0; k < TD__LIM_COUNT; k++)
		if (tok_is(&t[2], td__lim_names[k]))
			break;
	if (k == TD__LIM_COUNT) {
		*why = "KEY must be conns, fds, leases, pinned, "
		       "watches, waiters, rings or queued";
		return -EINVAL;
	}
	l.key = (uint32_t)k;
	/* byte limits take suffixes; counts are plain numbers */
	if (td__policy_limit_value(k, t[3].p, t[3].len, &l.value) < 0) {
		*why = td__lim_is_bytes(k) ? "VALUE must be N[K|M|G|T]"
					   : "VALUE must be a number";
		return -EINVAL;
	}
	for (unsigned i = 0; i < pol->nlimits; i++)
		if (pol->limits[i].uid == l.uid &&
		    pol->limits[i].key == l.key) {
			*why = "second limit of that KEY for the same uid";
			return -EINVAL;
		}
	if (pol->nlimits >= TD__POLICY_MAX_LIMITS) {
		*why = "too many limit lines";
		return -E2BIG;
	}
	pol->limits[pol->nlimits++] = l;
	return 0;
}

static int parse_line(struct td__policy *pol, const struct tok *t,
		      unsigned n, const char **why)
{
	if (tok_is(&t[0], "allow")) {
		struct td__rule r = {0};

		if (n != 4) {
			*why = "want: allow WHO PERM PREFIX";
			return -EINVAL;
		}
		if (parse_who(&t[1], &r.kind, &r.id) < 0) {
			*why = "WHO must be uid=N, gid=N, any or http";
			return -EINVAL;
		}
		if (tok_is(&t[2], "r"))
			r.perm = TD__PERM_READ;
		else if (tok_is(&t[2], "w"))
			r.perm = TD__PERM_WRITE;
		else if (tok_is(&t[2], "rw"))
			r.perm = TD__PERM_READ | TD__PERM_WRITE;
		else if (tok_is(&t[2], "dmabuf"))
			r.perm = TD__PERM_DMABUF;
		else {
			*why = "PERM must be r, w, rw or dmabuf";
			return -EINVAL;
		}
		if (r.kind == TD__WHO_HTTP && r.perm != TD__PERM_READ) {
			*why = "http may only read (PERM r)";
			return -EINVAL;
		}
		/* "*" is every name; anything else is a LIST-style prefix */
		if (!tok_is(&t[3], "*")) {
			if (t[3].len > TD_WIRE_MAX_NAME) {
				*why = "PREFIX longer than 255 bytes";
				return -EOVERFLOW;
			}
			if (td_wire_name_check(t[3].p, t[3].len, true, NULL) <
			    0) {
				*why = "PREFIX is not a valid name prefix";
				return -EINVAL;
			}
			memcpy(r.prefix, t[3].p, t[3].len);
			r.len = (uint16_t)t[3].len;
		}
		if (pol->nrules >= TD__POLICY_MAX_RULES) {
			*why = "too many allow lines";
			return -E2BIG;
		}
		pol->rules[pol->nrules++] = r;
		return 0;
	}
	if (tok_is(&t[0], "quota")) {
		struct td__quota q;

		if (n != 3) {
			*why = "want: quota uid=N BYTES";
			return -EINVAL;
		}
		if (parse_uid(&t[1], &q.uid) < 0) {
			*why = "a quota is per uid: uid=N";
			return -EINVAL;
		}
		if (td__size_parse(t[2].p, t[2].len, &q.bytes) < 0) {
			*why = "BYTES must be N[K|M|G|T]";
			return -EINVAL;
		}
		for (unsigned i = 0; i < pol->nquotas; i++)
			if (pol->quotas[i].uid == q.uid) {
				*why = "second quota for the same uid";
				return -EINVAL;
			}
		if (pol->nquotas >= TD__POLICY_MAX_QUOTAS) {
			*why = "too many quota lines";
			return -E2BIG;
		}
		pol->quotas[pol->nquotas++] = q;
		return 0;
	}
	if (tok_is(&t[0], "limit"))
		return parse_limit(pol, t, n, why);
	*why = "unknown keyword (want allow, quota or limit)";
	return -EINVAL;
}

/* ---- the compiled matcher (docs/policy.md §3, "Matching") ---- */

#ifdef TD__POLICY_STEPS
/* tests only: trie nodes and grants looked at by td__policy_allows */
unsigned long long td__policy_steps;
#define STEP() (td__policy_steps++)
#else
#define STEP() ((void)0)
#endif

/* A uid or gid rule waiting for its node's run of grants. */
struct pend {
	uint32_t node;
	uint32_t id;
	uint8_t kind;
	uint8_t mask;
};

static int pend_cmp(const void *a, const void *b)
{
	const struct pend *x = a, *y = b;

	if (x->node != y->node)
		return x->node < y->node ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Bit q set for every perm set q (0..7) that a rule of perm grants whole. */
static uint8_t grant_mask(unsigned perm)
{
	uint8_t m = 0;

	for (unsigned q = 0; q < 8; q++)
		if ((perm & q) == q)
			m |= (uint8_t)(1u << q);
	return m;
}

/* The node of prefix p, made (with the nodes on its way) if need be. */
static uint32_t trie_insert(struct td__policy *pol, const char *p,
			    size_t len)
{
	uint32_t n = 0;

	for (size_t i = 0; i < len; i++) {
		uint32_t c = pol->nodes[n].child;

		while (c && pol->nodes[c].byte != (uint8_t)p[i])
			c = pol->nodes[c].sibling;
		if (!c) {
			c = pol->nnodes++;
			pol->nodes[c] = (struct td__pnode){
				.sibling = pol->nodes[n].child,
				.byte = (uint8_t)p[i]};
			pol->nodes[n].child = c;
		}
		n = c;
	}
	return n;
}

/* Build pol's trie from its rules: at most 1 + the sum of the prefix
 * lengths nodes, one grant per uid/gid rule. 0 or -ENOMEM. */
static int policy_compile(struct td__policy *pol)
{
	size_t cap = 1, nr = pol->nrules ? pol->nrules : 1;
	struct pend *pend;
	unsigned np = 0;

	for (unsigned i = 0; i < pol->nrules; i++)
		cap += pol->rules[i].len;
	pol->nodes = calloc(cap, sizeof(*pol->nodes));
	pol->grants = calloc(nr, sizeof(*pol->grants));
	pend = calloc(nr, sizeof(*pend));
	if (!pol->nodes || !pol->grants || !pend) {
		free(pend);
		return -ENOMEM;
	}
	pol->nnodes = 1;
	for (unsigned i = 0; i < pol->nrules; i++) {
		const struct td__rule *r = &pol->rules[i];
		uint32_t n = trie_insert(pol, r->prefix, r->len);
		uint8_t m = grant_mask(r->perm);

		if (r->kind == TD__WHO_ANY)
			pol->nodes[n].any |= m;
		else if (r->kind == TD__WHO_HTTP)
			pol->nodes[n].http |= m;
		else
			pend[np++] = (struct pend){n, r->id, r->kind, m};
	}
	qsort(pend, np, sizeof(*pend), pend_cmp);
	for (unsigned i = 0; i < np; i++) {
		struct td__pnode *nd = &pol->nodes[pend[i].node];
		struct td__grant *g = &pol->grants[pol->ngrants];

		/* the same uid or gid again at this node: one grant */
		if (nd->ngrant && g[-1].kind == pend[i].kind &&
		    g[-1].id == pend[i].id) {
			g[-1].mask |= pend[i].mask;
			continue;
		}
		if (!nd->ngrant)
			nd->grant = pol->ngrants;
		*g = (struct td__grant){pend[i].id, pend[i].kind, pend[i].mask};
		pol->ngrants++;
		nd->ngrant++;
	}
	free(pend);
	return 0;
}

int td__policy_parse(const char *buf, size_t len, struct td__policy *pol,
		     unsigned *line, const char **why)
{
	size_t at = 0;
	int rc = 0;

	*pol = (struct td__policy){0};
	*line = 0;
	if (len > TD__POLICY_MAX_BYTES) {
		*why = "policy file larger than 256 KiB";
		return -EFBIG;
	}
	pol->rules = calloc(TD__POLICY_MAX_RULES, sizeof(*pol->rules));
	pol->quotas = calloc(TD__POLICY_MAX_QUOTAS, sizeof(*pol->quotas));
	pol->limits = calloc(TD__POLICY_MAX_LIMITS, sizeof(*pol->limits));
	if (!pol->rules || !pol->quotas || !pol->limits) {
		*why = "out of memory";
		rc = -ENOMEM;
		goto fail;
	}
	while (at < len) {
		const char *p = buf + at;
		const char *nl = memchr(p, '\n', len - at);
		size_t ll = nl ? (size_t)(nl - p) : len - at;
		struct tok t[MAX_TOKENS];
		unsigned n = 0;

		(*line)++;
		at += ll + (nl ? 1 : 0);
		if (ll > TD__POLICY_MAX_LINE) {
			*why = "line longer than 1024 bytes";
			rc = -EOVERFLOW;
			goto fail;
		}
		/* a NUL or escape anywhere is a broken file, comments too */
		for (size_t i = 0; i < ll; i++)
			if (((unsigned char)p[i] < 0x20 && p[i] != '\t' &&
			     p[i] != '\r') ||
			    p[i] == 0x7f) {
				*why = "control byte in the line";
				rc = -EINVAL;
				goto fail;
			}
		for (size_t i = 0; i < ll;) {
			size_t j;

			if (p[i] == '#')
				break;
			if (p[i] == ' ' || p[i] == '\t' || p[i] == '\r') {
				i++;
				continue;
			}
			for (j = i; j < ll && p[j] != ' ' && p[j] != '\t' &&
				    p[j] != '\r' && p[j] != '#';
			     j++)
				;
			if (n == MAX_TOKENS) {
				*why = "too many words on the line";
				rc = -EINVAL;
				goto fail;
			}
			t[n++] = (struct tok){p + i, j - i};
			i = j;
		}
		if (n == 0)
			continue;
		rc = parse_line(pol, t, n, why);
		if (rc < 0)
			goto fail;
	}
	*line = 0;
	/* the matcher's trie, part of the policy: a reload swaps both */
	rc = policy_compile(pol);
	if (rc < 0) {
		*why = "out of memory";
		goto fail;
	}
	return 0;
fail:
	td__policy_fini(pol);
	return rc;
}

void td__policy_fini(struct td__policy *pol)
{
	if (!pol)
		return;
	free(pol->rules);
	free(pol->nodes);
	free(pol->grants);
	free(pol->quotas);
	free(pol->limits);
	*pol = (struct td__policy){0};
}

/*
 * Read path whole into *buf (malloc'ed, *len bytes). A file that changed
 * while it was read (an editor writing it in place, a deploy tool
 * appending to it) is -EAGAIN: read to its end, not to the size fstat
 * gave, and compared with a second fstat, so a file that grew is not cut
 * at its old size (the first rules of a longer policy, loaded as if
 * whole) and one that shrank is not a bare read error.
 */
static int policy_read(const char *path, char **buf, size_t *len)
{
	struct stat st, after;
	int fd, rc = 0;

	*buf = NULL;
	*len = 0;
	/* non-blocking: a FIFO there (a file replaced by one) must not
	 * hang the start or a SIGHUP's reload, the loop with it, until
	 * someone writes; fstat then refuses it */
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		td__log(TD_LOG_ERROR, "--policy %s: %s", path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > (off_t)TD__POLICY_MAX_BYTES) {
		td__log(TD_LOG_ERROR,
			"--policy %s: not a regular file of at most 256 KiB",
			path);
		rc = -EINVAL;
		goto out;
	}
	/* one byte over the limit: a file that grew past it is refused */
	*buf = malloc(TD__POLICY_MAX_BYTES + 2);
	if (!*buf) {
		rc = -ENOMEM;
		goto out;
	}
	for (;;) {
		ssize_t n = read(fd, *buf + *len,
				 TD__POLICY_MAX_BYTES + 1 - *len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			td__log(TD_LOG_ERROR, "--policy %s: read failed: %s",
				path, strerror(-rc));
			goto out;
		}
		if (n == 0 || (*len += (size_t)n) > TD__POLICY_MAX_BYTES)
			break;
	}
	if (fstat(fd, &after) < 0 || after.st_size != (off_t)*len ||
	    after.st_size != st.st_size ||
	    after.st_mtim.tv_sec != st.st_mtim.tv_sec ||
	    after.st_mtim.tv_nsec != st.st_mtim.tv_nsec)
		rc = -EAGAIN;
out:
	close(fd);
	if (rc < 0) {
		free(*buf);
		*buf = NULL;
	}
	return rc;
}

int td__policy_load(const char *path, struct td__policy *pol)
{
	const char *why = NULL;
	char *buf = NULL;
	size_t len = 0;
	unsigned line;
	int rc;

	/* a file being written settles within a few tries; a file
	 * rewritten without pause is refused, the policy in force kept */
	for (int tries = 0;; tries++) {
		rc = policy_read(path, &buf, &len);
		if (rc != -EAGAIN)
			break;
		if (tries == 3) {
			td__log(TD_LOG_ERROR, "--policy %s: the file changed "
					      "every time it was read (4 "
					      "tries): refused", path);
			return rc;
		}
		td__log(TD_LOG_WARN, "--policy %s: the file changed while it "
				     "was read: reading it again", path);
	}
	if (rc < 0)
		return rc;
	rc = td__policy_parse(buf, len, pol, &line, &why);
	if (rc < 0)
		td__log(TD_LOG_ERROR, "--policy %s:%u: %s", path, line, why);
	else
		td__log(TD_LOG_INFO,
			"policy %s: %u allow rules, %u quotas, %u limits",
			path, pol->nrules, pol->nquotas, pol->nlimits);
	free(buf);
	return rc;
}

bool td__policy_who(const struct td__rule *r, const struct td__cred *c)
{
	if (!c || r->kind == TD__WHO_HTTP)
		return !c && r->kind == TD__WHO_HTTP;
	switch (r->kind) {
	case TD__WHO_ANY:
		return true;
	case TD__WHO_UID:
		return r->id == (uint32_t)c->uid;
	default:
		if (r->id == (uint32_t)c->gid)
			return true;
		for (unsigned i = 0; i < c->ngroups; i++)
			if (r->id == (uint32_t)c->groups[i])
				return true;
		return false;
	}
}

/* Does nd's run of grants give kind id the grant bit? Binary search. */
static bool grant_has(const struct td__policy *pol,
		      const struct td__pnode *nd, uint8_t kind, uint32_t id,
		      unsigned bit)
{
	const struct td__grant *g = pol->grants + nd->grant;
	size_t lo = 0, hi = nd->ngrant;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		STEP();
		if (g[mid].kind < kind ||
		    (g[mid].kind == kind && g[mid].id < id))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < nd->ngrant && g[lo].kind == kind && g[lo].id == id &&
	       (g[lo].mask & bit);
}

/* Does a rule ending at nd grant bit to c (NULL: an HTTP reader)? */
static bool node_grants(const struct td__policy *pol,
			const struct td__pnode *nd, const struct td__cred *c,
			unsigned bit)
{
	STEP();
	if (!c)
		return nd->http & bit;
	if (nd->any & bit)
		return true;
	if (!nd->ngrant)
		return false;
	if (grant_has(pol, nd, TD__WHO_UID, (uint32_t)c->uid, bit) ||
	    grant_has(pol, nd, TD__WHO_GID, (uint32_t)c->gid, bit))
		return true;
	for (unsigned i = 0; i < c->ngroups; i++)
		if (grant_has(pol, nd, TD__WHO_GID, (uint32_t)c->groups[i],
			      bit))
			return true;
	return false;
}

bool td__policy_allows(const struct td__policy *pol,
		       const struct td__cred *c, unsigned perm,
		       const char *name, size_t len)
{
	uint32_t n = 0;
	unsigned bit;

	/* no rule has a bit above dmabuf; a zeroed policy has no trie */
	if (perm > 7 || !pol->nodes)
		return false;
	bit = 1u << perm;
	/* the nodes on the name's way are exactly its prefixes that some
	 * rule names ("" first: `*`) */
	for (size_t i = 0;; i++) {
		const struct td__pnode *nd = &pol->nodes[n];

		if (node_grants(pol, nd, c, bit))
			return true;
		if (i == len)
			return false;
		for (n = nd->child; n && pol->nodes[n].byte != (uint8_t)name[i];
		     n = pol->nodes[n].sibling)
			STEP();
		if (!n)
			return false;
	}
}

/* Compare as td__name_cmp does: bytes unsigned, a prefix first. */
static int str_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int r = memcmp(a, b, alen < blen ? alen : blen);

	if (r)
		return r;
	return alen < blen ? -1 : alen > blen;
}

/*
 * The smallest prefix that a rule of the subtree under node n grants bit
 * to c, when smaller than best[0..bestlen): written to best, its length
 * returned (bestlen when none is smaller). path[0..depth) is n's prefix,
 * path has TD_WIRE_MAX_NAME bytes. Each node is looked at at most once
 * (siblings are not sorted: every branch is tried); a granting node ends
 * its branch, as every name under it is larger, and so does a prefix
 * already larger than best. Recursion depth: at most a prefix's length.
 */
static size_t least_under(const struct td__policy *pol,
			  const struct td__cred *c, unsigned bit, uint32_t n,
			  char *path, size_t depth, char *best, size_t bestlen)
{
	const struct td__pnode *nd = &pol->nodes[n];

	if (bestlen && str_cmp(path, depth, best, bestlen) > 0)
		return bestlen;
	if (node_grants(pol, nd, c, bit)) {
		memcpy(best, path, depth);
		return depth;
	}
	for (uint32_t ch = nd->child; ch && depth < TD_WIRE_MAX_NAME;
	     ch = pol->nodes[ch].sibling) {
		path[depth] = (char)pol->nodes[ch].byte;
		bestlen = least_under(pol, c, bit, ch, path, depth + 1, best,
				      bestlen);
	}
	return bestlen;
}

int td__policy_next(const struct td__policy *pol, const struct td__cred *c,
		    unsigned perm, const char *name, size_t len, char *out,
		    size_t *out_len)
{
	uint32_t way[TD_WIRE_MAX_NAME + 1], n = 0;
	char path[TD_WIRE_MAX_NAME];
	unsigned bit;
	size_t i;

	if (perm > 7 || !pol->nodes || len > TD_WIRE_MAX_NAME)
		return -ENOENT;
	bit = 1u << perm;
	/* down the name's way, as td__policy_allows walks it */
	for (i = 0;; i++) {
		const struct td__pnode *nd = &pol->nodes[n];

		way[i] = n;
		if (node_grants(pol, nd, c, bit))
			return 0;
		if (i == len)
			break;
		for (n = nd->child; n && pol->nodes[n].byte != (uint8_t)name[i];
		     n = pol->nodes[n].sibling)
			STEP();
		if (!n)
			break;
	}
	/*
	 * A readable name > name parts from it at some byte d (or extends
	 * it, d = len) where it is larger, under a granting prefix longer
	 * than d (a shorter one would be name's own): the prefix's node
	 * hangs under way[d] through a byte > name[d]. The deepest d with
	 * one wins (it shares more of name, then a byte > name[d]), so the
	 * search goes up from the bottom of the way and stops at the first.
	 */
	for (size_t d = i + 1; d-- > 0;) {
		size_t best = 0;

		memcpy(path, name, d);
		for (uint32_t ch = pol->nodes[way[d]].child;
		     ch && d < TD_WIRE_MAX_NAME; ch = pol->nodes[ch].sibling) {
			STEP();
			if (d < len && pol->nodes[ch].byte <= (uint8_t)name[d])
				continue;
			path[d] = (char)pol->nodes[ch].byte;
			best = least_under(pol, c, bit, ch, path, d + 1, out,
					   best);
		}
		if (best) {
			*out_len = best;
			return 1;
		}
	}
	return -ENOENT;
}

size_t td__policy_skip(const struct td__policy *pol,
		       const struct td__cred *c, unsigned perm,
		       const struct td__policy_names *nm, size_t i)
{
	char next[TD_WIRE_MAX_NAME];

	while (i < nm->count) {
		size_t len, nlen = 0, j;
		const char *name = nm->at(nm->ctx, i, &len);
		int rc = td__policy_next(pol, c, perm, name, len, next, &nlen);

		STEP();
		if (rc == 0)
			return i;
		if (rc < 0)
			return nm->count;
		/* next > name: the first name >= next is further on (the
		 * guard only keeps a broken find from looping) */
		j = nm->find(nm->ctx, next, nlen);
		i = j > i ? j : i + 1;
	}
	return nm->count;
}

bool td__policy_covers(const struct td__policy *pol,
			const struct td__cred *reader,
			const struct td__cred *writer, bool writer_all)
{
	/* allows() of a prefix: some read rule's prefix is a prefix of it,
	 * so every name under it is readable */
	if (writer_all)
		return td__policy_allows(pol, reader, TD__PERM_READ, "", 0);
	for (unsigned i = 0; i < pol->nrules; i++) {
		const struct td__rule *r = &pol->rules[i];

		if ((r->perm & TD__PERM_WRITE) && td__policy_who(r, writer) &&
		    !td__policy_allows(pol, reader, TD__PERM_READ, r->prefix,
				       r->len))
			return false;
	}
	return true;
}

bool td__policy_allows_http(const struct td__policy *pol, const char *name,
			    size_t len)
{
	return td__policy_allows(pol, NULL, TD__PERM_READ, name, len);
}

bool td__policy_any(const struct td__policy *pol, const struct td__cred *c,
		    unsigned perm)
{
	for (unsigned i = 0; i < pol->nrules; i++)
		if ((pol->rules[i].perm & perm) == perm &&
		    td__policy_who(&pol->rules[i], c))
			return true;
	return false;
}

uint64_t td__policy_quota(const struct td__policy *pol, uid_t uid,
			  uint64_t dflt)
{
	for (unsigned i = 0; pol && i < pol->nquotas; i++)
		if (pol->quotas[i].uid == (uint32_t)uid)
			return pol->quotas[i].bytes;
	return dflt;
}

bool td__policy_limit(const struct td__policy *pol, uid_t uid,
		      enum td__lim key, uint64_t *v)
{
	for (unsigned i = 0; pol && i < pol->nlimits; i++)
		if (pol->limits[i].uid == (uint32_t)uid &&
		    pol->limits[i].key == (uint32_t)key) {
			*v = pol->limits[i].value;
			return true;
		}
	return false;
}
