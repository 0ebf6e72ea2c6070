/* SPDX-License-Identifier: MIT */
/*
 * Who was shown a shared mapping (a ring's slots, a followed name's bell):
 * the credentials of every connection handed its descriptor, once each,
 * so that a policy reload can tell whether one of them may no longer read
 * what the mapping goes on showing (docs/policy.md, "Reloading: SIGHUP").
 * A mapping cannot be taken back from a process; the daemon stops writing
 * into it instead (ring.c, follow.c: td__*_policy_changed).
 */
#ifndef TD_DAEMON_SHOWN_H
#define TD_DAEMON_SHOWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon.h"

/* struct td__shown is daemon.h's (a trigger page holds one) */

/* p's credentials, unless s has them already or p's uid is the
 * daemon's own (the policy never binds it). No heap call for a
 * connection whose credentials s holds. True when s changed: they were
 * new to it (or could not be kept). */
bool td__shown_add(struct td__shown *s, const struct td__peer *p);
/* Whether every credential in s may still `perm` the name under the
 * policy in force (true without a policy). */
bool td__shown_may(const struct td__shown *s, unsigned perm,
		   const char *name, size_t len);
void td__shown_fini(struct td__shown *s);

#endif
