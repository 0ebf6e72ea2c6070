/* SPDX-License-Identifier: MIT */
/*
 * zarr export into an existing empty folder that cannot be replaced by a
 * rename: a mount point (a fresh volume's root), where rename(2) fails
 * with EBUSY, or a folder whose parent this user may not write (a folder
 * an administrator made for the user in a place that is not theirs),
 * where the temporary folder beside it cannot be made. The tree is built
 * in a hidden folder inside DIR (on DIR's file system) and its entries
 * are moved up into DIR, the root zarr.json last (docs/zarr.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "output.h"
#include "tensorctl.h"

bool tctl_zarr_is_mount_root(const char *dir)
{
	struct statx sx, px;
	char up[PATH_MAX];

	if (statx(AT_FDCWD, dir, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx))
		return false;
	if (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)
		return sx.stx_attributes & STATX_ATTR_MOUNT_ROOT;
	/* a kernel before 5.8: another device than its parent's */
	if (snprintf(up, sizeof(up), "%s/..", dir) >= (int)sizeof(up) ||
	    statx(AT_FDCWD, up, 0, STATX_BASIC_STATS, &px))
		return false;
	return sx.stx_dev_major != px.stx_dev_major ||
	       sx.stx_dev_minor != px.stx_dev_minor;
}

/* An existing folder DIR whose parent this user may not add to (search
 * and write, checked with the effective ids, as mkdir(2) will be), or on
 * a read-only file system there: the export is built inside DIR. */
bool tctl_zarr_parent_is_closed(const char *dir)
{
	struct stat st;
	char up[PATH_MAX];

	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) ||
	    snprintf(up, sizeof(up), "%s/..", dir) >= (int)sizeof(up))
		return false;
	if (!faccessat(AT_FDCWD, up, W_OK | X_OK, AT_EACCESS))
		return false;
	return errno == EACCES || errno == EPERM || errno == EROFS;
}

/*
 * names[0..n) (the array folders) and then "zarr.json" moved from the
 * folder tmp (a folder inside dir) up into dir, never over an entry
 * there; then tmp removed and dir fsync'ed. On a failure the entries
 * moved are moved back, so tmp holds the whole tree again and dir is as
 * it was; -errno, step (cap bytes) what failed.
 */
int tctl_zarr_move_up(const char *dir, const char *tmp,
                      const char *const *names, size_t n, char *step,
                      size_t cap)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int tfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	size_t i = 0;
	int rc = 0;

	snprintf(step, cap, "opening it");
	if (dfd < 0 || tfd < 0)
		rc = -errno;
	for (; !rc && i <= n; i++) {
		const char *name = i < n ? names[i] : "zarr.json";

		snprintf(step, cap, "moving %s up into it", name);
		if (tctl_interrupted())
			rc = -EINTR;
		else if (renameat2(tfd, name, dfd, name, RENAME_NOREPLACE) &&
		         (errno != EINVAL ||
		          /* a file system without the flag: dir was
		           * checked empty */
		          renameat(tfd, name, dfd, name)))
			rc = -errno;
	}
	if (rc) /* back, the last moved first (i - 1 failed) */
		for (i = i ? i - 1 : 0; i-- > 0;)
			renameat(dfd, i < n ? names[i] : "zarr.json", tfd,
			         i < n ? names[i] : "zarr.json");
	if (!rc) {
		rmdir(tmp); /* empty now; left hidden should it fail */
		snprintf(step, cap, "syncing it");
		if (fsync(dfd) < 0)
			rc = -errno;
	}
	if (dfd >= 0)
		close(dfd);
	if (tfd >= 0)
		close(tfd);
	return rc;
}
