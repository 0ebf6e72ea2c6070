/* SPDX-License-Identifier: MIT */
/*
 * What every daemon file reaches: the log (and its rate limit for what a
 * client can cause over and over) and the one daemon instance (set by
 * main.c). Kept apart from main.c so that no file depends on the
 * program's entry point.
 */
#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int td__log_level = TD_LOG_INFO;
struct td__daemon *td__d;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/*
 * Where lines go. On a terminal or a file, stderr as it is. On a socket
 * (systemd's StandardError=journal) or a pipe, without waiting: a
 * journald or a reader that stops reading must not stop the daemon with
 * it (a write to a full socket waits, and the loop with it). A line
 * that does not fit is dropped and counted; the next one written says
 * how many went. A line only partly taken keeps its rest, written
 * before anything else, so that no line is cut.
 */
static struct {
	pthread_mutex_t lock;
	pthread_once_t once;
	int fd;      /* our own non-blocking open of a pipe; -1 */
	bool sock;   /* stderr is a socket: send() with MSG_DONTWAIT */
	char rest[4 * 2048 + 64 + 128];
	size_t nrest;
	unsigned long dropped;
} out = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_ONCE_INIT, -1, false, "", 0, 0};

static void out_init(void)
{
	struct stat st;

	if (fstat(2, &st) < 0)
		return;
	if (S_ISSOCK(st.st_mode))
		out.sock = true;
	else if (S_ISFIFO(st.st_mode)) /* a description of our own */
		out.fd = open("/proc/self/fd/2",
			      O_WRONLY | O_NONBLOCK | O_CLOEXEC);
}

/* Bytes of p taken now (maybe 0), or -1 on an error other than full. */
static ssize_t out_try(const char *p, size_t n)
{
	ssize_t w;

	do
		w = out.sock ? send(2, p, n, MSG_DONTWAIT | MSG_NOSIGNAL)
			     : write(out.fd, p, n);
	while (w < 0 && errno == EINTR);
	if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	return w;
}

/* What is left of a line over the last try; false: still not all out. */
static bool out_rest(void)
{
	while (out.nrest) {
		ssize_t w = out_try(out.rest, out.nrest);

		if (w < 0) /* gone: nothing more will be read */
			out.nrest = 0;
		if (w <= 0)
			return w < 0;
		memmove(out.rest, out.rest + w, out.nrest - (size_t)w);
		out.nrest -= (size_t)w;
	}
	return true;
}

/* Write a line or keep its rest: false when none of it was taken. */
static bool out_line(const char *p, size_t n)
{
	ssize_t w = out_try(p, n);

	if (w <= 0)
		return w < 0; /* an error: nobody reads; not counted */
	if ((size_t)w < n && n - (size_t)w <= sizeof(out.rest)) {
		memcpy(out.rest, p + w, n - (size_t)w);
		out.nrest = n - (size_t)w;
	}
	return true;
}

static void log_write(const char *line, size_t n)
{
	char note[128];

	pthread_once(&out.once, out_init);
	if (!out.sock && out.fd < 0) {
		fwrite(line, 1, n, stderr);
		return;
	}
	pthread_mutex_lock(&out.lock);
	if (out.dropped && out_rest()) {
		int k = snprintf(note, sizeof(note),
				 "tensord: warn: %lu log lines dropped: "
				 "stderr was not read\n",
				 out.dropped);

		if (out_line(note, (size_t)k))
			out.dropped = 0;
	}
	/* a line goes out whole after everything before it, or not at all */
	if (out.dropped || !out_rest() || !out_line(line, n))
		out.dropped++;
	pthread_mutex_unlock(&out.lock);
}

/*
 * One line per message, written at once (under out.lock; only the loop's
 * thread logs now, td-closer does not).
 * What a message carries from outside (a passed fd's name, a tensor's
 * name, a path) may hold control bytes: each is written as \xNN, so no
 * input splits a line or forges one of its own.
 */
void td__log(int level, const char *fmt, ...)
{
	char msg[2048], line[sizeof(msg) * 4 + 64];
	size_t o, len;
	va_list ap;
	int n;

	if (level > td__log_level)
		return;
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	len = (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1;
	o = (size_t)snprintf(line, 64, "tensord: %s: ", level_names[level]);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)msg[i];

		if (c < 0x20 || c == 0x7f)
			o += (size_t)snprintf(line + o, 5, "\\x%02x", c);
		else
			line[o++] = (char)c;
	}
	if ((size_t)n > len) {
		memcpy(line + o, " [...]", 6);
		o += 6;
	}
	line[o++] = '\n';
	log_write(line, o);
}

bool td__ratelimit_ok(struct td__ratelimit *r, unsigned interval_ms)
{
	struct timespec ts;
	uint64_t now;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	if (r->next_ms && now < r->next_ms) {
		r->suppressed++;
		return false;
	}
	r->next_ms = now + interval_ms;
	return true;
}

int td__log_level_parse(const char *name)
{
	for (int i = 0; i < 4; i++)
		if (!strcmp(name, level_names[i]))
			return i;
	return -1;
}
