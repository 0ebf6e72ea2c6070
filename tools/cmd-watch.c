/* SPDX-License-Identifier: MIT */
/* tensorctl watch: one line per PUBLISHED/DELETED event. */
#include <stdio.h>
#include <string.h>

#include "td-json.h"
#include "tensorctl.h"

#define WATCH_USAGE                                                           \
	"usage: tensorctl watch NAME|PREFIX [--prefix] [--count N] [--json]\n"

int cmd_watch(int argc, char **argv)
{
	const char *name = NULL;
	uint64_t count = 0, seen = 0, id;
	uint32_t flags = 0;
	struct td_error e = {0};
	struct td_client *c;
	int rc, json = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--prefix")) {
			flags |= TD_WATCH_PREFIX;
		} else if (!strcmp(a, "--json")) {
			json = 1;
		} else if (!strcmp(a, "--count") && i + 1 < argc) {
			if (tctl_parse_u64(argv[++i], &count) || !count)
				goto usage;
		} else if (!strcmp(a, "--socket") && i + 1 < argc) {
			tctl_socket = argv[++i];
		} else if (a[0] == '-' || name) {
			goto usage;
		} else {
			name = a;
		}
	}
	if (!name)
		goto usage;
	rc = tctl_connect(&c);
	if (rc)
		return rc;
	rc = td_client_watch(c, name, flags, &id, &e);
	if (rc < 0) {
		td_client_close(c);
		return tctl_refused(name, rc, &e);
	}
	while (!count || seen < count) {
		struct td_event ev;
		const char *what;

		rc = td_client_next_event(c, -1, &ev, &e);
		if (rc < 0)
			break;
		what = ev.type == TD_EVENT_TYPE_PUBLISHED ? "published"
							  : "deleted";
		if (json) {
			printf("{\"event\":\"%s\",\"name\":", what);
			td_json_cstr(stdout, ev.name);
			printf(",\"version\":%llu}\n",
			       (unsigned long long)ev.version);
		} else {
			printf("%s %s %llu\n", what, ev.name,
			       (unsigned long long)ev.version);
		}
		fflush(stdout); /* one line per event, as it happens */
		seen++;
	}
	td_client_close(c);
	return rc < 0 ? tctl_refused("watch", rc, &e) : TCTL_OK;
usage:
	fputs(WATCH_USAGE, stderr);
	return TCTL_USAGE;
}
