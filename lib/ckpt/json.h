/* The JSON needed by safetensors headers, and nothing more.
 *
 * Reading: a cursor over the header text that the safetensors grammar in
 * safetensors_read.c drives by recursive descent. It accepts objects, arrays,
 * strings (all escapes, \uXXXX with surrogate pairs, UTF-8 validated) and
 * non-negative integers; true/false/null, signs, fractions and exponents are
 * rejected with a message saying what was found where.
 *
 * Writing: a growing byte buffer and JSON string escaping for the header the
 * writer builds.
 */
#ifndef CDL_CKPT_JSON_H
#define CDL_CKPT_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef struct json_cur {
    const char *start;   /* header text, not NUL-terminated */
    const char *p;       /* next unread byte */
    const char *end;
    char *pool;          /* decoded strings are appended here (NUL-terminated) */
    size_t pool_used, pool_cap;
    char err[512];       /* set by the first failure: "header byte 17: ..." */
} json_cur;

/* pool must hold at least len bytes: a decoded string never outgrows its
 * quoted JSON form, so the text's length bounds all strings together. */
void json_init(json_cur *c, const char *text, size_t len, char *pool, size_t pool_cap);
/* Records "header byte N: <message>" (N = offset of the cursor) if no error
 * is recorded yet; returns -1. */
int json_fail(json_cur *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Consumes optional whitespace, then ch; -1 if something else is there. */
int json_expect(json_cur *c, char ch);
/* Iterates the members of an object or the elements of an array whose '{' or
 * '[' was consumed: 1 if another item follows (after its ',' if not the
 * first), 0 after the closing bracket, -1 on a syntax error. *first starts 1. */
int json_next(json_cur *c, char close, int *first);
/* A string: *out points into the pool. Rejects invalid UTF-8, lone
 * surrogates and \u0000 (names are C strings). */
int json_string(json_cur *c, const char **out);
/* A non-negative integer without sign, fraction, exponent or leading zero,
 * at most UINT64_MAX. */
int json_uint(json_cur *c, uint64_t *out);
/* Only whitespace remains. */
int json_finish(json_cur *c);
/* The next non-blank byte, or -1 at the end: tells a caller which value
 * comes, so it can say what it expected instead. */
int json_peek(json_cur *c);
/* What the next value is, for messages: "a string", "an object", ... */
const char *json_peek_kind(json_cur *c);

/* 1 if s[0..len) is valid UTF-8 (no overlong forms, surrogates or code points
 * beyond U+10FFFF), else 0. */
int utf8_valid(const char *s, size_t len);
/* Appends the code point cp (<= U+10FFFF) as UTF-8 at o + *n (1 to 4
 * bytes), advancing *n. */
void utf8_put(char *o, size_t *n, uint32_t cp);

/* A growing buffer (cdl_malloc'd). After an allocation failure every further
 * call is a no-op and failed stays set, so callers check once at the end. */
typedef struct json_buf {
    char *data;
    size_t len, cap;
    int failed;
} json_buf;

void json_buf_put(json_buf *b, const void *bytes, size_t n);
void json_buf_puts(json_buf *b, const char *s);
void json_buf_uint(json_buf *b, uint64_t v);
/* s as a quoted JSON string: '"' and '\\' escaped, control characters as
 * \n, \t, ... or \u00XX; other bytes (UTF-8) as they are. */
void json_buf_string(json_buf *b, const char *s);
void json_buf_free(json_buf *b);

#endif
