/* st_tool: drives libcdl's safetensors code from tests/ckpt/interop.py.
 *
 *   st_tool write OUT.safetensors SPEC   writes the tensors and metadata of SPEC
 *   st_tool dump IN.safetensors          prints the file as a SPEC (without
 *                                        cdl's checksum entry: write adds it)
 *
 * SPEC is line-based text; names, values and data are hex so that any bytes
 * (quotes, newlines, UTF-8) pass through unchanged:
 *   meta HEXKEY HEXVALUE
 *   tensor HEXNAME NDIM D0 D1 ...
 *   data HEX                  (the tensor's float32 little-endian bytes)
 *   i64 HEX                   (instead of data: an I64 tensor's little-endian bytes)
 *   error TEXT                (dump only: the tensor's data cannot be read)
 * Exit status 0 on success, 1 with the library's message on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

static int die(const char *what)
{
    fprintf(stderr, "st_tool: %s: %s\n", what, cdl_last_error());
    return 1;
}

static void put_hex(FILE *out, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%02x", b[i]);
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decodes a hex token into a malloc'd buffer (NUL-terminated); -1 if bad. */
static int from_hex(const char *hex, unsigned char **out, size_t *n)
{
    size_t len = strlen(hex);
    if (len % 2)
        return -1;
    unsigned char *b = malloc(len / 2 + 1);
    for (size_t i = 0; i < len / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            return -1;
        }
        b[i] = (unsigned char)(hi << 4 | lo);
    }
    b[len / 2] = '\0';
    *out = b;
    *n = len / 2;
    return 0;
}

/* Reads one whole line (any length); NULL at end of file. */
static char *read_line(FILE *in)
{
    size_t cap = 256, len = 0;
    char *s = malloc(cap);
    int c;
    while ((c = getc(in)) != EOF && c != '\n') {
        if (len + 1 == cap)
            s = realloc(s, cap *= 2);
        s[len++] = (char)c;
    }
    if (c == EOF && !len) {
        free(s);
        return NULL;
    }
    s[len] = '\0';
    return s;
}

/* The next space-separated token of a line, "" when there is none. */
static const char *tok(char **save)
{
    const char *t = strtok_r(NULL, " ", save);
    return t ? t : "";
}

static int spec_error(const char *spec, int line)
{
    fprintf(stderr, "st_tool: %s:%d: malformed line\n", spec, line);
    return 1;
}

static int cmd_write(const char *out, const char *spec)
{
    FILE *in = fopen(spec, "r");
    if (!in) {
        perror(spec);
        return 1;
    }
    cdl_st_tensor t[256];
    cdl_st_meta m[256];
    int nt = 0, nm = 0, line = 0, rc = 1;
    char *s;
    while ((s = read_line(in))) {
        line++;
        char *save, *kind = strtok_r(s, " ", &save);
        unsigned char *a, *b;
        size_t na, nb;
        if (kind && !strcmp(kind, "meta") && nm < 256) {
            if (from_hex(tok(&save), &a, &na))
                goto bad;
            if (from_hex(tok(&save), &b, &nb)) {
                free(a);
                goto bad;
            }
            m[nm].key = (char *)a;
            m[nm++].value = (char *)b;
        } else if (kind && !strcmp(kind, "tensor") && nt < 256) {
            if (from_hex(tok(&save), &a, &na))
                goto bad;
            memset(&t[nt], 0, sizeof t[nt]);
            t[nt].name = (char *)a;
            t[nt].ndim = atoi(tok(&save));
            for (int d = 0; d < t[nt].ndim && d < 4; d++)
                t[nt].shape[d] = atoll(tok(&save));
            nt++;
        } else if (kind && !strcmp(kind, "data") && nt > 0) {
            if (from_hex(tok(&save), &a, &na) || na % 4)
                goto bad;
            /* The spec holds little-endian bytes; the API takes native floats. */
            float *x = malloc(na + 4);
            for (size_t i = 0; i < na / 4; i++) {
                uint32_t u = (uint32_t)a[4 * i] | (uint32_t)a[4 * i + 1] << 8 |
                             (uint32_t)a[4 * i + 2] << 16 | (uint32_t)a[4 * i + 3] << 24;
                memcpy(&x[i], &u, 4);
            }
            free(a);
            t[nt - 1].data = x;
        } else if (kind && !strcmp(kind, "i64") && nt > 0) {
            if (from_hex(tok(&save), &a, &na) || na % 8)
                goto bad;
            int64_t *q = malloc(na + 8);
            for (size_t i = 0; i < na / 8; i++) {
                uint64_t u = 0;
                for (int k = 7; k >= 0; k--)
                    u = u << 8 | a[8 * i + (size_t)k];
                memcpy(&q[i], &u, 8);
            }
            free(a);
            t[nt - 1].i64 = q;
        } else {
            goto bad;
        }
        free(s);
        continue;
bad:
        free(s);
        spec_error(spec, line);
        goto out;
    }
    rc = cdl_st_write(out, t, nt, m, nm) ? die("write") : 0;
out:
    fclose(in);
    for (int i = 0; i < nt; i++) {
        free((void *)t[i].name);
        free((void *)t[i].data);
        free((void *)t[i].i64);
    }
    for (int i = 0; i < nm; i++) {
        free((void *)m[i].key);
        free((void *)m[i].value);
    }
    return rc;
}

static int cmd_dump(const char *path)
{
    cdl_st_file *f = cdl_st_open(path);
    if (!f)
        return die("open");
    for (int i = 0; i < cdl_st_meta_count(f); i++) {
        const char *k = cdl_st_meta_key(f, i), *v = cdl_st_meta_get(f, k);
        if (!strcmp(k, "cdl_checksum"))
            continue;   /* verified by the open; write adds a new one */
        printf("meta ");
        put_hex(stdout, k, strlen(k));
        putchar(' ');
        put_hex(stdout, v, strlen(v));
        putchar('\n');
    }
    for (int i = 0; i < cdl_st_count(f); i++) {
        const char *name = cdl_st_name(f, i);
        int ndim;
        int64_t shape[8];
        cdl_st_shape(f, i, &ndim, shape);
        printf("tensor ");
        put_hex(stdout, name, strlen(name));
        printf(" %d", ndim);
        for (int d = 0; d < ndim; d++)
            printf(" %lld", (long long)shape[d]);
        putchar('\n');
        size_t n;
        if (!strcmp(cdl_st_dtype(f, i), "I64")) {
            const int64_t *q = cdl_st_data_i64(f, i, &n);
            printf("i64 ");
            for (size_t j = 0; j < n; j++) {
                unsigned char b[8];
                for (int k = 0; k < 8; k++)
                    b[k] = (unsigned char)((uint64_t)q[j] >> (8 * k));
                put_hex(stdout, b, 8);
            }
            putchar('\n');
            continue;
        }
        const float *x = cdl_st_data(f, i, &n);
        if (!x) {
            printf("error %s\n", cdl_last_error());
            continue;
        }
        printf("data ");
        for (size_t j = 0; j < n; j++) {
            uint32_t u;
            memcpy(&u, &x[j], 4);
            unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8),
                                  (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
            put_hex(stdout, b, 4);
        }
        putchar('\n');
    }
    cdl_st_close(f);
    return fflush(stdout) ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "write"))
        return cmd_write(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "dump"))
        return cmd_dump(argv[2]);
    fprintf(stderr, "usage: st_tool write OUT.safetensors SPEC | st_tool dump IN.safetensors\n");
    return 2;
}
