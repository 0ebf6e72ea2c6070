/* SPDX-License-Identifier: MIT */
/*
 * libtensord: staged publishes (docs/fastpath.md, "A followed publish
 * without the daemon's hop"). When a followed name's stream PUBLISH
 * lends the next loan, the daemon may stage it as the name's next
 * version; the producer's next publish of that loan with the same
 * descriptor fires it (a compare-exchange of the trigger page's word,
 * then a wake of the followers asleep on it), and the PUBLISH that
 * follows is only its notice. Both sides map the trigger page through
 * STAGE_PAGE.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client.h"
#include "follow.h"
#include "os.h"
#include "wire-status.h"

/*
 * STAGE_PAGE (lock held): the trigger page of name, mapped read-write
 * (its producer) or read-only (a follower); *gen its generation.
 */
int td__stage_page_map(struct td_client *c, const char *name, bool rw,
		       int64_t by, uint32_t *gen, void **page,
		       struct td_error *err)
{
	struct td_wire_ring_sub_req q = {
		.name = {name, (uint16_t)strlen(name)},
		.flags = c->path_out == TD_IMPORT_SCM ? TD_WIRE_REQ_SCM : 0};
	struct td_wire_follow_rep r;
	struct td__msg rep = {0};
	int scm = -1, fd = -1;
	int64_t len;
	void *m;
	int rc;

	len = td_wire_ring_sub_req_encode(&q, c->sbuf + TD_WIRE_HDR_LEN,
					  TD_WIRE_MAX_MSG - TD_WIRE_HDR_LEN);
	if (len < 0)
		return td__fail(err, -EINVAL, "bad tensor name");
	rc = td__call_by(c, TD_OP_STAGE_PAGE, (size_t)len, by, &rep, err);
	if (rc < 0)
		return rc;
	if (rep.nfds) {
		scm = rep.fds[0];
		rep.fds[0] = -1;
	}
	if (td_wire_follow_rep_decode(rep.body, rep.body_len, &r, NULL) < 0 ||
	    r.fd_count != 1 || !r.id) {
		rc = td__fail(err, -EBADMSG, "bad STAGE_PAGE reply");
		goto out;
	}
	rc = td__import_fd(c, r.fds[0].fd, &scm, &fd);
	if (rc < 0) {
		rc = td__fail(err, rc, "import the trigger page: %s",
			      strerror(-rc));
		goto out;
	}
	m = mmap(NULL, TD_FOLLOW_TRIG_LEN,
		 rw ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
	rc = m == MAP_FAILED ? td__fail(err, -errno, "map the trigger page")
			     : 0;
	if (rc == 0) {
		*page = m;
		*gen = r.id;
	}
out:
	td__msg_close_fds(&rep);
	if (fd >= 0)
		close(fd);
	if (scm >= 0)
		close(scm);
	return rc;
}

void td__stage_forget(struct td_client *c)
{
	if (c->st_page)
		munmap(c->st_page, TD_FOLLOW_TRIG_LEN);
	c->st_page = NULL;
	c->st_pgen = 0;
	c->st_alloc = 0;
	memset(c->st, 0, sizeof(c->st));
	for (unsigned i = 0; i < TD__STAGES; i++) {
		free(c->desc[i].buf);
		c->desc[i] = (struct td__desc){0};
	}
}

/*
 * What a stage repeats of a PUBLISH: its name, pin flag, meta and blob,
 * kept as u32 pin, u32 name length, u32 meta length, name, meta, blob;
 * one for each of the last TD__STAGES names published from a stream or
 * rewritable loan (the only ones staged), the one published or fired
 * longest ago going first.
 */
#define DESC_HDR 12u

static struct td__desc *desc_named(struct td_client *c, const char *name,
				   uint32_t len)
{
	for (unsigned i = 0; i < TD__STAGES; i++) {
		struct td__desc *d = &c->desc[i];

		if (d->len >= DESC_HDR + len && !memcmp(d->buf + 4, &len, 4) &&
		    !memcmp(d->buf + DESC_HDR, name, len))
			return d;
	}
	return NULL;
}

static bool desc_same(const struct td__desc *d, const char *name,
		      uint32_t pin, const struct td_wire_bytes *meta,
		      const struct td_wire_bytes *blob)
{
	uint32_t at = DESC_HDR + (uint32_t)strlen(name);

	return d && d->len == at + meta->len + blob->len &&
	       !memcmp(d->buf, &pin, 4) && !memcmp(d->buf + 8, &meta->len, 4) &&
	       (!meta->len || !memcmp(d->buf + at, meta->ptr, meta->len)) &&
	       !memcmp(d->buf + at + meta->len, blob->ptr, blob->len);
}

static void desc_keep(struct td_client *c, const char *name, uint32_t pin,
		      const struct td_wire_bytes *meta,
		      const struct td_wire_bytes *blob)
{
	uint32_t nl = (uint32_t)strlen(name), at = DESC_HDR + nl;
	uint32_t n = at + meta->len + blob->len;
	struct td__desc *d = desc_named(c, name, nl);

	/* the name's own, else the one kept longest ago */
	if (!d) {
		d = &c->desc[0];
		for (unsigned i = 1; i < TD__STAGES; i++)
			if (c->desc[i].used < d->used)
				d = &c->desc[i];
	}
	c->desc_last = (unsigned)(d - c->desc);
	if (n > d->cap) {
		uint8_t *b = realloc(d->buf, n);

		if (!b) {
			d->len = 0;
			return;
		}
		d->buf = b;
		d->cap = n;
	}
	memcpy(d->buf, &pin, 4);
	memcpy(d->buf + 4, &nl, 4);
	memcpy(d->buf + 8, &meta->len, 4);
	memcpy(d->buf + DESC_HDR, name, nl);
	if (meta->len)
		memcpy(d->buf + at, meta->ptr, meta->len);
	memcpy(d->buf + at + meta->len, blob->ptr, blob->len);
	d->len = n;
	d->used = ++c->desc_clock;
}

/* The stage offered for loan alloc_id, or NULL. */
static struct td__stage *stage_of(struct td_client *c, uint64_t alloc_id)
{
	for (unsigned i = 0; alloc_id && i < TD__STAGES; i++)
		if (c->st[i].alloc == alloc_id)
			return &c->st[i];
	return NULL;
}

void td__stage_drop(struct td_client *c, uint64_t alloc_id)
{
	struct td__stage *st = stage_of(c, alloc_id);

	if (st)
		*st = (struct td__stage){0};
	if (c->st_alloc == alloc_id)
		c->st_alloc = 0;
}

/*
 * A stage offered: a free record, else the one of the oldest loan (the
 * daemon keeps as many stages as this, and a loan that ends unpublished
 * frees its record, td__stage_drop: a record this client missed the end
 * of, if any). The daemon never has two stages of a connection at one
 * word of its page: a record of another loan at the word the reply
 * names is over, and goes. Kept, its publish could fire the new stage
 * when their versions read alike in the word's 30 bits (2^30 apart).
 */
static void stage_add(struct td_client *c, uint64_t alloc_id,
		      uint64_t version, uint32_t gen, uint32_t slot)
{
	struct td__stage *st = &c->st[0];

	for (unsigned i = 0; slot && i < TD__STAGES; i++)
		if (c->st[i].slot == slot && c->st[i].gen == gen &&
		    c->st[i].alloc != alloc_id)
			c->st[i] = (struct td__stage){0};
	for (unsigned i = 1; i < TD__STAGES && st->alloc; i++)
		if (c->st[i].alloc < st->alloc)
			st = &c->st[i];
	*st = (struct td__stage){alloc_id, version, gen, slot};
	c->st_alloc = alloc_id;
	c->st_version = version;
	c->st_gen = gen;
}

/*
 * Fire stage st of a loan published as name with the staged descriptor:
 * the producer's compare-exchange of the trigger word, then the wake of
 * the followers asleep on it. False: not fired (the daemon cancelled
 * it, or the page cannot be had): a plain PUBLISH.
 */
static bool stage_fire(struct td_client *c, const struct td__stage *st,
		       const char *name)
{
	uint32_t w = td_follow_trig(st->version, TD_FOLLOW_TRIG_STAGED);
	uint32_t gen = 0, slot = 0;
	void *page = NULL;

	/* one page per connection (its generation), whatever the name */
	if (!c->st_page || c->st_pgen != st->gen) {
		if (td__stage_page_map(c, name, true, -1, &gen, &page,
				       NULL) < 0)
			return false;
		if (c->st_page)
			munmap(c->st_page, TD_FOLLOW_TRIG_LEN);
		c->st_page = page;
		c->st_pgen = gen;
		if (gen != st->gen)
			return false;
	}
	/* the word the daemon staged it at: the reply's, else the name's */
	if (st->slot)
		slot = st->slot;
	else if (td__has(c, TD_WIRE_FEAT_STAGE_SLOT))
		slot = td_follow_trig_slot(name, strlen(name));
	if (!atomic_compare_exchange_strong(
		    &c->st_page[slot].word, &w,
		    td_follow_trig(st->version, TD_FOLLOW_TRIG_FIRED)))
		return false;
	td__futex_wake((const uint32_t *)&c->st_page[slot].word, INT_MAX);
	return true;
}

uint32_t td__stage_flags(struct td_client *c, uint64_t alloc_id, bool named,
			 const char *name,
			 const struct td_wire_publish_req *req)
{
	uint32_t pin = req->flags & TD_WIRE_PUB_PIN, add = 0;
	struct td__stage *st = stage_of(c, alloc_id);
	struct td__desc *d = desc_named(c, name, (uint32_t)strlen(name));

	/*
	 * A staged loan published with the staged descriptor: fired here,
	 * so its followers take it now; the PUBLISH is its notice. A loan's
	 * stage is offered once: whatever its publish is, it is spent.
	 * Other loans' stages stay (one per lent loan, each its own name).
	 */
	/* a conditional publish is checked by the daemon: never fired */
	if (st && !(req->flags & TD_WIRE_PUB_IF) &&
	    desc_same(d, name, pin, &req->meta, &req->blob) &&
	    stage_fire(c, st, name)) {
		add |= TD_WIRE_PUB_FIRED;
		/* in use: a fifth name's keep takes another */
		d->used = ++c->desc_clock;
	}
	if (st)
		*st = (struct td__stage){0};
	c->st_alloc = 0;
	c->desc_last = TD__STAGES; /* none kept by this one yet */
	if (!named || c->stage_off || !td__has(c, TD_WIRE_FEAT_STAGE))
		return add;
	/* a named stream's: the daemon may stage its next loan */
	if (req->flags & TD_WIRE_PUB_LOAN)
		add |= TD_WIRE_PUB_STAGE;
	/* what that stage, or a take-back's, repeats */
	if (!(add & TD_WIRE_PUB_FIRED))
		desc_keep(c, name, pin, &req->meta, &req->blob);
	return add;
}

void td__stage_refused(struct td_client *c)
{
	/* kept by the refused PUBLISH (read before the next one is sent) */
	if (c->desc_last < TD__STAGES)
		c->desc[c->desc_last].len = 0;
	c->desc_last = TD__STAGES;
}

uint32_t td__stage_alloc_flag(struct td_client *c,
			      const struct td_wire_alloc_req *req)
{
	uint32_t need = TD_WIRE_ALLOC_RECYCLE | TD_WIRE_ALLOC_REWRITE |
			TD_WIRE_ALLOC_NAMED;

	return (req->flags & need) == need && !c->stage_off &&
			       td__has(c, TD_WIRE_FEAT_STAGE) &&
			       td__has(c, TD_WIRE_FEAT_STAGE_TAKEBACK) &&
			       desc_named(c, req->name.ptr, req->name.len)
		       ? TD_WIRE_ALLOC_STAGE
		       : 0;
}

void td__stage_note_alloc(struct td_client *c,
			  const struct td_wire_alloc_rep *r)
{
	if (r->stage_version)
		stage_add(c, r->alloc_id, r->stage_version, r->stage_gen,
			  r->stage_slot);
}

void td__stage_note(struct td_client *c, const struct td_wire_publish_rep *r)
{
	if (r->stage_version)
		stage_add(c, r->loan.alloc_id, r->stage_version, r->stage_gen,
			  r->stage_slot);
}
