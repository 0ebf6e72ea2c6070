/* SPDX-License-Identifier: MIT */
/*
 * libtensord: STATUS's per-uid figures of the `pinned` limit
 * (docs/policy.md §5): a part of <tensord/tensord.h>, which includes it
 * (and which it includes, for the handle and the conventions). Include
 * either.
 *
 * Two figures with "pinned" in their names, which are not the same:
 *
 *   td_status_uid.pinned      the bytes of the uid's own current versions
 *                             published with TD_PUBLISH_PIN (they are
 *                             never evicted); no limit is checked on it.
 *   td_status_pinned.use      the bytes counted against the uid's
 *                             `pinned` limit: other uids' versions (and
 *                             rings) it holds by a lease, or may take as
 *                             a follower; GET, FOLLOW and RING_SUBSCRIBE
 *                             are refused with -EDQUOT past .limit.
 */
#ifndef TENSORD_STATUS_H
#define TENSORD_STATUS_H

#include <tensord/tensord.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A uid's use of its `pinned` limit (docs/policy.md §5). */
struct td_status_pinned {
	uint64_t use;   /* bytes counted against the limit now */
	uint64_t limit; /* the limit in force, 0 = none */
};

/*
 * Uid row i of s (i < s->uid_count) into *out. Returns 0, -EINVAL (no
 * such row, a NULL argument) or -EOPNOTSUPP (a daemon too old to say;
 * *out zeroed). With a daemon that says, s->uids holds, beside the uids
 * charged bytes, a row for every uid with pinned figures to show: bytes
 * against its pinned limit (a reader that published nothing included),
 * a policy limit line of its own, or the asking uid.
 */
TD_EXPORT int td_status_uid_pinned(const struct td_status *s, size_t i,
				   struct td_status_pinned *out);

#ifdef __cplusplus
}
#endif

#endif
