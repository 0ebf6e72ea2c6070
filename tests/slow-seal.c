/* SPDX-License-Identifier: MIT */
/*
 * LD_PRELOAD shim for tests: a write seal (fcntl F_ADD_SEALS with
 * F_SEAL_WRITE) of a memfd whose name starts with $TD_SLOW_SEAL takes
 * $TD_SLOW_SEAL_MS milliseconds more (100 by default), as one does here
 * while something holds the memfd's pages, or for a memfd of many GiB,
 * but every time and for as long as the test says. test-stall.c runs
 * the daemon under it to see in which order the daemon's sealing
 * threads take their turns (daemon/sealer.c). With
 * $TD_SLOW_GET_SEALS_MS, F_GET_SEALS of such a memfd takes that long: a
 * request whose handling on the loop is slow, as long as the test says
 * (the loop's share of time per uid, daemon/tenant.c).
 *
 * The real calls are the next definitions (dlsym RTLD_NEXT).
 */
#undef _FILE_OFFSET_BITS
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The wait, when fd is a memfd named $TD_SLOW_SEAL... being write-sealed,
 * or, with $TD_SLOW_GET_SEALS_MS, asked for its seals */
static void slow(int fd, int cmd, void *arg)
{
	const char *prefix = getenv("TD_SLOW_SEAL");
	const char *get = getenv("TD_SLOW_GET_SEALS_MS");
	const char *ms = cmd == F_GET_SEALS ? get : getenv("TD_SLOW_SEAL_MS");
	long n = ms ? atol(ms) : 100;
	char link[64], path[512];
	struct timespec ts = {n / 1000, (n % 1000) * 1000000};
	ssize_t len;

	if (!(cmd == F_ADD_SEALS && ((int)(intptr_t)arg & F_SEAL_WRITE)) &&
	    !(cmd == F_GET_SEALS && get))
		return;
	if (!prefix || !prefix[0])
		return;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	len = readlink(link, path, sizeof(path) - 1);
	if (len <= 0)
		return;
	path[len] = 0;
	if (!strncmp(path, "/memfd:", 7) &&
	    !strncmp(path + 7, prefix, strlen(prefix)))
		while (nanosleep(&ts, &ts) < 0)
			;
}

/* glibc's fcntl takes its third argument as a pointer whatever cmd is */
#define SHIM(name)                                                             \
	int name(int fd, int cmd, ...)                                         \
	{                                                                      \
		static int (*real)(int, int, ...);                             \
		va_list ap;                                                    \
		void *arg;                                                     \
                                                                               \
		if (!real)                                                     \
			*(void **)&real = dlsym(RTLD_NEXT, #name);             \
		va_start(ap, cmd);                                             \
		arg = va_arg(ap, void *);                                      \
		va_end(ap);                                                    \
		slow(fd, cmd, arg);                                            \
		return real(fd, cmd, arg);                                     \
	}

SHIM(fcntl)
SHIM(fcntl64)
