/* SPDX-License-Identifier: MIT */
/*
 * Baseline: a plain AF_UNIX SOCK_STREAM socketpair copying the bytes. The
 * producer writes into its own buffer and send()s it; the consumer recv()s
 * into its own buffer, checks it and sends an 8-byte ack on the same
 * socket. Default socket buffer sizes ("plain"). Both buffers are
 * pre-faulted in setup. It runs up to 64 MiB, where its target is (a
 * zero-copy handoff >= 100x faster): above, every handoff copies the
 * whole payload through the kernel even in nowrite mode (~0.25 s a GiB
 * here), minutes of a full run that only the copy itself would show.
 */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

struct sock_priv {
	int fd;
	void *buf;
};

static int sock_can_run(const struct bench_env *env, size_t size, char *why,
			size_t why_len)
{
	if (size > (64u << 20)) {
		snprintf(why, why_len, "the socket copy runs up to 64 MiB "
			 "(its target's size): above, every handoff copies "
			 "the payload, in nowrite mode too");
		return -EFBIG;
	}
	return 0;
}

static int sock_prepare(struct bench_run *r)
{
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, r->fds) < 0)
		return bench_fail(r, -errno, "socketpair: %s",
				  strerror(errno));
	return 0;
}

static void sock_unprepare(struct bench_run *r)
{
	for (int i = 0; i < 2; i++) {
		if (r->fds[i] >= 0)
			close(r->fds[i]);
		r->fds[i] = -1;
	}
}

static int sock_setup(struct bench_run *r)
{
	struct sock_priv *s = calloc(1, sizeof(*s));
	int mine = r->role == BENCH_PRODUCER ? 0 : 1;

	if (!s)
		return bench_fail(r, -ENOMEM, "out of memory");
	r->priv = s;
	s->fd = r->fds[mine];
	close(r->fds[!mine]);
	r->fds[!mine] = -1;
	r->fds[mine] = -1;
	s->buf = bench_map_anon(r->size);
	if (!s->buf)
		return bench_fail(r, -ENOMEM, "mmap %zu bytes: %s", r->size,
				  strerror(errno));
	return 0;
}

static int sock_producer_step(struct bench_run *r, uint64_t seq)
{
	struct sock_priv *s = r->priv;
	int rc;

	bench_payload_write(s->buf, r->size, seq, r->write);
	rc = bench_write_all(s->fd, s->buf, r->size);
	if (rc < 0)
		return bench_fail(r, rc, "send: %s", strerror(-rc));
	rc = bench_ack_recv(s->fd, seq);
	if (rc < 0)
		return bench_fail(r, rc, "ack %llu: %s",
				  (unsigned long long)seq, strerror(-rc));
	return 0;
}

static int sock_consumer_step(struct bench_run *r, uint64_t seq)
{
	struct sock_priv *s = r->priv;
	int rc = bench_read_all(s->fd, s->buf, r->size);

	if (rc < 0)
		return bench_fail(r, rc, "recv: %s", strerror(-rc));
	if (bench_payload_check(s->buf, r->size, seq, r->write) < 0)
		return bench_fail(r, -EBADMSG, "payload %llu corrupt",
				  (unsigned long long)seq);
	rc = bench_ack_send(s->fd, seq);
	if (rc < 0)
		return bench_fail(r, rc, "ack send: %s", strerror(-rc));
	return 0;
}

static void sock_teardown(struct bench_run *r)
{
	struct sock_priv *s = r->priv;

	if (!s)
		return;
	if (s->buf)
		munmap(s->buf, r->size);
	if (s->fd >= 0)
		close(s->fd);
	free(s);
	r->priv = NULL;
}

const struct bench_method bench_socket_copy = {
	.name = "socket-copy",
	.desc = "AF_UNIX SOCK_STREAM socketpair, bytes copied through the "
		"kernel (default buffer sizes); ack: 8 bytes back on the same "
		"socket",
	.can_run = sock_can_run,
	.prepare = sock_prepare,
	.unprepare = sock_unprepare,
	.setup = sock_setup,
	.producer_step = sock_producer_step,
	.consumer_step = sock_consumer_step,
	.teardown = sock_teardown,
};
