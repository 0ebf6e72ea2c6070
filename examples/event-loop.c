/* SPDX-License-Identifier: MIT */
/*
 * event-loop: one epoll loop, no threads, serving a watch and a chain of
 * asynchronous GETs on the same connection, beside a timer of its own.
 *
 *   event-loop NAME COUNT
 *
 * Prints each publish event under NAME's watch, and fetches each newer
 * version with td_client_get_newer_async() (a GET the daemon parks until
 * a version comes), until version COUNT was read and its event printed
 * (the GET's answer and the event are two messages: either may come
 * first). td_client_fd() polls
 * readable whenever the handle has work, even work queued while another
 * call waited; td_client_process() runs the callbacks. The same fd goes
 * into libuv (uv_poll_t), GLib (g_unix_fd_add) or asyncio (add_reader).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <tensord/tensord.h>

static const char *name;
static uint64_t want, read_v, seen; /* versions asked, read, announced */
static int done, failed;

static void on_event(struct td_client *c, const struct td_event *ev,
		     void *ud)
{
	(void)c;
	(void)ud;
	printf("event: %s %s version %llu\n",
	       ev->type == TD_EVENT_TYPE_PUBLISHED ? "published" : "deleted",
	       ev->name, (unsigned long long)ev->version);
	if (ev->version > seen)
		seen = ev->version;
	if (read_v >= want && seen >= read_v)
		done = 1;
}

static void on_tensor(struct td_client *c, int status, struct td_tensor *t,
		      const struct td_error *err, void *ud)
{
	(void)ud;
	if (status < 0) {
		fprintf(stderr, "event-loop: get %s: %s (%s)\n", name,
			strerror(-status), err->reason);
		failed = done = 1;
		return;
	}
	uint64_t v = td_tensor_version(t);
	printf("got %s version %llu, %llu bytes\n", name,
	       (unsigned long long)v,
	       (unsigned long long)td_tensor_bytes(t));
	td_tensor_release(t);
	if (v >= want) {
		read_v = v;
		done = seen >= v; /* else its event is still on the way */
		return;
	}
	/* Ask for the next one; the answer comes through the loop again. */
	struct td_error e;
	if (td_client_get_newer_async(c, name, v, -1, on_tensor, NULL, &e) < 0)
		failed = done = 1;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s NAME COUNT\n", argv[0]);
		return 2;
	}
	name = argv[1];
	want = strtoull(argv[2], NULL, 10);
	setvbuf(stdout, NULL, _IOLBF, 0);

	struct td_error err;
	struct td_client *c;
	uint64_t id;
	if (td_client_connect(NULL, &c, &err) < 0 ||
	    td_client_set_event_handler(c, on_event, NULL) < 0 ||
	    td_client_watch(c, name, 0, &id, &err) < 0 ||
	    td_client_get_newer_async(c, name, 0, -1, on_tensor, NULL,
				      &err) < 0) {
		fprintf(stderr, "event-loop: %s\n", err.reason);
		return 1;
	}

	/* The application's own work: a 1 s tick in the same loop. */
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	struct itimerspec tick = {{1, 0}, {1, 0}};
	timerfd_settime(tfd, 0, &tick, NULL);

	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = td_client_fd(c)};
	epoll_ctl(ep, EPOLL_CTL_ADD, ev.data.fd, &ev);
	ev.data.fd = tfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
	printf("waiting for %s\n", name);

	while (!done) {
		struct epoll_event got[2];
		int n = epoll_wait(ep, got, 2, -1);
		for (int i = 0; i < n; i++) {
			if (got[i].data.fd == tfd) {
				uint64_t ticks;
				if (read(tfd, &ticks, sizeof(ticks)) > 0)
					fprintf(stderr, "tick\n");
			} else if (td_client_process(c, &err) < 0) {
				fprintf(stderr, "event-loop: %s\n", err.reason);
				failed = done = 1;
			}
		}
	}
	close(ep);
	close(tfd);
	td_client_close(c);
	return failed;
}
