/* SPDX-License-Identifier: MIT */
/* Minimal JSON output helpers for tensorctl --json (output only). */
#ifndef TD_TOOLS_JSON_H
#define TD_TOOLS_JSON_H

#include <stddef.h>
#include <stdio.h>

/* Write s[0, len) as a JSON string literal, escaping as RFC 8259 asks. */
void json_str(FILE *f, const char *s, size_t len);
/* NUL-terminated convenience; NULL prints null. */
void json_cstr(FILE *f, const char *s);
/* A float/double; non-finite values print as null (JSON has no NaN). */
void json_double(FILE *f, double d);

#endif
