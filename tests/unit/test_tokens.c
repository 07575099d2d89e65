/* Token datasets (text:FILE, tokens:DIR): the windows a loader hands out
 * are a pure function of (seed, epoch, window), the same for every world
 * size and worker count; the validation split is the file's last tokens
 * (or val.bin) in fixed windows; hostile files are errors naming the file
 * and what is wrong. */
#include "testutil.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/data/internal.h"

enum { T = 8, NTOK = 4001 };

static char tmpdir[256];

static void write_file(const char *name, const void *buf, size_t len, char *path, size_t plen)
{
    snprintf(path, plen, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* dir/name of count little-endian uint16 tokens, token i = first + i. */
static void write_ids(const char *name, int first, int count, char *path, size_t plen)
{
    uint8_t *b = malloc(2 * (size_t)count + 1);
    assert_non_null(b);
    for (int i = 0; i < count; i++) {
        b[2 * i] = (uint8_t)((first + i) & 255);
        b[2 * i + 1] = (uint8_t)((first + i) >> 8);
    }
    write_file(name, b, 2 * (size_t)count, path, plen);
    free(b);
}

static int setup(void **state)
{
    (void)state;
    return test_mkdtemp(tmpdir, sizeof tmpdir, "tokens");
}

static int teardown(void **state)
{
    (void)state;
    return test_rm_rf(tmpdir);
}

static void opts(cdl_dataset_options *o, int block, double val_split)
{
    cdl_dataset_options_defaults(o);
    o->block_size = block;
    o->vocab_size = 65536;
    o->val_split = val_split;
}

/* The first token of each of this rank's windows of epoch (x[0]: token i
 * holds i), checking that x and y are consecutive tokens of the file. */
static long collect(const cdl_dataset *d, int rank, int world, int workers, int shuffle,
                    int epoch, int pad, long *starts)
{
    cdl_loader_config c;
    cdl_loader_defaults(&c);
    c.batch_size = 5;
    c.shuffle = shuffle;
    c.pad = pad;
    c.workers = workers;
    c.seed = 42;
    c.rank = rank;
    c.world = world;
    cdl_loader *l = cdl_loader_create(d, &c);
    if (!l)
        fail_msg("%s", cdl_last_error());
    assert_int_equal(cdl_loader_start_epoch(l, epoch, 0), 0);
    cdl_batch b;
    long k = 0;
    int got;
    long base = d->tokens[0] | d->tokens[1] << 8;   /* the split's first token */
    while ((got = cdl_loader_next(l, &b)) == 1) {
        for (int i = 0; i < b.n; i++, k++) {
            long s = (long)b.x[(size_t)i * T];
            assert_true(s >= base && s - base + T < (long)d->ntokens);
            for (int j = 0; j < T; j++) {
                assert_true(b.x[(size_t)i * T + j] == (float)(s + j));
                assert_int_equal(b.y[(size_t)i * T + j], s + j + 1);
            }
            starts[k] = s;
        }
    }
    assert_int_equal(got, 0);
    assert_int_equal(k, cdl_loader_samples(l));
    cdl_loader_destroy(l);
    return k;
}

static void test_windows_independent_of_world_and_workers(void **state)
{
    (void)state;
    char path[512];
    write_ids("ids.bin", 0, NTOK, path, sizeof path);
    cdl_dataset_options o;
    opts(&o, T, 0);
    cdl_dataset d;
    assert_int_equal(cdl_dataset_load_with("tokens", path, 1, &o, &d), 0);
    /* 10% of 4001 tokens validate: the first 3601 train, 450 windows of 8. */
    assert_int_equal(d.ntokens, 3601);
    assert_int_equal(d.n, 450);
    assert_int_equal(d.classes, 65536);
    assert_int_equal(d.label_len, T);
    assert_int_equal(d.shape.c, T);

    long *ref = calloc(2000, sizeof *ref), *got = calloc(2000, sizeof *got);
    assert_non_null(ref);
    assert_non_null(got);
    assert_int_equal(collect(&d, 0, 1, 0, 1, 3, 0, ref), 450);
    int distinct = 0;
    for (int i = 1; i < 450; i++)
        distinct += ref[i] != ref[0];
    assert_true(distinct > 400);   /* random starts, not one window */

    const int worlds[] = {2, 3, 4}, workers[] = {0, 3};
    for (int w = 0; w < 3; w++)
        for (int k = 0; k < 2; k++)
            for (int r = 0; r < worlds[w]; r++) {
                long n = collect(&d, r, worlds[w], workers[k], 1, 3, 0, got);
                for (long i = 0; i < n; i++)
                    assert_int_equal(got[i], ref[r + i * worlds[w]]);
            }
    /* DistributedSampler's padding: every rank takes ceil(450/4) = 113,
     * the wrapped positions repeat the first windows. */
    for (int r = 0; r < 4; r++) {
        long n = collect(&d, r, 4, 1, 1, 3, 1, got);
        assert_int_equal(n, 113);
        for (long i = 0; i < n; i++)
            assert_int_equal(got[i], ref[(r + i * 4) % 450]);
    }
    /* Another epoch draws other windows; the same epoch the same ones. */
    collect(&d, 0, 1, 2, 1, 4, 0, got);
    assert_memory_not_equal(got, ref, 450 * sizeof *ref);
    collect(&d, 0, 1, 2, 1, 3, 0, got);
    assert_memory_equal(got, ref, 450 * sizeof *ref);
    free(ref);
    free(got);
    cdl_dataset_free(&d);
}

static void test_validation_split_fixed_windows(void **state)
{
    (void)state;
    char path[512];
    write_ids("ids.bin", 0, NTOK, path, sizeof path);
    cdl_dataset_options o;
    opts(&o, T, 0);
    cdl_dataset v;
    assert_int_equal(cdl_dataset_load_with("tokens", path, 0, &o, &v), 0);
    assert_int_equal(v.ntokens, 400);   /* the last 10%, contiguous */
    assert_int_equal(v.n, 399 / T);
    long starts[64];
    for (int world = 1; world <= 3; world++)
        for (int r = 0; r < world; r++) {
            long n = collect(&v, r, world, 1, 0, 5, 0, starts);
            /* Back to back from the split's first token, whatever the epoch. */
            for (long i = 0; i < n; i++)
                assert_int_equal(starts[i], 3601 + (r + i * world) * T);
        }
    cdl_dataset_free(&v);

    /* A count of tokens; and none: no validation split. */
    o.val_split = 1001;
    assert_int_equal(cdl_dataset_load_with("tokens", path, 0, &o, &v), 0);
    assert_int_equal(v.ntokens, 1001);
    cdl_dataset_free(&v);
    o.val_split = -1;
    assert_int_equal(cdl_dataset_load_with("tokens", path, 0, &o, &v), 1);
    assert_int_equal(cdl_dataset_load_with("tokens", path, 1, &o, &v), 0);
    assert_int_equal(v.ntokens, NTOK);
    cdl_dataset train = v;
    cdl_dataset val;
    assert_int_equal(cdl_dataset_split(&train, 10, 1, &val), -1);
    assert_non_null(strstr(cdl_last_error(), "token windows"));
    cdl_dataset_free(&v);
}

static void test_val_bin(void **state)
{
    (void)state;
    char path[512];
    write_ids("train.bin", 0, 1000, path, sizeof path);
    write_ids("val.bin", 30000, 100, path, sizeof path);
    cdl_dataset_options o;
    opts(&o, T, 0.5);   /* ignored: val.bin is the validation split */
    cdl_dataset d, v;
    assert_int_equal(cdl_dataset_load_with("tokens", tmpdir, 1, &o, &d), 0);
    assert_int_equal(d.ntokens, 1000);
    char spec[600];
    snprintf(spec, sizeof spec, "tokens:%s", tmpdir);
    assert_int_equal(cdl_dataset_load_with(spec, NULL, 0, &o, &v), 0);
    assert_int_equal(v.ntokens, 100);
    assert_string_equal(v.name, "tokens");
    long starts[16];
    assert_int_equal(collect(&v, 0, 1, 0, 0, 0, 0, starts), 99 / T);
    assert_int_equal(starts[1], 30000 + T);
    cdl_dataset_free(&d);
    cdl_dataset_free(&v);
}

static void test_text_bytes(void **state)
{
    (void)state;
    char path[512], text[300];
    for (int i = 0; i < 300; i++)
        text[i] = (char)(i * 7 % 256);
    write_file("t.txt", text, sizeof text, path, sizeof path);
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    o.block_size = 16;
    cdl_dataset d, v;
    assert_int_equal(cdl_dataset_load_with("text", path, 1, &o, &d), 0);
    assert_int_equal(cdl_dataset_load_with("text", path, 0, &o, &v), 0);
    assert_int_equal(d.classes, 256);
    assert_int_equal(d.token_bytes, 1);
    assert_int_equal(d.ntokens, 270);
    assert_int_equal(v.ntokens, 30);
    assert_int_equal(v.n, 1);
    cdl_loader_config c;
    cdl_loader_defaults(&c);
    c.batch_size = 4;
    c.world = 1;
    cdl_loader *l = cdl_loader_create(&v, &c);
    assert_non_null(l);
    assert_int_equal(cdl_loader_start_epoch(l, 0, 0), 0);
    cdl_batch b;
    assert_int_equal(cdl_loader_next(l, &b), 1);
    assert_int_equal(b.n, 1);
    for (int j = 0; j < 16; j++) {
        assert_true(b.x[j] == (float)(uint8_t)text[270 + j]);
        assert_int_equal(b.y[j], (uint8_t)text[271 + j]);
    }
    cdl_loader_destroy(l);
    /* Byte-level: any other vocabulary is refused. */
    o.vocab_size = 50257;
    cdl_dataset e;
    assert_int_equal(cdl_dataset_load_with("text", path, 1, &o, &e), -1);
    assert_non_null(strstr(cdl_last_error(), "byte-level"));
    cdl_dataset_free(&d);
    cdl_dataset_free(&v);
}

/* Pages of this process in memory (/proc/self/statm's resident), or -1. */
static long resident_pages(void)
{
    long size, rss = -1;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld %ld", &size, &rss) != 2)
        rss = -1;
    if (f)
        fclose(f);
    return rss;
}

/* Loading maps a token file and reads none of it: a full pass over a
 * corpus of gigabytes on every rank of every node before the first step.
 * Text needs no check (its bytes are below 256); a uint16 .bin's ids are
 * checked as windows are copied out (test_bad_ids_named_when_drawn). */
static void test_not_read_at_load(void **state)
{
    (void)state;
    enum { MB = 32 };
    char *text = malloc((size_t)MB << 20), path[512];
    assert_non_null(text);
    memset(text, 'a', (size_t)MB << 20);
    const char *names[2] = {"big.txt", "train.bin"};
    for (int bin = 0; bin < 2; bin++) {
        write_file(names[bin], text, (size_t)MB << 20, path, sizeof path);
        cdl_dataset_options o;
        cdl_dataset_options_defaults(&o);
        o.block_size = 16;
        long before = resident_pages();
        if (before < 0) {
            free(text);
            skip();   /* no /proc */
        }
        cdl_dataset d, v;
        assert_int_equal(cdl_dataset_load_with(bin ? "tokens" : "text", path, 1, &o, &d), 0);
        assert_int_equal(cdl_dataset_load_with(bin ? "tokens" : "text", path, 0, &o, &v), 0);
        long grew = resident_pages() - before;
        long pages = ((long)MB << 20) / sysconf(_SC_PAGESIZE);
        if (grew > pages / 8)
            fail_msg("loading %d MB of %s made %ld of its %ld pages resident", MB, names[bin],
                     grew, pages);
        cdl_dataset_free(&d);
        cdl_dataset_free(&v);
        unlink(path);
    }
    free(text);
}

/* The loader's batches of d (back to back, workers threads) until one
 * fails: its error must hold w1 and w2. */
/* A loader of d (batches of 5, one rank, seed 3) at epoch 0. */
static cdl_loader *started_loader(const cdl_dataset *d, int shuffle, int workers)
{
    cdl_loader_config c;
    cdl_loader_defaults(&c);
    c.batch_size = 5;
    c.shuffle = shuffle;
    c.workers = workers;
    c.seed = 3;
    c.world = 1;
    cdl_loader *l = cdl_loader_create(d, &c);
    assert_non_null(l);
    assert_int_equal(cdl_loader_start_epoch(l, 0, 0), 0);
    return l;
}

static void expect_batch_error(const cdl_dataset *d, int shuffle, int workers, const char *w1,
                               const char *w2)
{
    cdl_loader *l = started_loader(d, shuffle, workers);
    cdl_batch b;
    int got;
    while ((got = cdl_loader_next(l, &b)) == 1)
        for (int i = 0; i < b.n * d->label_len; i++)
            assert_true(b.y[i] < d->classes && b.x[i] < (float)d->classes);
    assert_int_equal(got, -1);
    const char *e = cdl_last_error();
    if (!strstr(e, w1) || (w2 && !strstr(e, w2)))
        fail_msg("error \"%s\" lacks \"%s\" / \"%s\"", e, w1, w2 ? w2 : "");
    cdl_loader_destroy(l);
}

/* A token past the vocabulary loads (nothing is read) but no window
 * holding it reaches a batch: the batch fails naming the file, the id and
 * its offset in the file, in either split, with or without workers. */
static void test_bad_ids_named_when_drawn(void **state)
{
    (void)state;
    char path[512];
    write_ids("big.bin", 0, 2000, path, sizeof path);
    cdl_dataset_options o;
    opts(&o, T, 0);
    o.vocab_size = 1234;
    cdl_dataset d;
    assert_int_equal(cdl_dataset_load_with("tokens", path, 1, &o, &d), 0);
    expect_batch_error(&d, 0, 0, "big.bin: token 1234 at token offset 1234 (byte 2468) is not "
                       "below the vocabulary size 1234", "--vocab-size");
    expect_batch_error(&d, 0, 2, "rank 0: ", "token 1234 at token offset 1234 ");
    expect_batch_error(&d, 1, 2, "big.bin: token 12", "is not below the vocabulary size 1234");
    cdl_dataset_free(&d);
    /* The validation split starts at token 1800: offsets are the file's. */
    o.vocab_size = 1900;
    assert_int_equal(cdl_dataset_load_with("tokens", path, 0, &o, &d), 0);
    expect_batch_error(&d, 0, 0, "token 1900 at token offset 1900 (byte 3800)", "big.bin");
    cdl_dataset_free(&d);
}

/* load must fail with an error holding each of the words. */
static void expect_error(const char *name, const char *path, int train,
                         const cdl_dataset_options *o, const char *w1, const char *w2)
{
    cdl_dataset d;
    assert_int_equal(cdl_dataset_load_with(name, path, train, o, &d), -1);
    const char *e = cdl_last_error();
    if (!strstr(e, w1) || (w2 && !strstr(e, w2)))
        fail_msg("error \"%s\" lacks \"%s\" / \"%s\"", e, w1, w2 ? w2 : "");
    assert_null(d.tokens);
    assert_null(d.map);
}

static void test_hostile_files(void **state)
{
    (void)state;
    char path[512];
    cdl_dataset_options o;
    opts(&o, T, 0);

    /* An odd byte count: not uint16 tokens. */
    uint8_t odd[101] = {0};
    write_file("odd.bin", odd, sizeof odd, path, sizeof path);
    expect_error("tokens", path, 1, &o, "odd.bin", "101 bytes is not a whole number");

    /* Empty files, a missing train.bin, a directory as a file. */
    o.vocab_size = 0;
    write_file("empty.txt", "", 0, path, sizeof path);
    expect_error("text", path, 1, &o, "empty.txt is empty", NULL);
    expect_error("text", tmpdir, 1, &o, "not a regular file", NULL);
    char sub[600];
    snprintf(sub, sizeof sub, "%s/none", tmpdir);
    assert_int_equal(mkdir(sub, 0700), 0);
    expect_error("tokens", sub, 1, &o, "train.bin", "prepare.py");
    expect_error("text", NULL, 1, &o, "needs --data-dir", NULL);

    /* Windows longer than the data, in either split. */
    write_ids("short.bin", 0, 40, path, sizeof path);
    o.block_size = 40;
    expect_error("tokens", path, 1, &o, "fewer than --block-size 40 + 1", "short.bin");
    o.block_size = 4;
    expect_error("tokens", path, 0, &o, "validation split holds 4 tokens", NULL);
    o.val_split = 40;
    expect_error("tokens", path, 1, &o, "--val-split 40 takes all of its 40 tokens", NULL);
    o.val_split = 0;
    o.block_size = (1 << 20) + 1;
    expect_error("tokens", path, 1, &o, "--block-size 1048577", NULL);
}

/* A .bin cut short while a loader reads it (prepare.py run again into
 * the same folder truncates it, then writes): the next batch is an error
 * naming the file and its sizes; reading the mapping past the new end
 * would kill the process with SIGBUS, without a word. */
static void test_file_cut_while_read(void **state)
{
    (void)state;
    char path[512];
    write_ids("cut.bin", 0, NTOK, path, sizeof path);
    cdl_dataset_options o;
    opts(&o, T, 0);
    cdl_dataset d;
    assert_int_equal(cdl_dataset_load_with("tokens", path, 1, &o, &d), 0);
    cdl_loader *l = started_loader(&d, 0, 0);
    cdl_batch b;
    assert_int_equal(cdl_loader_next(l, &b), 1);
    assert_int_equal(truncate(path, 10), 0);
    assert_int_equal(cdl_loader_next(l, &b), -1);
    if (!strstr(cdl_last_error(), "cut.bin is 10 bytes now but 8002 when this run mapped it"))
        fail_msg("%s", cdl_last_error());
    cdl_loader_destroy(l);
    cdl_dataset_free(&d);
}

/* The training split of tmpdir with pkl (len bytes) as its meta.pkl. */
static void load_with_meta(const char *pkl, size_t len, const cdl_dataset_options *o,
                           cdl_dataset *d)
{
    char path[512];
    write_file("meta.pkl", pkl, len, path, sizeof path);
    if (cdl_dataset_load_with("tokens", tmpdir, 1, o, d) != 0)
        fail_msg("%s", cdl_last_error());
}

/* nanoGPT's char-level prepare.py writes DIR/meta.pkl {'vocab_size': N,
 * ...}; without --vocab-size the vocabulary is N, not GPT-2's 50257. The
 * pickles are Python 3's of {'vocab_size': 27, 'itos': {0: '\n'}} by
 * protocols 4, 2 and 0. */
static void test_meta_pkl(void **state)
{
    (void)state;
    static const char p4[] = "\x80\x04\x95\x24\0\0\0\0\0\0\0}\x94(\x8c\x0avocab_size\x94K\x1b"
                             "\x8c\x04itos\x94}\x94K\0\x8c\x01\n\x94su.";
    static const char p2[] = "\x80\x02}q\0(X\x0a\0\0\0vocab_sizeq\x01K\x1bX\x04\0\0\0itosq\x02"
                             "}q\x03K\0X\x01\0\0\0\nq\x04su.";
    static const char p0[] = "(dp0\nVvocab_size\np1\nI27\nsVitos\np2\n(dp3\nI0\nV\\u000a\np4\nss.";
    static const char np[] = "\x80\x04}\x94(\x8c\x0avocab_size\x94\x8c\x15numpy.core.multiarray"
                             "\x94\x8c\x06scalar\x94\x93\x94N\x85Ru.";
    const struct { const char *pkl; size_t len; } ok[] = {
        {p4, sizeof p4 - 1}, {p2, sizeof p2 - 1}, {p0, sizeof p0 - 1}};
    char path[512];
    write_ids("train.bin", 0, 27, path, sizeof path);   /* ids 0..26 */
    write_ids("val.bin", 0, 27, path, sizeof path);
    cdl_dataset_options o;
    opts(&o, 4, 0);
    o.vocab_size = 0;
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
        cdl_dataset d;
        load_with_meta(ok[k].pkl, ok[k].len, &o, &d);
        assert_int_equal(d.classes, 27);
        cdl_dataset_free(&d);
    }
    /* An id of the file past it: the error names meta.pkl's vocabulary. */
    write_ids("val.bin", 3, 25, path, sizeof path);   /* 27 at 24: the last window's */
    cdl_dataset d;
    assert_int_equal(cdl_dataset_load_with("tokens", tmpdir, 0, &o, &d), 0);
    expect_batch_error(&d, 0, 0, "token 27 at token offset 24", "vocabulary size 27");
    cdl_dataset_free(&d);
    write_ids("val.bin", 0, 27, path, sizeof path);
    /* --vocab-size overrides it. */
    o.vocab_size = 300;
    assert_int_equal(cdl_dataset_load_with("tokens", tmpdir, 1, &o, &d), 0);
    assert_int_equal(d.classes, 300);
    cdl_dataset_free(&d);
    o.vocab_size = 0;
    /* What the reader cannot take asks for --vocab-size. */
    write_file("meta.pkl", np, sizeof np - 1, path, sizeof path);
    expect_error("tokens", tmpdir, 1, &o, "not a plain integer", "--vocab-size N");
    write_file("meta.pkl", p4, 30, path, sizeof path);
    expect_error("tokens", tmpdir, 1, &o, "meta.pkl: the pickle ends before", "--vocab-size N");
    write_file("meta.pkl", "\x80\x04}\x94.", 5, path, sizeof path);
    expect_error("tokens", tmpdir, 1, &o, "meta.pkl has no vocab_size entry", "--vocab-size N");
    write_file("meta.pkl", "\x80\x04\xff", 3, path, sizeof path);
    expect_error("tokens", tmpdir, 1, &o, "byte 2 (opcode 0xff)", "--vocab-size N");
}

/* nanoGPT's itos table (what sample.py decodes with) comes with the
 * vocabulary, by protocols 0 (raw-unicode-escape: \\u escapes, Latin-1
 * bytes), 2 and 4 (UTF-8): Python 3's pickles of {'vocab_size': 4, 'itos':
 * {0: '\n', 1: 'é', 2: '\\', 3: '€'}, 'stoi': {...}}. A table that is not
 * every id once is left out; --vocab-size reads no meta.pkl. */
static void test_meta_pkl_itos(void **state)
{
    (void)state;
    static const char p0[] =
        "(dp0\nVvocab_size\np1\nI4\nsVitos\np2\n(dp3\nI0\nV\\u000a\np4\nsI1\nV\xe9\np5\nsI2\n"
        "V\\u005c\np6\nsI3\nV\\u20ac\np7\nssVstoi\np8\n(dp9\ng4\nI0\nsg5\nI1\nsg6\nI2\nsg7\n"
        "I3\nss.";
    static const char p2[] =
        "\x80\x02}q\x00(X\x0a\x00\x00\x00vocab_sizeq\x01K\x04X\x04\x00\x00\x00itosq\x02}q\x03"
        "(K\x00X\x01\x00\x00\x00\nq\x04K\x01X\x02\x00\x00\x00\xc3\xa9q\x05K\x02X\x01\x00\x00"
        "\x00\\q\x06K\x03X\x03\x00\x00\x00\xe2\x82\xacq\x07uX\x04\x00\x00\x00stoiq\x08}q\x09"
        "(h\x04K\x00h\x05K\x01h\x06K\x02h\x07K\x03uu.";
    static const char p4[] =
        "\x80\x04\x95U\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x0avocab_size\x94K\x04\x8c\x04"
        "itos\x94}\x94(K\x00\x8c\x01\n\x94K\x01\x8c\x02\xc3\xa9\x94K\x02\x8c\x01\\\x94K\x03"
        "\x8c\x03\xe2\x82\xac\x94u\x8c\x04stoi\x94}\x94(h\x04K\x00h\x05K\x01h\x06K\x02h\x07"
        "K\x03uu.";
    const struct { const char *pkl; size_t len; } ok[] = {
        {p0, sizeof p0 - 1}, {p2, sizeof p2 - 1}, {p4, sizeof p4 - 1}};
    const char *want[4] = {"\n", "\xc3\xa9", "\\", "\xe2\x82\xac"};
    char path[512];
    write_ids("train.bin", 0, 4, path, sizeof path);
    write_ids("val.bin", 0, 4, path, sizeof path);
    cdl_dataset_options o;
    opts(&o, 2, 0);
    o.vocab_size = 0;
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) {
        cdl_dataset d;
        load_with_meta(ok[k].pkl, ok[k].len, &o, &d);
        assert_int_equal(d.classes, 4);
        assert_non_null(strstr(tokens_vocab_file(&d), "/meta.pkl"));
        char *const *itos = tokens_itos(&d);
        if (!itos)
            fail_msg("pickle %zu: no itos table", k);
        for (int i = 0; i < 4; i++)
            assert_string_equal(itos[i], want[i]);
        cdl_dataset_free(&d);
    }
    /* vocab_size 5 with 4 entries: no table, still the vocabulary. */
    char p5[sizeof p4];
    memcpy(p5, p4, sizeof p4);
    p5[28] = 5;   /* K 4 -> K 5 */
    assert_int_equal(p5[27], 'K');
    write_file("meta.pkl", p5, sizeof p4 - 1, path, sizeof path);
    cdl_dataset d;
    assert_int_equal(cdl_dataset_load_with("tokens", tmpdir, 1, &o, &d), 0);
    assert_int_equal(d.classes, 5);
    assert_null(tokens_itos(&d));
    cdl_dataset_free(&d);
    /* --vocab-size: meta.pkl is not read. */
    o.vocab_size = 4;
    assert_int_equal(cdl_dataset_load_with("tokens", tmpdir, 1, &o, &d), 0);
    assert_null(tokens_vocab_file(&d));
    assert_null(tokens_itos(&d));
    cdl_dataset_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_windows_independent_of_world_and_workers, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_validation_split_fixed_windows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_val_bin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_read_at_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_ids_named_when_drawn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_cut_while_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_meta_pkl, setup, teardown),
        cmocka_unit_test_setup_teardown(test_meta_pkl_itos, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
