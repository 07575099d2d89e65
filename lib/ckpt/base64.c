/* Base64 (RFC 4648, standard alphabet, '=' padding) for binary state kept in
 * __metadata__ strings. Decoding is strict: exactly the canonical encoding
 * of the expected byte count, nothing else (no whitespace, no line breaks,
 * zero pad bits), so a damaged value is an error, not different state. */
#include <string.h>

#include <cdl/cdl.h>

static const char alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *cdl_base64_encode(const void *data, size_t bytes)
{
    if (bytes && !data) {
        cdl_error("base64: NULL data of %zu bytes", bytes);
        return NULL;
    }
    if (bytes > (SIZE_MAX - 1) / 4 * 3 - 2) {
        cdl_error("base64: %zu bytes are too many to encode", bytes);
        return NULL;
    }
    size_t len = (bytes + 2) / 3 * 4;
    char *out = cdl_malloc(len + 1);
    if (!out)
        return NULL;
    const unsigned char *in = data;
    char *o = out;
    size_t i = 0;
    for (; i + 3 <= bytes; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[v >> 12 & 63];
        *o++ = alphabet[v >> 6 & 63];
        *o++ = alphabet[v & 63];
    }
    if (i < bytes) {   /* 1 or 2 bytes left: 2 or 3 characters and padding */
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < bytes ? (uint32_t)in[i + 1] << 8 : 0);
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[v >> 12 & 63];
        *o++ = i + 1 < bytes ? alphabet[v >> 6 & 63] : '=';
        *o++ = '=';
    }
    *o = '\0';
    return out;
}

static int sextet(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int cdl_base64_decode(const char *text, void *out, size_t bytes)
{
    if (!text || (bytes && !out))
        return cdl_error("base64: NULL %s", text ? "output buffer" : "text");
    size_t len = strlen(text);
    if (bytes > SIZE_MAX / 4 || len != (bytes + 2) / 3 * 4)
        return cdl_error("base64: %zu characters cannot encode %zu bytes (expected %zu)", len,
                         bytes, bytes > SIZE_MAX / 4 ? (size_t)0 : (bytes + 2) / 3 * 4);
    unsigned char *o = out;
    size_t full = bytes / 3, tail = bytes % 3, groups = full + (tail != 0);
    /* Pass 0 validates everything, pass 1 writes: out is untouched on failure. */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t g = 0; g < groups; g++) {
            const char *q = text + 4 * g;
            /* A last group for 1 or 2 bytes has 2 or 3 characters, then '='. */
            int want = g < full ? 4 : (int)tail + 1;
            uint32_t v = 0;
            for (int k = 0; k < 4; k++) {
                int s = k < want ? sextet(q[k]) : (q[k] == '=' ? 0 : -1);
                if (s < 0)
                    return cdl_error("base64: invalid character '%c' at position %zu",
                                     q[k] >= 0x20 && q[k] < 0x7f ? q[k] : '?', 4 * g + (size_t)k);
                v = v << 6 | (uint32_t)s;
            }
            if (g == full && ((tail == 1 && (v & 0xffff)) || (tail == 2 && (v & 0xff))))
                return cdl_error("base64: the last group at position %zu has non-zero pad bits",
                                 4 * g);
            if (pass) {
                unsigned char b[3] = {(unsigned char)(v >> 16), (unsigned char)(v >> 8),
                                      (unsigned char)v};
                memcpy(o + 3 * g, b, g < full ? 3 : tail);
            }
        }
    }
    return 0;
}
