/* A JSON reader that builds a tree, for the replies the typed getters expose (model metadata,
 * the hello reply's capabilities). Replies are at most one IPC frame (64 KiB), so one malloc per
 * node is cheap enough and keeps the code plain. Depth is bounded: a hostile reply cannot
 * exhaust the stack. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_DEPTH 32

typedef struct parser {
  const char *p;
  const char *end;
} parser;

static void skip_ws(parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ++ps->p;
}

static int hex4(const char *s, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; ++i) {
    char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= (unsigned)(c - 'A' + 10);
    else
      return -1;
  }
  *out = v;
  return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | cp >> 6);
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | cp >> 12);
    o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | cp >> 18);
  o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* A string at ps->p (on its opening quote), unescaped into a fresh NUL-terminated buffer. The
 * unescaped text is never longer than the escaped one, so one allocation of that size holds it. */
static char *parse_string(parser *ps) {
  const char *start = ++ps->p;
  const char *q = start;
  while (q < ps->end && *q != '"') q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
  if (q >= ps->end) return NULL;
  char *out = malloc((size_t)(q - start) + 1);
  if (out == NULL) return NULL;
  size_t n = 0;
  const char *s = start;
  while (s < q) {
    unsigned char c = (unsigned char)*s;
    if (c < 0x20) goto bad;
    if (c != '\\') {
      out[n++] = (char)c;
      ++s;
      continue;
    }
    char e = s[1];
    s += 2;
    switch (e) {
      case '"': out[n++] = '"'; break;
      case '\\': out[n++] = '\\'; break;
      case '/': out[n++] = '/'; break;
      case 'b': out[n++] = '\b'; break;
      case 'f': out[n++] = '\f'; break;
      case 'n': out[n++] = '\n'; break;
      case 'r': out[n++] = '\r'; break;
      case 't': out[n++] = '\t'; break;
      case 'u': {
        unsigned cp, lo;
        if (q - s < 4 || hex4(s, &cp) != 0) goto bad;
        s += 4;
        if (cp >= 0xD800 && cp < 0xDC00) {
          if (q - s < 6 || s[0] != '\\' || s[1] != 'u' || hex4(s + 2, &lo) != 0 || lo < 0xDC00 ||
              lo > 0xDFFF)
            goto bad;
          s += 6;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          goto bad;
        }
        /* \uXXXX is six bytes and yields at most three; a pair is twelve and yields four. */
        n += put_utf8(out + n, cp);
        break;
      }
      default: goto bad;
    }
  }
  out[n] = '\0';
  ps->p = q + 1;
  return out;
bad:
  free(out);
  return NULL;
}

static fl_jnode *new_node(fl_jtype type) {
  fl_jnode *n = calloc(1, sizeof *n);
  if (n != NULL) n->type = type;
  return n;
}

static fl_jnode *parse_value(parser *ps, int depth);

/* The members of an array or object, appended as children of `n`. */
static int parse_children(parser *ps, fl_jnode *n, char close, int depth) {
  ++ps->p;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) {
    ++ps->p;
    return 0;
  }
  fl_jnode **tail = &n->child;
  for (;;) {
    char *key = NULL;
    skip_ws(ps);
    if (close == '}') {
      if (ps->p >= ps->end || *ps->p != '"' || (key = parse_string(ps)) == NULL) return -1;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') {
        free(key);
        return -1;
      }
      ++ps->p;
    }
    fl_jnode *child = parse_value(ps, depth + 1);
    if (child == NULL) {
      free(key);
      return -1;
    }
    child->key = key;
    *tail = child;
    tail = &child->next;
    ++n->count;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') {
      ++ps->p;
      continue;
    }
    if (ps->p < ps->end && *ps->p == close) {
      ++ps->p;
      return 0;
    }
    return -1;
  }
}

static int match(parser *ps, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return 0;
  ps->p += n;
  return 1;
}

static fl_jnode *parse_value(parser *ps, int depth) {
  if (depth > MAX_DEPTH) return NULL;
  skip_ws(ps);
  if (ps->p >= ps->end) return NULL;
  char c = *ps->p;
  fl_jnode *n = NULL;
  if (c == '{' || c == '[') {
    n = new_node(c == '{' ? FL_JSON_OBJECT : FL_JSON_ARRAY);
    if (n != NULL && parse_children(ps, n, c == '{' ? '}' : ']', depth) != 0) {
      fl_json_free(n);
      n = NULL;
    }
  } else if (c == '"') {
    char *s = parse_string(ps);
    if (s != NULL && (n = new_node(FL_JSON_STRING)) != NULL)
      n->str = s;
    else
      free(s);
  } else if (match(ps, "true")) {
    if ((n = new_node(FL_JSON_BOOL)) != NULL) n->boolean = 1;
  } else if (match(ps, "false")) {
    n = new_node(FL_JSON_BOOL);
  } else if (match(ps, "null")) {
    n = new_node(FL_JSON_NULL);
  } else if (c == '-' || (c >= '0' && c <= '9')) {
    /* Integers only: every number the getters read is a count, a size or a dimension. */
    const char *s = ps->p;
    int neg = *s == '-';
    if (neg) ++s;
    if (s >= ps->end || *s < '0' || *s > '9') return NULL;
    uint64_t v = 0;
    while (s < ps->end && *s >= '0' && *s <= '9') {
      unsigned d = (unsigned)(*s - '0');
      if (v > (UINT64_MAX - d) / 10) return NULL;
      v = v * 10 + d;
      ++s;
    }
    if (s < ps->end && (*s == '.' || *s == 'e' || *s == 'E')) return NULL;
    if (v > (uint64_t)INT64_MAX + (uint64_t)neg) return NULL;
    ps->p = s;
    if ((n = new_node(FL_JSON_INT)) != NULL)
      n->integer = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
  }
  return n;
}

fl_jnode *fl_json_parse(const char *json, size_t len) {
  parser ps = {json, json + len};
  fl_jnode *root = parse_value(&ps, 0);
  skip_ws(&ps);
  if (root != NULL && ps.p != ps.end) {
    fl_json_free(root);
    return NULL;
  }
  return root;
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
