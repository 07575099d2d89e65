/* Token datasets for language models: "text" (any file, byte-level: vocab
 * 256) and "tokens" (a directory of nanoGPT's train.bin / val.bin: flat
 * little-endian uint16 token ids, no header).
 *
 * The file is memory-mapped read-only, never copied: a split is a range
 * [first, first + count) of its tokens, and the training and validation
 * splits of one file are two mappings of it (the page cache holds it
 * once). Loading reads none of it: a corpus of gigabytes on every rank of
 * every node would be read whole before the first step. Instead every
 * window is checked below the vocabulary as it is copied out
 * (tokens_window), the only way ids reach the embedding lookup, which
 * trusts them; that also holds when the file is rewritten while it is
 * mapped. The error names the file, the token's offset in it and its id.
 *
 * A sample is a window of T tokens (x, shape (T,1,1)) and its labels the
 * window shifted by one token (y, T labels), nanoGPT's get_batch. Without
 * val.bin the validation split is the last --val-split tokens of the file,
 * contiguous, so no window of one split sees the other's text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/core/rng.h"
#include "lib/data/internal.h"

#define DEFAULT_BLOCK 64
#define DEFAULT_VOCAB 50257    /* GPT-2's BPE, what nanoGPT's prepare.py writes */
#define DEFAULT_VAL 0.1
#define MAX_BLOCK (1 << 20)

/* Keeps the window draws apart from the other streams of the seed. */
#define WINDOW_DOMAIN 0x77696e646f777321ull   /* "windows!" */

static unsigned token_at(const uint8_t *p, int token_bytes, size_t i)
{
    if (token_bytes == 1)
        return p[i];
    return (unsigned)p[2 * i] | (unsigned)p[2 * i + 1] << 8;
}

/* Where a split's tokens come from, for errors: cdl_dataset.map points
 * here (the mapping, when the reader made one, and the file's name). */
typedef struct token_file {
    void *addr;       /* the mapping (len bytes), or NULL (tokens_read_mem's caller owns it) */
    size_t len;
    size_t first;     /* the split's first token in the file */
    int fd;           /* the mapped file, open to see it cut short (tokens_intact), or -1 */
    char *meta;       /* the meta.pkl that gave the vocabulary (malloc'd), or NULL */
    char **itos;      /* its itos table (classes strings; tokens_itos_free), or NULL */
    char name[];      /* printable */
} token_file;

/* A bad token: where it is and how to fix it. */
static int bad_token(const char *name, unsigned id, size_t offset, int token_bytes, int vocab)
{
    return cdl_error("%s: token %u at token offset %zu (byte %zu) is not below the vocabulary "
                     "size %d: give the tokenizer's --vocab-size, or rebuild the file", name,
                     id, offset, offset * (size_t)token_bytes, vocab);
}

/* The validation tokens of a file of total tokens (val_split as in
 * cdl_dataset_options). */
static int val_count(double split, size_t total, const char *name, size_t *count)
{
    if (split < 0) {
        *count = 0;
        return 0;
    }
    if (split == 0)
        split = DEFAULT_VAL;
    double c = split < 1 ? split * (double)total + 0.5 : split;
    if (!(c < (double)total))
        return cdl_error("%s: --val-split %g takes all of its %zu tokens for validation: give a "
                         "fraction below 1 or a count of tokens below %zu", name, split, total,
                         total);
    *count = (size_t)c;
    return 0;
}

/* out = the windows of tokens [first, first + count) of buf. */
static int make_split(const uint8_t *buf, size_t first, size_t count, int token_bytes, int vocab,
                      int T, const char *name, int train, int whole, cdl_dataset *out)
{
    /* What makes the split longer: a file of its own (val.bin, train.bin)
     * has no --val-split to change. */
    if (count < (size_t)T + 1)
        return cdl_error("%s: the %s split holds %zu tokens, fewer than --block-size %d + 1 (a "
                         "window and the token after it): use a smaller --block-size%s", name,
                         train ? "training" : "validation", count, T,
                         whole ? (train ? " or more data" : " or a longer val.bin")
                         : train ? ", more data or a smaller --val-split"
                                 : " or a larger --val-split");
    size_t windows = (count - 1) / (size_t)T;
    out->tokens = buf + first * (size_t)token_bytes;
    out->ntokens = count;
    out->token_bytes = token_bytes;
    out->label_len = T;
    out->n = windows < INT32_MAX ? (int)windows : INT32_MAX;   /* an epoch's draws */
    out->shape = (cdl_shape){T, 1, 1};
    out->classes = vocab;
    for (int k = 0; k < 3; k++) {
        out->mean[k] = 0.0f;
        out->std[k] = 1.0f;
    }
    return 0;
}

int tokens_read_mem(const uint8_t *buf, size_t len, const char *name, int token_bytes,
                    const cdl_dataset_options *o, int train, int whole, cdl_dataset *out)
{
    int T = o->block_size ? o->block_size : DEFAULT_BLOCK;
    int vocab = token_bytes == 1 ? 256 : o->vocab_size ? o->vocab_size : DEFAULT_VOCAB;
    if (T < 1 || T > MAX_BLOCK)
        return cdl_error("--block-size %d: use 1..%d tokens", T, MAX_BLOCK);
    if (token_bytes == 1 && o->vocab_size && o->vocab_size != 256)
        return cdl_error("--vocab-size %d: text data is byte-level, its vocabulary is 256: drop "
                         "--vocab-size or use pre-tokenized data (tokens:DIR)", o->vocab_size);
    if (vocab < 1 || vocab > 65536)
        return cdl_error("--vocab-size %d: uint16 tokens allow 1..65536", vocab);
    if (len == 0)
        return cdl_error("%s is empty: a token dataset needs at least --block-size + 1 = %d "
                         "tokens", name, T + 1);
    if (token_bytes == 2 && len % 2)
        return cdl_error("%s: %zu bytes is not a whole number of uint16 tokens: the file is "
                         "truncated or not in nanoGPT's .bin format (np.uint16 ids, no header)",
                         name, len);
    size_t total = len / (size_t)token_bytes, nval = 0;
    if (!whole && val_count(o->val_split, total, name, &nval) != 0)
        return -1;
    if (!train && !whole && nval == 0)
        return 1;
    size_t first = whole || train ? 0 : total - nval;
    size_t count = whole ? total : train ? total - nval : nval;
    if (make_split(buf, first, count, token_bytes, vocab, T, name, train, whole, out) != 0)
        return -1;
    size_t nlen = strlen(name) + 1;
    token_file *f = cdl_malloc(sizeof *f + nlen);
    if (!f)
        return -1;
    f->addr = NULL;
    f->len = 0;
    f->fd = -1;
    f->first = first;
    f->meta = NULL;
    f->itos = NULL;
    memcpy(f->name, name, nlen);
    out->map = f;
    return 0;
}

/* The mapping of the regular file path (an empty one maps nothing). */
/* The mapping of the regular file path (an empty one maps nothing); its
 * descriptor stays open in *keep when keep is not NULL (else closed). */
static int map_file(const char *path, const char *hint, void **map, size_t *len, int *keep)
{
    int fd = data_open_size(path, hint, len);
    if (fd < 0)
        return -1;
    *map = NULL;
    if (*len) {
        void *p = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            return cdl_error("cannot map %s (%zu bytes): %s", path, *len, strerror(err));
        }
        *map = p;
    }
    if (keep)
        *keep = fd;
    else
        close(fd);
    return 0;
}

static int is_regular(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* *vocab from DIR/meta.pkl, nanoGPT's (meta_pkl.c), where DIR is path or,
 * for one .bin file, its directory; left as it is without one. A meta.pkl
 * without a readable vocab_size is an error: its corpus is not GPT-2's,
 * and guessing 50257 would build the wrong model. With one: *meta = its
 * path (malloc'd) and *itos = its itos table, or NULL (tokens_meta_vocab). */
int tokens_meta_path(const char *path, char *meta, size_t len)
{
    const char *slash = strrchr(path, '/');
    if (!is_regular(path))
        snprintf(meta, len, "%s/meta.pkl", path);
    else if (slash)
        snprintf(meta, len, "%.*s/meta.pkl", (int)(slash - path), path);
    else
        snprintf(meta, len, "meta.pkl");
    /* One whose stat() fails (EIO, ESTALE of a shared file system) is
     * not taken for missing: the run built a GPT-2-sized model for the
     * corpus in silence; reading it fails naming it. */
    struct stat st;
    if (stat(meta, &st) == 0)
        return S_ISREG(st.st_mode);
    return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
}

static int dir_vocab(const char *path, int *vocab, char **meta_out, char ***itos)
{
    char meta[4200], pn[1024];
    *meta_out = NULL;
    *itos = NULL;
    if (!tokens_meta_path(path, meta, sizeof meta))
        return 0;
    void *map = NULL;
    size_t len = 0;
    if (map_file(meta, "give --vocab-size", &map, &len, NULL) != 0)
        return -1;
    long v = 0;
    int rc = tokens_meta_vocab(map, len, data_printable(meta, pn, sizeof pn), &v, itos);
    if (map)
        munmap(map, len);
    if (rc == 0)
        cdl_error("%s has no vocab_size entry", pn);
    else if (rc == 1 && (v < 1 || v > 65536))
        rc = cdl_error("%s: vocab_size %ld is not 1..65536 (uint16 tokens)", pn, v);
    if (rc != 1) {
        char why[1024];   /* the reader's reason, then what to do */
        snprintf(why, sizeof why, "%s", cdl_last_error());
        tokens_itos_free(*itos, v);
        *itos = NULL;
        return cdl_error("%s: give the vocabulary with --vocab-size N (nanoGPT's meta.pkl: "
                         "python3 -c \"import pickle; print(pickle.load(open('%s', 'rb'))"
                         "['vocab_size'])\")", why, pn);
    }
    if (!(*meta_out = strdup(pn))) {
        tokens_itos_free(*itos, v);
        *itos = NULL;
        return cdl_error("out of memory");
    }
    *vocab = (int)v;
    return 0;
}

const char *tokens_vocab_file(const cdl_dataset *d)
{
    const token_file *f = d->tokens ? d->map : NULL;
    return f ? f->meta : NULL;
}

char *const *tokens_itos(const cdl_dataset *d)
{
    const token_file *f = d->tokens ? d->map : NULL;
    return f ? f->itos : NULL;
}

int tokens_read(const char *name, const char *path, int train, const cdl_dataset_options *o,
                cdl_dataset *out)
{
    int bin = !strcmp(name, "tokens");
    char file[4200];
    int whole = 0;
    cdl_dataset_options opt = *o;
    char *meta = NULL, **itos = NULL;   /* --vocab-size given: meta.pkl is not read */
    if (!bin) {
        snprintf(file, sizeof file, "%s", path);
    } else if (is_regular(path)) {
        snprintf(file, sizeof file, "%s", path);     /* one .bin: split it like a text */
        if (!opt.vocab_size && dir_vocab(path, &opt.vocab_size, &meta, &itos) != 0)
            return -1;
    } else {
        char val[4200];
        snprintf(val, sizeof val, "%s/val.bin", path);
        whole = is_regular(val);
        snprintf(file, sizeof file, "%s/%s.bin", path, whole && !train ? "val" : "train");
        if (!opt.vocab_size && dir_vocab(path, &opt.vocab_size, &meta, &itos) != 0)
            return -1;
    }
    void *map = NULL;
    size_t len = 0;
    int fd = -1;
    int rc = map_file(file, bin ? "give tokens:DIR a directory holding train.bin (and val.bin) "
                                  "as nanoGPT's prepare.py writes them"
                                : "give text:FILE a readable text file", &map, &len, &fd);
    char pn[1024];   /* errors show the name as text */
    if (rc == 0)
        rc = tokens_read_mem(map, len, data_printable(file, pn, sizeof pn), bin ? 2 : 1, &opt,
                             train, whole, out);
    if (rc != 0) {
        if (map)
            munmap(map, len);
        if (fd >= 0)
            close(fd);
        free(meta);
        tokens_itos_free(itos, opt.vocab_size);
        return rc;
    }
    token_file *f = out->map;
    f->addr = map;
    f->len = len;
    f->fd = fd;
    f->meta = meta;
    f->itos = itos;
    out->map_len = len;
    return 0;
}

void tokens_unmap(cdl_dataset *d)
{
    token_file *f = d->map;
    if (f && f->addr)
        munmap(f->addr, f->len);
    if (f && f->fd >= 0)
        close(f->fd);
    if (f) {
        free(f->meta);
        tokens_itos_free(f->itos, d->classes);
    }
    cdl_free(f);
    d->map = NULL;
    d->map_len = 0;
}

int tokens_intact(const cdl_dataset *d)
{
    const token_file *f = d->map;
    struct stat st;
    if (!f || f->fd < 0 || fstat(f->fd, &st) != 0 || (size_t)st.st_size >= f->len)
        return 0;
    return cdl_error("%s is %lld bytes now but %zu when this run mapped it: it was cut or is "
                     "being rewritten while the run reads it (prepare.py run again into the "
                     "same folder?); reading past its new end would crash the run: write new "
                     "data to another folder, and resume once this file is whole again", f->name,
                     (long long)st.st_size, f->len);
}

size_t tokens_window_start(const cdl_dataset *d, int random, uint64_t seed, int epoch, long idx)
{
    size_t T = (size_t)d->label_len;
    if (!random)
        return (size_t)idx * T;
    rng_state r;
    /* One stream per (epoch, window index), as augment_draw: index < 2^31. */
    rng_seed2(&r, seed ^ WINDOW_DOMAIN, (uint64_t)(uint32_t)epoch << 40 ^ (uint64_t)idx);
    return (size_t)rng_below(&r, (uint64_t)(d->ntokens - T));
}

int tokens_window(const cdl_dataset *d, size_t start, float *x, int32_t *y)
{
    const int T = d->label_len;
    const uint8_t *p = d->tokens;
    unsigned mx = 0;
    if (d->token_bytes == 1) {
        for (int j = 0; j < T; j++) {
            x[j] = (float)p[start + j];
            y[j] = p[start + j + 1];
            mx = p[start + j + 1] > mx ? p[start + j + 1] : mx;
        }
        mx = p[start] > mx ? p[start] : mx;
    } else {
        unsigned prev = token_at(p, 2, start);
        mx = prev;
        for (int j = 0; j < T; j++) {
            unsigned next = token_at(p, 2, start + j + 1);
            x[j] = (float)prev;
            y[j] = (int32_t)next;
            mx = next > mx ? next : mx;
            prev = next;
        }
    }
    if (mx < (unsigned)d->classes)
        return 0;
    /* The first bad token of the window, named where it is in the file. */
    const token_file *f = d->map;
    for (size_t i = start; i <= start + (size_t)T; i++)
        if (token_at(p, d->token_bytes, i) >= (unsigned)d->classes)
            return bad_token(f ? f->name : d->name, token_at(p, d->token_bytes, i),
                             (f ? f->first : 0) + i, d->token_bytes, d->classes);
    return 0;
}

const char *tokens_source(const cdl_dataset *d, int *fd, size_t *offset)
{
    const token_file *f = d->map;
    *fd = f ? f->fd : -1;
    *offset = f ? f->first * (size_t)d->token_bytes : 0;
    return f ? f->name : "token data";
}
