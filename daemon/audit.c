/* SPDX-License-Identifier: MIT */
/*
 * The audit log: each peer's command name taken at connect, and every
 * refusal (permission, quota, bad input) counted and logged once per peer
 * and kind under a rate limit. Called by peer.c (accept, error replies),
 * so it calls nothing above log.c; STATUS (status.c) reads what it counts.
 */
#include "daemon.h"
#include "wire-status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/*
 * Audit log rate limit, across all peers: a burst of AUDIT_BURST lines,
 * then AUDIT_PER_S a second. Per peer each kind is logged once anyway;
 * this bounds a client that reconnects to refresh that.
 */
#define AUDIT_BURST 20.0
#define AUDIT_PER_S 5.0

void td__audit_peer_init(struct td__peer *p)
{
	char path[64];
	ssize_t n = 0;
	int fd;

	p->since_ms = uv_now(td__d->loop);
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)p->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, p->comm, sizeof(p->comm) - 1);
		close(fd);
	}
	if (n < 0)
		n = 0;
	/* the kernel ends it with a newline; keep printable bytes only */
	p->comm[n] = 0;
	for (ssize_t i = 0; i < n; i++)
		if (p->comm[i] == '\n')
			p->comm[i] = 0;
		else if ((unsigned char)p->comm[i] < 0x20 ||
			 (unsigned char)p->comm[i] >= 0x7f)
			p->comm[i] = '?';
}

/* Which refusal an error status is; -1 for answers that are no refusal
 * (no such name, timed out, out of memory, busy). */
static int refusal_kind(int status)
{
	switch (-status) {
	case EACCES:
	case EPERM:
		return TD_REFUSED_PERMISSION;
	case EDQUOT:
	case ENOSPC:
	case ENOBUFS:
		return TD_REFUSED_QUOTA;
	case EINVAL:
	case EBADMSG:
	case EPROTO:
	case EOVERFLOW:
	case ENODATA:
	case EMSGSIZE:
	case E2BIG:
	case EOPNOTSUPP:
	case EILSEQ:
	case ENAMETOOLONG:
	case EPROTONOSUPPORT:
	case EBADF:
		return TD_REFUSED_INPUT;
	default:
		return -1;
	}
}

/* May one more audit line be written now? */
static bool audit_token(struct td__stats *st)
{
	uint64_t now = uv_now(td__d->loop);

	if (st->audit_ms == 0 && st->audit_tokens == 0)
		st->audit_tokens = AUDIT_BURST;
	st->audit_tokens += (double)(now - st->audit_ms) * AUDIT_PER_S / 1000;
	if (st->audit_tokens > AUDIT_BURST)
		st->audit_tokens = AUDIT_BURST;
	st->audit_ms = now;
	if (st->audit_tokens < 1) {
		st->log_suppressed++;
		return false;
	}
	st->audit_tokens -= 1;
	return true;
}

void td__audit_refusal(struct td__peer *p, uint16_t op, int status,
		       const char *reason)
{
	struct td__stats *st = &td__d->stats;
	int k = refusal_kind(status);

	if (k < 0)
		return;
	st->refused[k]++;
	p->refusals++;
	if (p->refusals_logged & (1u << k))
		return;
	p->refusals_logged |= (uint8_t)(1u << k);
	if (!audit_token(st))
		return;
	/* most reasons start with their request ("STAT: name: ..."):
	 * named once, not "STAT: STAT: name: ..." */
	const char *on = td_wire_op_name(op);
	size_t n = strlen(on);
	bool named = !strncmp(reason, on, n) && reason[n] == ':';
	td__log(TD_LOG_WARN,
		"refused %s: pid %d uid %u (%s): %s%s%s (%s) [further %s "
		"refusals of this client are counted, not logged]",
		td_wire_refusal_name((uint32_t)k), (int)p->pid,
		(unsigned)p->uid, p->comm, named ? "" : on, named ? "" : ": ",
		reason, strerror(-status), td_wire_refusal_name((uint32_t)k));
}
