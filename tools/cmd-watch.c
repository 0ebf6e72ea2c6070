/* SPDX-License-Identifier: MIT */
/* tensorctl watch: one line per PUBLISHED/DELETED event. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "td-json.h"
#include "tensorctl.h"

/*
 * With $TENSORD_RECONNECT=1 libtensord connects again after a daemon
 * restart and watches again, but the call during which the daemon went
 * away fails, and so does each try while none listens: wait and go on.
 */
static int daemon_away(int rc)
{
	const char *r = getenv("TENSORD_RECONNECT");

	if (!r || strcmp(r, "1") ||
	    (rc != -ECONNRESET && rc != -EPIPE && rc != -ENOENT &&
	     rc != -ECONNREFUSED))
		return 0;
	poll(NULL, 0, 100);
	return 1;
}

int cmd_watch(int argc, char **argv)
{
	const char *name;
	uint64_t count = 0, seen = 0, id;
	uint32_t flags = 0;
	struct td_error e = {0};
	struct td_client *c;
	enum { O_PREFIX = TCTL_OPT_FIRST_OWN, O_COUNT };
	static const struct option opts[] = {
		{"prefix", no_argument, NULL, O_PREFIX},
		{"count", required_argument, NULL, O_COUNT},
		TCTL_COMMON_OPTIONS};
	int rc, o, json;

	while ((o = tctl_getopt(argc, argv, "", opts, &rc)) != -1) {
		switch (o) {
		case O_PREFIX:
			flags |= TD_WATCH_PREFIX;
			break;
		case O_COUNT:
			if (tctl_opt_number("watch", "--count", optarg, false,
					    1, UINT64_MAX, "", &count))
				return TCTL_USAGE;
			break;
		default:
			return rc;
		}
	}
	if (argc - optind != 1)
		return tctl_operands("watch", argc, argv, 1,
				     "needs one NAME or PREFIX");
	name = argv[optind];
	json = tctl_json;
	rc = tctl_connect(&c);
	if (rc)
		return rc;
	rc = td_client_watch(c, name, flags, &id, &e);
	if (rc == -EINVAL && !(flags & TD_WATCH_PREFIX) &&
	    (!*name || name[strlen(name) - 1] == '/')) {
		/* `watch cam/` or `watch ''`: meant as a prefix, refused
		 * as a name (the empty one said only "name is empty") */
		td_client_close(c);
		return tctl_fail(TCTL_REFUSED, "daemon", EINVAL,
				 "%s: %s (to watch every name%s, add "
				 "--prefix)",
				 *name ? name : "''",
				 e.reason[0] ? e.reason : strerror(EINVAL),
				 *name ? " under it" : "");
	}
	if (rc < 0) {
		td_client_close(c);
		return tctl_refused_glob("watch", name, name, rc, &e,
					 "watch takes a NAME, or a PREFIX with "
					 "--prefix, not a pattern: watch "
					 "--prefix cam/ watches every name "
					 "under cam/",
					 NULL);
	}
	while (!count || seen < count) {
		struct td_event ev;
		const char *what;

		rc = td_client_next_event(c, -1, &ev, &e);
		if (rc < 0 && daemon_away(rc))
			continue;
		if (rc < 0)
			break;
		/* overflowed: the library had no memory for N events */
		what = ev.type == TD_EVENT_TYPE_PUBLISHED    ? "published"
		       : ev.type == TD_EVENT_TYPE_DELETED    ? "deleted"
		       : ev.type == TD_EVENT_TYPE_OVERFLOWED ? "overflowed"
							     : "reconnected";
		if (json) {
			printf("{\"event\":\"%s\",\"name\":", what);
			td_json_cstr(stdout, ev.name);
			printf(",\"version\":%llu}\n",
			       (unsigned long long)ev.version);
		} else {
			printf("%s %s %llu\n", what, ev.name,
			       (unsigned long long)ev.version);
		}
		/* one line per event, as it happens; an output that fails
		 * (a full disk) ends the watch: main() says why */
		if (tctl_stdout_error()) {
			td_client_close(c);
			return TCTL_REFUSED;
		}
		seen++;
	}
	td_client_close(c);
	return rc < 0 ? tctl_refused("watch", rc, &e) : TCTL_OK;
}
