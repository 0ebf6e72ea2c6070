/* SPDX-License-Identifier: MIT */
#ifndef TD_TOOLS_TENSORCTL_H
#define TD_TOOLS_TENSORCTL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Exit statuses shared by every subcommand. */
enum {
	TCTL_OK = 0,
	TCTL_REFUSED = 1, /* the input or the daemon refused the request */
	TCTL_USAGE = 2,   /* bad command line or local I/O failure */
};

int cmd_inspect(int argc, char **argv);

/* inspect back ends, chosen by magic; return a TCTL_ status */
int inspect_blob(const uint8_t *buf, size_t len, int json);
int inspect_tgm(const uint8_t *buf, size_t len, int json);
/* 1 when buf is a .tgm file: TENSOGRM magic, or a message after junk */
int inspect_tgm_sniff(const uint8_t *buf, size_t len);

/* Print a decoder refusal: JSON on stdout, or one line on stderr. */
void tctl_print_td_err(const struct td_err *e, int json);

/* Read a whole file ("-" = stdin) into a malloc'ed buffer. 0 or -errno. */
int tctl_read_file(const char *path, uint8_t **buf, size_t *len);

#endif
