/* SPDX-License-Identifier: MIT */
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tensorctl.h"

#define SHOW_AFTER_NS 1000000000LL
#define REDRAW_NS 100000000LL

static long long ns_since(const struct timespec *a, const struct timespec *b)
{
	return (b->tv_sec - a->tv_sec) * 1000000000LL +
	       (b->tv_nsec - a->tv_nsec);
}

void tctl_progress_start(struct tctl_progress *p, const char *label,
			 uint64_t total)
{
	p->label = label;
	p->total = total;
	p->done = 0;
	p->shown = 0;
	p->enabled = !tctl_json && isatty(STDERR_FILENO);
	if (p->enabled)
		clock_gettime(CLOCK_MONOTONIC, &p->start);
}

void tctl_progress_add(struct tctl_progress *p, uint64_t n)
{
	struct timespec now;
	char a[32], b[32];

	p->done += n;
	if (!p->enabled)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (ns_since(&p->start, &now) < SHOW_AFTER_NS ||
	    (p->shown && ns_since(&p->last, &now) < REDRAW_NS))
		return;
	p->last = now;
	p->shown = 1;
	/* the label is a name or path the user typed: escaped (tctl_say) */
	fputs("\r\033[K", stderr);
	tctl_text_escaped(stderr, p->label, strlen(p->label));
	if (p->total)
		fprintf(stderr, ": %s of %s (%u%%)", tctl_size(a, p->done),
			tctl_size(b, p->total),
			(unsigned)(p->done * 100.0 / (double)p->total));
	else
		fprintf(stderr, ": %s", tctl_size(a, p->done));
}

void tctl_progress_end(struct tctl_progress *p)
{
	if (p->shown)
		fputs("\r\033[K", stderr);
	p->shown = 0;
	p->enabled = 0;
}
