/* SPDX-License-Identifier: MIT */
/*
 * tensorctl as a user meets it, against a private tensord: where outputs
 * go (regular files replaced atomically with their owner and mode, links,
 * device nodes made here with mknod, FIFOs, sockets, signals, file size
 * limits), capped inputs, all-or-nothing load, and the command line
 * itself (getopt, --help, --json errors, sizes). Runs as root, like CI:
 * the ownership and protected-symlink cases need another uid's files.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <grp.h>
#include <sched.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensord/blob.h"
#include "tensord/hrry.h"
#include "tensord/tensord.h"
#include "testutil.h"
#include "tgm-desc.h"

TestSuite(tensorctl, .timeout = TU_TEST_TIMEOUT_S);

#define NOBODY 65534

/* How a tensorctl run is wired. */
struct run {
	int in_fd;      /* its stdin; -1: /dev/null */
	int out_fd;     /* its stdout; -1: captured into *out */
	int err_fd;     /* its stderr; 0: captured into *err */
	rlim_t fsize;   /* RLIMIT_FSIZE; 0: none */
	rlim_t data;    /* RLIMIT_DATA (heap, private mappings); 0: none */
	uid_t uid;      /* run as this uid and gid; 0: as we are */
	pid_t *pid;     /* non-NULL: start it and return at once */
	int closed;     /* bit i: fd i closed at exec (`>&-` is bit 1) */
	unsigned ignored; /* bit i: signal i ignored at exec (`nohup`) */
};

static const char *ctl_bin(void)
{
	const char *bin = getenv("TD_TENSORCTL");

	cr_assert(bin, "TD_TENSORCTL is not set");
	return bin;
}

/*
 * tensorctl --socket SOCK ARGS (NULL-ended); stdout in *out, stderr in
 * *err (either may be NULL); the exit status, or 128 + signal.
 */
static int ctl_run(const struct tu_daemon *d, const struct run *r, char **out,
		   char **err, const char *const *args)
{
	char *argv[64] = {(char *)ctl_bin(), "--socket", (char *)d->sock};
	char what[512], *got[2];
	int p[2][2], n = 3, status, o;
	pid_t pid;

	o = snprintf(what, sizeof(what), "tensorctl");
	for (; *args; args++) {
		cr_assert_lt(n, 62);
		argv[n++] = (char *)*args;
		if (o < (int)sizeof(what))
			o += snprintf(what + o, sizeof(what) - (size_t)o,
				      " %s", *args);
	}
	argv[n] = NULL;
	cr_assert(pipe2(p[0], O_CLOEXEC) == 0 && pipe2(p[1], O_CLOEXEC) == 0);
	pid = tu_fork();
	if (pid == 0) {
		int in = r && r->in_fd >= 0 ? r->in_fd
					    : open("/dev/null", O_RDONLY);

		dup2(in, 0);
		dup2(r && r->out_fd >= 0 ? r->out_fd : p[0][1], 1);
		dup2(r && r->err_fd > 0 ? r->err_fd : p[1][1], 2);
		if (r && r->pid) {
			/* nobody reads its output: /dev/null, not a pipe
			 * that would SIGPIPE it */
			int null = open("/dev/null", O_WRONLY);

			dup2(null, 1);
			dup2(null, 2);
		}
		for (int fd = 0; r && fd <= 2; fd++)
			if (r->closed & (1 << fd))
				close(fd);
		for (int sig = 1; r && sig < 32; sig++)
			if (r->ignored & (1u << sig))
				signal(sig, SIG_IGN);
		if (r && r->fsize) {
			struct rlimit rl = {r->fsize, r->fsize};

			setrlimit(RLIMIT_FSIZE, &rl);
		}
		if (r && r->data) {
			struct rlimit rl = {r->data, r->data};

			setrlimit(RLIMIT_DATA, &rl);
		}
		if (r && r->uid &&
		    (setgroups(0, NULL) || setgid(r->uid) || setuid(r->uid) ||
		     prctl(PR_SET_PDEATHSIG, SIGKILL))) /* cleared by it */
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[0][1]);
	close(p[1][1]);
	if (r && r->pid) {
		close(p[0][0]);
		close(p[1][0]);
		*r->pid = pid;
		return 0;
	}
	/* bounded: a tensorctl that hangs (a FIFO's open, a lost signal)
	 * fails the test that ran it */
	status = tu_collect(pid, 2, (int[]){p[0][0], p[1][0]}, got, TU_WAIT_S,
			    what);
	for (int k = 0; k < 2; k++) {
		char **dst = k ? err : out;

		if (dst)
			*dst = got[k];
		else
			free(got[k]);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status)
				 : 128 + WTERMSIG(status);
}

#define CTL(d, out, err, ...)                                                  \
	ctl_run(d, NULL, out, err, (const char *const[]){__VA_ARGS__, NULL})
#define CTL_R(d, r, out, err, ...)                                             \
	ctl_run(d, r, out, err, (const char *const[]){__VA_ARGS__, NULL})

static void write_file(const char *path, const void *b, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, b, n), (ssize_t)n);
	close(fd);
}

/* The file holds exactly s. */
static void expect_file(const char *path, const char *s)
{
	size_t len;
	uint8_t *b = tu_read_file(path, &len);

	cr_expect(len == strlen(s) && !memcmp(b, s, len),
		  "%s holds %zu bytes '%.*s', not '%s'", path, len, (int)len,
		  (char *)b, s);
	free(b);
}

/* Number of tensorctl temporary files left in dir. */
static int temp_files(const char *dir)
{
	DIR *dd = opendir(dir);
	struct dirent *de;
	int n = 0;

	cr_assert(dd);
	while ((de = readdir(dd)))
		n += !strncmp(de->d_name, ".tensorctl-", 11);
	closedir(dd);
	return n;
}

/* s starts with prefix */
static int starts(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

static void path_in(char *buf, size_t n, const struct tu_daemon *d,
		    const char *name)
{
	snprintf(buf, n, "%s/%s", d->dir, name);
}

/* A daemon with "t" = "abcdef" (u8 2x3). */
static void start(struct tu_daemon *d)
{
	char in[160], *err;

	tu_daemon_start(d, "error");
	path_in(in, sizeof(in), d, "six.bin");
	write_file(in, "abcdef", 6);
	cr_assert_eq(CTL(d, NULL, &err, "put", "t", "--dtype", "u8",
			 "--shape", "2,3", in),
		     0, "%s", err);
	free(err);
	unlink(in);
}

/* Publish bytes zero bytes as u8 tensor name. */
static void put_zeros(const struct tu_daemon *d, const char *name,
		      uint64_t bytes)
{
	uint8_t *b = calloc(1, bytes);
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &bytes};
	struct td_error e = {0};
	struct td_client *c;

	cr_assert(b);
	cr_assert_eq(td_client_connect(d->sock, &c, NULL), 0);
	cr_assert_eq(td_client_put(c, &p, b, bytes, NULL, &e), 0, "%s",
		     e.reason);
	td_client_close(c);
	free(b);
}

static void put_meta(const struct tu_daemon *d, const char *name,
		     const char *meta, size_t len)
{
	uint64_t n = 4;
	uint8_t b[4] = {0};
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &n, .meta = meta,
			       .meta_len = len};
	struct td_error e = {0};
	struct td_client *c;

	cr_assert_eq(td_client_connect(d->sock, &c, NULL), 0);
	cr_assert_eq(td_client_put(c, &p, b, sizeof(b), NULL, &e), 0, "%s",
		     e.reason);
	td_client_close(c);
}

/* STAT of name: 1 with its lease count in *leases, or 0 when absent. */
static int stat_name(const struct tu_daemon *d, const char *name,
		     uint32_t *leases)
{
	struct td_client *c;
	struct td_entry e;
	int rc;

	cr_assert_eq(td_client_connect(d->sock, &c, NULL), 0);
	rc = td_client_stat(c, name, &e, NULL);
	if (rc == 0 && leases)
		*leases = e.lease_count;
	if (rc == 0)
		td_entry_fini(&e);
	td_client_close(c);
	return rc == 0;
}

static int exists(const struct tu_daemon *d, const char *name)
{
	return stat_name(d, name, NULL);
}

static uint32_t leases(const struct tu_daemon *d, const char *name)
{
	uint32_t n = 0;

	cr_assert(stat_name(d, name, &n), "%s is gone", name);
	return n;
}

/* A pty pair: *master, and the slave's fd as the return value. */
static int open_pty(int *master)
{
	int s;

	*master = posix_openpt(O_RDWR | O_NOCTTY);
	cr_assert(*master >= 0);
	cr_assert_eq(grantpt(*master), 0);
	cr_assert_eq(unlockpt(*master), 0);
	s = open(ptsname(*master), O_RDWR | O_NOCTTY);
	cr_assert(s >= 0);
	return s;
}

/* ---- outputs ---- */

Test(tensorctl, regular_file_replaced_keeping_another_users_owner_and_mode)
{
	struct tu_daemon d;
	char path[160], *err;
	struct stat st0, st;

	start(&d);
	path_in(path, sizeof(path), &d, "theirs.bin");
	write_file(path, "old", 3);
	cr_assert_eq(chown(path, NOBODY, NOBODY), 0);
	cr_assert_eq(chmod(path, 0600), 0);
	cr_assert_eq(stat(path, &st0), 0);
	cr_assert_eq(CTL(&d, NULL, &err, "get", "t", "-o", path), 0, "%s", err);
	free(err);
	expect_file(path, "abcdef");
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_eq(st.st_uid, NOBODY);
	cr_expect_eq(st.st_gid, NOBODY);
	cr_expect_eq(st.st_mode & 07777, 0600, "mode %o", st.st_mode & 07777);
	cr_expect_neq(st.st_ino, st0.st_ino, "replaced, not rewritten");
	/* save goes through the same rules */
	cr_assert_eq(chmod(path, 0640), 0);
	cr_assert_eq(CTL(&d, NULL, &err, "save", "t", "-o", path), 0, "%s",
		     err);
	free(err);
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_eq(st.st_uid, NOBODY);
	cr_expect_eq(st.st_mode & 07777, 0640);
	cr_expect_gt(st.st_size, 6);
	/* a new file: 0666 less the umask, ours */
	path_in(path, sizeof(path), &d, "new.bin");
	umask(022);
	cr_assert_eq(CTL(&d, NULL, NULL, "get", "t", "--output="), 2,
		     "an empty --output= is not a path");
	cr_assert_eq(CTL(&d, NULL, NULL, "get", "t", "--output", path), 0);
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_eq(st.st_mode & 07777, 0644);
	cr_expect_eq(temp_files(d.dir), 0);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, symlink_followed_to_its_target_and_kept)
{
	struct tu_daemon d;
	char target[160], link[160], dangling[160], sub[160], rel[200];
	char buf[160], *err;
	struct stat st;
	ssize_t n;

	start(&d);
	path_in(target, sizeof(target), &d, "target.bin");
	path_in(link, sizeof(link), &d, "link");
	path_in(sub, sizeof(sub), &d, "sub");
	write_file(target, "old", 3);
	cr_assert_eq(symlink("target.bin", link), 0);
	cr_assert_eq(mkdir(sub, 0755), 0);
	/* a relative link in another folder, to the first link */
	snprintf(rel, sizeof(rel), "%s/rel", sub);
	cr_assert_eq(symlink("../link", rel), 0);
	cr_assert_eq(CTL(&d, NULL, &err, "get", "t", "-o", rel), 0, "%s", err);
	free(err);
	expect_file(target, "abcdef");
	cr_assert_eq(lstat(link, &st), 0);
	cr_expect(S_ISLNK(st.st_mode), "the link was replaced");
	cr_assert_eq(lstat(rel, &st), 0);
	cr_expect(S_ISLNK(st.st_mode));
	n = readlink(link, buf, sizeof(buf));
	cr_expect(n == 10 && !memcmp(buf, "target.bin", 10));
	/* a dangling link is not written through (as cp) */
	path_in(dangling, sizeof(dangling), &d, "dangling");
	cr_assert_eq(symlink("nowhere.bin", dangling), 0);
	cr_expect_eq(CTL(&d, NULL, &err, "get", "t", "-o", dangling), 1);
	cr_expect(strstr(err, "dangling"), "%s", err);
	free(err);
	path_in(buf, sizeof(buf), &d, "nowhere.bin");
	cr_expect(access(buf, F_OK) < 0, "created through a dangling link");
	cr_expect_eq(temp_files(d.dir), 0);
	cr_expect_eq(temp_files(sub), 0);
	unlink(rel);
	rmdir(sub);
	tu_daemon_stop(&d, false);
}

/*
 * /dev/stdout is a link to /proc/self/fd/1, whose own link reads
 * "pipe:[N]" when stdout is a pipe: no path, but the kernel follows it,
 * as cp's open() does. It was refused as a dangling link, so `get -o
 * /dev/stdout | ...`, which cp writes, failed.
 */
Test(tensorctl, dev_stdout_on_a_pipe_is_written_as_cp_writes_it)
{
	static const char *const paths[] = {"/dev/stdout", "/proc/self/fd/1"};
	struct tu_daemon d;
	char *out, *err;

	start(&d);
	for (size_t i = 0; i < sizeof(paths) / sizeof(*paths); i++) {
		cr_expect_eq(CTL(&d, &out, &err, "get", "t", "-o", paths[i]),
			     0, "%s: %s", paths[i], err);
		cr_expect_str_eq(out, "abcdef", "%s", paths[i]);
		free(out);
		free(err);
		/* stdout's own: nothing but the output goes there, as with
		 * -o - (save's summary line came after the message) */
		cr_expect_eq(CTL(&d, &out, &err, "--json", "get", "t", "-o",
				 paths[i]),
			     2, "%s: %s", paths[i], out);
		free(out);
		free(err);
		for (int hrry = 0; hrry < 2; hrry++) {
			char sh[512];
			char *argv[] = {"/bin/sh", "-c", sh, NULL};

			/* the file holds NULs: the shell compares them */
			snprintf(sh, sizeof(sh),
				 "c() { '%s' --socket '%s' save --format %s "
				 "-o \"$1\" t | od -An -tx1; }; "
				 "[ \"$(c -)\" = \"$(c %s)\" ]",
				 ctl_bin(), d.sock, hrry ? "hrry" : "tgm",
				 paths[i]);
			cr_expect_eq(tu_run_capture(argv, &out), 0,
				     "%s %s: more than the file on stdout: %s",
				     paths[i], hrry ? "hrry" : "tgm", out);
			free(out);
		}
	}
	cr_expect_eq(temp_files(d.dir), 0);
	tu_daemon_stop(&d, false);
}

/*
 * stdout sent to a regular file is stdout's own too: the output (-o
 * /dev/stdout, or the file's own path) replaced that file, and the
 * --json document written to stdout after it went to the file replaced,
 * lost, with status 0. It is refused as with -o -.
 */
Test(tensorctl, dev_stdout_on_a_file_is_stdouts_own_under_json)
{
	static const char *const cmds[] = {"get t", "save t --format tgm",
					   "save t --format hrry"};
	struct tu_daemon d;
	char file[160], sh[768], *out;
	char *argv[] = {"/bin/sh", "-c", sh, NULL};

	start(&d);
	path_in(file, sizeof(file), &d, "stdout.bin");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(*cmds); i++)
		for (int own = 0; own < 2; own++) {
			char *doc;
			size_t len;

			snprintf(sh, sizeof(sh),
				 "'%s' --socket '%s' --json %s -o '%s' > '%s'",
				 ctl_bin(), d.sock, cmds[i],
				 own ? file : "/dev/stdout", file);
			cr_expect_eq(tu_run_capture(argv, &out), 2, "%s: %s",
				     sh, out);
			free(out);
			doc = (char *)tu_read_file(file, &len);
			doc[len] = '\0'; /* it has room for one more */
			cr_expect(starts(doc, "{\"error\":{\"kind\":\"usage\"") &&
					  strstr(doc, "both write to stdout"),
				  "%s: the file holds '%s'", sh, doc);
			free(doc);
		}
	/* without --json the output is written there, as before */
	snprintf(sh, sizeof(sh),
		 "'%s' --socket '%s' get t -o /dev/stdout > '%s'", ctl_bin(),
		 d.sock, file);
	cr_expect_eq(tu_run_capture(argv, &out), 0, "%s", out);
	free(out);
	expect_file(file, "abcdef");
	cr_expect_eq(temp_files(d.dir), 0);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, protected_symlinks_not_followed_as_root)
{
	struct tu_daemon d;
	char sticky[160], rootfile[160], link[200], plain[160], theirs[160];
	char *err;

	cr_assert_eq(geteuid(), 0, "this test runs as root (as CI does)");
	start(&d);
	path_in(rootfile, sizeof(rootfile), &d, "root.bin");
	write_file(rootfile, "root", 4);
	/* another uid's link in a sticky world-writable folder (/tmp-like) */
	path_in(sticky, sizeof(sticky), &d, "sticky");
	cr_assert_eq(mkdir(sticky, 0755), 0);
	cr_assert_eq(chmod(sticky, 01777), 0);
	snprintf(link, sizeof(link), "%s/trap", sticky);
	cr_assert_eq(symlink(rootfile, link), 0);
	cr_assert_eq(lchown(link, NOBODY, NOBODY), 0);
	cr_expect_eq(CTL(&d, NULL, &err, "get", "t", "-o", link), 1);
	cr_expect(strstr(err, "protected_symlinks"), "%s", err);
	free(err);
	expect_file(rootfile, "root");
	/* the same link elsewhere: still not into a file uid 65534 could
	 * not write */
	path_in(plain, sizeof(plain), &d, "plain-link");
	cr_assert_eq(symlink(rootfile, plain), 0);
	cr_assert_eq(lchown(plain, NOBODY, NOBODY), 0);
	cr_expect_eq(CTL(&d, NULL, &err, "save", "t", "-o", plain), 1);
	cr_expect(strstr(err, "may not write"), "%s", err);
	free(err);
	expect_file(rootfile, "root");
	/* ... but into one it could */
	path_in(theirs, sizeof(theirs), &d, "theirs.bin");
	write_file(theirs, "old", 3);
	cr_assert_eq(chown(theirs, NOBODY, NOBODY), 0);
	unlink(plain);
	cr_assert_eq(symlink(theirs, plain), 0);
	cr_assert_eq(lchown(plain, NOBODY, NOBODY), 0);
	cr_expect_eq(CTL(&d, NULL, &err, "get", "t", "-o", plain), 0, "%s",
		     err);
	free(err);
	expect_file(theirs, "abcdef");
	cr_expect_eq(temp_files(d.dir), 0);
	unlink(link);
	rmdir(sticky);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, device_nodes_written_never_replaced)
{
	struct tu_daemon d;
	char null[160], full[160], *err;
	struct stat st;

	start(&d);
	path_in(null, sizeof(null), &d, "null");
	path_in(full, sizeof(full), &d, "full");
	/* our own nodes, in our own folder: never the system's */
	cr_assert_eq(mknod(null, S_IFCHR | 0666, makedev(1, 3)), 0);
	cr_assert_eq(mknod(full, S_IFCHR | 0666, makedev(1, 7)), 0);
	cr_expect_eq(CTL(&d, NULL, &err, "get", "t", "-o", null), 0, "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "save", "t", "-o", null), 0, "%s",
		     err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "get", "t", "-o", full), 1);
	cr_expect(strstr(err, "No space left"), "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, NULL, "save", "t", "-o", full), 1);
	cr_assert_eq(lstat(null, &st), 0);
	cr_expect(S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3));
	cr_assert_eq(lstat(full, &st), 0);
	cr_expect(S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 7));
	cr_expect_eq(temp_files(d.dir), 0);
	unlink(null);
	unlink(full);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, directory_refused_and_socket_written_directly)
{
	struct tu_daemon d;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char sock[160], got[16] = "", *err;
	struct stat st;
	int ls, c;

	start(&d);
	cr_expect_eq(CTL(&d, NULL, &err, "get", "t", "-o", d.dir), 1);
	cr_expect(strstr(err, "Is a directory"), "%s", err);
	free(err);
	/* a /proc file is no output, and the message says why rather than
	 * name the temporary file */
	cr_expect_eq(CTL(&d, NULL, &err, "get", "t", "-o", "/proc/version"),
		     1);
	cr_expect(strstr(err, "/proc/version: a file of procfs is not an "
			      "output"),
		  "%s", err);
	free(err);
	path_in(sock, sizeof(sock), &d, "out.sock");
	strcpy(sa.sun_path, sock);
	ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert(ls >= 0);
	cr_assert_eq(bind(ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(ls, 1), 0);
	/* 6 bytes fit the socket buffer before anyone accepts */
	cr_expect_eq(CTL(&d, NULL, &err, "get", "t", "-o", sock), 0, "%s", err);
	free(err);
	/* a tensorctl that failed never connected: no accept for ever */
	tu_await_readable(ls, TU_WAIT_S, "tensorctl's connection");
	c = accept(ls, NULL, NULL);
	cr_assert(c >= 0);
	cr_expect_eq(read(c, got, sizeof(got)), 6);
	cr_expect_str_eq(got, "abcdef");
	cr_assert_eq(lstat(sock, &st), 0);
	cr_expect(S_ISSOCK(st.st_mode));
	close(c);
	close(ls);
	unlink(sock);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, hard_link_rewritten_in_place)
{
	struct tu_daemon d;
	char a[160], b[160], *err;
	struct stat sa, sb;

	start(&d);
	path_in(a, sizeof(a), &d, "a.bin");
	path_in(b, sizeof(b), &d, "b.bin");
	write_file(a, "old old old", 11);
	cr_assert_eq(link(a, b), 0);
	cr_assert_eq(CTL(&d, NULL, &err, "get", "t", "-o", a), 0, "%s", err);
	free(err);
	expect_file(a, "abcdef");
	expect_file(b, "abcdef");
	cr_assert_eq(stat(a, &sa), 0);
	cr_assert_eq(stat(b, &sb), 0);
	cr_expect_eq(sa.st_ino, sb.st_ino, "the link was split");
	cr_expect_eq(sa.st_nlink, 2);
	/* over the file size limit: refused before a byte changes */
	{
		struct run r = {.in_fd = -1, .out_fd = -1, .fsize = 4};

		write_file(b, "old", 3);
		cr_expect_eq(CTL_R(&d, &r, NULL, &err, "get", "t", "-o", a),
			     1);
		cr_expect(strstr(err, "too large"), "%s", err);
		free(err);
		expect_file(a, "old");
	}
	unlink(a);
	unlink(b);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, file_size_limit_leaves_the_old_file_and_no_temp)
{
	struct tu_daemon d;
	struct run r = {.in_fd = -1, .out_fd = -1, .fsize = 4};
	char path[160], *err;

	start(&d);
	path_in(path, sizeof(path), &d, "keep.bin");
	write_file(path, "old", 3);
	/* EFBIG in the middle of the temp file, for both writers */
	cr_expect_eq(CTL_R(&d, &r, NULL, &err, "get", "t", "-o", path), 1);
	cr_expect(strstr(err, "File too large"), "%s", err);
	free(err);
	expect_file(path, "old");
	cr_expect_eq(CTL_R(&d, &r, NULL, NULL, "save", "t", "-o", path), 1);
	expect_file(path, "old");
	cr_expect_eq(temp_files(d.dir), 0);
	tu_daemon_stop(&d, false);
}

/* Not root: what the user could not write is not replaced either. */
Test(tensorctl, unprivileged_user_replaces_only_what_it_may_write)
{
	static const char *const open_socket[] = {"--socket-mode", "0666",
						  NULL};
	struct tu_daemon d;
	struct run r = {.in_fd = -1, .out_fd = -1, .uid = NOBODY};
	char dir[160], mine[200], ro[200], roots[200], *err;
	struct stat st;

	tu_daemon_start_args(&d, "error", open_socket);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	put_zeros(&d, "t", 6);
	path_in(dir, sizeof(dir), &d, "home");
	cr_assert_eq(mkdir(dir, 0755), 0);
	cr_assert_eq(chown(dir, NOBODY, NOBODY), 0);
	snprintf(mine, sizeof(mine), "%s/mine.bin", dir);
	snprintf(ro, sizeof(ro), "%s/readonly.bin", dir);
	snprintf(roots, sizeof(roots), "%s/roots.bin", dir);
	write_file(mine, "old", 3);
	write_file(ro, "old", 3);
	write_file(roots, "old", 3);
	cr_assert_eq(chown(mine, NOBODY, NOBODY), 0);
	cr_assert_eq(chmod(mine, 0604), 0);
	cr_assert_eq(chown(ro, NOBODY, NOBODY), 0);
	cr_assert_eq(chmod(ro, 0444), 0);
	cr_assert_eq(chmod(roots, 0666), 0);
	/* its own file: replaced, mode kept */
	cr_expect_eq(CTL_R(&d, &r, NULL, &err, "get", "t", "-o", mine), 0,
		     "%s", err);
	free(err);
	cr_assert_eq(stat(mine, &st), 0);
	cr_expect(st.st_size == 6 && st.st_uid == NOBODY &&
		  (st.st_mode & 07777) == 0604);
	/* read-only: refused, as cp would */
	cr_expect_eq(CTL_R(&d, &r, NULL, &err, "get", "t", "-o", ro), 1);
	cr_expect(strstr(err, "Permission denied"), "%s", err);
	free(err);
	expect_file(ro, "old");
	/* root's file, writable by all: its owner cannot be kept */
	cr_expect_eq(CTL_R(&d, &r, NULL, &err, "save", "t", "-o", roots), 1);
	cr_expect(strstr(err, "belongs to uid 0"), "%s", err);
	free(err);
	expect_file(roots, "old");
	cr_expect_eq(temp_files(dir), 0);
	unlink(mine);
	unlink(ro);
	unlink(roots);
	rmdir(dir);
	tu_daemon_stop(&d, false);
}

/* A real ENOSPC: a 64 KiB tmpfs in a private mount namespace. */
Test(tensorctl, full_filesystem_leaves_the_old_file_and_no_temp)
{
	struct tu_daemon d;
	char mnt[160], path[200], other[200], *err;
	int rc;

	start(&d);
	put_zeros(&d, "big", 1 << 20);
	path_in(mnt, sizeof(mnt), &d, "small");
	cr_assert_eq(mkdir(mnt, 0755), 0);
	if ((rc = tu_private_tmpfs(mnt, "size=64k")) < 0) {
		rmdir(mnt);
		tu_daemon_stop(&d, false);
		cr_skip_test("no mount namespace (%s): ENOSPC on a file not "
			     "checked",
			     strerror(-rc));
	}
	snprintf(path, sizeof(path), "%s/keep.bin", mnt);
	write_file(path, "old", 3);
	cr_expect_eq(CTL(&d, NULL, &err, "get", "big", "-o", path), 1);
	cr_expect(strstr(err, "No space left"), "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, NULL, "save", "big", "-o", path), 1);
	expect_file(path, "old");
	cr_expect_eq(temp_files(mnt), 0);
	/* a hard-linked file: the room is reserved before a byte changes */
	snprintf(other, sizeof(other), "%s/other.bin", mnt);
	cr_assert_eq(link(path, other), 0);
	cr_expect_eq(CTL(&d, NULL, &err, "get", "big", "-o", path), 1);
	cr_expect(strstr(err, "No space left"), "%s", err);
	free(err);
	expect_file(other, "old");
	umount(mnt);
	rmdir(mnt);
	tu_daemon_stop(&d, false);
}

/*
 * A Hurray save is one forward pass whose size is known only at its end,
 * so a hard-linked output (rewritten in place) had no room reserved: on
 * a full disk, or past the file size limit, the save failed but left
 * the file cut off part way, the old bytes gone under both names. Now
 * it is written to a temporary file first and copied in once whole,
 * after the room is reserved: a failure leaves the file as it was.
 */
Test(tensorctl, a_hurray_save_into_a_hard_link_fails_leaving_it_whole)
{
	struct tu_daemon d;
	struct run r = {.in_fd = -1, .out_fd = -1, .fsize = 8192};
	char mnt[160], path[200], other[200], want[300], *err, *out;
	struct stat sa, sb;
	int rc;

	start(&d);
	put_zeros(&d, "big", 1 << 20);
	/* past the file size limit, on any disk */
	path_in(path, sizeof(path), &d, "keep.hrry");
	path_in(other, sizeof(other), &d, "other.hrry");
	write_file(path, "old", 3);
	cr_assert_eq(link(path, other), 0);
	cr_expect_eq(CTL_R(&d, &r, NULL, &err, "save", "big", "-o", path), 1);
	cr_expect(strstr(err, "File too large"), "%s", err);
	free(err);
	expect_file(path, "old");
	expect_file(other, "old");
	cr_expect_eq(temp_files(d.dir), 0);
	unlink(path);
	unlink(other);

	path_in(mnt, sizeof(mnt), &d, "small");
	cr_assert_eq(mkdir(mnt, 0755), 0);
	if ((rc = tu_private_tmpfs(mnt, "size=256k")) < 0) {
		rmdir(mnt);
		tu_daemon_stop(&d, false);
		cr_skip_test("kernel feature missing: a mount namespace with "
			     "a tmpfs (%s; root needed): ENOSPC not checked",
			     strerror(-rc));
	}
	snprintf(path, sizeof(path), "%s/keep.hrry", mnt);
	snprintf(other, sizeof(other), "%s/other.hrry", mnt);
	write_file(path, "old", 3);
	cr_assert_eq(link(path, other), 0);
	cr_expect_eq(CTL(&d, NULL, &err, "save", "big", "-o", path), 1);
	snprintf(want, sizeof(want), "tensorctl: %s: %s\n", path,
		 strerror(ENOSPC));
	cr_expect_str_eq(err, want);
	free(err);
	expect_file(path, "old");
	expect_file(other, "old");
	cr_expect_eq(temp_files(mnt), 0);
	/* one that fits is still written in place: both names see it */
	cr_expect_eq(CTL(&d, &out, &err, "save", "t", "-o", path), 0, "%s",
		     err);
	free(out);
	free(err);
	cr_assert_eq(stat(path, &sa), 0);
	cr_assert_eq(stat(other, &sb), 0);
	cr_expect(sa.st_ino == sb.st_ino && sa.st_nlink == 2,
		  "the link was split");
	cr_expect_eq(temp_files(mnt), 0);
	cr_expect_eq(CTL(&d, &out, &err, "inspect", other), 0, "%s", err);
	cr_expect(strstr(out, "t: uint8 [2,3] row-major"), "%s", out);
	free(out);
	free(err);
	umount(mnt);
	rmdir(mnt);
	tu_daemon_stop(&d, false);
}

/*
 * stdout on a full disk (/dev/full): what stdio buffered was lost at
 * exit and every command that prints (ls, status, stat, --json, --help,
 * save's summary line) exited 0; watch wrote its lines to nowhere for
 * ever. Now the failed flush is an error: status 1, said on stderr.
 */
/* A child that publishes "w" every 10 ms for 30 s: what a watch sees. */
static pid_t publish_w_in_child(struct tu_daemon *d)
{
	pid_t pub = tu_fork();

	if (pub == 0) {
		for (int i = 0; i < 3000; i++) {
			struct td_client *c;
			uint64_t one = 1;
			struct td_publish p = {.name = "w", .dtype = TD_TENSOR_U8,
					       .ndim = 1, .shape = &one};

			if (td_client_connect(d->sock, &c, NULL) == 0) {
				td_client_put(c, &p, "x", 1, NULL, NULL);
				td_client_close(c);
			}
			usleep(10000);
		}
		_exit(0);
	}
	return pub;
}

Test(tensorctl, a_full_stdout_fails_the_command)
{
	static const char *const cmds[][4] = {
		{"ls"},		{"status"},	    {"stat", "t"},
		{"--json", "ls"}, {"ls", "--help"}, {"--version"}};
	struct tu_daemon d;
	struct run r = {.in_fd = -1};
	char path[160], *err;
	pid_t pub;
	int rc;

	start(&d);
	r.out_fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
	cr_assert_geq(r.out_fd, 0);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		rc = ctl_run(&d, &r, NULL, &err, cmds[i]);
		cr_expect_eq(rc, 1, "%s: exit %d", cmds[i][0], rc);
		cr_expect(strstr(err, "standard output: No space left"),
			  "%s: %s", cmds[i][0], err);
		free(err);
	}
	/* the file is written; the line saying so is not */
	path_in(path, sizeof(path), &d, "out.tgm");
	cr_expect_eq(CTL_R(&d, &r, NULL, NULL, "save", "t", "-o", path), 1);
	/* watch: ends at its first line, which cannot be written */
	pub = publish_w_in_child(&d);
	rc = CTL_R(&d, &r, NULL, &err, "watch", "w");
	kill(pub, SIGKILL);
	cr_assert(tu_reap_within(pub, TU_WAIT_S, NULL));
	cr_expect_eq(rc, 1, "watch: exit %d: %s", rc, err);
	cr_expect(strstr(err, "standard output: No space left"), "%s", err);
	free(err);
	cr_expect_eq(leases(&d, "t"), 0);
	close(r.out_fd);
	tu_daemon_stop(&d, false);
}

/* A line of the watch's stdout, within TU_WAIT_S. */
static void watch_line(FILE *f, const char *want)
{
	char line[256];

	tu_await_readable(fileno(f), TU_WAIT_S, want);
	cr_assert(fgets(line, sizeof(line), f), "no line, want %s", want);
	cr_assert_str_eq(line, want);
}

/*
 * With $TENSORD_RECONNECT=1 libtensord connects again after a daemon
 * restart (README, "Event loops"), but watch ended at the call during
 * which the daemon went away ("receive: Connection reset by peer"). Now
 * it waits for the daemon, says `reconnected` and goes on.
 */
Test(tensorctl, watch_goes_on_across_a_restart_with_tensord_reconnect)
{
	struct tu_daemon d1, d2;
	char link[64], in[64], *err;
	int p[2], st;
	pid_t pid;
	FILE *f;

	snprintf(link, sizeof(link), "/tmp/td-ctl-reconnect-%d.sock",
		 (int)getpid());
	snprintf(in, sizeof(in), "/tmp/td-ctl-reconnect-%d.bin",
		 (int)getpid());
	write_file(in, "abcdef", 6);
	tu_daemon_start(&d1, "error");
	tu_link_to(link, d1.sock);
	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	pid = tu_fork();
	if (pid == 0) {
		dup2(p[1], 1);
		setenv("TENSORD_RECONNECT", "1", 1);
		execl(ctl_bin(), ctl_bin(), "--socket", link, "watch", "w",
		      "--count", "3", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	f = fdopen(p[0], "r");
	cr_assert(f);
	/* the watch is in place once the daemon counts it */
	for (int i = 0, in_place = 0; !in_place; i++) {
		char *out;

		cr_assert_lt(i, 2000, "the watch never came");
		cr_assert_eq(CTL(&d1, &out, NULL, "status", "--json"), 0);
		in_place = strstr(out, "\"watches\":1") != NULL;
		free(out);
		usleep(10000);
	}
	cr_assert_eq(CTL(&d1, NULL, NULL, "put", "w", "--dtype", "u8",
			 "--shape", "6", in),
		     0);
	watch_line(f, "published w 1\n");
	tu_daemon_kill(&d1);
	tu_daemon_start(&d2, "error");
	tu_link_to(link, d2.sock);
	watch_line(f, "reconnected  1\n");
	cr_assert_eq(CTL(&d2, NULL, &err, "put", "w", "--dtype", "u8",
			 "--shape", "6", in),
		     0, "%s", err);
	free(err);
	watch_line(f, "published w 1\n");
	cr_assert(tu_reap_within(pid, TU_WAIT_S, &st), "watch did not end");
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);
	fclose(f);
	tu_daemon_kill(&d2);
	unlink(link);
	unlink(in);
}

/*
 * A stdout closed at exec (`>&-`) was the lowest free fd, so the daemon's
 * socket took it: get -o - sent the tensor's bytes to the daemon as a
 * request and exited 0, and watch sent its lines there and never ended.
 * Now a closed stdout fails as the docs say: status 1, said on stderr,
 * and the daemon sees no stray datagram.
 */
Test(tensorctl, a_closed_stdout_fails_and_reaches_no_socket)
{
	struct tu_daemon d;
	struct run r = {.in_fd = -1, .out_fd = -1, .closed = 1 << 1};
	char *out, *err;
	pid_t pub;
	int rc;

	start(&d);
	rc = CTL_R(&d, &r, NULL, &err, "get", "t", "-o", "-");
	cr_expect_eq(rc, 1, "get: exit %d: %s", rc, err);
	cr_expect(strstr(err, "standard output: Bad file descriptor"), "%s",
		  err);
	free(err);
	pub = publish_w_in_child(&d);
	rc = CTL_R(&d, &r, NULL, &err, "watch", "w");
	kill(pub, SIGKILL);
	cr_assert(tu_reap_within(pub, TU_WAIT_S, NULL));
	cr_expect_eq(rc, 1, "watch: exit %d: %s", rc, err);
	cr_expect(strstr(err, "standard output: Bad file descriptor"), "%s",
		  err);
	free(err);
	cr_assert_eq(CTL(&d, &out, NULL, "status", "--json"), 0);
	cr_expect(strstr(out, "\"refused\":{\"permission\":0,\"quota\":0,"
			      "\"input\":0}"),
		  "no stray datagram reached the daemon: %s", out);
	free(out);
	tu_daemon_stop(&d, false);
}

/*
 * load FILE.hrry mapped the file: one cut short while it was read (by
 * someone else, between the index and the data) killed tensorctl with
 * SIGBUS, after whatever it had published already, which its all or
 * nothing rule would have deleted. The shim cuts the file to 0 bytes
 * just before tensorctl connects, after the index is read. Now the file
 * is read with pread: its end is an error like any short file.
 */
Test(tensorctl, a_hurray_file_cut_during_load_is_an_error_not_a_crash)
{
	struct tu_daemon d;
	char path[160], *err;
	int rc;

	start(&d);
	put_zeros(&d, "big", 1 << 20);
	path_in(path, sizeof(path), &d, "in.hrry");
	cr_assert_eq(CTL(&d, NULL, &err, "save", "-o", path, "big", "t"), 0,
		     "%s", err);
	free(err);
	tu_shim_on("TD_TRUNCATE_BEFORE_CONNECT", path);
	rc = CTL(&d, NULL, &err, "load", path, "--prefix", "L/");
	tu_shim_off("TD_TRUNCATE_BEFORE_CONNECT");
	cr_expect_eq(rc, 1, "exit %d: %s", rc, err);
	cr_expect(strstr(err, "UnexpectedEof"), "%s", err);
	free(err);
	cr_expect(!exists(&d, "L/big") && !exists(&d, "L/t"));
	cr_expect_eq(leases(&d, "big"), 0);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/* The hole-making transport of sparse_hrry(): bytes of [base, base+size)
 * are skipped (a hole), others written. */
struct holes {
	int fd;
	const uint8_t *base;
	uint64_t size;
};

static int hole_write(void *ctx, const void *buf, size_t len, size_t *put)
{
	struct holes *h = ctx;
	const uint8_t *p = buf;
	ssize_t n = (ssize_t)len;

	if (p >= h->base && p < h->base + h->size)
		n = lseek(h->fd, (off_t)len, SEEK_CUR) < 0 ? -1 : n;
	else
		n = write(h->fd, buf, len);
	if (n < 0)
		return -errno;
	*put = (size_t)n;
	return 0;
}

/* A whole Hurray file at path holding one uint8 tensor "big" of size
 * bytes, all of them a hole; false when the file system refuses one. */
static bool sparse_hrry(const char *path, uint64_t size)
{
	struct holes h = {
		.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			   0644)};
	struct td_hrry_transport t = {.ctx = &h, .write = hole_write};
	struct td_hrry_desc *d = malloc(sizeof(*d));
	struct td_hrry_file_writer *w = NULL;
	struct td_hrry_err he = {0};
	const void *bufs[1];
	bool ok;

	cr_assert(h.fd >= 0 && d);
	h.size = size;
	h.base = mmap(NULL, size, PROT_NONE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	cr_assert(h.base != MAP_FAILED, "%s", strerror(errno));
	bufs[0] = h.base;
	cr_assert_eq(td_hrry_desc_init_dense(d, TD_HRRY_TYPE_UINT8, 1, &size),
		     0);
	cr_assert_eq(td_hrry_file_writer_new(&t, NULL, &w, &he), 0, "%s",
		     he.reason);
	ok = td_hrry_file_writer_write_tensor(w, "big", 3, d, bufs, &he) ==
		     0 &&
	     td_hrry_file_writer_finish(w, NULL, 0, &he) == 0;
	td_hrry_file_writer_free(&w);
	munmap((void *)h.base, size);
	close(h.fd);
	free(d);
	return ok;
}

/*
 * A test's sparse file at path made (or not, made false: the file
 * system under /tmp takes none so large): if not, path and d go and
 * the test is skipped, why saying which file and what is not checked.
 */
static void skip_unless_sparse(bool made, struct tu_daemon *d,
			       const char *path, const char *why)
{
	if (made)
		return;
	unlink(path);
	tu_daemon_stop(d, false);
	cr_skip_test("the file system under /tmp takes no %s", why);
}

/*
 * A run of tensorctl under an RLIMIT_DATA of 64 MiB: a huge file read
 * whole fails there (ENOMEM), one read by its parts does not. Not
 * under ASan, whose shadow is private memory RLIMIT_DATA would stop
 * before main.
 */
static struct run small_heap_run(void)
{
#ifdef __SANITIZE_ADDRESS__
	return (struct run){.in_fd = -1, .out_fd = -1};
#else
	return (struct run){.in_fd = -1, .out_fd = -1, .data = 64u << 20};
#endif
}

/*
 * inspect read a regular file whole into memory before it looked at it:
 * a Hurray file of 1 TiB (here all a hole) failed with ENOMEM, and one
 * under the memory size took that much, where the header, index, KV and
 * descriptors are all that inspect prints. A Hurray file on disk is now
 * read with pread, those parts only.
 */
Test(tensorctl, inspect_of_a_huge_hurray_file_reads_only_its_index)
{
	struct tu_daemon d;
	char path[160], *out, *err;
	int rc;

	start(&d);
	path_in(path, sizeof(path), &d, "huge.hrry");
	skip_unless_sparse(sparse_hrry(path, 1ull << 40), &d, path,
			   "1 TiB sparse file (its maximum file size, or no "
			   "holes): a huge inspect not checked");
	rc = CTL(&d, &out, &err, "inspect", path);
	cr_expect_eq(rc, 0, "exit %d: %s", rc, err);
	cr_expect(strstr(out, "big: uint8 [1099511627776]"), "%s", out);
	free(out);
	free(err);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/*
 * A Hurray file of apparent size 64 + index_len + 40 (all a hole but its
 * header and trailer, and the index's first 43 bytes when entry is set):
 * the trailer declares an index of index_len bytes at 64, without CRC;
 * with entry, the index holds one entry "a" whose descriptor, at 64,
 * declares desc_len bytes (index_len then places the index past it).
 * false when the file system takes no such sparse file.
 */
static bool hostile_hrry(const char *path, uint64_t index_len, bool entry,
			 uint32_t desc_len)
{
	uint8_t h[64] = "HRRYFILE", t[40] = {0}, ix[43] = {0};
	uint64_t io = 64, il = index_len;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	bool ok;

	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	h[8] = 1;               /* major */
	h[17] = 0x10;           /* alignment 4096 */
	h[20] = 64;             /* first_descriptor_offset */
	if (entry) {
		io = (64 + (uint64_t)desc_len + 7) & ~7ull;
		il = sizeof(ix);
		ix[0] = 1;      /* entry_count */
		ix[8] = 1;      /* name_len */
		ix[10] = 'a';
		ix[11] = 64;    /* descriptor_offset */
		memcpy(ix + 19, &desc_len, 4); /* le on every host we run */
		ix[23] = 0;     /* data_offset 0, data_length 0 */
	}
	for (int i = 0; i < 8; i++) {
		t[i] = (uint8_t)(io >> (8 * i));
		t[8 + i] = (uint8_t)(il >> (8 * i));
	}
	memcpy(t + 36, "HRRY", 4);
	ok = pwrite(fd, h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
	     (!entry || pwrite(fd, ix, sizeof(ix), (off_t)io) ==
				(ssize_t)sizeof(ix)) &&
	     pwrite(fd, t, sizeof(t), (off_t)(io + il)) == (ssize_t)sizeof(t);
	close(fd);
	return ok;
}

/*
 * The index is read whole (its CRC-32C covers it whole): a trailer
 * declaring a 6 GiB index in a sparse file made inspect and load
 * allocate and read 6 GiB of zeros before they refused it (about 70 s).
 * Now the declared length is checked against tensord's cap before
 * anything is read or allocated for it. The plain build runs tensorctl
 * under an RLIMIT_DATA of 64 MiB: the old code failed there with
 * OutOfMemory (its malloc of 6 GiB), and read 6 GiB without the limit;
 * the new one says TooLarge at once, whatever the limit. (ASan's shadow
 * is private memory RLIMIT_DATA would stop before main.)
 */
Test(tensorctl, a_declared_huge_hurray_index_is_refused_before_it_is_read)
{
	struct tu_daemon d;
	struct run r = small_heap_run();
	char path[160], *out, *err;
	int rc;

	start(&d);
	path_in(path, sizeof(path), &d, "ix.hrry");
	skip_unless_sparse(hostile_hrry(path, 6ull << 30, false, 0), &d, path,
			   "6 GiB sparse file: the index cap not checked");
	rc = CTL_R(&d, &r, &out, &err, "inspect", "--json", path);
	cr_expect_eq(rc, 1, "exit %d: %s", rc, err);
	cr_expect(strstr(out, "{\"error\":{\"kind\":\"TooLarge\",\"offset\":"),
		  "%s", out);
	cr_expect(strstr(out, "index_length over tensord's 512 MiB cap"), "%s",
		  out);
	free(out);
	free(err);
	rc = CTL_R(&d, &r, &out, &err, "load", path, "--prefix", "L/");
	cr_expect_eq(rc, 1, "exit %d: %s", rc, err);
	cr_expect(strstr(err, "TooLarge") && strstr(err, "512 MiB"), "%s", err);
	free(out);
	free(err);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/*
 * A descriptor is read whole too, and its u32 length was bounded only
 * by the file's size: an entry declaring a 4 GiB descriptor in a sparse
 * file made inspect and load allocate and read it. Now the tensor is
 * refused (TooLarge) before its descriptor is read; the file stays open.
 */
Test(tensorctl, a_declared_huge_hurray_descriptor_is_refused_before_it_is_read)
{
	struct tu_daemon d;
	struct run r = small_heap_run();
	char path[160], *out, *err;
	int rc;

	start(&d);
	path_in(path, sizeof(path), &d, "desc.hrry");
	skip_unless_sparse(hostile_hrry(path, 0, true, 0xFFFFFF00u), &d, path,
			   "4 GiB sparse file: the descriptor cap not checked");
	rc = CTL_R(&d, &r, &out, &err, "inspect", "--json", path);
	cr_expect(strstr(out, "\"name\":\"a\",\"status\":\"invalid\"") &&
			  strstr(out, "\"kind\":\"TooLarge\",\"reason\":"
				      "\"descriptor_length over tensord's "
				      "16 MiB cap\""),
		  "exit %d: %s %s", rc, out, err);
	free(out);
	free(err);
	rc = CTL_R(&d, &r, &out, &err, "load", path, "--prefix", "L/");
	cr_expect(strstr(out, "refused a: TooLarge") ||
			  strstr(err, "refused a: TooLarge"),
		  "exit %d: %s %s", rc, out, err);
	free(out);
	free(err);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/*
 * inspect reads a file that is no .tgm, Hurray or .npy file whole (a
 * blob): malloc'ed by its size, which --max-bytes did not bound for a
 * regular file, so a sparse one of 2 GiB had 2 GiB allocated and read
 * (under a 64 MiB RLIMIT_DATA: ENOMEM). Now its size is checked against
 * --max-bytes (default 1 GiB) first: EFBIG, nothing read.
 */
Test(tensorctl, inspect_of_a_huge_blob_file_is_refused_by_its_size)
{
	struct tu_daemon d;
	struct run r = small_heap_run();
	char path[160], *out, *err;
	int fd, rc;
	bool made;

	start(&d);
	path_in(path, sizeof(path), &d, "blob.bin");
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	cr_assert(fd >= 0);
	made = ftruncate(fd, (off_t)(2ull << 30)) == 0;
	close(fd);
	skip_unless_sparse(made, &d, path,
			   "2 GiB sparse file: the blob size cap not checked");
	rc = CTL_R(&d, &r, &out, &err, "--json", "inspect", path);
	cr_expect_eq(rc, 1, "exit %d: %s", rc, out);
	cr_expect(strstr(out, "{\"error\":{\"kind\":\"input\",\"errno\":27,") &&
			  strstr(out, "blob.bin: more than 1.0 GiB (a file "
				      "read whole, such as a blob, is read up "
				      "to --max-bytes)"),
		  "%s", out);
	free(out);
	free(err);
	/* and a small one under a small cap: the same, by its size */
	rc = CTL_R(&d, &r, &out, &err, "inspect", "--max-bytes", "1M", path);
	cr_expect_eq(rc, 1, "exit %d: %s", rc, err);
	cr_expect(strstr(err, "more than 1.0 MiB"), "%s", err);
	free(out);
	free(err);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/* ---- .tgm files read with pread ---- */

static uint8_t *put_be(uint8_t *p, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
	return p + n;
}

/* A CBOR text string. */
static uint8_t *put_text(uint8_t *p, const char *t)
{
	size_t n = strlen(t);

	*p++ = (uint8_t)(0x60 | n); /* n < 24 here */
	memcpy(p, t, n);
	return p + n;
}

/*
 * A whole .tgm file at path: one message, one uint8 object of n bytes,
 * its data a hole (only the preamble, the frame's header, its descriptor
 * and footer and the postamble are written). No hash. The message's
 * length in *total. False when the file system takes no such file.
 */
static bool sparse_tgm(const char *path, uint64_t n, uint64_t *total)
{
	static const char *const kv[][2] = {
		{"type", "ntensor"}, {"dtype", "uint8"},
		{"byte_order", "little"}, {"encoding", "none"},
		{"filter", "none"}, {"compression", "none"}};
	uint8_t cbor[256], foot[64], head[64], *p = cbor;
	uint64_t frame, end, pad;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	bool ok;

	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	*p++ = 0xa9; /* a map of 9 */
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]); i++)
		p = put_text(put_text(p, kv[i][0]), kv[i][1]);
	p = put_text(p, "ndim");
	*p++ = 0x01;
	p = put_text(p, "shape");
	*p++ = 0x81; /* [n] */
	*p++ = 0x1b;
	p = put_be(p, n, 8);
	p = put_text(p, "strides");
	*p++ = 0x81;
	*p++ = 0x01;
	frame = 16 + n + (uint64_t)(p - cbor) + 20;
	pad = (8 - (24 + frame) % 8) % 8;
	end = 24 + frame + pad + 24;
	/* preamble, frame header (type 9, version 1, CBOR after) */
	memcpy(head, "TENSOGRM", 8);
	put_be(put_be(put_be(put_be(head + 8, 3, 2), 0, 2), 0, 4), end, 8);
	memcpy(head + 24, "FR", 2);
	put_be(put_be(put_be(put_be(head + 26, 9, 2), 1, 2), 1, 2), frame, 8);
	/* frame footer: cbor_offset, hash slot, ENDF; pad; postamble */
	memset(foot, 0, sizeof(foot));
	put_be(put_be(foot, 16 + n, 8), 0, 8);
	memcpy(foot + 16, "ENDF", 4);
	put_be(put_be(foot + 20 + pad, 24 + frame + pad, 8), end, 8);
	memcpy(foot + 20 + pad + 16, "39277777", 8);
	ok = ftruncate(fd, (off_t)end) == 0 &&
	     pwrite(fd, head, 40, 0) == 40 &&
	     pwrite(fd, cbor, (size_t)(p - cbor), (off_t)(40 + n)) ==
		     p - cbor &&
	     pwrite(fd, foot, 20 + pad + 24,
		    (off_t)(40 + n + (uint64_t)(p - cbor))) ==
		     (ssize_t)(20 + pad + 24);
	close(fd);
	*total = end;
	return ok;
}

/*
 * inspect read a .tgm file whole into memory before it looked at it: one
 * of 1 TiB (here its data all a hole) failed with ENOMEM, and one under
 * the memory size took that much, where the frames' headers and the
 * descriptors are all it prints. A .tgm file on disk is now read with
 * pread, those parts only (an unhashed frame's data is never read).
 */
Test(tensorctl, inspect_of_a_huge_tgm_file_reads_only_its_frames)
{
	struct tu_daemon d;
	char path[160], want[256], *out, *err;
	uint64_t n = (1ull << 40) - 4096, total;
	int rc;

	start(&d);
	path_in(path, sizeof(path), &d, "huge.tgm");
	skip_unless_sparse(sparse_tgm(path, n, &total), &d, path,
			   "1 TiB sparse file: a huge .tgm inspect not checked");
	rc = CTL(&d, &out, &err, "inspect", path);
	cr_expect_eq(rc, 0, "exit %d: %s", rc, err);
	snprintf(want, sizeof(want), "tgm: %" PRIu64 " bytes\nmessage 0 @0 "
		 "length %" PRIu64 "\n", total, total);
	cr_expect(starts(out, want), "%s", out);
	snprintf(want, sizeof(want), "ntensor uint8 (%" PRIu64 ") little-"
		 "endian, encoding none, filter none, compression none, data "
		 "40..%" PRIu64 "\n  end: clean\n1 message(s)\n", n, 40 + n);
	cr_expect(strstr(out, want), "%s", out);
	free(out);
	free(err);
	rc = CTL(&d, &out, &err, "--json", "inspect", path);
	cr_expect_eq(rc, 0, "exit %d: %s", rc, err);
	snprintf(want, sizeof(want), "\"data_range_in_msg\":[40,%" PRIu64
		 "]}],\"walk_error\":null}],\"skipped\":[]}", 40 + n);
	cr_expect(strstr(out, want), "%s", out);
	free(out);
	free(err);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/*
 * A .tgm file at path: one message whose only frame is a HeaderMetadata
 * frame of n payload bytes, all a hole, unhashed. False when the file
 * system takes no such sparse file.
 */
static bool sparse_tgm_meta(const char *path, uint64_t n)
{
	uint8_t head[40] = "TENSOGRM", foot[12 + 8 + 24] = {0};
	uint64_t frame = 16 + n + 12, pad = (8 - (24 + frame) % 8) % 8;
	uint64_t end = 24 + frame + pad + 24;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	bool ok;

	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	/* version 3, HEADER_METADATA, total length; frame type 1, v1 */
	put_be(put_be(put_be(put_be(head + 8, 3, 2), 1, 2), 0, 4), end, 8);
	memcpy(head + 24, "FR", 2);
	put_be(put_be(put_be(put_be(head + 26, 1, 2), 1, 2), 0, 2), frame, 8);
	memcpy(foot + 8, "ENDF", 4); /* hash slot 0, ENDF, pad, postamble */
	put_be(put_be(foot + 12 + pad, 24 + frame + pad, 8), end, 8);
	memcpy(foot + 12 + pad + 16, "39277777", 8);
	ok = ftruncate(fd, (off_t)end) == 0 &&
	     pwrite(fd, head, 40, 0) == 40 &&
	     pwrite(fd, foot, 12 + pad + 24, (off_t)(40 + n)) ==
		     (ssize_t)(12 + pad + 24);
	close(fd);
	return ok;
}

/*
 * load read a metadata frame whole whatever its size, where inspect
 * reads none over 16 MiB: a sparse file declaring a 2 GiB one made load
 * allocate and read 2 GiB (under a 64 MiB RLIMIT_DATA it failed "out of
 * memory"). Now load refuses it before reading (or hashing) any of it,
 * naming the frame and the limit, EFBIG; inspect still says it is over
 * 16 MiB and does not read it.
 */
Test(tensorctl, load_refuses_a_tgm_metadata_frame_over_16_mib_unread)
{
	struct tu_daemon d;
	struct run r = small_heap_run();
	char path[160], *out, *err;
	int rc;

	start(&d);
	path_in(path, sizeof(path), &d, "meta.tgm");
	skip_unless_sparse(sparse_tgm_meta(path, 2ull << 30), &d, path,
			   "2 GiB sparse file: the metadata cap not checked");
	rc = CTL_R(&d, &r, &out, &err, "load", path, "--prefix", "L/");
	cr_expect_eq(rc, 1, "exit %d: %s", rc, err);
	cr_expect(strstr(err, "message 0: HeaderMetadata frame at offset 24: "
			      "2147483648 bytes of metadata, over "
			      "tensorctl's 16 MiB limit for a metadata "
			      "frame"),
		  "%s", err);
	free(out);
	free(err);
	rc = CTL_R(&d, &r, &out, &err, "--json", "load", path);
	cr_expect_eq(rc, 1, "exit %d: %s", rc, err);
	cr_expect(strstr(out, "{\"error\":{\"kind\":\"input\",\"errno\":27,"),
		  "%s", out); /* EFBIG */
	free(out);
	free(err);
	rc = CTL_R(&d, &r, &out, &err, "inspect", path);
	cr_expect(strstr(out, "metadata: larger than 16 MiB, not"),
		  "exit %d: %s %s", rc, out, err);
	free(out);
	free(err);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/*
 * load read a .tgm file whole into its heap, then copied each object
 * into the daemon's buffer: a file needed its size in private memory
 * (and a 1 TiB one failed). Now each object's bytes go from the file
 * straight into the daemon's (shared) buffer, read with pread: under an
 * RLIMIT_DATA of a quarter of the file the load succeeds. ASan's shadow
 * is private memory of its own (RLIMIT_DATA would stop it before main),
 * so the sanitized build has no such test; the plain build runs it.
 */
#ifndef __SANITIZE_ADDRESS__
Test(tensorctl, load_of_a_tgm_file_needs_no_heap_of_its_size)
{
	struct tu_daemon d;
	struct run r = {.in_fd = -1, .out_fd = -1, .data = 32u << 20};
	char path[160], *out, *err;
	uint64_t n = 128u << 20, total;
	struct td_client *c;
	struct td_entry e;
	int rc;

	start(&d);
	path_in(path, sizeof(path), &d, "big.tgm");
	cr_assert(sparse_tgm(path, n, &total));
	rc = CTL_R(&d, &r, &out, &err, "load", path, "--prefix", "L/");
	cr_expect_eq(rc, 0, "exit %d: %s", rc, err);
	free(out);
	free(err);
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	cr_assert_eq(td_client_stat(c, "L/object_0", &e, NULL), 0);
	cr_expect_eq(e.shape[0], n);
	td_entry_fini(&e);
	td_client_close(c);
	unlink(path);
	tu_daemon_stop(&d, false);
}
#endif

/*
 * The .tgm load held the whole file in memory, so a file cut short
 * during the load was not seen. It is now read while publishing: the
 * shim cuts the file just before tensorctl connects, after every frame
 * was checked, past the first tensor ("t", kept whole) and inside the
 * second ("big"). "t" is published, "big" meets the end: UnexpectedEof,
 * exit 1, and "t" is deleted again (all or nothing); no SIGBUS.
 */
Test(tensorctl, a_tgm_file_cut_during_load_is_an_error_not_a_crash)
{
	struct tu_daemon d;
	char path[160], to[32], *err;
	struct stat st;
	int rc;

	start(&d);
	put_zeros(&d, "big", 1 << 20);
	path_in(path, sizeof(path), &d, "in.tgm");
	cr_assert_eq(CTL(&d, NULL, &err, "save", "t", "big", "-o", path), 0,
		     "%s", err);
	free(err);
	cr_assert_eq(stat(path, &st), 0);
	snprintf(to, sizeof(to), "%lld", (long long)st.st_size - 4096);
	cr_assert_eq(setenv("TD_TRUNCATE_TO", to, 1), 0);
	tu_shim_on("TD_TRUNCATE_BEFORE_CONNECT", path);
	rc = CTL(&d, NULL, &err, "load", path, "--prefix", "L/");
	tu_shim_off("TD_TRUNCATE_BEFORE_CONNECT");
	unsetenv("TD_TRUNCATE_TO");
	cr_expect_eq(rc, 1, "exit %d: %s", rc, err);
	cr_expect(strstr(err, "UnexpectedEof"), "%s", err);
	cr_expect(strstr(err, "1 of 2 object(s) published before this "
			      "failure; 1 deleted again"), "%s", err);
	free(err);
	cr_expect(!exists(&d, "L/big") && !exists(&d, "L/t"));
	cr_expect_eq(leases(&d, "big"), 0);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/* A FIFO nobody reads: the write waits, a signal ends it, lease gone. */
static void fifo_interrupted_by(int sig)
{
	struct tu_daemon d;
	char fifo[160];
	struct run r = {.in_fd = -1, .out_fd = -1};
	pid_t pid;
	int st, i;

	start(&d);
	path_in(fifo, sizeof(fifo), &d, "fifo");
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	r.pid = &pid;
	CTL_R(&d, &r, NULL, NULL, "get", "t", "-o", fifo);
	/* it holds its lease while it waits for a reader (bounded wait for
	 * it to get there; nothing about speed is asserted) */
	for (i = 0; i < 2000 && leases(&d, "t") == 0; i++)
		usleep(10000);
	cr_assert_eq(leases(&d, "t"), 1, "tensorctl never took its lease");
	cr_assert_eq(kill(pid, sig), 0);
	st = tu_wait_child(pid, TU_WAIT_S, "tensorctl after the signal");
	cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == sig,
		  "status %#x: not ended by the signal", st);
	for (i = 0; i < 2000 && leases(&d, "t") != 0; i++)
		usleep(10000);
	cr_expect_eq(leases(&d, "t"), 0, "the lease outlived tensorctl");
	{
		struct stat s;

		cr_assert_eq(lstat(fifo, &s), 0);
		cr_expect(S_ISFIFO(s.st_mode));
	}
	unlink(fifo);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, fifo_write_gives_up_on_sigint)
{
	fifo_interrupted_by(SIGINT);
}

Test(tensorctl, fifo_write_gives_up_on_sigterm)
{
	fifo_interrupted_by(SIGTERM);
}

/*
 * tensorctl get NAME -o PATH, started, with the shim (raise-before-open.c)
 * raising SIGINT just before the call of $var on PATH: the moment after
 * its last look at its flag and before a call that may block for ever.
 */
static pid_t get_raising(const struct tu_daemon *d, const char *name,
			 const char *path, const char *var)
{
	struct run r = {.in_fd = -1, .out_fd = -1};
	char spec[200];
	pid_t pid;

	snprintf(spec, sizeof(spec), "%d:%s", SIGINT, path);
	/* only tensorctl's environment: it is exec'ed with ours */
	tu_shim_on(var, spec);
	r.pid = &pid;
	CTL_R(d, &r, NULL, NULL, "get", name, "-o", path);
	tu_shim_off(var);
	return pid;
}

/* tensorctl (pid) was not deaf to the signal: it ended by it, bounded,
 * and its lease of name went with it. */
static void ended_by_sigint(const struct tu_daemon *d, pid_t pid,
			    const char *name, const char *waiting_for)
{
	int st = 0, i;

	cr_assert(tu_reap_within(pid, TU_WAIT_S, &st),
		  "the signal was lost: tensorctl still waited for %s after "
		  "%d s",
		  waiting_for, TU_WAIT_S);
	cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT,
		  "status %#x: not ended by the signal", st);
	for (i = 0; i < 2000 && leases(d, name) != 0; i++)
		usleep(10000);
	cr_expect_eq(leases(d, name), 0, "the lease outlived tensorctl");
}

/*
 * A signal caught after tensorctl's last look at its flag and before the
 * FIFO's open is not lost: the open would wait for a reader for ever (it
 * hung CI once, the signal having come between the two). A shim raises
 * the signal at exactly that moment, every time.
 */
Test(tensorctl, a_signal_just_before_a_fifo_open_is_not_lost)
{
	struct tu_daemon d;
	char fifo[160];
	pid_t pid;

	start(&d);
	path_in(fifo, sizeof(fifo), &d, "fifo");
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	pid = get_raising(&d, "t", fifo, "TD_RAISE_BEFORE_OPEN");
	/* nobody ever opens the FIFO for reading */
	ended_by_sigint(&d, pid, "t", "the FIFO's reader");
	unlink(fifo);
	tu_daemon_stop(&d, false);
}

/*
 * The same just before a write to a FIFO whose reader has stopped
 * reading: the write fills the pipe and waits for room for ever, unless
 * the signal that came just before it is acted on.
 */
Test(tensorctl, a_signal_just_before_a_fifo_write_is_not_lost)
{
	struct tu_daemon d;
	char fifo[160];
	pid_t pid, reader;

	start(&d);
	put_zeros(&d, "big", 1 << 20); /* more than a pipe holds */
	path_in(fifo, sizeof(fifo), &d, "fifo");
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	reader = tu_fork();
	if (reader == 0) {
		int fd = open(fifo, O_RDONLY);

		pause(); /* never reads: killed below, or dies with the test */
		_exit(fd < 0);
	}
	pid = get_raising(&d, "big", fifo, "TD_RAISE_BEFORE_WRITE");
	ended_by_sigint(&d, pid, "big", "room in the FIFO");
	kill(reader, SIGKILL);
	tu_wait_child(reader, TU_WAIT_S, "the FIFO's reader");
	unlink(fifo);
	tu_daemon_stop(&d, false);
}

/*
 * The same just before the connect to a socket whose listener accepts
 * nobody and whose backlog is full: the connect waits for room for ever.
 */
Test(tensorctl, a_signal_just_before_a_socket_connect_is_not_lost)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct tu_daemon d;
	int ls, queued;
	pid_t pid;

	start(&d);
	path_in(sa.sun_path, sizeof(sa.sun_path), &d, "full.sock");
	ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	queued = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert(ls >= 0 && queued >= 0);
	cr_assert_eq(bind(ls, (struct sockaddr *)&sa, sizeof(sa)), 0);
	/* a backlog of 0 holds one connection, this one: the next waits */
	cr_assert_eq(listen(ls, 0), 0);
	cr_assert_eq(connect(queued, (struct sockaddr *)&sa, sizeof(sa)), 0);
	pid = get_raising(&d, "t", sa.sun_path, "TD_RAISE_BEFORE_CONNECT");
	ended_by_sigint(&d, pid, "t", "room in the listener's backlog");
	close(queued);
	close(ls);
	unlink(sa.sun_path);
	tu_daemon_stop(&d, false);
}

/*
 * `tensorctl get big | head -c 10`: the reader stops, and tensorctl dies
 * of SIGPIPE as cat does, without "standard output: interrupted by
 * signal 13" on the terminal (it said that, where the docs promise only
 * the death by the signal).
 */
Test(tensorctl, a_reader_that_stops_ends_it_by_sigpipe_quietly)
{
	const char *outs[] = {"-", NULL};
	struct tu_daemon d;
	char *err;

	start(&d);
	put_zeros(&d, "big", 1 << 20);
	for (int i = 0; i < 2; i++) {
		struct run r = {.in_fd = -1};
		int p[2], st;

		cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
		close(p[0]); /* a reader gone before the first byte */
		r.out_fd = p[1];
		st = outs[i] ? CTL_R(&d, &r, NULL, &err, "get", "big", "-o",
				     outs[i])
			     : CTL_R(&d, &r, NULL, &err, "get", "big");
		close(p[1]);
		cr_expect_eq(st, 128 + SIGPIPE, "status %d", st);
		cr_expect_str_empty(err);
		free(err);
	}
	tu_daemon_stop(&d, false);
}

/*
 * A signal the caller ignores stays ignored: under `trap '' PIPE` a
 * reader gone is EPIPE, status 1 and the reason, as cat does (it died of
 * SIGPIPE anyway), and `nohup` (SIGHUP) is honoured the same way (one
 * loop over the signals).
 */
Test(tensorctl, a_sigpipe_the_caller_ignores_stays_ignored)
{
	struct tu_daemon d;
	struct run r = {.in_fd = -1, .ignored = 1u << SIGPIPE};
	char *err;
	int p[2], st;

	start(&d);
	put_zeros(&d, "big", 1 << 20);
	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	close(p[0]);
	r.out_fd = p[1];
	st = CTL_R(&d, &r, NULL, &err, "get", "big");
	close(p[1]);
	cr_expect_eq(st, 1, "status %d: %s", st, err);
	cr_expect(strstr(err, "standard output: ") &&
			  strstr(err, strerror(EPIPE)),
		  "%s", err);
	free(err);
	tu_daemon_stop(&d, false);
}

/* get t -o PATH with SIGINT raised before the first write to its
 * temporary file; the exit status, stderr in *err. */
static int get_interrupted(const struct tu_daemon *d, const char *path,
			   char **err)
{
	char spec[200];
	int st;

	snprintf(spec, sizeof(spec), "%d:%s/.tensorctl-*", SIGINT, d->dir);
	tu_shim_on("TD_RAISE_BEFORE_WRITE", spec);
	st = CTL(d, NULL, err, "get", "t", "-o", path);
	tu_shim_off("TD_RAISE_BEFORE_WRITE");
	return st;
}

/*
 * A write into a new file stopped by a signal said "the old file is left
 * as it was", of a file that never was: it says no file is made, and
 * none is. Over an existing file it still says the old one stays.
 */
Test(tensorctl, an_interrupted_write_says_what_it_left)
{
	struct tu_daemon d;
	char path[160], *err;

	start(&d);
	path_in(path, sizeof(path), &d, "new.bin");
	cr_expect_eq(get_interrupted(&d, path, &err), 128 + SIGINT);
	cr_expect(strstr(err, "new.bin: interrupted by signal 2; no file is "
			      "made\n") &&
			  !strstr(err, "old file"),
		  "%s", err);
	free(err);
	cr_expect_eq(access(path, F_OK), -1, "%s was made", path);
	cr_expect_eq(temp_files(d.dir), 0);
	write_file(path, "old", 3);
	cr_expect_eq(get_interrupted(&d, path, &err), 128 + SIGINT);
	cr_expect(strstr(err, "new.bin: interrupted by signal 2; the old file "
			      "is left as it was\n"),
		  "%s", err);
	free(err);
	expect_file(path, "old");
	cr_expect_eq(temp_files(d.dir), 0);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/*
 * name: a tensor whose fence nobody signals; the client that published
 * it and the fence stay open here (close both).
 */
static struct td_client *put_unsignalled(const struct tu_daemon *d,
					 const char *name, int *fence)
{
	uint64_t size = 64;
	struct td_publish p = {.name = name, .flags = TD_PUBLISH_FENCE,
			       .dtype = TD_TENSOR_U8, .ndim = 1,
			       .shape = &size};
	struct td_error e = {0};
	struct td_client *c;
	struct td_alloc *a;

	p.fence_fd = *fence = td_fence_create();
	cr_assert_geq(*fence, 0);
	cr_assert_eq(td_client_connect(d->sock, &c, NULL), 0);
	cr_assert_eq(td_client_alloc(c, 1, &size, &a, &e), 0, "%s", e.reason);
	cr_assert_eq(td_client_publish_alloc(c, a, &p, NULL, &e), 0, "%s",
		     e.reason);
	return c;
}

/*
 * A fence that does not signal in time is reported with libtensord's
 * reason (which fence, how long it waited), not strerror's "Connection
 * timed out", which reads as the daemon's fault.
 */
Test(tensorctl, a_fence_that_does_not_signal_is_said_so)
{
	struct tu_daemon d;
	struct td_client *c;
	char *err = NULL;
	int fence;

	start(&d);
	c = put_unsignalled(&d, "fenced", &fence);
	cr_expect_eq(CTL(&d, NULL, &err, "get", "fenced", "--newer", "0",
			 "--timeout", "200", "-o", "/dev/null"),
		     1);
	cr_expect(strstr(err, "fenced: fence: ") &&
			  strstr(err, "did not signal within 200 ms"),
		  "%s", err);
	free(err);
	err = NULL;
	/* --timeout without --newer bounds the fence's wait alone (it was
	 * refused: "--timeout goes with --newer", and such a get waited for
	 * ever) */
	cr_expect_eq(CTL(&d, NULL, &err, "get", "fenced", "--timeout", "200",
			 "-o", "/dev/null"),
		     1);
	cr_expect(strstr(err, "fenced: fence: ") &&
			  strstr(err, "did not signal within 200 ms"),
		  "%s", err);
	free(err);
	close(fence);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/*
 * A Hurray save fetches each tensor, and waits for its fence, with its
 * output open: a signal there only sets tensorctl's flag, and a fence
 * wait that went on after it would never end for a fence that never
 * signals. SIGTERM ends it as it ends a write: the temporary file goes,
 * the old file stays, and tensorctl dies of the signal.
 */
Test(tensorctl, a_save_waiting_for_a_fence_ends_on_sigterm)
{
	struct run r = {.in_fd = -1, .out_fd = -1};
	struct tu_daemon d;
	struct td_client *c;
	char path[160];
	int fence, st = 0, i;
	pid_t pid;

	start(&d);
	c = put_unsignalled(&d, "fenced", &fence);
	path_in(path, sizeof(path), &d, "fenced.hrry");
	write_file(path, "old", 3);
	r.pid = &pid;
	CTL_R(&d, &r, NULL, NULL, "save", "--format", "hrry", "-o", path,
	      "fenced");
	/* its output is open once its temporary file is there (a bounded
	 * wait; nothing about speed is asserted) */
	for (i = 0; i < 2000 && !temp_files(d.dir); i++)
		usleep(10000);
	cr_assert_gt(temp_files(d.dir), 0, "tensorctl never opened its output");
	cr_assert_eq(kill(pid, SIGTERM), 0);
	cr_assert(tu_reap_within(pid, TU_WAIT_S, &st),
		  "the signal was lost: tensorctl still waited for the fence "
		  "after %d s",
		  TU_WAIT_S);
	cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM,
		  "status %#x: not ended by the signal", st);
	cr_expect_eq(temp_files(d.dir), 0, "SIGTERM left a temp file");
	expect_file(path, "old");
	close(fence);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, fifo_written_directly_when_read)
{
	struct tu_daemon d;
	char fifo[160], *err;
	int p[2];
	pid_t pid;

	start(&d);
	path_in(fifo, sizeof(fifo), &d, "fifo");
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	cr_assert_eq(pipe(p), 0);
	pid = tu_fork();
	if (pid == 0) {
		char b[16];
		int fd;

		alarm(60); /* bounded, should tensorctl never open it */
		fd = open(fifo, O_RDONLY);
		ssize_t n = read(fd, b, sizeof(b));

		_exit(n == 6 && !memcmp(b, "abcdef", 6) ? 0 : 1);
	}
	cr_expect_eq(CTL(&d, NULL, &err, "get", "t", "-o", fifo), 0, "%s", err);
	free(err);
	{
		int st = tu_wait_child(pid, TU_WAIT_S, "the FIFO's reader");

		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			  "the reader did not get abcdef");
	}
	close(p[0]);
	close(p[1]);
	unlink(fifo);
	tu_daemon_stop(&d, false);
}

/* A save killed mid-write leaves a temp file; the next run removes it. */
Test(tensorctl, killed_save_leaves_no_temp_after_the_next_run)
{
	struct tu_daemon d;
	char path[160], stale[200], *err;
	pid_t pid, dead;
	int st;

	start(&d);
	put_zeros(&d, "big", 64u << 20);
	path_in(path, sizeof(path), &d, "big.tgm");
	write_file(path, "old", 3);
	/* SIGTERM while the temp file is written: cleaned up by tensorctl,
	 * the old file stays (or, had the write won, the new one is whole) */
	{
		struct run r = {.in_fd = -1, .out_fd = -1, .pid = &pid};
		int i;

		CTL_R(&d, &r, NULL, NULL, "save", "big", "-o", path);
		for (i = 0; i < 100000 && !temp_files(d.dir); i++)
			usleep(100);
		kill(pid, SIGTERM);
		tu_wait_child(pid, TU_WAIT_S, "tensorctl save after SIGTERM");
		cr_expect_eq(temp_files(d.dir), 0, "SIGTERM left a temp file");
		{
			struct stat s;

			cr_assert_eq(stat(path, &s), 0);
			cr_expect(s.st_size == 3 || s.st_size > (64 << 20),
				  "a torn file of %lld bytes",
				  (long long)s.st_size);
		}
	}
	/* SIGKILL cannot be cleaned up after: fake its leftover, from a
	 * writer that is gone, and one of a live writer (this process) */
	dead = fork();
	cr_assert(dead >= 0);
	if (dead == 0)
		_exit(0);
	cr_assert_eq(waitpid(dead, &st, 0), dead);
	snprintf(stale, sizeof(stale), "%s/.tensorctl-%d-AbCdEf-big.tgm", d.dir,
		 (int)dead);
	write_file(stale, "partial", 7);
	{
		char live[200];

		snprintf(live, sizeof(live), "%s/.tensorctl-%d-XyZxYz-big.tgm",
			 d.dir, (int)getpid());
		write_file(live, "writing", 7);
		cr_assert_eq(CTL(&d, NULL, &err, "save", "t", "-o", path), 0,
			     "%s", err);
		free(err);
		cr_expect(access(stale, F_OK) < 0, "a dead writer's temp stayed");
		cr_expect(access(live, F_OK) == 0, "a live writer's temp went");
		unlink(live);
	}
	cr_expect_eq(temp_files(d.dir), 0);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, dash_is_stdout_and_a_terminal_is_refused)
{
	struct tu_daemon d;
	char dash[160], *out, *err;
	struct run r = {.in_fd = -1};
	int pty;

	start(&d);
	cr_assert_eq(CTL(&d, &out, NULL, "get", "t", "-o", "-"), 0);
	cr_expect_str_eq(out, "abcdef");
	free(out);
	cr_assert_eq(CTL(&d, &out, NULL, "get", "t"), 0, "stdout is a pipe");
	cr_expect_str_eq(out, "abcdef");
	free(out);
	cr_assert_eq(CTL(&d, &out, NULL, "save", "t", "-o", "-"), 0);
	cr_expect(!memcmp(out, "TENSOGRM", 8), "save -o - wrote no message");
	free(out);
	path_in(dash, sizeof(dash), &d, "-");
	cr_expect(access(dash, F_OK) < 0, "a file named - was made");
	/* a terminal: refused unless -o - says so */
	r.out_fd = open_pty(&pty);
	cr_expect_eq(CTL_R(&d, &r, NULL, &err, "get", "t"), 2);
	cr_expect(strstr(err, "terminal"), "%s", err);
	free(err);
	cr_expect_eq(CTL_R(&d, &r, NULL, &err, "get", "t", "-o", "-"), 0, "%s",
		     err);
	free(err);
	{
		char b[16] = "";

		/* the slave is open here: nothing written, no end */
		tu_await_readable(pty, TU_WAIT_S, "tensorctl's bytes on the "
						  "terminal");
		cr_expect_eq(read(pty, b, sizeof(b) - 1), 6);
		cr_expect_str_eq(b, "abcdef");
	}
	close(r.out_fd);
	close(pty);
	tu_daemon_stop(&d, false);
}

/* ---- inputs ---- */

Test(tensorctl, stream_inputs_are_capped)
{
	struct tu_daemon d;
	struct run r = {.out_fd = -1};
	char fifo[160], *err;
	int p[2];
	pid_t pid;

	start(&d);
	cr_expect_eq(CTL(&d, NULL, &err, "inspect", "--max-bytes=1M",
			 "/dev/zero"),
		     1);
	cr_expect(strstr(err, "/dev/zero: more than 1.0 MiB") &&
			  strstr(err, "--max-bytes"),
		  "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "load", "--max-bytes", "4K",
			 "/dev/zero"),
		     1);
	cr_expect(strstr(err, "more than 4.0 KiB"), "%s", err);
	free(err);
	/* put reads what the shape needs and one byte more, no further */
	r.in_fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	cr_assert(r.in_fd >= 0);
	cr_expect_eq(CTL_R(&d, &r, NULL, &err, "put", "z", "--dtype", "u8",
			   "--shape", "4", "-"),
		     1);
	cr_expect(strstr(err, "more than the 4 bytes"), "%s", err);
	free(err);
	close(r.in_fd);
	/* a pipe with exactly the bytes: fine; a FIFO path too */
	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(write(p[1], "wxyz", 4), 4);
	close(p[1]);
	r.in_fd = p[0];
	cr_expect_eq(CTL_R(&d, &r, NULL, &err, "put", "z", "--dtype", "u8",
			   "--shape", "4", "-"),
		     0, "%s", err);
	free(err);
	close(p[0]);
	path_in(fifo, sizeof(fifo), &d, "in.fifo");
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	pid = tu_fork();
	if (pid == 0) {
		int fd;

		alarm(60); /* bounded, should tensorctl never open it */
		fd = open(fifo, O_WRONLY);
		_exit(write(fd, "ab", 2) == 2 ? 0 : 1);
	}
	cr_expect_eq(CTL(&d, NULL, &err, "put", "z", "--dtype", "u8",
			 "--shape", "4", fifo),
		     1);
	cr_expect(strstr(err, "has 2 bytes"), "%s", err);
	free(err);
	tu_wait_child(pid, TU_WAIT_S, "the FIFO's writer");
	unlink(fifo);
	tu_daemon_stop(&d, false);
}

/* ---- load ---- */

/* A .tgm file of messages, each with objects named names[m][i]. */
static void write_tgm(const char *path, size_t nmsg, size_t nobj,
		      const char *const names[][4])
{
	static const uint8_t data[4] = {1, 2, 3, 4};
	uint64_t shape[1] = {4};
	FILE *f = fopen(path, "wb");

	cr_assert(f);
	for (size_t m = 0; m < nmsg; m++) {
		struct td_tgm_enc_object ob[4];
		uint8_t *msg;
		size_t len;

		for (size_t i = 0; i < nobj; i++)
			ob[i] = (struct td_tgm_enc_object){
				.dtype = TD_TGM_UINT8, .ndim = 1,
				.shape = shape, .data = data, .data_len = 4,
				.name = names[m][i]};
		cr_assert_eq(td_tgm_message_encode(ob, nobj, "t", &msg, &len,
						   NULL),
			     0);
		cr_assert_eq(fwrite(msg, 1, len, f), len);
		free(msg);
	}
	fclose(f);
}

/*
 * Every human error line of tensorctl starts "tensorctl: " (scripts grep
 * for it); a refused blob's said "refused: ..." alone.
 */
Test(tensorctl, a_refused_blob_is_said_as_every_error_is)
{
	struct tu_daemon d;
	char in[160], *err;

	start(&d);
	path_in(in, sizeof(in), &d, "short.bin");
	write_file(in, "abcdef", 6);
	cr_expect_eq(CTL(&d, NULL, &err, "inspect", in), 1);
	cr_expect(!strncmp(err, "tensorctl: refused: TRUNCATED (need 72, "
				"have 6) at offset 0: ",
			   strlen("tensorctl: refused: TRUNCATED (need 72, "
				  "have 6) at offset 0: ")),
		  "%s", err);
	free(err);
	tu_daemon_stop(&d, false);
}

/*
 * A blob's strings (format, colour) are the file's text, and inspect's
 * table printed them raw: a blob could clear the terminal (ESC) or send
 * an 8-bit CSI. They are escaped as stat escapes metadata.
 */
Test(tensorctl, inspect_escapes_a_blobs_strings)
{
	static const char cs[] = "\x1b[2Jx\xc2\x9b";
	uint64_t shape = 4;
	uint8_t data[4] = {0}, buf[512];
	struct td_blob_plane pl = {.handle = -1, .stride = 4, .size = 4,
				   .used = 4, .data_len = 4, .data = data};
	struct td_blob_desc bd = {.fence_fd = -1, .dtype = TD_TENSOR_U8,
				  .quant_axis = -2, .ndim = 1, .shape = &shape,
				  .plane_count = 1, .planes = &pl};
	struct tu_daemon d;
	char in[160], *out;
	int n;

	bd.strings[1] = (struct td_str){cs, sizeof(cs) - 1};
	n = td_blob_encode(&bd, buf, sizeof(buf), NULL);
	cr_assert_gt(n, 0);
	start(&d);
	path_in(in, sizeof(in), &d, "esc.blob");
	write_file(in, buf, (size_t)n);
	cr_expect_eq(CTL(&d, &out, NULL, "inspect", in), 0);
	cr_expect(strstr(out, "  color_space            "
			      "\"\\x1b[2Jx\\u009b\"\n"),
		  "%s", out);
	cr_expect(!strchr(out, '\x1b') && !strstr(out, "\xc2\x9b"), "%s", out);
	free(out);
	unlink(in);
	tu_daemon_stop(&d, false);
}

/*
 * "-" is read into memory whatever it is, so --max-bytes caps it when it
 * is a regular file (< FILE) as when it is a pipe: inspect, load (.tgm
 * and Hurray) and zarr export --from - refuse it, naming the option.
 */
Test(tensorctl, stdin_regular_file_is_capped_like_a_stream)
{
	static const char *const names[][4] = {{"x", "y"}};
	const char *const cmds[][8] = {
		{"inspect", "--max-bytes", "10", "-"},
		{"load", "--max-bytes", "10", "--prefix", "c/", "-"},
		{"zarr", "export", "", "--from", "-", "--max-bytes", "10"},
	};
	struct tu_daemon d;
	struct run r = {.out_fd = -1};
	char tgm[160], hrry[160], dir[160], *err;

	start(&d);
	path_in(tgm, sizeof(tgm), &d, "in.tgm");
	write_tgm(tgm, 1, 2, names);
	path_in(hrry, sizeof(hrry), &d, "in.hrry");
	cr_assert_eq(CTL(&d, NULL, NULL, "save", "-o", hrry), 0);
	path_in(dir, sizeof(dir), &d, "out.zarr");
	for (int f = 0; f < 2; f++) {
		for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
			const char *a[8];

			memcpy(a, cmds[i], sizeof(a));
			if (i == 2)
				a[2] = dir;
			r.in_fd = open(f ? hrry : tgm, O_RDONLY | O_CLOEXEC);
			cr_assert(r.in_fd >= 0);
			cr_expect_eq(ctl_run(&d, &r, NULL, &err, a), 1,
				     "%s < %s: %s", a[0], f ? hrry : tgm, err);
			cr_expect(strstr(err, "standard input: more than 10 B") &&
					  strstr(err, "--max-bytes"),
				  "%s < %s: %s", a[0], f ? hrry : tgm, err);
			free(err);
			close(r.in_fd);
		}
	}
	cr_expect(!exists(&d, "c/x"), "nothing was loaded");
	cr_expect_eq(access(dir, F_OK), -1, "no export was written");
	/* within the cap, the same input is fine */
	r.in_fd = open(hrry, O_RDONLY | O_CLOEXEC);
	cr_assert(r.in_fd >= 0);
	cr_expect_eq(CTL_R(&d, &r, NULL, &err, "load", "--prefix", "c/", "-"),
		     0, "%s", err);
	free(err);
	close(r.in_fd);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, load_every_message_with_prefix)
{
	static const char *const names[][4] = {{"x", "y"}, {"x", "z"}};
	struct tu_daemon d;
	char path[160], *out, *err;

	start(&d);
	path_in(path, sizeof(path), &d, "two.tgm");
	write_tgm(path, 2, 2, names);
	cr_assert_eq(CTL(&d, &out, &err, "load", path, "--prefix=run1/",
			 "--json"),
		     0, "%s", err);
	/* every message, names distinct across the file */
	cr_expect(strstr(out, "{\"published\":[{\"name\":\"run1/x\","), "%s",
		  out);
	cr_expect(strstr(out, "\"name\":\"run1/x_1\""), "%s", out);
	free(out);
	free(err);
	cr_expect(exists(&d, "run1/x") && exists(&d, "run1/y") &&
		  exists(&d, "run1/x_1") && exists(&d, "run1/z"));
	cr_expect(!exists(&d, "x"));
	/* one message when asked */
	cr_assert_eq(CTL(&d, &out, NULL, "load", path, "--message", "1",
			 "--prefix", "run2/"),
		     0);
	cr_expect(strstr(out, "run2/x version"), "%s", out);
	free(out);
	cr_expect(exists(&d, "run2/z") && !exists(&d, "run2/y"));
	cr_expect_eq(CTL(&d, NULL, &err, "load", path, "--prefix", "/bad"), 2);
	free(err);
	unlink(path);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, load_rolls_back_when_the_daemon_refuses)
{
	static const char *const names[][4] = {{"ok_a", "ok_b", "busy"}};
	uint64_t shape[1] = {4};
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
				  .shape = shape};
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *ring;
	char path[160], *out, *err;

	start(&d);
	/* a live ring owns "busy": PUBLISH to it is refused (-EEXIST) */
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	cr_assert_eq(td_ring_create(c, "busy", &rd, &ring, NULL), 0);
	path_in(path, sizeof(path), &d, "three.tgm");
	write_tgm(path, 1, 3, names);
	cr_expect_eq(CTL(&d, &out, &err, "load", path), 1);
	cr_expect(strstr(err, "2 of 3 object(s) published before this "
			      "failure; 2 deleted again"),
		  "%s", err);
	cr_expect_str_eq(out, "", "nothing reported as loaded");
	free(out);
	free(err);
	cr_expect(!exists(&d, "ok_a") && !exists(&d, "ok_b"),
		  "a refused load left objects behind");
	/* --json: the error is the answer */
	cr_expect_eq(CTL(&d, &out, NULL, "load", path, "--json"), 1);
	cr_expect(starts(out, "{\"error\":{\"kind\":\"daemon\",\"errno\":17,"),
		  "%s", out);
	free(out);
	/* --partial keeps what got in */
	cr_expect_eq(CTL(&d, &out, NULL, "load", path, "--partial"), 1);
	cr_expect(strstr(out, "ok_a version") && strstr(out, "ok_b version"),
		  "%s", out);
	free(out);
	cr_expect(exists(&d, "ok_a") && exists(&d, "ok_b"));
	/* --json --partial: the error object says what was kept */
	cr_expect_eq(CTL(&d, &out, &err, "load", path, "--partial", "--json"),
		     1);
	cr_expect(strstr(err, "2 of 3 object(s) published before this "
			      "failure, kept (--partial)"),
		  "%s", err);
	free(err);
	cr_expect(starts(out, "{\"error\":{\"kind\":\"daemon\",\"errno\":17,"),
		  "%s", out);
	cr_expect(strstr(out, "\"published\":[{\"name\":\"ok_a\",\"version\":") &&
			  strstr(out, "{\"name\":\"ok_b\",\"version\":"),
		  "%s", out);
	cr_expect(strchr(out, '\n') == out + strlen(out) - 1,
		  "one JSON document: %s", out);
	free(out);
	td_ring_close(ring);
	td_client_close(c);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/* The version name is at (0: none). */
static uint64_t version_of(const struct tu_daemon *d, const char *name)
{
	struct td_client *c;
	struct td_entry e;
	uint64_t v = 0;

	cr_assert_eq(td_client_connect(d->sock, &c, NULL), 0);
	if (td_client_stat(c, name, &e, NULL) == 0) {
		v = e.version;
		td_entry_fini(&e);
	}
	td_client_close(c);
	return v;
}

/*
 * load --no-replace (docs/tensorctl.md, "load"): a name that has a
 * version is left alone (the daemon checks it where it publishes), said
 * on stderr, the rest is published, and the status is 3; a Hurray load
 * too. Without it, load replaces as ever.
 */
Test(tensorctl, load_no_replace_leaves_names_that_exist_alone)
{
	static const char *const names[][4] = {{"nr_a", "t", "nr_c"}};
	struct tu_daemon d;
	char path[160], hrry[160], want[128], *out, *err;
	uint64_t vt, v;

	start(&d); /* "t" exists */
	vt = version_of(&d, "t");
	cr_assert_gt(vt, 0);
	path_in(path, sizeof(path), &d, "three.tgm");
	write_tgm(path, 1, 3, names);
	cr_expect_eq(CTL(&d, &out, &err, "load", path, "--no-replace"), 3,
		     "%s", err);
	snprintf(want, sizeof(want), "tensorctl: t: skipped: \"t\" exists "
		 "(version %" PRIu64 "): not replaced (--no-replace)", vt);
	cr_expect(strstr(err, want), "%s", err);
	cr_expect(strstr(out, "nr_a version") && strstr(out, "nr_c version"),
		  "%s", out);
	cr_expect(!strstr(out, "t version"), "%s", out);
	free(out);
	free(err);
	cr_expect_eq(version_of(&d, "t"), vt, "t was replaced");
	cr_expect(exists(&d, "nr_a") && exists(&d, "nr_c"));
	/* --json: every name exists now; all are listed as skipped */
	cr_expect_eq(CTL(&d, &out, &err, "load", path, "--no-replace",
			 "--json"),
		     3);
	cr_expect_str_eq(out, "{\"published\":[],\"skipped\":[\"nr_a\",\"t\","
			      "\"nr_c\"]}\n");
	cr_expect(strstr(err, "nr_c: skipped:"), "%s", err);
	free(out);
	free(err);
	/* a Hurray file of "t": the same */
	path_in(hrry, sizeof(hrry), &d, "t.hrry");
	cr_assert_eq(CTL(&d, NULL, NULL, "save", "-o", hrry, "t"), 0);
	cr_expect_eq(CTL(&d, &out, &err, "load", hrry, "--no-replace"), 3);
	cr_expect(strstr(err, want), "%s", err);
	cr_expect(strstr(out, "0 published, 0 refused, 1 skipped"), "%s",
		  out);
	free(out);
	free(err);
	cr_expect_eq(version_of(&d, "t"), vt, "t was replaced");
	cr_expect_eq(CTL(&d, &out, NULL, "load", hrry, "--no-replace",
			 "--prefix", "h/"),
		     0);
	free(out);
	cr_expect(exists(&d, "h/t"));
	/* without --no-replace: replaced, as ever */
	cr_expect_eq(CTL(&d, &out, NULL, "load", path), 0);
	free(out);
	v = version_of(&d, "t");
	cr_expect_gt(v, vt);
	unlink(path);
	unlink(hrry);
	tu_daemon_stop(&d, false);
}

/*
 * A daemon that cannot check the condition (its HELLO lacks
 * TD_WIRE_FEAT_PUB_IF): load --no-replace and zarr import --no-replace
 * fail before anything is published, never replacing instead.
 */
Test(tensorctl, no_replace_fails_with_a_daemon_without_the_condition)
{
	static const char *const names[][4] = {{"old_a", "t"}};
	struct tu_daemon d;
	char path[160], zdir[160], *out, *err;
	uint64_t vt;

	cr_assert_eq(setenv("TENSORD_TEST_HIDE_FEATURES", "0x4000000", 1), 0);
	start(&d);
	unsetenv("TENSORD_TEST_HIDE_FEATURES");
	vt = version_of(&d, "t");
	path_in(path, sizeof(path), &d, "two.tgm");
	write_tgm(path, 1, 2, names);
	cr_expect_eq(CTL(&d, &out, &err, "load", path, "--no-replace"), 1);
	cr_expect(strstr(err, "tensorctl: old_a: this daemon cannot publish "
			      "\"old_a\" only if it is at a version"),
		  "%s", err);
	cr_expect_str_eq(out, "");
	free(out);
	free(err);
	cr_expect(!exists(&d, "old_a"));
	cr_expect_eq(version_of(&d, "t"), vt);
	/* zarr import alike */
	path_in(zdir, sizeof(zdir), &d, "z");
	cr_assert_eq(CTL(&d, NULL, NULL, "zarr", "export", zdir, "t"), 0);
	cr_expect_eq(CTL(&d, &out, &err, "zarr", "import", zdir, "--prefix",
			 "z/", "--no-replace"),
		     1);
	cr_expect(strstr(err, "only if it is at a version"), "%s", err);
	free(out);
	free(err);
	cr_expect(!exists(&d, "z/t"));
	/* without the option, both work as ever */
	cr_expect_eq(CTL(&d, &out, NULL, "zarr", "import", zdir, "--prefix",
			 "z/"),
		     0);
	free(out);
	cr_expect(exists(&d, "z/t"));
	unlink(path);
	tu_daemon_stop(&d, false);
}

/* ---- the command line ---- */

Test(tensorctl, help_usage_and_valid_choices)
{
	/* every command tensorctl.c dispatches has its help in help.c */
	static const char *const cmds[] = {"inspect", "put",   "get",
					   "ls",      "stat",  "rm",
					   "watch",   "load",  "save",
					   "status",  "zarr"};
	struct tu_daemon d;
	char *out, *err;
	char in[160];

	start(&d);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char want[64];

		cr_expect_eq(CTL(&d, &out, &err, cmds[i], "--help"), 0);
		snprintf(want, sizeof(want), "usage: tensorctl %s", cmds[i]);
		cr_expect(!strncmp(out, want, strlen(want)), "%s", out);
		cr_expect(strstr(out, "--json") && strstr(out, "--socket"),
			  "%s", out);
		cr_expect_str_eq(err, "");
		free(out);
		free(err);
	}
	cr_expect_eq(CTL(&d, &out, NULL, "--help"), 0);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char want[64];

		snprintf(want, sizeof(want), "tensorctl %s", cmds[i]);
		cr_expect(strstr(out, want), "%s missing: %s", cmds[i], out);
	}
	free(out);
	cr_expect_eq(CTL(&d, NULL, &err, "put", "x", "--dtype", "f99",
			 "--shape", "2", "-"),
		     2);
	cr_expect(strstr(err, "unknown dtype 'f99' (valid: u8, i8, u16, i16, "
			      "u32, i32, u64, i64, f16, f32, f64; or numpy's "
			      "names: uint8 ... float64)"),
		  "%s", err);
	free(err);
	/* numpy's names are the same dtypes: what a Python user types */
	path_in(in, sizeof(in), &d, "eight.bin");
	write_file(in, "abcdefgh", 8);
	cr_expect_eq(CTL(&d, NULL, NULL, "put", "np", "--dtype", "float32",
			 "--shape", "2", in),
		     0);
	cr_expect_eq(CTL(&d, &out, NULL, "stat", "np", "--json"), 0);
	cr_expect(strstr(out, "\"dtype\":\"f32\""), "%s", out);
	free(out);
	cr_expect_eq(CTL(&d, NULL, &err, "put", "np", "--dtype", "uint16",
			 "--shape", "4", in),
		     0, "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "put", "np", "--dtype", "Float32",
			 "--shape", "2", in),
		     2);
	free(err);
	unlink(in);
	cr_expect_eq(CTL(&d, NULL, &err, "frob"), 2);
	cr_expect(strstr(err, "unknown command 'frob' (valid: inspect, put,"),
		  "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "get", "t", "--frob"), 2);
	cr_expect(strstr(err, "unknown option '--frob'"), "%s", err);
	free(err);
	/* --opt=value and --opt value, options before or after operands */
	cr_expect_eq(CTL(&d, &out, NULL, "get", "--version=1", "t", "-o", "-"),
		     0);
	cr_expect_str_eq(out, "abcdef");
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "stat", "--json", "t"), 0);
	cr_expect(strstr(out, "\"version\":1"), "%s", out);
	free(out);
	tu_daemon_stop(&d, false);
}

/*
 * `zarr` takes the options every command takes before its subcommand too
 * (docs/tensorctl.md): `zarr --json export DIR` used to be a usage error
 * ("needs export or import"), and so was any word that is not a
 * subcommand, without saying which.
 */
Test(tensorctl, zarr_takes_the_common_options_before_its_subcommand)
{
	struct tu_daemon d;
	char *out, *err, dir[160];

	start(&d);
	path_in(dir, sizeof(dir), &d, "z1");
	cr_expect_eq(CTL(&d, &out, &err, "zarr", "--json", "export", dir, "t"),
		     0, "%s", err);
	cr_expect(strstr(out, "\"arrays\":[\"t\"]"), "%s", out);
	free(out);
	free(err);
	path_in(dir, sizeof(dir), &d, "z2");
	cr_expect_eq(CTL(&d, NULL, &err, "zarr", "--bytes", "--socket", d.sock,
			 "export", dir, "t"),
		     0, "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, &out, &err, "zarr", "--json", "import", dir,
			 "--prefix", "back/"),
		     0, "%s", err);
	cr_expect(strstr(out, "\"back/t\""), "%s", out);
	free(out);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "zarr", "exprot", dir), 2);
	cr_expect(strstr(err, "unknown subcommand 'exprot' (valid: export, "
			      "import)"),
		  "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "zarr", "--frob", "export", dir), 2);
	cr_expect(strstr(err, "unknown option '--frob'"), "%s", err);
	free(err);
	tu_daemon_stop(&d, false);
}

/*
 * No daemon at the socket (the README starts one with --socket
 * /tmp/td.sock, and a newcomer's next `tensorctl ls` forgets it): the
 * message says what to do, not only ENOENT; still kind "connect".
 */
Test(tensorctl, no_daemon_at_the_socket_says_how_to_name_it)
{
	struct tu_daemon d = {0};
	char *out, *err;

	snprintf(d.sock, sizeof(d.sock), "/tmp/td-ctl-none-%d.sock",
		 (int)getpid());
	cr_expect_eq(CTL(&d, NULL, &err, "ls"), 1);
	cr_expect(strstr(err, ": No such file or directory (no tensord "
			      "listens there: start one, or name its socket "
			      "with --socket PATH or $TENSORD_SOCKET)"),
		  "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, &out, NULL, "--json", "status"), 1);
	cr_expect(strstr(out, "\"kind\":\"connect\"") &&
			  strstr(out, "no tensord listens there"),
		  "%s", out);
	free(out);
}

/*
 * A --socket that names a regular file or a folder (a log or a config
 * file typed for the socket, the runtime folder without its
 * tensord.sock): connect(2) says ECONNREFUSED, and the message said "no
 * tensord listens there: start one", sending the operator to start a
 * daemon. It says what is there instead; still kind "connect" and
 * ECONNREFUSED, as a script tests them.
 */
Test(tensorctl, a_socket_path_that_is_no_socket_is_said_so)
{
	struct tu_daemon d = {0};
	char *out, *err;
	int fd;

	snprintf(d.sock, sizeof(d.sock), "/tmp/td-ctl-file-%d.sock",
		 (int)getpid());
	fd = open(d.sock, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	cr_assert(fd >= 0);
	close(fd);
	cr_expect_eq(CTL(&d, NULL, &err, "ls"), 1);
	cr_expect(strstr(err, d.sock) &&
			  strstr(err, "is a regular file, not a socket"),
		  "%s", err);
	cr_expect(!strstr(err, "start one"), "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, &out, NULL, "--json", "status"), 1);
	cr_expect(strstr(out, "\"kind\":\"connect\",\"errno\":111,") &&
			  strstr(out, "not a socket"),
		  "%s", out);
	free(out);
	unlink(d.sock);
	snprintf(d.sock, sizeof(d.sock), "/tmp/td-ctl-dir-%d",
		 (int)getpid());
	cr_assert_eq(mkdir(d.sock, 0700), 0);
	cr_expect_eq(CTL(&d, NULL, &err, "ls"), 1);
	cr_expect(strstr(err, "is a directory, not a socket"), "%s", err);
	free(err);
	rmdir(d.sock);
}

/*
 * `--socket "$SOCK"` with SOCK unset: an empty path used to mean the
 * default socket, so the command went to whichever daemon listens there
 * ($TENSORD_SOCKET here, another one than named) and succeeded. It is a
 * bad command line, as tensord's own --socket "" is.
 */
Test(tensorctl, an_empty_socket_path_is_a_usage_error)
{
	struct tu_daemon d;
	char *out, *err;

	start(&d);
	setenv("TENSORD_SOCKET", d.sock, 1);
	cr_expect_eq(CTL(&d, &out, &err, "--socket", "", "ls"), 2);
	cr_expect(strstr(err, "--socket needs a PATH (to use the default "
			      "socket, leave --socket out)"),
		  "%s", err);
	cr_expect_str_empty(out);
	free(out);
	free(err);
	cr_expect_eq(CTL(&d, &out, NULL, "--json", "ls", "--socket="), 2);
	cr_expect(strstr(out, "{\"error\":{\"kind\":\"usage\",\"errno\":22,"
			      "\"reason\":\"ls: --socket needs a PATH"),
		  "%s", out);
	free(out);
	unsetenv("TENSORD_SOCKET");
	tu_daemon_stop(&d, false);
}

/*
 * A socket this uid may not connect to (the daemon's --socket-mode
 * 0600): the error names what decides it, as ENOENT's names --socket.
 */
Test(tensorctl, a_socket_it_may_not_connect_to_names_socket_mode)
{
	static const char *const closed[] = {"--socket-mode", "0600", NULL};
	struct run r = {.in_fd = -1, .out_fd = -1, .uid = NOBODY};
	struct tu_daemon d;
	char *err;

	tu_daemon_start_args(&d, "error", closed);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	cr_expect_eq(CTL_R(&d, &r, NULL, &err, "ls"), 1, "%s", err);
	cr_expect(strstr(err, "Permission denied (the socket's mode and group "
			      "decide who may connect: tensord --socket-mode "
			      "and --socket-group"),
		  "%s", err);
	free(err);
	tu_daemon_stop(&d, false);
}

/*
 * `save -o frame.npy` wrote a .tgm message under a .npy name, which
 * np.load then refused; `-o out.zarr` a file where a folder belongs.
 * Both are usage errors naming what writes such a file; --format tgm
 * still writes the .tgm under that name.
 */
Test(tensorctl, save_to_a_npy_or_zarr_name_says_what_writes_one)
{
	struct tu_daemon d;
	char npy[160], zarr[160], *out, *err;

	start(&d);
	path_in(npy, sizeof(npy), &d, "frame.npy");
	path_in(zarr, sizeof(zarr), &d, "out.zarr");
	cr_expect_eq(CTL(&d, &out, &err, "save", "-o", npy, "t"), 2, "%s", err);
	cr_expect(strstr(err, "a .npy file holds one tensor: tensorctl get "
			      "NAME -o "),
		  "%s", err);
	cr_expect_str_empty(out);
	free(out);
	free(err);
	cr_expect_neq(access(npy, F_OK), 0, "a file was written");
	cr_expect_eq(CTL(&d, &out, &err, "save", "-o", zarr), 2, "%s", err);
	cr_expect(strstr(err, "tensorctl zarr export "), "%s", err);
	free(out);
	free(err);
	cr_expect_neq(access(zarr, F_OK), 0, "a file was written");
	cr_expect_eq(CTL(&d, &out, &err, "save", "-o", npy, "--format", "tgm",
			 "t"),
		     0, "%s", err);
	cr_expect_eq(access(npy, F_OK), 0);
	free(out);
	free(err);
	unlink(npy);
	tu_daemon_stop(&d, false);
}

/*
 * `--shape 2 3` for 2,3, or a second FILE: one operand too many was told
 * as "needs NAME and FILE", which the line seemed to give. The message
 * names the operand too many.
 */
Test(tensorctl, an_operand_too_many_is_named)
{
	struct tu_daemon d;
	char in[160], *out, *err;

	start(&d);
	path_in(in, sizeof(in), &d, "six.bin");
	write_file(in, "abcdef", 6);
	cr_expect_eq(CTL(&d, NULL, &err, "put", "x", in, "--dtype", "u8",
			 "--shape", "2", "3"),
		     2);
	cr_expect(starts(err, "tensorctl: put: needs NAME and FILE (- for "
			      "stdin); unexpected operand '3'\n"),
		  "%s", err);
	free(err);
	/* in the README's order, FILE last: the 3 still, not the FILE
	 * (which getopt moves after it) */
	cr_expect_eq(CTL(&d, NULL, &err, "put", "x", "--dtype", "u8",
			 "--shape", "2", "3", in),
		     2);
	cr_expect(starts(err, "tensorctl: put: needs NAME and FILE (- for "
			      "stdin); unexpected operand '3'\n"),
		  "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "put", "x", "--dtype", "u8",
			 "--shape=2", "3", in),
		     2);
	cr_expect(strstr(err, "unexpected operand '3'\n"), "%s", err);
	free(err);
	/* a second FILE after a value is the FILE past NAME and FILE */
	cr_expect_eq(CTL(&d, NULL, &err, "put", "x", "--dtype", "u8",
			 "--shape", "6", in, "second.bin"),
		     2);
	cr_expect(strstr(err, "unexpected operand 'second.bin'\n"), "%s",
		  err);
	free(err);
	cr_expect_eq(CTL(&d, &out, NULL, "--json", "rm", "t", "u"), 2);
	cr_expect(strstr(out, "\"reason\":\"rm: needs one NAME; unexpected "
			      "operand 'u'\""),
		  "%s", out);
	free(out);
	cr_expect_eq(CTL(&d, NULL, &err, "get", "t", "x.bin"), 2);
	cr_expect(strstr(err, "get: needs one NAME; unexpected operand "
			      "'x.bin'"),
		  "%s", err);
	free(err);
	unlink(in);
	tu_daemon_stop(&d, false);
}

/*
 * What a newcomer types from the shell: a glob for ls, a prefix for
 * watch without --prefix. The daemon only says the name is bad; the
 * message says what to type instead. And a shape typed with a digit too
 * many is told by the file's size, not by the ALLOC's --max-bytes.
 */
Test(tensorctl, a_glob_or_a_prefix_without_prefix_says_what_to_type)
{
	struct tu_daemon d;
	char *err, in[160];

	start(&d);
	cr_expect_eq(CTL(&d, NULL, &err, "ls", "cam/*"), 1);
	cr_expect(strstr(err, "(ls takes a PREFIX, not a pattern: ls cam/ "
			      "lists every name under cam/)"),
		  "%s", err);
	free(err);
	/* rm and stat take one NAME: a glob is told so, with what lists */
	cr_expect_eq(CTL(&d, NULL, &err, "rm", "cam/*"), 1);
	cr_expect(strstr(err, "(rm takes one NAME, not a pattern: tensorctl "
			      "ls PREFIX lists the names to remove one by "
			      "one)"),
		  "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "stat", "cam/?"), 1);
	cr_expect(strstr(err, "(stat takes one NAME, not a pattern: "
			      "tensorctl ls PREFIX lists the names)"),
		  "%s", err);
	free(err);
	/* get and watch said only that '*' is no name byte; rm and stat of
	 * a PREFIX only that a name does not end with '/' */
	cr_expect_eq(CTL(&d, NULL, &err, "get", "cam/*", "-o", "/dev/null"),
		     1);
	cr_expect(strstr(err, "(get takes one NAME, not a pattern: tensorctl "
			      "ls PREFIX lists the names)"),
		  "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "watch", "cam/*"), 1);
	cr_expect(strstr(err, "(watch takes a NAME, or a PREFIX with --prefix, "
			      "not a pattern: watch --prefix cam/ watches "
			      "every name under cam/)"),
		  "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "rm", "cam/"), 1);
	cr_expect(strstr(err, "rm: cam/: DELETE: name: name ends with '/' (rm "
			      "takes one NAME, not a PREFIX: tensorctl ls cam/ "
			      "lists the names to remove one by one)"),
		  "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "stat", "cam/"), 1);
	cr_expect(strstr(err, "(stat takes one NAME, not a PREFIX: tensorctl "
			      "ls cam/ lists the names)"),
		  "%s", err);
	free(err);
	/* a shape mistyped huge: the file's size, not --max-bytes */
	path_in(in, sizeof(in), &d, "six.bin");
	write_file(in, "abcdef", 6);
	cr_expect_eq(CTL(&d, NULL, &err, "put", "x", "--dtype", "u8",
			 "--shape", "100000000000000", in),
		     1);
	cr_expect(strstr(err, "six.bin has 6 bytes, shape 100000000000000 "
			      "of u8 needs 100000000000000"),
		  "%s", err);
	free(err);
	unlink(in);
	cr_expect_eq(CTL(&d, NULL, &err, "watch", "cam/", "--count", "1"), 1);
	cr_expect(strstr(err, "name ends with '/' (to watch every name "
			      "under it, add --prefix)"),
		  "%s", err);
	free(err);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, json_everywhere_errors_included)
{
	struct tu_daemon d;
	char *out, *path = NULL;
	struct stat st;
	char in[160];

	start(&d);
	path_in(in, sizeof(in), &d, "four.bin");
	write_file(in, "wxyz", 4);
	cr_expect_eq(CTL(&d, &out, NULL, "put", "j", "--dtype", "u8",
			 "--shape", "4", in, "--json"),
		     0);
	cr_expect_str_eq(out, "{\"name\":\"j\",\"version\":2,\"bytes\":4}\n");
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "rm", "j", "--json"), 0);
	cr_expect_str_eq(out, "{\"removed\":\"j\",\"version\":2}\n");
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "rm", "j", "--json"), 1);
	cr_expect(starts(out, "{\"error\":{\"kind\":\"daemon\",\"errno\":2,"
				"\"reason\":\"j: "),
		  "%s", out);
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "--json", "get", "nope"), 1);
	cr_expect(starts(out, "{\"error\":{\"kind\":\"daemon\",\"errno\":2,"),
		  "%s", out);
	free(out);
	/* no daemon is not a refusal of the daemon's */
	cr_expect_eq(CTL(&d, &out, NULL, "--socket", "/nonexistent/t.sock",
			 "--json", "ls"),
		     1);
	cr_expect(starts(out, "{\"error\":{\"kind\":\"connect\",\"errno\":2,"),
		  "%s", out);
	free(out);
	/* --json with -o FILE: the file written, then described */
	cr_expect(asprintf(&path, "%s/desc.bin", d.dir) > 0);
	cr_expect_eq(CTL(&d, &out, NULL, "get", "t", "--json", "-o", path), 0);
	cr_expect(starts(out, "{\"name\":\"t\","), "%s", out);
	free(out);
	cr_expect_eq(stat(path, &st), 0, "-o FILE is written with --json too");
	cr_expect_gt(st.st_size, 0);
	free(path);
	/* ... and -o - is refused: bytes and JSON would share stdout */
	cr_expect_eq(CTL(&d, &out, NULL, "get", "t", "--json", "-o", "-"), 2);
	cr_expect(starts(out, "{\"error\":{\"kind\":\"usage\","), "%s",
		  out);
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "save", "t", "--json", "-o", "-"), 2);
	cr_expect(starts(out, "{\"error\":{\"kind\":\"usage\","), "%s",
		  out);
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "save", "--json", "-o", "-",
			 "--format", "hrry"),
		     2);
	free(out);
	cr_expect(asprintf(&path, "%s/out.tgm", d.dir) > 0);
	cr_expect_eq(CTL(&d, &out, NULL, "save", "t", "-o", path, "--json"),
		     0);
	cr_expect(strstr(out, "\"objects\":1"), "%s", out);
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "save", "t", "-o", d.dir, "--json"),
		     1);
	cr_expect(starts(out, "{\"error\":{\"kind\":\"io\",\"errno\":21,"),
		  "%s", out);
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "inspect", "/nonexistent", "--json"),
		     1);
	cr_expect(starts(out, "{\"error\":{\"kind\":\"io\",\"errno\":2,"),
		  "%s", out);
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "watch", "--count=0", "t", "--json"),
		     2);
	cr_expect(starts(out, "{\"error\":{\"kind\":\"usage\","), "%s",
		  out);
	free(out);
	free(path);
	unlink(in);
	tu_daemon_stop(&d, false);
}

/*
 * save -o FILE.tgm without a NAME saves every tensor, rings left out,
 * as save -o FILE.hrry does (it was a usage error); load gives them
 * back byte for byte.
 */
Test(tensorctl, save_tgm_without_names_saves_every_tensor)
{
	static const uint64_t shape[1] = {8};
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
				  .shape = shape};
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *ring;
	char path[160], back[160], *out, *err;

	start(&d);
	put_meta(&d, "cam/u", "lens", 4);
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	cr_assert_eq(td_ring_create(c, "r", &rd, &ring, NULL), 0);
	path_in(path, sizeof(path), &d, "all.tgm");
	cr_expect_eq(CTL(&d, &out, &err, "save", "-o", path), 0, "%s", err);
	cr_expect(strstr(out, ": 2 object(s)"), "%s", out);
	free(out);
	free(err);
	cr_expect_eq(CTL(&d, &out, &err, "load", path, "--prefix", "b/"), 0,
		     "%s", err);
	free(out);
	free(err);
	/* a name's "/" comes back as "_" (docs/tensorctl.md, load) */
	cr_expect(exists(&d, "b/t") && exists(&d, "b/cam_u"));
	cr_expect(!exists(&d, "b/r"), "a ring is not saved");
	path_in(back, sizeof(back), &d, "t.bin");
	cr_expect_eq(CTL(&d, NULL, NULL, "get", "b/t", "-o", back), 0);
	expect_file(back, "abcdef");
	td_ring_close(ring);
	td_client_close(c);
	/* nothing to save is an error, not an empty file */
	cr_assert_eq(CTL(&d, NULL, NULL, "rm", "t"), 0);
	cr_assert_eq(CTL(&d, NULL, NULL, "rm", "cam/u"), 0);
	cr_assert_eq(CTL(&d, NULL, NULL, "rm", "b/t"), 0);
	cr_assert_eq(CTL(&d, NULL, NULL, "rm", "b/cam_u"), 0);
	path_in(path, sizeof(path), &d, "none.tgm");
	cr_expect_eq(CTL(&d, NULL, &err, "save", "-o", path), 1);
	cr_expect(strstr(err, "no tensors to save"), "%s", err);
	free(err);
	cr_expect_eq(access(path, F_OK), -1);
	tu_daemon_stop(&d, false);
}

/*
 * `save -o F.tgm` held one GET lease per tensor until the message was
 * written, and a connection may hold 4096 (docs/protocol.md §4): the
 * backup of a store of more tensors failed at the 4097th ("too many
 * leases on this connection (max 4096)"), whereas `save -o F.hrry`
 * wrote them. Past what the daemon lets it hold, save copies the bytes
 * of the tensors it holds and releases them; the file is the same.
 */
Test(tensorctl, save_of_more_tensors_than_a_connection_may_lease)
{
	enum { N = 4200 };
	struct tu_daemon d;
	struct td_error e = {0};
	struct td_client *c;
	struct td_tensor *t;
	char path[160], name[32], *out, *err;
	uint64_t four = 4;

	start(&d);
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	for (int i = 0; i < N; i++) {
		uint8_t b[4] = {(uint8_t)i, (uint8_t)(i >> 8), 7, 9};
		struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
				       .ndim = 1, .shape = &four,
				       .meta = name, .meta_len = 1};

		snprintf(name, sizeof(name), "m/%05d", i);
		cr_assert_eq(td_client_put(c, &p, b, sizeof(b), NULL, &e), 0,
			     "%s", e.reason);
	}
	path_in(path, sizeof(path), &d, "many.tgm");
	cr_expect_eq(CTL(&d, &out, &err, "save", "-o", path, "m/"), 0,
		     "%s", err);
	cr_expect(strstr(out, ": 4200 object(s)"), "%s", out);
	free(out);
	free(err);
	/* no lease left behind */
	cr_expect_eq(leases(&d, "m/00000"), 0);
	cr_expect_eq(leases(&d, "m/04199"), 0);
	cr_expect_eq(CTL(&d, &out, &err, "load", path, "--prefix", "b/"),
		     0, "%s", err);
	free(out);
	free(err);

	/* the first tensors (held, then copied) and the last (taken after)
	 * came back whole, metadata included */
	for (int i = 0; i < N; i += N - 1) {
		const uint8_t *b;
		const void *meta;
		size_t ml;

		snprintf(name, sizeof(name), "b/m_%05d", i);
		cr_assert_eq(td_client_get(c, name, &t, &e), 0, "%s: %s",
			     name, e.reason);
		cr_assert_eq(td_tensor_bytes(t), 4);
		b = td_tensor_plane_data(t, 0);
		cr_expect(b[0] == (uint8_t)i && b[1] == (uint8_t)(i >> 8) &&
				  b[2] == 7 && b[3] == 9,
			  "%s: %02x %02x %02x %02x", name, b[0], b[1], b[2],
			  b[3]);
		meta = td_tensor_meta(t, &ml);
		cr_expect(ml == 1 && !memcmp(meta, "m", 1), "%s: meta %zu",
			  name, ml);
		td_tensor_release(t);
	}
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/*
 * The same past a uid's lease cap (--uid-limit leases=N, EDQUOT), for
 * save and zarr export alike: zarr export held every lease until DIR was
 * written and failed at the cap, as save did (at the 4097th tensor, the
 * connection's cap, without one). The bytes come back as they were.
 */
Test(tensorctl, save_and_zarr_export_past_the_uids_lease_cap)
{
	static const char *const more[] = {"--socket-mode", "0666",
					   "--uid-limit", "leases=8", NULL};
	enum { N = 20 };
	struct tu_daemon d;
	struct run r = {.in_fd = -1, .out_fd = -1, .uid = NOBODY};
	struct td_error e = {0};
	struct td_client *c;
	struct td_tensor *t;
	char dir[160], path[200], zdir[200], name[32], *out, *err;
	uint64_t four = 4;

	tu_daemon_start_args(&d, "error", more);
	cr_assert_eq(chmod(d.dir, 0755), 0);
	path_in(dir, sizeof(dir), &d, "home");
	cr_assert_eq(mkdir(dir, 0755), 0);
	cr_assert_eq(chown(dir, NOBODY, NOBODY), 0);
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	for (int i = 0; i < N; i++) {
		uint8_t b[4] = {(uint8_t)i, 1, 2, 3};
		struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
				       .ndim = 1, .shape = &four};

		snprintf(name, sizeof(name), "m/%02d", i);
		cr_assert_eq(td_client_put(c, &p, b, sizeof(b), NULL, &e), 0,
			     "%s", e.reason);
	}
	snprintf(path, sizeof(path), "%s/m.tgm", dir);
	cr_expect_eq(CTL_R(&d, &r, &out, &err, "save", "-o", path, "m/"), 0,
		     "%s", err);
	cr_expect(strstr(out, ": 20 object(s)"), "%s", out);
	free(out);
	free(err);
	snprintf(zdir, sizeof(zdir), "%s/m.zarr", dir);
	cr_expect_eq(CTL_R(&d, &r, &out, &err, "zarr", "export", zdir, "m/"),
		     0, "%s", err);
	cr_expect(strstr(out, ": 20 array(s)"), "%s", out);
	free(out);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "load", path, "--prefix", "b/"), 0,
		     "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "zarr", "import", zdir, "--prefix",
			 "z/"),
		     0, "%s", err);
	free(err);
	for (int k = 0; k < 4; k++) {
		int i = k % 2 ? N - 1 : 0;
		const uint8_t *b;

		snprintf(name, sizeof(name), k < 2 ? "b/m_%02d" : "z/m/%02d",
			 i);
		cr_assert_eq(td_client_get(c, name, &t, &e), 0, "%s: %s",
			     name, e.reason);
		b = td_tensor_plane_data(t, 0);
		cr_expect(td_tensor_bytes(t) == 4 && b[0] == (uint8_t)i &&
				  b[1] == 1 && b[2] == 2 && b[3] == 3,
			  "%s", name);
		td_tensor_release(t);
	}
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/*
 * A NAME ending in '/' stands for every tensor under it, as `ls cam/`
 * lists them (rings left out, as without NAMES), in .tgm and .hrry
 * alike: `save -o F cam/` was the daemon's refusal "cam/: GET: name: name
 * ends with '/'". A prefix nothing has fails the save, as a missing name
 * does, and writes nothing.
 */
Test(tensorctl, save_a_name_ending_in_slash_saves_what_is_under_it)
{
	static const uint64_t shape[1] = {8};
	struct td_ring_desc rd = {.dtype = TD_TENSOR_U8, .ndim = 1,
				  .shape = shape};
	struct tu_daemon d;
	struct td_client *c;
	struct td_ring *ring, *ring2;
	char path[160], *out, *err;

	start(&d);
	put_meta(&d, "cam/u", "lens", 4);
	put_meta(&d, "cam/v", "lens", 4);
	put_meta(&d, "camera", "lens", 4);
	cr_assert_eq(td_client_connect(d.sock, &c, NULL), 0);
	cr_assert_eq(td_ring_create(c, "cam/r", &rd, &ring, NULL), 0);
	path_in(path, sizeof(path), &d, "cam.tgm");
	cr_expect_eq(CTL(&d, &out, &err, "save", "-o", path, "cam/", "t"), 0,
		     "%s", err);
	cr_expect(strstr(out, ": 3 object(s)"), "%s", out);
	free(out);
	free(err);
	cr_expect_eq(CTL(&d, &out, &err, "load", path, "--prefix", "b/"), 0,
		     "%s", err);
	free(out);
	free(err);
	cr_expect(exists(&d, "b/cam_u") && exists(&d, "b/cam_v") &&
		  exists(&d, "b/t"));
	cr_expect(!exists(&d, "b/camera") && !exists(&d, "b/cam_r"));
	/* a name both under a NAME/ and given, or given twice, is saved
	 * once: it was saved twice and loaded back as cam_u and cam_u_1 */
	cr_expect_eq(CTL(&d, &out, &err, "save", "-o", path, "cam/u", "cam/",
			 "t", "cam/u", "t"),
		     0, "%s", err);
	cr_expect(strstr(out, ": 3 object(s)"), "%s", out);
	free(out);
	free(err);
	path_in(path, sizeof(path), &d, "cam.hrry");
	cr_expect_eq(CTL(&d, &out, &err, "save", "-o", path, "cam/", "cam/v"),
		     0, "%s", err);
	cr_expect(strstr(out, ": 2 tensor(s)"), "%s", out);
	free(out);
	free(err);
	path_in(path, sizeof(path), &d, "none.tgm");
	cr_expect_eq(CTL(&d, NULL, &err, "save", "-o", path, "t", "nope/"), 1);
	cr_expect(strstr(err, "save: nope/: no tensor starts with it"), "%s",
		  err);
	free(err);
	cr_expect_eq(access(path, F_OK), -1);
	/* a prefix only rings have is said so: "no tensor but a ring
	 * starts with it" was said of nope/ too, where nothing does */
	cr_assert_eq(td_ring_create(c, "only/r", &rd, &ring2, NULL), 0);
	cr_expect_eq(CTL(&d, NULL, &err, "save", "-o", path, "only/"), 1);
	cr_expect(strstr(err, "save: only/: only rings start with it, and "
			      "save leaves rings out"),
		  "%s", err);
	free(err);
	cr_expect_eq(access(path, F_OK), -1);
	td_ring_close(ring2);
	/* get writes one tensor: it says what writes every one under cam/ */
	cr_expect_eq(CTL(&d, NULL, &err, "get", "cam/", "-o", path), 2);
	cr_expect(strstr(err, "tensorctl save -o FILE cam/"), "%s", err);
	free(err);
	cr_expect_eq(access(path, F_OK), -1);
	td_ring_close(ring);
	td_client_close(c);
	tu_daemon_stop(&d, false);
}

/*
 * A Hurray file on stdin is told by its magic (or --format hrry), as
 * inspect tells it; a --format that is neither tgm nor hrry is refused
 * by load and save (save wrote a .tgm for any word before).
 */
Test(tensorctl, hurray_on_stdin_and_formats_checked)
{
	struct tu_daemon d;
	struct run r = {.in_fd = -1, .out_fd = -1};
	char path[160], *out, *err;

	start(&d);
	path_in(path, sizeof(path), &d, "all.hrry");
	cr_assert_eq(CTL(&d, NULL, NULL, "save", "-o", path), 0);
	for (int k = 0; k < 2; k++) {
		r.in_fd = open(path, O_RDONLY | O_CLOEXEC);
		cr_assert_geq(r.in_fd, 0);
		cr_expect_eq(CTL_R(&d, &r, &out, &err, "load", "-", "--prefix",
				   k ? "f/" : "s/", k ? "--format" : "--partial",
				   k ? "hrry" : NULL),
			     0, "%s", err);
		cr_expect(strstr(out, k ? "f/t version" : "s/t version"),
			  "%s", out);
		close(r.in_fd);
		free(out);
		free(err);
	}
	cr_expect_eq(CTL(&d, NULL, &err, "load", path, "--format", "zarr"), 2);
	cr_expect(strstr(err, "bad --format 'zarr' (valid: tgm, hrry)"), "%s",
		  err);
	free(err);
	path_in(path, sizeof(path), &d, "x.tgm");
	cr_expect_eq(CTL(&d, NULL, &err, "save", "t", "-o", path, "--format",
			 "tmg"),
		     2);
	cr_expect(strstr(err, "bad --format 'tmg'"), "%s", err);
	cr_expect(access(path, F_OK) < 0, "nothing written");
	free(err);
	tu_daemon_stop(&d, false);
}

/* load of a .tgm whose last message is cut: what was whole is loaded,
 * and stderr says how many bytes were skipped (it said nothing). */
Test(tensorctl, load_says_what_its_scan_skipped)
{
	struct tu_daemon d;
	char path[160], *err, *b;
	size_t len;
	FILE *f;

	start(&d);
	path_in(path, sizeof(path), &d, "t.tgm");
	cr_assert_eq(CTL(&d, NULL, NULL, "save", "t", "-o", path), 0);
	cr_expect_eq(CTL(&d, NULL, &err, "load", path, "--prefix", "a/"), 0);
	cr_expect(!strstr(err, "skipped"), "a whole file: %s", err);
	free(err);
	b = (char *)tu_read_file(path, &len);
	f = fopen(path, "ab");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(b, 1, len - 30, f), len - 30);
	fclose(f);
	cr_expect_eq(CTL(&d, NULL, &err, "load", path, "--prefix", "b/"), 0);
	cr_expect(strstr(err, "bytes outside any whole message skipped"),
		  "%s", err);
	free(err);
	free(b);
	tu_daemon_stop(&d, false);
}

/*
 * zarr export into a folder that does not exist named its own temporary
 * folder (".tensorctl-PID-x-XXXXXX: No such file or directory"), a name
 * the user never typed: it names DIR and the folder at fault, as -o does.
 */
Test(tensorctl, zarr_export_names_the_folder_it_cannot_write_in)
{
	struct tu_daemon d;
	char dir[200], want[512], *err;

	start(&d);
	snprintf(dir, sizeof(dir), "%s/missing/x", d.dir);
	cr_expect_eq(CTL(&d, NULL, &err, "zarr", "export", dir, "t"), 1);
	snprintf(want, sizeof(want),
		 "tensorctl: %s: making a new folder in %s/missing: No such "
		 "file or directory\n",
		 dir, d.dir);
	cr_expect_str_eq(err, want);
	free(err);
	tu_daemon_stop(&d, false);
}

/*
 * load of a file with no .tgm message in it (a .npy handed to load, as a
 * user will) said "N bytes outside any whole message skipped" and then
 * "no complete .tgm message found": one line now, and for a .npy file
 * the command that takes it.
 */
Test(tensorctl, load_of_a_npy_file_says_where_it_goes)
{
	static const char npy[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '|u1', "
				  "'fortran_order': False, 'shape': (1,), }";
	struct tu_daemon d;
	char path[160], want[400], *err;

	start(&d);
	path_in(path, sizeof(path), &d, "a.npy");
	write_file(path, npy, sizeof(npy) - 1);
	cr_expect_eq(CTL(&d, NULL, &err, "load", path), 1);
	snprintf(want, sizeof(want),
		 "tensorctl: %s: no complete .tgm message found (a NumPy .npy "
		 "file: tensorctl put NAME FILE publishes it)\n",
		 path);
	cr_expect_str_eq(err, want);
	free(err);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/* stat shows the metadata as text on a line of its own, escaped (no
 * byte of it reaches the terminal raw), hex when it is not UTF-8; ls
 * keeps one line a tensor. */
Test(tensorctl, stat_shows_metadata_escaped)
{
	static const char text[] = "lens=50mm\tf/2\nfake line \\ \x1b[31m"
				   "\xc2\x9b" "2J caf\xc3\xa9";
	static const char raw[] = "\xff\x00\x01";
	struct tu_daemon d;
	char *out;

	start(&d);
	put_meta(&d, "m/text", text, sizeof(text) - 1);
	put_meta(&d, "m/raw", raw, sizeof(raw) - 1);
	put_meta(&d, "m/none", NULL, 0);
	cr_expect_eq(CTL(&d, &out, NULL, "stat", "m/text"), 0);
	cr_expect(strstr(out, "\n  metadata (41 B): lens=50mm\\tf/2\\nfake "
			 "line \\\\ \\x1b[31m\\u009b2J caf\xc3\xa9\n"),
		  "%s", out);
	cr_expect(!strchr(out, '\x1b') && !strstr(out, "\xc2\x9b"), "%s",
		  out);
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "stat", "m/raw"), 0);
	cr_expect(strstr(out, "\n  metadata (3 B, not UTF-8, hex): ff0001\n"),
		  "%s", out);
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "stat", "m/none"), 0);
	cr_expect(!strstr(out, "metadata"), "%s", out);
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "ls", "m/"), 0);
	cr_expect(!strstr(out, "metadata"), "%s", out);
	free(out);
	tu_daemon_stop(&d, false);
}

/*
 * `get --newer N` gives the current version when it is newer than N (the
 * versions in between are skipped), and `get --help` says so: it used to
 * promise "the first version newer than N", which a user stepping through
 * versions with it would not get.
 */
Test(tensorctl, get_newer_gives_the_current_version_as_its_help_says)
{
	struct tu_daemon d;
	char *out;

	start(&d);
	put_meta(&d, "t", NULL, 0); /* version 2 */
	put_meta(&d, "t", NULL, 0); /* version 3 */
	cr_expect_eq(CTL(&d, &out, NULL, "--json", "get", "t", "--newer", "1"),
		     0);
	cr_expect(strstr(out, "\"version\":3"), "%s", out);
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "get", "--help"), 0);
	cr_expect(!strstr(out, "the first version newer"), "%s", out);
	cr_expect(strstr(out, "the current version if newer than N"), "%s",
		  out);
	free(out);
	tu_daemon_stop(&d, false);
}

/*
 * --shape "" is a 0-d tensor (one element); a size mismatch says so
 * instead of "shape  of u8 needs 1". The common --socket help names the
 * default socket and $TENSORD_SOCKET.
 */
Test(tensorctl, a_scalar_shape_is_said_as_one)
{
	struct tu_daemon d;
	char in[160], *out, *err;

	start(&d);
	path_in(in, sizeof(in), &d, "empty.bin");
	write_file(in, "", 0);
	cr_expect_eq(CTL(&d, NULL, &err, "put", "s", "--dtype", "u8",
			 "--shape", "", in),
		     1);
	cr_expect(strstr(err, "has 0 bytes, shape '' (0-d) of u8 needs 1"),
		  "%s", err);
	free(err);
	write_file(in, "z", 1);
	cr_expect_eq(CTL(&d, &out, NULL, "put", "s", "--dtype", "u8",
			 "--shape", "", in),
		     0);
	free(out);
	unlink(in);
	cr_expect_eq(CTL(&d, &out, NULL, "put", "--help"), 0);
	cr_expect(strstr(out, "0-d scalar"), "%s", out);
	cr_expect(strstr(out, "(default: $TENSORD_SOCKET"), "%s", out);
	free(out);
	tu_daemon_stop(&d, false);
}

/*
 * load's --variable-key is the path zarr export calls --name-key; load
 * takes that name too (it was "unknown option '--name-key'", exit 2).
 */
Test(tensorctl, load_takes_zarr_exports_name_key)
{
	static const char *const names[][4] = {{"x"}};
	struct tu_daemon d;
	char path[160], *err;

	start(&d);
	path_in(path, sizeof(path), &d, "one.tgm");
	write_tgm(path, 1, 1, names);
	cr_expect_eq(CTL(&d, NULL, &err, "load", path, "--name-key", "a.b",
			 "--prefix", "nk/"),
		     0, "%s", err);
	free(err);
	cr_expect(exists(&d, "nk/x"));
	unlink(path);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, human_sizes_unless_bytes)
{
	struct tu_daemon d;
	char *out;

	start(&d);
	put_zeros(&d, "m3", 3 << 20);
	cr_expect_eq(CTL(&d, &out, NULL, "ls"), 0);
	cr_expect(strstr(out, " 3.0 MiB, 0 leases"), "%s", out);
	cr_expect(strstr(out, " 6 B, 0 leases"), "%s", out);
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "stat", "m3", "--bytes"), 0);
	cr_expect(strstr(out, " 3145728 B, 0 leases"), "%s", out);
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "stat", "m3", "--json"), 0);
	cr_expect(strstr(out, "\"bytes\":3145728"), "%s", out);
	free(out);
	tu_daemon_stop(&d, false);
}

/*
 * put from a FIFO whose writer pauses past the one-second mark halfway:
 * on a terminal the progress line shows (and is erased), on a pipe not.
 */
static char *put_paused(const struct tu_daemon *d, int err_fd)
{
	static uint8_t half[1 << 20];
	struct run r = {.in_fd = -1, .out_fd = -1, .err_fd = err_fd};
	char fifo[160], *err = NULL;
	pid_t w;

	path_in(fifo, sizeof(fifo), d, "slow.fifo");
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	w = tu_fork();
	if (w == 0) {
		int fd, ok;

		alarm(60); /* bounded, should tensorctl never open it */
		fd = open(fifo, O_WRONLY);
		ok = write(fd, half, sizeof(half)) == sizeof(half);

		/* the tool's documented threshold is about a second */
		usleep(1300000);
		ok &= write(fd, half, sizeof(half)) == sizeof(half);
		_exit(ok ? 0 : 1);
	}
	cr_expect_eq(CTL_R(d, &r, NULL, &err, "put", "slow", "--dtype", "u8",
			   "--shape", "2097152", fifo),
		     0, "%s", err);
	tu_wait_child(w, TU_WAIT_S, "the FIFO's writer");
	unlink(fifo);
	return err;
}

/* put_paused on a pty with TERM set to term (unset: NULL); what the
 * terminal got in got, read until the line is erased by end (or nothing
 * came for 10 s). */
static size_t progress_on_pty(const struct tu_daemon *d, const char *term,
			      const char *end, char *got, size_t cap)
{
	size_t n = 0, el = strlen(end);
	int master, slave;

	if (term)
		cr_assert_eq(setenv("TERM", term, 1), 0);
	else
		cr_assert_eq(unsetenv("TERM"), 0);
	slave = open_pty(&master);
	free(put_paused(d, slave));
	/* the pty hands the slave's writes to the master from a kernel
	 * work queue: they may arrive after tensorctl exited */
	got[0] = 0;
	while (n < cap - 1 && !(n >= el && !strcmp(got + n - el, end)) &&
	       poll(&(struct pollfd){.fd = master, .events = POLLIN}, 1,
		    10000) == 1) {
		ssize_t r = read(master, got + n, cap - 1 - n);

		if (r <= 0)
			break;
		n += (size_t)r;
		got[n] = 0;
	}
	close(slave);
	close(master);
	cr_assert_gt(n, 0, "nothing on the terminal");
	cr_expect(strstr(got, "slow.fifo: ") && strstr(got, " of 2.0 MiB ("),
		  "%s", got);
	return n;
}

Test(tensorctl, progress_only_on_a_terminal)
{
	struct tu_daemon d;
	char got[4096], *err;
	size_t n;

	start(&d);
	n = progress_on_pty(&d, "xterm", "\r\033[K", got, sizeof(got));
	cr_expect(n >= 4 && !strcmp(got + n - 4, "\r\033[K"),
		  "the line was not erased");
	err = put_paused(&d, 0);
	cr_expect(!strchr(err, '\r') && !strstr(err, " of 2.0 MiB"),
		  "progress on a pipe: %s", err);
	free(err);
	tu_daemon_stop(&d, false);
}

/*
 * TERM=dumb (an Emacs shell) or no TERM: the terminal may not know
 * ESC [ K, which showed as junk there. The line is drawn with a carriage
 * return alone and erased with spaces over it.
 */
Test(tensorctl, progress_on_a_dumb_terminal_sends_no_escape)
{
	const char *terms[] = {"dumb", "", NULL};
	struct tu_daemon d;
	char got[4096], want[200];

	start(&d);
	for (size_t i = 0; i < 3; i++) {
		const char *line, *last;
		size_t n = progress_on_pty(&d, terms[i], " \r", got,
					   sizeof(got));

		cr_expect(!strchr(got, '\033'), "TERM=%s: an escape: %s",
			  terms[i] ? terms[i] : "(unset)", got);
		/* the closing erase: as many spaces as the longest line */
		last = got + n - 1;
		while (last > got && last[-1] != '\r')
			last--;
		line = last - 1;
		while (line > got && line[-1] != '\r')
			line--;
		cr_assert(line > got && last > line, "%s", got);
		cr_expect_eq(last - line - 1, n - (size_t)(last - got) - 1,
			     "TERM=%s: the erase does not cover the line: %s",
			     terms[i] ? terms[i] : "(unset)", got);
		snprintf(want, sizeof(want), "%*s\r", (int)(last - line - 1),
			 "");
		cr_expect_str_eq(last, want);
	}
	tu_daemon_stop(&d, false);
}

/*
 * README's "Trying it", line by line as written, in a private /tmp (the
 * lines name /tmp/td.sock): scripts/run.sh and build/tools/tensorctl are
 * the built programs, tests/data the repository's. The test waits for the
 * daemon after the first line, as a person typing would.
 */
Test(tensorctl, readme_trying_it_runs_as_written)
{
	char readme[4200], dir[] = "/tmp/td-readme-XXXXXX", cmd[8192];
	const char *data = getenv("TD_TEST_DATA");
	char *text, *block, *line, *save = NULL, *out;
	size_t len;
	int lines = 0, pid = 0, rc;
	FILE *f;

	cr_assert(data, "TD_TEST_DATA is not set");
	snprintf(readme, sizeof(readme), "%s/../../README.md", data);
	text = (char *)tu_read_file(readme, &len);
	text = realloc(text, len + 1);
	text[len] = 0;
	block = strstr(text, "## Trying it\n\n");
	cr_assert(block, "README has no \"Trying it\" section");
	block += strlen("## Trying it\n\n");
	*strstr(block, "\n\n") = 0;
	/* a private /tmp: the socket name is fixed by the text */
	if ((rc = tu_private_tmpfs("/tmp", "mode=1777")) < 0)
		cr_skip_test("no mount namespace (unshare/mount: %s): README "
			     "walk-through not run",
			     strerror(-rc));
	cr_assert(tu_mkdtemp(dir));
	snprintf(cmd, sizeof(cmd),
		 "set -e; cd %s; mkdir -p scripts build/tools tests; "
		 "printf '#!/bin/sh\\nexec \"%s\" \"$@\" --log-level error "
		 ">/dev/null 2>&1 </dev/null\\n' "
		 "> scripts/run.sh; chmod +x scripts/run.sh; "
		 "ln -s '%s' build/tools/tensorctl; ln -s '%s' tests/data",
		 dir, getenv("TD_TENSORD"), ctl_bin(), data);
	{
		char *argv[] = {"/bin/sh", "-c", cmd, NULL};

		cr_assert_eq(tu_run_capture(argv, &out), 0, "%s", out);
		free(out);
	}
	for (line = strtok_r(block, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save), lines++) {
		char *argv[] = {"/bin/sh", "-c", cmd, NULL};
		int st;

		cr_assert(!strncmp(line, "    ", 4), "not a code line: %s", line);
		snprintf(cmd, sizeof(cmd), "cd %s\n%s%s", dir, line + 4,
			 lines ? "" : "\necho $! > daemon.pid");
		st = tu_run_capture(argv, &out);
		cr_expect_eq(st, 0, "'%s' exited %d: %s", line + 4, st, out);
		if (strstr(line, " ls"))
			cr_expect(strstr(out, "demo "), "%s", out);
		if (strstr(line, " status"))
			cr_expect(strstr(out, "tensors 1,") &&
					  strstr(out, "tensorctl"),
				  "%s", out);
		if (strstr(line, "inspect --json"))
			cr_expect(starts(out, "{\"kind\":\"blob\""), "%s",
				  out);
		free(out);
		if (lines == 0) {
			/* wait for the daemon to listen, as a person would */
			int i;

			for (i = 0; i < 2000 && access("/tmp/td.sock", F_OK);
			     i++)
				usleep(10000);
			usleep(100000);
		}
	}
	cr_expect_eq(lines, 7);
	snprintf(cmd, sizeof(cmd), "%s/back.bin", dir);
	expect_file(cmd, "abcdef");
	snprintf(cmd, sizeof(cmd), "%s/daemon.pid", dir);
	f = fopen(cmd, "r");
	cr_assert(f && fscanf(f, "%d", &pid) == 1 && pid > 0);
	fclose(f);
	kill(pid, SIGTERM);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	{
		char *argv[] = {"/bin/sh", "-c", cmd, NULL};

		tu_run_capture(argv, &out);
		free(out);
	}
	free(text);
}

/* ---- NumPy .npy files (put and get) ---- */

/*
 * Debian's python3 with numpy (deps.sh installs python3-numpy) runs code
 * with %D replaced by the daemon's folder; its stdout in *out (may be
 * NULL). A missing numpy fails the test: the interop would go untested.
 */
static void numpy_run(const struct tu_daemon *d, const char *code, char **out)
{
	char src[4096], *got = NULL;
	size_t o = 0;
	char *argv[] = {"/usr/bin/python3", "-c", src, NULL};
	int rc;

	for (const char *p = code; *p && o + 200 < sizeof(src); p++) {
		if (p[0] == '%' && p[1] == 'D') {
			o += (size_t)snprintf(src + o, sizeof(src) - o, "%s",
					      d->dir);
			p++;
		} else {
			src[o++] = *p;
		}
	}
	src[o] = 0;
	cr_assert_eq(access(argv[0], X_OK), 0,
		     "/usr/bin/python3 is missing (scripts/deps.sh)");
	rc = tu_run_capture_in(argv, &got, 60);
	cr_assert_eq(rc, 0, "python3 with numpy failed (is python3-numpy "
		     "installed? scripts/deps.sh): %s\n%s", got, src);
	if (out)
		*out = got;
	else
		free(got);
}

/* Two files hold the same bytes. */
static void expect_same_files(const char *a, const char *b)
{
	size_t na, nb;
	uint8_t *x = tu_read_file(a, &na), *y = tu_read_file(b, &nb);

	cr_expect(na == nb && !memcmp(x, y, na), "%s (%zu B) and %s (%zu B) "
		  "differ", a, na, b, nb);
	free(x);
	free(y);
}

/*
 * put raw -> get .npy -> put .npy -> get raw gives the bytes back, for
 * 1-, 2-, 4- and 8-byte types, a 0-d tensor, an empty one and 3 dims;
 * --format npy to stdout writes the same file as -o X.npy.
 */
Test(tensorctl, npy_round_trip_keeps_dtype_shape_and_bytes)
{
	static const struct {
		const char *dtype, *shape;
		size_t bytes;
	} cases[] = {
		{"u8", "5", 5},      {"i8", "", 1},       {"f16", "2,3", 12},
		{"u16", "3", 6},     {"i32", "2x2x2", 32}, {"f32", "", 4},
		{"f64", "1,2,1", 16}, {"u64", "0,4", 0},   {"i64", "2", 16},
	};
	struct tu_daemon d;
	char raw[160], npy[160], back[160], stdout_npy[160], *out, *err;
	uint8_t data[64];

	tu_daemon_start(&d, "error");
	path_in(raw, sizeof(raw), &d, "in.bin");
	path_in(npy, sizeof(npy), &d, "t.npy");
	path_in(back, sizeof(back), &d, "back.bin");
	path_in(stdout_npy, sizeof(stdout_npy), &d, "stdout.npy");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		for (size_t k = 0; k < sizeof(data); k++)
			data[k] = (uint8_t)(k * 37 + i);
		write_file(raw, data, cases[i].bytes);
		cr_assert_eq(CTL(&d, NULL, &err, "put", "a", "--dtype",
				 cases[i].dtype, "--shape", cases[i].shape,
				 raw),
			     0, "%s", err);
		free(err);
		cr_assert_eq(CTL(&d, NULL, &err, "get", "a", "-o", npy), 0,
			     "%s %s: %s", cases[i].dtype, cases[i].shape, err);
		free(err);
		struct run to = {.in_fd = -1, .err_fd = 0};

		to.out_fd = open(stdout_npy, O_WRONLY | O_CREAT | O_TRUNC,
				 0644);
		cr_assert(to.out_fd >= 0);
		cr_expect_eq(CTL_R(&d, &to, NULL, NULL, "get", "a", "--format",
				   "npy", "-o", "-"),
			     0);
		close(to.out_fd);
		expect_same_files(npy, stdout_npy);
		cr_assert_eq(CTL(&d, NULL, &err, "put", "b", npy), 0, "%s",
			     err);
		free(err);
		cr_assert_eq(CTL(&d, &out, NULL, "get", "b", "--json", "-o",
				 back),
			     0);
		expect_same_files(raw, back);
		cr_expect(strstr(out, cases[i].dtype), "%s", out);
		free(out);
	}
	tu_daemon_stop(&d, false);
}

/* What np.save wrote, put, comes back raw as numpy's own bytes in host
 * order: '<f4', '>f4' (swapped on put), a 0-d '|u1', '<i2' by stdin. */
Test(tensorctl, npy_from_numpy_put_gives_its_values_in_host_order)
{
	struct tu_daemon d;
	char npy[160], raw[160], back[160], *out, *err;
	static const char *const names[] = {"le", "be", "u1", "i2"};

	tu_daemon_start(&d, "error");
	numpy_run(&d,
		  "import numpy as np\n"
		  "a = np.arange(6, dtype='<f4').reshape(2, 3) / 7\n"
		  "np.save('%D/le.npy', a); a.tofile('%D/le.raw')\n"
		  "np.save('%D/be.npy', a.astype('>f4')); a.tofile('%D/be.raw')\n"
		  "b = np.array(200, dtype=np.uint8)\n"
		  "np.save('%D/u1.npy', b); b.tofile('%D/u1.raw')\n"
		  "c = np.arange(-3, 9, dtype='<i2').reshape(2, 2, 3)\n"
		  "np.save('%D/i2.npy', c); c.tofile('%D/i2.raw')\n",
		  NULL);
	for (size_t i = 0; i < 4; i++) {
		path_in(npy, sizeof(npy), &d, names[i]);
		strcat(npy, ".npy");
		path_in(raw, sizeof(raw), &d, names[i]);
		strcat(raw, ".raw");
		path_in(back, sizeof(back), &d, "back.bin");
		if (i == 3) {
			struct run from = {.out_fd = -1};

			from.in_fd = open(npy, O_RDONLY);
			cr_assert(from.in_fd >= 0);
			cr_assert_eq(CTL_R(&d, &from, NULL, &err, "put",
					   names[i], "--format", "npy", "-"),
				     0, "%s", err);
			close(from.in_fd);
		} else {
			cr_assert_eq(CTL(&d, NULL, &err, "put", names[i], npy),
				     0, "%s", err);
		}
		free(err);
		cr_assert_eq(CTL(&d, NULL, NULL, "get", names[i], "-o", back),
			     0);
		expect_same_files(raw, back);
	}
	cr_assert_eq(CTL(&d, &out, NULL, "get", "be", "--json", "-o", back),
		     0);
	cr_expect(strstr(out, "\"dtype\":\"f32\",\"shape\":[2,3]"), "%s", out);
	free(out);
	cr_assert_eq(CTL(&d, &out, NULL, "get", "u1", "--json", "-o", back),
		     0);
	cr_expect(strstr(out, "\"dtype\":\"u8\",\"shape\":[]"), "%s", out);
	free(out);
	tu_daemon_stop(&d, false);
}

/* get -o X.npy: np.load reads dtype, shape and values, and the file is
 * byte for byte what np.save writes for the same array. */
Test(tensorctl, npy_get_is_what_numpy_loads_and_saves)
{
	struct tu_daemon d;
	char raw[160], npy[160], *err, *out;
	uint8_t b[24];
	float f[6];

	tu_daemon_start(&d, "error");
	for (int i = 0; i < 6; i++)
		f[i] = (float)i * 1.5f - 2.0f;
	path_in(raw, sizeof(raw), &d, "in.bin");
	write_file(raw, f, sizeof(f));
	cr_assert_eq(CTL(&d, NULL, &err, "put", "f", "--dtype", "f32",
			 "--shape", "3,2", raw),
		     0, "%s", err);
	free(err);
	for (int i = 0; i < 24; i++)
		b[i] = (uint8_t)(i * 11);
	write_file(raw, b, 24);
	cr_assert_eq(CTL(&d, NULL, &err, "put", "u", "--dtype", "u8",
			 "--shape", "2,3,4", raw),
		     0, "%s", err);
	free(err);
	cr_assert_eq(CTL(&d, NULL, &err, "put", "z", "--dtype", "i16",
			 "--shape", "", raw),
		     1);
	free(err);
	write_file(raw, "\x01\x80", 2);
	cr_assert_eq(CTL(&d, NULL, &err, "put", "z", "--dtype", "i16",
			 "--shape", "", raw),
		     0, "%s", err);
	free(err);
	path_in(npy, sizeof(npy), &d, "f.npy");
	cr_assert_eq(CTL(&d, NULL, NULL, "get", "f", "-o", npy), 0);
	path_in(npy, sizeof(npy), &d, "u.npy");
	cr_assert_eq(CTL(&d, NULL, NULL, "get", "u", "-o", npy), 0);
	path_in(npy, sizeof(npy), &d, "z.npy");
	cr_assert_eq(CTL(&d, NULL, NULL, "get", "z", "-o", npy), 0);
	numpy_run(&d,
		  "import numpy as np\n"
		  "f = np.load('%D/f.npy')\n"
		  "assert f.dtype == np.float32 and f.shape == (3, 2), f\n"
		  "want = (np.arange(6, dtype='f4') * 1.5 - 2).reshape(3, 2)\n"
		  "assert (f == want).all(), f\n"
		  "np.save('%D/f-ref.npy', want)\n"
		  "u = np.load('%D/u.npy')\n"
		  "assert u.dtype == np.uint8 and u.shape == (2, 3, 4), u\n"
		  "want = (np.arange(24) * 11).astype('u1').reshape(2, 3, 4)\n"
		  "assert (u == want).all(), u\n"
		  "np.save('%D/u-ref.npy', want)\n"
		  "z = np.load('%D/z.npy')\n"
		  "assert z.dtype == np.int16 and z.shape == () and z == -32767\n"
		  "np.save('%D/z-ref.npy', np.int16(-32767))\n"
		  "print('ok')\n",
		  &out);
	cr_expect_str_eq(out, "ok\n");
	free(out);
	for (int i = 0; i < 3; i++) {
		char ref[160];

		path_in(npy, sizeof(npy), &d, (const char *[]){"f.npy", "u.npy",
							       "z.npy"}[i]);
		path_in(ref, sizeof(ref), &d,
			(const char *[]){"f-ref.npy", "u-ref.npy",
					 "z-ref.npy"}[i]);
		expect_same_files(npy, ref);
	}
	tu_daemon_stop(&d, false);
}

/* Run put NAME FILE (more args after), expect exit 1 and want in err. */
static void put_refused(const struct tu_daemon *d, const char *file,
			const char *a1, const char *a2, const char *want)
{
	char path[160], *err;
	int rc;

	path_in(path, sizeof(path), d, file);
	rc = a1 ? CTL(d, NULL, &err, "put", "r", path, a1, a2)
		: CTL(d, NULL, &err, "put", "r", path);
	cr_expect_eq(rc, 1, "put %s: %d (%s)", file, rc, err);
	cr_expect(strstr(err, want), "put %s: '%s' lacks '%s'", file, err,
		  want);
	free(err);
}

/* What put refuses of a .npy says why, with exit status 1; nothing is
 * published. What get cannot write as .npy is refused too. */
Test(tensorctl, npy_refusals_say_why)
{
	struct tu_daemon d;
	char path[160], *err;
	uint8_t *b;
	size_t n;

	tu_daemon_start(&d, "error");
	numpy_run(&d,
		  "import numpy as np\n"
		  "a = np.zeros((2, 3), dtype='<f4')\n"
		  "np.save('%D/ok.npy', a)\n"
		  "np.save('%D/fortran.npy', np.asfortranarray(a))\n"
		  "np.save('%D/struct.npy', np.zeros(3, dtype=[('x', '<f4')]))\n"
		  "np.save('%D/bool.npy', np.zeros(3, dtype=bool))\n"
		  "np.save('%D/obj.npy', np.array([None]), allow_pickle=True)\n",
		  NULL);
	put_refused(&d, "fortran.npy", NULL, NULL,
		    "fortran_order arrays: save with np.ascontiguousarray");
	put_refused(&d, "struct.npy", NULL, NULL, "structured dtypes");
	put_refused(&d, "bool.npy", NULL, NULL, "no tensord equivalent");
	put_refused(&d, "obj.npy", NULL, NULL, "object arrays");
	put_refused(&d, "ok.npy", "--dtype", "f64",
		    "--dtype f64 does not match");
	put_refused(&d, "ok.npy", "--shape", "3,2",
		    "--shape 3,2 does not match");
	path_in(path, sizeof(path), &d, "ok.npy");
	b = tu_read_file(path, &n);
	cr_assert_eq(n, 128 + 24);
	path_in(path, sizeof(path), &d, "cut.npy");
	write_file(path, b, 60);
	put_refused(&d, "cut.npy", NULL, NULL, ".npy header: header cut short");
	path_in(path, sizeof(path), &d, "short.npy");
	write_file(path, b, n - 1);
	put_refused(&d, "short.npy", NULL, NULL,
		    "has 23 bytes of data after its .npy header, shape 2,3 of "
		    "f32 needs 24");
	path_in(path, sizeof(path), &d, "long.npy");
	b = realloc(b, n + 1);
	cr_assert(b);
	b[n] = 0;
	write_file(path, b, n + 1);
	put_refused(&d, "long.npy", NULL, NULL,
		    "has 25 bytes of data after its .npy header");
	path_in(path, sizeof(path), &d, "magic.npy");
	b[1] = 'X';
	write_file(path, b, n);
	/* no backslash in the reason: stderr doubles one (tctl_say) */
	put_refused(&d, "magic.npy", NULL, NULL,
		    "does not start with 0x93 NUMPY");
	/* --format raw keeps a .npy name raw: 152 bytes of u8 */
	cr_expect_eq(CTL(&d, NULL, &err, "put", "r", path, "--format", "raw"),
		     2);
	cr_expect(strstr(err, "--dtype and --shape are required"), "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "put", "r", path, "--format", "raw",
			 "--dtype", "u8", "--shape", "152"),
		     0, "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "put", "x", path, "--format", "zip"),
		     2);
	cr_expect(strstr(err, "bad --format 'zip' (valid: raw, npy)"), "%s",
		  err);
	free(err);
	free(b);
	cr_expect(!exists(&d, "x"));
	tu_daemon_stop(&d, false);
}

/* Two tensors no .npy, .tgm or .hrry file holds: "q" quantized, "s" of
 * padded rows (2 x 3 u8, row stride 4). */
static void put_quantized_and_strided(const struct tu_daemon *d)
{
	uint64_t shape[2] = {2, 3};
	int64_t strides[2] = {4, 1};
	float scale = 0.5f;
	uint8_t buf[8] = {0};
	struct td_publish q = {.name = "q", .dtype = TD_TENSOR_U8, .ndim = 2,
			       .shape = shape, .quant_axis = -1,
			       .quant_scale_count = 1, .quant_scales = &scale};
	struct td_publish s = {.name = "s", .dtype = TD_TENSOR_U8, .ndim = 2,
			       .shape = shape, .strides = strides};
	struct td_error e = {0};
	struct td_client *c;

	cr_assert_eq(td_client_connect(d->sock, &c, NULL), 0);
	cr_assert_eq(td_client_put(c, &q, buf, 6, NULL, &e), 0, "%s",
		     e.reason);
	cr_assert_eq(td_client_put(c, &s, buf, 8, NULL, &e), 0, "%s",
		     e.reason);
	td_client_close(c);
}

Test(tensorctl, npy_get_refuses_what_a_npy_cannot_hold)
{
	struct tu_daemon d;
	char path[160], *err;

	tu_daemon_start(&d, "error");
	put_quantized_and_strided(&d);
	path_in(path, sizeof(path), &d, "out.npy");
	cr_expect_eq(CTL(&d, NULL, &err, "get", "q", "-o", path), 1);
	cr_expect(strstr(err, "q: cannot be a .npy file: it is quantized"),
		  "%s", err);
	free(err);
	cr_expect_eq(CTL(&d, NULL, &err, "get", "s", "-o", path), 1);
	cr_expect(strstr(err, "s: cannot be a .npy file: its strides"), "%s",
		  err);
	free(err);
	cr_expect_neq(access(path, F_OK), 0, "nothing written");
	/* raw by --format raw, whatever the name */
	cr_expect_eq(CTL(&d, NULL, &err, "get", "s", "--format", "raw", "-o",
			 path),
		     0, "%s", err);
	free(err);
	tu_daemon_stop(&d, false);
}

/* A tensor deleted between the LIST and its GET in a command over every
 * tensor (save, zarr export) is left out, said on stderr, and the rest is
 * written: the whole command failed ("gone: no tensor named"), so a
 * backup of a store whose names come and go failed at random. A name
 * given on the command line is still all or nothing. */
Test(tensorctl, a_tensor_deleted_since_the_list_is_left_out)
{
	static const char *const outs[] = {"all.tgm", "all.hrry", "z"};
	struct tu_daemon d;
	char path[160], file[200], *out, *err;

	start(&d);
	for (size_t i = 0; i < 3; i++) {
		int rc;

		put_zeros(&d, "gone", 64);
		put_zeros(&d, "kept", 64);
		path_in(path, sizeof(path), &d, outs[i]);
		tu_shim_on("TD_DELETE_AFTER_LIST", "gone");
		rc = i < 2 ? CTL(&d, &out, &err, "save", "-o", path)
			   : CTL(&d, &out, &err, "zarr", "export", path);
		tu_shim_off("TD_DELETE_AFTER_LIST");
		cr_expect_eq(rc, 0, "%s: %s", outs[i], err);
		cr_expect(strstr(err, "gone was deleted since the list: "
				      "left out"),
			  "%s: %s", outs[i], err);
		cr_expect(!exists(&d, "gone"), "the shim deleted it");
		free(out);
		free(err);
		if (i == 2)
			break;
		/* what was written is the rest, whole */
		snprintf(file, sizeof(file), "L%zu/", i);
		cr_expect_eq(CTL(&d, NULL, &err, "load", path, "--prefix",
				 file),
			     0, "%s", err);
		free(err);
		snprintf(file, sizeof(file), "L%zu/kept", i);
		cr_expect(exists(&d, file), "%s", file);
		snprintf(file, sizeof(file), "L%zu/t", i);
		cr_expect(exists(&d, file), "%s", file);
		snprintf(file, sizeof(file), "L%zu/gone", i);
		cr_expect(!exists(&d, file), "%s", file);
	}
	snprintf(file, sizeof(file), "%s/kept/zarr.json", path);
	cr_expect_eq(access(file, F_OK), 0, "%s", file);
	snprintf(file, sizeof(file), "%s/gone", path);
	cr_expect_eq(access(file, F_OK), -1, "%s", file);
	/* named, it is a refusal as before */
	path_in(path, sizeof(path), &d, "named.tgm");
	cr_expect_eq(CTL(&d, NULL, &err, "save", "-o", path, "kept", "gone"),
		     1);
	cr_expect(strstr(err, "gone: "), "%s", err);
	cr_expect(!strstr(err, "left out"), "%s", err);
	free(err);
	tu_daemon_stop(&d, false);
}

/* --skip-unsavable: a tensor the file cannot hold (quantized, strided) is
 * left out, said on stderr, and the rest is saved, for both formats;
 * without it the save fails naming it (a store with one camera frame of
 * two planes could not be saved at all without listing every other
 * name). */
Test(tensorctl, save_skip_unsavable_leaves_out_what_the_file_cannot_hold)
{
	static const char *const outs[] = {"s.tgm", "s.hrry"};
	struct tu_daemon d;
	char path[160], name[64], *out, *err;

	start(&d);
	put_quantized_and_strided(&d);
	for (size_t i = 0; i < 2; i++) {
		path_in(path, sizeof(path), &d, outs[i]);
		cr_expect_eq(CTL(&d, NULL, &err, "save", "-o", path), 1);
		cr_expect(strstr(err, ": cannot be saved: "), "%s", err);
		free(err);
		cr_expect_eq(CTL(&d, &out, &err, "save", "-o", path,
				 "--skip-unsavable"),
			     0, "%s: %s", outs[i], err);
		/* t, and for the second the L0/t the first loaded */
		cr_expect(strstr(out, i ? ": 2 tensor(s)" : ": 1 object(s)"),
			  "%s", out);
		cr_expect(strstr(err, "q cannot be saved (it is quantized"),
			  "%s", err);
		cr_expect(strstr(err, "s cannot be saved (its strides"), "%s",
			  err);
		free(out);
		free(err);
		snprintf(name, sizeof(name), "L%zu/", i);
		cr_expect_eq(CTL(&d, NULL, &err, "load", path, "--prefix",
				 name),
			     0, "%s", err);
		free(err);
		snprintf(name, sizeof(name), "L%zu/t", i);
		cr_expect(exists(&d, name), "%s", name);
		snprintf(name, sizeof(name), "L%zu/q", i);
		cr_expect(!exists(&d, name), "%s", name);
		/* named, and nothing else left: nothing to save */
		cr_expect_eq(CTL(&d, NULL, &err, "save", "-o", path, "q",
				 "--skip-unsavable"),
			     i ? 0 : 1, "%s", err);
		free(err);
	}
	tu_daemon_stop(&d, false);
}

/* inspect knows a .npy file by its magic (it read it as a blob and said
 * "unknown required_mask bit set"): the header, and whether the data
 * after it is whole; a file cut short is status 1. */
Test(tensorctl, npy_inspect_says_the_header_and_whether_the_data_is_whole)
{
	struct tu_daemon d;
	char path[160], cut[160], sh[512], *out;
	size_t n;
	uint8_t *b;

	start(&d);
	numpy_run(&d, "import numpy as np; "
		      "np.save('%D/a.npy', np.arange(12, dtype='>f8')"
		      ".reshape(3, 4)); np.save('%D/s.npy', np.uint8(7))",
		  NULL);
	path_in(path, sizeof(path), &d, "a.npy");
	cr_expect_eq(CTL(&d, &out, NULL, "inspect", path), 0);
	cr_expect(strstr(out, "a.npy: NumPy .npy 1.0, >f8 (f64) (3,4), C "
			      "order, data @128+96: ok\n"),
		  "%s", out);
	free(out);
	cr_expect_eq(CTL(&d, &out, NULL, "inspect", path, "--json"), 0);
	cr_expect_str_eq(out, "{\"kind\":\"npy\",\"version\":\"1.0\","
			      "\"descr\":\">f8\",\"dtype\":\"f64\","
			      "\"shape\":[3,4],\"data_offset\":128,"
			      "\"data_length\":96,\"status\":\"ok\"}\n");
	free(out);
	/* a stream, read whole: the same */
	snprintf(sh, sizeof(sh), "'%s' inspect - < '%s'",
		 getenv("TD_TENSORCTL"), path);
	{
		char *argv[] = {"/bin/sh", "-c", sh, NULL};

		cr_expect_eq(tu_run_capture(argv, &out), 0);
		cr_expect(strstr(out, "-: NumPy .npy 1.0, >f8 (f64) (3,4)"),
			  "%s", out);
		free(out);
	}
	/* cut in its data: said, and status 1 */
	b = tu_read_file(path, &n);
	path_in(cut, sizeof(cut), &d, "cut.npy");
	write_file(cut, b, 150);
	free(b);
	cr_expect_eq(CTL(&d, &out, NULL, "inspect", cut), 1);
	cr_expect(strstr(out, "data @128+96: short: 22 bytes follow the "
			      "header"),
		  "%s", out);
	free(out);
	path_in(path, sizeof(path), &d, "s.npy");
	cr_expect_eq(CTL(&d, &out, NULL, "inspect", path), 0);
	cr_expect(strstr(out, "|u1 (u8) (), C order, data @128+1: ok"), "%s",
		  out);
	free(out);
	tu_daemon_stop(&d, false);
}

/*
 * Ctrl-C in the middle of a command that publishes several tensors (load
 * of a .tgm or Hurray file, zarr import): the shim raises SIGINT just
 * after the first of two publishes returns. It killed tensorctl there,
 * the first tensor left published although the command is all or
 * nothing and nothing was said. It now stops between the two, deletes
 * what it published, says so and dies of the signal; with --partial
 * --json the one error document lists what it kept.
 */
static int publish_interrupted(const struct tu_daemon *d, char **out,
			       char **err, const char *const *argv)
{
	char spec[32];
	int rc;

	snprintf(spec, sizeof(spec), "%d:1", SIGINT);
	tu_shim_on("TD_RAISE_AFTER_PUBLISH", spec);
	rc = ctl_run(d, NULL, out, err, argv);
	tu_shim_off("TD_RAISE_AFTER_PUBLISH");
	return rc;
}

/* "t" and "u" of d saved as path (a .tgm or .hrry by its name) */
static void save_two(struct tu_daemon *d, char *path, size_t len,
		     const char *file)
{
	char *err;

	put_zeros(d, "u", 4096);
	path_in(path, len, d, file);
	cr_assert_eq(CTL(d, NULL, &err, "save", "t", "u", "-o", path), 0,
		     "%s", err);
	free(err);
}

static void interrupted_load(const char *file, const char *said)
{
	struct tu_daemon d;
	char path[160], *out, *err;
	int rc;

	start(&d);
	save_two(&d, path, sizeof(path), file);
	rc = publish_interrupted(
		&d, &out, &err,
		(const char *const[]){"load", path, "--prefix", "L/", NULL});
	cr_expect_eq(rc, 128 + SIGINT, "exit %d: %s", rc, err);
	cr_expect(strstr(err, "interrupted by signal 2"), "%s", err);
	cr_expect(strstr(err, said), "%s", err);
	cr_expect(!exists(&d, "L/t") && !exists(&d, "L/u"),
		  "a tensor outlived the interrupted load");
	free(out);
	free(err);
	/* --partial keeps the first; --json says so in its one document */
	rc = publish_interrupted(
		&d, &out, &err,
		(const char *const[]){"load", path, "--prefix", "P/",
				      "--partial", "--json", NULL});
	cr_expect_eq(rc, 128 + SIGINT, "exit %d: %s", rc, err);
	cr_expect(strstr(out, "{\"error\":{\"kind\":\"interrupted\","
			      "\"errno\":4,"),
		  "%s", out);
	cr_expect(strstr(out, "\"published\":[{\"name\":\"P/t\""), "%s",
		  out);
	cr_expect_eq(strchr(out, '\n') - out + 1, (long)strlen(out),
		     "not one JSON line: %s", out);
	cr_expect(exists(&d, "P/t") && !exists(&d, "P/u"));
	free(out);
	free(err);
	tu_daemon_stop(&d, false);
}

Test(tensorctl, sigint_during_a_tgm_load_rolls_back)
{
	interrupted_load("two.tgm", "1 of 2 object(s) published before "
				    "this failure; 1 deleted again");
}

Test(tensorctl, sigint_during_a_hrry_load_rolls_back)
{
	interrupted_load("two.hrry", "1 tensor(s) published before the "
				     "failure, 1 removed again");
}

Test(tensorctl, sigint_during_a_zarr_import_rolls_back)
{
	struct tu_daemon d;
	char dir[160], *out, *err;
	int rc;

	start(&d);
	put_zeros(&d, "u", 4096);
	path_in(dir, sizeof(dir), &d, "two.zarr");
	cr_assert_eq(CTL(&d, NULL, &err, "zarr", "export", dir, "t", "u"), 0,
		     "%s", err);
	free(err);
	rc = publish_interrupted(
		&d, &out, &err,
		(const char *const[]){"zarr", "import", dir, "--prefix", "Z/",
				      NULL});
	cr_expect_eq(rc, 128 + SIGINT, "exit %d: %s", rc, err);
	cr_expect(strstr(err, "interrupted by signal 2"), "%s", err);
	cr_expect(strstr(err, "1 array(s) published before this failure; "
			      "1 deleted again"),
		  "%s", err);
	cr_expect(!exists(&d, "Z/t") && !exists(&d, "Z/u"),
		  "an array outlived the interrupted import");
	free(out);
	free(err);
	tu_daemon_stop(&d, false);
}

/* a size with junk before its digits was read by strtoull: " -1" as
 * 16 EiB (no limit), "+5" and " 5" as 5 */
Test(tensorctl, max_bytes_takes_digits_only)
{
	static const char *const bad[] = {" -1", "+5", " 5", "-1", "1e3",
					  "0x10", "1k", ""};
	struct tu_daemon d;
	char *out;

	start(&d);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_expect_eq(CTL(&d, &out, NULL, "--json", "inspect",
				 "--max-bytes", bad[i], "-"),
			     2, "--max-bytes '%s' taken", bad[i]);
		cr_expect(strstr(out, "\"kind\":\"usage\""), "%s", out);
		free(out);
	}
	tu_daemon_stop(&d, false);
}

/*
 * The daemon gone part-way (stopped, restarted, crashed) is no refusal:
 * a watch that lost its connection said kind "daemon", as if the daemon
 * had said no, where a script looks for "connect" to know it should
 * start one or wait. It is "connect" now, and says what happened.
 */
Test(tensorctl, a_daemon_gone_part_way_is_kind_connect)
{
	struct tu_daemon d;
	char *got[1] = {NULL};
	int p[2], st;
	pid_t pid;

	start(&d);
	cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
	pid = tu_fork();
	if (pid == 0) {
		dup2(p[1], 1);
		execl(ctl_bin(), ctl_bin(), "--socket", d.sock, "--json",
		      "watch", "w", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	/* the watch is in place once the daemon counts it */
	for (int i = 0, in_place = 0; !in_place; i++) {
		char *out;

		cr_assert_lt(i, 2000, "the watch never came");
		cr_assert_eq(CTL(&d, &out, NULL, "status", "--json"), 0);
		in_place = strstr(out, "\"watches\":1") != NULL;
		free(out);
		usleep(10000);
	}
	tu_daemon_kill(&d);
	st = tu_collect(pid, 1, (int[]){p[0]}, got, TU_WAIT_S, "watch");
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %#x", st);
	cr_expect(strstr(got[0], "{\"error\":{\"kind\":\"connect\","
				 "\"errno\":104,"),
		  "%s", got[0]);
	cr_expect(strstr(got[0], "the daemon closed the connection"), "%s",
		  got[0]);
	free(got[0]);
}

/*
 * load chose a Hurray file by the first word not starting with '-':
 * with an option before the file (`load --prefix P/ FILE.hrry`, which the
 * docs allow) that was the option's value, so the file was read as a
 * .tgm ("no complete .tgm message found"). Option values are stepped
 * over now, abbreviations and "--" included.
 */
Test(tensorctl, load_finds_a_hurray_file_after_options)
{
	struct tu_daemon d;
	char hrry[160], bin[160], *err;
	int rc;

	start(&d);
	save_two(&d, hrry, sizeof(hrry), "two.hrry");
	path_in(bin, sizeof(bin), &d, "two.bin");
	cr_assert_eq(CTL(&d, NULL, &err, "save", "t", "-o", bin, "--format",
			 "hrry"),
		     0, "%s", err);
	free(err);
	rc = CTL(&d, NULL, &err, "load", "--prefix", "A/", hrry);
	cr_expect_eq(rc, 0, "%s", err);
	free(err);
	/* by its magic, and an abbreviated option */
	rc = CTL(&d, NULL, &err, "load", "--pre", "B/", "--max-bytes", "1M",
		 bin);
	cr_expect_eq(rc, 0, "%s", err);
	free(err);
	rc = CTL(&d, NULL, &err, "load", "--prefix", "C/", "--", bin);
	cr_expect_eq(rc, 0, "%s", err);
	free(err);
	cr_expect(exists(&d, "A/t") && exists(&d, "A/u"));
	cr_expect(exists(&d, "B/t") && exists(&d, "C/t"));
	tu_daemon_stop(&d, false);
}

/*
 * "--json" anywhere on the line made the results JSON, as the value of
 * an option too: `put x --meta --json F` stored the metadata "--json"
 * and printed JSON that nobody asked for, which a script reading the
 * text then misread. Only the option makes results JSON now; errors
 * stay JSON whenever the word is there (a usage error may come before
 * getopt reaches it).
 */
Test(tensorctl, json_as_an_option_value_is_no_json_option)
{
	struct tu_daemon d;
	char in[160], *out, *err;

	start(&d);
	path_in(in, sizeof(in), &d, "six.bin");
	write_file(in, "abcdef", 6);
	cr_assert_eq(CTL(&d, &out, &err, "put", "m", "--meta", "--json",
			 "--dtype", "u8", "--shape", "6", in),
		     0, "%s", err);
	cr_expect_str_eq(out, "m version 2\n");
	free(out);
	free(err);
	cr_assert_eq(CTL(&d, &out, NULL, "stat", "m"), 0);
	cr_expect(strstr(out, "  metadata (6 B): --json\n"), "%s", out);
	free(out);
	/* a usage error before getopt reached --json: still JSON */
	cr_expect_eq(CTL(&d, &out, NULL, "put", "--bogus", "--json"), 2);
	cr_expect(!strncmp(out, "{\"error\":{\"kind\":\"usage\"", 24), "%s",
		  out);
	free(out);
	tu_daemon_stop(&d, false);
}

/* ---- load - of a Hurray stream: spooled to $TMPDIR, not held ---- */

/* Byte k of a pattern tensor: distinct across seeds and offsets. */
static uint8_t pattern(unsigned seed, uint64_t k)
{
	return (uint8_t)((k * 31 + (k >> 12) + seed * 101) & 0xff);
}

static void put_pattern(const struct tu_daemon *d, const char *name,
			unsigned seed, uint64_t bytes)
{
	uint8_t *b = malloc(bytes);
	struct td_publish p = {.name = name, .dtype = TD_TENSOR_U8,
			       .ndim = 1, .shape = &bytes};
	struct td_error e = {0};
	struct td_client *c;

	cr_assert(b);
	for (uint64_t k = 0; k < bytes; k++)
		b[k] = pattern(seed, k);
	cr_assert_eq(td_client_connect(d->sock, &c, NULL), 0);
	cr_assert_eq(td_client_put(c, &p, b, bytes, NULL, &e), 0, "%s",
		     e.reason);
	td_client_close(c);
	free(b);
}

/* name holds the pattern of seed, bytes bytes. */
static bool holds_pattern(const struct tu_daemon *d, const char *name,
			  unsigned seed, uint64_t bytes)
{
	struct td_client *c;
	struct td_tensor *t;
	const uint8_t *b;
	bool ok;

	cr_assert_eq(td_client_connect(d->sock, &c, NULL), 0);
	if (td_client_get(c, name, &t, NULL) < 0) {
		td_client_close(c);
		return false;
	}
	b = td_tensor_plane_data(t, 0);
	ok = td_tensor_bytes(t) == bytes;
	for (uint64_t k = 0; ok && k < bytes; k++)
		ok = b[k] == pattern(seed, k);
	td_tensor_release(t);
	td_client_close(c);
	return ok;
}

/* Entries of dir but . and .. */
static int dir_entries(const char *dir)
{
	DIR *dd = opendir(dir);
	struct dirent *de;
	int n = 0;

	cr_assert(dd, "%s: %s", dir, strerror(errno));
	while ((de = readdir(dd)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(dd);
	return n;
}

#define SPOOL_N 4
#define SPOOL_BYTES ((uint64_t)16 << 20)

/* A daemon with SPOOL_N patterned tensors saved into path (file, in its
 * folder; the tensors then removed), and TMPDIR set to spool, a new
 * empty folder beside it. */
static void spool_setup(struct tu_daemon *d, char path[160],
			char spool[160], const char *file)
{
	char name[64], *err;

	start(d);
	path_in(path, 160, d, file);
	path_in(spool, 160, d, "spool");
	cr_assert_eq(mkdir(spool, 0700), 0);
	for (unsigned i = 0; i < SPOOL_N; i++) {
		snprintf(name, sizeof(name), "s%u", i);
		put_pattern(d, name, i, SPOOL_BYTES);
	}
	cr_assert_eq(CTL(d, NULL, &err, "save", "-o", path, "s0", "s1", "s2",
			 "s3"),
		     0, "%s", err);
	free(err);
	for (unsigned i = 0; i < SPOOL_N; i++) {
		snprintf(name, sizeof(name), "s%u", i);
		cr_assert_eq(CTL(d, NULL, NULL, "rm", name), 0);
	}
	cr_assert_eq(setenv("TMPDIR", spool, 1), 0);
}

/* spool_setup()'s tensors came back under prefix, and spool is empty. */
static void spool_loaded(struct tu_daemon *d, const char *prefix,
			 const char *spool)
{
	char name[64];

	for (unsigned i = 0; i < SPOOL_N; i++) {
		snprintf(name, sizeof(name), "%ss%u", prefix, i);
		cr_expect(holds_pattern(d, name, i, SPOOL_BYTES),
			  "%s is not the file's", name);
	}
	cr_expect_eq(dir_entries(spool), 0, "the spool was left");
}

/*
 * load - of a Hurray stream read the whole input into memory (up to
 * --max-bytes) before it could parse it from its trailer: a 20 GiB
 * snapshot piped in took 20 GiB. It is now spooled to an unnamed file in
 * $TMPDIR and read from there as a file is: a 64 MiB stream loads under
 * an RLIMIT_DATA of 32 MiB (it failed with ENOMEM), by its magic and by
 * --format hrry alike, the bytes are the file's, and TMPDIR is left
 * empty.
 */
Test(tensorctl, load_of_a_hurray_stream_is_spooled_not_held)
{
	static const char *const prefixes[] = {"m/", "f/"};
	struct tu_daemon d;
	struct run r = {.out_fd = -1};
	char path[160], spool[160], *err;

	spool_setup(&d, path, spool, "big.hrry");
#ifndef __SANITIZE_ADDRESS__ /* its shadow is private memory */
	r.data = 32u << 20;
#endif
	for (int f = 0; f < 2; f++) {
		r.in_fd = open(path, O_RDONLY | O_CLOEXEC);
		cr_assert(r.in_fd >= 0);
		cr_expect_eq(f ? CTL_R(&d, &r, NULL, &err, "load", "--format",
				       "hrry", "--prefix", prefixes[f], "-")
			       : CTL_R(&d, &r, NULL, &err, "load", "--prefix",
				       prefixes[f], "-"),
			     0, "%s: %s", prefixes[f], err);
		free(err);
		close(r.in_fd);
		spool_loaded(&d, prefixes[f], spool);
	}
	unsetenv("TMPDIR");
	unlink(path);
	rmdir(spool);
	tu_daemon_stop(&d, false);
}

/* A 256 KiB tmpfs at mnt ("small" in d's folder), in a private mount
 * namespace; where none can be made (root needed) the files are removed,
 * the daemon stopped and the test skipped. */
static void small_tmpfs(struct tu_daemon *d, char mnt[160],
			const char *const *files)
{
	int err;

	path_in(mnt, 160, d, "small");
	cr_assert_eq(mkdir(mnt, 0755), 0);
	if ((err = -tu_private_tmpfs(mnt, "size=256k")) > 0) {
		rmdir(mnt);
		for (; *files; files++)
			unlink(*files);
		tu_daemon_stop(d, false);
		cr_skip_test("kernel feature missing: a mount namespace with "
			     "a tmpfs (%s; root needed): ENOSPC not checked",
			     strerror(err));
	}
}

/* tensorctl args (reading stdin) < path with TMPDIR tmp as r says: exit
 * 1, err has want (and names TMPDIR). */
static void spool_refused_by(struct tu_daemon *d, struct run *r,
			     const char *path, const char *tmp,
			     const char *want, const char *const *args)
{
	char *err;

	cr_assert_eq(setenv("TMPDIR", tmp, 1), 0);
	r->in_fd = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert(r->in_fd >= 0);
	cr_expect_eq(ctl_run(d, r, NULL, &err, args), 1, "%s TMPDIR=%s: %s",
		     args[0], tmp, err);
	cr_expect(strstr(err, "standard input: cannot spool it to TMPDIR") &&
			  strstr(err, tmp) && strstr(err, want),
		  "%s TMPDIR=%s: %s", args[0], tmp, err);
	free(err);
	close(r->in_fd);
	unsetenv("TMPDIR");
}

/* load - < path with TMPDIR tmp as r says: as spool_refused_by(), and
 * nothing under prefix z/ is published. */
static void spool_refused(struct tu_daemon *d, struct run *r,
			  const char *path, const char *tmp, const char *want)
{
	spool_refused_by(d, r, path, tmp, want,
			 (const char *const[]){"load", "--prefix", "z/", "-",
					       NULL});
	cr_expect(!exists(d, "z/big") && !exists(d, "z/t"),
		  "TMPDIR=%s: something was published", tmp);
}

/*
 * A spool that cannot be made or written refuses the load, naming TMPDIR
 * and why (it ignored TMPDIR and held the stream in memory): a TMPDIR
 * that does not exist, one not writable, a file size limit, a full
 * filesystem; nothing is published and nothing is left in TMPDIR.
 */
Test(tensorctl, a_hurray_stream_that_cannot_be_spooled_is_refused)
{
	struct tu_daemon d;
	struct run r = {.out_fd = -1};
	char path[160], tmp[160], mnt[160];

	start(&d);
	put_zeros(&d, "big", 1 << 20);
	path_in(path, sizeof(path), &d, "in.hrry");
	cr_assert_eq(CTL(&d, NULL, NULL, "save", "-o", path, "big", "t"), 0);
	cr_assert_eq(CTL(&d, NULL, NULL, "rm", "big"), 0);

	path_in(tmp, sizeof(tmp), &d, "missing");
	spool_refused(&d, &r, path, tmp, strerror(ENOENT));

	/* not writable: by nobody when we are root (who writes anyway) */
	path_in(tmp, sizeof(tmp), &d, "ro");
	cr_assert_eq(mkdir(tmp, 0555), 0);
	if (getuid() == 0) {
		/* nobody must reach the socket's dir and the input */
		r.uid = NOBODY;
	}
	spool_refused(&d, &r, path, tmp, strerror(EACCES));
	r.uid = 0;
	cr_expect_eq(dir_entries(tmp), 0);
	rmdir(tmp);

	/* past RLIMIT_FSIZE, part way through */
	path_in(tmp, sizeof(tmp), &d, "spool");
	cr_assert_eq(mkdir(tmp, 0700), 0);
	r.fsize = 64 << 10;
	spool_refused(&d, &r, path, tmp, strerror(EFBIG));
	r.fsize = 0;
	cr_expect_eq(dir_entries(tmp), 0, "the spool was left");
	rmdir(tmp);

	/* a full filesystem */
	small_tmpfs(&d, mnt, (const char *const[]){path, NULL});
	spool_refused(&d, &r, path, mnt, strerror(ENOSPC));
	cr_expect_eq(dir_entries(mnt), 0, "the spool was left");
	umount(mnt);
	rmdir(mnt);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/*
 * A corrupt Hurray stream (here its index CRC) fails as the same file
 * does, with the same words, publishes nothing and leaves no spool.
 */
Test(tensorctl, a_corrupt_hurray_stream_fails_as_the_file_does)
{
	struct tu_daemon d;
	struct run r = {.out_fd = -1};
	char path[160], spool[160], *err_file, *err_stdin, *at;
	size_t len;
	uint8_t *b;

	start(&d);
	put_zeros(&d, "big", 1 << 20);
	path_in(path, sizeof(path), &d, "bad.hrry");
	path_in(spool, sizeof(spool), &d, "spool");
	cr_assert_eq(mkdir(spool, 0700), 0);
	cr_assert_eq(CTL(&d, NULL, NULL, "save", "-o", path, "big", "t"), 0);
	b = tu_read_file(path, &len);
	cr_assert(b && len > 40);
	b[len - 40 + 28] ^= 0x5a; /* index_crc32c */
	write_file(path, b, len);
	free(b);
	cr_assert_eq(CTL(&d, NULL, NULL, "rm", "big"), 0);
	cr_assert_eq(CTL(&d, NULL, NULL, "rm", "t"), 0);

	cr_expect_eq(CTL(&d, NULL, &err_file, "load", "--prefix", "z/", path),
		     1, "%s", err_file);
	cr_assert_eq(setenv("TMPDIR", spool, 1), 0);
	r.in_fd = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert(r.in_fd >= 0);
	cr_expect_eq(CTL_R(&d, &r, NULL, &err_stdin, "load", "--prefix", "z/",
			   "-"),
		     1, "%s", err_stdin);
	close(r.in_fd);
	unsetenv("TMPDIR");
	/* the same words after the path ("-" for stdin) */
	at = strstr(err_file, path);
	cr_assert(at, "%s", err_file);
	cr_expect(strstr(err_file, "refused"), "%s", err_file);
	cr_expect(starts(err_stdin, "tensorctl: -: ") &&
			  !strcmp(err_stdin + strlen("tensorctl: -"),
				  at + strlen(path)),
		  "file: %s stdin: %s", err_file, err_stdin);
	free(err_file);
	free(err_stdin);
	cr_expect(!exists(&d, "z/big") && !exists(&d, "z/t"));
	cr_expect_eq(dir_entries(spool), 0, "the spool was left");
	rmdir(spool);
	unlink(path);
	tu_daemon_stop(&d, false);
}

/*
 * load - of a .tgm stream holds a message whole while it checks it
 * (frames, hashes), then copies its objects into the daemon's buffers:
 * a message held on the heap was tensorctl's memory beside the daemon's
 * copy, twice the message at the end. It is now held in a mapped spool
 * file in $TMPDIR (page cache, not heap): a 64 MiB message (four 16 MiB
 * objects) loads under an RLIMIT_DATA of 32 MiB (it failed with ENOMEM),
 * the bytes are the file's; the same message with one byte of an object
 * flipped still fails its hash and publishes nothing; TMPDIR is left
 * empty both times.
 */
Test(tensorctl, load_of_a_tgm_stream_holds_its_message_in_a_spool)
{
	struct tu_daemon d;
	struct run r = {.out_fd = -1};
	char path[160], spool[160], name[64], *err;
	size_t len;
	uint8_t *b;

	spool_setup(&d, path, spool, "big.tgm");
#ifndef __SANITIZE_ADDRESS__ /* its shadow is private memory */
	r.data = 32u << 20;
#endif
	r.in_fd = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert(r.in_fd >= 0);
	cr_expect_eq(CTL_R(&d, &r, NULL, &err, "load", "--prefix", "g/", "-"),
		     0, "%s", err);
	free(err);
	close(r.in_fd);
	spool_loaded(&d, "g/", spool);

	/* a byte of an object's data flipped: its hash fails */
	b = tu_read_file(path, &len);
	cr_assert(b && len > SPOOL_N * SPOOL_BYTES);
	b[len / 2] ^= 0x5a;
	write_file(path, b, len);
	free(b);
	r.in_fd = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert(r.in_fd >= 0);
	cr_expect_eq(CTL_R(&d, &r, NULL, &err, "load", "--prefix", "h/", "-"),
		     1, "%s", err);
	cr_expect(strstr(err, "hash mismatch"), "%s", err);
	free(err);
	close(r.in_fd);
	for (unsigned i = 0; i < SPOOL_N; i++) {
		snprintf(name, sizeof(name), "h/s%u", i);
		cr_expect(!exists(&d, name), "%s was published", name);
	}
	cr_expect_eq(dir_entries(spool), 0, "the spool was left");
	unsetenv("TMPDIR");
	unlink(path);
	rmdir(spool);
	tu_daemon_stop(&d, false);
}

/* ---- inspect - and zarr export --from -: held in the spool too ---- */

/* A spool test's end: TMPDIR unset, the n files at paths and the spool
 * folder removed, the daemon stopped. */
static void spool_done(struct tu_daemon *d, const char *spool,
		       char (*paths)[160], int n)
{
	unsetenv("TMPDIR");
	for (int f = 0; f < n; f++)
		unlink(paths[f]);
	rmdir(spool);
	tu_daemon_stop(d, false);
}

/* The sum, over the files under dir, of a hash of each one's path
 * (relative to dir) and bytes: equal for trees equal file for file. */
static uint64_t tree_sum(const char *dir, const char *rel, unsigned *files)
{
	char at[1024], sub[512];
	DIR *dd;
	struct dirent *de;
	uint64_t sum = 0;

	snprintf(at, sizeof(at), "%s%s%s", dir, *rel ? "/" : "", rel);
	dd = opendir(at);
	cr_assert(dd, "%s: %s", at, strerror(errno));
	while ((de = readdir(dd))) {
		struct stat st;
		uint64_t h = 14695981039346656037ull;
		uint8_t *b;
		size_t len;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "",
			 de->d_name);
		snprintf(at, sizeof(at), "%s/%s", dir, sub);
		cr_assert_eq(lstat(at, &st), 0, "%s", at);
		if (S_ISDIR(st.st_mode)) {
			sum += tree_sum(dir, sub, files);
			continue;
		}
		b = tu_read_file(at, &len);
		cr_assert(b || !len, "%s", at);
		for (const char *c = sub; *c; c++)
			h = (h ^ (uint8_t)*c) * 1099511628211ull;
		for (size_t k = 0; k < len; k++)
			h = (h ^ b[k]) * 1099511628211ull;
		free(b);
		sum += h;
		++*files;
	}
	closedir(dd);
	return sum;
}

/* s with every path in it said as "-" (a malloc'ed copy). */
static char *as_stdin(const char *s, const char *path)
{
	size_t pl = strlen(path);
	char *o = malloc(strlen(s) + 1), *w = o;

	cr_assert(o);
	while (*s) {
		if (!strncmp(s, path, pl)) {
			*w++ = '-';
			s += pl;
		} else {
			*w++ = *s++;
		}
	}
	*w = 0;
	return o;
}

/*
 * tensorctl file_args, then stdin_args with path on stdin as r says: the
 * file's exit status is want, stdin's the same, with the same words on
 * stderr (and stdout, with out_too), the path said as "-" or "standard
 * input"; and spool, TMPDIR, is left empty.
 */
static void as_the_file(const struct tu_daemon *d, struct run *r,
			const char *path, const char *spool, int want,
			const char *const *file_args,
			const char *const *stdin_args, bool out_too)
{
	char *got[2][2], *w;
	int rf, rs;

	rf = ctl_run(d, NULL, &got[0][0], &got[0][1], file_args);
	cr_expect_eq(rf, want, "%s %s: %s", file_args[0], path, got[0][1]);
	r->in_fd = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert(r->in_fd >= 0);
	rs = ctl_run(d, r, &got[1][0], &got[1][1], stdin_args);
	close(r->in_fd);
	cr_expect_eq(rs, rf, "%s - < %s: %s", stdin_args[0], path, got[1][1]);
	for (int k = out_too ? 0 : 1; k < 2; k++) {
		char *ws = as_stdin(got[1][k], "standard input");

		w = as_stdin(got[0][k], path);
		cr_expect_str_eq(ws, w, "%s - < %s", stdin_args[0], path);
		free(w);
		free(ws);
	}
	for (int k = 0; k < 4; k++)
		free(got[k / 2][k % 2]);
	cr_expect_eq(dir_entries(spool), 0, "the spool was left");
}

/* as_the_file() for zarr export DIR --from FILE and --from -, DIR zf<f>
 * and zs<f> in d's folder (written into zf and zs, made here). */
static void zarr_as_the_file(const struct tu_daemon *d, struct run *r,
			     const char *path, const char *spool, int want,
			     int f, char zf[160], char zs[160])
{
	snprintf(zf, 160, "%s/zf%d", d->dir, f);
	snprintf(zs, 160, "%s/zs%d", d->dir, f);
	as_the_file(d, r, path, spool, want,
		    (const char *const[]){"zarr", "export", zf, "--from", path,
					  NULL},
		    (const char *const[]){"zarr", "export", zs, "--from", "-",
					  NULL},
		    false);
}

/*
 * spool_setup()'s 64 MiB Hurray file, the same tensors as one .tgm
 * message (four 16 MiB objects) and 64 MiB that are neither (a blob to
 * inspect): inspect - and zarr export --from - held them on the heap
 * (the Hurray stream and the blob whole, the .tgm message whole) and
 * failed under an RLIMIT_DATA of 32 MiB with ENOMEM. They are now held
 * in a mapped spool in $TMPDIR, as load - holds them: each runs under
 * that limit, says what it says of the file (inspect's report, the
 * blob's refusal) and writes the file's hierarchy, file for file, and
 * TMPDIR is left empty.
 */
Test(tensorctl, inspect_and_zarr_export_of_stdin_are_spooled_not_held)
{
	struct tu_daemon d;
	struct run r = {.out_fd = -1};
	char path[3][160], spool[160], zf[160], zs[160];
	uint8_t *junk;

	spool_setup(&d, path[0], spool, "big.hrry");
	path_in(path[1], sizeof(path[1]), &d, "big.tgm");
	path_in(path[2], sizeof(path[2]), &d, "junk.bin");
	cr_assert_eq(CTL(&d, NULL, NULL, "load", path[0]), 0);
	cr_assert_eq(CTL(&d, NULL, NULL, "save", "-o", path[1], "s0", "s1",
			 "s2", "s3"),
		     0);
	junk = malloc(SPOOL_N * SPOOL_BYTES);
	cr_assert(junk);
	for (uint64_t k = 0; k < SPOOL_N * SPOOL_BYTES; k++)
		junk[k] = pattern(7, k);
	write_file(path[2], junk, SPOOL_N * SPOOL_BYTES);
	free(junk);
#ifndef __SANITIZE_ADDRESS__ /* its shadow is private memory */
	r.data = 32u << 20;
#endif
	for (int f = 0; f < 3; f++)
		as_the_file(&d, &r, path[f], spool, f == 2,
			    (const char *const[]){"inspect", path[f], NULL},
			    (const char *const[]){"inspect", "-", NULL},
			    true);
	for (int f = 0; f < 2; f++) {
		unsigned nf = 0, ns = 0;

		zarr_as_the_file(&d, &r, path[f], spool, 0, f, zf, zs);
		cr_expect_eq(tree_sum(zs, "", &ns), tree_sum(zf, "", &nf),
			     "%s: not as %s", zs, zf);
		cr_expect(nf > SPOOL_N && ns == nf, "%u, %u files", nf, ns);
	}
	spool_done(&d, spool, path, 3);
}

/*
 * What is wrong with a stream is said as for the file, spool or not: a
 * Hurray index whose CRC fails, a .tgm message cut short, one whose data
 * fails its hash, and a blob too short: inspect - and zarr export
 * --from - exit 1 as for the file, with the same words (the path said
 * as "-"), write no folder, and leave no spool.
 */
Test(tensorctl, a_bad_stream_is_refused_by_inspect_and_zarr_export_as_the_file)
{
	static const char *const names[] = {"crc.hrry", "cut.tgm", "hash.tgm",
					    "short.bin"};
	struct tu_daemon d;
	struct run r = {.out_fd = -1};
	char path[4][160], spool[160], zf[160], zs[160];
	size_t len;
	uint8_t *b;

	start(&d);
	put_zeros(&d, "big", 1 << 20);
	path_in(spool, sizeof(spool), &d, "spool");
	cr_assert_eq(mkdir(spool, 0700), 0);
	for (int f = 0; f < 4; f++)
		path_in(path[f], sizeof(path[f]), &d, names[f]);
	cr_assert_eq(CTL(&d, NULL, NULL, "save", "-o", path[0], "big", "t"),
		     0);
	b = tu_read_file(path[0], &len);
	cr_assert(b && len > 40);
	b[len - 40 + 28] ^= 0x5a; /* index_crc32c */
	write_file(path[0], b, len);
	free(b);
	cr_assert_eq(CTL(&d, NULL, NULL, "save", "-o", path[1], "big", "t"),
		     0);
	b = tu_read_file(path[1], &len);
	cr_assert(b && len > (1 << 20));
	write_file(path[1], b, len - 1000);
	b[len / 2] ^= 0x5a; /* inside big's data */
	write_file(path[2], b, len);
	free(b);
	write_file(path[3], "abcdef", 6);

	cr_assert_eq(setenv("TMPDIR", spool, 1), 0);
	for (int f = 0; f < 4; f++) {
		as_the_file(&d, &r, path[f], spool, 1,
			    (const char *const[]){"inspect", path[f], NULL},
			    (const char *const[]){"inspect", "-", NULL},
			    true);
		zarr_as_the_file(&d, &r, path[f], spool, 1, f, zf, zs);
		cr_expect(access(zf, F_OK) < 0 && access(zs, F_OK) < 0,
			  "%s or %s made", zf, zs);
	}
	spool_done(&d, spool, path, 4);
}

/*
 * inspect - and zarr export --from - spool as load - does, and so fail
 * as it does where the spool cannot be made or written (it held them in
 * memory and needed no TMPDIR): a TMPDIR that does not exist, a file
 * size limit, a full filesystem, each naming TMPDIR and why, no folder
 * written, no spool left. --max-bytes bounds the spool: a 64 MiB stream
 * with --max-bytes 1M under an RLIMIT_FSIZE of 2 MiB is refused naming
 * --max-bytes, not the file size limit: the spool never grew past it.
 */
Test(tensorctl, inspect_and_zarr_export_fail_as_load_where_they_cannot_spool)
{
	struct tu_daemon d;
	struct run r = {.out_fd = -1};
	char path[2][160], big[160], spool[160], tmp[160], mnt[160], zs[160];
	char *err;
	const char *const *cmd[2];

	spool_setup(&d, big, spool, "big.tgm");
	put_zeros(&d, "big", 1 << 20);
	path_in(path[0], sizeof(path[0]), &d, "in.hrry");
	path_in(path[1], sizeof(path[1]), &d, "in.tgm");
	path_in(zs, sizeof(zs), &d, "zs");
	cr_assert_eq(CTL(&d, NULL, NULL, "save", "-o", path[0], "big", "t"),
		     0);
	cr_assert_eq(CTL(&d, NULL, NULL, "save", "-o", path[1], "big", "t"),
		     0);
	cmd[0] = (const char *const[]){"inspect", "-", NULL};
	cmd[1] = (const char *const[]){"zarr", "export", zs, "--from", "-",
				       NULL};
	unsetenv("TMPDIR");

	for (int c = 0; c < 2; c++) {
		const char *const maxed[2][8] = {
			{"inspect", "--max-bytes", "1M", "-", NULL},
			{"zarr", "export", zs, "--from", "-", "--max-bytes",
			 "1M", NULL}};

		for (int f = 0; f < 2; f++) {
			path_in(tmp, sizeof(tmp), &d, "missing");
			spool_refused_by(&d, &r, path[f], tmp,
					 strerror(ENOENT), cmd[c]);
			r.fsize = 64 << 10;
			spool_refused_by(&d, &r, path[f], spool,
					 strerror(EFBIG), cmd[c]);
			r.fsize = 0;
			cr_expect_eq(dir_entries(spool), 0,
				     "the spool was left");
			cr_expect_eq(access(zs, F_OK), -1, "%s made", zs);
		}
		/* the spool bounded by --max-bytes */
		r.fsize = 2 << 20;
		cr_assert_eq(setenv("TMPDIR", spool, 1), 0);
		r.in_fd = open(big, O_RDONLY | O_CLOEXEC);
		cr_assert(r.in_fd >= 0);
		cr_expect_eq(ctl_run(&d, &r, NULL, &err, maxed[c]), 1, "%s",
			     err);
		cr_expect(strstr(err, "standard input: more than 1.0 MiB (a "
				      "stream is read up to --max-bytes"),
			  "%s: %s", maxed[c][0], err);
		free(err);
		close(r.in_fd);
		unsetenv("TMPDIR");
		r.fsize = 0;
		cr_expect_eq(dir_entries(spool), 0, "the spool was left");
		cr_expect_eq(access(zs, F_OK), -1, "%s made", zs);
	}

	/* a full filesystem */
	small_tmpfs(&d, mnt, (const char *const[]){path[0], path[1], big,
						  NULL});
	for (int c = 0; c < 2; c++) {
		for (int f = 0; f < 2; f++) {
			spool_refused_by(&d, &r, path[f], mnt,
					 strerror(ENOSPC), cmd[c]);
			cr_expect_eq(dir_entries(mnt), 0,
				     "the spool was left");
			cr_expect_eq(access(zs, F_OK), -1, "%s made", zs);
		}
	}
	umount(mnt);
	rmdir(mnt);
	unlink(big);
	spool_done(&d, spool, path, 2);
}
