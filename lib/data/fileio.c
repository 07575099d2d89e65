/* Whole files into memory and file names into printable text (internal.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/data/internal.h"

int data_read_file(const char *path, size_t max, const char *hint, uint8_t **buf, size_t *len)
{
    char pn[512];
    *buf = NULL;
    *len = 0;
    size_t size;
    int fd = data_open_size(path, hint, &size);
    if (fd < 0)
        return -1;
    if (size > max) {
        close(fd);
        return cdl_error("%s is %zu bytes, more than the %zu a dataset file may have here",
                         data_printable(path, pn, sizeof pn), size, max);
    }
    uint8_t *b = cdl_malloc(size ? size : 1);
    if (!b) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, b + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int err = r < 0 ? errno : 0;
            close(fd);
            cdl_free(b);
            return cdl_error("cannot read %s: %s", data_printable(path, pn, sizeof pn),
                             err ? strerror(err) : "it shrank while being read");
        }
        got += (size_t)r;
    }
    close(fd);
    *buf = b;
    *len = size;
    return 0;
}

/* Length of the valid UTF-8 sequence at s (1..4), 0 if invalid. */
static int utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
          : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || (n == 2 && c < 0xc2) || (n == 4 && c > 0xf4))
        return 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if (n == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0)))
        return 0;   /* overlong or a UTF-16 surrogate */
    if (n == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90)))
        return 0;
    return n;
}

int data_utf8_ok(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = utf8_len(p);
        if (n == 0 || *p < 0x20 || *p == 0x7f)
            return 0;
        p += n;
    }
    return 1;
}

/* The code point at *p (advanced past it): a valid UTF-8 sequence's, else
 * the byte's as Python's surrogateescape decodes it (U+DC80 + byte - 0x80;
 * an ASCII byte is always valid). */
static unsigned long name_point(const unsigned char **p)
{
    const unsigned char *s = *p;
    int n = utf8_len(s);
    if (n == 0) {
        (*p)++;
        return 0xdc00 + s[0];
    }
    static const unsigned char lead[5] = {0, 0x7f, 0x1f, 0x0f, 0x07};
    unsigned long cp = s[0] & lead[n];
    for (int i = 1; i < n; i++)
        cp = cp << 6 | (s[i] & 0x3f);
    *p += n;
    return cp;
}

int data_name_cmp(const char *a, const char *b)
{
    const unsigned char *p = (const unsigned char *)a, *q = (const unsigned char *)b;
    while (*p && *q) {
        unsigned long x = name_point(&p), y = name_point(&q);
        if (x != y)
            return x < y ? -1 : 1;
    }
    return (*p != 0) - (*q != 0);
}

const char *data_printable(const char *s, char *buf, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    while (*p && o + 5 < len) {
        int n = utf8_len(p);
        if (n == 0 || *p < 0x20 || *p == 0x7f) {
            o += (size_t)snprintf(buf + o, len - o, "\\x%02x", *p);
            p++;
            continue;
        }
        if (o + (size_t)n >= len)
            break;
        memcpy(buf + o, p, (size_t)n);
        o += (size_t)n;
        p += n;
    }
    buf[o < len ? o : len - 1] = 0;
    return buf;
}
