/* lib/data's readers for users' own data: image folders (PNG/JPEG written
 * here with libpng/libjpeg), hand-made .npy headers, CSV tables with
 * quoting, the normalisation and the loader's float features; and hostile
 * files (truncated, wrong magic, huge declared shapes, non-UTF-8 names). */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "img_write.h"
#include "lib/core/memlimit.h"
#include "lib/data/internal.h"

static char tmp[256];

static int setup(void **state)
{
    (void)state;
    const char *t = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/cdl-test-readers-XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return test_rm_rf(tmp);
}

static const char *at(const char *rel)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, rel);
    return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void assert_error_has(const char *what)
{
    if (!strstr(cdl_last_error(), what))
        fail_msg("error '%s' does not contain '%s'", cdl_last_error(), what);
}

/* ------------------------------------------------------------ image folders */

#if defined(HAVE_PNG) && defined(HAVE_JPEG)
/* root/train/{bird,cat}: 3 gray 4x4 PNGs of value 10*i+class, 1 RGB JPEG
 * (flat grey 128, exact at quality 100); root/test/cat: 1 PNG. */
static void make_folder(void)
{
    uint8_t px[8 * 8 * 3];
    mkdir(at("img"), 0755);
    mkdir(at("img/train"), 0755);
    mkdir(at("img/train/cat"), 0755);
    mkdir(at("img/train/bird"), 0755);
    mkdir(at("img/train/.hidden"), 0755);
    mkdir(at("img/test"), 0755);
    mkdir(at("img/test/cat"), 0755);
    const char *cls[2] = {"bird", "cat"};
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 3; i++) {
            char p[64];
            snprintf(p, sizeof p, "img/train/%s/%d.png", cls[c], i);
            memset(px, 10 * i + c, 16);
            assert_int_equal(test_write_png(at(p), px, 4, 4, 1), 0);
        }
    memset(px, 128, sizeof px);
    assert_int_equal(test_write_jpeg(at("img/train/cat/z.JPG"), px, 4, 4, 3), 0);
    write_bytes(at("img/train/cat/notes.txt"), "not a picture", 13);
    memset(px, 200, 16);
    assert_int_equal(test_write_png(at("img/test/cat/a.png"), px, 4, 4, 1), 0);
}

static void test_imagefolder(void **state)
{
    (void)state;
    make_folder();
    cdl_dataset d;
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    o.threads = 3;
    /* The first picture (bird/0.png) is grayscale and cat/z.JPG is RGB:
     * without --channels that is an error naming both (the RGB picture was
     * made gray in silence; torchvision reads every picture as RGB), in
     * memory and as batches need them. */
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), -1);
    assert_error_has("img/train/cat/z.JPG is a colour picture, but the samples are grayscale "
                     "because the first picture, ");
    assert_error_has("img/train/bird/0.png, is: pass --channels 3");
    o.decode = CDL_DECODE_STREAM;
    o.normalize = CDL_NORMALIZE_NONE;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), 0);
    uint8_t px[16];
    assert_int_equal(image_stream_read(d.stream, 5, px), 0);
    assert_int_equal(image_stream_read(d.stream, 6, px), -1);
    assert_error_has("z.JPG is a colour picture");
    cdl_dataset_free(&d);
    cdl_dataset_options_defaults(&o);
    o.threads = 3;
    o.channels = 1;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), 0);
    assert_int_equal(d.n, 7);
    assert_int_equal(d.classes, 2);
    assert_string_equal(d.class_names[0], "bird");
    assert_string_equal(d.class_names[1], "cat");
    assert_int_equal(d.shape.c, 1);
    assert_int_equal(d.shape.h, 4);
    /* Sorted: bird/0,1,2 then cat/0,1,2,z.JPG. */
    int32_t want[7] = {0, 0, 0, 1, 1, 1, 1};
    for (int i = 0; i < 7; i++)
        assert_int_equal(d.labels[i], want[i]);
    assert_int_equal(d.images[1 * 16], 10);
    assert_int_equal(d.images[5 * 16 + 3], 21);
    assert_int_equal(d.images[6 * 16], 128);   /* RGB -> luma of a grey */
    /* Computed normalisation: mean of the pixels / 255. */
    double sum = 0;
    for (int i = 0; i < 7 * 16; i++)
        sum += d.images[i] / 255.0;
    assert_float_equal(d.mean[0], sum / (7 * 16), 1e-6);

    /* One thread gives the same bytes. */
    cdl_dataset d1;
    o.threads = 1;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d1), 0);
    assert_memory_equal(d.images, d1.images, 7 * 16);
    cdl_dataset_free(&d1);

    /* The test split is mapped onto train's classes. */
    cdl_dataset t;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 0, &o, &t), 0);
    assert_int_equal(t.n, 1);
    assert_int_equal(t.labels[0], 1);
    cdl_dataset_free(&t);

    /* RGB and a resize: 3 channels, 2x2. */
    o.channels = 3;
    o.image_size = 2;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d1), 0);
    assert_int_equal(d1.shape.c, 3);
    assert_int_equal(d1.shape.h, 2);
    assert_int_equal(d1.images[1 * 12 + 11], 10);   /* flat pictures stay flat */
    cdl_dataset_free(&d1);
    cdl_dataset_free(&d);
}

/* cdl_dataset_options.left_out: appends path and a newline to the buffer. */
static void note_left_out(const char *path, void *arg)
{
    char *buf = arg;
    size_t n = strlen(buf);
    snprintf(buf + n, 2048 - n, "%s\n", path);
}

/* Pictures torchvision's ImageFolder reads and cdl does not (.webp, .BMP,
 * .tif) were left out in silence: the run trained on fewer pictures than
 * PyTorch's on the same folder. Each is now reported, in sample order;
 * other files (notes.txt, hidden ones) are not. */
static void test_imagefolder_left_out(void **state)
{
    (void)state;
    make_folder();
    mkdir(at("img/train/cat/web"), 0755);
    write_bytes(at("img/train/cat/web/a.webp"), "RIFF....WEBP", 12);
    write_bytes(at("img/train/bird/x.BMP"), "BM", 2);
    write_bytes(at("img/train/bird/.y.webp"), "RIFF", 4);
    write_bytes(at("img/train/cat/s.tif"), "II*", 3);
    cdl_dataset d;
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    o.channels = 1;
    char seen[2048] = "";
    o.left_out = note_left_out;
    o.left_out_arg = seen;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), 0);
    assert_int_equal(d.n, 7);
    char want[2048];
    snprintf(want, sizeof want, "%s\n%s\n%s\n", at("img/train/bird/x.BMP"),
             at("img/train/cat/s.tif"), at("img/train/cat/web/a.webp"));
    assert_string_equal(seen, want);
    cdl_dataset_free(&d);
}

/* val/ beside test/ is a split of its own (CDL_SPLIT_VAL); alone it is
 * the held-out split CDL_SPLIT_TEST reads, and other data have no
 * validation split of their own. */
static void test_imagefolder_val(void **state)
{
    (void)state;
    make_folder();
    mkdir(at("img/val"), 0755);
    mkdir(at("img/val/bird"), 0755);
    uint8_t px[16];
    memset(px, 77, sizeof px);
    assert_int_equal(test_write_png(at("img/val/bird/v.png"), px, 4, 4, 1), 0);
    cdl_dataset d;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), CDL_SPLIT_VAL, NULL, &d), 0);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.labels[0], 0);
    assert_int_equal(d.images[0], 77);
    cdl_dataset_free(&d);
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), CDL_SPLIT_TEST, NULL, &d), 0);
    assert_int_equal(d.images[0], 200);   /* test/cat/a.png */
    cdl_dataset_free(&d);
    assert_int_equal(unlink(at("img/test/cat/a.png")), 0);
    assert_int_equal(rmdir(at("img/test/cat")), 0);
    assert_int_equal(rmdir(at("img/test")), 0);
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), CDL_SPLIT_VAL, NULL, &d), 1);
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), CDL_SPLIT_TEST, NULL, &d), 0);
    assert_int_equal(d.images[0], 77);
    cdl_dataset_free(&d);
    assert_int_equal(cdl_dataset_load_with("csv", at("img"), CDL_SPLIT_VAL, NULL, &d), 1);
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 3, NULL, &d), -1);
    assert_error_has("split 3");
}

/* Pictures in folders inside a class folder belong to the class, in
 * torchvision's order (folders sorted by path, as sorted(os.walk(...)):
 * "a b" before "a/x"), links to folders followed; they were left out
 * without a word. The order below is the one torchvision 0.14 gives the
 * same tree. A link back up is an error, not an endless walk. */
static void test_imagefolder_nested(void **state)
{
    (void)state;
    const char *dirs[] = {"nest", "nest/cls", "nest/cls/a", "nest/cls/a/x", "nest/cls/a b",
                          "nest/cls/.hid", "nest/z", "outside"};
    for (size_t k = 0; k < sizeof dirs / sizeof *dirs; k++)
        assert_int_equal(mkdir(at(dirs[k]), 0755), 0);
    const char *files[] = {"nest/cls/0.png", "nest/cls/a/1.png", "nest/cls/a b/2.png",
                           "nest/cls/a/x/3.png", "outside/4.png", "nest/z/5.png",
                           "nest/cls/.hid/9.png"};
    uint8_t px[4];
    for (size_t k = 0; k < sizeof files / sizeof *files; k++) {
        memset(px, (int)strrchr(files[k], '/')[1] - '0', sizeof px);
        assert_int_equal(test_write_png(at(files[k]), px, 2, 2, 1), 0);
    }
    assert_int_equal(symlink("../../outside", at("nest/cls/link")), 0);
    cdl_dataset d;
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    o.threads = 2;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("nest"), 1, &o, &d), 0);
    assert_int_equal(d.n, 6);
    assert_int_equal(d.classes, 2);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(d.images[4 * i], i);   /* 0..4 in cls, then z's 5 */
        assert_int_equal(d.labels[i], i < 5 ? 0 : 1);
    }
    cdl_dataset_free(&d);
    /* The same list when streamed. */
    o.decode = CDL_DECODE_STREAM;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("nest"), 1, &o, &d), 0);
    assert_int_equal(d.n, 6);
    assert_non_null(strstr(d.stream->paths[2], "nest/cls/a b/2.png"));
    assert_non_null(strstr(d.stream->paths[4], "nest/cls/link/4.png"));
    cdl_dataset_free(&d);
    /* A loop. */
    assert_int_equal(symlink("..", at("nest/cls/a/x/up")), 0);
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("nest"), 1, &o, &d), -1);
    assert_error_has("nest/cls/a/x/up leads back to a folder above it (a symbolic link loop)");
}

/* Names in torchvision's order: Python's sorted() of os.scandir's names,
 * by code point, a byte that is not UTF-8 being U+DC80.. (surrogateescape).
 * By strcmp, b"\xa9" came before "é" (c3 a9) and U+E000 (ee 80 80) before
 * b"\xf5", so sample i was not PyTorch's sample i. Mixed case: "Zeta"
 * before "alpha" in both. */
static void test_imagefolder_name_order(void **state)
{
    (void)state;
    assert_true(data_name_cmp("\xa9", "\xc3\xa9") > 0);
    assert_true(data_name_cmp("\xf5", "\xee\x80\x80") < 0);
    assert_true(data_name_cmp("\xed\xa0\x80", "\xed\x9f\xbf") > 0);   /* U+DCED > U+D7FF */
    assert_true(data_name_cmp("Zeta", "alpha") < 0);
    assert_true(data_name_cmp("ab", "abc") < 0);
    assert_int_equal(data_name_cmp("\xc3\xa9x", "\xc3\xa9x"), 0);
    assert_int_equal(mkdir(at("ord"), 0755), 0);
    assert_int_equal(mkdir(at("ord/cls"), 0755), 0);
    /* Python: sorted([b.decode("utf-8", "surrogateescape") for b in names]). */
    const char *names[] = {"ord/cls/\xc3\xa9.png", "ord/cls/\xa9.png", "ord/cls/\xf5.png",
                           "ord/cls/\xee\x80\x80.png"};
    uint8_t px[4];
    for (int k = 0; k < 4; k++) {
        memset(px, k, sizeof px);
        assert_int_equal(test_write_png(at(names[k]), px, 2, 2, 1), 0);
    }
    cdl_dataset d;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("ord"), 1, NULL, &d), 0);
    assert_int_equal(d.n, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(d.images[4 * i], i);
    cdl_dataset_free(&d);
}

/* A picture's name on a dangling link (a data set moved, its links not): an
 * unreadable picture, named, as torchvision fails on it, not one silently
 * fewer; a dangling link as a class folder is no class, as there. */
static void test_imagefolder_dangling_link(void **state)
{
    (void)state;
    make_folder();
    assert_int_equal(symlink("/nonexistent/cdl-moved/3.png", at("img/train/cat/3.png")), 0);
    assert_int_equal(symlink("/nonexistent/cdl-moved/dog", at("img/train/dog")), 0);
    cdl_dataset d;
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    o.channels = 1;   /* gray PNGs and an RGB JPEG */
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), -1);
    assert_error_has("img/train/cat/3.png");
    assert_error_has("--skip-bad-files");
    o.skip_bad_files = 1;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), 0);
    assert_int_equal(d.n, 7);
    assert_int_equal(d.classes, 2);
    assert_int_equal(d.skipped, 1);
    cdl_dataset_free(&d);
}

/* cdl_dataset_options.skipped: appends why to the buffer arg. */
static void note_skipped(const char *why, void *arg)
{
    char *buf = arg;
    size_t used = strlen(buf);
    snprintf(buf + used, 2048 - used, "%s\n", why);
}

static void test_imagefolder_bad_files(void **state)
{
    (void)state;
    make_folder();
    uint8_t trunc[40];
    FILE *f = fopen(at("img/train/bird/0.png"), "rb");
    assert_non_null(f);
    size_t n = fread(trunc, 1, sizeof trunc, f);
    fclose(f);
    write_bytes(at("img/train/bird/1.png"), trunc, n);   /* truncated */
    write_bytes(at("img/train/cat/x.png"), "GIF89a......", 12);   /* wrong magic */
    cdl_dataset d;
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    o.threads = 2;
    /* A colour picture among gray ones is an error too, but after the bad
     * files; with --skip-bad-files (and gray ones skipped) it is still one. */
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), -1);
    assert_error_has("bird/1.png");
    o.skip_bad_files = 1;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), -1);
    assert_error_has("cat/z.JPG is a colour picture");
    o.skip_bad_files = 0;
    o.channels = 1;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), -1);
    assert_error_has("bird/1.png");
    assert_error_has("--skip-bad-files");
    o.skip_bad_files = 1;
    char seen[2048] = "";
    o.skipped = note_skipped;
    o.skipped_arg = seen;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), 0);
    assert_int_equal(d.n, 6);
    assert_int_equal(d.skipped, 2);
    /* Each one named, in sample order (the count alone left the user to
     * hunt for them). */
    const char *b1 = strstr(seen, "bird/1.png"), *x = strstr(seen, "cat/x.png is a GIF picture, not a PNG or JPEG");
    if (!b1 || !x || x < b1)
        fail_msg("skipped files reported: %s", seen);
    o.skipped = NULL;
    cdl_dataset_free(&d);

    /* Not one readable picture: with --skip-bad-files the error says so,
     * without advising --skip-bad-files. */
    mkdir(at("allbad"), 0755);
    mkdir(at("allbad/a"), 0755);
    write_bytes(at("allbad/a/0.png"), "GIF89a......", 12);
    write_bytes(at("allbad/a/1.png"), trunc, n);
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("allbad"), 1, &o, &d), -1);
    assert_error_has("allbad: none of the 2 pictures could be read (the first: ");
    assert_error_has("0.png is a GIF picture, not a PNG or JPEG (convert it to train on it))");
    if (strstr(cdl_last_error(), "pass --skip-bad-files"))
        fail_msg("advises --skip-bad-files, which was given: %s", cdl_last_error());

    /* An empty file (an unfinished copy) is not called another format. */
    mkdir(at("empty"), 0755);
    mkdir(at("empty/a"), 0755);
    write_bytes(at("empty/a/0.png"), "", 0);
    o.skip_bad_files = 0;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("empty"), 1, &o, &d), -1);
    assert_error_has("empty/a/0.png is empty (0 bytes: a copy or download that did not finish?)");
    o.skip_bad_files = 1;

    /* A class folder whose name is not UTF-8. */
    mkdir(at("img/train/caf\xe9"), 0755);
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), -1);
    assert_error_has("caf\\xe9");
    assert_error_has("not UTF-8");
}

/* Decoded pictures that would not fit the memory this process may use are
 * refused before decoding, with the sizes and the way out; at the limit
 * they load. The folder: 7 pictures of 1x4x4 = 112 bytes, loading needs
 * twice that (the split's copy). */
static void test_imagefolder_memory(void **state)
{
    (void)state;
    make_folder();
    cdl_dataset d;
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    o.channels = 1;   /* gray PNGs and an RGB JPEG */
    o.memory_limit = 223;
    o.decode = CDL_DECODE_MEMORY;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), -1);
    assert_error_has("7 pictures of 1x4x4");
    assert_error_has("--image-size");
    assert_error_has("--decode stream");
    assert_error_has("--mem");
    o.memory_limit = 224;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), 0);
    assert_int_equal(d.n, 7);
    assert_non_null(d.images);
    assert_null(d.stream);
    cdl_dataset_free(&d);
    /* auto: in memory when it fits, else streamed. */
    o.decode = CDL_DECODE_AUTO;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), 0);
    assert_non_null(d.images);
    cdl_dataset_free(&d);
    o.memory_limit = 223;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), 0);
    assert_null(d.images);
    assert_non_null(d.stream);
    assert_int_equal(d.n, 7);
    cdl_dataset_free(&d);

    /* The cgroup files' texts: v2 "max", v1's ~2^63 for unlimited. */
    assert_true(cgroup_limit_parse("max\n") == SIZE_MAX);
    assert_true(cgroup_limit_parse("9223372036854771712\n") == SIZE_MAX);
    assert_true(cgroup_limit_parse("12ab") == SIZE_MAX);
    assert_true(cgroup_limit_parse("") == SIZE_MAX);
    assert_true(cgroup_limit_parse("0") == SIZE_MAX);
    assert_true(cgroup_limit_parse("1073741824\n") == (size_t)1 << 30);
    assert_true(memory_limit() > ((size_t)1 << 20));
}

/* Every batch of two shuffled, augmented epochs from loaders over a and b
 * (2 workers; batch 3) is the same, bitwise; returns the batches seen. */
static int same_batches(const cdl_dataset *a, const cdl_dataset *b, int augment)
{
    cdl_loader_config c;
    cdl_loader_defaults(&c);
    c.batch_size = 3;
    c.shuffle = 1;
    c.augment = augment;
    c.workers = 2;
    c.seed = 5;
    c.world = 1;
    cdl_loader *la = cdl_loader_create(a, &c), *lb = cdl_loader_create(b, &c);
    assert_non_null(la);
    assert_non_null(lb);
    int batches = 0;
    for (int e = 0; e < 2; e++) {
        assert_int_equal(cdl_loader_start_epoch(la, e, 0), 0);
        assert_int_equal(cdl_loader_start_epoch(lb, e, 0), 0);
        cdl_batch ba, bb;
        int ga, gb;
        while ((ga = cdl_loader_next(la, &ba)) == 1) {
            gb = cdl_loader_next(lb, &bb);
            assert_int_equal(gb, 1);
            assert_int_equal(ba.n, bb.n);
            size_t sample = (size_t)a->shape.c * a->shape.h * a->shape.w;
            assert_memory_equal(ba.x, bb.x, (size_t)ba.n * sample * sizeof(float));
            assert_memory_equal(ba.y, bb.y, (size_t)ba.n * sizeof(int32_t));
            batches++;
        }
        assert_int_equal(ga, 0);
        assert_int_equal(cdl_loader_next(lb, &bb), 0);
    }
    cdl_loader_destroy(la);
    cdl_loader_destroy(lb);
    return batches;
}

/* --decode stream: the loader's workers decode each picture when a batch
 * needs it, and every batch equals the in-memory folder's, also after a
 * validation split and with --skip-bad-files; the statistics are the same
 * (a folder under 10,000 pictures is counted whole); a bad file found
 * while training is an error naming it and rank. */
static void test_imagefolder_stream(void **state)
{
    (void)state;
    make_folder();
    cdl_dataset m, st;
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    o.channels = 3;
    o.image_size = 3;   /* a resize, so the workers run image_fit's filter too */
    o.decode = CDL_DECODE_MEMORY;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &m), 0);
    o.decode = CDL_DECODE_STREAM;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &st), 0);
    assert_null(st.images);
    assert_non_null(st.stream);
    assert_int_equal(st.n, m.n);
    assert_memory_equal(st.labels, m.labels, (size_t)m.n * sizeof *m.labels);
    assert_memory_equal(st.mean, m.mean, sizeof m.mean);
    assert_memory_equal(st.std, m.std, sizeof m.std);
    assert_int_equal(same_batches(&m, &st, CDL_AUGMENT_CROP_FLIP), 6);

    cdl_dataset mv, sv;
    assert_int_equal(cdl_dataset_split(&m, 3, 11, &mv), 0);
    assert_int_equal(cdl_dataset_split(&st, 3, 11, &sv), 0);
    assert_non_null(sv.stream);
    assert_int_equal(same_batches(&m, &st, 0), 4);
    assert_int_equal(same_batches(&mv, &sv, 0), 2);
    cdl_dataset_free(&mv);
    cdl_dataset_free(&sv);
    cdl_dataset_free(&m);
    cdl_dataset_free(&st);

    /* A truncated file: the statistics' pass finds it ... */
    uint8_t trunc[40];
    FILE *f = fopen(at("img/train/bird/0.png"), "rb");
    assert_non_null(f);
    size_t n = fread(trunc, 1, sizeof trunc, f);
    fclose(f);
    write_bytes(at("img/train/cat/1.png"), trunc, n);
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &st), -1);
    assert_error_has("cat/1.png");
    /* ... with given statistics, loading a stream does not look at it ... */
    float mean[1] = {0.5f}, sd[1] = {0.25f};
    o.normalize = CDL_NORMALIZE_GIVEN;
    o.norm_count = 1;
    o.norm_mean = mean;
    o.norm_std = sd;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &st), 0);
    assert_int_equal(st.n, 7);
    cdl_loader_config c;
    cdl_loader_defaults(&c);
    c.batch_size = 7;
    c.world = 1;
    c.rank = 0;
    c.workers = 1;
    cdl_loader *l = cdl_loader_create(&st, &c);
    assert_non_null(l);
    assert_int_equal(cdl_loader_start_epoch(l, 0, 0), 0);
    cdl_batch b;
    /* ... the batch that holds it fails, naming it, the rank and the fix. */
    assert_int_equal(cdl_loader_next(l, &b), -1);
    assert_error_has("cat/1.png");
    assert_error_has("rank 0");
    assert_error_has("--skip-bad-files");
    cdl_loader_destroy(l);
    cdl_dataset_free(&st);
    /* --skip-bad-files checks every picture first: the same samples as in memory. */
    o.skip_bad_files = 1;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &st), 0);
    assert_int_equal(st.n, 6);
    assert_int_equal(st.skipped, 1);
    o.decode = CDL_DECODE_MEMORY;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &m), 0);
    assert_int_equal(same_batches(&m, &st, 0), 4);
    cdl_dataset_free(&m);
    cdl_dataset_free(&st);
    /* Computed statistics with --skip-bad-files: counted during the check of
     * every file (no second pass), equal to memory mode's. */
    o.normalize = CDL_NORMALIZE_COMPUTE;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &m), 0);
    o.decode = CDL_DECODE_STREAM;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &st), 0);
    assert_true(st.stream->have_hist);
    assert_memory_equal(st.mean, m.mean, sizeof m.mean);
    assert_memory_equal(st.std, m.std, sizeof m.std);
    assert_int_equal(same_batches(&m, &st, 0), 4);
    cdl_dataset_free(&m);
    cdl_dataset_free(&st);
}

/* cdl-predict's files: the same bytes as the folder reader gives them
 * (PNG and JPEG, resized and converted to RGB), labels = file indices, bad
 * files named or skipped and counted. */
static void test_image_files(void **state)
{
    (void)state;
    make_folder();
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    o.channels = 3;
    o.image_size = 2;
    cdl_dataset d, f;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("img"), 1, &o, &d), 0);
    char p[2][512];
    snprintf(p[0], sizeof p[0], "%s", at("img/train/cat/z.JPG"));   /* sample 6 */
    snprintf(p[1], sizeof p[1], "%s", at("img/train/bird/1.png"));  /* sample 1 */
    const char *files[3] = {p[0], p[1], NULL};
    cdl_shape s = {3, 2, 2};
    assert_int_equal(cdl_dataset_from_image_files(files, 2, s, 2, 0, &f), 0);
    assert_int_equal(f.n, 2);
    assert_int_equal(f.labels[0], 0);
    assert_int_equal(f.labels[1], 1);
    assert_memory_equal(f.images, d.images + 6 * 12, 12);
    assert_memory_equal(f.images + 12, d.images + 1 * 12, 12);
    cdl_dataset_free(&f);

    char bad[512];
    snprintf(bad, sizeof bad, "%s", at("img/train/cat/notes.txt"));
    const char *with_bad[3] = {p[0], bad, p[1]};
    assert_int_equal(cdl_dataset_from_image_files(with_bad, 3, s, 1, 0, &f), -1);
    assert_error_has("notes.txt");
    assert_error_has("--skip-bad-files");
    assert_int_equal(cdl_dataset_from_image_files(with_bad, 3, s, 1, 1, &f), 0);
    assert_int_equal(f.n, 2);
    assert_int_equal(f.skipped, 1);
    assert_int_equal(f.labels[1], 2);
    assert_memory_equal(f.images + 12, d.images + 1 * 12, 12);
    cdl_dataset_free(&f);
    assert_int_equal(cdl_dataset_from_image_files(with_bad + 1, 1, s, 1, 1, &f), -1);
    assert_error_has("none of the 1 pictures");
    s.c = 2;
    assert_int_equal(cdl_dataset_from_image_files(files, 2, s, 1, 0, &f), -1);
    cdl_dataset_free(&d);
}
#endif

/* A CMYK JPEG (Photoshop's, with the Adobe marker; ImageNet holds a few)
 * was an error, "convert it to RGB", where torchvision reads it: now its
 * pixels are PIL's, Image.new("CMYK", (1, 1), (55, 105, 155, 25))
 * .convert("RGB") = (180, 135, 90), the file storing them inverted (200,
 * 150, 100, 230) as Adobe's convention and PIL's "CMYK;I" have it. Gray
 * makes the luma of that. */
/* A file under a picture's name that is another format said only "wrong
 * magic bytes": a web scrape's .jpg that is a GIF, a WebP or an HTML
 * error page, an iPhone's HEIC renamed. Now the error says what it is. */
static void test_other_formats(void **state)
{
    (void)state;
    static const struct {
        const char *bytes, *what;
        size_t n;
    } cases[] = {
        {"GIF89a\1\0\1\0", "a GIF picture", 10},
        {"RIFF\30\0\0\0WEBPVP8 ", "a WebP picture", 16},
        {"BM\66\0\0\0", "a BMP picture", 6},
        {"II*\0\10\0\0\0", "a TIFF picture", 8},
        {"\0\0\0\30ftypheic\0\0\0\0", "a HEIC/AVIF picture", 16},
        {"\n  <!DOCTYPE html><html>", "a web page or XML text (a download that got an error "
                                       "page?)", 25},
        {"<HTML><body>404", "a web page", 15},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char p[512], want[256];
        snprintf(p, sizeof p, "%s", at("x.jpg"));
        write_bytes(p, cases[k].bytes, cases[k].n);
        const char *files[1] = {p};
        cdl_dataset d;
        assert_int_equal(cdl_dataset_from_image_files(files, 1, (cdl_shape){3, 4, 4}, 1, 0, &d),
                         -1);
        snprintf(want, sizeof want, "x.jpg is %s", cases[k].what);
        assert_error_has(want);
        assert_error_has("not a PNG or JPEG (convert it to train on it)");
    }
    write_bytes(at("x.jpg"), "hello", 5);
    char p[512];
    snprintf(p, sizeof p, "%s", at("x.jpg"));
    const char *files[1] = {p};
    cdl_dataset d;
    assert_int_equal(cdl_dataset_from_image_files(files, 1, (cdl_shape){3, 4, 4}, 1, 0, &d), -1);
    assert_error_has("x.jpg is neither a PNG nor a JPEG (wrong magic bytes)");
}

#if defined(HAVE_PNG) && defined(HAVE_JPEG)
static void test_jpeg_cmyk(void **state)
{
    (void)state;
    uint8_t px[8 * 8 * 4];
    for (int i = 0; i < 64; i++)
        memcpy(px + 4 * i, (uint8_t[4]){200, 150, 100, 230}, 4);
    assert_int_equal(test_write_jpeg(at("cmyk.jpg"), px, 8, 8, 4), 0);
    char p[512];
    snprintf(p, sizeof p, "%s", at("cmyk.jpg"));
    const char *files[1] = {p};
    cdl_dataset d;
    assert_int_equal(cdl_dataset_from_image_files(files, 1, (cdl_shape){3, 8, 8}, 1, 0, &d), 0);
    for (int i = 0; i < 64; i++) {
        assert_int_equal(d.images[i], 180);
        assert_int_equal(d.images[64 + i], 135);
        assert_int_equal(d.images[128 + i], 90);
    }
    cdl_dataset_free(&d);
    /* Shrunk while decoded (DCT scale), and made gray. */
    assert_int_equal(cdl_dataset_from_image_files(files, 1, (cdl_shape){1, 2, 2}, 1, 0, &d), 0);
    assert_int_equal(d.images[0], (180 * 299 + 135 * 587 + 90 * 114 + 500) / 1000);
    cdl_dataset_free(&d);
}

/* jpeg_full (--jpeg-decode full): a JPEG that shrinks is decoded whole,
 * then resized, as PIL decodes it for torchvision; the default decodes it
 * at a DCT scale (here 2/8), whose pixels differ from PIL's by several
 * levels on a detailed picture. Before, there was no way to get PIL's. */
static void test_jpeg_full(void **state)
{
    (void)state;
    enum { W = 96, H = 72 };
    uint8_t px[W * H * 3];
    uint32_t r = 12345;
    for (int i = 0; i < W * H * 3; i++) {   /* detail: a ramp with noise */
        r = r * 1103515245u + 12345u;
        px[i] = (uint8_t)((i / 3 % W) * 2 + (r >> 26));
    }
    assert_int_equal(test_write_jpeg(at("d.jpg"), px, W, H, 3), 0);
    char p[512];
    snprintf(p, sizeof p, "%s", at("d.jpg"));
    const char *files[1] = {p};
    cdl_shape s = {3, 16, 16};
    /* What PIL does: decode whole, then resize and crop (image_fit is
     * torchvision's Resize + CenterCrop, tests/e2e/torch-pictures.sh). */
    uint8_t *buf, want[3 * 16 * 16];
    size_t len;
    assert_int_equal(data_read_file(p, IMAGE_MAX_FILE_BYTES, "", &buf, &len), 0);
    image_buf im;
    assert_int_equal(image_decode(buf, len, "d.jpg", &im), 0);
    assert_int_equal(image_fit(&im, 16, 16, 3, want), 0);
    cdl_free(im.px);
    cdl_free(buf);
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    o.threads = 1;
    o.jpeg_full = 1;
    cdl_dataset d;
    assert_int_equal(cdl_dataset_from_image_files_with(files, 1, s, &o, &d), 0);
    assert_memory_equal(d.images, want, sizeof want);
    cdl_dataset_free(&d);
    /* The image folder reader takes it too, decoding into memory or
     * streaming. */
    mkdir(at("f"), 0755);
    mkdir(at("f/train"), 0755);
    mkdir(at("f/train/a"), 0755);
    assert_int_equal(test_write_jpeg(at("f/train/a/d.jpg"), px, W, H, 3), 0);
    for (int dec = CDL_DECODE_MEMORY; dec <= CDL_DECODE_STREAM; dec++) {
        o.image_size = 16;
        o.decode = dec;
        assert_int_equal(cdl_dataset_load_with("imagefolder", at("f"), CDL_SPLIT_TRAIN, &o, &d), 0);
        uint8_t got[sizeof want];
        if (d.stream)
            assert_int_equal(image_stream_read(d.stream, 0, got), 0);
        else
            memcpy(got, d.images, sizeof got);
        assert_memory_equal(got, want, sizeof want);
        cdl_dataset_free(&d);
    }
    /* The default (DCT scaling) is another picture. */
    assert_int_equal(cdl_dataset_from_image_files(files, 1, s, 1, 0, &d), 0);
    assert_true(memcmp(d.images, want, sizeof want) != 0);
    cdl_dataset_free(&d);
}
#endif

#ifdef HAVE_PNG
/* PNGs with alpha read as torchvision's loader reads them (PIL's
 * convert("RGB") / convert("L")): the colour values, alpha dropped. cdl
 * had libpng composite them onto its uninitialised output buffer, so
 * transparent pixels came out as whatever the heap held. */
static void test_png_alpha(void **state)
{
    (void)state;
    /* 2x2 RGBA (alpha 0, 64, 128, 255) and gray + alpha. */
    const uint8_t rgba[16] = {95, 130, 194, 0,  207, 235, 15, 64,
                              33, 215, 217, 128, 248, 189, 16, 255};
    const uint8_t ga[8] = {10, 0, 20, 64, 30, 128, 40, 255};
    assert_int_equal(test_write_png(at("rgba.png"), rgba, 2, 2, 4), 0);
    assert_int_equal(test_write_png(at("ga.png"), ga, 2, 2, 2), 0);
    char p0[512], p1[512];
    snprintf(p0, sizeof p0, "%s", at("rgba.png"));
    snprintf(p1, sizeof p1, "%s", at("ga.png"));
    const char *files[2] = {p0, p1};
    cdl_dataset d;
    cdl_shape s = {3, 2, 2};
    assert_int_equal(cdl_dataset_from_image_files(files, 2, s, 1, 0, &d), 0);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 3; k++) {
            assert_int_equal(d.images[k * 4 + i], rgba[i * 4 + k]);   /* planes first */
            assert_int_equal(d.images[12 + k * 4 + i], ga[i * 2]);    /* gray repeated */
        }
    cdl_dataset_free(&d);
    s.c = 1;
    assert_int_equal(cdl_dataset_from_image_files(files + 1, 1, s, 1, 0, &d), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(d.images[i], ga[i * 2]);
    cdl_dataset_free(&d);
}
#endif

/* Resize(N) + CenterCrop(N) with torchvision's numbers: the long side
 * scaled to int(N * long / short), truncated, and the crop starting at
 * round((scaled - N) / 2), half to even. Before, the long side was
 * rounded and the crop started at (scaled - N) / 2 rounded down: the
 * samples were PyTorch's shifted by a pixel, and a model trained in
 * PyTorch predicted other probabilities in cdl-predict. */
static void test_image_fit_torchvision(void **state)
{
    (void)state;
    uint8_t px[32 * 45], out[16 * 16];
    image_buf in = {px, 16, 19, 1};   /* no scaling: 19 - 16 = 3, the crop starts at 2 */
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 19; x++)
            px[y * 19 + x] = (uint8_t)(10 * x);
    assert_int_equal(image_fit(&in, 16, 16, 1, out), 0);
    assert_int_equal(out[0], 20);
    assert_int_equal(out[15 * 16 + 15], 170);
    /* 45 x 32 to 16: 22 x 16 (int(22.5)), crop at 3; a ramp stays a ramp,
     * so column 5 reads the input at (5 + 3 + 0.5) * 45 / 22 - 0.5. */
    in = (image_buf){px, 32, 45, 1};
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 45; x++)
            px[y * 45 + x] = (uint8_t)(2 * x);
    assert_int_equal(image_fit(&in, 16, 16, 1, out), 0);
    assert_int_equal(out[7 * 16 + 5], (int)lrint(2 * (8.5 * 45 / 22 - 0.5)));
}

/* Decodes run at once only as far as memory allows: each holds a whole
 * decoded picture (1 GiB for an RGBA PNG of 2^28 pixels), and 16 threads
 * decoding large microscope PNGs took a job past its memory limit, killed
 * without a word. One that fits beside those running starts; one that
 * does not waits for them; one that does not fit alone is refused. */
static void test_decode_admit(void **state)
{
    (void)state;
    const size_t G = (size_t)1 << 30;
    assert_int_equal(decode_admit(G, 0, 2 * G, 4 * G), 1);
    assert_int_equal(decode_admit(G, G, 2 * G, 4 * G), 1);       /* exactly fits */
    assert_int_equal(decode_admit(G, 2 * G, 2 * G, 4 * G), 0);   /* waits */
    assert_int_equal(decode_admit(3 * G, 0, 2 * G, 4 * G), -1);  /* never fits */
    assert_int_equal(decode_admit(G, 0, 5 * G, 4 * G), -1);      /* past it already */
    assert_int_equal(decode_admit(G, 3 * G, 5 * G, 4 * G), 0);
    assert_int_equal(decode_admit(SIZE_MAX, SIZE_MAX / 2, G, SIZE_MAX), 1);   /* no limit */
    assert_int_equal(decode_admit(SIZE_MAX, 0, G, 4 * G), -1);   /* no overflow */
#ifdef HAVE_PNG
    /* A picture that cannot fit even alone: an error naming the file and
     * its size (the limit made tiny by sharing it among 2^20 ranks). */
    if (memory_limit_cached() == SIZE_MAX)
        return;
    enum { S = 1024 };
    uint8_t *px = calloc((size_t)S * S, 1);
    assert_non_null(px);
    assert_int_equal(test_write_png(at("big.png"), px, S, S, 1), 0);
    free(px);
    char p[512];
    snprintf(p, sizeof p, "%s", at("big.png"));
    const char *files[1] = {p};
    cdl_dataset d;
    memory_share_among(1 << 20);
    int rc = cdl_dataset_from_image_files(files, 1, (cdl_shape){1, 8, 8}, 2, 0, &d);
    memory_share_among(1);
    assert_int_equal(rc, -1);
    assert_error_has("big.png: a 1024x1024 picture needs about 4.3 MB to decode");
    /* cdl-predict's files with --jpeg-decode full (decoded whole): gated
     * alike. */
    cdl_dataset_options fo;
    cdl_dataset_options_defaults(&fo);
    fo.jpeg_full = 1;
    memory_share_among(1 << 20);
    rc = cdl_dataset_from_image_files_with(files, 1, (cdl_shape){1, 8, 8}, &fo, &d);
    memory_share_among(1);
    assert_int_equal(rc, -1);
    assert_error_has("big.png: a 1024x1024 picture needs about 4.3 MB to decode");
    assert_int_equal(cdl_dataset_from_image_files(files, 1, (cdl_shape){1, 8, 8}, 2, 0, &d), 0);
    cdl_dataset_free(&d);
#endif
}

/* A picture that shrinks more than 64 times (a 4000x3000 phone or
 * microscope PNG to --image-size 32, 94x) was refused ("shrinks more than
 * 64 times: pass a larger --image-size"), where torchvision resizes it. A
 * ramp stays a ramp: output column x reads the input around
 * (x + 0.5) * 3000 / 32 (the scaled picture is 42x32, crop at 5). */
static void test_image_fit_large_shrink(void **state)
{
    (void)state;
    const int iw = 4000, ih = 3000;
    uint8_t *px = malloc((size_t)iw * ih), out[32 * 32];
    assert_non_null(px);
    for (int y = 0; y < ih; y++)
        for (int x = 0; x < iw; x++)
            px[(size_t)y * iw + x] = (uint8_t)(x / 16);
    image_buf in = {px, ih, iw, 1};
    assert_int_equal(image_fit(&in, 32, 32, 1, out), 0);
    for (int x = 0; x < 32; x++) {
        double centre = (x + 5 + 0.5) * iw / 42.0;   /* int(32 * 4000 / 3000) = 42 */
        assert_true(fabs(out[7 * 32 + x] - centre / 16) <= 1.0);
    }
    free(px);
}

static void test_imagefolder_missing(void **state)
{
    (void)state;
    cdl_dataset d;
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("nope"), 1, NULL, &d), -1);
    assert_error_has("nope");
    mkdir(at("empty"), 0755);
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("empty"), 1, NULL, &d), -1);
    assert_error_has("no class subdirectories");
    assert_int_equal(cdl_dataset_load_with("imagefolder", NULL, 1, NULL, &d), -1);
    assert_error_has("--data-dir");
    /* A class folder empty of PNG/JPEG files, or of WebP/BMP pictures,
     * which cdl does not read (named by byte order, hidden files not). */
    mkdir(at("empty/cat"), 0755);
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("empty"), 1, NULL, &d), -1);
    assert_error_has("empty/cat has no .png, .jpg or .jpeg file: remove the empty class folder");
    write_bytes(at("empty/cat/z.webp"), "RIFF", 4);
    write_bytes(at("empty/cat/b.bmp"), "BM", 2);
    write_bytes(at("empty/cat/.DS_Store"), "x", 1);
    assert_int_equal(cdl_dataset_load_with("imagefolder", at("empty"), 1, NULL, &d), -1);
    assert_error_has("but 2 other files (such as 'b.bmp'): cdl reads PNG and JPEG pictures only");
}

/* ------------------------------------------------------------ npy */

/* A version 1 .npy of descr and shape (a tuple's text) and data. */
static size_t make_npy(uint8_t *out, const char *descr, const char *shape, const void *data,
                       size_t n)
{
    char h[128];
    int len = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                       descr, shape);
    int pad = 64 - (10 + len + 1) % 64;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    size_t hl = (size_t)len + (size_t)pad % 64 + 1;
    out[8] = (uint8_t)(hl & 0xff);
    out[9] = (uint8_t)(hl >> 8);
    memcpy(out + 10, h, (size_t)len);
    memset(out + 10 + len, ' ', hl - 1 - (size_t)len);
    out[10 + hl - 1] = '\n';
    memcpy(out + 10 + hl, data, n);
    return 10 + hl + n;
}

static void test_npy(void **state)
{
    (void)state;
    uint8_t buf[1024];
    mkdir(at("np"), 0755);
    /* 2 RGB pictures 2x2 in NumPy's (n,h,w,c) layout: pixel value = 10*k + p. */
    uint8_t x[2 * 2 * 2 * 3];
    for (int i = 0; i < 2; i++)
        for (int p = 0; p < 4; p++)
            for (int k = 0; k < 3; k++)
                x[(i * 4 + p) * 3 + k] = (uint8_t)(100 * i + 10 * k + p);
    write_bytes(at("np/x_train.npy"), buf, make_npy(buf, "|u1", "(2, 2, 2, 3)", x, sizeof x));
    int64_t y[2] = {4, 1};
    write_bytes(at("np/y_train.npy"), buf, make_npy(buf, "<i8", "(2,)", y, sizeof y));
    cdl_dataset d;
    assert_int_equal(cdl_dataset_load_with("npy", at("np"), 1, NULL, &d), 0);
    assert_int_equal(d.n, 2);
    assert_int_equal(d.shape.c, 3);
    assert_int_equal(d.classes, 5);
    assert_null(d.class_names);
    assert_int_equal(d.labels[0], 4);
    /* (c,h,w): sample 1, channel 2, pixel 3 = 100 + 20 + 3. */
    assert_int_equal(d.images[12 + 2 * 4 + 3], 123);
    cdl_dataset_free(&d);
    /* No test split: 1, no error. */
    assert_int_equal(cdl_dataset_load_with("npy", at("np"), 0, NULL, &d), 1);

    /* float32 features (n, f): float features, per-column statistics. */
    float fx[3 * 5];
    for (int i = 0; i < 15; i++)
        fx[i] = (float)i;
    write_bytes(at("np/x_train.npy"), buf, make_npy(buf, "<f4", "(3, 5)", fx, sizeof fx));
    int32_t y3[3] = {0, 1, 0};
    write_bytes(at("np/y_train.npy"), buf, make_npy(buf, "<i4", "(3,)", y3, sizeof y3));
    assert_int_equal(cdl_dataset_load_with("npy", at("np"), 1, NULL, &d), 0);
    assert_null(d.images);
    assert_non_null(d.features);
    assert_int_equal(d.shape.c, 5);
    assert_non_null(d.channel_mean);
    assert_float_equal(d.channel_mean[1], 6.0, 1e-6);   /* column 1: 1, 6, 11 */
    /* The loader standardises each column. */
    cdl_loader_config lc;
    cdl_loader_defaults(&lc);
    lc.batch_size = 3;
    lc.world = 1;
    cdl_loader *l = cdl_loader_create(&d, &lc);
    assert_non_null(l);
    cdl_batch b;
    assert_int_equal(cdl_loader_start_epoch(l, 0, 0), 0);
    assert_int_equal(cdl_loader_next(l, &b), 1);
    assert_float_equal(b.x[1], (1 - 6) / d.channel_std[1], 1e-5);
    assert_float_equal(b.x[5 + 1], 0, 1e-6);
    cdl_loader_destroy(l);
    lc.augment = CDL_AUGMENT_FLIP;
    assert_null(cdl_loader_create(&d, &lc));
    assert_error_has("--augment none");
    cdl_dataset_free(&d);

    /* A NaN feature (a missing value) is an error naming where it is, not a
     * loss that diverges; so is a float64 beyond float32's range. */
    fx[7] = NAN;
    write_bytes(at("np/x_train.npy"), buf, make_npy(buf, "<f4", "(3, 5)", fx, sizeof fx));
    assert_int_equal(cdl_dataset_load_with("npy", at("np"), 1, NULL, &d), -1);
    assert_error_has("x_train.npy: x[1].flat[2] is NaN");
    double big[3] = {1, 1e300, 2};
    write_bytes(at("np/x_train.npy"), buf, make_npy(buf, "<f8", "(3, 1)", big, sizeof big));
    assert_int_equal(cdl_dataset_load_with("npy", at("np"), 1, NULL, &d), -1);
    assert_error_has("x[1].flat[0] is beyond float32's range");
    /* Labels: the value named as stored; one label per sample. */
    uint8_t x3[3] = {1, 2, 3};
    write_bytes(at("np/x_train.npy"), buf, make_npy(buf, "|u1", "(3, 1)", x3, sizeof x3));
    y3[2] = 1000000;
    write_bytes(at("np/y_train.npy"), buf, make_npy(buf, "<i4", "(3,)", y3, sizeof y3));
    assert_int_equal(cdl_dataset_load_with("npy", at("np"), 1, NULL, &d), -1);
    assert_error_has("label 1000000 of sample 2");
    write_bytes(at("np/y_train.npy"), buf, make_npy(buf, "<i4", "(2,)", y3, 2 * sizeof *y3));
    assert_int_equal(cdl_dataset_load_with("npy", at("np"), 1, NULL, &d), -1);
    assert_error_has("x_train.npy holds 3 samples but");
    assert_error_has("y_train.npy 2 labels");
    /* RGBA pictures in NumPy's layout: the alpha channel is named. */
    uint8_t rgba[3 * 5 * 5 * 4] = {0};
    write_bytes(at("np/x_train.npy"), buf, make_npy(buf, "|u1", "(3, 5, 5, 4)", rgba,
                                                    sizeof rgba));
    y3[2] = 1;
    write_bytes(at("np/y_train.npy"), buf, make_npy(buf, "<i4", "(3,)", y3, sizeof y3));
    assert_int_equal(cdl_dataset_load_with("npy", at("np"), 1, NULL, &d), -1);
    assert_error_has("looks like RGBA pictures (n,h,w,4)");
}

static void test_npy_hostile(void **state)
{
    (void)state;
    uint8_t buf[1024], x[4] = {1, 2, 3, 4};
    npy_array a;
    size_t n = make_npy(buf, "|u1", "(1, 2, 2)", x, 4);
    assert_int_equal(npy_parse(buf, n, "t.npy", &a), 0);
    assert_int_equal(npy_parse(buf, n - 1, "t.npy", &a), -1);   /* truncated data */
    assert_error_has("truncated");
    assert_int_equal(npy_parse(buf, 20, "t.npy", &a), -1);      /* truncated header */
    assert_error_has("t.npy");
    buf[1] = 'X';
    assert_int_equal(npy_parse(buf, n, "t.npy", &a), -1);
    assert_error_has("magic");
    n = make_npy(buf, "|u1", "(4294967296, 4294967296, 4294967296)", x, 4);
    assert_int_equal(npy_parse(buf, n, "t.npy", &a), -1);       /* huge declared shape */
    n = make_npy(buf, "|u1", "(1000000, 1000, 1000)", x, 4);
    assert_int_equal(npy_parse(buf, n, "t.npy", &a), -1);
    assert_error_has("truncated");
    n = make_npy(buf, ">f4", "(1,)", x, 4);
    assert_int_equal(npy_parse(buf, n, "t.npy", &a), -1);
    assert_error_has("big-endian");
    n = make_npy(buf, "<c8", "(1,)", x, 4);
    assert_int_equal(npy_parse(buf, n, "t.npy", &a), -1);
    assert_error_has("not supported");
    n = make_npy(buf, "<U1", "(1,)", x, 4);   /* text labels */
    assert_int_equal(npy_parse(buf, n, "t.npy", &a), -1);
    assert_error_has("np.unique(y, return_inverse=True)[1]");
    cdl_dataset d;
    assert_int_equal(npz_read_mem((const uint8_t *)"PK\3\4garbage", 11, "t.npz", 1, &d), -1);
    assert_error_has("t.npz");
}

/* ------------------------------------------------------------ CSV */

static void test_csv(void **state)
{
    (void)state;
    const char *t = "\xef\xbb\xbf" "a,\"b, \"\"quoted\"\"\nline\",species\r\n"
                    "1.5,2,setosa\r\n"
                    "\"3\",4e1,\"vir, ginica\"\n"
                    "\n"
                    "-1,0,setosa";
    cdl_dataset d = {0};
    if (csv_parse(t, strlen(t), "t.csv", "species", NULL, NULL, &d) != 0)
        fail_msg("%s", cdl_last_error());
    assert_int_equal(d.n, 3);
    assert_int_equal(d.shape.c, 2);
    assert_int_equal(d.classes, 2);
    assert_string_equal(d.class_names[0], "setosa");
    assert_string_equal(d.class_names[1], "vir, ginica");
    assert_int_equal(d.labels[1], 1);
    assert_float_equal(d.features[3], 40.0, 0);
    assert_float_equal(d.features[4], -1.0, 0);
    cdl_dataset_free(&d);
    /* Default label column: the last; integer labels are class indices. */
    const char *u = "x,y,k\n1,2,3\n4,5,0\n";
    assert_int_equal(csv_parse(u, strlen(u), "u.csv", NULL, NULL, NULL, &d), 0);
    assert_int_equal(d.classes, 4);
    assert_null(d.class_names);
    cdl_dataset_free(&d);

    const char *bad[][2] = {
        {"a,label\nzz,1\n", "'zz', not a finite number"},
        {"a,label\n1,2,3\n", "more fields"},
        {"a,label\n1\n", "1 fields"},
        {"a,label\n\"1,2\n", "not closed"},
        {"a,label\n\"1\"x,2\n", "closing quote"},
        {"label,a\nx,\"1\n", "not closed"},   /* a label read before the error is freed */
        {"", "empty"},
        {"a,label\n", "no rows"},
        {"a,label\n1,0\n2,\n", "b.csv:3: the label column 'label' is empty"},
        {"a;b;label\n1;2;0\n", "b.csv:1: the header has 1 column"},
        {"a;b;label\n1;2;0\n", "separated by ';', cdl reads commas"},
        {"a\tlabel\n1\t0\n", "separated by tabs"},
        /* A blank cell (a spreadsheet's missing value) was read as 0. */
        {"a,b,label\n1,2,0\n3, ,1\n", "b.csv:3: column 'b' is empty (a missing value)"},
        {"a,b,label\n1,nan,0\n", "b.csv:2: column 'b' holds 'nan', not a finite number"},
        /* A spreadsheet's empty column past the table: named by number. */
        {"a,label,\n1,0,\n", "b.csv:2: column 3 (no name in the header) is empty"},
        /* Lines as an editor numbers them: a cell after a quoted line
         * break is on the line after its row's first (the row's was
         * named), a CR alone in a quoted field ends a line as it ends a
         * record, and a row that runs over lines says so. */
        {"label,a\n\"p\nq\",zz\n", "b.csv:3: column 'a' holds 'zz', not a finite number"},
        {"label,a\n\"p\rq\",1\n\"r\",\n", "b.csv:4: column 'a' is empty"},
        {"a,label\n1,\"x\ny\",2\n", "b.csv:3: more fields than the 2 columns of the header "
                                   "(the row starts on line 2: a quoted field holds line "
                                   "breaks; is a quote missing?)"},
        {"label,a,b\n\"x,1\n2\",3\n", "b.csv:2: 2 fields but the header has 3 columns (the "
                                     "row runs to line 3"},
        {"a,label\n1,\"x\n", "b.csv:2: a quoted field is not closed before the end of the file: "
                             "add its closing quote"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&d, 0, sizeof d);
        assert_int_equal(csv_parse(bad[i][0], strlen(bad[i][0]), "b.csv", NULL, NULL, NULL, &d),
                         -1);
        assert_error_has(bad[i][1]);
        assert_error_has("b.csv");
        cdl_dataset_free(&d);
    }
    memset(&d, 0, sizeof d);
    assert_int_equal(csv_parse(u, strlen(u), "u.csv", "label", NULL, NULL, &d), -1);
    assert_error_has("--label-column");
    assert_error_has("('x', 'y', 'k')");
    const char *sp = "a, label\n1, 0\n";   /* the column is ' label' */
    assert_int_equal(csv_parse(sp, strlen(sp), "s.csv", "label", NULL, NULL, &d), -1);
    assert_error_has("s.csv:1: no column named 'label' in the header ('a', ' label')");
    cdl_dataset_free(&d);

    /* Files: a folder with train.csv and test.csv, text labels mapped. */
    mkdir(at("tab"), 0755);
    write_bytes(at("tab/train.csv"), "f,c\n1,b\n2,a\n", 12);
    write_bytes(at("tab/test.csv"), "f,c\n3,b\n", 8);
    if (cdl_dataset_load_with("csv", at("tab"), 0, NULL, &d) != 0)
        fail_msg("%s", cdl_last_error());
    assert_int_equal(d.classes, 2);
    assert_int_equal(d.labels[0], 1);
    cdl_dataset_free(&d);
    assert_int_equal(cdl_dataset_load_with("csv", at("tab/train.csv"), 0, NULL, &d), 1);

    /* A test table's columns are the training table's by name, in any
     * order (the label column too); one missing or extra is an error. */
    write_bytes(at("tab/train.csv"), "f,g,c\n1,10,b\n2,20,a\n", 20);
    write_bytes(at("tab/test.csv"), "c,g,f\nb,30,3\n", 13);
    if (cdl_dataset_load_with("csv", at("tab"), 0, NULL, &d) != 0)
        fail_msg("%s", cdl_last_error());
    assert_int_equal(d.shape.c, 2);
    assert_float_equal(d.features[0], 3, 0);
    assert_float_equal(d.features[1], 30, 0);
    assert_int_equal(d.labels[0], 1);
    cdl_dataset_free(&d);
    const char *test_bad[][2] = {
        /* The header's faults: its line (1), as rows' name theirs. */
        {"f,g,h,c\n1,2,3,a\n", "test.csv:1: column 'h' is not a column of the training table"},
        {"f,c\n1,a\n", "test.csv:1: the header lacks the training table's column 'g'"},
        {"f,g,f,c\n1,2,3,a\n", "test.csv:1: two columns are named 'f': rename or remove one"},
        {"f,g,k\n1,2,a\n", "test.csv:1: the header has no column 'c', the training table's "
                            "label column: name the test table's label column as the "
                            "training table does"},
    };
    for (size_t i = 0; i < sizeof test_bad / sizeof test_bad[0]; i++) {
        write_bytes(at("tab/test.csv"), test_bad[i][0], strlen(test_bad[i][0]));
        assert_int_equal(cdl_dataset_load_with("csv", at("tab"), 0, NULL, &d), -1);
        assert_error_has(test_bad[i][1]);
        assert_error_has("test.csv");
    }
    /* The test table's classes are the training table's, in its order: a
     * test table without one of them (b) numbers the others as the
     * training table does (c is 2, not 1), and a label the training table
     * lacks is an error naming the file's line (a blank line and a quoted
     * line break before it), the training table and its classes. */
    const char *tr3 = "f,c\n1,b\n2,a\n3,c\n";
    write_bytes(at("tab/train.csv"), tr3, strlen(tr3));
    const char *te2 = "c,f\nc,1\na,2\n";
    write_bytes(at("tab/test.csv"), te2, strlen(te2));
    if (cdl_dataset_load_with("csv", at("tab"), 0, NULL, &d) != 0)
        fail_msg("%s", cdl_last_error());
    assert_int_equal(d.classes, 3);
    assert_string_equal(d.class_names[1], "b");
    assert_int_equal(d.labels[0], 2);
    assert_int_equal(d.labels[1], 0);
    cdl_dataset_free(&d);
    const char *te_odd = "f,c\n\n1,a\n\"\n2\",c\n3,d\n";
    write_bytes(at("tab/test.csv"), te_odd, strlen(te_odd));
    assert_int_equal(cdl_dataset_load_with("csv", at("tab"), 0, NULL, &d), -1);
    assert_error_has("test.csv:6: label 'd' is not a class of the training table");
    assert_error_has("tab/train.csv, whose 3 classes ('a', 'b', 'c') number the model's outputs");
    assert_error_has("correct the label or drop the row");
    /* Integer training labels: the test table's must be class indices too,
     * not text numbering classes of its own. */
    write_bytes(at("tab/train.csv"), "f,c\n1,0\n2,1\n", 12);
    write_bytes(at("tab/test.csv"), "f,c\n\n3,x\n", 9);
    assert_int_equal(cdl_dataset_load_with("csv", at("tab"), 0, NULL, &d), -1);
    assert_error_has("test.csv:3: label 'x' is not a class index");
    assert_error_has("tab/train.csv's labels are integers from 0");
    /* A label that is not UTF-8: its line, the header's name spanning two. */
    const char *bad8 = "\"f\ng\",c\n1,a\n2,\xff\n";
    write_bytes(at("bad8.csv"), bad8, strlen(bad8));
    assert_int_equal(cdl_dataset_load_with("csv", at("bad8.csv"), 1, NULL, &d), -1);
    assert_error_has("bad8.csv:4: the label '");
    assert_error_has("is not UTF-8 text");
}

/* Rows to predict on (cdl-predict TABLE.csv): the model's columns by
 * name, in its order, whatever the table's; other columns not read (named
 * in ignored); the label column optional, its text kept per row. */
static void test_csv_rows(void **state)
{
    (void)state;
    const char *want[] = {"a", "b", "c"};
    const char *t = "\xef\xbb\xbf" "id,c,\"b\",kind,a\r\n"
                    "\"x, \"\"1\"\"\nmore\",3,2,setosa,1\r\n"
                    "\r\n"
                    "y,30,20,,10\r\n";
    cdl_dataset d = {0};
    char ignored[64];
    if (csv_parse_rows(t, strlen(t), "r.csv", want, 3, "kind", ignored, sizeof ignored, &d) != 0)
        fail_msg("%s", cdl_last_error());
    assert_int_equal(d.n, 2);
    assert_int_equal(d.shape.c, 3);
    assert_int_equal(d.classes, 2);
    for (int k = 0; k < 3; k++) {
        assert_float_equal(d.features[k], k + 1, 0);
        assert_float_equal(d.features[3 + k], 10 * (k + 1), 0);
    }
    assert_int_equal(d.labels[1], 1);
    assert_string_equal(d.class_names[0], "setosa");
    assert_string_equal(d.class_names[1], "");
    assert_string_equal(ignored, "'id'");
    cdl_dataset_free(&d);
    /* No label column: no label texts; a name's line break is a space. */
    const char *want2[] = {"a", "b c"};
    const char *u = "\"b\nc\",a\n2,1\n";
    assert_int_equal(csv_parse_rows(u, strlen(u), "u.csv", want2, 2, "kind", ignored,
                                    sizeof ignored, &d), 0);
    assert_null(d.class_names);
    assert_string_equal(ignored, "");
    assert_float_equal(d.features[0], 1, 0);
    cdl_dataset_free(&d);
    const char *bad[][2] = {
        {"a,x\n1,2\n", "r.csv:1: the header lacks 2 of the 3 feature columns the model was "
                       "trained on: 'b', 'c'"},
        {"a,b,c,a\n1,2,3,4\n", "r.csv:1: two columns are named 'a'"},
        {"a,b,c\n1,2,3\n4,,6\n", "r.csv:3: column 'b' is empty"},
        {"c,b,a\n1,NaN,3\n", "r.csv:2: column 'b' holds 'NaN'"},
        {"a,b,c\n", "no rows"},
        {"a;b;c\n1;2;3\n", "separated by ';'"},
        {"a,b,c\n1,2\n", "2 fields but the header has 3 columns"},
        {"a, b,c\n1,2,3\n", "the table's ' b' differs from 'b' in spaces only"},
        /* A cell after a quoted line break in a column not read: its line. */
        {"id,a,b,c\n\"x\ny\",1,,3\n", "r.csv:3: column 'b' is empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&d, 0, sizeof d);
        assert_int_equal(csv_parse_rows(bad[i][0], strlen(bad[i][0]), "r.csv", want, 3, "kind",
                                        NULL, 0, &d), -1);
        assert_error_has(bad[i][1]);
        cdl_dataset_free(&d);
    }
    /* A training table with two columns of one name: its own header in
     * its order still reads (the label anywhere), another is an error. */
    const char *dup[] = {"a", "a"};
    const char *v = "kind,a,a\nx,1,2\n";
    if (csv_parse_rows(v, strlen(v), "v.csv", dup, 2, "kind", NULL, 0, &d) != 0)
        fail_msg("%s", cdl_last_error());
    assert_float_equal(d.features[0], 1, 0);
    assert_float_equal(d.features[1], 2, 0);
    assert_string_equal(d.class_names[0], "x");
    cdl_dataset_free(&d);
    const char *w = "a,b,a\n1,2,3\n";
    assert_int_equal(csv_parse_rows(w, strlen(w), "w.csv", dup, 2, "kind", NULL, 0, &d), -1);
    assert_error_has("two named 'a': its columns cannot be matched by name");
    cdl_dataset_free(&d);
    /* Each row's line in the file, for messages about its label (cdl-eval's
     * labels the run lacks): not the row's number + 1 after a header over
     * two lines, a quoted line break (its label is on the row's second
     * line), a blank line; without a label column, the row's first line. */
    long *lines = (long *)1;
    write_bytes(at("lines.csv"), t, strlen(t));
    if (cdl_dataset_from_csv_rows_lines(at("lines.csv"), want, 3, "kind", NULL, 0, &d,
                                        &lines) != 0)
        fail_msg("%s", cdl_last_error());
    assert_int_equal(d.n, 2);
    assert_non_null(lines);
    assert_int_equal(lines[0], 3);
    assert_int_equal(lines[1], 5);
    cdl_free(lines);
    cdl_dataset_free(&d);
    const char *hl = "\"b\nc\",a\n2,1\n\n\"3\",\"4\"\n";
    write_bytes(at("lines.csv"), hl, strlen(hl));
    if (cdl_dataset_from_csv_rows_lines(at("lines.csv"), want2, 2, NULL, NULL, 0, &d,
                                        &lines) != 0)
        fail_msg("%s", cdl_last_error());
    assert_int_equal(d.n, 2);
    assert_int_equal(lines[0], 3);
    assert_int_equal(lines[1], 5);
    cdl_free(lines);
    cdl_dataset_free(&d);
    /* An error: no array, and the dataset left empty. */
    lines = (long *)1;
    write_bytes(at("lines.csv"), "a,b c\n1,x\n", 11);
    assert_int_equal(cdl_dataset_from_csv_rows_lines(at("lines.csv"), want2, 2, NULL, NULL, 0,
                                                     &d, &lines), -1);
    assert_error_has("lines.csv:2: column 'b c' holds 'x'");
    assert_null(lines);
    assert_int_equal(d.n, 0);
    /* Without lines it reads as cdl_dataset_from_csv_rows. */
    write_bytes(at("lines.csv"), hl, strlen(hl));
    assert_int_equal(cdl_dataset_from_csv_rows_lines(at("lines.csv"), want2, 2, NULL, NULL, 0,
                                                     &d, NULL), 0);
    assert_int_equal(d.n, 2);
    cdl_dataset_free(&d);
    /* The training table's names for its checkpoint: features in order,
     * the label column's name apart. */
    char *f, *l;
    write_bytes(at("cols.csv"), "x,\"y\nz\",label,w\n1,2,0,3\n", 24);
    if (csv_columns(at("cols.csv"), NULL, &f, &l) != 0)
        fail_msg("%s", cdl_last_error());
    assert_string_equal(f, "x\ny z\nw");
    assert_string_equal(l, "label");
    cdl_free(f);
    cdl_free(l);
    if (csv_columns(at("cols.csv"), "w", &f, &l) != 0)
        fail_msg("%s", cdl_last_error());
    assert_string_equal(f, "x\ny z\nlabel");
    assert_string_equal(l, "w");
    cdl_free(f);
    cdl_free(l);
    /* A column without a name first (pandas' index): still its line. */
    write_bytes(at("cols.csv"), ",x,label\n0,1,0\n", 15);
    if (csv_columns(at("cols.csv"), NULL, &f, &l) != 0)
        fail_msg("%s", cdl_last_error());
    assert_string_equal(f, "\nx");
    cdl_free(f);
    cdl_free(l);
}

/* ------------------------------------------------------------ normalisation */

static void test_normalize_given(void **state)
{
    (void)state;
    const char *u = "x,y,k\n1,2,3\n4,5,0\n";
    write_bytes(at("g.csv"), u, strlen(u));
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    float m[2] = {1, 2}, s[2] = {3, 4};
    o.normalize = CDL_NORMALIZE_GIVEN;
    o.norm_count = 2;
    o.norm_mean = m;
    o.norm_std = s;
    cdl_dataset d;
    assert_int_equal(cdl_dataset_load_with("csv", at("g.csv"), 1, &o, &d), 0);
    assert_float_equal(d.mean[1], 2, 0);
    assert_float_equal(d.std[0], 3, 0);
    cdl_dataset_free(&d);
    o.norm_count = 3;
    assert_int_equal(cdl_dataset_load_with("csv", at("g.csv"), 1, &o, &d), -1);
    assert_error_has("--normalize");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#if defined(HAVE_PNG) && defined(HAVE_JPEG)
        cmocka_unit_test_setup_teardown(test_imagefolder, setup, teardown),
        cmocka_unit_test_setup_teardown(test_imagefolder_nested, setup, teardown),
        cmocka_unit_test_setup_teardown(test_imagefolder_name_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_imagefolder_left_out, setup, teardown),
        cmocka_unit_test_setup_teardown(test_imagefolder_val, setup, teardown),
        cmocka_unit_test_setup_teardown(test_imagefolder_bad_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_imagefolder_dangling_link, setup, teardown),
        cmocka_unit_test_setup_teardown(test_imagefolder_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_imagefolder_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_image_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jpeg_cmyk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jpeg_full, setup, teardown),
#endif
        cmocka_unit_test_setup_teardown(test_imagefolder_missing, setup, teardown),
        cmocka_unit_test(test_image_fit_torchvision),
        cmocka_unit_test(test_image_fit_large_shrink),
        cmocka_unit_test_setup_teardown(test_decode_admit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_formats, setup, teardown),
#ifdef HAVE_PNG
        cmocka_unit_test_setup_teardown(test_png_alpha, setup, teardown),
#endif
        cmocka_unit_test_setup_teardown(test_npy, setup, teardown),
        cmocka_unit_test(test_npy_hostile),
        cmocka_unit_test_setup_teardown(test_csv, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_normalize_given, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
