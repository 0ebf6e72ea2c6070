/* SPDX-License-Identifier: MIT */
/*
 * The fds of a follow the daemon ended that its follower may still pull
 * (docs/protocol.md, "A follow the daemon ends").
 *
 * On the pidfd path a FOLLOW reply names the bell's and the row's fds by
 * their numbers in the daemon, and the client pulls them (pidfd_getfd)
 * once it reads the reply. A follow a policy reload ended before that
 * pull closed both, and by the pull the numbers could name other files:
 * another name's bell, mapped as this one's, or another follower's row,
 * mapped read-write (found by a probe, 2026-12-07). Such a follower's
 * two fds now stay open, their numbers taken, until its connection
 * sends its next request (libtensord pulls before it sends anything
 * more, under its client lock) or goes. The bell's read-only fd, shared
 * by its followers, closes with the last of them. Each row fd stays
 * counted in its uid's fds until then, so what lingers is bounded by
 * the uid's limit (two fds at most for each one counted).
 *
 * A trigger page's two fds, which a STAGE_PAGE reply names by number the
 * same way, stay open for the same reason when the page is renewed or
 * its producer goes (trig.c): for each connection whose last such reply
 * named them and that sent no request since, counted in the producer's
 * uid's fds until the last of them pulled.
 */
#include "follow-int.h"

#include <stdlib.h>
#include <unistd.h>

/* fds kept for refs lingering pullers: a bell's fd_ro, or a trigger
 * page's rw and ro (counted in uid's fds, charge of them, until the
 * last puller went) */
struct ended_share {
	int fd[2];
	unsigned refs;
	uid_t uid;
	unsigned charge;
};

struct ended_fds {
	struct td__list link;
	struct td__peer *peer;
	int own_fd; /* a follow's row (counted in peer's uid), -1 none */
	struct ended_share *share;
};

static struct td__list lingers = {&lingers, &lingers};

/* f's peer may not have pulled what its FOLLOW's reply named */
static bool may_pull(const struct follower *f)
{
	return f->by_number && f->peer->requests == f->req_mark;
}

/* p keeps own_fd (taken) and s (one more ref) until its next request */
static bool linger_add(struct td__peer *p, int own_fd, struct ended_share *s)
{
	struct ended_fds *l = malloc(sizeof(*l));

	if (!l)
		return false;
	*l = (struct ended_fds){.peer = p, .own_fd = own_fd, .share = s};
	s->refs++;
	p->lingering++;
	td__list_add_tail(&lingers, &l->link);
	return true;
}

static struct ended_share *share_new(int fd0, int fd1, uid_t uid,
				     unsigned charge)
{
	struct ended_share *s = malloc(sizeof(*s));

	if (s)
		*s = (struct ended_share){{fd0, fd1}, 0, uid, charge};
	return s;
}

static void nomem(const char *what)
{
	/* closed as before: a pull by that number may find another file */
	td__log(TD_LOG_WARN, "out of memory: %s fds close before a client "
			     "that was sent their numbers may have pulled them",
		what);
}

void td__follow_linger(struct bell *b)
{
	struct ended_share *lb = NULL;
	int i;

	for (uint64_t m = b->used; (i = td__row_next(&m)) >= 0;) {
		struct follower *f = &b->rows[i];

		if (!may_pull(f))
			continue;
		if (!lb) {
			lb = share_new(b->fd_ro, -1, 0, 0);
			if (!lb) {
				nomem("an ended follow's");
				break;
			}
			b->fd_ro = -1;
		}
		if (!linger_add(f->peer, f->row_fd, lb)) {
			nomem("an ended follow's");
			break;
		}
		f->row_fd = -1;
	}
	if (lb && !lb->refs) {
		b->fd_ro = lb->fd[0];
		free(lb);
	}
}

bool td__trig_linger(struct td__trig *t, unsigned charge)
{
	struct ended_share *s = NULL;
	struct td__list *e;

	for (e = td__d->peers.next; e != &td__d->peers; e = e->next) {
		struct td__peer *q = td__container_of(e, struct td__peer, link);

		if (q->dead || q->page_serial != t->serial ||
		    q->requests != q->page_mark)
			continue;
		if (!s && !(s = share_new(t->rw, t->ro, t->uid, charge))) {
			nomem("a trigger page's");
			break;
		}
		if (!linger_add(q, -1, s)) {
			nomem("a trigger page's");
			break;
		}
	}
	if (s && !s->refs) {
		free(s);
		s = NULL;
	}
	if (s)
		t->rw = t->ro = -1;
	return s != NULL;
}

void td__follow_linger_end(struct td__peer *p)
{
	for (struct td__list *n, *l = lingers.next; p->lingering &&
						    l != &lingers; l = n) {
		struct ended_fds *g = td__container_of(l, struct ended_fds, link);
		struct ended_share *s = g->share;

		n = l->next;
		if (g->peer != p)
			continue;
		td__list_del(&g->link);
		if (g->own_fd >= 0) {
			close(g->own_fd);
			td__tenant_sub(p->uid, TD__LIM_FDS, 1);
		}
		if (!--s->refs) {
			for (int i = 0; i < 2; i++)
				if (s->fd[i] >= 0)
					close(s->fd[i]);
			td__tenant_sub(s->uid, TD__LIM_FDS, s->charge);
			free(s);
		}
		free(g);
		p->lingering--;
	}
}
