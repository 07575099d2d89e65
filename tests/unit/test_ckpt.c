/* Safetensors checkpoints: round trips, strict rejection of corrupt files,
 * atomic replacement, base64. Every test works in its own temporary
 * directory. */
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "lib/ckpt/atomic.h"
#include "lib/core/rng.h"
#include "lib/train/keep.h"

typedef struct fixture {
    char dir[256];
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    const char *tmp = getenv("TMPDIR");
    snprintf(fx->dir, sizeof fx->dir, "%s/cdl-ckpt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

/* Removes dir and everything below it (the tests make at most two levels). */
static void remove_tree(const char *dir)
{
    chmod(dir, 0700);
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            struct stat st;
            if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
                remove_tree(p);
            else
                unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

static int teardown(void **state)
{
    fixture *fx = *state;
    remove_tree(fx->dir);
    free(fx);
    return 0;
}

static const char *in_dir(void **state, const char *name, char *buf, size_t len)
{
    fixture *fx = *state;
    snprintf(buf, len, "%s/%s", fx->dir, name);
    return buf;
}

/* Number of entries of dir starting with ".": leftover temporary files. */
static int hidden_files(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] == '.' && strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len + 1);
    assert_int_equal(fread(buf, 1, (size_t)len, fp), (size_t)len);
    fclose(fp);
    *n = (size_t)len;
    return buf;
}

/* A hand-made file: header length n_claimed (or the JSON's length if 0),
 * the JSON, then data_len bytes of data. */
static void write_raw(const char *path, uint64_t n_claimed, const char *json, size_t data_len)
{
    size_t jl = strlen(json);
    uint64_t n = n_claimed ? n_claimed : jl;
    size_t total = 8 + jl + data_len;
    unsigned char *buf = calloc(1, total);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, json, jl);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + jl + i] = (unsigned char)(i * 7);
    write_bytes(path, buf, total);
    free(buf);
}

/* A file of the header json and the data section data (n bytes). */
static void write_st(const char *path, const char *json, const unsigned char *data, size_t n)
{
    size_t jl = strlen(json);
    unsigned char *buf = calloc(1, 8 + jl + n);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)jl >> (8 * i));
    memcpy(buf + 8, json, jl);
    memcpy(buf + 8 + jl, data, n);
    write_bytes(path, buf, 8 + jl + n);
    free(buf);
}

/* The file must be rejected with a message naming it and containing want. */
static void expect_reject(const char *path, const char *want)
{
    cdl_st_file *f = cdl_st_open(path);
    if (f)
        fail_msg("%s was accepted, expected an error containing \"%s\"", path, want);
    const char *msg = cdl_last_error();
    if (!strstr(msg, path) || !strstr(msg, want))
        fail_msg("error \"%s\" should name %s and contain \"%s\"", msg, path, want);
}

/* Random bit patterns: every float, NaN payloads, -0 and denormals included. */
static float *random_floats(rng_state *r, size_t n)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)rng_next(r);
        memcpy(&x[i], &u, 4);
    }
    return x;
}

/* ------------------------------------------------------------ round trips */

static void test_round_trip(void **state)
{
    char path[512];
    in_dir(state, "model.safetensors", path, sizeof path);
    rng_state r;
    rng_seed(&r, 42);
    cdl_st_tensor t[] = {
        {"conv1.weight", NULL, 4, {6, 1, 5, 5}, NULL},
        {"conv1.bias", NULL, 1, {6}, NULL},
        {"scalar", NULL, 0, {0}, NULL},
        {"empty", NULL, 2, {0, 3}, NULL},
        {"fc1.weight", NULL, 2, {120, 400}, NULL},
        {"name with \"quotes\", \\ and \t", NULL, 1, {3}, NULL},
    };
    const int nt = (int)(sizeof t / sizeof t[0]);
    size_t numel[6];
    for (int i = 0; i < nt; i++) {
        numel[i] = 1;
        for (int d = 0; d < t[i].ndim; d++)
            numel[i] *= (size_t)t[i].shape[d];
        t[i].data = random_floats(&r, numel[i]);
    }
    const cdl_st_meta meta[] = {
        {"epoch", "7"},
        {"config", "{\"lr\": 0.1, \"path\": \"C:\\\\runs\"}\n\tnext\x01\x1f"},
        {"unicode", "h\xc3\xa9llo \xe2\x98\x83 \xf0\x9f\x98\x80"},
        {"", "empty key"},
        {"empty value", ""},
    };
    const int nm = (int)(sizeof meta / sizeof meta[0]);
    assert_int_equal(cdl_st_write(path, t, nt, meta, nm), 0);

    cdl_st_file *f = cdl_st_open(path);
    assert_non_null(f);
    assert_string_equal(cdl_st_path(f), path);
    assert_int_equal(cdl_st_count(f), nt);
    for (int i = 0; i < nt; i++) {
        assert_string_equal(cdl_st_name(f, i), t[i].name);   /* the order given */
        assert_int_equal(cdl_st_find(f, t[i].name), i);
        int ndim;
        int64_t shape[8];
        assert_int_equal(cdl_st_shape(f, i, &ndim, shape), 0);
        assert_int_equal(ndim, t[i].ndim);
        for (int d = 0; d < ndim; d++)
            assert_int_equal(shape[d], t[i].shape[d]);
        size_t n = 99;
        const float *x = cdl_st_data(f, i, &n);
        assert_non_null(x);
        assert_int_equal(n, numel[i]);
        if (n)
            assert_memory_equal(x, t[i].data, n * 4);   /* bitwise, NaNs too */
    }
    assert_int_equal(cdl_st_find(f, "conv2.weight"), -1);
    assert_non_null(strstr(cdl_last_error(), "conv2.weight"));
    /* The writer's checksum entry comes last, verified. */
    assert_int_equal(cdl_st_meta_count(f), nm + 1);
    assert_string_equal(cdl_st_meta_key(f, nm), "cdl_checksum");
    assert_int_equal(cdl_st_checksummed(f), 1);
    for (int i = 0; i < nm; i++) {
        assert_string_equal(cdl_st_meta_key(f, i), meta[i].key);
        assert_string_equal(cdl_st_meta_get(f, meta[i].key), meta[i].value);
    }
    assert_null(cdl_st_meta_get(f, "missing"));
    assert_null(cdl_st_name(f, nt));
    assert_non_null(strstr(cdl_last_error(), "out of range"));
    assert_null(cdl_st_data(f, -1, NULL));
    cdl_st_close(f);
    for (int i = 0; i < nt; i++)
        free((void *)t[i].data);

    /* The header is padded to a multiple of 8, so the data is 8-aligned. */
    size_t len;
    unsigned char *raw = read_bytes(path, &len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | raw[i];
    assert_int_equal(hl % 8, 0);
    assert_int_equal(raw[8], '{');
    free(raw);
}

/* The exact bytes, so the format cannot drift unnoticed. */
static void test_exact_bytes(void **state)
{
    char path[512];
    in_dir(state, "small.safetensors", path, sizeof path);
    const float a[2] = {1.0f, -2.0f};
    const cdl_st_tensor t[] = {{"a", a, 1, {2}, NULL}, {"b", a, 0, {0}, NULL}};
    const cdl_st_meta m[] = {{"k", "v\"\n"}};
    assert_int_equal(cdl_st_write(path, t, 2, m, 1), 0);
    const char json[] = "{\"__metadata__\":{\"k\":\"v\\\"\\n\","
                        "\"cdl_checksum\":\"crc32 data=08a89dc0 header=defe9320\"},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]}}";
    size_t jl = strlen(json), padded = (jl + 7) / 8 * 8, len;
    unsigned char *raw = read_bytes(path, &len);
    assert_int_equal(len, 8 + padded + 12);
    assert_int_equal(raw[0], padded);
    for (int i = 1; i < 8; i++)
        assert_int_equal(raw[i], 0);
    assert_memory_equal(raw + 8, json, jl);
    for (size_t i = jl; i < padded; i++)
        assert_int_equal(raw[8 + i], ' ');
    const unsigned char data[12] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 0, 0, 0x80, 0x3f};
    assert_memory_equal(raw + 8 + padded, data, 12);
    free(raw);
}

/* I64 tensors (BatchNorm's num_batches_tracked): written little-endian,
 * read back exactly also when an odd-sized F32 tensor before them leaves
 * them off 8-byte alignment; each accessor refuses the other dtype. */
static void test_i64(void **state)
{
    char path[512];
    in_dir(state, "i64.safetensors", path, sizeof path);
    const float x[3] = {1.5f, -2.0f, 0.25f};
    const int64_t n[3] = {0, -1, INT64_MAX};
    const int64_t one = 3;
    const cdl_st_tensor t[] = {{"w", x, 1, {3}, NULL}, {"bn.num_batches_tracked", NULL, 0, {0}, &one},
                               {"ints", NULL, 1, {3}, n}};
    assert_int_equal(cdl_st_write(path, t, 3, NULL, 0), 0);
    size_t len;
    unsigned char *raw = read_bytes(path, &len);
    const char *entry = "\"ints\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[20,44]}";
    assert_non_null(memmem(raw, len, entry, strlen(entry)));
    const unsigned char le[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_memory_equal(raw + len - 24, le, 16);
    free(raw);
    cdl_st_file *f = cdl_st_open(path);
    assert_non_null(f);
    assert_true(cdl_st_checksummed(f));
    int i = cdl_st_find(f, "ints"), k = cdl_st_find(f, "bn.num_batches_tracked");
    size_t numel = 0;
    const int64_t *got = cdl_st_data_i64(f, i, &numel);
    assert_non_null(got);
    assert_int_equal(numel, 3);
    assert_memory_equal(got, n, sizeof n);
    got = cdl_st_data_i64(f, k, &numel);
    assert_int_equal(numel, 1);
    assert_int_equal(got[0], 3);
    assert_string_equal(cdl_st_dtype(f, i), "I64");
    assert_string_equal(cdl_st_dtype(f, cdl_st_find(f, "w")), "F32");
    assert_null(cdl_st_data(f, i, &numel));
    assert_non_null(strstr(cdl_last_error(), "is I64"));
    assert_null(cdl_st_data_i64(f, cdl_st_find(f, "w"), &numel));
    assert_non_null(strstr(cdl_last_error(), "'w' is F32 where I64"));
    cdl_st_close(f);
}

static void test_empty_lists(void **state)
{
    char path[512];
    in_dir(state, "empty.safetensors", path, sizeof path);
    assert_int_equal(cdl_st_write(path, NULL, 0, NULL, 0), 0);
    cdl_st_file *f = cdl_st_open(path);
    assert_non_null(f);
    assert_int_equal(cdl_st_count(f), 0);
    assert_int_equal(cdl_st_meta_count(f), 1);   /* the checksum */
    assert_int_equal(cdl_st_find(f, "x"), -1);
    cdl_st_close(f);

    const cdl_st_meta m[] = {{"only", "metadata"}};
    assert_int_equal(cdl_st_write(path, NULL, 0, m, 1), 0);
    f = cdl_st_open(path);
    assert_non_null(f);
    assert_int_equal(cdl_st_count(f), 0);
    assert_string_equal(cdl_st_meta_get(f, "only"), "metadata");
    cdl_st_close(f);
}

/* Other writers may list tensors in any header order, use \u escapes,
 * other dtypes and unaligned offsets: all valid. */
static void test_foreign_but_valid(void **state)
{
    char path[512];
    in_dir(state, "foreign.safetensors", path, sizeof path);
    const char *json =
        "  {\"z\": {\"shape\": [1], \"data_offsets\": [3, 7], \"dtype\": \"F32\"},\n"
        "   \"__metadata__\": {\"format\": \"pt\", \"\\u00e9\\ud83d\\ude00\": \"\\\"\\/\\b\\f\"},\n"
        "   \"\\u0041b\": {\"dtype\": \"U8\", \"shape\": [3], \"data_offsets\": [0, 3]},\n"
        "   \"h\": {\"dtype\": \"BF16\", \"shape\": [2, 1], \"data_offsets\": [7, 11]}}   ";
    const unsigned char data[11] = {1, 2, 3, 0, 0, 0x40, 0x40, 9, 9, 9, 9};   /* z = 3.0f */
    write_st(path, json, data, sizeof data);

    cdl_st_file *f = cdl_st_open(path);
    if (!f)
        fail_msg("%s", cdl_last_error());
    assert_int_equal(cdl_st_count(f), 3);
    /* Listed in offset order. */
    assert_string_equal(cdl_st_name(f, 0), "Ab");
    assert_string_equal(cdl_st_name(f, 1), "z");
    assert_string_equal(cdl_st_name(f, 2), "h");
    size_t n;
    const float *z = cdl_st_data(f, 1, &n);
    assert_non_null(z);
    assert_int_equal(n, 1);
    assert_true(z[0] == 3.0f);
    assert_int_equal((uintptr_t)z % 4, 0);
    assert_null(cdl_st_data(f, 0, &n));
    assert_non_null(strstr(cdl_last_error(), "'Ab' is U8"));
    assert_null(cdl_st_data(f, cdl_st_find(f, "h"), &n));
    assert_non_null(strstr(cdl_last_error(), "BF16"));
    int ndim;
    int64_t shape[8];
    assert_int_equal(cdl_st_shape(f, 2, &ndim, shape), 0);
    assert_int_equal(ndim, 2);
    assert_int_equal(shape[0], 2);
    assert_string_equal(cdl_st_meta_get(f, "\xc3\xa9\xf0\x9f\x98\x80"), "\"/\b\f");
    assert_string_equal(cdl_st_meta_get(f, "format"), "pt");
    cdl_st_close(f);
}

/* Half, bfloat16 and double tensors read as float32, as PyTorch's
 * load_state_dict copies them into a float model: halves exactly
 * (normal, subnormal, zero signs, inf, NaN), bfloat16 as float's upper half,
 * doubles rounded; odd offsets; a double beyond float32, an integer dtype
 * and a wrong count are errors naming the tensor. */
static void test_data_float(void **state)
{
    char path[512];
    in_dir(state, "half.safetensors", path, sizeof path);
    const char *json =
        "{\"h\":{\"dtype\":\"F16\",\"shape\":[7],\"data_offsets\":[0,14]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[14,18]},"
        "\"u\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[18,19]},"
        "\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[19,35]},"
        "\"big\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[35,43]}}";
    unsigned char d[43];
    /* 1.0, -2.5, 2^-24 (the least subnormal), 0x03ff (the largest), -0, inf, NaN */
    const uint16_t h[7] = {0x3c00, 0xc100, 0x0001, 0x03ff, 0x8000, 0x7c00, 0x7e00};
    for (int i = 0; i < 7; i++) {
        d[2 * i] = (unsigned char)h[i];
        d[2 * i + 1] = (unsigned char)(h[i] >> 8);
    }
    d[14] = 0x80, d[15] = 0x3f;   /* bf16 1.0 */
    d[16] = 0xc0, d[17] = 0xc0;   /* bf16 -6.0 */
    d[18] = 7;
    const double dv[3] = {0.1, -1e-300, 1e300};   /* at odd offsets 19 and 35 */
    for (int k = 0; k < 3; k++) {
        uint64_t u;
        memcpy(&u, &dv[k], 8);
        for (int i = 0; i < 8; i++)
            d[19 + 8 * k + i] = (unsigned char)(u >> (8 * i));
    }
    write_st(path, json, d, sizeof d);
    cdl_st_file *f = cdl_st_open(path);
    if (!f)
        fail_msg("%s", cdl_last_error());
    float out[7];
    assert_int_equal(cdl_st_data_float(f, cdl_st_find(f, "h"), out, 7), 0);
    assert_true(out[0] == 1.0f && out[1] == -2.5f);
    assert_true(out[2] == 0x1p-24f && out[3] == 1023 * 0x1p-24f);
    assert_true(out[4] == 0 && signbit(out[4]));
    assert_true(isinf(out[5]) && out[5] > 0 && isnan(out[6]));
    assert_int_equal(cdl_st_data_float(f, cdl_st_find(f, "b"), out, 2), 0);
    assert_true(out[0] == 1.0f && out[1] == -6.0f);
    assert_int_equal(cdl_st_data_float(f, cdl_st_find(f, "d"), out, 2), 0);
    assert_true(out[0] == 0.1f && out[1] == -0.0f && signbit(out[1]));
    assert_int_equal(cdl_st_data_float(f, cdl_st_find(f, "big"), out, 1), -1);
    assert_non_null(strstr(cdl_last_error(), "tensor 'big' holds 1e+300 at index 0, beyond float32"));
    assert_int_equal(cdl_st_data_float(f, cdl_st_find(f, "u"), out, 1), -1);
    assert_non_null(strstr(cdl_last_error(), "tensor 'u' is U8, not a floating-point type"));
    assert_int_equal(cdl_st_data_float(f, cdl_st_find(f, "b"), out, 3), -1);
    assert_non_null(strstr(cdl_last_error(), "tensor 'b' holds 2 values, expected 3"));
    cdl_st_close(f);
}

/* ------------------------------------------------------------ rejection */

static const char *T1 = "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";

static void reject_json(void **state, const char *json, size_t data_len, const char *want)
{
    char path[512];
    in_dir(state, "bad.safetensors", path, sizeof path);
    write_raw(path, 0, json, data_len);
    expect_reject(path, want);
}

static void test_reject_truncated(void **state)
{
    char path[512];
    in_dir(state, "short.safetensors", path, sizeof path);
    write_bytes(path, "\x10\0\0", 3);
    expect_reject(path, "too short");
    write_bytes(path, "", 0);
    expect_reject(path, "too short");

    /* A valid file cut short loses the end of its last tensor. */
    const float x[4] = {1, 2, 3, 4};
    const cdl_st_tensor t[] = {{"w", x, 2, {2, 2}, NULL}};
    assert_int_equal(cdl_st_write(path, t, 1, NULL, 0), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 3), 0);
    expect_reject(path, "truncated: tensor 'w' ends at data byte 16 but the file holds only 13");
    /* ...or inside its header. */
    assert_int_equal(truncate(path, 20), 0);
    expect_reject(path, "exceeds the 12 bytes after the length field");

    char missing[512];
    in_dir(state, "no/such.safetensors", missing, sizeof missing);
    expect_reject(missing, "No such file");
    expect_reject(in_dir(state, "", path, sizeof path), "not a regular file");
}

/* A FIFO in place of a checkpoint (--init, --resume, cdl-eval's
 * CHECKPOINT) is refused, not a wait for a writer that never comes; in a
 * child with an alarm, so the old behaviour fails instead of hanging. */
static void test_reject_fifo(void **state)
{
    char path[512];
    in_dir(state, "fifo.safetensors", path, sizeof path);
    assert_int_equal(mkfifo(path, 0600), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        int ok = !cdl_st_open(path) && strstr(cdl_last_error(), path) &&
                 strstr(cdl_last_error(), "not a regular file (a FIFO)");
        _exit(ok ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("a FIFO was not refused (status 0x%x)", status);
    assert_int_equal(unlink(path), 0);
}

static void test_reject_header_length(void **state)
{
    char path[512];
    in_dir(state, "len.safetensors", path, sizeof path);
    char json[128];
    snprintf(json, sizeof json, "{%s}", T1);
    write_raw(path, strlen(json) + 5, json, 4);
    expect_reject(path, "header length");
    write_raw(path, (uint64_t)CDL_ST_MAX_HEADER + 1, json, 4);
    expect_reject(path, "exceeds the safetensors limit");
    write_raw(path, UINT64_MAX, json, 4);
    expect_reject(path, "exceeds the safetensors limit");
    write_raw(path, 1, "{", 0);
    expect_reject(path, "too small");
    /* torch.save's files (nanoGPT's ckpt.pt) are named, with the way to
     * convert them, not called corrupt: a zip archive, an old pickle. */
    static const char zip[] = "PK\x03\x04\x14\0\0\x08" "archive/data.pkl";
    static const char pkl[] = "\x80\x02\x8a\x0a" "\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19" ".";
    const char *torch_files[] = {zip, pkl};
    const size_t sizes[] = {sizeof zip - 1, sizeof pkl - 1};
    for (int k = 0; k < 2; k++) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(torch_files[k], 1, sizes[k], f), sizes[k]);
        assert_int_equal(fclose(f), 0);
        expect_reject(path, k ? "is a Python pickle (PyTorch's torch.save"
                              : "is a zip archive (PyTorch's torch.save");
        expect_reject(path, "st.save_file(");
        expect_reject(path, "pytorch/nanogpt_ckpt.py to-cdl");
    }
}

static void test_reject_bad_json(void **state)
{
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", "ends inside an object"},
        {"[1]", "must be a JSON object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},}", "trailing ','"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,],\"data_offsets\":[0,4]}}", "trailing ','"},
        {"{\"a\":{\"dtype\":\"F32\" \"shape\":[1],\"data_offsets\":[0,4]}}", "expected ',' or '}'"},
        {"{\"a\" {\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "expected ':'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "a negative number"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", "fraction or exponent"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e0],\"data_offsets\":[0,4]}}", "fraction or exponent"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}", "leading zero"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[true],\"data_offsets\":[0,4]}}", "a boolean"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":null,\"data_offsets\":[0,4]}}", "must be an array"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}",
         "does not fit in 64 bits"},
        {"{\"a\nb\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "raw control character"},
        {"{\"a\\qb\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "invalid escape"},
        {"{\"\\ud800\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "not followed by a low"},
        {"{\"\\udc00\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "lone low surrogate"},
        {"{\"\\u12\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "4 hex digits"},
        {"{\"\\u0000\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "NUL"},
        {"{\"\xc3\x28\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "invalid UTF-8"},
        {"{\"\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "invalid UTF-8"},
        {"{\"\xed\xa0\x80\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "invalid UTF-8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", "'x' after the header"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}\0\0\0", "byte 0x00 after"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]", "ends inside an object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}, \"b", "ends inside a string"},
        {"{\"a\":[]}", "expected an object"},
        {"{1:2}", "expected a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        in_dir(state, "json.safetensors", path, sizeof path);
        /* Embedded NULs in the JSON: the length is the literal's up to the
         * last closing character plus explicit NULs for the 0x00 case. */
        size_t jl = strlen(cases[i].json) + (strstr(cases[i].want, "0x00") ? 3 : 0);
        unsigned char buf[256] = {0};
        buf[0] = (unsigned char)jl;
        memcpy(buf + 8, cases[i].json, jl);
        write_bytes(path, buf, 8 + jl + 4);
        expect_reject(path, cases[i].want);
        assert_non_null(strstr(cdl_last_error(), "header byte"));
    }
}

static void test_reject_fields(void **state)
{
    reject_json(state, "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'a': header byte");
    reject_json(state, "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "missing field \"dtype\"");
    reject_json(state, "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "missing field \"shape\"");
    reject_json(state, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing field \"data_offsets\"");
    reject_json(state, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
                "unknown field \"x\"");
    reject_json(state, "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                4, "\"dtype\" appears twice");
    reject_json(state, "{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                "unknown dtype \"F33\"");
    reject_json(state, "{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                "\"dtype\" must be a string");
    reject_json(state, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
                "has 1 elements, not 2");
    reject_json(state, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4,
                "more than 2 elements");
    reject_json(state, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
                4, "more than 8 dimensions");
    reject_json(state, "{\"a\":{\"dtype\":\"F32\",\"shape\":[9223372036854775808],\"data_offsets\":[0,4]}}",
                4, "too large");
    reject_json(state, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}",
                4, "shape [4294967296,4294967296] is too large");
    reject_json(state, "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
                "does not fill whole bytes");
}

static void test_reject_layout(void **state)
{
    /* The example from the design: 120*400 floats are 192000 bytes. */
    reject_json(state, "{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[120,400],\"data_offsets\":[0,191996]}}",
                191996, "tensor 'fc1.weight': shape [120,400] of F32 needs 192000 bytes but "
                "data_offsets span 191996");
    reject_json(state, "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,0]}}", 4,
                "end before they begin");
    reject_json(state, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                "tensor 'a': data_offsets start at 4 but the data before it ends at 0: a gap of 4");
    reject_json(state,
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, "a gap of 4 bytes");
    reject_json(state,
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                "tensor 'b': data_offsets [4,8] overlap tensor 'a' ending at 8");
    reject_json(state, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6,
                "2 trailing bytes after the last tensor's data");
    reject_json(state, "{}", 1, "1 trailing bytes");
    reject_json(state,
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                "two tensors are named 'a'");
}

static void test_reject_metadata(void **state)
{
    char json[256];
    snprintf(json, sizeof json, "{\"__metadata__\":{\"epoch\":7},%s}", T1);
    reject_json(state, json, 4, "__metadata__ value of 'epoch' is a number: metadata values must be strings");
    snprintf(json, sizeof json, "{\"__metadata__\":{\"x\":{\"y\":\"z\"}},%s}", T1);
    reject_json(state, json, 4, "is an object");
    snprintf(json, sizeof json, "{\"__metadata__\":{\"x\":null},%s}", T1);
    reject_json(state, json, 4, "is null");
    snprintf(json, sizeof json, "{\"__metadata__\":[\"x\"],%s}", T1);
    reject_json(state, json, 4, "must be an object of strings");
    snprintf(json, sizeof json, "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"},%s}", T1);
    reject_json(state, json, 4, "__metadata__ key 'k' appears twice");
    snprintf(json, sizeof json, "{\"__metadata__\":{},\"__metadata__\":{},%s}", T1);
    reject_json(state, json, 4, "\"__metadata__\" appears twice");
}

static void test_writer_rejects_bad_input(void **state)
{
    char path[512];
    in_dir(state, "w.safetensors", path, sizeof path);
    static const float x[4] = {0};
    static const struct {
        cdl_st_tensor t[2];
        int nt;
        const char *want;
    } cases[] = {
        {{{"a", x, 1, {1}, NULL}, {"a", x, 1, {1}, NULL}}, 2, "two tensors are named 'a'"},
        {{{"a", x, 5, {1}, NULL}}, 1, "has 5 dimensions"},
        {{{"a", x, 1, {-2}, NULL}}, 1, "negative size -2"},
        {{{"a", NULL, 1, {2}, NULL}}, 1, "has 2 elements but no data"},
        {{{"__metadata__", x, 1, {1}, NULL}}, 1, "reserves"},
        {{{"", x, 1, {1}, NULL}}, 1, "reserves"},
        {{{NULL, x, 1, {1}, NULL}}, 1, "tensor name is NULL"},
        {{{"bad\xff", x, 1, {1}, NULL}}, 1, "not valid UTF-8"},
        {{{"a", x, 4, {INT64_MAX / 2, 2, 2, 2}, NULL}}, 1, "too large"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(cdl_st_write(path, cases[i].t, cases[i].nt, NULL, 0), -1);
        const char *msg = cdl_last_error();
        if (!strstr(msg, path) || !strstr(msg, cases[i].want))
            fail_msg("case %zu: \"%s\" should name the file and say \"%s\"", i, msg, cases[i].want);
        assert_int_equal(access(path, F_OK), -1);
    }
    const cdl_st_meta dup[] = {{"k", "1"}, {"k", "2"}};
    assert_int_equal(cdl_st_write(path, NULL, 0, dup, 2), -1);
    assert_non_null(strstr(cdl_last_error(), "metadata key 'k' is given twice"));
    const cdl_st_meta bad[] = {{"k", "\xc3"}};
    assert_int_equal(cdl_st_write(path, NULL, 0, bad, 1), -1);
    assert_non_null(strstr(cdl_last_error(), "metadata value"));
    assert_int_equal(cdl_st_write(path, NULL, -1, NULL, 0), -1);
    assert_int_equal(cdl_st_write("", NULL, 0, NULL, 0), -1);
    assert_int_equal(cdl_st_write(path, NULL, 1, NULL, 0), -1);

    /* A header past the reference limit is refused before anything is written. */
    size_t big = CDL_ST_MAX_HEADER;
    char *value = malloc(big + 1);
    memset(value, 'x', big);
    value[big] = '\0';
    const cdl_st_meta huge[] = {{"k", value}};
    assert_int_equal(cdl_st_write(path, NULL, 0, huge, 1), -1);
    assert_non_null(strstr(cdl_last_error(), "exceed the safetensors limit"));
    free(value);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(hidden_files(((fixture *)*state)->dir), 0);
}

/* Damaged copies of a valid file (bytes changed, cut short, extended):
 * each opens consistently or fails naming the file, and never crashes
 * (run under valgrind or the sanitizers to see memory errors). */
static void test_mutations(void **state)
{
    char path[512], bad[512];
    in_dir(state, "good.safetensors", path, sizeof path);
    in_dir(state, "mutant.safetensors", bad, sizeof bad);
    const float x[6] = {1, 2, 3, 4, 5, 6};
    const cdl_st_tensor t[] = {{"a", x, 2, {2, 2}, NULL}, {"b\"", x, 1, {2}, NULL}, {"c", x, 0, {0}, NULL}};
    const cdl_st_meta m[] = {{"k", "v\n\u00e9"}, {"epoch", "12"}};
    assert_int_equal(cdl_st_write(path, t, 3, m, 2), 0);
    size_t len;
    unsigned char *good = read_bytes(path, &len);
    unsigned char *buf = malloc(len + 16);
    rng_state r;
    rng_seed(&r, 2024);
    int accepted = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, good, len);
        size_t n = len;
        switch (iter % 3) {
        case 0:   /* one to three bytes changed */
            for (int k = 0, nk = 1 + (int)rng_below(&r, 3); k < nk; k++)
                buf[rng_below(&r, n)] = (unsigned char)rng_next(&r);
            break;
        case 1:   /* cut short */
            n = rng_below(&r, len);
            break;
        default:  /* a byte of the header set to a JSON-significant one */
            buf[8 + rng_below(&r, n - 8 - 28)] = (unsigned char)"{}[]\",:0123456789 -.e\\u"[rng_below(&r, 24)];
            break;
        }
        write_bytes(bad, buf, n);
        cdl_st_file *f = cdl_st_open(bad);
        if (!f) {
            if (!strstr(cdl_last_error(), bad))
                fail_msg("iteration %d: message does not name the file: %s", iter, cdl_last_error());
            continue;
        }
        accepted++;   /* e.g. a byte set to its own value, or the checksum key renamed */
        for (int i = 0; i < cdl_st_count(f); i++) {
            size_t numel;
            const float *d = cdl_st_data(f, i, &numel);
            int ndim;
            int64_t shape[8];
            assert_int_equal(cdl_st_shape(f, i, &ndim, shape), 0);
            int64_t want = 1;
            for (int k = 0; k < ndim; k++)
                want *= shape[k];
            if (d)
                assert_int_equal(numel, want);
            assert_int_equal(cdl_st_find(f, cdl_st_name(f, i)), i);
        }
        cdl_st_close(f);
    }
    (void)accepted;
    free(buf);
    free(good);
}

/* Every single-bit flip of a checkpoint is detected: in the length, the
 * metadata, the tensor list, the padding and the data. The one flip
 * cdl_st_open cannot see is one in the checksum entry's own key, which
 * makes the file look like one without checksums: cdl_st_checksummed says
 * so, and a cdl-checkpoint-2 file then fails to load (test_train_resume). */
static void test_every_bit_flip_detected(void **state)
{
    char path[512], bad[512];
    in_dir(state, "good.safetensors", path, sizeof path);
    in_dir(state, "flipped.safetensors", bad, sizeof bad);
    const float x[6] = {1, -2, 3.5f, 0, 5, 6e-30f};
    const cdl_st_tensor t[] = {{"fc.weight", x, 2, {2, 2}, NULL}, {"fc.bias", x + 4, 1, {2}, NULL}};
    const cdl_st_meta m[] = {{"format", "cdl-checkpoint-2"}, {"epoch", "12"},
                             {"config", "{\"lr\":0.05}"}};
    assert_int_equal(cdl_st_write(path, t, 2, m, 3), 0);
    size_t len;
    unsigned char *good = read_bytes(path, &len);
    unsigned char *buf = malloc(len);
    const char *key = strstr((const char *)good + 8, "\"cdl_checksum\"");
    assert_non_null(key);
    size_t key_at = (size_t)(key - (const char *)good) + 1, key_len = strlen("cdl_checksum");
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | good[i];
    int missed = 0;
    for (size_t bit = 0; bit < 8 * len; bit++) {
        memcpy(buf, good, len);
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        write_bytes(bad, buf, len);
        cdl_st_file *f = cdl_st_open(bad);
        if (!f)
            continue;
        size_t at = bit / 8;
        int in_key = at >= key_at && at < key_at + key_len;
        if (!in_key || cdl_st_checksummed(f)) {
            print_error("bit %zu (byte %zu, %s) flipped and not detected\n", bit, at,
                        at < 8 ? "length" : at < 8 + hl ? "header" : "data");
            missed++;
        }
        cdl_st_close(f);
    }
    assert_int_equal(missed, 0);
    free(buf);
    free(good);
}

/* ------------------------------------------------------------ atomicity */

/* Writes the "old" checkpoint: one tensor of value v. */
static void write_old(const char *path, float v)
{
    const float x[3] = {v, v, v};
    const cdl_st_tensor t[] = {{"w", x, 1, {3}, NULL}};
    const cdl_st_meta m[] = {{"version", "old"}};
    assert_int_equal(cdl_st_write(path, t, 1, m, 1), 0);
}

static void check_old(const char *path, float v)
{
    cdl_st_file *f = cdl_st_open(path);
    if (!f)
        fail_msg("old checkpoint damaged: %s", cdl_last_error());
    assert_int_equal(cdl_st_count(f), 1);
    size_t n;
    const float *x = cdl_st_data(f, 0, &n);
    assert_int_equal(n, 3);
    assert_true(x[0] == v && x[2] == v);
    assert_string_equal(cdl_st_meta_get(f, "version"), "old");
    cdl_st_close(f);
}

static void test_overwrite(void **state)
{
    char path[512];
    in_dir(state, "last.safetensors", path, sizeof path);
    write_old(path, 1.0f);
    write_old(path, 2.0f);
    check_old(path, 2.0f);
    assert_int_equal(hidden_files(((fixture *)*state)->dir), 0);

    /* A relative path with no directory part works too. */
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(((fixture *)*state)->dir), 0);
    write_old("rel.safetensors", 3.0f);
    check_old("rel.safetensors", 3.0f);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(hidden_files(((fixture *)*state)->dir), 0);
}

static void test_missing_directory(void **state)
{
    char path[512];
    in_dir(state, "nope/last.safetensors", path, sizeof path);
    const float x[1] = {0};
    const cdl_st_tensor t[] = {{"w", x, 1, {1}, NULL}};
    assert_int_equal(cdl_st_write(path, t, 1, NULL, 0), -1);
    assert_non_null(strstr(cdl_last_error(), path));
    assert_non_null(strstr(cdl_last_error(), "does not exist: create it first"));
    assert_int_equal(cdl_st_write(in_dir(state, "dir/", path, sizeof path), t, 1, NULL, 0), -1);
    assert_non_null(strstr(cdl_last_error(), "not a file name"));
}

/* Data that does not fit under the file size limit: the write fails midway,
 * the old checkpoint survives and the temporary file is gone. Works as root,
 * unlike a read-only directory. */
static void test_failed_write_keeps_old(void **state)
{
    char path[512];
    in_dir(state, "last.safetensors", path, sizeof path);
    write_old(path, 5.0f);

    size_t n = 1 << 18;   /* 1 MiB of data */
    float *big = calloc(n, sizeof *big);
    const cdl_st_tensor t[] = {{"w", big, 1, {(int64_t)n}, NULL}};
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 64 * 1024;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = cdl_st_write(path, t, 1, NULL, 0);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    free(big);

    assert_int_equal(rc, -1);
    const char *msg = cdl_last_error();
    if (!strstr(msg, path) || !strstr(msg, strerror(EFBIG)) || !strstr(msg, "ulimit -f"))
        fail_msg("unexpected message: %s", msg);
    check_old(path, 5.0f);
    assert_int_equal(hidden_files(((fixture *)*state)->dir), 0);
}

/* The rename fails at the very end (the target is a non-empty directory):
 * nothing is left behind and the target is untouched. */
static void test_failed_rename_cleans_up(void **state)
{
    char path[512], inner[600];
    in_dir(state, "ckpt.safetensors", path, sizeof path);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(inner, sizeof inner, "%s/keep", path);
    write_bytes(inner, "x", 1);
    const float x[1] = {0};
    const cdl_st_tensor t[] = {{"w", x, 1, {1}, NULL}};
    assert_int_equal(cdl_st_write(path, t, 1, NULL, 0), -1);
    assert_non_null(strstr(cdl_last_error(), "renaming into place"));
    assert_non_null(strstr(cdl_last_error(), "unchanged"));
    assert_int_equal(access(inner, F_OK), 0);
    assert_int_equal(hidden_files(((fixture *)*state)->dir), 0);
}

static void test_unwritable_directory(void **state)
{
    if (geteuid() == 0)
        skip();   /* root writes anywhere; test_failed_write_keeps_old covers it */
    fixture *fx = *state;
    char path[512];
    in_dir(state, "last.safetensors", path, sizeof path);
    write_old(path, 6.0f);
    assert_int_equal(chmod(fx->dir, 0500), 0);
    const float x[1] = {0};
    const cdl_st_tensor t[] = {{"w", x, 1, {1}, NULL}};
    int rc = cdl_st_write(path, t, 1, NULL, 0);
    chmod(fx->dir, 0700);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(cdl_last_error(), "is writable by this user"));
    check_old(path, 6.0f);
    assert_int_equal(hidden_files(fx->dir), 0);
}

/* A directory every account may write to without the sticky bit (mode
 * 0777): any of them could rename the temporary file away and put another
 * under its name before the rename into place, or replace the checkpoint
 * later. Refused before anything is written, naming the directory and the
 * way out; sticky (as /tmp), the write goes ahead. */
static void test_shared_directory_refused(void **state)
{
    fixture *fx = *state;
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/open", fx->dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(chmod(dir, 0777), 0);
    snprintf(path, sizeof path, "%s/last.safetensors", dir);
    const float x[1] = {0};
    const cdl_st_tensor t[] = {{"w", x, 1, {1}, NULL}};
    assert_int_equal(cdl_st_write(path, t, 1, NULL, 0), -1);
    assert_non_null(strstr(cdl_last_error(), dir));
    assert_non_null(strstr(cdl_last_error(), "may be written by every account and is not sticky"));
    assert_non_null(strstr(cdl_last_error(), "chmod o-w"));
    assert_int_equal(hidden_files(dir), 0);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(chmod(dir, 01777), 0);
    assert_int_equal(cdl_st_write(path, t, 1, NULL, 0), 0);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(hidden_files(dir), 0);
}

/* The directory's path changing between the start of a write and its
 * commit (a parent renamed and another directory put in its place): the
 * file is renamed into place in the directory that was checked, through
 * its descriptor, and nothing goes into the one put in its place. The
 * commit used to resolve both paths again. */
static void test_directory_swapped(void **state)
{
    fixture *fx = *state;
    char dir[300], moved[300], path[400], p[400];
    snprintf(dir, sizeof dir, "%s/d", fx->dir);
    snprintf(moved, sizeof moved, "%s/moved", fx->dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/last.safetensors", dir);
    afile a;
    assert_int_equal(afile_open(&a, path), 0);
    assert_int_equal(afile_write(&a, "data", 4), 0);
    assert_int_equal(rename(dir, moved), 0);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(afile_commit(&a), 0);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(p, sizeof p, "%s/last.safetensors", moved);
    assert_int_equal(access(p, F_OK), 0);
    assert_int_equal(hidden_files(moved), 0);
    assert_int_equal(hidden_files(dir), 0);
}

/* --keep-last's numbered checkpoints (lib/train/keep.c) follow the
 * writer's rule: in a directory every account may write to without the
 * sticky bit the link is not made and nothing is pruned, the error naming
 * the directory and the way out; they used to be linked, renamed and
 * removed there by path. Sticky, both go ahead. */
static void test_keep_shared_directory_refused(void **state)
{
    fixture *fx = *state;
    char dir[300], last[400], old[400], out[1100], msg[1200];
    snprintf(dir, sizeof dir, "%s/open", fx->dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(chmod(dir, 0777), 0);
    snprintf(last, sizeof last, "%s/last.safetensors", dir);
    snprintf(old, sizeof old, "%s/step-00000002.safetensors", dir);
    write_bytes(last, "new", 3);
    write_bytes(old, "old", 3);
    assert_int_equal(ckpt_keep_link(dir, last, 4, out, sizeof out), -1);
    assert_non_null(strstr(cdl_last_error(), dir));
    assert_non_null(strstr(cdl_last_error(), "may be written by every account and is not sticky"));
    assert_non_null(strstr(cdl_last_error(), "chmod o-w"));
    snprintf(out, sizeof out, "%s/step-00000004.safetensors", dir);
    assert_int_equal(access(out, F_OK), -1);
    assert_int_equal(hidden_files(dir), 0);
    assert_int_equal(ckpt_keep_prune(dir, 1, 0, 4, NULL, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "may be written by every account and is not sticky"));
    assert_int_equal(access(old, F_OK), 0);

    assert_int_equal(chmod(dir, 01777), 0);
    assert_int_equal(ckpt_keep_link(dir, last, 4, out, sizeof out), 0);
    struct stat a, b;
    assert_int_equal(stat(last, &a), 0);
    assert_int_equal(stat(out, &b), 0);
    assert_true(a.st_ino == b.st_ino);
    assert_int_equal(hidden_files(dir), 0);
    assert_int_equal(ckpt_keep_prune(dir, 1, 0, 4, NULL, msg, sizeof msg), 0);
    assert_int_equal(access(old, F_OK), -1);
    assert_int_equal(access(out, F_OK), 0);
}

static void test_permissions(void **state)
{
    char path[512];
    in_dir(state, "mode.safetensors", path, sizeof path);
    mode_t prev = umask(027);
    write_old(path, 1.0f);
    umask(prev);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640);   /* not mkstemp's 0600 */
    assert_int_equal(chmod(path, 0604), 0);
    write_old(path, 2.0f);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0604);   /* a replaced file keeps its mode */
}

/* Replacing a link: the new file's mode is not its target's (another
 * account's 0666 file behind a link planted in a shared folder made a
 * chart or checkpoint writable by all), the target is untouched, and
 * set-id bits of a file replaced are not kept. The mode used to be read
 * through the link, all 07777 bits of it. */
static void test_permissions_not_through_link(void **state)
{
    char theirs[512], path[512], own[512];
    in_dir(state, "theirs", theirs, sizeof theirs);
    in_dir(state, "link.png", path, sizeof path);
    in_dir(state, "own", own, sizeof own);
    FILE *f = fopen(theirs, "w");
    assert_non_null(f);
    fputs("theirs", f);
    fclose(f);
    assert_int_equal(chmod(theirs, 0666), 0);
    assert_int_equal(symlink(theirs, path), 0);
    mode_t prev = umask(022);
    afile a;
    assert_int_equal(afile_open(&a, path), 0);
    assert_int_equal(afile_write(&a, "data", 4), 0);
    assert_int_equal(afile_commit(&a), 0);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0644);
    assert_int_equal(stat(theirs, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0666);
    assert_int_equal(st.st_size, 6);
    f = fopen(own, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(chmod(own, 04750), 0);
    assert_int_equal(afile_open(&a, own), 0);
    assert_int_equal(afile_commit(&a), 0);
    umask(prev);
    assert_int_equal(stat(own, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0750);
}

/* ------------------------------------------------------------ base64 */

static void test_base64_vectors(void **state)
{
    (void)state;
    /* RFC 4648 section 10. */
    static const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        size_t n = strlen(plain[i]);
        char *s = cdl_base64_encode(plain[i], n);
        assert_non_null(s);
        assert_string_equal(s, coded[i]);
        cdl_free(s);
        char out[8] = {0};
        assert_int_equal(cdl_base64_decode(coded[i], out, n), 0);
        assert_memory_equal(out, plain[i], n);
    }
}

static void test_base64_round_trip(void **state)
{
    (void)state;
    rng_state r;
    rng_seed(&r, 7);
    unsigned char in[300] = {0}, out[300];
    for (size_t n = 0; n <= sizeof in; n += 1 + n / 8) {
        for (size_t i = 0; i < n; i++)
            in[i] = (unsigned char)rng_next(&r);
        char *s = cdl_base64_encode(in, n);
        assert_non_null(s);
        assert_int_equal(strlen(s), (n + 2) / 3 * 4);
        memset(out, 0xa5, sizeof out);
        assert_int_equal(cdl_base64_decode(s, out, n), 0);
        assert_memory_equal(out, in, n);
        if (n < sizeof out)
            assert_int_equal(out[n], 0xa5);   /* nothing written past n */
        cdl_free(s);
    }
    /* The RNG state a checkpoint stores: four words. */
    rng_state saved = r, back;
    char *s = cdl_base64_encode(&saved, sizeof saved);
    assert_int_equal(cdl_base64_decode(s, &back, sizeof back), 0);
    assert_memory_equal(&back, &saved, sizeof saved);
    cdl_free(s);
}

static void test_base64_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        size_t bytes;
    } bad[] = {
        {"Zm9v", 2}, {"Zm9v", 4}, {"Zm9", 2}, {"Zm9vY", 3}, {"Zm9*", 3}, {"Zm 9", 3},
        {"Zm9\n", 3}, {"Zg=a", 1}, {"Z===", 1}, {"Zm==", 2}, {"Zm9=", 1}, {"Zh==", 1},
        {"Zm9=", 2}, {"=m9v", 3}, {"Zm8=Zm8=", 5}, {"Zg==", 0}, {"", 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char out[8];
        memset(out, 0x5a, sizeof out);
        if (cdl_base64_decode(bad[i].text, out, bad[i].bytes) != -1)
            fail_msg("\"%s\" accepted as %zu bytes", bad[i].text, bad[i].bytes);
        assert_non_null(strstr(cdl_last_error(), "base64"));
        for (size_t k = 0; k < sizeof out; k++)
            assert_int_equal(out[k], 0x5a);   /* untouched on failure */
    }
    assert_int_equal(cdl_base64_decode(NULL, NULL, 0), -1);
    assert_null(cdl_base64_encode(NULL, 3));
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_round_trip),
        T(test_exact_bytes),
        T(test_i64),
        T(test_empty_lists),
        T(test_foreign_but_valid),
        T(test_data_float),
        T(test_reject_truncated),
        T(test_reject_fifo),
        T(test_reject_header_length),
        T(test_reject_bad_json),
        T(test_reject_fields),
        T(test_reject_layout),
        T(test_reject_metadata),
        T(test_mutations),
        T(test_every_bit_flip_detected),
        T(test_writer_rejects_bad_input),
        T(test_overwrite),
        T(test_missing_directory),
        T(test_failed_write_keeps_old),
        T(test_failed_rename_cleans_up),
        T(test_unwritable_directory),
        T(test_permissions),
        T(test_permissions_not_through_link),
        T(test_shared_directory_refused),
        T(test_directory_swapped),
        T(test_keep_shared_directory_refused),
        T(test_base64_vectors),
        T(test_base64_round_trip),
        T(test_base64_rejects),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
