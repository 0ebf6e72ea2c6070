/* SPDX-License-Identifier: MIT */
/*
 * Tensors that survive a restart: systemd's fd store holds every stored
 * plane and fence, plus the state image (proto/state.h) that says which
 * name and version each belongs to.
 *
 * When things are pushed, and why:
 *
 *   - a plane or fence goes to the store (FDSTORE=1, FDNAME=td.fd.<id>)
 *     the moment its version is published, so a crash right after the
 *     reply loses nothing that the image can name;
 *   - planes are stored once per file (dev, ino) and fences once per open
 *     file (kcmp): systemd silently drops an fd whose open file it already
 *     holds, so two entries for one file would leave a hole on removal;
 *   - the image is rewritten (debounced, at most every FLUSH_MS, over
 *     loop turns: fdstore-image.c) after the set of current versions
 *     changed, at once and whole before a block of version numbers is
 *     handed out (reserve()), and once more at shutdown; not while a
 *     snapshot is read into the store (td__fs.held);
 *   - an fd leaves the store (FDSTOREREMOVE=1) only after an image that no
 *     longer names it has been written (one begun after the fd's version
 *     went, image_done()): a crash between the two leaves an
 *     older but consistent image whose fds are all still stored. Until
 *     then its entry stays in the table (refs 0): a file published again
 *     meanwhile (a recycled buffer) takes its name back and is not
 *     removed, since systemd, holding it under that name, would drop a
 *     push of it under a new one. The removals go REMOVE_PER_TURN per
 *     loop turn, clients served in between (docs/reliability.md).
 *
 * Two image memfds ("td.state.0", "td.state.1") are pushed once and then
 * rewritten in place, alternately; systemd holds the same open files, so
 * nothing is re-sent. A torn write fails the checksum and the other,
 * older image is used. Leases do not survive a restart, so only current
 * versions are written; a replaced but leased version leaves the store
 * when it is freed.
 */
#include "fdstore-int.h"
#include "sd.h"
#include "snapshot.h"
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/kcmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FLUSH_MS 100
/* FDSTOREREMOVE messages sent per loop turn: each may wait for the
 * manager to read (td__sd_notify), and a burst of thousands of frees
 * in one FLUSH_MS left socket clients waiting for the whole of it */
#define REMOVE_PER_TURN 64
#define SLOT_NAME TD__FDSTORE_PREFIX "state."
#define FD_NAME TD__FDSTORE_PREFIX "fd."
#define IMAGE_MAX (1ull << 32) /* larger images are not read back */
#define EXTEND_USEC 30000000ull /* start timeout extension while restoring */

/* ---- passed fds ---- */

void td__fdstore_passed(int fd, const char *name)
{
	struct passed *p;

	if (td__fs.npassed == td__fs.passed_cap) {
		size_t cap = td__fs.passed_cap ? td__fs.passed_cap * 2 : 64;

		p = realloc(td__fs.passed, cap * sizeof(*p));
		if (!p)
			goto drop;
		td__fs.passed = p;
		td__fs.passed_cap = cap;
	}
	p = &td__fs.passed[td__fs.npassed];
	p->name = strdup(name);
	if (!p->name)
		goto drop;
	p->fd = fd;
	td__fs.npassed++;
	return;
drop:
	td__log(TD_LOG_ERROR, "out of memory: stored fd %s dropped", name);
	close(fd);
}

/*
 * The passed fd named name, or NULL; *twice when more than one came
 * under it. This daemon never stores two files under one id, so one of
 * them is not ours, and nothing says which: neither is used (first come
 * would restore whatever file came first, bytes that were never
 * published under that version).
 */
static struct passed *passed_find(const char *name, bool *twice)
{
	struct passed *found = NULL;
	size_t lo = 0, hi = td__fs.npassed;

	/* sorted by name (sort_passed): the first of name's run */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		td__d->stats.visits++;
		if (strcmp(td__fs.passed[mid].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*twice = false;
	for (; lo < td__fs.npassed && !strcmp(td__fs.passed[lo].name, name); lo++) {
		td__d->stats.visits++;
		if (td__fs.passed[lo].fd < 0)
			continue;
		if (found) {
			*twice = true;
			return NULL;
		}
		found = &td__fs.passed[lo];
	}
	return found;
}

/* "td.fd.<id>" -> id, 0 when name is not of that form or out of range. */
static uint64_t fd_name_id(const char *name)
{
	const char *s = name + strlen(FD_NAME);
	char *end;
	unsigned long long v;

	if (strncmp(name, FD_NAME, strlen(FD_NAME)) || *s < '1' || *s > '9')
		return 0;
	errno = 0;
	v = strtoull(s, &end, 10);
	return errno || *end || v > TD__FD_ID_MAX ? 0 : v;
}

/* ---- the table ---- */

static struct td__sfd *find_id(uint64_t id)
{
	return td__fdtab_find_id(&td__fs.tab, id);
}

static void arm(void);

static void gone_add(uint64_t id)
{
	if (td__fs.ngone == td__fs.gone_cap) {
		size_t cap = td__fs.gone_cap ? td__fs.gone_cap * 2 : 64;
		struct td__fs_gone *g = realloc(td__fs.gone, cap * sizeof(*g));

		if (!g) {
			/* left in the store; the next start removes it */
			td__fs.unlisted = true;
			td__log(TD_LOG_WARN, "out of memory: " FD_NAME
					     "%" PRIu64 " stays stored",
				id);
			return;
		}
		td__fs.gone = g;
		td__fs.gone_cap = cap;
	}
	td__fs.gone[td__fs.ngone++] =
		(struct td__fs_gone){id, ++td__fs.gone_seq};
}

/* id leaves the list of removals to send (it is stored again); the
 * sendable ones stay in front. */
static void gone_del(uint64_t id)
{
	for (size_t i = 0; i < td__fs.ngone; i++) {
		if (td__fs.gone[i].id != id)
			continue;
		if (i < td__fs.nsend) {
			/* the last sendable one fills i, the last one its
			 * place */
			td__fs.gone[i] = td__fs.gone[--td__fs.nsend];
			i = td__fs.nsend;
		}
		td__fs.gone[i] = td__fs.gone[--td__fs.ngone];
		return;
	}
}

uint64_t td__fdstore_add(int fd, bool plane, dev_t dev, ino_t ino)
{
	struct td__sfd *e;
	uint64_t id;

	if (!td__fs.on || td__fs.frozen)
		return 0;
	e = td__fdtab_find_file(&td__fs.tab, fd, plane, dev, ino);
	if (e) {
		/* refs 0: its removal waits for the next image; systemd
		 * holds the file under this name, and would drop a push
		 * under a new one (one entry per open file) */
		if (!e->refs++)
			gone_del(e->id);
		arm();
		return e->id;
	}
	id = td__fs.next_id;
	if (td__sd_notify(&fd, 1, "FDSTORE=1\nFDNAME=" FD_NAME "%" PRIu64,
			  id) < 0)
		return 0; /* logged; images name the version without fds */
	td__fs.next_id++;
	e = td__fdtab_add(&td__fs.tab, id, fd, plane, dev, ino);
	if (!e) {
		gone_add(id);
		return 0;
	}
	arm();
	return id;
}

int td__fdstore_adopt(uint64_t id, int fd, bool plane, dev_t dev, ino_t ino)
{
	struct td__sfd *e = find_id(id);

	if (!td__fs.on)
		return 0;
	if (e) {
		if (!e->refs++)
			gone_del(e->id);
		return 0;
	}
	return td__fdtab_add(&td__fs.tab, id, fd, plane, dev, ino) ? 0 : -ENOMEM;
}

void td__fdstore_drop(uint64_t id)
{
	struct td__sfd *e = find_id(id);

	if (!td__fs.on || td__fs.frozen || !e || !e->refs || --e->refs)
		return;
	/* the entry stays until the removal is sent (flush) */
	gone_add(id);
	arm();
}

void td__fdstore_dirty(const char *name, size_t len)
{
	/* the same changes make a snapshot stale, if it keeps the name */
	td__snapshot_dirty(name, len);
	if (td__fs.on && !td__fs.frozen)
		arm();
}

/*
 * Up to max removals of gone[0, nsend), each entry leaving the table as
 * its removal is sent (a file published again after that is pushed
 * again, under a new name); the rest in the next loop turn (an idle
 * handle, not a 0 ms timer: libuv 1.44 runs a timer restarted at 0 ms
 * from its own callback again at once, without polling).
 */
static void on_remover(uv_idle_t *h);

static void send_removals(size_t max)
{
	while (td__fs.nsend && max--) {
		uint64_t id = td__fs.gone[--td__fs.nsend].id;
		struct td__sfd *e = find_id(id);

		td__fs.gone[td__fs.nsend] = td__fs.gone[--td__fs.ngone];
		td__sd_notify(NULL, 0, "FDSTOREREMOVE=1\nFDNAME=" FD_NAME
				       "%" PRIu64,
			      id);
		if (e && !e->refs)
			td__fdtab_del(&td__fs.tab, e);
	}
	if (!td__fs.ngone && td__fs.unlisted) {
		/* those a full gone[] left out (gone_add) */
		td__fdtab_purge(&td__fs.tab);
		td__fs.unlisted = false;
	}
	if (td__fs.nsend && !td__fs.remover_on && td__fs.timer_init) {
		uv_idle_start(&td__fs.remover, on_remover);
		td__fs.remover_on = true;
	} else if (!td__fs.nsend && td__fs.remover_on) {
		uv_idle_stop(&td__fs.remover);
		td__fs.remover_on = false;
	}
}

static void on_remover(uv_idle_t *h)
{
	(void)h;
	send_removals(REMOVE_PER_TURN);
}

/* An image was written that names no fd whose removal was queued at or
 * before seq: those removals may go. */
static void image_done(uint64_t seq)
{
	size_t i = td__fs.nsend;

	/*
	 * Those queued before the image began are named by it no more (an
	 * fd's version went before the walk could see it); those queued
	 * since may be (the walk saw the version before it went): they
	 * wait for the next image. The ones that go are put in front.
	 */
	for (size_t j = i; j < td__fs.ngone; j++) {
		if (td__fs.gone[j].seq > seq)
			continue;
		struct td__fs_gone g = td__fs.gone[i];

		td__fs.gone[i++] = td__fs.gone[j];
		td__fs.gone[j] = g;
	}
	td__fs.nsend = i;
	send_removals(td__fs.timer_init ? REMOVE_PER_TURN : SIZE_MAX);
	td__sd_status(td__d);
}

/*
 * Write the image now, then remove what it no longer names (file
 * comment); a failure keeps the removals, which the old image may name.
 */
static void flush(void)
{
	if (!td__fs.on || td__fs.held)
		return;
	td__fs.armed = false;
	td__fs.last_ms = td__fs.timer_init ? uv_now(td__d->loop) : 0;
	(void)td__fs_image_now();
}

/* The store changed FLUSH_MS ago or more: an image over loop turns. */
static void on_timer(uv_timer_t *t)
{
	(void)t;
	if (!td__fs.on || td__fs.held)
		return;
	td__fs.armed = false;
	td__fs.last_ms = uv_now(td__d->loop);
	td__fs_image_walk();
}

/* what else puts numbers on record (snapshot.c: FILE.lock), handed
 * down as a callback: snapshot.c sits above this file */
static uint64_t (*also_reserve)(uint64_t next);

void td__fdstore_also_reserve(uint64_t (*fn)(uint64_t next))
{
	also_reserve = fn;
}

/*
 * keeper->reserve: version numbers from next are about to be handed
 * out. An image written up to 100 ms after them left a crash in between
 * with an older counter, and the restart numbered new versions as ones
 * handed out before: a block of numbers is put in an image first, now
 * (and in FILE.lock, with --snapshot).
 */
static uint64_t reserve(uint64_t next)
{
	uint64_t snap = also_reserve ? also_reserve(next) : UINT64_MAX;

	if (!td__fs.on || td__fs.frozen || td__fs.held) /* held: no image now */
		return snap;
	/* asked before its own block ends: FILE.lock's (half blocks, and
	 * every version while that record fails): this one holds */
	if (next >= td__fs.reserved) {
		td__fs.reserved = next + TD__VERSION_BLOCK;
		flush(); /* a failure is logged; the next block tries again */
	}
	return td__fs.reserved < snap ? td__fs.reserved : snap;
}

static void arm(void)
{
	uint64_t now, at;

	if (!td__fs.timer_init || td__fs.armed || td__fs.frozen || td__fs.held)
		return;
	now = uv_now(td__d->loop);
	at = td__fs.last_ms + FLUSH_MS;
	td__fs.armed = true;
	uv_timer_start(&td__fs.timer, on_timer, at > now ? at - now : 0, 0);
}

/* ---- restore ---- */

static int new_slot(int i)
{
	char name[32];
	const char *why;
	int fd = td__memfd_new("tensord-state", 0, 0, &why);

	if (fd < 0)
		return fd;
	snprintf(name, sizeof(name), SLOT_NAME "%d", i);
	if (td__sd_notify(&fd, 1, "FDSTORE=1\nFDNAME=%s", name) < 0) {
		close(fd);
		return -EIO;
	}
	td__fs.slot[i] = fd;
	return 0;
}

/*
 * What can be told of an image of len bytes in fd before it is read into
 * the heap. This daemon writes an image from its start in one piece, so
 * it has no holes, and it is no longer than its header's entry count
 * allows: a sparse memfd of gigabytes, or a header on a long tail, would
 * otherwise be allocated, read (zeros, slowly: seconds per GiB) and only
 * then fail the checksum, twice over with both slots.
 */
static int slot_precheck(int fd, size_t len, struct td_err *e)
{
	uint8_t hdr[TD_STATE_HDR_LEN];
	off_t hole;
	ssize_t n;

	if (len < sizeof(hdr))
		return 0; /* too short: the decoder says so */
	hole = lseek(fd, 0, SEEK_HOLE);
	if (hole >= 0 && (uint64_t)hole < len) {
		*e = (struct td_err){.reason = "the image has a hole (none "
					       "that this daemon writes does)",
				     .offset = (uint64_t)hole};
		return -EINVAL;
	}
	do
		n = pread(fd, hdr, sizeof(hdr), 0);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(hdr)) {
		*e = (struct td_err){.reason = "short read"};
		return n < 0 ? -errno : -EIO;
	}
	return td_state_check_len(hdr, len, e);
}

/*
 * Read and check slot i's image into *buf (malloc'ed). 0 with the header
 * and a cursor, or -errno with the reason logged.
 */
static int read_slot(int i, uint8_t **buf, struct td_state_hdr *h,
		     struct td_state_rd *rd, struct td_err *e)
{
	int fd = td__fs.slot[i];
	struct td_state_entry ent;
	struct stat st;
	size_t len;
	int rc;

	*buf = NULL;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > IMAGE_MAX) {
		*e = (struct td_err){.reason = "not a regular file of at most "
					       "4 GiB"};
		return -EINVAL;
	}
	len = (size_t)st.st_size;
	rc = slot_precheck(fd, len, e);
	if (rc < 0)
		return rc;
	*buf = malloc(len ? len : 1);
	if (!*buf)
		return -ENOMEM;
	for (size_t off = 0; off < len;) {
		ssize_t n = pread(fd, *buf + off, len - off, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			*e = (struct td_err){.reason = "short read"};
			return n < 0 ? -errno : -EIO;
		}
		off += (size_t)n;
	}
	rc = td_state_decode(*buf, len, h, rd, e);
	if (rc < 0)
		return rc;
	/* the whole image first: it is used all or nothing */
	while ((rc = td_state_next(rd, &ent)) == 1)
		;
	if (rc < 0)
		return rc;
	return td_state_decode(*buf, len, h, rd, e);
}

static void log_bad(const char *what, int rc, const struct td_err *e)
{
	td__log(TD_LOG_WARN, "%s: %s%s%s (byte %" PRIu64 "): %s", what,
		e->reason ? e->reason : strerror(-rc), e->field ? ", " : "",
		e->field ? e->field : "", e->offset, strerror(-rc));
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void missed_add(const struct td_state_entry *ent)
{
	struct missed *m = realloc(td__fs.missed,
				   (td__fs.nmissed + 1) * sizeof(*td__fs.missed));
	char *name = malloc(ent->name.len + 1u);

	if (m)
		td__fs.missed = m;
	if (!m || !name) {
		free(name);
		return; /* that one stays missing */
	}
	memcpy(name, ent->name.ptr, ent->name.len);
	m[td__fs.nmissed++] = (struct missed){ent->version, ent->name.len, name};
}

static int missed_cmp(const void *a, const void *b)
{
	const struct missed *x = a, *y = b;

	return x->version < y->version ? -1 : x->version > y->version;
}

size_t td__fdstore_missed_count(void)
{
	return td__fs.nmissed;
}

bool td__fdstore_missed(const char *name, size_t len, uint64_t version)
{
	struct missed key = {.version = version}, *m;

	m = td__fs.nmissed ? bsearch(&key, td__fs.missed, td__fs.nmissed,
				 sizeof(*td__fs.missed), missed_cmp)
		       : NULL;
	/* a version number is one version's (images never hold two) */
	return m && m->len == len && !memcmp(m->name, name, len);
}

void td__fdstore_missed_free(void)
{
	for (size_t i = 0; i < td__fs.nmissed; i++)
		free(td__fs.missed[i].name);
	free(td__fs.missed);
	td__fs.missed = NULL;
	td__fs.nmissed = 0;
}

/* Put every version of the image into the store; returns how many. */
static unsigned restore_entries(const struct td_state_hdr *h,
				struct td_state_rd *rd)
{
	struct td_state_entry ent;
	uint64_t last = now_us();
	unsigned done = 0, seen = 0;
	char why[TD_WIRE_MAX_REASON];

	if (h->count)
		td__sd_notify(NULL, 0,
			      "EXTEND_TIMEOUT_USEC=%llu\nSTATUS=restoring %u "
			      "tensors",
			      (unsigned long long)EXTEND_USEC, h->count);
	while (td_state_next(rd, &ent) == 1) {
		int fds[TD_STATE_MAX_FDS];
		uint32_t got = 0;

		seen++;
		if (ent.fd_count == 0) {
			/* named without fds (image_entry()): the snapshot's,
			 * unless it does not keep the name (a stream under
			 * --snapshot-skip: not looked for at every start) */
			bool kept = td__d->opts.snapshot_path &&
				    td__snapshot_keeps(ent.name.ptr,
						       ent.name.len);

			td__log(TD_LOG_INFO, "\"%.*s\" version %" PRIu64
					     " has no fds in the fd store "
					     "(recyclable, or not pushed): %s",
				(int)ent.name.len, ent.name.ptr, ent.version,
				kept ? "read from the snapshot"
				: td__d->opts.snapshot_path
					? "not restored (the snapshot does "
					  "not keep this name: "
					  "--snapshot-prefix, --snapshot-skip)"
					: "not restored (no --snapshot)");
			if (kept)
				missed_add(&ent);
			continue;
		}
		/* long restores: keep systemd's start timeout ahead of us */
		if (now_us() - last > 1000000) {
			last = now_us();
			td__sd_notify(NULL, 0,
				      "EXTEND_TIMEOUT_USEC=%llu\nSTATUS="
				      "restoring %u of %u tensors",
				      (unsigned long long)EXTEND_USEC, seen,
				      h->count);
		}
		for (; got < ent.fd_count; got++) {
			char name[48];
			struct passed *p;
			bool twice;

			snprintf(name, sizeof(name), FD_NAME "%" PRIu64,
				 ent.fd_ids[got]);
			if (ent.fd_ids[got] > TD__FD_ID_MAX) {
				snprintf(why, sizeof(why), "%s is out of "
					 "range (at most 2^62)", name);
				break;
			}
			p = passed_find(name, &twice);
			/* versions may share a plane: each gets its own fd */
			fds[got] = p ? fcntl(p->fd, F_DUPFD_CLOEXEC, 3) : -1;
			if (fds[got] < 0) {
				snprintf(why, sizeof(why), "%s %s", name,
					 p ? strerror(errno)
					 : twice ? "was passed more than once "
						   "(which is ours is unknown)"
						 : "is not in the fd store");
				break;
			}
		}
		if (got < ent.fd_count) {
			for (uint32_t i = 0; i < got; i++)
				close(fds[i]);
		} else if (td__store_restore(&ent, fds, why, sizeof(why)) ==
			   0) {
			done++;
			continue;
		}
		td__log(TD_LOG_WARN, "not restoring \"%.*s\" version %" PRIu64
				     ": %s",
			(int)ent.name.len, ent.name.ptr, ent.version, why);
		missed_add(&ent);
	}
	if (td__fs.nmissed)
		qsort(td__fs.missed, td__fs.nmissed, sizeof(*td__fs.missed), missed_cmp);
	return done;
}

static const struct td__store_keeper keeper = {
	td__fdstore_add, td__fdstore_adopt, td__fdstore_drop,
	td__fdstore_dirty, reserve};

/* Whether two fds are of one inode (two opens of one memfd included). */
static bool same_inode(int a, int b)
{
	struct stat sa, sb;

	return a >= 0 && b >= 0 && fstat(a, &sa) == 0 && fstat(b, &sb) == 0 &&
	       sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/*
 * The passed fds: the two image slots into td__fs.slot (twice: a slot's name
 * came more than once), the rest stay in td__fs.passed. Returns how many are
 * stored tensor fds.
 */
static int passed_cmp(const void *a, const void *b)
{
	return strcmp(((const struct passed *)a)->name,
		      ((const struct passed *)b)->name);
}

static size_t sort_passed(bool twice[2])
{
	size_t stored = 0;

	/* by name, for passed_find()'s binary search */
	if (td__fs.npassed)
		qsort(td__fs.passed, td__fs.npassed, sizeof(*td__fs.passed), passed_cmp);
	for (size_t i = 0; i < td__fs.npassed; i++) {
		struct passed *p = &td__fs.passed[i];
		uint64_t id = fd_name_id(p->name);

		/* names we hand out next must not collide with stored ones */
		if (id >= td__fs.next_id)
			td__fs.next_id = id + 1;
		stored += id != 0;
		for (int s = 0; s < 2; s++) {
			char name[32];

			snprintf(name, sizeof(name), SLOT_NAME "%d", s);
			if (strcmp(p->name, name))
				continue;
			if (td__fs.slot[s] >= 0) {
				twice[s] = true; /* re-stored below */
				break;
			}
			td__fs.slot[s] = p->fd;
			p->fd = -1;
		}
	}
	if (same_inode(td__fs.slot[0], td__fs.slot[1])) {
		/* one file under both names is one slot: the write meant
		 * for the older image would tear the newer one. Slot 0's
		 * copy is read, slot 1 is made afresh. */
		td__log(TD_LOG_WARN, "state images " SLOT_NAME "0 and "
				     SLOT_NAME "1 are one file; " SLOT_NAME
				     "1 is made afresh");
		close(td__fs.slot[1]);
		td__fs.slot[1] = -1;
		twice[1] = true; /* the name leaves the store, then returns */
	}
	return stored;
}

/*
 * The newer readable image of the two slots back into the store.
 * Returns 1 when an image was used (it wins over a snapshot), 0 when
 * none, -1 when none decodes and one is of a format this daemon does
 * not know: a newer tensord's, left alone (td__fdstore_restore).
 */
static int restore_newest(size_t stored)
{
	uint8_t *img[2] = {NULL, NULL};
	struct td_state_hdr h[2];
	struct td_state_rd rd[2];
	struct td_err e[2] = {{0}, {0}};
	int rc[2] = {-ENOENT, -ENOENT}, best = -1;
	unsigned restored;
	bool newer = false;

	for (int s = 0; s < 2; s++) {
		char what[48];

		if (td__fs.slot[s] < 0)
			continue;
		rc[s] = read_slot(s, &img[s], &h[s], &rd[s], &e[s]);
		snprintf(what, sizeof(what), "state image " SLOT_NAME "%d", s);
		if (rc[s] < 0)
			log_bad(what, rc[s], &e[s]);
		if (rc[s] == -ENOTSUP)
			newer = true;
		else if (rc[s] < 0)
			continue;
		else if (best < 0 || h[s].generation > h[best].generation)
			best = s;
	}
	if (best < 0 && newer) {
		free(img[0]);
		free(img[1]);
		return -1;
	}
	if (best < 0) {
		if (td__fs.slot[0] >= 0 || td__fs.slot[1] >= 0 || stored)
			td__log(TD_LOG_WARN,
				"no usable state image in the fd store%s; "
				"%s (%zu stored fds dropped)",
				td__fs.slot[0] < 0 && td__fs.slot[1] < 0
					? " (none passed)"
					: "",
				td__d->opts.snapshot_path
					? "the snapshot is read instead"
					: "starting empty",
				stored);
	} else {
		/* sort_passed() counted past every stored id already */
		if (h[best].next_fd_id > TD__FD_ID_MAX + 1)
			td__log(TD_LOG_WARN, "state image: an fd id counter of "
					     "%" PRIu64 " is out of range; "
					     "ignored",
				h[best].next_fd_id);
		else if (h[best].next_fd_id > td__fs.next_id)
			td__fs.next_id = h[best].next_fd_id;
		td__fs.generation = h[best].generation;
		td__fs.cur = best;
		td__store_set_next_version(h[best].next_version);
		restored = restore_entries(&h[best], &rd[best]);
		td__log(TD_LOG_INFO,
			"restored %u of %u tensors from the fd store",
			restored, h[best].count);
	}
	free(img[0]);
	free(img[1]);
	return best >= 0 ? 1 : 0;
}

/*
 * Can images be rewritten in fd, as fdstore-image.c does? A memfd opened
 * read-write without seals against writing or resizing. A sealed one
 * (which no daemon of ours makes) failed every write for the whole run,
 * so nothing published in it survived the next restart; a file that is
 * not a memfd is no image of ours to write into.
 */
static bool slot_writable(int fd)
{
	int fl = fcntl(fd, F_GETFL), seals = fcntl(fd, F_GET_SEALS);

	return fl >= 0 && (fl & O_ACCMODE) == O_RDWR && seals >= 0 &&
	       !(seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE | F_SEAL_GROW |
			  F_SEAL_SHRINK));
}

/*
 * Both image slots stored and writable for this run: one that cannot be
 * written or a name held twice is dropped and stored afresh. 0, or -1
 * when no image can be kept (logged).
 */
static int keep_slots(const bool twice[2])
{
	for (int s = 0; s < 2; s++) {
		bool ok = td__fs.slot[s] >= 0 && slot_writable(td__fs.slot[s]);

		if (ok && !twice[s])
			continue;
		if (td__fs.slot[s] >= 0 || twice[s]) {
			/*
			 * Unwritable, or the name held twice: drop the name
			 * (every fd under it) and store one image afresh.
			 */
			if (td__fs.slot[s] >= 0 && !ok) {
				td__log(TD_LOG_WARN, "state image " SLOT_NAME
						     "%d cannot be rewritten "
						     "(read-only, sealed or "
						     "not a memfd); replaced",
					s);
				close(td__fs.slot[s]);
				td__fs.slot[s] = -1;
			}
			td__sd_notify(NULL, 0,
				      "FDSTOREREMOVE=1\nFDNAME=" SLOT_NAME "%d",
				      s);
		}
		if (td__fs.slot[s] >= 0 &&
		    td__sd_notify(&td__fs.slot[s], 1,
				  "FDSTORE=1\nFDNAME=" SLOT_NAME "%d", s) == 0)
			continue;
		if (new_slot(s) < 0) {
			td__log(TD_LOG_ERROR, "cannot store a state image; "
					      "tensors will not survive a "
					      "restart");
			return -1;
		}
	}
	return 0;
}

/*
 * Could systemd hold an fd under this name? Its own rule (FDNAME=, and
 * fdname_is_valid()): 1..255 printable ASCII bytes, no ':'. Any other
 * name came from somewhere else, and put into a message it would add
 * lines of its own ("x\nWATCHDOG_USEC=1").
 */
static bool fdname_ok(const char *name)
{
	size_t len = strlen(name);

	if (len == 0 || len > 255)
		return false;
	for (const char *c = name; *c; c++)
		if (*c < ' ' || *c > '~' || *c == ':')
			return false;
	return true;
}

static bool is_slot_name(const char *name)
{
	return !strcmp(name, SLOT_NAME "0") || !strcmp(name, SLOT_NAME "1");
}

/*
 * Stored fds nothing refers to any more leave the store: every passed
 * name but the two image slots (keep_slots() saw to those), or else an
 * odd one ("td.state.2") would be handed back at every start for ever.
 */
static void drop_unreferenced(void)
{
	for (size_t i = 0; i < td__fs.npassed; i++) {
		struct passed *p = &td__fs.passed[i];
		uint64_t id = fd_name_id(p->name);

		if (p->fd < 0 || (id && find_id(id)) || is_slot_name(p->name))
			continue;
		if (id)
			gone_add(id);
		else if (fdname_ok(p->name))
			td__sd_notify(NULL, 0, "FDSTOREREMOVE=1\nFDNAME=%s",
				      p->name);
	}
}

int td__fdstore_restore(struct td__daemon *d)
{
	bool twice[2] = {false, false};
	int used = 0;

	td__store_keeper_set(&keeper);
	if (!td__sd_fdstore_on()) {
		if (td__fs.npassed)
			td__log(TD_LOG_WARN, "%zu stored fds passed but no fd "
					     "store to keep them in; closed",
				td__fs.npassed);
		goto done;
	}
	td__fs.on = true;
	uv_timer_init(d->loop, &td__fs.timer);
	uv_idle_init(d->loop, &td__fs.remover);
	td__fs_image_init(d->loop, image_done);
	td__fs.timer_init = true;
	used = restore_newest(sort_passed(twice));
	if (used < 0) {
		/*
		 * A rollback after an upgrade: writing our images over it and
		 * dropping the fds it names lost every tensor the newer
		 * tensord kept. Left as they are, stored (nothing removed,
		 * nothing pushed), for that tensord's next start; this run
		 * keeps nothing in the fd store, as with FDSTORE=0.
		 */
		td__log(TD_LOG_ERROR, "the fd store holds a state image of a "
				      "newer tensord's format: left as it "
				      "is, with its %zu fds, for a newer "
				      "tensord to read; tensors published "
				      "now do not survive a restart through "
				      "the fd store",
			td__fs.npassed);
		for (int s = 0; s < 2; s++) {
			if (td__fs.slot[s] >= 0)
				close(td__fs.slot[s]);
			td__fs.slot[s] = -1;
		}
		used = 0;
		td__fs.on = false;
		goto done;
	}
	if (keep_slots(twice) < 0) {
		td__fs.on = false;
		goto done;
	}
	drop_unreferenced();
	/* the first image of this run, written now: a crash keeps it;
	 * after the snapshot when that is read (td__fs.held), whole or for
	 * the versions the image named and did not bring back (an image
	 * without them would leave them out of the next start's reading) */
	td__fs.held = d->opts.snapshot_path && (!used || td__fs.nmissed);
	flush();
done:
	for (size_t i = 0; i < td__fs.npassed; i++) {
		if (td__fs.passed[i].fd >= 0)
			close(td__fs.passed[i].fd);
		free(td__fs.passed[i].name);
	}
	free(td__fs.passed);
	td__fs.passed = NULL;
	td__fs.npassed = td__fs.passed_cap = 0;
	if (!d->opts.snapshot_path)
		td__fdstore_missed_free(); /* no snapshot to fill them in */
	return used;
}

void td__fdstore_release(void)
{
	if (!td__fs.held)
		return;
	td__fs.held = false;
	flush();
}

void td__fdstore_fini(void)
{
	if (td__fs.on && !td__fs.frozen) {
		/* the final image: the next start gets exactly this, the
		 * counter included (no numbers on record past it) */
		td__fs.reserved = 0;
		flush();
		td__fs.frozen = true;
	}
	/* no later turn: every removal the image allows, now */
	send_removals(SIZE_MAX);
	if (td__fs.timer_init) {
		uv_timer_stop(&td__fs.timer);
		uv_close((uv_handle_t *)&td__fs.timer, NULL);
		uv_close((uv_handle_t *)&td__fs.remover, NULL);
		td__fs.remover_on = false;
		td__fs_image_fini();
		td__fs.timer_init = false;
	}
}

void td__fdstore_free(void)
{
	td__fdstore_missed_free();
	td__fdtab_free(&td__fs.tab);
	td__fs_image_free();
	free(td__fs.gone);
	td__fs.gone = NULL;
	td__fs.ngone = td__fs.gone_cap = td__fs.nsend = 0;
	td__fs.gone_seq = 0;
	td__fs.unlisted = false;
	for (int s = 0; s < 2; s++) {
		if (td__fs.slot[s] >= 0)
			close(td__fs.slot[s]);
		td__fs.slot[s] = -1;
	}
	td__fs.on = false;
}
