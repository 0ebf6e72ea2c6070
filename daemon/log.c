/* SPDX-License-Identifier: MIT */
/*
 * What every daemon file reaches: the log (and its rate limit for what a
 * client can cause over and over) and the one daemon instance (set by
 * main.c). Kept apart from main.c so that no file depends on the
 * program's entry point.
 */
#include "daemon.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int td__log_level = TD_LOG_INFO;
struct td__daemon *td__d;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/*
 * One line per message, written at once (threads of the pool log too).
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
	fwrite(line, 1, o, stderr);
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
