/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the access policy parser (daemon/policy.c): any
 * bytes are parsed; an accepted policy is queried for a few credentials
 * and names, then freed. A refused one must leave the policy empty and
 * name a line and a reason.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* policy.c logs through these; the fuzzer keeps quiet */
int td__log_level = TD_LOG_ERROR;
struct td__daemon *td__d;

void td__log(int level, const char *fmt, ...)
{
	(void)level;
	(void)fmt;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = {"", "a", "pub/x", "nobody/a",
					    "cam/0", "*"};
	struct td__policy pol;
	unsigned line = 0;
	const char *why = NULL;
	gid_t groups[2] = {65534, 0};

	if (td__policy_parse((const char *)data, size, &pol, &line, &why) <
	    0) {
		if (!why || !*why)
			abort();
		return 0;
	}
	for (uid_t uid = 0; uid < 3; uid++)
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			struct td__cred c = {uid ? 65534 : 0, uid, groups, 2};

			(void)td__policy_allows(&pol, &c, TD__PERM_READ,
						names[i], strlen(names[i]));
			(void)td__policy_allows(&pol, &c, TD__PERM_WRITE,
						names[i], strlen(names[i]));
			(void)td__policy_any(&pol, &c, TD__PERM_WRITE);
			(void)td__policy_allows(&pol, &c, TD__PERM_DMABUF,
						names[i], strlen(names[i]));
			(void)td__policy_quota(&pol, c.uid, 1);
			for (int k = 0; k < TD__LIM_COUNT; k++) {
				uint64_t v;

				(void)td__policy_limit(&pol, c.uid,
						       (enum td__lim)k, &v);
			}
		}
	td__policy_fini(&pol);
	return 0;
}
