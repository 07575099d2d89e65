/* TensorBoard event files (tfevents.h): a small protocol-buffer encoder
 * (varints, fixed 32/64-bit numbers, length-delimited fields) into fixed
 * buffers, TFRecord framing with masked CRC32C, written by rank 0. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cdl/cdl.h>

#include "../dist/util.h"
#include "owned.h"
#include "tfevents.h"

/* ---- CRC32C: reflected polynomial 0x82F63B78, bytewise table, made once
 * per process (runs in two threads may write event files at once). */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t tfev_crc32c(const void *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *b = p;
    uint32_t c = 0xFFFFFFFFu;
    while (n--)
        c = crc_table[(c ^ *b++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t tfev_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* ---- Protocol buffers: a message being built in a fixed buffer; a field
 * that does not fit sets over (checked once, when the record is written). */
typedef struct pb {
    uint8_t *b;
    size_t len, cap;
    int over;
} pb;

static void put(pb *m, const void *p, size_t n)
{
    if (m->over || n > m->cap - m->len) {
        m->over = 1;
        return;
    }
    memcpy(m->b + m->len, p, n);
    m->len += n;
}

static void varint(pb *m, uint64_t v)
{
    uint8_t b[10];
    size_t n = 0;
    do {
        b[n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(m, b, n);
}

enum { WT_VARINT = 0, WT_64 = 1, WT_LEN = 2, WT_32 = 5 };
static void key(pb *m, int field, int type)
{
    varint(m, (uint64_t)field << 3 | (uint64_t)type);
}

static void f_double(pb *m, int field, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(u >> 8 * i);
    key(m, field, WT_64);
    put(m, b, 8);
}

static void f_float(pb *m, int field, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    uint8_t b[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
    key(m, field, WT_32);
    put(m, b, 4);
}

static void f_int(pb *m, int field, int64_t v)
{
    key(m, field, WT_VARINT);
    varint(m, (uint64_t)v);
}

static void f_bytes(pb *m, int field, const void *p, size_t n)
{
    key(m, field, WT_LEN);
    varint(m, n);
    put(m, p, n);
}

static void f_str(pb *m, int field, const char *s)
{
    f_bytes(m, field, s, strlen(s));
}

static void f_msg(pb *m, int field, const pb *sub)
{
    if (sub->over)
        m->over = 1;
    f_bytes(m, field, sub->b, sub->len);
}

#define PB(name, size) \
    uint8_t name##_buf[size]; \
    pb name = {name##_buf, 0, sizeof name##_buf, 0}

/* ---- The file. */
struct tfev {
    FILE *f;
    char path[1200];
    int failed;
};

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Frames the Event in m as one TFRecord. */
/* What a user does about a failed write: a full disk is the usual cause. */
static int write_error(const tfev *w, int err)
{
    return cdl_error("writing %s failed: %s: %s", w->path, strerror(err),
                     err == ENOSPC || err == EDQUOT
                         ? "its file system is full or over quota: free space there or give "
                           "--tensorboard another directory, then resume (the resumed run "
                           "starts a new event file; TensorBoard reads both)"
                     : err == EFBIG ? "the file size limit was reached (ulimit -f): raise it, "
                                      "then resume"
                                    : "check the file system, then resume");
}

static int record(tfev *w, const pb *m)
{
    if (m->over)
        return cdl_error("%s: an event does not fit its buffer (a bug in lib/train/tfevents.c)",
                         w->path);
    uint8_t head[12];
    uint64_t n = m->len;
    for (int i = 0; i < 8; i++)
        head[i] = (uint8_t)(n >> 8 * i);
    uint32_t c = tfev_mask(tfev_crc32c(head, 8));
    for (int i = 0; i < 4; i++)
        head[8 + i] = (uint8_t)(c >> 8 * i);
    uint32_t d = tfev_mask(tfev_crc32c(m->b, m->len));
    uint8_t tail[4] = {(uint8_t)d, (uint8_t)(d >> 8), (uint8_t)(d >> 16), (uint8_t)(d >> 24)};
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(m->b, 1, m->len, w->f) != m->len ||
        fwrite(tail, 1, 4, w->f) != 4) {
        w->failed = 1;
        return write_error(w, errno);
    }
    return 0;
}

tfev *tfev_open(const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        cdl_error("--tensorboard %s: cannot create it: %s (its parent must exist and be "
                  "writable)", dir, strerror(errno));
        return NULL;
    }
    int dfd = train_open_dir("--tensorboard", dir, "events.out.tfevents.");
    if (dfd < 0)
        return NULL;
    tfev *w = cdl_calloc(1, sizeof *w);
    if (!w) {
        close(dfd);
        return NULL;
    }
    char host[256] = "localhost", safe[256];
    gethostname(host, sizeof host - 1);
    dist_sanitize(host, safe, sizeof safe);
    long now = (long)time(NULL);
    int fd = -1;
    for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
        int n = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%ld.%s", dir, now, safe);
        if (attempt)
            snprintf(w->path + n, sizeof w->path - (size_t)n, ".%ld", (long)getpid());
        /* In the directory checked, whatever its name leads to now. */
        fd = openat(dfd, strrchr(w->path, '/') + 1,
                    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    int err = errno;
    close(dfd);
    errno = err;
    if (fd < 0 || !(w->f = fdopen(fd, "w"))) {
        cdl_error("--tensorboard: cannot create %s: %s (check that %s is a writable directory)",
                  w->path, strerror(errno), dir);
        if (fd >= 0)
            close(fd);
        cdl_free(w);
        return NULL;
    }
    PB(ev, 256);
    f_double(&ev, 1, wall_now());
    f_int(&ev, 2, 0);
    f_str(&ev, 3, "brain.Event:2");
    if (record(w, &ev) != 0 || tfev_flush(w) != 0) {
        tfev_close(w);
        return NULL;
    }
    return w;
}

const char *tfev_path(const tfev *w)
{
    return w->path;
}

int tfev_scalar(tfev *w, const char *tag, long step, double value)
{
    PB(val, 512);
    f_str(&val, 1, tag);
    f_float(&val, 2, (float)value);
    PB(sum, 600);
    f_msg(&sum, 1, &val);
    PB(ev, 700);
    f_double(&ev, 1, wall_now());
    f_int(&ev, 2, step);
    f_msg(&ev, 5, &sum);
    return record(w, &ev);
}

int tfev_session_start(tfev *w, long step)
{
    PB(log, 16);
    f_int(&log, 1, 1);   /* SessionLog{status=1: START} */
    PB(ev, 64);
    f_double(&ev, 1, wall_now());
    f_int(&ev, 2, step);
    f_msg(&ev, 7, &log);
    return record(w, &ev);
}

/* An Event holding one hparams-plugin Value (tag, HParamsPluginData). */
static int plugin_event(tfev *w, const char *tag, const pb *data)
{
    PB(plug, 16384);
    f_str(&plug, 1, "hparams");
    f_msg(&plug, 2, data);
    PB(meta, 16500);
    f_msg(&meta, 1, &plug);
    PB(val, 16600);
    f_str(&val, 1, tag);
    f_msg(&val, 9, &meta);
    PB(sum, 16700);
    f_msg(&sum, 1, &val);
    PB(ev, 16800);
    f_double(&ev, 1, wall_now());
    f_int(&ev, 2, 0);
    f_msg(&ev, 5, &sum);
    return record(w, &ev);
}

int tfev_hparams(tfev *w, const tfev_hparam *hp, int n, const char *const *metric_tags,
                 const char *group)
{
    /* HParamsPluginData{version=1: 0, experiment=2: Experiment{
     *   hparam_infos=4: HParamInfo{name=1}, metric_infos=5: MetricInfo{
     *   name=1: MetricName{tag=2}}}} */
    PB(exp, 8192);
    for (int i = 0; i < n; i++) {
        PB(info, 512);
        f_str(&info, 1, hp[i].name);
        f_int(&info, 4, hp[i].str ? 1 : 3);   /* DataType: DATA_TYPE_STRING, _FLOAT64 */
        f_msg(&exp, 4, &info);
    }
    for (int i = 0; metric_tags[i]; i++) {
        PB(name, 256);
        f_str(&name, 2, metric_tags[i]);
        PB(info, 300);
        f_msg(&info, 1, &name);
        f_msg(&exp, 5, &info);
    }
    PB(data, 8400);
    f_int(&data, 1, 0);
    f_msg(&data, 2, &exp);
    if (plugin_event(w, "_hparams_/experiment", &data) != 0)
        return -1;
    /* HParamsPluginData{session_start_info=3: SessionStartInfo{hparams=1:
     * map entry{key=1, value=2: google.protobuf.Value{number_value=2 |
     * string_value=3}}, group_name=4, start_time_secs=5}} */
    PB(ssi, 12288);
    for (int i = 0; i < n; i++) {
        PB(v, 2048);
        if (hp[i].str)
            f_str(&v, 3, hp[i].str);
        else
            f_double(&v, 2, hp[i].num);
        PB(entry, 2300);
        f_str(&entry, 1, hp[i].name);
        f_msg(&entry, 2, &v);
        f_msg(&ssi, 1, &entry);
    }
    f_str(&ssi, 4, group);
    f_double(&ssi, 5, wall_now());
    PB(data2, 12500);
    f_int(&data2, 1, 0);
    f_msg(&data2, 3, &ssi);
    return plugin_event(w, "_hparams_/session_start_info", &data2);
}

int tfev_flush(tfev *w)
{
    if (fflush(w->f) != 0 || w->failed)
        return write_error(w, w->failed ? EIO : errno);
    return 0;
}

int tfev_close(tfev *w)
{
    if (!w)
        return 0;
    int rc = w->failed ? -1 : 0;
    if (fclose(w->f) != 0 && rc == 0)
        rc = write_error(w, errno);
    cdl_free(w);
    return rc;
}
