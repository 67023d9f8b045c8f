/* Drives the client's JSON writer and reader from stdin, one command a line, for the property
 * and fuzz tests in tests/native/test_c_client_json.py. Arguments and results are hex-encoded bytes.
 *
 *   G <key> <json>   the top-level string field `key` of `json`, or "-"
 *   V <json>         "1" when json is one well-formed value, else "0"
 *   W <string>       {"<string>":"<string>","u":18446744073709551615,"i":-9223372036854775808,
 *                    "a":[[],{}]} as written by the writer, or "-" on overflow
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static size_t unhex(const char *s, char *out) {
  size_t n = 0;
  for (; s[0] && s[1] && s[0] != ' ' && s[0] != '\n'; s += 2) {
    unsigned v;
    if (sscanf(s, "%2x", &v) != 1) break;
    out[n++] = (char)v;
  }
  out[n] = '\0';
  return n;
}

static void put_hex(const char *s, size_t n) {
  for (size_t i = 0; i < n; ++i) printf("%02x", (unsigned char)s[i]);
  printf("\n");
}

int main(void) {
  static char line[1 << 20], a[1 << 19], b[1 << 19], out[4096];
  while (fgets(line, sizeof line, stdin) != NULL) {
    char *arg = line + 2;
    if (line[0] == 'G') {
      unhex(arg, a);
      char *second = strchr(arg, ' ');
      size_t n = second ? unhex(second + 1, b) : 0;
      if (fl_json_get_string(b, n, a, out, sizeof out) == 0) put_hex(out, strlen(out));
      else printf("-\n");
    } else if (line[0] == 'V') {
      size_t n = unhex(arg, a);
      printf("%d\n", fl_json_validate(a, n) == 0);
    } else if (line[0] == 'W') {
      unhex(arg, a);
      fl_json_writer w;
      fl_jw_init(&w, out, sizeof out);
      fl_jw_begin_object(&w);
      fl_jw_key(&w, a);
      fl_jw_string(&w, a);
      fl_jw_key(&w, "u");
      fl_jw_uint(&w, UINT64_MAX);
      fl_jw_key(&w, "i");
      fl_jw_int(&w, INT64_MIN);
      fl_jw_key(&w, "a");
      fl_jw_begin_array(&w);
      fl_jw_begin_array(&w);
      fl_jw_end_array(&w);
      fl_jw_begin_object(&w);
      fl_jw_end_object(&w);
      fl_jw_end_array(&w);
      fl_jw_end_object(&w);
      if (w.overflow) printf("-\n");
      else put_hex(out, w.len);
    }
    fflush(stdout);
  }
  return 0;
}
