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

void td__log(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > td__log_level)
		return;
	fprintf(stderr, "tensord: %s: ", level_names[level]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
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
