/* SPDX-License-Identifier: MIT */
/*
 * Reading a snapshot back at start (docs/snapshot.md), before the server
 * starts. Drives the Hurray reader core (proto/hrry.h) through the I/O
 * engine: header, trailer, index and KV are validated (§13) before any
 * tensor is read, each tensor's bytes are copied through the bounce
 * buffers (snapshot-buf.c) into a fresh memfd, and each version goes
 * through the PUBLISH checks (td__store_restore), like the fd store's
 * restore. A file that does not open is moved aside.
 */
#include "snapshot-int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bytes.h"
#include "os.h"
#include "sd.h"
#include "store.h" /* td__acct_over_max */

struct reader {
	int fd;
	uint64_t format; /* tensord.snapshot: SNAP_FORMAT or _OLD */
	struct td_hrry_rcore c;
	void **bufs; /* what the core borrows */
	size_t nbufs;
	/* a read of the file failed past its KV (a tensor's descriptor or
	 * bytes): no sign of damage, the restore stops (td__snap_restore) */
	int read_err;
	/*
	 * a memfd for a tensor's bytes could not be made or filled (no
	 * room: a tmpfs or memfd size limit, a memory cgroup; no
	 * descriptor): nothing wrong with the version either, and the
	 * restore stops the same way
	 */
	int mem_err;
};

static void *reader_keep(struct reader *rd, uint64_t len)
{
	void **b = realloc(rd->bufs, (rd->nbufs + 1) * sizeof(*b));
	void *p;

	if (!b)
		return NULL;
	rd->bufs = b;
	p = malloc(len ? (size_t)len : 1);
	if (p)
		rd->bufs[rd->nbufs++] = p;
	return p;
}

static void reader_fini(struct reader *rd)
{
	for (size_t i = 0; i < rd->nbufs; i++)
		free(rd->bufs[i]);
	free(rd->bufs);
	if (rd->fd >= 0)
		close(rd->fd);
}

/* Open: header, trailer, index, KV (§13 steps 1-5). 0 or -errno. */
static int reader_open(struct reader *rd, uint64_t size,
		       struct td_hrry_err *e)
{
	struct td_hrry_need need;
	int rc;

	td_hrry_rcore_init(&rd->c, size);
	while ((rc = td_hrry_rcore_step(&rd->c, &need, e)) ==
	       TD_HRRY_STEP_NEED) {
		void *buf;

		if (need.len > SIZE_MAX)
			return td__hrry_fail(e, TD_HRRY_E_NO_MEMORY, 0,
					     "too large for memory");
		buf = reader_keep(rd, need.len);
		if (!buf)
			return td__hrry_fail(e, TD_HRRY_E_NO_MEMORY, 0,
					     "out of memory");
		if (need.kind == TD_HRRY_NEED_READ) {
			rc = td__snap_read_range(rd->fd, buf, need.len,
						 need.offset);
			if (rc < 0) {
				bool eof = rc == -ENODATA;

				*e = (struct td_hrry_err){
					eof ? TD_HRRY_E_UNEXPECTED_EOF
					    : TD_HRRY_E_IO,
					rc, need.offset, "read failed"};
				return rc;
			}
		}
		rc = td_hrry_rcore_supply(&rd->c, buf, need.len, e);
		if (rc < 0)
			return rc;
	}
	return rc;
}


struct rec {
	const char *name;
	size_t name_len;
	bool have[F_COUNT_];
	struct td_hrry_kv_value v[F_COUNT_];
};

static void close_all(int *fds, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

/*
 * One plane back: the Hurray tensor `hname` (checked by the core) into a
 * new sealed memfd of exactly `size` bytes; its read-only reopen in *out.
 * crcs: its checksums, one per CHUNK (NULL: a file of format 1).
 */
static int restore_plane(struct reader *rd, const char *hname, size_t hlen,
			 uint64_t size, const uint8_t *crcs, int *out,
			 char *why, size_t cap)
{
	struct td_hrry_err e = {0};
	struct td_hrry_entry ent;
	struct td_hrry_desc d;
	uint8_t *dbuf = NULL;
	uint64_t idx, off, len, bad = 0;
	const char *pwhy = NULL;
	bool src_failed = false;
	int fd = -1, rc;

	rc = td_hrry_rcore_find(&rd->c, hname, hlen, &idx, &e);
	if (rc < 0)
		goto herr;
	td_hrry_rcore_entry(&rd->c, idx, &ent);
	rc = td_hrry_desc_len_check(&ent, &e);
	if (rc < 0)
		goto herr;
	dbuf = malloc(ent.descriptor_length);
	if (!dbuf) {
		rc = -ENOMEM;
		goto err;
	}
	rc = td__snap_read_range(rd->fd, dbuf, ent.descriptor_length,
				 ent.descriptor_offset);
	if (rc < 0) {
		rd->read_err = rc;
		snprintf(why, cap, "reading the descriptor of \"%.*s\": %s",
			 (int)hlen, hname, strerror(-rc));
		goto out;
	}
	rc = td_hrry_rcore_check_desc(&rd->c, &ent, dbuf, &d, &e);
	if (rc == 0)
		rc = td_hrry_rcore_check_supported(&ent, &d, &e);
	if (rc < 0)
		goto herr;
	if (d.buffer_count != 1 || d.buffers[0].byte_size != size) {
		rc = -EINVAL;
		snprintf(why, cap, "Hurray tensor \"%.*s\" holds %" PRIu64
				   " bytes, the fd table says %" PRIu64,
			 (int)hlen, hname,
			 d.buffer_count ? d.buffers[0].byte_size : 0, size);
		goto out;
	}
	td_hrry_buffer_range(&ent, &d, rd->c.alignment, 0, &off, &len);
	rc = td__plane_create(size, true, &fd, &pwhy);
	if (rc < 0) {
		rd->mem_err = rc;
		snprintf(why, cap, "no room for \"%.*s\": a memfd of %" PRIu64
				   " bytes: %s: %s",
			 (int)hlen, hname, size, pwhy, strerror(-rc));
		goto out;
	}
	/* never mapped here: written through the bounce buffers */
	rc = td__snap_copy_range(rd->fd, off, fd, 0, len, crcs, &bad,
				 &src_failed);
	if (rc == -EBADMSG) {
		snprintf(why, cap, "bytes %" PRIu64 "-%" PRIu64 " of Hurray "
				   "tensor \"%.*s\" do not match their "
				   "checksum (KV #crc): the file is damaged",
			 bad, (bad + CHUNK < len ? bad + CHUNK : len) - 1,
			 (int)hlen, hname);
		goto out;
	}
	if (rc < 0) {
		if (src_failed)
			rd->read_err = rc;
		else
			rd->mem_err = rc;
		snprintf(why, cap, "%s \"%.*s\": %s",
			 src_failed ? "reading" : "copying into a memfd",
			 (int)hlen, hname, strerror(-rc));
		goto out;
	}
	rc = td__memfd_seal_publish(fd, &pwhy);
	if (rc == 0)
		rc = td__plane_readonly(fd, out, &pwhy);
	if (rc < 0) {
		rd->mem_err = rc;
		goto perr;
	}
	goto out;
herr:
	snprintf(why, cap, "Hurray tensor \"%.*s\": %s at byte %" PRIu64
			   ": %s",
		 (int)hlen, hname, td_hrry_error_name(e.kind), e.offset,
		 e.reason ? e.reason : "invalid");
	goto out;
perr:
	snprintf(why, cap, "\"%.*s\": %s", (int)hlen, hname, pwhy);
	goto out;
err:
	snprintf(why, cap, "%s", strerror(-rc));
out:
	free(dbuf);
	if (fd >= 0)
		close(fd);
	return rc;
}

/*
 * Check a version's KV values against the first value of its #crc, before
 * any is believed (a flipped bit in a dtype or a shape would otherwise
 * restore as another tensor); *crcs: its planes' checksums then. 0, or
 * -EBADMSG with the reason.
 */
static int rec_crc(const struct rec *r, const uint64_t *fsize, uint32_t n,
		   const uint8_t **crcs, char *why, size_t cap)
{
	uint64_t want = td__snap_crc_len(fsize, n);
	const uint8_t *c = r->v[F_CRC].data;

	if (r->v[F_CRC].data_len != want) {
		snprintf(why, cap, "KV key #crc has %" PRIu64 " bytes, its fd "
				   "table needs %" PRIu64,
			 (uint64_t)r->v[F_CRC].data_len, want);
		return -EBADMSG;
	}
	if (td__le32(c) !=
	    td__snap_meta_crc(r->name, r->name_len, r->v[F_VERSION].u64_value,
			      r->v[F_FLAGS].u64_value, r->v[F_BLOB].data,
			      (uint32_t)r->v[F_BLOB].data_len,
			      r->have[F_META] ? r->v[F_META].data : NULL,
			      r->have[F_META] ? (uint32_t)r->v[F_META].data_len
					      : 0,
			      fsize, n)) {
		snprintf(why, cap, "its KV values do not match their checksum "
				   "(KV #crc): the file is damaged");
		return -EBADMSG;
	}
	*crcs = c + 4;
	return 0;
}

/*
 * Whether the version's planes (file sizes from its KV, fence aside)
 * fit under --max-bytes, and its n descriptors outside the reserve:
 * 0, -ENOSPC or -EMFILE with why. Asked before any plane is made: the
 * PUBLISH checks ask for the bytes too, but only once every plane was
 * reserved (fallocate) and copied, so a restart under a tighter
 * --max-bytes reserved each version too big for it in full before
 * leaving it out.
 */
static int no_room(const uint64_t *fsize, uint32_t n, char *why, size_t cap)
{
	uint64_t sum = 0;
	bool wrap = false;

	for (uint32_t i = 0; i < n; i++) {
		if (fsize[i] == FENCE_FILE)
			continue;
		wrap |= sum + fsize[i] < sum;
		sum += fsize[i];
	}
	if (!wrap && !td__acct_over_max(td__snap.d->store, sum, 0))
		return td__tenant_restore_check(n, why, cap);
	snprintf(why, cap, "%s%" PRIu64 " more bytes exceed --max-bytes",
		 wrap ? "over 2^64 bytes: " : "", sum);
	return -ENOSPC;
}

/* Put one version back. 0, or -errno with the reason in why. */
static int restore_rec(struct reader *rd, const struct rec *r, char *why,
		       size_t cap)
{
	struct td_state_entry ent = {0};
	struct td_blob_view bv;
	struct td_err be = {0};
	const char *nwhy = NULL;
	int fds[TD_STATE_MAX_FDS];
	uint32_t n, first = UINT32_MAX;
	int rc;

	uint64_t fsize[TD_STATE_MAX_FDS];
	const uint8_t *crcs = NULL;

	for (int f = 0; f < F_COUNT_; f++) {
		static const enum td_hrry_kv_kind want[F_COUNT_] = {
			TD_HRRY_KV_UINT64, TD_HRRY_KV_UINT64,
			TD_HRRY_KV_BYTES,  TD_HRRY_KV_BYTES,
			TD_HRRY_KV_ARRAY,  TD_HRRY_KV_BYTES};

		if (!r->have[f] &&
		    (f == F_META ||
		     (f == F_CRC && rd->format == SNAP_FORMAT_OLD)))
			continue;
		if (!r->have[f] || r->v[f].kind != want[f]) {
			snprintf(why, cap, "KV key #%s %s",
				 td__snap_field_names[f],
				 r->have[f] ? "has the wrong kind"
					    : "is missing");
			return -EINVAL;
		}
	}
	if (td_wire_name_check(r->name, r->name_len, false, &nwhy) < 0) {
		snprintf(why, cap, "bad name: %s", nwhy);
		return -EINVAL;
	}
	n = (uint32_t)r->v[F_FILES].item_count;
	if (r->v[F_VERSION].u64_value == 0 ||
	    (r->v[F_FLAGS].u64_value & ~(uint64_t)TD_STATE_FLAGS) ||
	    r->v[F_BLOB].data_len > TD_WIRE_MAX_BLOB ||
	    (r->have[F_META] && r->v[F_META].data_len > TD_WIRE_MAX_META) ||
	    r->v[F_FILES].item_kind != TD_HRRY_KV_UINT64 ||
	    r->v[F_FILES].item_count == 0 ||
	    r->v[F_FILES].item_count > TD_STATE_MAX_FDS) {
		snprintf(why, cap, "version 0, unknown flags, or a blob, "
				   "metadata or fd table over its limit");
		return -EINVAL;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct td_hrry_kv_value it;

		td_hrry_kv_item(&r->v[F_FILES], i, &it);
		fsize[i] = it.u64_value;
	}
	if (r->have[F_CRC] && rec_crc(r, fsize, n, &crcs, why, cap) < 0)
		return -EBADMSG;
	if ((rc = no_room(fsize, n, why, cap)) < 0)
		return rc;
	if (td_blob_decode(r->v[F_BLOB].data, r->v[F_BLOB].data_len, &bv,
			   &be) < 0) {
		snprintf(why, cap, "blob: %s", be.reason ? be.reason : "bad");
		return -EINVAL;
	}
	for (uint32_t i = 0; i < TD_STATE_MAX_FDS; i++)
		fds[i] = -1;
	for (uint32_t i = 0; i < n; i++) {
		struct td_hrry_kv_value it;
		char hname[TD_WIRE_MAX_NAME + 16];
		bool fence = (int32_t)i == bv.fence_fd;
		int hlen;

		td_hrry_kv_item(&r->v[F_FILES], i, &it);
		if ((it.u64_value == FENCE_FILE) != fence) {
			snprintf(why, cap, "fd table entry %u: the fence is "
					   "entry %d",
				 i, bv.fence_fd);
			rc = -EINVAL;
			goto fail;
		}
		if (it.u64_value == FENCE_FILE) {
			/* saved only once signalled: signalled again */
			fds[i] = eventfd(1, EFD_CLOEXEC);
			if (fds[i] < 0) {
				rc = -errno;
				snprintf(why, cap, "eventfd: %s",
					 strerror(errno));
				goto fail;
			}
			continue;
		}
		if (first == UINT32_MAX) {
			first = i;
			hlen = snprintf(hname, sizeof(hname), "%.*s",
					(int)r->name_len, r->name);
		} else {
			hlen = snprintf(hname, sizeof(hname), "%.*s#%u",
					(int)r->name_len, r->name, i);
		}
		rc = restore_plane(rd, hname, (size_t)hlen, it.u64_value,
				   crcs, &fds[i], why, cap);
		if (crcs)
			crcs += td__snap_plane_crcs(it.u64_value);
		if (rc < 0)
			goto fail;
	}
	ent.name = (struct td_wire_str){r->name, (uint16_t)r->name_len};
	ent.flags = (uint32_t)r->v[F_FLAGS].u64_value;
	ent.version = r->v[F_VERSION].u64_value;
	if (r->have[F_META])
		ent.meta = (struct td_wire_bytes){r->v[F_META].data,
						  (uint32_t)r->v[F_META]
							  .data_len};
	ent.blob = (struct td_wire_bytes){r->v[F_BLOB].data,
					  (uint32_t)r->v[F_BLOB].data_len};
	ent.fd_count = n;
	/* fd ids 0: not from the fd store (pushed there if it is on) */
	return td__store_restore(&ent, fds, why, cap);
fail:
	close_all(fds, n);
	return rc;
}

/*
 * FILE copied to `to`, made for it (never over a file there): for a
 * folder where link() is refused (a file system without hard links,
 * EPERM). 0, or -1 with errno (`to` removed again).
 */
static int copy_to(const char *to)
{
	size_t cap = 1 << 20;
	uint8_t *buf = malloc(cap);
	int in = open(td__snap.path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	int out = -1, e = 0;
	off_t at = 0;
	ssize_t n = 0;

	if (!buf || in < 0) {
		e = buf ? errno : ENOMEM;
		goto out;
	}
	out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		   0600);
	if (out < 0) {
		e = errno;
		goto out;
	}
	while ((n = pread(in, buf, cap, at)) > 0) {
		errno = 0;
		if (pwrite(out, buf, (size_t)n, at) != n) {
			e = errno ? errno : ENOSPC;
			break;
		}
		at += n;
	}
	if (!e && n < 0)
		e = errno;
	if (!e && fsync(out) < 0)
		e = errno;
	if (e)
		unlink(to);
out:
	if (out >= 0)
		close(out);
	if (in >= 0)
		close(in);
	free(buf);
	errno = e;
	return e ? -1 : 0;
}

/*
 * The snapshot under a second name, FILE.<kind>-<UTC time>[.n], never
 * over an earlier one: moved there (keep false), or linked there too
 * (keep: the next save replaces FILE, the old bytes stay; copied there
 * where it cannot be linked). 0 or -1.
 */
static int stamped(const char *kind, bool keep, char *to, size_t cap)
{
	char stamp[32];
	time_t t = time(NULL);
	struct tm tm;
	int rc = -1;

	gmtime_r(&t, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	for (unsigned i = 0; i < 100 && rc < 0; i++) {
		int n = snprintf(to, cap, "%s.%s-%s", td__snap.path, kind,
				 stamp);

		if (i)
			snprintf(to + n, cap - (size_t)n, ".%u", i);
		rc = keep ? link(td__snap.path, to)
			  : renameat2(AT_FDCWD, td__snap.path, AT_FDCWD, to,
				      RENAME_NOREPLACE);
		if (rc < 0 && keep && errno != EEXIST)
			rc = copy_to(to);
		if (rc < 0 && errno != EEXIST)
			break;
	}
	return rc;
}

/* What the start goes on with when the snapshot is not read. */
static const char *without(void)
{
	return td__snap.only_missed ? "going on with the fd store's state, "
				      "without the versions it missed"
				    : "starting empty";
}

/* Move a snapshot that cannot be read out of the way, keeping it. */
static void move_aside(const char *reason)
{
	char to[4200];
	int rc = stamped("corrupt", false, to, sizeof(to));

	if (rc == 0)
		td__log(TD_LOG_WARN, "snapshot %s: %s; moved aside to %s; %s",
			td__snap.path, reason, to, without());
	else
		td__log(TD_LOG_ERROR, "snapshot %s: %s; moving it aside "
				      "failed (%s); %s",
			td__snap.path, reason, strerror(errno), without());
}

static void on_stop_signal(uv_signal_t *h, int signum)
{
	(void)h;
	(void)signum;
	td__snap.stop_asked = true;
}

/*
 * Open the snapshot and validate it up to its KV (header, trailer,
 * index, KV: §13 steps 1-5), and make sure it is one of ours; takes the
 * version counter back. 0, or -errno with the reason (for move_aside).
 */
static int restore_open(struct reader *rd, const struct stat *st,
			char *reason, size_t cap, bool *unread)
{
	struct td_hrry_err e = {0};
	struct td_hrry_kv_entry k;
	bool ours = false, has_next = false;
	uint64_t next = 0, format = 0;
	int rc;

	*unread = false;
	rc = reader_open(rd, (uint64_t)st->st_size, &e);
	if (rc < 0) {
		snprintf(reason, cap, "%s at byte %" PRIu64 ": %s%s%s",
			 td_hrry_error_name(e.kind), e.offset,
			 e.reason ? e.reason : strerror(-rc),
			 e.kind == TD_HRRY_E_IO ? ": " : "",
			 e.kind == TD_HRRY_E_IO ? strerror(-rc) : "");
		/* a read that failed (EIO) or memory short is no sign of
		 * damage: the file is not read now, not moved aside */
		*unread = e.kind == TD_HRRY_E_IO ||
			  e.kind == TD_HRRY_E_NO_MEMORY;
		return rc;
	}
	for (uint32_t i = 0; i < rd->c.kv_count; i++) {
		td_hrry_rcore_kv(&rd->c, i, &k);
		if (k.key_len == strlen(KV_FORMAT) &&
		    !memcmp(k.key, KV_FORMAT, k.key_len)) {
			format = k.value.kind == TD_HRRY_KV_UINT64
					 ? k.value.u64_value
					 : 0;
			ours = format == SNAP_FORMAT ||
			       format == SNAP_FORMAT_OLD;
			rd->format = ours ? format : 0;
		}
		if (k.key_len == strlen(KV_NEXT) &&
		    !memcmp(k.key, KV_NEXT, k.key_len) &&
		    k.value.kind == TD_HRRY_KV_UINT64) {
			next = k.value.u64_value;
			has_next = true;
		}
	}
	if (format > SNAP_FORMAT) {
		/* a downgrade: not damaged, and the newer tensord that wrote
		 * it would no longer read it once moved aside */
		snprintf(reason, cap,
			 "a tensord snapshot of format %" PRIu64 ", newer than "
			 "this tensord reads (%d or %d): written by a newer "
			 "tensord; run that one, or move the file away to "
			 "start empty",
			 format, SNAP_FORMAT_OLD, SNAP_FORMAT);
		*unread = true;
		return -EPROTONOSUPPORT;
	}
	if (!ours) {
		snprintf(reason, cap,
			 "a Hurray file, but not a tensord snapshot "
			 "(no KV %s = %d or %d)",
			 KV_FORMAT, SNAP_FORMAT_OLD, SNAP_FORMAT);
		return -EINVAL;
	}
	/* only a snapshot's counter counts: another Hurray file's key of
	 * that name raised the daemon's before it was refused */
	if (has_next)
		td__store_set_next_version(next);
	return 0;
}

/*
 * Only the versions the fd store's image named but did not bring back
 * are read when it restored (td__snap.only_missed): whether r is one
 * of the others (the image's state is newer for them).
 */
static bool missed_elsewhere(const struct rec *r)
{
	uint64_t v = r->have[F_VERSION] &&
				     r->v[F_VERSION].kind == TD_HRRY_KV_UINT64
			     ? r->v[F_VERSION].u64_value
			     : 0;

	return td__snap.only_missed &&
	       !td__fdstore_missed(r->name, r->name_len, v);
}

static void restore_one(struct reader *rd, const struct rec *r,
			unsigned *done, unsigned *total, char *why, size_t cap)
{
	(*total)++;
	if (restore_rec(rd, r, why, cap) == 0) {
		if (!td__snapshot_keeps(r->name, r->name_len))
			td__snap.unkept++;
		if (++*done == td__snap.restore_kill_at)
			raise(SIGKILL); /* a test's crash during a restore */
	} else if ((!rd->read_err && !rd->mem_err) || td__snap.only_missed)
		td__log(TD_LOG_WARN, "snapshot: not restoring \"%.*s\": %s",
			(int)r->name_len, r->name, why);
}

/*
 * Every version back, in KV order. The fields of a version are
 * consecutive keys, #version first. A stop asked for meanwhile waits for
 * the whole restore: the fd store (when on) must not keep a partial
 * state, which would win over the snapshot at the next start. Counts
 * what was tried and what came back.
 */
static void restore_versions(struct reader *rd, unsigned *done,
			     unsigned *total, char *why, size_t cap)
{
	struct rec r = {0};
	uint64_t last = td__snap_now_ms();

	for (uint32_t i = 0; i <= rd->c.kv_count; i++) {
		struct td_hrry_kv_entry k;
		const char *name = NULL;
		size_t name_len = 0;
		enum field f = F_COUNT_;

		if (i < rd->c.kv_count) {
			td_hrry_rcore_kv(&rd->c, i, &k);
			f = td__snap_key_field(&k, &name, &name_len);
			if (f == F_COUNT_)
				continue;
		}
		if (r.name && (i == rd->c.kv_count || f == F_VERSION ||
			       name_len != r.name_len ||
			       memcmp(name, r.name, name_len))) {
			if (!missed_elsewhere(&r))
				restore_one(rd, &r, done, total, why, cap);
			r = (struct rec){0};
			if ((rd->read_err || rd->mem_err) &&
			    !td__snap.only_missed)
				break; /* td__snap_restore stops the start */
		}
		if (i == rd->c.kv_count)
			break;
		if (f != F_VERSION && !r.name) {
			td__log(TD_LOG_WARN, "snapshot: KV key \"%.*s\" "
					     "belongs to no version; ignored",
				(int)k.key_len, k.key);
			continue;
		}
		r.name = name;
		r.name_len = name_len;
		r.have[f] = true;
		r.v[f] = k.value;
		if (td__snap_now_ms() - last >= 1000) {
			last = td__snap_now_ms();
			td__sd_notify(NULL, 0, "EXTEND_TIMEOUT_USEC=%llu\n"
					       "STATUS=restoring snapshot: %"
					       PRIu64 " tensors",
				      (unsigned long long)EXTEND_USEC,
				      (uint64_t)*done);
		}
	}
}

/* Said once: restored versions of names the options no longer keep. */
static void say_unkept(void)
{
	if (td__snap.unkept)
		td__log(TD_LOG_INFO, "snapshot: %u of the tensors restored "
				     "are of names it no longer keeps "
				     "(--snapshot-prefix, --snapshot-skip): they "
				     "are served, and the next save leaves them "
				     "out",
			td__snap.unkept);
}

/*
 * What was left out (a tighter --max-bytes, a damaged entry) would be
 * gone from FILE after the next save: the file as it was stays under a
 * second name. Where that fails too, the start stops (the next save would
 * have dropped them for good, with a line in the log): 0 or -errno.
 */
static int keep_left_out(unsigned n)
{
	char to[4200];
	int err;

	if (stamped("partial", true, to, sizeof(to)) == 0) {
		td__log(TD_LOG_WARN, "snapshot: %u tensors not restored; %s "
				     "kept as %s",
			n, td__snap.path, to);
		return 0;
	}
	err = errno ? -errno : -EIO;
	td__log(TD_LOG_ERROR, "snapshot: %u tensors not restored, and "
			      "keeping %s as %s.partial-<time> failed (%s): "
			      "not starting; the file stays as it is (the "
			      "next save would have replaced it without "
			      "them); make room in its folder, or move it "
			      "away to start without it",
		n, td__snap.path, td__snap.path, strerror(-err));
	return err;
}

/*
 * Whether st, the snapshot, is one another user may have written (theirs,
 * or writable by its group or every user): logged. Its versions would come back under
 * any name, past --policy and the quotas (restored versions are no
 * uid's), so it is not read.
 */
static bool foreign_file(const struct stat *st)
{
	const char *then = td__snap.only_missed
				   ? without()
				   : "not starting, and the file stays as it is";

	if (st->st_mode & (S_IWOTH | S_IWGRP))
		td__log(TD_LOG_ERROR, "snapshot %s is writable by %s (mode "
				      "%04o): not read, as %s could have put "
				      "its tensors there; %s; chmod go-w it if "
				      "what it holds is yours, or move it away",
			td__snap.path,
			st->st_mode & S_IWOTH ? "every user" : "its group",
			(unsigned)(st->st_mode & 07777),
			st->st_mode & S_IWOTH ? "anyone" : "any member",
			then);
	else if (st->st_uid != geteuid() && st->st_uid != 0)
		td__log(TD_LOG_ERROR, "snapshot %s belongs to uid %u, neither "
				      "the daemon's (%u) nor root's: not read, "
				      "as that user chose its tensors; %s; "
				      "chown it if what it holds is yours, or "
				      "move it away",
			td__snap.path, (unsigned)st->st_uid,
			(unsigned)geteuid(), then);
	else
		return false;
	return true;
}

int td__snap_restore(void)
{
	struct reader rd = {.fd = -1};
	struct stat st;
	char reason[300], why[TD_WIRE_MAX_REASON];
	unsigned done = 0, total = 0;
	uint64_t t0 = td__snap_now_ms();
	/* not on the stack: uv_close() finishes in a later loop turn */
	static uv_signal_t sig[2];
	bool unread;
	int err = 0;

	/* non-blocking: a FIFO there is opened, not waited on (and below,
	 * moved aside); reads of a regular file do not care */
	rd.fd = open(td__snap.path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (rd.fd < 0 && errno == ENOENT) {
		td__log(TD_LOG_INFO, "snapshot %s does not exist yet; %s",
			td__snap.path, without());
		return 0;
	}
	if (rd.fd < 0) {
		/* a file we may not read (or cannot now: descriptors,
		 * memory, I/O) is not damaged: starting without it would
		 * let the next save replace it (the fd store's state, when
		 * it restored, replaces it anyway) */
		err = -errno;
		td__log(TD_LOG_ERROR, "snapshot %s cannot be opened (%s): %s",
			td__snap.path, strerror(-err),
			td__snap.only_missed
				? without()
				: "not starting; make it readable to the "
				  "daemon's user, or move it away");
		return td__snap.only_missed ? 0 : err;
	}
	if (fstat(rd.fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		reader_fini(&rd);
		move_aside("not a regular file");
		return 0;
	}
	if (foreign_file(&st)) {
		reader_fini(&rd);
		return td__snap.only_missed ? 0 : -EPERM;
	}
	td__sd_notify(NULL, 0, "EXTEND_TIMEOUT_USEC=%llu\nSTATUS=restoring "
			       "snapshot %s",
		      (unsigned long long)EXTEND_USEC, td__snap.path);
	/* a stop asked for during a long restore is honoured after it */
	for (int i = 0; i < 2; i++) {
		uv_signal_init(td__snap.d->loop, &sig[i]);
		uv_signal_start(&sig[i], on_stop_signal, i ? SIGINT : SIGTERM);
	}
	err = restore_open(&rd, &st, reason, sizeof(reason), &unread);
	if (err < 0 && unread) {
		/* as for a file that cannot be opened: starting empty would
		 * let the next save replace it, and the next start would
		 * not read it under its new name */
		reader_fini(&rd);
		td__log(TD_LOG_ERROR, "snapshot %s cannot be read (%s): %s",
			td__snap.path, reason,
			td__snap.only_missed
				? without()
				: "not starting; the file stays as it is");
		if (td__snap.only_missed)
			err = 0;
		goto out;
	}
	if (err < 0) {
		err = 0;
		reader_fini(&rd);
		move_aside(reason);
		goto out;
	}
	restore_versions(&rd, &done, &total, why, sizeof(why));
	if (rd.read_err && !td__snap.only_missed) {
		/* as restore_open's read error: a version left out for it
		 * would be gone from FILE after the next save */
		err = rd.read_err;
		reader_fini(&rd);
		td__log(TD_LOG_ERROR, "snapshot %s cannot be read (%s): not "
				      "starting; the file stays as it is",
			td__snap.path, why);
		goto out;
	}
	if (rd.mem_err && !td__snap.only_missed) {
		/* the machine's room, not the file: leaving the version out
		 * would drop it from FILE at the next save (or keep it only
		 * in a copy no start reads); the operator decides */
		err = rd.mem_err;
		reader_fini(&rd);
		td__log(TD_LOG_ERROR, "snapshot %s cannot be restored (%s): "
				      "not starting; the file stays as it is; "
				      "make room for its tensors (memory, a "
				      "tmpfs or memory cgroup limit), or start "
				      "with a --max-bytes that leaves out what "
				      "does not fit (kept as %s.partial-<time>)",
			td__snap.path, why, td__snap.path);
		goto out;
	}
	td__log(TD_LOG_INFO, "snapshot: restored %u of %u tensors from %s "
			     "in %" PRIu64 " ms (%s)%s",
		done, total, td__snap.path, td__snap_now_ms() - t0,
		td__io_name(),
		td__snap.stop_asked || td__snap.d->stop_asked
			? "; now stopping as asked"
			: "");
	say_unkept();
	reader_fini(&rd);
	if (done < total)
		err = keep_left_out(total - done);
out:
	for (int i = 0; i < 2; i++)
		uv_close((uv_handle_t *)&sig[i], NULL);
	if (td__snap.stop_asked)
		uv_stop(td__snap.d->loop); /* main's uv_run returns at once */
	return err;
}
