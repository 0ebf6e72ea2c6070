/* SPDX-License-Identifier: MIT */
/* JSON printing for the tools and the benchmark: json-c's escaper. */
#include "td-json.h"

#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "json-int.h"

void td_json_str(FILE *f, const char *s, size_t len)
{
	struct json_object *o =
	        len <= INT_MAX ? json_object_new_string_len(s, (int)len) : NULL;
	const char *t;
	size_t n;

	if (!o) {
		/* out of memory (or a string of 2 GiB): say so in-band */
		fputs("null", f);
		return;
	}
	t = json_object_to_json_string_length(o, TD_JSON_FLAGS, &n);
	fwrite(t, 1, n, f);
	json_object_put(o);
}

void td_json_cstr(FILE *f, const char *s)
{
	if (!s)
		fputs("null", f);
	else
		td_json_str(f, s, strlen(s));
}

void td_json_double(FILE *f, double d)
{
	if (!isfinite(d))
		fputs("null", f);
	else
		fprintf(f, "%.17g", d);
}
