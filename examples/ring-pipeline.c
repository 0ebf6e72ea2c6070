/* SPDX-License-Identifier: MIT */
/*
 * ring-pipeline: a producer and a subscriber process streaming frames
 * through a ring, the fast path (docs/fastpath.md).
 *
 *   ring-pipeline NAME [FRAMES [lockstep]]
 *
 * The parent creates the ring and writes FRAMES frames of 1 MiB, every
 * u32 of frame i set to i. A child process subscribes and reads frames in
 * place, checking that each is whole (every u32 equal) and that frame
 * numbers only increase: a slow reader skips frames, it never sees a torn
 * one. After the setup, a frame costs no message to the daemon, no fd and
 * no mapping: the slots are mapped once.
 *
 * With "lockstep" the producer waits after each frame until the
 * subscriber read it and released it (td_ring_wait_read): nothing is
 * skipped, and the release is the only answer that crosses back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tensord/tensord.h>

#define WORDS (256 * 1024) /* 1 MiB of u32 */

static int subscriber(const char *name, int ready_fd)
{
	struct td_error err;
	struct td_client *c;
	struct td_sub *s;
	if (td_client_connect(NULL, &c, &err) < 0 ||
	    td_ring_subscribe(c, name, 5000, &s, &err) < 0) {
		fprintf(stderr, "subscriber: %s\n", err.reason);
		return 1;
	}
	(void)!write(ready_fd, "R", 1); /* subscribed: the producer may go */
	close(ready_fd);

	long got = 0, last = -1, bad = 0;
	struct td_view v;
	int rc;
	while ((rc = td_sub_next(s, 5000, &v)) == 0) {
		const uint32_t *w = v.planes[0];
		for (size_t i = 1; i < WORDS; i++)
			bad += w[i] != w[0];
		if ((long)w[0] <= last)
			bad++;
		last = w[0];
		got++;
	}
	/* -EPIPE: the producer closed the ring after its last frame. */
	printf("subscriber: %ld frames read, last frame %ld, %s (end: %s)\n",
	       got, last, bad ? "TORN OR OUT OF ORDER" : "all whole",
	       strerror(-rc));
	fflush(stdout); /* the child leaves with _exit(), which does not */
	td_sub_close(s);
	td_client_close(c);
	return bad || rc != -EPIPE ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: %s NAME [FRAMES [lockstep]]\n",
			argv[0]);
		return 2;
	}
	const char *name = argv[1];
	long frames = argc >= 3 ? strtol(argv[2], NULL, 10) : 100;
	int lockstep = argc == 4 && strcmp(argv[3], "lockstep") == 0;

	struct td_error err;
	struct td_client *c;
	struct td_ring *r;
	const uint64_t shape[1] = {WORDS};
	struct td_ring_desc desc = {
		.dtype = TD_TENSOR_U32, .ndim = 1, .shape = shape,
		.slot_count = 3, /* >= subscribers + 2: never waits */
		.reader_count = 1,
	};
	if (td_client_connect(NULL, &c, &err) < 0 ||
	    td_ring_create(c, name, &desc, &r, &err) < 0) {
		fprintf(stderr, "producer: %s\n", err.reason);
		return 1;
	}

	int ready[2];
	if (pipe(ready) < 0)
		return 1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) { /* a new process makes its own connection */
		close(ready[0]);
		_exit(subscriber(name, ready[1]));
	}
	close(ready[1]);
	char b;
	if (pid < 0 || read(ready[0], &b, 1) != 1) {
		fprintf(stderr, "producer: subscriber did not start\n");
		return 1;
	}
	close(ready[0]);

	for (long i = 0; i < frames; i++) {
		struct td_slot slot;
		if (td_ring_acquire(r, 5000, &slot) < 0)
			break;
		uint32_t *w = slot.planes[0];
		for (size_t k = 0; k < WORDS; k++)
			w[k] = (uint32_t)i;
		uint64_t version;
		td_ring_publish(r, &version);
		/* lock step: on once the subscriber read and released it */
		if (lockstep && td_ring_wait_read(r, version, 5000) < 0) {
			fprintf(stderr, "producer: frame %ld not read\n", i);
			break;
		}
	}
	printf("producer: %ld frames written\n", frames);
	fflush(stdout);
	td_ring_close(r); /* the subscriber reads the last frame, then EPIPE */

	int status = 1;
	waitpid(pid, &status, 0);
	td_client_close(c);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
