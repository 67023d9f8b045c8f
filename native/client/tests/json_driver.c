/* Drives the client's JSON writer and reader from stdin, one command a line, for the property
 * and fuzz tests in tests/native/test_c_client_json.py. Arguments and results are hex-encoded bytes.
 *
 *   G <key> <json>   the top-level string field `key` of `json`, or "-"
 *   V <json>         "1" when json is one well-formed value, else "0"
 *   T <json>         the tree fl_json_parse builds, written back as JSON, or "-" when it fails
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

/* The tree written back as JSON, into tree_text: strings with bytes under 0x20, '"' and '\\'
 * escaped and the rest (UTF-8 included) as is; a wrong member count breaks the JSON. */
static char tree_text[1 << 20];
static size_t tree_len;

static void emit(const char *s) {
  size_t n = strlen(s);
  if (n < sizeof tree_text - tree_len) {
    memcpy(tree_text + tree_len, s, n);
    tree_len += n;
  }
}

static void emit_string(const char *s) {
  emit("\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
    char esc[8] = {(char)*p, 0};
    if (*p < 0x20 || *p == '"' || *p == '\\') snprintf(esc, sizeof esc, "\\u%04x", *p);
    emit(esc);
  }
  emit("\"");
}

static void emit_tree(const fl_jnode *n) {
  char num[32];
  switch (n->type) {
    case FL_JSON_NULL: emit("null"); break;
    case FL_JSON_BOOL: emit(n->boolean ? "true" : "false"); break;
    case FL_JSON_INT:
      snprintf(num, sizeof num, "%lld", (long long)n->integer);
      emit(num);
      break;
    case FL_JSON_STRING: emit_string(n->str); break;
    case FL_JSON_ARRAY:
    case FL_JSON_OBJECT: {
      int object = n->type == FL_JSON_OBJECT;
      size_t count = 0;
      emit(object ? "{" : "[");
      for (const fl_jnode *c = n->child; c != NULL; c = c->next, ++count) {
        if (c != n->child) emit(",");
        if (object) {
          emit_string(c->key);
          emit(":");
        }
        emit_tree(c);
      }
      emit(object ? "}" : "]");
      if (count != n->count) emit(" count mismatch");
      break;
    }
  }
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
    } else if (line[0] == 'T') {
      size_t n = unhex(arg, a);
      fl_jnode *tree = fl_json_parse(a, n);
      tree_len = 0;
      if (tree != NULL) emit_tree(tree);
      if (tree != NULL) put_hex(tree_text, tree_len);
      else printf("-\n");
      fl_json_free(tree);
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
