/* A strict reader for the JSON subset of safetensors headers, and the string
 * escaping its writer needs (see json.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "lib/ckpt/json.h"

void json_init(json_cur *c, const char *text, size_t len, char *pool, size_t pool_cap)
{
    c->start = c->p = text;
    c->end = text + len;
    c->pool = pool;
    c->pool_used = 0;
    c->pool_cap = pool_cap;
    c->err[0] = '\0';
}

int json_fail(json_cur *c, const char *fmt, ...)
{
    if (c->err[0])
        return -1;
    int n = snprintf(c->err, sizeof c->err, "header byte %zu: ", (size_t)(c->p - c->start));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err + n, sizeof c->err - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static void skip_ws(json_cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* The next non-blank byte for messages: "'x'", "byte 0x07" or "the end". */
static const char *describe_next(json_cur *c, char *buf, size_t len)
{
    skip_ws(c);
    if (c->p == c->end)
        return "the end of the header";
    unsigned char ch = (unsigned char)*c->p;
    if (ch >= 0x20 && ch < 0x7f)
        snprintf(buf, len, "'%c'", ch);
    else
        snprintf(buf, len, "byte 0x%02x", ch);
    return buf;
}

int json_peek(json_cur *c)
{
    skip_ws(c);
    return c->p < c->end ? (unsigned char)*c->p : -1;
}

const char *json_peek_kind(json_cur *c)
{
    skip_ws(c);
    if (c->p == c->end)
        return "nothing";
    switch (*c->p) {
    case '{': return "an object";
    case '[': return "an array";
    case '"': return "a string";
    case 't': case 'f': return "a boolean";
    case 'n': return "null";
    case '-': return "a negative number";
    default:
        return (*c->p >= '0' && *c->p <= '9') ? "a number" : "something that is not JSON";
    }
}

int json_expect(json_cur *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 0;
    }
    char buf[16];
    return json_fail(c, "expected '%c' but found %s", ch, describe_next(c, buf, sizeof buf));
}

int json_next(json_cur *c, char close, int *first)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 0;
    }
    if (c->p == c->end)
        return json_fail(c, "the header ends inside an %s", close == '}' ? "object" : "array");
    if (!*first) {
        if (*c->p == ',') {
            c->p++;
            skip_ws(c);
            if (c->p < c->end && *c->p == close)
                return json_fail(c, "trailing ',' before '%c'", close);
        } else {
            char buf[16];
            return json_fail(c, "expected ',' or '%c' but found %s", close,
                             describe_next(c, buf, sizeof buf));
        }
    }
    *first = 0;
    return 1;
}

/* Length of the UTF-8 sequence at s (at most len bytes), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t len)
{
    unsigned char b = s[0];
    if (b < 0x80)
        return 1;
    size_t n;
    uint32_t cp, min;
    if ((b & 0xe0) == 0xc0) {
        n = 2, cp = b & 0x1f, min = 0x80;
    } else if ((b & 0xf0) == 0xe0) {
        n = 3, cp = b & 0x0f, min = 0x800;
    } else if ((b & 0xf8) == 0xf0) {
        n = 4, cp = b & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n > len)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

int utf8_valid(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        size_t n = utf8_seq(u + i, len - i);
        if (!n)
            return 0;
        i += n;
    }
    return 1;
}

static int hex4(json_cur *c, uint32_t *out)
{
    if (c->end - c->p < 4)
        return json_fail(c, "the header ends inside a \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char h = c->p[i];
        int d = h >= '0' && h <= '9' ? h - '0'
              : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0)
            return json_fail(c, "\\u must be followed by 4 hex digits");
        v = v << 4 | (uint32_t)d;
    }
    c->p += 4;
    *out = v;
    return 0;
}

void utf8_put(char *o, size_t *n, uint32_t cp)
{
    if (cp < 0x80) {
        o[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        o[(*n)++] = (char)(0xc0 | cp >> 6);
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        o[(*n)++] = (char)(0xe0 | cp >> 12);
        o[(*n)++] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        o[(*n)++] = (char)(0xf0 | cp >> 18);
        o[(*n)++] = (char)(0x80 | (cp >> 12 & 0x3f));
        o[(*n)++] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
}

/* One escape after the backslash; appends its bytes to o. */
static int unescape(json_cur *c, char *o, size_t *n)
{
    if (c->p == c->end)
        return json_fail(c, "the header ends inside an escape");
    char e = *c->p++;
    switch (e) {
    case '"': case '\\': case '/': o[(*n)++] = e; return 0;
    case 'b': o[(*n)++] = '\b'; return 0;
    case 'f': o[(*n)++] = '\f'; return 0;
    case 'n': o[(*n)++] = '\n'; return 0;
    case 'r': o[(*n)++] = '\r'; return 0;
    case 't': o[(*n)++] = '\t'; return 0;
    case 'u': break;
    default:
        c->p--;
        return json_fail(c, "invalid escape '\\%c' in a string", e >= 0x20 && e < 0x7f ? e : '?');
    }
    uint32_t cp;
    if (hex4(c, &cp))
        return -1;
    if (cp >= 0xdc00 && cp <= 0xdfff)
        return json_fail(c, "lone low surrogate \\u%04x in a string", (unsigned)cp);
    if (cp >= 0xd800 && cp <= 0xdbff) {
        uint32_t lo;
        if (c->end - c->p < 2 || c->p[0] != '\\' || c->p[1] != 'u')
            return json_fail(c, "high surrogate \\u%04x is not followed by a low one", (unsigned)cp);
        c->p += 2;
        if (hex4(c, &lo))
            return -1;
        if (lo < 0xdc00 || lo > 0xdfff)
            return json_fail(c, "high surrogate \\u%04x is followed by \\u%04x, not a low surrogate",
                             (unsigned)cp, (unsigned)lo);
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (cp == 0)
        return json_fail(c, "\\u0000 in a string: names and metadata must not contain NUL");
    utf8_put(o, n, cp);
    return 0;
}

int json_string(json_cur *c, const char **out)
{
    skip_ws(c);
    if (c->p == c->end || *c->p != '"')
        return json_fail(c, "expected a string but found %s", json_peek_kind(c));
    c->p++;
    /* Every escape decodes to no more bytes than it occupies, and the quotes
     * pay for the NUL, so the pool (sized to the whole text) cannot overflow. */
    char *o = c->pool + c->pool_used;
    size_t n = 0;
    for (;;) {
        if (c->p == c->end)
            return json_fail(c, "the header ends inside a string");
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '"') {
            c->p++;
            break;
        }
        if (ch < 0x20)
            return json_fail(c, "raw control character 0x%02x in a string (must be escaped)", ch);
        if (ch == '\\') {
            c->p++;
            if (unescape(c, o, &n))
                return -1;
            continue;
        }
        size_t len = utf8_seq((const unsigned char *)c->p, (size_t)(c->end - c->p));
        if (!len)
            return json_fail(c, "invalid UTF-8 in a string");
        memcpy(o + n, c->p, len);
        n += len;
        c->p += len;
    }
    o[n] = '\0';
    c->pool_used += n + 1;
    *out = o;
    return 0;
}

int json_uint(json_cur *c, uint64_t *out)
{
    skip_ws(c);
    if (c->p == c->end || *c->p < '0' || *c->p > '9')
        return json_fail(c, "expected a non-negative integer but found %s", json_peek_kind(c));
    const char *begin = c->p;
    uint64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        unsigned d = (unsigned)(*c->p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return json_fail(c, "integer does not fit in 64 bits");
        v = v * 10 + d;
        c->p++;
    }
    if (c->p - begin > 1 && *begin == '0') {
        c->p = begin;
        return json_fail(c, "integer with a leading zero");
    }
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
        return json_fail(c, "expected an integer but found a fraction or exponent");
    *out = v;
    return 0;
}

int json_finish(json_cur *c)
{
    skip_ws(c);
    if (c->p != c->end) {
        char buf[16];
        return json_fail(c, "%s after the header's object", describe_next(c, buf, sizeof buf));
    }
    return 0;
}

void json_buf_put(json_buf *b, const void *bytes, size_t n)
{
    if (b->failed)
        return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->failed = 1;
                cdl_error("out of memory building a safetensors header");
                return;
            }
            cap *= 2;
        }
        char *d = cdl_malloc(cap);
        if (!d) {
            b->failed = 1;
            return;
        }
        if (b->len)
            memcpy(d, b->data, b->len);
        cdl_free(b->data);
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, bytes, n);
    b->len += n;
}

void json_buf_puts(json_buf *b, const char *s)
{
    json_buf_put(b, s, strlen(s));
}

void json_buf_uint(json_buf *b, uint64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    json_buf_put(b, tmp, (size_t)n);
}

void json_buf_string(json_buf *b, const char *s)
{
    json_buf_put(b, "\"", 1);
    const char *run = s;   /* bytes since the last escape go out in one piece */
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch >= 0x20 && ch != '"' && ch != '\\')
            continue;
        json_buf_put(b, run, (size_t)(s - run));
        char esc[8];
        switch (ch) {
        case '"': json_buf_puts(b, "\\\""); break;
        case '\\': json_buf_puts(b, "\\\\"); break;
        case '\b': json_buf_puts(b, "\\b"); break;
        case '\f': json_buf_puts(b, "\\f"); break;
        case '\n': json_buf_puts(b, "\\n"); break;
        case '\r': json_buf_puts(b, "\\r"); break;
        case '\t': json_buf_puts(b, "\\t"); break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            json_buf_puts(b, esc);
        }
        run = s + 1;
    }
    json_buf_put(b, run, (size_t)(s - run));
    json_buf_put(b, "\"", 1);
}

void json_buf_free(json_buf *b)
{
    cdl_free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
