/* SPDX-License-Identifier: MIT */
/*
 * LD_PRELOAD shim for tests: raises a signal in the process just before
 * it opens one path for writing, once. $TD_RAISE_BEFORE_OPEN is
 * "SIGNO:PATH". It makes the moment a race would need (a signal caught
 * after the program's last check and before a blocking open) happen
 * every time (tests/test-tensorctl.c: the open of a FIFO waits for a
 * reader, and a signal caught just before it must not be lost).
 *
 * The real open is the next definition (dlsym RTLD_NEXT). With
 * _FILE_OFFSET_BITS=64, as meson builds, callers reach open64; here
 * the two names are kept apart.
 */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

static int fired;

static void maybe_raise(const char *path, int flags)
{
	const char *spec = getenv("TD_RAISE_BEFORE_OPEN");
	char *colon;
	long sig;

	if (fired || !spec || (flags & O_ACCMODE) != O_WRONLY)
		return;
	sig = strtol(spec, &colon, 10);
	if (*colon != ':' || strcmp(colon + 1, path))
		return;
	fired = 1;
	raise((int)sig);
}

static int mode_of(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE
		       ? va_arg(ap, int)
		       : 0;
}

#define WRAP(name)                                                            \
	int name(const char *path, int flags, ...)                            \
	{                                                                     \
		static int (*real)(const char *, int, ...);                   \
		va_list ap;                                                   \
		int mode;                                                     \
                                                                              \
		va_start(ap, flags);                                          \
		mode = mode_of(flags, ap);                                    \
		va_end(ap);                                                   \
		if (!real) /* POSIX's way past ISO C's pointer rule */        \
			*(void **)&real = dlsym(RTLD_NEXT, #name);            \
		maybe_raise(path, flags);                                     \
		return real(path, flags, mode);                               \
	}

WRAP(open)
WRAP(open64)
