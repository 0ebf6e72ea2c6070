/* SPDX-License-Identifier: MIT */
/*
 * libtensord rings: mapping the three memfds a RING_CREATE or
 * RING_SUBSCRIBE reply brings (docs/fastpath.md, "Three memfds per
 * ring"), page tables populated before the first handoff.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client.h"
#include "gpu.h"
#include "os.h"
#include "ring-int.h"
#include "ring.h"

void td__ringmap_unmap(struct ringmap *m)
{
	if (m->hdr)
		munmap(m->hdr, TD_RING_HDR_LEN);
	if (m->rd)
		munmap(m->rd, TD_RING_READERS_LEN);
	if (m->data)
		munmap(m->data, m->g.data_len);
	if (m->data_fd >= 0)
		close(m->data_fd);
	m->data_fd = -1;
	m->hdr = NULL;
	m->rd = NULL;
	m->data = NULL;
}

static void *unmap_fail(void *p, size_t len, int e)
{
	munmap(p, len);
	errno = e;
	return NULL;
}

/*
 * mmap fd (at least len bytes long) and fill its page tables now;
 * reserve: the daemon left its memory unallocated (TD_WIRE_RING_UNRESERVED),
 * so filling them must allocate every page, or fail with errno.
 */
static void *map_populated(int fd, size_t len, bool writable, bool thp,
			   bool reserve)
{
	struct stat st;
	void *p;

	/* a file shorter than the mapping would SIGBUS on access */
	if (fstat(fd, &st) < 0 || st.st_size < 0 ||
	    (uint64_t)st.st_size < len) {
		errno = EBADMSG;
		return NULL;
	}
	/* slots whose planes are multiples of A start A-aligned (gpu.h) */
	p = td__mmap_natural(len,
			     writable ? PROT_READ | PROT_WRITE : PROT_READ,
			     MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return NULL;
	if (thp)
		madvise(p, len, MADV_HUGEPAGE);
	/*
	 * First touch of a page costs a fault (tens of microseconds per
	 * 4 KiB in a VM): take them all now, not in the first handoffs.
	 * MADV_POPULATE_* (5.14) fault without touching (a read maps the
	 * already allocated shmem page writable too: no dirty tracking).
	 */
	/*
	 * Small pages: fallocate allocates them in a batch (about half the
	 * time of faulting them in one by one here); huge ones come from a
	 * fault in the advised mapping, which must then succeed.
	 */
	if (reserve && !thp && fallocate(fd, 0, 0, (off_t)len) < 0)
		return unmap_fail(p, len, errno);
	if (madvise(p, len,
		    writable ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) < 0 &&
	    reserve && thp) {
		/* before 5.14 there is none: fallocate (small pages) */
		int e = errno;

		if (e != EINVAL || fallocate(fd, 0, 0, (off_t)len) < 0)
			return unmap_fail(p, len, e != EINVAL ? e : errno);
	}
	/*
	 * Then read one byte of every page anyway. Populated page tables
	 * are not enough under a hypervisor that shadows them (nested
	 * virtualisation): the first access through each new PTE still
	 * exits to it. Measured on the 2-vCPU VM of bench/README.md: the
	 * first memset of a populated 1 GiB mapping took 2.1 s, the next
	 * 0.05 s; after this loop the first one takes 0.05 s too. On bare
	 * metal the loop costs about a millisecond per GiB, once.
	 */
	for (size_t off = 0; off < len; off += TD_RING_PAGE)
		(void)*(volatile const uint8_t *)((uint8_t *)p + off);
	return p;
}

/* ring-int.h */
int td__ringmap_take(struct td_client *c, struct td__msg *rep,
		     struct td_wire_ring_rep *r, bool producer,
		     struct ringmap *m, struct td_error *err)
{
	static const char *const what[TD_WIRE_RING_FDS] = {"header",
							   "readers", "data"};
	const size_t lens[TD_WIRE_RING_FDS] = {TD_RING_HDR_LEN,
					       TD_RING_READERS_LEN, 0};
	int fds[TD_WIRE_RING_FDS] = {-1, -1, -1};
	int scm[TD_WIRE_MAX_FDS];
	void *maps[TD_WIRE_RING_FDS] = {NULL, NULL, NULL};
	struct td_err e = {0};
	int rc;

	m->data_fd = -1;
	for (unsigned i = 0; i < TD_WIRE_MAX_FDS; i++)
		scm[i] = i < rep->nfds ? rep->fds[i] : -1;
	rep->nfds = 0; /* ours now, in scm[] */
	rc = td_wire_ring_rep_decode(rep->body, rep->body_len, r, &e);
	if (rc < 0) {
		rc = td__fail(err, -EBADMSG, "ring reply: %s: %s",
			      e.field ? e.field : "body",
			      e.reason ? e.reason : "invalid");
		goto out;
	}
	m->g = (struct td_ring_geom){
		.slot_count = r->slot_count,
		.plane_count = r->plane_count,
		.slot_stride = r->slot_stride,
		.data_len = r->data_len,
	};
	memcpy(m->g.plane_off, r->plane_off, sizeof(m->g.plane_off));
	memcpy(m->g.plane_size, r->plane_size, sizeof(m->g.plane_size));
	m->reader_count = r->reader_count;
	m->backing = r->flags & (TD_WIRE_RING_HUGETLB | TD_WIRE_RING_THP);
	if (td_ring_geom_check(&m->g) < 0 || r->fd_count != TD_WIRE_RING_FDS ||
	    r->reader_count < 1 || r->reader_count > TD_RING_MAX_READERS ||
	    (!producer && r->row >= r->reader_count) ||
	    r->data_len > SIZE_MAX) {
		rc = td__fail(err, -EBADMSG, "ring reply: bad geometry");
		goto out;
	}
	for (unsigned i = 0; i < TD_WIRE_RING_FDS; i++) {
		size_t len = i == 2 ? (size_t)r->data_len : lens[i];
		bool wr = producer || i == 1, reserve;

		rc = td__import_fd(c, r->fds[i].fd, &scm[i], &fds[i]);
		if (rc < 0) {
			rc = td__fail(err, rc, "import ring %s fd: %s",
				      what[i], strerror(-rc));
			goto out;
		}
		reserve = i == 2 && producer &&
			  (r->flags & TD_WIRE_RING_UNRESERVED);
		maps[i] = map_populated(fds[i], len, wr,
					i == 2 && (r->flags & TD_WIRE_RING_THP),
					reserve);
		if (!maps[i] && reserve) {
			rc = -errno;
			rc = td__fail(err, rc, "reserve the ring's %zu bytes of "
				      "slots: %s", len, strerror(-rc));
			goto out;
		}
		if (!maps[i]) {
			rc = td__fail(err, -errno, "map ring %s: %s", what[i],
				      strerror(errno));
			goto out;
		}
	}
	m->hdr = maps[0];
	m->rd = maps[1];
	m->data = maps[2];
	maps[0] = maps[1] = maps[2] = NULL;
	if (!producer) {
		/* td_sub_plane_fd(): a copy-on-write map of a slot needs it */
		m->data_fd = fds[2];
		fds[2] = -1;
	}
	rc = 0;
out:
	/* mappings keep the files alive: no other descriptor stays open */
	for (unsigned i = 0; i < TD_WIRE_RING_FDS; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		if (maps[i])
			munmap(maps[i], i == 0   ? TD_RING_HDR_LEN
					: i == 1 ? TD_RING_READERS_LEN
						 : (size_t)r->data_len);
	}
	for (unsigned i = 0; i < TD_WIRE_MAX_FDS; i++)
		if (scm[i] >= 0)
			close(scm[i]);
	return rc;
}
