/* SPDX-License-Identifier: MIT */
/* Internal to json/. */
#ifndef TD_JSON_JSON_INT_H
#define TD_JSON_JSON_INT_H

#include <json-c/json.h>

/* Compact, and '/' as it is (json-c would write "\/"). */
#define TD_JSON_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

#endif
