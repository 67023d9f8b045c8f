/* Just enough JSON, with no dependency: a writer for control request bodies, and one reader for
 * replies that checks them, pulls top-level string fields ("id", "error") out of them without
 * allocating, or builds the tree the typed getters read (model metadata, the hello reply's
 * capabilities). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- writer ------------------------------------------------------------------------------- */

void fl_jw_init(fl_json_writer *w, char *buf, size_t cap) {
  w->buf = buf;
  w->cap = cap;
  w->len = 0;
  w->overflow = 0;
  w->need_comma = 0;
}

static void put(fl_json_writer *w, const char *s, size_t n) {
  if (w->overflow || n > w->cap - w->len) {
    w->overflow = 1;
    return;
  }
  memcpy(w->buf + w->len, s, n);
  w->len += n;
}

static void putc_(fl_json_writer *w, char c) { put(w, &c, 1); }

static void before_value(fl_json_writer *w) {
  if (w->need_comma) putc_(w, ',');
}

/* Brackets: a container opens like a value (a comma before it when one is due) and, closed,
 * is a value after which a comma is due. */
static void open_(fl_json_writer *w, char bracket) {
  before_value(w);
  putc_(w, bracket);
  w->need_comma = 0;
}

static void close_(fl_json_writer *w, char bracket) {
  putc_(w, bracket);
  w->need_comma = 1;
}

void fl_jw_begin_object(fl_json_writer *w) { open_(w, '{'); }

void fl_jw_end_object(fl_json_writer *w) { close_(w, '}'); }

void fl_jw_begin_array(fl_json_writer *w) { open_(w, '['); }

void fl_jw_end_array(fl_json_writer *w) { close_(w, ']'); }

/* A scalar's text, written whole. */
static void put_value(fl_json_writer *w, const char *text, size_t n) {
  before_value(w);
  put(w, text, n);
  w->need_comma = 1;
}

static void put_string(fl_json_writer *w, const char *s) {
  static const char hex[] = "0123456789abcdef";
  putc_(w, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
    unsigned char c = *p;
    if (c == '"' || c == '\\') {
      char esc[2] = {'\\', (char)c};
      put(w, esc, 2);
    } else if (c < 0x20) {
      char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      put(w, esc, 6);
    } else {
      putc_(w, (char)c);
    }
  }
  putc_(w, '"');
}

void fl_jw_key(fl_json_writer *w, const char *key) {
  before_value(w);
  put_string(w, key);
  putc_(w, ':');
  w->need_comma = 0;
}

void fl_jw_string(fl_json_writer *w, const char *s) {
  before_value(w);
  put_string(w, s);
  w->need_comma = 1;
}

void fl_jw_uint(fl_json_writer *w, uint64_t v) {
  char num[24];
  int n = snprintf(num, sizeof num, "%llu", (unsigned long long)v);
  put_value(w, num, (size_t)n);
}

void fl_jw_bool(fl_json_writer *w, int v) {
  if (v)
    put_value(w, "true", 4);
  else
    put_value(w, "false", 5);
}

void fl_jw_int(fl_json_writer *w, int64_t v) {
  char num[24];
  int n = snprintf(num, sizeof num, "%lld", (long long)v);
  put_value(w, num, (size_t)n);
}

/* ---- reader ------------------------------------------------------------------------------- */

/* Both limits bound the recursion, so a hostile reply cannot exhaust the stack. */
#define CHECK_DEPTH 64 /* containers fl_json_validate and fl_json_get_string nest */
#define TREE_DEPTH 33  /* containers fl_json_parse nests: no reply the getters read comes near */

typedef struct reader {
  const char *p;
  const char *end;
  int max_depth; /* a container at this depth (the top level is 0) is refused */
} reader;

static void skip_ws(reader *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
    ++r->p;
}

static int hex4(const char *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; ++i) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return -1;
  }
  *out = v;
  return 0;
}

/* Appends code point cp as UTF-8 to out (when out is not NULL); -1 when it does not fit. */
static int emit_utf8(unsigned cp, char *out, size_t size, size_t *len) {
  char b[4];
  size_t n;
  if (cp < 0x80) {
    b[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    b[0] = (char)(0xC0 | (cp >> 6));
    b[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    b[0] = (char)(0xE0 | (cp >> 12));
    b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    b[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    b[0] = (char)(0xF0 | (cp >> 18));
    b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  if (out != NULL) {
    if (*len + n >= size) return -1;
    memcpy(out + *len, b, n);
  }
  *len += n;
  return 0;
}

/* Parses a string at r->p (which is '"'); decodes it into out when out is not NULL. Returns 0,
 * -1 on malformed text, -2 when it does not fit in out (the string is still consumed). */
static int parse_string(reader *r, char *out, size_t size) {
  size_t len = 0;
  int overflow = 0;
  ++r->p;
  while (r->p < r->end) {
    unsigned char c = (unsigned char)*r->p++;
    if (c == '"') {
      if (out != NULL) out[len] = '\0';
      return overflow ? -2 : 0;
    }
    if (c < 0x20) return -1;
    unsigned cp = c;
    if (c == '\\') {
      if (r->p >= r->end) return -1;
      char e = *r->p++;
      switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
          if (r->end - r->p < 4 || hex4(r->p, &cp) != 0) return -1;
          r->p += 4;
          if (cp >= 0xD800 && cp < 0xDC00) {
            unsigned lo;
            if (r->end - r->p < 6 || r->p[0] != '\\' || r->p[1] != 'u' ||
                hex4(r->p + 2, &lo) != 0 || lo < 0xDC00 || lo >= 0xE000)
              return -1;
            r->p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return -1;
          }
          break;
        default: return -1;
      }
    }
    int fits;
    if (c != '\\') {  /* a raw byte, copied as is (UTF-8 passes through) */
      fits = out == NULL || len + 1 < size;
      if (fits && out != NULL) out[len] = (char)c;
      if (fits) ++len;
    } else {
      fits = emit_utf8(cp, out, size, &len) == 0;
    }
    if (!fits) {
      overflow = 1;
      if (out != NULL) out[len] = '\0';
      out = NULL;  /* keep consuming, stop writing */
    }
  }
  return -1;
}

/* A string at r->p, checked, then (with out) decoded into a fresh buffer: the decoded text is
 * never longer than the escaped one, so the span between the quotes sizes it. */
static int string_value(reader *r, char **out) {
  reader start = *r;
  if (parse_string(r, NULL, 0) != 0) return -1;
  if (out == NULL) return 0;
  size_t size = (size_t)(r->p - start.p) - 1;
  if ((*out = malloc(size)) == NULL) return -1;
  return parse_string(&start, *out, size);
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* A number at r->p: 0 for an integer that fits int64_t (stored in *value), 1 for any other
 * well-formed number (a fraction, an exponent, a larger integer), -1 for malformed text. */
static int parse_number(reader *r, int64_t *value) {
  int neg = r->p < r->end && *r->p == '-';
  if (neg) ++r->p;
  if (r->p >= r->end || !is_digit(*r->p)) return -1;
  uint64_t v = 0;
  int other = 0;
  if (*r->p == '0') ++r->p;
  else
    for (; r->p < r->end && is_digit(*r->p); ++r->p) {
      unsigned d = (unsigned)(*r->p - '0');
      if (v > (UINT64_MAX - d) / 10) other = 1;
      else v = v * 10 + d;
    }
  if (r->p < r->end && *r->p == '.') {
    ++r->p;
    if (r->p >= r->end || !is_digit(*r->p)) return -1;
    while (r->p < r->end && is_digit(*r->p)) ++r->p;
    other = 1;
  }
  if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
    ++r->p;
    if (r->p < r->end && (*r->p == '+' || *r->p == '-')) ++r->p;
    if (r->p >= r->end || !is_digit(*r->p)) return -1;
    while (r->p < r->end && is_digit(*r->p)) ++r->p;
    other = 1;
  }
  if (other || v > (uint64_t)INT64_MAX + (uint64_t)neg) return 1;
  *value = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
  return 0;
}

static int parse_literal(reader *r, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0) return -1;
  r->p += n;
  return 0;
}

static int parse_value(reader *r, int depth, fl_jnode *n);

/* The members of the container at r->p. With n, each becomes a child node of n, linked before
 * it is parsed so that freeing the root frees everything a failed parse allocated. */
static int parse_members(reader *r, int depth, char close, fl_jnode *n) {
  ++r->p;
  skip_ws(r);
  if (r->p < r->end && *r->p == close) {
    ++r->p;
    return 0;
  }
  fl_jnode **tail = n != NULL ? &n->child : NULL;
  for (;;) {
    fl_jnode *child = NULL;
    if (n != NULL) {
      if ((child = *tail = calloc(1, sizeof *child)) == NULL) return -1;
      tail = &child->next;
      ++n->count;
    }
    skip_ws(r);
    if (close == '}') {
      if (r->p >= r->end || *r->p != '"' ||
          string_value(r, child != NULL ? &child->key : NULL) != 0)
        return -1;
      skip_ws(r);
      if (r->p >= r->end || *r->p++ != ':') return -1;
    }
    if (parse_value(r, depth + 1, child) != 0) return -1;
    skip_ws(r);
    if (r->p >= r->end) return -1;
    char c = *r->p++;
    if (c == close) return 0;
    if (c != ',') return -1;
  }
}

/* One value at r->p, stored in node n when there is one: a tree holds integers only (every
 * number the getters read is a count, a size or a dimension). Without n nothing is allocated. */
static int parse_value(reader *r, int depth, fl_jnode *n) {
  fl_jnode scratch;
  fl_jnode *v = n != NULL ? n : &scratch;
  skip_ws(r);
  if (r->p >= r->end) return -1;
  switch (*r->p) {
    case '{':
    case '[':
      if (depth >= r->max_depth) return -1;
      v->type = *r->p == '{' ? FL_JSON_OBJECT : FL_JSON_ARRAY;
      return parse_members(r, depth, *r->p == '{' ? '}' : ']', n);
    case '"':
      v->type = FL_JSON_STRING;
      return string_value(r, n != NULL ? &n->str : NULL);
    case 't':
      v->type = FL_JSON_BOOL;
      v->boolean = 1;
      return parse_literal(r, "true");
    case 'f':
      v->type = FL_JSON_BOOL;
      return parse_literal(r, "false");
    case 'n':
      v->type = FL_JSON_NULL;
      return parse_literal(r, "null");
    default: {
      v->type = FL_JSON_INT;
      int k = parse_number(r, &v->integer);
      return k < 0 || (n != NULL && k > 0) ? -1 : 0;
    }
  }
}

int fl_json_validate(const char *json, size_t len) {
  reader r = {json, json + len, CHECK_DEPTH};
  if (parse_value(&r, 0, NULL) != 0) return -1;
  skip_ws(&r);
  return r.p == r.end ? 0 : -1;
}

int fl_json_get_string(const char *json, size_t len, const char *key, char *out,
                       size_t out_size) {
  if (out == NULL || out_size == 0) return -1;
  reader r = {json, json + len, CHECK_DEPTH};
  skip_ws(&r);
  if (r.p >= r.end || *r.p != '{') return -1;
  ++r.p;
  skip_ws(&r);
  if (r.p < r.end && *r.p == '}') return -1;
  char name[64];
  for (;;) {
    skip_ws(&r);
    if (r.p >= r.end || *r.p != '"') return -1;
    int k = parse_string(&r, name, sizeof name);
    if (k == -1) return -1;
    int match = k == 0 && strcmp(name, key) == 0;
    skip_ws(&r);
    if (r.p >= r.end || *r.p++ != ':') return -1;
    skip_ws(&r);
    if (match) {
      if (r.p >= r.end || *r.p != '"') return -1;
      return parse_string(&r, out, out_size) == 0 ? 0 : -1;
    }
    if (parse_value(&r, 1, NULL) != 0) return -1;
    skip_ws(&r);
    if (r.p >= r.end) return -1;
    char c = *r.p++;
    if (c != ',') return -1;
  }
}

/* ---- trees ---------------------------------------------------------------------------------- */

/* One allocation per node keeps this plain, and a reply is at most one 64 KiB frame. */
fl_jnode *fl_json_parse(const char *json, size_t len) {
  reader r = {json, json + len, TREE_DEPTH};
  fl_jnode *root = calloc(1, sizeof *root);
  if (root == NULL) return NULL;
  if (parse_value(&r, 0, root) == 0) {
    skip_ws(&r);
    if (r.p == r.end) return root;
  }
  fl_json_free(root);
  return NULL;
}

void fl_json_free(fl_jnode *n) {
  while (n != NULL) {
    fl_jnode *next = n->next;
    fl_json_free(n->child);
    free(n->key);
    free(n->str);
    free(n);
    n = next;
  }
}

const fl_jnode *fl_json_member(const fl_jnode *obj, const char *key) {
  if (obj == NULL || obj->type != FL_JSON_OBJECT) return NULL;
  for (const fl_jnode *c = obj->child; c != NULL; c = c->next)
    if (strcmp(c->key, key) == 0) return c;
  return NULL;
}

const char *fl_json_member_string(const fl_jnode *obj, const char *key) {
  const fl_jnode *m = fl_json_member(obj, key);
  return m != NULL && m->type == FL_JSON_STRING ? m->str : NULL;
}
