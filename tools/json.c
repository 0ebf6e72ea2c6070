/* SPDX-License-Identifier: MIT */
#include "json.h"

#include <math.h>
#include <string.h>

void json_str(FILE *f, const char *s, size_t len)
{
	fputc('"', f);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		switch (c) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\r':
			fputs("\\r", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		default:
			if (c < 0x20 || c == 0x7f)
				fprintf(f, "\\u%04x", c);
			else
				fputc(c, f);
		}
	}
	fputc('"', f);
}

void json_cstr(FILE *f, const char *s)
{
	if (!s)
		fputs("null", f);
	else
		json_str(f, s, strlen(s));
}

void json_double(FILE *f, double d)
{
	if (!isfinite(d))
		fputs("null", f);
	else
		fprintf(f, "%.17g", d);
}
