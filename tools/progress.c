/* SPDX-License-Identifier: MIT */
#include "progress.h"

#include <stdio.h>
#include <stdlib.h>
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
	p->width = 0;
	/* TERM unset, empty or "dumb" (an Emacs shell, a serial line): no
	 * escape sequence, the line overwritten with spaces instead */
	{
		const char *term = getenv("TERM");

		p->plain = !term || !*term || !strcmp(term, "dumb");
	}
	if (p->enabled)
		clock_gettime(CLOCK_MONOTONIC, &p->start);
}

void tctl_progress_add(struct tctl_progress *p, uint64_t n)
{
	struct timespec now;
	char a[32], b[32], *text = NULL;
	size_t len = 0;
	FILE *line;

	p->done += n;
	if (!p->enabled)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (ns_since(&p->start, &now) < SHOW_AFTER_NS ||
	    (p->shown && ns_since(&p->last, &now) < REDRAW_NS))
		return;
	p->last = now;
	p->shown = 1;
	line = open_memstream(&text, &len);
	if (!line)
		return;
	/* the label is a name or path the user typed: escaped (tctl_say) */
	tctl_text_escaped(line, p->label, strlen(p->label));
	if (p->total)
		fprintf(line, ": %s of %s (%u%%)", tctl_size(a, p->done),
			tctl_size(b, p->total),
			(unsigned)(p->done * 100.0 / (double)p->total));
	else
		fprintf(line, ": %s", tctl_size(a, p->done));
	if (fclose(line) || !text)
		return;
	if (p->plain) /* spaces over what a longer line left */
		fprintf(stderr, "\r%s%*s", text,
			len < p->width ? (int)(p->width - len) : 0, "");
	else
		fprintf(stderr, "\r\033[K%s", text);
	if (len > p->width)
		p->width = len;
	free(text);
}

void tctl_progress_end(struct tctl_progress *p)
{
	if (p->shown && p->plain)
		fprintf(stderr, "\r%*s\r", (int)p->width, "");
	else if (p->shown)
		fputs("\r\033[K", stderr);
	p->shown = 0;
	p->enabled = 0;
}
