/* SPDX-License-Identifier: MIT */
/*
 * follow-pipeline: a producer and a follower process streaming frames
 * through a plain, named, versioned tensor (docs/fastpath.md, "Following
 * a name").
 *
 *   follow-pipeline NAME [FRAMES]
 *
 * The parent publishes FRAMES frames of 1 MiB as NAME, every u32 of frame
 * i set to i, from TD_ALLOC_STREAM loans (each PUBLISH reply lends the
 * buffer for the next frame). A child process follows NAME and reads
 * frames in place, checking that each is whole (every u32 equal) and
 * that frame numbers only increase: a follower slower than its producer
 * skips to the newest frame, it never sees a torn one. Once warm, a frame
 * costs the follower no message to the daemon, no fd and no mapping: the
 * daemon writes each new version into memory the follower maps, and the
 * follower holds the version it reads (a lease the daemon honours) by a
 * store to its own row.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tensord/tensord.h>

#define WORDS (256 * 1024) /* 1 MiB of u32 */

static int follower(const char *name, long frames, int ready_fd)
{
	struct td_error err;
	struct td_client *c;
	struct td_follow *f;

	if (td_client_connect(NULL, &c, &err) < 0 ||
	    td_client_follow(c, name, &f, &err) < 0) {
		fprintf(stderr, "follower: %s\n", err.reason);
		return 1;
	}
	(void)!write(ready_fd, "R", 1); /* following: the producer may go */
	close(ready_fd);

	long got = 0, last = -1, bad = 0;
	struct td_tensor *t;
	int rc;

	/* the last frame ends the stream; a follower may skip the others */
	while (last < frames - 1 &&
	       (rc = td_follow_next(f, 5000, &t, &err)) == 0) {
		const uint32_t *w = td_tensor_plane_data(t, 0);

		for (size_t i = 1; i < WORDS; i++)
			bad += w[i] != w[0];
		if ((long)w[0] <= last)
			bad++;
		last = w[0];
		got++;
		td_tensor_release(t); /* one store: no message */
	}
	if (last < frames - 1)
		fprintf(stderr, "follower: %s\n", err.reason);
	printf("follower: %ld frames read, last frame %ld, %s\n", got, last,
	       bad ? "TORN OR OUT OF ORDER" : "all whole");
	fflush(stdout); /* the child leaves with _exit(), which does not */
	td_follow_close(f);
	td_client_close(c);
	return bad || last != frames - 1 ? 1 : 0;
}

static int produce(struct td_client *c, const char *name, long frames)
{
	uint64_t size = WORDS * sizeof(uint32_t);
	const uint64_t shape[1] = {WORDS};
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U32,
			       .ndim = 1, .shape = shape};
	struct td_error err;

	for (long i = 0; i < frames; i++) {
		struct td_alloc *a;
		uint32_t *w;

		if (td_client_alloc_named(c, name, 1, &size, TD_ALLOC_STREAM,
					  &a, &err) < 0 ||
		    !(w = td_alloc_data(a, 0))) {
			fprintf(stderr, "producer: %s\n", err.reason);
			return 1;
		}
		for (size_t k = 0; k < WORDS; k++)
			w[k] = (uint32_t)i;
		if (td_client_publish_alloc(c, a, &p, NULL, &err) < 0) {
			fprintf(stderr, "producer: %s\n", err.reason);
			return 1;
		}
	}
	printf("producer: %ld frames written\n", frames);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s NAME [FRAMES]\n", argv[0]);
		return 2;
	}
	const char *name = argv[1];
	long frames = argc == 3 ? strtol(argv[2], NULL, 10) : 100;
	struct td_error err;
	struct td_client *c;
	int ready[2], status, rc;
	char r;

	if (frames < 1 || pipe(ready) < 0)
		return 2;
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		close(ready[0]);
		_exit(follower(name, frames, ready[1]));
	}
	close(ready[1]);
	if (read(ready[0], &r, 1) != 1) {
		fprintf(stderr, "producer: the follower did not start\n");
		waitpid(pid, NULL, 0);
		return 1;
	}
	close(ready[0]);
	if (td_client_connect(NULL, &c, &err) < 0) {
		fprintf(stderr, "producer: %s\n", err.reason);
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
		return 1;
	}
	rc = produce(c, name, frames);
	waitpid(pid, &status, 0);
	td_client_delete(c, name, NULL, NULL);
	td_client_close(c);
	return rc || !WIFEXITED(status) || WEXITSTATUS(status) ? 1 : 0;
}
