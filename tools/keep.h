/* SPDX-License-Identifier: MIT */
/*
 * What a load (.tgm, a stream, Hurray) or a zarr import replaced, kept so
 * that a roll back puts it back (docs/tensorctl.md, "All or nothing").
 *
 * Before each publish, tctl_keep_before() leases the name's current
 * version (STAT, then GET of that version: its bytes stay in the daemon,
 * nothing is copied) and makes the publish conditional on it
 * (TD_PUBLISH_IF, that version, or 0 when the name has none), so the
 * version held is exactly the one replaced. tctl_keep_after() takes the
 * publish's answer: kept, or TCTL_KEEP_AGAIN when the name changed in
 * between (the caller fills a new loan and publishes again), or the
 * refusal, reported. A version that cannot be held (a uid's `leases` or
 * `pinned` limit, no descriptors left, a plane the CPU cannot read) is
 * not replaced: the load fails there and is rolled back, so that a
 * failure never loses a version the store had. tctl_keep_roll_back()
 * undoes every publish, newest first: a name that had a version gets a
 * copy of it published (a new version number) only while this load's
 * version is still current; one that had none is deleted under the same
 * condition (td_client_delete_version()).
 *
 * Not held: with --partial (nothing is rolled back), --no-replace
 * (nothing replaced: the publish is conditional on no version), a ring
 * (refused anyway), or a daemon without TD_WIRE_FEAT_PUB_IF (said once:
 * replaced versions are then not restored, as before).
 */
#ifndef TCTL_KEEP_H
#define TCTL_KEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct td_client;
struct td_publish;
struct td_tensor;
struct td_error;
struct json_object;

/* tctl_keep_after(): publish again (a fresh loan, the same bytes) */
#define TCTL_KEEP_AGAIN 100

struct tctl_kept {
	char *name;
	uint64_t ours;         /* the version this load published */
	struct td_tensor *old; /* what it replaced, leased; NULL: none */
	uint32_t old_flags;    /* its STAT flags (TD_PUBLISH_PIN) */
};

struct tctl_keep {
	bool hold, no_replace;
	/* the publish under way: carries our condition; of a name this
	 * uid cannot read */
	bool cond, blind;
	unsigned tries;
	struct tctl_kept *v; /* every publish so far, in order */
	size_t n, cap;
	struct td_tensor *cur; /* held for the publish under way */
	uint32_t cur_flags;
};

/* partial: nothing rolled back, nothing held; no_replace: the publish
 * carries "only while the name has no version". */
void tctl_keep_init(struct tctl_keep *k, bool partial, bool no_replace);
/* Ready p (its name set) for publishing. TCTL_OK or reported. */
int tctl_keep_before(struct tctl_keep *k, struct td_client *c,
		     struct td_publish *p);
/* The publish of name answered rc (e, version): TCTL_OK (kept),
 * TCTL_KEEP_AGAIN, or reported (tctl_pub_refused(): TCTL_SKIPPED with
 * no_replace and the name added to sk). */
int tctl_keep_after(struct tctl_keep *k, struct td_client *c,
		    const char *name, int rc, const struct td_error *e,
		    uint64_t version, struct json_object *sk);
/*
 * Undo every publish kept, newest first: how many were deleted again
 * (the caller says it, as before). Those put back and those that could
 * not be are said here, on stderr ("tensorctl: 2 replaced version(s) put
 * back, as new versions"; "tensorctl: x: version 7, which this load
 * replaced, not put back: REASON"), and under --json added to the held
 * error as "restored":[{"name","version","replaced"}] and
 * "not_restored":[NAME,...].
 */
size_t tctl_keep_roll_back(struct tctl_keep *k, struct td_client *c);
/* Release what is held; idempotent. */
void tctl_keep_fini(struct tctl_keep *k);

#endif
