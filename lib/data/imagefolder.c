/* ImageFolder trees: root/<class>/[<folders>/]<file>.png|.jpg|.jpeg
 * (docs/data.md).
 *
 * Classes are the subdirectories sorted as Python sorts their names
 * (data_name_cmp: torchvision's ImageFolder), hidden ones (".name") left out; a class's
 * pictures are those of its folder and of the folders inside it, in
 * torchvision's order (list_class_files), so sample i is the same file on
 * every rank and every run. With root/train the splits are root/train and
 * root/test (or root/val), the test split mapped onto train's classes.
 *
 * Every file is decoded once, at load time, by `threads` threads into the
 * uint8 (n, c, h, w) array the loader reads like idx data. Decoding at load
 * rather than in the loader's workers keeps the dataset's contract: n, the
 * sample order and the skipped files are known before the first batch, so a
 * bad file found late cannot change which sample a batch index means (and
 * a resumed run sees the same samples); each file is written only into its
 * own slot, so the result does not depend on the number of threads. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <cdl/cdl.h>

#include "lib/core/memlimit.h"
#include "lib/data/internal.h"

#define MAX_FILE_BYTES IMAGE_MAX_FILE_BYTES
#define MAX_CLASSES 100000
#define HINT "check the folder layout (docs/data.md)"

typedef struct strlist {
    char **v;
    int n, cap;
} strlist;

static void strlist_free(strlist *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int strlist_add(strlist *l, const char *s)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        char **v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return cdl_error("out of memory listing a dataset folder");
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(s)))
        return cdl_error("out of memory listing a dataset folder");
    l->n++;
    return 0;
}

/* Names in torchvision's order (data_name_cmp): sorted() of Python's
 * strings, which for a name that is not UTF-8 is not strcmp's. */
static int cmp_str(const void *a, const void *b)
{
    return data_name_cmp(*(char *const *)a, *(char *const *)b);
}

static int is_image_name(const char *s)
{
    const char *dot = strrchr(s, '.');
    return dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") ||
                   !strcasecmp(dot, ".jpeg"));
}

/* A picture torchvision's ImageFolder reads and cdl does not: left out,
 * each reported (cdl_dataset_options.left_out), as the two would
 * otherwise train on different samples without a word. */
static int is_other_picture_name(const char *s)
{
    static const char *const ext[] = {".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp"};
    const char *dot = strrchr(s, '.');
    for (size_t k = 0; dot && k < sizeof ext / sizeof ext[0]; k++)
        if (!strcasecmp(dot, ext[k]))
            return 1;
    return 0;
}

/* buf = a/b; an error when it does not fit. */
static int join(char *buf, size_t len, const char *a, const char *b)
{
    char pn[256];
    if ((size_t)snprintf(buf, len, "%s/%s", a, b) >= len)
        return cdl_error("%s/%s: path too long", data_printable(a, pn, sizeof pn), b);
    return 0;
}

/* 1 when path is a folder, 0 when it is not there or not one, -1 (with
 * an error naming it) when the file system fails to say: a train/ or
 * test/ whose stat() failed (EIO, ESTALE) was taken for missing, and the
 * run read the split folders as classes, or trained without its test
 * set, in silence. */
static int is_dir(const char *path)
{
    char pn[512];
    struct stat st;
    if (stat(path, &st) == 0)
        return S_ISDIR(st.st_mode);
    if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)
        return 0;
    return cdl_error("cannot stat %s in the image folder: %m (retry when the file system "
                     "answers)", data_printable(path, pn, sizeof pn));
}

/* The entries of dir that are directories (want_dirs) or image files,
 * sorted; hidden entries are left out. others (files only; NULL: not
 * wanted): the names of pictures of other formats (is_other_picture_name),
 * sorted. */
static int list_dir(const char *dir, int want_dirs, strlist *out, strlist *others)
{
    char pn[512];
    DIR *d = opendir(dir);
    if (!d) {
        int err = errno;
        char advice[512];
        return cdl_error("cannot open the image folder %s: %s: %s",
                         data_printable(dir, pn, sizeof pn), strerror(err),
                         data_open_advice(err, HINT, advice, sizeof advice));
    }
    struct dirent *e;
    char path[4096];
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (!want_dirs && !is_image_name(e->d_name)) {
            if (others && is_other_picture_name(e->d_name))
                rc = strlist_add(others, e->d_name);
            continue;
        }
        if ((rc = join(path, sizeof path, dir, e->d_name)))
            break;
        struct stat st;
        if (stat(path, &st) != 0) {
            int err = errno;
            /* A file system that fails to answer (EIO, ESTALE, a timeout of
             * a shared one): the picture or class was left out in silence,
             * and the run trained without it. */
            if (err != ENOENT && err != ELOOP && err != ENOTDIR) {
                rc = cdl_error("cannot stat %s in the image folder: %s (it would be left out "
                               "of the data; retry when the file system answers)",
                               data_printable(path, pn, sizeof pn), strerror(err));
                break;
            }
            /* A dangling link. Named as a picture, torchvision lists it
             * and fails to open it, and so does the decoding here (the
             * error names it; --skip-bad-files leaves it out, named):
             * skipped in silence, a picture the user meant to train on was
             * lost. Named as a folder it is not a class, as there. */
            if (!want_dirs && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
                rc = strlist_add(out, e->d_name);
            continue;
        }
        if (want_dirs ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode))
            rc = strlist_add(out, e->d_name);
    }
    closedir(d);
    if (!rc && out->n > 1)   /* an empty list has no array (qsort wants one) */
        qsort(out->v, (size_t)out->n, sizeof *out->v, cmp_str);
    if (!rc && others && others->n > 1)
        qsort(others->v, (size_t)others->n, sizeof *others->v, cmp_str);
    return rc;
}

/* Deepest folder inside a class folder that is read (a guard, not a
 * layout anyone needs). */
#define MAX_DEPTH 64

/* The folders of the tree at dir, dir itself included, appended to out;
 * hidden ones (".name") are left out and symbolic links to folders
 * followed, as torchvision's os.walk(dir, followlinks=True) does. above:
 * the device and inode of the depth folders dir is inside, for a link
 * back to one of them (a loop, which os.walk would follow for ever). */
typedef struct dir_id {
    dev_t dev;
    ino_t ino;
} dir_id;

static int list_tree(const char *dir, int depth, dir_id *above, strlist *out)
{
    char pn[512], path[4096];
    struct stat st;
    if (stat(dir, &st) != 0 && errno == ENOENT)
        return 0;   /* vanished since it was listed */
    if (stat(dir, &st) != 0)   /* one that fails to answer: not left out in silence */
        return cdl_error("cannot stat %s in the image folder: %m (it would be left out of the "
                         "data; retry when the file system answers)",
                         data_printable(dir, pn, sizeof pn));
    for (int k = 0; k < depth; k++)
        if (above[k].dev == st.st_dev && above[k].ino == st.st_ino)
            return cdl_error("%s leads back to a folder above it (a symbolic link loop): remove "
                             "the link", data_printable(dir, pn, sizeof pn));
    if (depth == MAX_DEPTH)
        return cdl_error("%s: folders nested more than %d deep in a class folder",
                         data_printable(dir, pn, sizeof pn), MAX_DEPTH);
    above[depth] = (dir_id){st.st_dev, st.st_ino};
    strlist subs = {0};
    int rc = strlist_add(out, dir);
    if (!rc)
        rc = list_dir(dir, 1, &subs, NULL);
    for (int i = 0; !rc && i < subs.n; i++)
        if (!(rc = join(path, sizeof path, dir, subs.v[i])))
            rc = list_tree(path, depth + 1, above, out);
    strlist_free(&subs);
    return rc;
}

/* The pictures of the class folder dir and of the folders inside it, in
 * torchvision's order: folders sorted by their path (Python's sorted() of
 * os.walk's), the files of each sorted; appended to files as paths, and
 * those of other formats torchvision reads to others, in the same order. */
static int list_class_files(const char *dir, strlist *files, strlist *others)
{
    dir_id above[MAX_DEPTH];
    strlist tree = {0}, here = {0}, other = {0};
    char full[4096];
    int rc = list_tree(dir, 0, above, &tree);
    if (!rc && tree.n > 1)
        qsort(tree.v, (size_t)tree.n, sizeof *tree.v, cmp_str);
    for (int t = 0; !rc && t < tree.n; t++) {
        strlist_free(&here);
        strlist_free(&other);
        rc = list_dir(tree.v[t], 0, &here, &other);
        for (int i = 0; !rc && i < here.n; i++)
            if (!(rc = join(full, sizeof full, tree.v[t], here.v[i])))
                rc = strlist_add(files, full);
        for (int i = 0; !rc && i < other.n; i++)
            if (!(rc = join(full, sizeof full, tree.v[t], other.v[i])))
                rc = strlist_add(others, full);
    }
    strlist_free(&here);
    strlist_free(&other);
    strlist_free(&tree);
    return rc;
}

/* Regular files of dir that are not hidden (none of them a picture
 * list_dir takes), and the printable name of the first by byte value in
 * first (the same message every run): a class folder of .webp or .bmp
 * pictures is not an empty one. */
static long count_other_files(const char *dir, char *first, size_t len)
{
    DIR *d = opendir(dir);
    long n = 0;
    char least[256] = "";
    first[0] = '\0';
    if (!d)
        return 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
        struct stat st;
        if (e->d_name[0] == '.' || join(path, sizeof path, dir, e->d_name) ||
            stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (n++ == 0 || strcmp(e->d_name, least) < 0)
            snprintf(least, sizeof least, "%s", e->d_name);
    }
    closedir(d);
    data_printable(least, first, len);
    return n;
}

typedef struct job {
    const strlist *files;       /* full paths */
    int h, w, c;
    uint8_t *images;
    char **errors;              /* per file: NULL or the error */
    pthread_mutex_t mu;
    long next;
    uint64_t hist[3][256];      /* no images (the check before streaming): the pixels of the
                                 * readable files, so the statistics need no second pass */
    int (*stop)(void);          /* cdl_dataset_options.stop, or NULL */
    long first_colour;          /* the least index of a colour file (RGB, or RGB and alpha),
                                 * or files->n: none */
    int stopped;                /* stop said so: the pictures are not all decoded */
    int jpeg_full;              /* cdl_dataset_options.jpeg_full */
} job;

/* File i into its slot of images, or into the worker's scratch when there
 * are no slots (the check of every file before streaming). */
static int decode_one(job *j, long i, uint8_t *scratch, int *src_c)
{
    size_t sample = (size_t)j->c * j->h * j->w;
    return image_file_fit_as(j->files->v[i], j->h, j->w, j->c, j->jpeg_full,
                             j->images ? j->images + (size_t)i * sample : scratch, src_c);
}

static void *decode_worker(void *arg)
{
    job *j = arg;
    size_t plane = (size_t)j->h * j->w;
    uint8_t *scratch = j->images ? NULL : cdl_malloc((size_t)j->c * plane);
    uint64_t hist[3][256] = {{0}};
    long first_colour = j->files->n;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        long i = j->next++;
        if (j->stop && !j->stopped && j->stop())
            j->stopped = 1;
        int stopped = j->stopped;
        pthread_mutex_unlock(&j->mu);
        if (i >= j->files->n || stopped)
            break;
        int src_c = 1;
        if ((!j->images && !scratch) || decode_one(j, i, scratch, &src_c)) {
            j->errors[i] = strdup(cdl_last_error()[0] ? cdl_last_error() : "unreadable");
            continue;
        }
        if (src_c != 1 && i < first_colour)
            first_colour = i;
        for (int ch = 0; scratch && ch < j->c; ch++)
            for (size_t k = 0; k < plane; k++)
                hist[ch][scratch[ch * plane + k]]++;
    }
    cdl_free(scratch);
    pthread_mutex_lock(&j->mu);
    for (int ch = 0; ch < 3; ch++)   /* integer sums: the order does not matter */
        for (int v = 0; v < 256; v++)
            j->hist[ch][v] += hist[ch][v];
    if (first_colour < j->first_colour)
        j->first_colour = first_colour;
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Decodes every file with `threads` threads; errors[i] set for bad ones. */
static int decode_all(job *j, int threads)
{
    pthread_mutex_init(&j->mu, NULL);
    j->next = 0;
    j->first_colour = j->files->n;
    if (threads > j->files->n)
        threads = j->files->n;
    if (threads > 256)
        threads = 256;
    pthread_t tid[256];
    int started = 0;
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&tid[started], NULL, decode_worker, j) != 0)
            break;   /* fewer threads only make it slower */
        started++;
    }
    decode_worker(j);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&j->mu);
    return 0;
}

/* The decoded pictures stay in memory and the validation split copies them
 * once, so loading needs about twice their size: refuse before decoding
 * what cannot fit, rather than be killed by the OOM killer halfway. */
static int check_memory(const char *root, long n, int c, int h, int w, size_t limit)
{
    char pn[512];
    double need = 2.0 * (double)n * c * h * w;
    if (limit == 0)
        limit = memory_limit();
    if (limit == SIZE_MAX || need <= (double)limit)
        return 0;
    return cdl_error("%s: %ld pictures of %dx%dx%d are %.2f GiB decoded and loading them "
                     "needs about %.2f GiB, more than the %.2f GiB this process may use "
                     "(node memory or the job's memory limit; with several ranks on a node, "
                     "each rank's share of it): cdl keeps the decoded "
                     "pictures in memory with --decode memory (docs/data.md): use --decode "
                     "stream or auto, pass a smaller --image-size, or ask for more memory "
                     "(sbatch --mem)",
                     data_printable(root, pn, sizeof pn), n, c, h, w, need / 2 / (1 << 30),
                     need / (1 << 30), (double)limit / (1 << 30));
}

/* Classes of root (sorted subdirectories). */
static int list_classes(const char *root, strlist *classes)
{
    char pn[512];
    if (list_dir(root, 1, classes, NULL))
        return -1;
    if (classes->n == 0)
        return cdl_error("%s has no class subdirectories: an image folder holds one "
                         "subdirectory of pictures per class (docs/data.md)",
                         data_printable(root, pn, sizeof pn));
    if (classes->n > MAX_CLASSES)
        return cdl_error("%s has %d class subdirectories, more than %d",
                         data_printable(root, pn, sizeof pn), classes->n, MAX_CLASSES);
    for (int k = 0; k < classes->n; k++)
        if (!data_utf8_ok(classes->v[k]))
            return cdl_error("%s: the class folder name '%s' is not UTF-8 text: rename it (class "
                             "names go into checkpoints and reports)",
                             data_printable(root, pn, sizeof pn),
                             data_printable(classes->v[k], pn + 256, 256));
    return 0;
}

/* A bad file's error, with the way out unless the decoder's message
 * already gives it. */
static int bad_file_error(const char *msg)
{
    if (strstr(msg, "--skip-bad-files"))
        return cdl_error("%s", msg);
    return cdl_error("%s (or pass --skip-bad-files to leave such files out)", msg);
}

/* The first readable image decides the size and channels not given (a
 * test split is given its training split's: its own first picture may
 * have another size or be gray where training's was RGB). */
static int pick_geometry(const char *root, const strlist *files, const cdl_dataset_options *o,
                         int *h, int *w, int *c, int *first_ok)
{
    char pn[512], first[1024] = "";
    int rc = -1;
    for (int i = 0; i < files->n; i++) {
        uint8_t *buf;
        size_t len;
        int ih, iw, ic;
        const char *name = data_printable(files->v[i], pn, sizeof pn);
        rc = data_read_file(files->v[i], MAX_FILE_BYTES, HINT, &buf, &len);
        if (!rc) {
            rc = image_probe(buf, len, name, &ih, &iw, &ic);
            cdl_free(buf);
        }
        if (rc && o->skip_bad_files) {
            if (!first[0])
                snprintf(first, sizeof first, "%s", cdl_last_error());
            continue;
        }
        if (rc)
            return -1;
        int exact = o->image_height > 0 && o->image_width > 0;
        *h = exact ? o->image_height : o->image_size > 0 ? o->image_size : ih;
        *w = exact ? o->image_width : o->image_size > 0 ? o->image_size : iw;
        *c = o->channels > 0 ? o->channels : ic;
        *first_ok = i;
        return 0;
    }
    /* --skip-bad-files and not one readable: the decoder's advice to pass
     * it would be no help. */
    char *advice = strstr(first, ": remove it from the folder or pass --skip-bad-files");
    if (advice)
        *advice = '\0';
    return cdl_error("%s: none of the %d pictures could be read (the first: %s)",
                     data_printable(root, pn, sizeof pn), files->n, first);
}

int imagefolder_read(const char *dir, int train, const cdl_dataset_options *o, cdl_dataset *out)
{
    char pn[512], root[4096], path[4096];
    if (o->channels != 0 && o->channels != 1 && o->channels != 3)
        return cdl_error("image folder: %d channels: use 1 (grayscale) or 3 (RGB)", o->channels);
    if (o->image_size < 0 || o->image_size > 4096)
        return cdl_error("--image-size %d: use 1..4096 (or 0: the first picture's size)",
                         o->image_size);
    if (o->image_height < 0 || o->image_height > 4096 || o->image_width < 0 ||
        o->image_width > 4096)
        return cdl_error("image folder: a sample size of %dx%d: use sides 1..4096",
                         o->image_width, o->image_height);
    char train_dir[4096];
    if (join(train_dir, sizeof train_dir, dir, "train"))
        return -1;
    int split = is_dir(train_dir);
    char test_dir[4096], val_dir[4096];
    if (split < 0 || join(test_dir, sizeof test_dir, dir, "test") ||
        join(val_dir, sizeof val_dir, dir, "val"))
        return -1;
    int has_test = split ? is_dir(test_dir) : 0, has_val = split ? is_dir(val_dir) : 0;
    if (has_test < 0 || has_val < 0)
        return -1;
    if (train == CDL_SPLIT_TRAIN) {
        if (join(root, sizeof root, dir, split ? "train" : "."))
            return -1;
        if (!split)
            snprintf(root, sizeof root, "%s", dir);
    } else if (train == CDL_SPLIT_VAL) {
        /* val/ beside test/ (val/ alone is the held-out, test, split). */
        if (!has_test || !has_val)
            return 1;
        snprintf(root, sizeof root, "%s", val_dir);
    } else {
        if (!has_test && !has_val)
            return 1;
        snprintf(root, sizeof root, "%s", has_test ? test_dir : val_dir);
    }
    train = train == CDL_SPLIT_TRAIN;

    strlist classes = {0}, files = {0}, here = {0}, others = {0};
    int32_t *labels = NULL;
    char **errors = NULL;
    int rc = list_classes(split ? train_dir : root, &classes);
    strlist test_classes = {0};
    if (!rc && !train)
        rc = list_classes(root, &test_classes);
    /* Files of each class directory of root (the test split's may be fewer). */
    strlist *dirs = train ? &classes : &test_classes;
    for (int k = 0; !rc && k < dirs->n; k++) {
        int label = k;
        if (!train) {
            char **hit = bsearch(&dirs->v[k], classes.v, (size_t)classes.n, sizeof *classes.v,
                                 cmp_str);
            if (!hit) {
                rc = cdl_error("%s/%s: a class the training folder %s does not have: the splits "
                               "must share their class folders", data_printable(root, pn, 256),
                               dirs->v[k], data_printable(train_dir, pn + 256, 256));
                break;
            }
            label = (int)(hit - classes.v);
        }
        strlist_free(&here);
        if ((rc = join(path, sizeof path, root, dirs->v[k])) ||
            (rc = list_class_files(path, &here, &others)))
            break;
        if (here.n == 0 && train) {
            char other[256];
            long n_other = count_other_files(path, other, sizeof other);
            if (n_other > 0)
                rc = cdl_error("%s has no .png, .jpg or .jpeg file but %ld other files (such as "
                               "'%s'): cdl reads PNG and JPEG pictures only: convert them, or "
                               "remove the class folder", data_printable(path, pn, sizeof pn),
                               n_other, other);
            else
                rc = cdl_error("%s has no .png, .jpg or .jpeg file: remove the empty class "
                               "folder", data_printable(path, pn, sizeof pn));
            break;
        }
        int32_t *nl = realloc(labels, (size_t)(files.n + here.n) * sizeof *nl);
        if (!nl) {
            rc = cdl_error("out of memory listing %s", data_printable(path, pn, sizeof pn));
            break;
        }
        labels = nl;
        for (int i = 0; !rc && i < here.n; i++) {
            labels[files.n] = label;
            rc = strlist_add(&files, here.v[i]);
        }
    }
    strlist_free(&here);
    strlist_free(&test_classes);
    for (int i = 0; !rc && o->left_out && i < others.n; i++)
        o->left_out(others.v[i], o->left_out_arg);
    strlist_free(&others);
    if (!rc && files.n == 0)
        rc = cdl_error("%s has no pictures", data_printable(root, pn, sizeof pn));

    job j = {.files = &files, .jpeg_full = o->jpeg_full};
    int first = 0;
    if (!rc)
        rc = pick_geometry(root, &files, o, &j.h, &j.w, &j.c, &first);
    /* Gray only because the first picture is: a colour one is an error,
     * not made gray in silence (torchvision reads every picture as RGB). */
    int gray_by_default = !rc && o->channels == 0 && j.c == 1;
    char gray_first[4096] = "";   /* its path: --skip-bad-files may free files.v[first] */
    if (gray_by_default)
        snprintf(gray_first, sizeof gray_first, "%s", files.v[first]);
    size_t sample = (size_t)j.c * j.h * j.w;
    if (!rc && sample > SIZE_MAX / 2 / (size_t)files.n)
        rc = cdl_error("%s: %d pictures of %dx%dx%d do not fit in memory: pass a smaller "
                       "--image-size", data_printable(root, pn, sizeof pn), files.n, j.c, j.h,
                       j.w);
    const long nfiles = files.n;   /* errors has one entry per listed file */
    /* Decoded once into memory, or by the loader's workers (stream). */
    int stream = o->decode == CDL_DECODE_STREAM;
    if (!rc && !stream && check_memory(root, files.n, j.c, j.h, j.w, o->memory_limit) != 0) {
        if (o->decode == CDL_DECODE_AUTO)
            stream = 1;   /* too large for memory: decode as batches need them */
        else
            rc = -1;
    }
    if (!rc) {
        j.images = stream ? NULL : cdl_malloc(sample * (size_t)files.n);
        errors = calloc((size_t)files.n, sizeof *errors);
        if ((!stream && !j.images) || !errors)
            rc = cdl_error("out of memory for %d pictures of %dx%dx%d", files.n, j.c, j.h, j.w);
    }
    /* Every file is decoded now unless streaming without --skip-bad-files
     * (then a bad file stops training at the first batch that holds it). */
    if (!rc && (!stream || o->skip_bad_files)) {
        j.errors = errors;
        j.stop = o->stop;
        decode_all(&j, o->threads > 0 ? o->threads : cdl_default_threads());
        if (j.stopped)
            rc = cdl_error("%s: stopped while decoding its %d pictures (a signal)",
                           data_printable(root, pn, sizeof pn), files.n);

        /* A colour file is good: compacting keeps its string. */
        const char *colour = j.first_colour < files.n ? files.v[j.first_colour] : NULL;
        /* The first bad file (in sample order, so the same message every run),
         * or compact the good ones in order. */
        long kept = 0, bad = 0;
        for (long i = 0; !rc && i < files.n; i++) {
            if (errors[i]) {
                if (!o->skip_bad_files) {
                    rc = bad_file_error(errors[i]);
                    break;
                }
                bad++;
                if (o->skipped)
                    o->skipped(errors[i], o->skipped_arg);
                free(files.v[i]);
                files.v[i] = NULL;
                continue;
            }
            if (kept != i && j.images)
                memmove(j.images + kept * sample, j.images + i * sample, sample);
            files.v[kept] = files.v[i];
            labels[kept++] = labels[i];
        }
        if (!rc && kept == 0)
            rc = cdl_error("%s: none of the %d pictures could be read",
                           data_printable(root, pn, sizeof pn), files.n);
        if (!rc) {
            out->n = (int)kept;
            out->skipped = bad;
            files.n = (int)kept;   /* the bad ones are freed, the rest moved down */
        }
        if (!rc && gray_by_default && colour)
            rc = image_colour_in_gray(colour, gray_first);
    } else if (!rc) {
        out->n = files.n;
    }
    if (!rc && stream) {
        /* The stream takes the file list. */
        if (!(out->stream = calloc(1, sizeof *out->stream))) {
            rc = cdl_error("out of memory for a list of %d pictures", files.n);
        } else {
            *out->stream = (image_stream){.paths = files.v, .n = files.n, .h = j.h, .w = j.w,
                                          .c = j.c, .threads = o->threads,
                                          .jpeg_full = o->jpeg_full,
                                          .have_hist = o->skip_bad_files};
            if (gray_by_default && !(out->stream->gray_from = strdup(gray_first)))
                rc = cdl_error("out of memory for a list of %d pictures", files.n);
            memcpy(out->stream->hist, j.hist, sizeof j.hist);
            files = (strlist){0};
        }
    }
    if (!rc) {
        out->shape = (cdl_shape){j.c, j.h, j.w};
        out->images = j.images;
        j.images = NULL;
        out->labels = cdl_malloc((size_t)out->n * sizeof *out->labels);
        out->class_names = cdl_calloc((size_t)classes.n, sizeof *out->class_names);
        out->classes = classes.n;
        if (!out->labels || !out->class_names)
            rc = -1;
        for (int k = 0; !rc && k < classes.n; k++) {
            size_t len = strlen(classes.v[k]) + 1;
            if (!(out->class_names[k] = cdl_malloc(len)))
                rc = -1;
            else
                memcpy(out->class_names[k], classes.v[k], len);
        }
        if (!rc)
            memcpy(out->labels, labels, (size_t)out->n * sizeof *labels);
    }
    for (long i = 0; errors && i < nfiles; i++)
        free(errors[i]);
    free(errors);
    cdl_free(j.images);
    free(labels);
    strlist_free(&files);
    strlist_free(&classes);
    if (rc && out->stream) {
        image_stream_free(out->stream);
        out->stream = NULL;
    }
    return rc ? -1 : 0;
}

int cdl_dataset_from_image_files(const char *const *paths, int n, cdl_shape shape, int threads,
                                 int skip_bad, cdl_dataset *out)
{
    cdl_dataset_options o;
    cdl_dataset_options_defaults(&o);
    o.threads = threads;
    o.skip_bad_files = skip_bad;
    return cdl_dataset_from_image_files_with(paths, n, shape, &o, out);
}

int cdl_dataset_from_image_files_with(const char *const *paths, int n, cdl_shape shape,
                                      const cdl_dataset_options *opt, cdl_dataset *out)
{
    cdl_dataset_options o;
    if (data_options_read(opt, &o))
        return -1;
    int threads = o.threads, skip_bad = o.skip_bad_files;
    if (!out || !paths || n <= 0)
        return cdl_error("cdl_dataset_from_image_files: no files");
    memset(out, 0, sizeof *out);
    if ((shape.c != 1 && shape.c != 3) || shape.h <= 0 || shape.w <= 0 || shape.h > 4096 ||
        shape.w > 4096)
        return cdl_error("cdl_dataset_from_image_files: shape %dx%dx%d is not a picture's (1 or "
                         "3 channels, sides 1..4096)", shape.c, shape.h, shape.w);
    strlist files = {0};
    int rc = 0;
    for (int i = 0; !rc && i < n; i++)
        rc = strlist_add(&files, paths[i]);
    job j = {.files = &files, .h = shape.h, .w = shape.w, .c = shape.c,
             .jpeg_full = o.jpeg_full};
    size_t sample = (size_t)j.c * j.h * j.w;
    char **errors = NULL;
    out->labels = NULL;
    if (!rc) {
        j.images = cdl_malloc(sample * (size_t)n);
        errors = calloc((size_t)n, sizeof *errors);
        out->labels = cdl_malloc((size_t)n * sizeof *out->labels);
        if (!j.images || !errors || !out->labels)
            rc = cdl_error("out of memory for %d pictures of %dx%dx%d", n, j.c, j.h, j.w);
    }
    long kept = 0;
    if (!rc) {
        j.errors = errors;
        decode_all(&j, threads > 0 ? threads : cdl_default_threads());
        for (long i = 0; i < n; i++) {
            if (errors[i]) {
                if (!skip_bad) {
                    rc = bad_file_error(errors[i]);
                    break;
                }
                out->skipped++;
                continue;
            }
            if (kept != i)
                memmove(j.images + kept * sample, j.images + i * sample, sample);
            out->labels[kept++] = (int32_t)i;
        }
        if (!rc && kept == 0)
            rc = cdl_error("none of the %d pictures could be read", n);
    }
    for (long i = 0; errors && i < n; i++)
        free(errors[i]);
    free(errors);
    strlist_free(&files);
    if (rc) {
        cdl_free(j.images);
        cdl_free(out->labels);
        memset(out, 0, sizeof *out);
        return -1;
    }
    snprintf(out->name, sizeof out->name, "files");
    out->n = (int)kept;
    out->shape = shape;
    out->classes = n;
    out->images = j.images;
    for (int k = 0; k < 3; k++) {
        out->mean[k] = 0;
        out->std[k] = 1;
    }
    return 0;
}
