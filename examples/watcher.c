/* SPDX-License-Identifier: MIT */
/*
 * watcher: print publish and delete events under a name prefix.
 *
 *   watcher PREFIX [COUNT [TIMEOUT_MS]]
 *
 * Exits after COUNT events (default: never), or with status 1 when no
 * event came for TIMEOUT_MS (default: wait forever). Prints "watching"
 * once the watch is in place, so a script can start producers then.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tensord/tensord.h>

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: %s PREFIX [COUNT [TIMEOUT_MS]]\n",
			argv[0]);
		return 2;
	}
	long count = argc > 2 ? strtol(argv[2], NULL, 10) : -1;
	int timeout_ms = argc > 3 ? atoi(argv[3]) : -1;

	struct td_error err;
	struct td_client *c;
	uint64_t id;
	if (td_client_connect(NULL, &c, &err) < 0 ||
	    td_client_watch(c, argv[1], TD_WATCH_PREFIX, &id, &err) < 0) {
		fprintf(stderr, "watcher: %s\n", err.reason);
		return 1;
	}
	printf("watching %s*\n", argv[1]);
	fflush(stdout);

	int rc = 0;
	for (long n = 0; count < 0 || n < count; n++) {
		struct td_event ev;
		rc = td_client_next_event(c, timeout_ms, &ev, &err);
		if (rc < 0) {
			fprintf(stderr, "watcher: %s (%s)\n", strerror(-rc),
				err.reason);
			break;
		}
		printf("%s %s version %llu\n",
		       ev.type == TD_EVENT_TYPE_PUBLISHED ? "published"
							   : "deleted",
		       ev.name, (unsigned long long)ev.version);
		fflush(stdout);
	}
	td_client_close(c);
	return rc < 0 ? 1 : 0;
}
