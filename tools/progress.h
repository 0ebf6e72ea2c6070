/* SPDX-License-Identifier: MIT */
/*
 * A progress line on stderr for transfers that last: shown only when
 * stderr is a terminal, not under --json, and only once a transfer has
 * taken about a second; redrawn at most ten times a second, erased at the
 * end. With TERM unset, empty or "dumb" no escape sequence is sent: the
 * line is overwritten with spaces.
 */
#ifndef TD_TOOLS_PROGRESS_H
#define TD_TOOLS_PROGRESS_H

#include <stdint.h>
#include <time.h>

struct tctl_progress {
	const char *label;
	uint64_t total; /* 0: unknown */
	uint64_t done;
	struct timespec start, last;
	int enabled, shown;
	int plain;    /* TERM dumb or unset: spaces, not ESC [ K */
	size_t width; /* the longest line drawn, for plain erasing */
};

void tctl_progress_start(struct tctl_progress *p, const char *label,
			 uint64_t total);
void tctl_progress_add(struct tctl_progress *p, uint64_t n);
void tctl_progress_end(struct tctl_progress *p);

#endif
