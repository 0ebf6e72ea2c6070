/* SPDX-License-Identifier: MIT */
/*
 * What every daemon file reaches: the log and the one daemon instance
 * (set by main.c). Kept apart from main.c so that no file depends on the
 * program's entry point.
 */
#include "daemon.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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


int td__log_level_parse(const char *name)
{
	for (int i = 0; i < 4; i++)
		if (!strcmp(name, level_names[i]))
			return i;
	return -1;
}
