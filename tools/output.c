/* SPDX-License-Identifier: MIT */
/* Safe outputs for every tensorctl command that writes (output.h). */
#include "output.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tensorctl.h"

/* Temporary files are ".tensorctl-PID-XXXXXX-NAME" beside their target. */
#define TMP_PREFIX ".tensorctl-"
#define MAX_HOPS 40 /* symlinks followed, as the kernel's MAXSYMLINKS */
#define CHUNK (8u << 20)

static volatile sig_atomic_t in_write, got_signal;

/*
 * A signal caught in a write only sets got_signal, and the call it
 * interrupts ends with EINTR. One caught after the loop's last look at
 * got_signal and before its call starts interrupts nothing: a write to a
 * FIFO or socket whose reader stopped, or a connect to a full backlog,
 * would then wait for ever. So a caught signal also asks for SIGALRM a
 * second later, and each second after it until the process ends: a call
 * that waits ends with EINTR (or a short count) and the loop sees the
 * flag. Nothing else in tensorctl uses SIGALRM.
 */
static void on_kick(int sig)
{
	(void)sig;
	if (got_signal)
		alarm(1);
}

static void on_signal(int sig)
{
	/* a publish loop's second signal: the first one's roll back is
	 * waited for no longer (a daemon that does not answer) */
	if (in_write == 2 && got_signal) {
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	if (in_write) {
		/* the write loop stops (EINTR, or EPIPE for SIGPIPE); the
		 * first signal is the one main() ends with */
		if (!got_signal)
			got_signal = sig;
		alarm(1);
		return;
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

void tctl_signals_init(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
	struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART */

	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old;

		/* one the caller ignores stays ignored: `nohup` (SIGHUP),
		 * `trap '' PIPE` (a write then fails with EPIPE, status 1,
		 * as cat does), a shell's background job (SIGINT) */
		if (sigaction(sigs[i], NULL, &old) == 0 &&
		    old.sa_handler == SIG_IGN)
			continue;
		sigaction(sigs[i], &sa, NULL);
	}
	sa.sa_handler = on_kick;
	sigaction(SIGALRM, &sa, NULL);
	/* over RLIMIT_FSIZE: the write fails with EFBIG and is cleaned up,
	 * instead of a kill that would leave a temporary file behind */
	signal(SIGXFSZ, SIG_IGN);
}

int tctl_interrupted(void)
{
	return got_signal;
}

void tctl_write_guard(int on)
{
	in_write = on ? 1 : 0;
}

void tctl_publish_guard(int on)
{
	in_write = on ? 2 : 0;
}

int tctl_publish_check(const char *path)
{
	if (!got_signal)
		return TCTL_OK;
	return tctl_fail(TCTL_REFUSED, "interrupted", EINTR,
			 "%s: interrupted by signal %d", path,
			 (int)got_signal);
}

static int fail_io(const struct tctl_out *o, int err, const char *what)
{
	/* a reader that stopped reading (`| head`): die of SIGPIPE without
	 * a word, as cat does; there is nothing of ours to clean up */
	if (got_signal == SIGPIPE &&
	    (o->mode == TCTL_OUT_STDOUT || o->mode == TCTL_OUT_DIRECT))
		return TCTL_REFUSED;
	if ((err == EINTR || err == EPIPE) && got_signal)
		return tctl_fail(TCTL_REFUSED, "interrupted", EINTR,
				 "%s: interrupted by signal %d%s", o->path,
				 (int)got_signal,
				 o->mode != TCTL_OUT_REPLACE ? ""
				 : o->created ? "; no file is made"
					      : "; the old file is left as it was");
	return tctl_fail(TCTL_REFUSED, "io", err, "%s: %s%s%s", o->path,
			 what ? what : "", what ? ": " : "", strerror(err));
}

/* No temporary file could be made in dir, the output's folder. */
static int fail_tmp(const struct tctl_out *o, int err, const char *dir)
{
	struct statfs sf;

	if (fstatfs(o->dirfd, &sf) == 0 &&
	    (sf.f_type == PROC_SUPER_MAGIC || sf.f_type == SYSFS_MAGIC))
		return tctl_fail(TCTL_REFUSED, "io", err,
				 "%s: a file of %s is not an output: a file "
				 "is written to a temporary file beside it "
				 "and renamed over it, which %s does not "
				 "allow (%s)",
				 o->path,
				 sf.f_type == SYSFS_MAGIC ? "sysfs" : "procfs",
				 dir, strerror(err));
	return tctl_fail(TCTL_REFUSED, "io", err,
			 "%s: no temporary file could be made in %s to "
			 "write it and %s: %s",
			 o->path, dir,
			 o->staged ? "copy it into the hard-linked file"
				   : "rename it over the path",
			 strerror(err));
}

/* Whether uid could write a file of st (owner, its groups, others). */
static int uid_may_write(uid_t uid, const struct stat *st)
{
	struct passwd *pw;
	gid_t groups[256];
	int n = 256;

	if (uid == 0)
		return 1;
	if (st->st_uid == uid)
		return !!(st->st_mode & S_IWUSR);
	pw = getpwuid(uid);
	if (pw && getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) >= 0)
		for (int i = 0; i < n; i++)
			if (groups[i] == st->st_gid)
				return !!(st->st_mode & S_IWGRP);
	return !!(st->st_mode & S_IWOTH);
}

/* dirname of path into dir (PATH_MAX). */
static void dir_of(const char *path, char *dir)
{
	const char *slash = strrchr(path, '/');

	if (!slash)
		strcpy(dir, ".");
	else if (slash == path)
		strcpy(dir, "/");
	else
		snprintf(dir, PATH_MAX, "%.*s", (int)(slash - path), path);
}

/*
 * Follow path's symlinks (the last component; the kernel follows the
 * folders') into o->target and *st. Returns 0 with *exists set, or a
 * reported status. *link_uid: the owner of the last link followed that is
 * not ours, (uid_t)-1 when none.
 */
static int resolve(struct tctl_out *o, struct stat *st, int *exists,
		   uid_t *link_uid)
{
	char link[PATH_MAX], dir[PATH_MAX], magic[PATH_MAX];

	*link_uid = (uid_t)-1;
	if (strlen(o->path) >= PATH_MAX)
		return fail_io(o, ENAMETOOLONG, NULL);
	strcpy(o->target, o->path);
	for (int hops = 0;; hops++) {
		struct stat ds;
		ssize_t n;

		if (lstat(o->target, st) < 0) {
			if (errno != ENOENT)
				return fail_io(o, errno, NULL);
			/* a procfs magic link (/dev/stdout is
			 * /proc/self/fd/1) reads as "pipe:[N]", no path,
			 * but the kernel follows it to the pipe or device
			 * itself, as cp's open() does: written there */
			if (hops && stat(magic, st) == 0 &&
			    (S_ISFIFO(st->st_mode) || S_ISCHR(st->st_mode) ||
			     S_ISBLK(st->st_mode))) {
				strcpy(o->target, magic);
				break;
			}
			if (hops)
				return tctl_fail(TCTL_REFUSED, "io", ENOENT,
						 "%s: a dangling symlink (to "
						 "%s): not writing through "
						 "it, as cp does not",
						 o->path, o->target);
			*exists = 0;
			return 0;
		}
		if (!S_ISLNK(st->st_mode))
			break;
		if (hops == MAX_HOPS)
			return fail_io(o, ELOOP, NULL);
		/* the kernel's protected_symlinks rule, whatever the
		 * sysctl says: in a sticky world-writable folder, follow
		 * only our own links or the folder owner's */
		dir_of(o->target, dir);
		if (stat(dir, &ds) < 0)
			return fail_io(o, errno, dir);
		if ((ds.st_mode & S_ISVTX) && (ds.st_mode & S_IWOTH) &&
		    st->st_uid != geteuid() && st->st_uid != ds.st_uid)
			return tctl_fail(TCTL_REFUSED, "io", EACCES,
					 "%s: a symlink of uid %u in a sticky "
					 "world-writable folder: not followed "
					 "(the kernel's protected_symlinks "
					 "rule)",
					 o->target, (unsigned)st->st_uid);
		if (st->st_uid != geteuid())
			*link_uid = st->st_uid;
		n = readlink(o->target, link, sizeof(link) - 1);
		if (n < 0)
			return fail_io(o, errno, NULL);
		link[n] = 0;
		/* the link itself, kept for a magic link (above) */
		strcpy(magic, o->target);
		if (link[0] == '/') {
			strcpy(o->target, link);
		} else if ((size_t)snprintf(o->target, PATH_MAX, "%s/%s", dir,
					    link) >= PATH_MAX) {
			return fail_io(o, ENAMETOOLONG, NULL);
		}
	}
	*exists = 1;
	return 0;
}

static int rm_stale_entry(const char *p, const struct stat *st, int flag,
			  struct FTW *f)
{
	(void)st;
	(void)f;
	(flag == FTW_DP ? rmdir : unlink)(p);
	return 0;
}

/* Remove temporary files of ours whose writer died (killed -9), and the
 * folders of a zarr export that died (.tensorctl-PID-NAME-XXXXXX). */
void tctl_remove_stale(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char *end;
		long pid;
		struct stat st;

		if (strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)))
			continue;
		pid = strtol(de->d_name + strlen(TMP_PREFIX), &end, 10);
		if (pid <= 0 || *end != '-' || pid == getpid())
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue; /* its writer may still be at work */
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) <
			    0 ||
		    st.st_uid != geteuid())
			continue;
		if (S_ISREG(st.st_mode)) {
			unlinkat(dirfd(d), de->d_name, 0);
		} else if (S_ISDIR(st.st_mode)) {
			char p[PATH_MAX];

			/* never a link followed, nor another mount */
			if (snprintf(p, sizeof(p), "%s/%s", dir, de->d_name) <
			    (int)sizeof(p))
				nftw(p, rm_stale_entry, 16,
				     FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
		}
	}
	closedir(d);
}

/* The temporary file beside o->target, as o->fd and o->tmp. */
static int make_tmp(struct tctl_out *o)
{
	char dir[PATH_MAX];
	const char *base = strrchr(o->target, '/');
	int n, suffix;

	base = base ? base + 1 : o->target;
	dir_of(o->target, dir);
	tctl_remove_stale(dir);
	/* the name's tail tells a human what it was for; NAME_MAX bounds it */
	n = snprintf(o->tmp, sizeof(o->tmp), "%s/" TMP_PREFIX "%d-XXXXXX-%.200s",
		     dir, (int)getpid(), base);
	if (n < 0 || (size_t)n >= sizeof(o->tmp))
		return fail_io(o, ENAMETOOLONG, NULL);
	o->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (o->dirfd < 0)
		return fail_io(o, errno, dir);
	suffix = strlen(base) > 200 ? 200 : (int)strlen(base);
	o->fd = mkostemps(o->tmp, suffix + 1, O_CLOEXEC);
	if (o->fd < 0) {
		int err = errno;

		o->tmp[0] = 0;
		return fail_tmp(o, err, dir);
	}
	return TCTL_OK;
}

static int open_replace(struct tctl_out *o, const struct stat *old, int exists)
{
	mode_t mask;
	int rc = make_tmp(o);

	if (rc)
		return rc;
	o->mode = TCTL_OUT_REPLACE;
	o->created = !exists;
	if (exists) {
		/* the owner first: chown clears set-id bits */
		if (fchown(o->fd, old->st_uid, old->st_gid) < 0)
			return tctl_fail(TCTL_REFUSED, "io", errno,
					 "%s: belongs to uid %u gid %u, which "
					 "a replacement cannot keep (%s)",
					 o->path, (unsigned)old->st_uid,
					 (unsigned)old->st_gid,
					 strerror(errno));
		if (fchmod(o->fd, old->st_mode & 07777) < 0)
			return fail_io(o, errno, NULL);
		return TCTL_OK;
	}
	/* mkostemp() made it 0600: give it what open(0666) would */
	mask = umask(0);
	umask(mask);
	if (fchmod(o->fd, 0666 & ~mask) < 0)
		return fail_io(o, errno, NULL);
	return TCTL_OK;
}

/* A hard-linked file: room reserved and the size limit checked first. */
static int open_inplace(struct tctl_out *o)
{
	struct rlimit rl;

	o->fd = open(o->target, O_WRONLY | O_CLOEXEC | O_NOCTTY);
	if (o->fd < 0)
		return fail_io(o, errno, NULL);
	o->mode = TCTL_OUT_INPLACE;
	if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    o->size > rl.rlim_cur)
		return fail_io(o, EFBIG, NULL);
	if (o->size &&
	    fallocate(o->fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)o->size) < 0 &&
	    errno != EOPNOTSUPP && errno != ENOSYS)
		return fail_io(o, errno, NULL);
	return TCTL_OK;
}

/*
 * A staged hard-linked file (o->staged): the temporary file, whole, is
 * copied into it once the size limit is checked and the room reserved,
 * so a full disk or the limit fails the output before a byte of it
 * changes (a Hurray save, whose size is known only at its end, used to
 * write the file in place and leave it cut off part way).
 */
static int copy_in(struct tctl_out *o)
{
	struct rlimit rl;
	uint64_t off = 0;
	char *buf = NULL;
	int rc = TCTL_OK, fd = open(o->target, O_WRONLY | O_CLOEXEC | O_NOCTTY);

	if (fd < 0)
		return fail_io(o, errno, NULL);
	if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    o->written > rl.rlim_cur)
		rc = fail_io(o, EFBIG, NULL);
	else if (o->written &&
		 fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)o->written) < 0 &&
		 errno != EOPNOTSUPP && errno != ENOSYS)
		rc = fail_io(o, errno, NULL);
	else if (o->written && !(buf = malloc(CHUNK)))
		rc = fail_io(o, ENOMEM, NULL);
	while (!rc && off < o->written) {
		uint64_t left = o->written - off;
		ssize_t n = pread(o->fd, buf, left > CHUNK ? CHUNK : left,
				  (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = fail_io(o, n < 0 ? errno : ENODATA, "reading back");
			break;
		}
		for (ssize_t w = 0; !rc && w < n;) {
			ssize_t k = pwrite(fd, buf + w, (size_t)(n - w),
					   (off_t)(off + (uint64_t)w));

			if (k < 0 && errno != EINTR)
				rc = fail_io(o, errno, NULL);
			else if (k > 0)
				w += k;
		}
		off += (uint64_t)n;
	}
	free(buf);
	if (!rc && ftruncate(fd, (off_t)o->written) < 0)
		rc = fail_io(o, errno, NULL);
	if (!rc && fsync(fd) < 0)
		rc = fail_io(o, errno, "fsync");
	if (close(fd) < 0 && !rc)
		rc = fail_io(o, errno, "close");
	return rc;
}

/* A socket file: connect to it and send the bytes. */
static int open_socket(struct tctl_out *o)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	if (strlen(o->target) >= sizeof(sa.sun_path))
		return fail_io(o, ENAMETOOLONG, NULL);
	strcpy(sa.sun_path, o->target);
	o->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (o->fd < 0)
		return fail_io(o, errno, NULL);
	while (connect(o->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		/* a tensord's own socket (SOCK_SEQPACKET) or a datagram
		 * one: it said only "Protocol wrong type for socket" */
		if (errno == EPROTOTYPE)
			return tctl_fail(TCTL_REFUSED, "io", EPROTOTYPE,
					 "%s: connect: %s (a datagram or "
					 "SOCK_SEQPACKET socket, such as a "
					 "tensord's own: -o writes into a "
					 "stream socket only)",
					 o->path, strerror(EPROTOTYPE));
		if (errno != EINTR || got_signal)
			return fail_io(o, errno, "connect");
	}
	return TCTL_OK;
}

/* unsized: the size is not known (o->size 0): a hard link is staged */
static int open_target(struct tctl_out *o, unsigned unsized)
{
	struct stat st;
	uid_t link_uid;
	int exists = 0, rc = resolve(o, &st, &exists, &link_uid);

	if (rc)
		return rc;
	if (link_uid != (uid_t)-1 && geteuid() == 0) {
		/* root follows another user's link only where that user
		 * could have written: the target, or a new file's folder */
		struct stat ds;
		char dir[PATH_MAX];

		dir_of(o->target, dir);
		if (!exists && stat(dir, &ds) < 0)
			return fail_io(o, errno, dir);
		if (!uid_may_write(link_uid, exists ? &st : &ds))
			return tctl_fail(TCTL_REFUSED, "io", EACCES,
					 "%s: a symlink of uid %u to %s, "
					 "which uid %u may not write: not "
					 "followed",
					 o->path, (unsigned)link_uid, o->target,
					 (unsigned)link_uid);
	}
	/* a file we could not open for writing is not ours to replace
	 * either (as cp: a read-only file stays unless we are root) */
	if (exists && S_ISREG(st.st_mode) &&
	    faccessat(AT_FDCWD, o->target, W_OK, AT_EACCESS) < 0)
		return fail_io(o, errno, NULL);
	if (!exists || (S_ISREG(st.st_mode) && st.st_nlink <= 1))
		return open_replace(o, &st, exists);
	if (S_ISREG(st.st_mode) && unsized) {
		/* written as a replacement would be, copied in at the end */
		o->mode = TCTL_OUT_REPLACE;
		o->staged = 1;
		return make_tmp(o);
	}
	if (S_ISREG(st.st_mode))
		return open_inplace(o);
	if (S_ISDIR(st.st_mode))
		return fail_io(o, EISDIR, NULL);
	if (S_ISSOCK(st.st_mode))
		return open_socket(o);
	/* device nodes and FIFOs: written where they are. A FIFO's open
	 * waits for a reader: a signal caught after the last look at
	 * got_signal and before the open would be lost, and the open wait
	 * for ever. Nothing is written yet and nothing is to remove, so the
	 * signal takes its default action there (the daemon drops the lease
	 * with the connection), and one caught before is seen here. */
	o->mode = TCTL_OUT_DIRECT;
	in_write = 0;
	if (got_signal)
		return fail_io(o, EINTR, NULL);
	o->fd = open(o->target, O_WRONLY | O_CLOEXEC | O_NOCTTY);
	in_write = 1;
	return o->fd < 0 ? fail_io(o, errno, NULL) : TCTL_OK;
}

int tctl_out_is_stdout(const char *path)
{
	struct stat a, b;

	if (!strcmp(path, "-"))
		return 1;
	/* a device only when it is a terminal: -o /dev/null with stdout
	 * at /dev/null too is two outputs that drop what they get. A
	 * regular file too (`--json get x -o /dev/stdout > f`): the output
	 * replaces it, and what went to stdout after it was lost. */
	return stat(path, &a) == 0 &&
	       (S_ISFIFO(a.st_mode) || S_ISSOCK(a.st_mode) ||
		S_ISREG(a.st_mode) ||
		(S_ISCHR(a.st_mode) && isatty(STDOUT_FILENO))) &&
	       fstat(STDOUT_FILENO, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

int tctl_out_open(struct tctl_out *o, const char *path, unsigned flags,
		  uint64_t size)
{
	int rc;

	memset(o, 0, sizeof(*o));
	o->path = path ? path : "-";
	o->fd = -1;
	o->dirfd = -1;
	o->size = size;
	if (path && !*path)
		return tctl_fail(TCTL_USAGE, "usage", EINVAL,
				 "an empty output path (- is stdout)");
	in_write = 1;
	if (!path || !strcmp(path, "-")) {
		o->mode = TCTL_OUT_STDOUT;
		o->path = "standard output";
		if ((flags & TCTL_OUT_BINARY) && !path &&
		    isatty(STDOUT_FILENO)) {
			in_write = 0;
			return tctl_fail(TCTL_USAGE, "usage", ENOTTY,
					 "refusing to write binary data to a "
					 "terminal (-o - does it anyway)");
		}
		fflush(stdout);
		o->fd = STDOUT_FILENO;
		rc = TCTL_OK;
	} else {
		rc = open_target(o, flags & TCTL_OUT_UNSIZED);
	}
	if (rc) {
		tctl_out_abort(o);
		return rc;
	}
	tctl_progress_start(&o->progress, o->path, size);
	return TCTL_OK;
}

int tctl_out_write(struct tctl_out *o, const void *buf, uint64_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n;

		if (got_signal)
			return fail_io(o, EINTR, NULL);
		n = write(o->fd, p, len > CHUNK ? CHUNK : len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return fail_io(o, errno, NULL);
		p += n;
		len -= (uint64_t)n;
		o->written += (uint64_t)n;
		tctl_progress_add(&o->progress, (uint64_t)n);
	}
	return TCTL_OK;
}

int tctl_out_commit(struct tctl_out *o)
{
	int rc = TCTL_OK;

	tctl_progress_end(&o->progress);
	if (o->staged) {
		rc = got_signal ? fail_io(o, EINTR, NULL) : copy_in(o);
		tctl_out_abort(o);
		return rc;
	}
	if (o->mode == TCTL_OUT_STDOUT) {
		in_write = 0;
		return got_signal ? fail_io(o, EINTR, NULL) : TCTL_OK;
	}
	if (o->mode == TCTL_OUT_INPLACE &&
	    ftruncate(o->fd, (off_t)o->written) < 0)
		rc = fail_io(o, errno, NULL);
	/* devices and FIFOs may not sync: that is no failure */
	if (!rc && fsync(o->fd) < 0 &&
	    (o->mode != TCTL_OUT_DIRECT ||
	     (errno != EINVAL && errno != EROFS && errno != ENOTSUP)))
		rc = fail_io(o, errno, "fsync");
	if (close(o->fd) < 0 && !rc)
		rc = fail_io(o, errno, "close");
	o->fd = -1;
	if (!rc && got_signal)
		rc = fail_io(o, EINTR, NULL);
	if (!rc && o->mode == TCTL_OUT_REPLACE) {
		if (rename(o->tmp, o->target) < 0)
			rc = fail_io(o, errno, "rename");
		else
			o->tmp[0] = 0;
		if (!rc && fsync(o->dirfd) < 0)
			rc = fail_io(o, errno, "fsync of its folder");
	}
	tctl_out_abort(o);
	return rc;
}

void tctl_out_abort(struct tctl_out *o)
{
	tctl_progress_end(&o->progress);
	if (o->fd >= 0 && o->mode != TCTL_OUT_STDOUT)
		close(o->fd);
	o->fd = -1;
	if (o->tmp[0])
		unlink(o->tmp);
	o->tmp[0] = 0;
	if (o->dirfd >= 0)
		close(o->dirfd);
	o->dirfd = -1;
	in_write = 0;
}
