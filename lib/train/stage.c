/* Node-local staging (--stage): what the cluster guides tell users to do by
 * hand with $SLURM_TMPDIR, done once per node before the first epoch.
 *
 * Local rank 0 of each node copies every regular file under the dataset's
 * directory (links to files and to directories followed, as the readers
 * follow them) into
 * BASE/cdl-stage-JOB/, through a temporary name and rename, and reads each
 * copy back to compare its size and CRC-32 with the source's. All ranks
 * then meet in rounds of an allreduce (each bounded by CDL_TIMEOUT, the
 * copiers taking part in one every few seconds while they copy: beat) that
 * also sums failures and seconds, so a node whose copy failed stops every
 * rank with an error instead of leaving them waiting.
 *
 * --stage auto copies to $SLURM_TMPDIR, else $TMPDIR (a copy per job step,
 * locked while in use so that one a killed run left is swept), and only from a
 * network file system on another device (data already local is read where
 * it is); --stage DIR copies to DIR/DATASET-KEY (one copy per source, KEY
 * from its path) and keeps the copy: a later job finds the verified files
 * there, copies only what differs, and removes what the source no longer
 * holds (prune_tree).
 *
 * One copier at a time per copy folder: the local rank 0 of a second job,
 * or of another emulated node of this host, copying the same dataset into
 * the same folder waits on DIR/.copying (flock, let go by a copier that
 * dies) while its holder progresses, then finds the files there. The
 * files are copied by several threads (CDL_STAGE_THREADS, default 8 or
 * the node's CPUs if fewer): on
 * a shared file system each small file costs round trips, not bandwidth. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "../ckpt/checksum.h"
#include "lib/core/log.h"
#include "lib/data/internal.h"
#include "lockwait.h"
#include "signals.h"
#include "stage.h"

enum { STAGE_MAX_DEPTH = 64, BUF = 1 << 20 };   /* the image folder reader's depth */

/* Network and cluster file systems by statfs f_type (magic numbers of the
 * kernel and of the vendors' modules). */
static int is_network_fs(long type)
{
    static const long net[] = {
        0x6969,        /* NFS */
        0xFF534D42,    /* CIFS */
        0xFE534D42,    /* SMB2 */
        0x0BD00BD0,    /* Lustre */
        0x47504653,    /* GPFS */
        0x19830326,    /* BeeGFS */
        0x00C36400,    /* CephFS */
        0x65735546,    /* FUSE (sshfs, ...) */
        0xAAD7AAEA,    /* PanFS */
        0x5346414F,    /* AFS */
    };
    for (size_t i = 0; i < sizeof net / sizeof net[0]; i++)
        if ((unsigned long)type == (unsigned long)net[i])
            return 1;
    return 0;
}

typedef struct stage_stats {
    long files;
    double bytes;
    long copied;   /* files copied (the rest were there already, verified) */
    long removed;  /* entries of an earlier copy the dataset no longer holds (prune_tree) */
    long stale;    /* copy_tree without jobs: files whose copy is missing or not current */
    char *verify;  /* copy_tree without jobs: a BUF buffer to compare a copy of the right size
                    * but another time by CRC-32 (as copy_file would) before counting it
                    * stale; NULL: counted */
    run *r;        /* NULL: no peers to keep told (beat) */
    double every, last;   /* seconds between beats, and the last one */
    int beat_failed;      /* a beat's collective failed: the peers are gone */
    int locked, lock_fd;  /* holds DIR/.copying: touched while copying (touch_lock) */
    double touched;
    atomic_int *halt;     /* a copying thread's: set, it stops at its next chunk */
    atomic_long *progress;   /* a copying thread's: counts its chunks (copy_all) */
} stage_stats;

/* Tells the runs waiting for this one's lock (copy_lock) that the copy
 * progresses: DIR/.copying's time, once a second. */
static void touch_lock(stage_stats *st)
{
    if (st->locked && train_now() - st->touched >= 1) {
        futimens(st->lock_fd, NULL);
        st->touched = train_now();
    }
}

/* The vector every rank adds up while the copies run, one collective per
 * round: failures, seconds, nodes that copied, stopped by a signal, copies
 * still running, and nodes where --stage auto's folder name was taken by
 * another account (then every rank reads the data where it is). */
enum { V_FAIL, V_SECS, V_NODES, V_STOP, V_PENDING, V_SKIP, V_LEN };

/* A copy of many GB takes longer than CDL_TIMEOUT, which bounds each wait
 * of the node's other ranks and of the other nodes: a copying rank takes
 * part in one round (pending = 1) every few seconds, so the others wait
 * for a copy that is progressing however long it takes, and still stop
 * within CDL_TIMEOUT when it hangs (a read that never returns) or dies.
 * Before, every staged dataset that took longer than 300 s to copy failed
 * all ranks with "a slow copy? raise CDL_TIMEOUT". */
static int beat(stage_stats *st)
{
    if (st->progress)
        atomic_fetch_add(st->progress, 1);
    if (st->halt && atomic_load(st->halt))
        return -1;   /* another thread failed, or the peers are gone */
    touch_lock(st);
    if (!st->r || st->beat_failed || train_now() - st->last < st->every)
        return st->beat_failed ? -1 : 0;
    double v[V_LEN] = {0};
    v[V_PENDING] = 1;
    if (cdl_dist_allreduce_f64(st->r->dist, v, V_LEN) != 0) {
        st->beat_failed = 1;
        return -1;
    }
    st->last = train_now();
    return 0;
}

/* CRC-32 and size of a regular file: 0, or -1 with an error naming it. */
static int file_crc(const char *path, uint32_t *crc, off_t *size, char *buf, stage_stats *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cdl_error("--stage: cannot read %s: %m", path);
    uint32_t c = 0;
    off_t n = 0;
    ssize_t got;
    while ((got = read(fd, buf, BUF)) > 0 && beat(st) == 0) {
        c = st_crc_bytes(c, buf, (size_t)got);
        n += got;
    }
    int err = errno;
    close(fd);
    if (got < 0)
        return cdl_error("--stage: reading %s failed: %s", path, strerror(err));
    if (st->beat_failed || (st->halt && atomic_load(st->halt)))
        return -1;
    *crc = c;
    *size = n;
    return 0;
}

/* The temporary name a copy is written under before its rename:
 * DIR/.NAME.cdl-tmp.HOST.PID. Hidden, so no reader and no later copy takes
 * a half copy for data, and naming the writer, so prune_tree can remove
 * what a killed copy (SIGKILL, a lost node) left without touching the
 * copy another job or emulated node on this host is writing now. */
static const char TMP_TAG[] = ".cdl-tmp.";

static int tmp_name(const char *dst, char *out, size_t len)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    const char *slash = strrchr(dst, '/');
    int dirlen = slash ? (int)(slash - dst + 1) : 0;
    int n = snprintf(out, len, "%.*s.%s%s%s.%ld", dirlen, dst, dst + dirlen, TMP_TAG, host,
                     (long)getpid());
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* Whether the hidden entry name is a temporary copy of a process of this
 * host that has ended (its leftover). */
static int is_stale_tmp(const char *name)
{
    const char *tag = strstr(name, TMP_TAG);
    const char *dot = strrchr(name, '.');
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    if (name[0] != '.' || !tag || !dot)
        return 0;
    const char *h = tag + sizeof TMP_TAG - 1;
    char *end;
    long pid = strtol(dot + 1, &end, 10);
    if (*end || pid <= 0 || (size_t)(dot - h) != strlen(host) || strncmp(h, host, strlen(host)))
        return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static int same_time(const struct stat *a, const struct stat *b)
{
    return a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Copies src to dst (through a hidden temporary and rename) and verifies
 * the copy. */
static int copy_file(const char *src, const char *dst, char *buf, stage_stats *st)
{
    uint32_t crc_src, crc_dst;
    off_t size_src, size_dst;
    struct stat ss;
    if (stat(src, &ss) != 0)
        return cdl_error("--stage: %s: %m", src);
    /* Already there (a kept --stage DIR): a copy of the source's size and
     * modification time, which each copy takes from its source, is taken
     * as it is, as rsync takes it: comparing CRC-32s read the whole
     * dataset from the shared file system again at every start, which is
     * what staging is for avoiding (a kept copy of 100 GB cost a job as
     * long to start as copying it). Other copies of the right size are
     * compared by CRC-32, and given the source's time when they match. */
    struct stat ds;
    if (stat(dst, &ds) == 0 && ds.st_size == ss.st_size && same_time(&ds, &ss)) {
        st->files++;
        st->bytes += (double)ss.st_size;
        return 0;
    }
    if (stat(dst, &ds) == 0 && ds.st_size == ss.st_size &&
        file_crc(src, &crc_src, &size_src, buf, st) == 0 &&
        file_crc(dst, &crc_dst, &size_dst, buf, st) == 0 && crc_src == crc_dst &&
        size_src == size_dst) {
        utimensat(AT_FDCWD, dst, (const struct timespec[2]){ss.st_atim, ss.st_mtim}, 0);
        st->files++;
        st->bytes += (double)size_src;
        return 0;
    }
    char tmp[4200];
    if (tmp_name(dst, tmp, sizeof tmp) != 0)
        return cdl_error("--stage: path too long: %s", dst);
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return cdl_error("--stage: cannot read %s: %m", src);
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0) {
        close(in);
        return cdl_error("--stage: cannot create %s: %m (is the node-local directory writable "
                         "and large enough?)", tmp);
    }
    uint32_t crc = 0;
    off_t n = 0;
    ssize_t got;
    int rc = 0;
    while (rc == 0 && (got = read(in, buf, BUF)) > 0) {
        if (train_stop_requested()) {   /* scancel: a copy of GBs is not finished first */
            rc = cdl_error("--stage: stopped by a signal while copying %s", src);
            break;
        }
        if (beat(st) != 0) {
            rc = -1;
            break;
        }
        crc = st_crc_bytes(crc, buf, (size_t)got);
        n += got;
        for (ssize_t off = 0; off < got;) {
            ssize_t w = write(out, buf + off, (size_t)(got - off));
            if (w <= 0) {
                rc = cdl_error("--stage: writing %s failed: %m (node-local disk full?)", tmp);
                break;
            }
            off += w;
        }
    }
    if (rc == 0 && got < 0)
        rc = cdl_error("--stage: reading %s failed: %m", src);
    if (rc == 0)   /* the source's time: a later run knows the copy by it */
        futimens(out, (const struct timespec[2]){ss.st_atim, ss.st_mtim});
    if (close(out) != 0 && rc == 0)
        rc = cdl_error("--stage: writing %s failed: %m", tmp);
    close(in);
    if (rc == 0 && file_crc(tmp, &crc_dst, &size_dst, buf, st) != 0)
        rc = -1;
    if (rc == 0 &&
        (crc_dst != crc || size_dst != n || n != ss.st_size))
        rc = cdl_error("--stage: the copy %s does not verify (size %lld of %lld, CRC-32 %08x "
                       "instead of %08x): the source changed while copying or the node-local "
                       "disk is faulty", dst, (long long)size_dst, (long long)ss.st_size,
                       crc_dst, crc);
    if (rc == 0 && rename(tmp, dst) != 0)
        rc = cdl_error("--stage: cannot rename %s to %s: %m", tmp, dst);
    if (rc != 0) {
        unlink(tmp);
        return -1;
    }
    chmod(dst, 0644 & ss.st_mode);
    st->files++;
    st->copied++;
    st->bytes += (double)n;
    return 0;
}

/* The bytes copy_file would write for src: 0 when dst holds a file of its
 * size already (verified, not copied, if it matches). */
static double bytes_to_copy(const char *dst, const struct stat *src)
{
    struct stat ds;
    return stat(dst, &ds) == 0 && ds.st_size == src->st_size ? 0 : (double)src->st_size;
}

/* What copy_file would do for the file src (stat ss), counted in st
 * without doing it: the bytes it would write (0 when dst holds a file of
 * its size already, verified, not copied, if it matches), and whether dst
 * is not current (missing, of another size, or of another time and, with
 * st->verify, another CRC-32: copy_file would replace it). */
static void note_to_copy(const char *src, const char *dst, const struct stat *ss,
                         stage_stats *st)
{
    struct stat ds;
    st->bytes += bytes_to_copy(dst, ss);
    if (stat(dst, &ds) != 0 || ds.st_size != ss->st_size) {
        st->stale++;
    } else if (!same_time(&ds, ss)) {
        uint32_t a, b;
        off_t na, nb;
        if (!st->verify || file_crc(src, &a, &na, st->verify, st) != 0 ||
            file_crc(dst, &b, &nb, st->verify, st) != 0 || a != b || na != nb)
            st->stale++;
    }
}

/* The files a copy_tree walk found to copy: src and dst of each. */
typedef struct copy_job {
    char *src, *dst;
} copy_job;

typedef struct copy_list {
    copy_job *v;
    long n, cap;
} copy_list;

static int add_job(copy_list *l, const char *src, const char *dst)
{
    if (l->n == l->cap) {
        long cap = l->cap ? 2 * l->cap : 256;
        copy_job *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return cdl_error("--stage: out of memory listing the dataset's files");
        l->v = v;
        l->cap = cap;
    }
    char *a = malloc(strlen(src) + 1), *b = malloc(strlen(dst) + 1);
    if (!a || !b) {
        free(a);
        free(b);
        return cdl_error("--stage: out of memory listing the dataset's files");
    }
    l->v[l->n++] = (copy_job){strcpy(a, src), strcpy(b, dst)};
    return 0;
}

static void free_jobs(copy_list *l)
{
    for (long i = 0; i < l->n; i++) {
        free(l->v[i].src);
        free(l->v[i].dst);
    }
    free(l->v);
    *l = (copy_list){0};
}

/* The threads that copy a copy_list: each takes the next file, with its
 * own buffer and counts, and stops at its next chunk once halt is set (a
 * failure in another thread, the peers gone). The first error is kept
 * (errors are per thread) for the calling thread to give. */
typedef struct copy_pool {
    const copy_list *jobs;
    atomic_long next;
    atomic_int halt;
    atomic_long progress;
    pthread_mutex_t mu;
    pthread_cond_t done;
    int running;
    long files, copied;
    double bytes;
    int failed;
    char error[2048];
} copy_pool;

static void *copy_worker(void *arg)
{
    copy_pool *p = arg;
    stage_stats st = {.halt = &p->halt, .progress = &p->progress};
    char *buf = cdl_malloc(BUF);
    int rc = buf ? 0 : cdl_error("--stage: out of memory for a copy buffer");
    long i;
    while (rc == 0 && !atomic_load(&p->halt) && (i = atomic_fetch_add(&p->next, 1)) < p->jobs->n)
        rc = copy_file(p->jobs->v[i].src, p->jobs->v[i].dst, buf, &st);
    cdl_free(buf);
    pthread_mutex_lock(&p->mu);
    p->files += st.files;
    p->copied += st.copied;
    p->bytes += st.bytes;
    if (rc != 0 && !p->failed && !atomic_load(&p->halt)) {
        p->failed = 1;
        snprintf(p->error, sizeof p->error, "%s", cdl_last_error());
    }
    if (rc != 0)
        atomic_store(&p->halt, 1);
    p->running--;
    pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The copying threads: CDL_STAGE_THREADS (1 to 64), default 8 or the
 * node's CPUs if fewer: on a shared file system the threads wait on round
 * trips, while a copy between two local disks is bound by the CPUs (8
 * threads on 2 CPUs copied 20000 small files 1.5 to 3 times slower than
 * 1 or 2). 0, or -1 with an error. */
static int stage_threads(int *out)
{
    const char *v = getenv("CDL_STAGE_THREADS");
    char *end;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long n = v && *v ? strtol(v, &end, 10) : cpus > 0 && cpus < 8 ? cpus : 8;
    if (v && *v && (*end || n < 1 || n > 64))
        return cdl_error("CDL_STAGE_THREADS=%s: give the number of threads that copy a --stage "
                         "dataset, 1 to 64", v);
    *out = (int)n;
    return 0;
}

/* Copies jobs with threads threads while this thread keeps the peers
 * told (beat) and the copy lock touched as long as the threads progress
 * (a read that never returns stops the peers' waits and the lock's
 * waiters' after CDL_TIMEOUT, as one thread's copy did); a signal stops
 * every thread at its next chunk (copy_file polls it). 0, or -1 with the
 * first error. */
static int copy_all(const copy_list *jobs, int threads, stage_stats *st)
{
    enum { MAX_THREADS = 64 };
    pthread_t t[MAX_THREADS];
    copy_pool p = {.jobs = jobs};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.done, NULL);
    if (threads > jobs->n)
        threads = jobs->n > 0 ? (int)jobs->n : 1;
    int started = 0;
    pthread_mutex_lock(&p.mu);
    for (; started < threads && started < MAX_THREADS; started++) {
        p.running++;
        if (pthread_create(&t[started], NULL, copy_worker, &p) != 0) {
            p.running--;
            break;
        }
    }
    pthread_mutex_unlock(&p.mu);
    if (started == 0) {   /* no thread to be had: this one copies */
        p.running = 1;
        copy_worker(&p);
    }
    long seen = -1;
    pthread_mutex_lock(&p.mu);
    while (p.running > 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 200 * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&p.done, &p.mu, &until);
        pthread_mutex_unlock(&p.mu);
        long now = atomic_load(&p.progress);
        if (now != seen && beat(st) != 0)
            atomic_store(&p.halt, 1);
        seen = now;
        pthread_mutex_lock(&p.mu);
    }
    pthread_mutex_unlock(&p.mu);
    for (int k = 0; k < started; k++)
        pthread_join(t[k], NULL);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.done);
    st->files += p.files;
    st->copied += p.copied;
    st->bytes += p.bytes;
    if (p.failed)
        return cdl_error("%s", p.error);
    return st->beat_failed ? -1 : 0;
}

/* A folder the copy is inside (a link back to one would copy for ever). */
typedef struct dir_id {
    dev_t dev;
    ino_t ino;
} dir_id;

/* Lists the regular files under src for a copy into dst (its folders
 * created) in jobs, recursively; with jobs NULL only adds to st->bytes
 * what a copy would write (nothing created), to compare with the free
 * space before copying. Links to
 * folders are followed and copied as folders, as the readers follow them
 * (a train/ or class folder that is a link was left out of the copy, and
 * the staged run read another split as its training data); above holds
 * the depth folders src is inside. */
static int copy_tree(const char *src, const char *dst, int depth, dir_id *above,
                     copy_list *jobs, stage_stats *st)
{
    struct stat here;
    if (stat(src, &here) != 0)
        return cdl_error("--stage: %s: %m", src);
    for (int k = 0; k < depth; k++)
        if (above[k].dev == here.st_dev && above[k].ino == here.st_ino)
            return cdl_error("--stage: %s leads back to a folder above it (a symbolic link "
                             "loop): remove the link", src);
    if (depth > STAGE_MAX_DEPTH)
        return cdl_error("--stage: %s is nested deeper than %d directories", src,
                         STAGE_MAX_DEPTH);
    above[depth] = (dir_id){here.st_dev, here.st_ino};
    if (jobs && mkdir(dst, 0755) != 0 && errno != EEXIST)
        return cdl_error("--stage: cannot create %s: %m", dst);
    DIR *d = opendir(src);
    if (!d)
        return cdl_error("--stage: cannot list the dataset directory %s: %m", src);
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) && (rc = beat(st)) == 0) {
        if (e->d_name[0] == '.')
            continue;   /* ., .., and hidden files are no dataset's */
        char s[4096], t[4096];
        if (snprintf(s, sizeof s, "%s/%s", src, e->d_name) >= (int)sizeof s ||
            snprintf(t, sizeof t, "%s/%s", dst, e->d_name) >= (int)sizeof t) {
            rc = cdl_error("--stage: path too long under %s", src);
            break;
        }
        struct stat fs;
        if (stat(s, &fs) != 0) {
            if (errno == ENOENT || errno == ELOOP)
                continue;   /* a dangling link (or one removed since listed): not data */
            /* A shared file system that fails to answer (EIO, ESTALE, a
             * timeout): the file was left out of the copy in silence, and
             * the staged run trained without it. */
            rc = cdl_error("--stage: cannot stat %s: %m (the file would be left out of the "
                           "copy; retry, or use --stage off)", s);
            break;
        }
        if (S_ISDIR(fs.st_mode))
            rc = copy_tree(s, t, depth + 1, above, jobs, st);
        else if (S_ISREG(fs.st_mode) && !jobs)
            note_to_copy(s, t, &fs, st);
        else if (S_ISREG(fs.st_mode))
            rc = add_job(jobs, s, t);
    }
    closedir(d);
    return rc;
}

/* One .bin of token data (tokens:FILE.bin) takes its vocabulary from the
 * meta.pkl beside it (tokens_meta_path): the copy of the file takes it
 * along into dir, or the staged run built a model of GPT-2's 50257 rows
 * for a corpus of 65 characters. */
static int copy_meta_pkl(const char *src, const char *dir, char *buf, stage_stats *st)
{
    char meta[4200], to[1400];
    snprintf(to, sizeof to, "%.1000s/meta.pkl", dir);
    if (!tokens_meta_path(src, meta, sizeof meta))
        return 0;
    return copy_file(meta, to, buf, st);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Removes the folder name under the folder open as parent, through
 * descriptors and without following links at any level: a folder swapped
 * for a link to elsewhere between the look and the removal (by whoever
 * else can write there) makes the open fail instead of emptying the link's
 * target. depth bounds the recursion. */
static int remove_at(int parent, const char *name, int depth)
{
    int fd = depth > STAGE_MAX_DEPTH ? -1
             : openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        struct stat st;
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
            remove_at(fd, e->d_name, depth + 1);
        else
            unlinkat(fd, e->d_name, 0);
    }
    closedir(d);
    return unlinkat(parent, name, AT_REMOVEDIR);
}

static int remove_tree(const char *dir)
{
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    const char *name = slash ? slash + 1 : parent;
    if (slash == parent)
        parent[1] = '\0';
    else if (slash)
        *slash = '\0';
    int pfd = open(slash ? parent : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0)
        return -1;
    int rc = *name ? remove_at(pfd, name, 0) : -1;
    close(pfd);
    return rc;
}

/* Whether the entry name of the dataset's folder src is still in it as a
 * file or folder (links followed, as copy_tree follows them), as what dst
 * is (a file, or a folder when is_dir). Only a source that says the entry
 * is not there (or is of another kind) counts: a shared file system that
 * fails to answer (EIO, ESTALE, a timeout) removes nothing from the copy. */
static int in_source(const char *src, const char *name, int is_dir)
{
    char s[4096];
    struct stat fs;
    if (snprintf(s, sizeof s, "%s/%s", src, name) >= (int)sizeof s)
        return 1;
    if (stat(s, &fs) != 0)
        return errno != ENOENT && errno != ENOTDIR;
    return is_dir ? S_ISDIR(fs.st_mode) : S_ISREG(fs.st_mode);
}

/* Before copying into a kept or reused copy dst of src: removes what src
 * no longer holds (a picture or class deleted from the dataset, a test.csv
 * or meta.pkl taken away, a folder that is a file now), which the readers
 * would still find in the copy and train on, and the temporary files of
 * copies killed on this host. When only is set (one file staged into dst,
 * with its meta.pkl), every other entry goes. Counts removed files and
 * folders in st->removed (dry: counts them and removes nothing). Other
 * hidden entries stay. */
static void prune_tree(const char *src, const char *dst, const char *only, const char *meta,
                       int dry, stage_stats *st)
{
    DIR *d = opendir(dst);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) && beat(st) == 0) {
        if (e->d_name[0] == '.') {
            char t[4096];
            if (!dry && is_stale_tmp(e->d_name) &&
                snprintf(t, sizeof t, "%s/%s", dst, e->d_name) < (int)sizeof t)
                unlink(t);
            continue;
        }
        char t[4096], s[4096];
        struct stat ds;
        if (snprintf(t, sizeof t, "%s/%s", dst, e->d_name) >= (int)sizeof t ||
            lstat(t, &ds) != 0)
            continue;
        int dir = S_ISDIR(ds.st_mode);
        int keep = only ? !dir && (!strcmp(e->d_name, only) || (meta && !strcmp(e->d_name, meta)))
                        : in_source(src, e->d_name, dir);
        if (!keep) {
            if (dry || (dir ? remove_tree(t) == 0 : unlink(t) == 0))
                st->removed++;
        } else if (dir && snprintf(s, sizeof s, "%s/%s", src, e->d_name) < (int)sizeof s) {
            prune_tree(s, t, NULL, NULL, dry, st);
        }
    }
    closedir(d);
}

/* The copy's folder: created private (0700: a copy of data read from a
 * private folder is not for every account of the node to read), or, when
 * it is there, a folder of this account's. Another account's folder of
 * the same name is neither read nor written: its files could be anything
 * of the right size and CRC-32, and its owner could change them while
 * this run reads them. create 0 only checks one that exists. */
static int own_dir(const char *dir, int create)
{
    if (create && mkdir(dir, 0700) != 0 && errno != EEXIST)
        return cdl_error("--stage: cannot create %s: %m", dir);
    struct stat st;
    if (lstat(dir, &st) != 0)
        return errno == ENOENT && !create ? 0 : cdl_error("--stage: %s: %m", dir);
    if (!S_ISDIR(st.st_mode))
        return cdl_error("--stage: %s is there but not a folder: remove it or give another "
                         "--stage DIR", dir), -2;
    if (st.st_uid != geteuid())
        return cdl_error("--stage: %s belongs to another account (uid %ld): a copy staged by "
                         "someone else is not read; give a --stage DIR of your own", dir,
                         (long)st.st_uid), -2;
    /* The folder it is in: where every account may write without the
     * sticky bit, any of them could rename this copy away and put a
     * folder of theirs in its place between this check and the copy's
     * use (its files written and read by path). */
    char up[4200];
    const char *slash = strrchr(dir, '/');
    snprintf(up, sizeof up, "%.*s", slash ? (slash == dir ? 1 : (int)(slash - dir)) : 1,
             slash ? dir : ".");
    if (stat(up, &st) == 0 && (st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
        return cdl_error("--stage: %s is in %s, which every account may write to without the "
                         "sticky bit (mode %04o): any of them could put a folder of theirs in "
                         "the copy's place while this run uses it; make it yours alone "
                         "(chmod o-w %s) or sticky (chmod +t %s), or give another --stage DIR",
                         dir, up, (unsigned)(st.st_mode & 07777), up, up), -2;
    return 0;
}

/* --stage auto's copies: BASE/cdl-stage-JOB.STEP, each with a .lock that
 * the local rank 0 of every node copying into it holds (shared) until it
 * removes the copy. A run killed before that (SIGKILL after KillWait, the
 * out-of-memory killer, a crash) left its copy in $TMPDIR for good, GBs on
 * every node; its lock went with its process, so the next run of this
 * account there finds and removes it. A folder without .lock (a copy of
 * an older cdl, perhaps still in use) is left alone. */
static const char AUTO_PREFIX[] = "cdl-stage-", LOCK_NAME[] = ".lock";

static int beat_cb(void *st)
{
    return beat(st);
}

/* train_stage_lock, beating the peers (st) while it waits. */
static int stage_lock(const char *dir, double timeout_s, stage_stats *st)
{
    char p[1200];
    if (snprintf(p, sizeof p, "%s/%s", dir, LOCK_NAME) >= (int)sizeof p)
        return cdl_error("--stage: path too long: %s", dir);
    for (int tries = 0; tries < 8; tries++) {
        int own = own_dir(dir, 1);
        if (own != 0)
            return own;
        int fd = open(p, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno == ENOENT)
            continue;   /* a sweep removed the folder in between: make it again */
        if (fd < 0)
            return cdl_error("--stage: cannot create %s: %m", p);
        /* A sweep holding it exclusively removes the folder before it
         * lets go: then the lock is on a file no longer there. */
        struct stat a, b;
        int w = lockwait_flock(fd, LOCK_SH, p, "--stage auto's copy: a run removing it holds it "
                               "exclusively", timeout_s, beat_cb, st);
        if (w == 1)
            cdl_error("--stage: cannot lock %s: %m", p);
        if (w != 0) {
            close(fd);
            return -1;
        }
        if (fstat(fd, &a) == 0 && stat(p, &b) == 0 && a.st_dev == b.st_dev &&
            a.st_ino == b.st_ino)
            return fd;
        close(fd);
    }
    return cdl_error("--stage: cannot lock %s: it is removed as soon as it is made", p);
}

int train_stage_lock(const char *dir, double timeout_s)
{
    stage_stats st = {0};
    return stage_lock(dir, timeout_s, &st);
}

int train_stage_sweep(const char *base)
{
    DIR *d = opendir(base);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char dir[1200], lock[1300];
        struct stat st;
        if (strncmp(e->d_name, AUTO_PREFIX, sizeof AUTO_PREFIX - 1) ||
            snprintf(dir, sizeof dir, "%s/%s", base, e->d_name) >= (int)sizeof dir ||
            lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
            continue;
        snprintf(lock, sizeof lock, "%s/%s", dir, LOCK_NAME);
        int fd = open(lock, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && remove_tree(dir) == 0)
            n++;
        close(fd);
    }
    closedir(d);
    return n;
}

/* Takes DIR/.copying exclusively for this rank's copy into dir: a second
 * job, or another emulated node of this host, staging the same dataset
 * into the same folder copied every missing file a second time beside the
 * first (each through its own temporary name: correct, but twice the
 * reads from the shared file system). It waits, beating (the peers keep
 * waiting), while the holder touches the file (touch_lock); a holder that
 * dies lets go with its process; one that stops touching it for stale_s
 * (a read that never returns) is no longer waited for: this rank copies
 * beside it. Sets st->locked, and *waited to the seconds waited. 0, or
 * -1 with an error (a signal, the peers gone). */
static const char COPY_LOCK[] = ".copying";

/* dir/name opened (created 0600 if missing) for a lock; -1 with an error. */
static int open_lock_file(const char *dir, const char *name, int flags)
{
    char p[1200];
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p)
        return cdl_error("--stage: path too long: %s", dir);
    int fd = open(p, flags | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return cdl_error("--stage: cannot create %s: %m", p);
    return fd;
}

static int copy_lock(const char *dir, double stale_s, stage_stats *st, double *waited)
{
    *waited = 0;
    int fd = open_lock_file(dir, COPY_LOCK, O_RDWR);
    if (fd < 0)
        return -1;
    double t0 = train_now(), seen = t0;
    struct timespec mt = {0, 0};
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            close(fd);   /* no locks there (some network file systems): copy beside */
            return 0;
        }
        if (train_stop_requested()) {
            close(fd);
            return cdl_error("--stage: stopped by a signal while waiting for the copy into %s "
                             "of another run", dir);
        }
        if (beat(st) != 0) {
            close(fd);
            return -1;
        }
        struct stat fs;
        if (fstat(fd, &fs) == 0 && (fs.st_mtim.tv_sec != mt.tv_sec ||
                                    fs.st_mtim.tv_nsec != mt.tv_nsec)) {
            mt = fs.st_mtim;
            seen = train_now();
        }
        *waited = train_now() - t0;
        if (train_now() - seen > stale_s) {
            close(fd);   /* the holder hangs: copy beside it */
            return 0;
        }
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    }
    *waited = train_now() - t0;
    st->locked = 1;
    st->lock_fd = fd;
    st->touched = 0;
    touch_lock(st);
    return 0;
}

/* The kept copy's lock f (dir/.lock) shared: taken, or kept_lock's
 * exclusive one let go to shared once the copy is current. Converting a
 * flock is not atomic (flock(2): the old lock goes first), so a process
 * that takes it exclusively in between (a run of an older cdl changing the
 * copy, a user's flock(1)) made a blocking LOCK_SH wait for as long as it
 * held it, for ever. Bounded by CDL_TIMEOUT (lockwait_flock). 0, or -1 with
 * an error. */
static int share_kept(int f, const char *dir, double timeout_s, stage_stats *st)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, LOCK_NAME);
    int w = lockwait_flock(f, LOCK_SH, p, "the kept copy's: a run changing the copy holds it "
                           "exclusively", timeout_s, beat_cb, st);
    if (w == 1)
        return cdl_error("--stage: cannot share the lock %s: %m", p);
    return w;
}

/* A kept copy (--stage DIR) is read by every run staged into it for as
 * long as that run trains (a streamed image folder opens its files every
 * epoch): each holds DIR/.lock shared from its copy to its end
 * (train_stage_cleanup). Changing the copy (removing what the dataset no
 * longer holds, replacing a file that changed) takes it exclusively: a
 * run staging a changed dataset pruned pictures from under a run training
 * from the copy, which then failed (or trained on the new files) mid-run.
 * Called with DIR/.copying held, so no other run changes the copy
 * meanwhile. *fd: the lock, held exclusively (*exclusive: the caller may
 * change the copy, then holds it shared: share_kept) or shared (the copy is current:
 * nothing to change), or -1 (a file system without locks: as before).
 * Another run reading and something to change is an error saying so. */
static int kept_lock(const char *src, const struct stat *ss, const char *dir, const char *only,
                     const char *meta, double timeout_s, stage_stats *st, int *fd,
                     int *exclusive)
{
    *fd = -1;
    *exclusive = 0;
    int f = open_lock_file(dir, LOCK_NAME, O_RDONLY);
    if (f < 0)
        return -1;
    if (flock(f, LOCK_EX | LOCK_NB) == 0) {
        *fd = f;
        *exclusive = 1;
        return 0;
    }
    if (errno != EWOULDBLOCK) {
        close(f);   /* no locks there (some network file systems) */
        return 0;
    }
    /* Read by another run: only a copy with nothing to change is shared. */
    stage_stats dry = {.r = st->r, .every = st->every, .last = st->last,
                       .verify = cdl_malloc(BUF)};
    dir_id above[STAGE_MAX_DEPTH + 1];
    int rc = 0;   /* without the buffer (out of memory) a file of another time is stale */
    prune_tree(src, dir, only, meta, 1, &dry);
    if (S_ISDIR(ss->st_mode)) {
        rc = copy_tree(src, dir, 0, above, NULL, &dry);
    } else {
        char to[1400], m[4200];
        snprintf(to, sizeof to, "%.1000s/%.300s", dir, base_name(src));
        note_to_copy(src, to, ss, &dry);
        struct stat ms;
        if (meta && tokens_meta_path(src, m, sizeof m) && stat(m, &ms) == 0) {
            snprintf(to, sizeof to, "%.1000s/meta.pkl", dir);
            note_to_copy(m, to, &ms, &dry);
        }
    }
    cdl_free(dry.verify);
    st->last = dry.last;
    st->beat_failed = dry.beat_failed;
    if (rc == 0 && (dry.removed || dry.stale))
        rc = cdl_error("--stage: another run is training from the kept copy %s, and %s changed "
                       "since it was copied (%ld file%s to copy again, %ld to remove): changing "
                       "the copy would change that run's data under it: wait for that run to "
                       "end, or give another --stage DIR", dir, src, dry.stale,
                       dry.stale == 1 ? "" : "s", dry.removed);
    if (rc == 0)
        rc = share_kept(f, dir, timeout_s, st);
    if (rc != 0) {
        close(f);
        return -1;
    }
    *fd = f;
    return 0;
}

/* The kept copy of src under a --stage DIR: DIR/DATASET-KEY, KEY the
 * CRC-32 of src's absolute path. Two datasets of one format (two image
 * folders, two corpora) get two copies: in one DIR/imagefolder, the second
 * run read the first one's classes as its own. */
static void kept_dir(const char *base, const char *dataset, const char *src, char *out,
                     size_t len)
{
    char abs[4096];
    if (!realpath(src, abs))
        snprintf(abs, sizeof abs, "%s", src);
    snprintf(out, len, "%.900s/%.60s-%08x", base, dataset,
             (unsigned)st_crc_bytes(0, abs, strlen(abs)));
}

/* Whether the copy of src into dir (on base's file system) fits in the
 * space free there, before copying: a dataset larger than the node-local
 * disk would otherwise fail only when that disk is full, after copying for
 * as long as it took to fill it. Files already in dir at their size count
 * nothing. 0, or -1 with an error giving both sizes. */
static int enough_room(const char *src, const struct stat *ss, const char *dir, const char *base,
                       stage_stats *st)
{
    stage_stats need = {.r = st->r, .every = st->every, .last = st->last};
    dir_id above[STAGE_MAX_DEPTH + 1];
    if (S_ISDIR(ss->st_mode)) {
        int rc = copy_tree(src, dir, 0, above, NULL, &need);
        st->last = need.last;
        st->beat_failed = need.beat_failed;
        if (rc != 0)
            return -1;
    } else {
        char to[1400];
        snprintf(to, sizeof to, "%.1000s/%.300s", dir, base_name(src));
        need.bytes = bytes_to_copy(to, ss);
    }
    struct statvfs vf;
    if (statvfs(base, &vf) != 0)
        return 0;   /* unknown: the copy finds out */
    double avail = (double)vf.f_bavail * (double)vf.f_frsize;
    if (need.bytes <= avail)
        return 0;
    return cdl_error("--stage: copying %s needs %.1f MB but %s has %.1f MB free: free space "
                     "there, give another --stage DIR, or use --stage off", src,
                     need.bytes / 1e6, base, avail / 1e6);
}

/* The dataset's folder or file, or NULL (synthetic data is made, not
 * loaded; NAME:PATH datasets are staged through --data-dir). */
static const char *source_path(const run *r)
{
    const cdl_train_config *c = r->cfg;
    if (c->data_dir[0])
        return c->data_dir;
    if (strchr(c->dataset, ':'))
        return NULL;
    return cdl_dataset_default_dir(c->dataset);
}

int train_stage(run *r)
{
    const cdl_train_config *c = r->cfg;
    const char *src = source_path(r);
    snprintf(r->data_dir, sizeof r->data_dir, "%s", c->data_dir);
    if (!c->stage[0] || !strcmp(c->stage, "off"))
        return 0;
    if (!src || !*src) {
        train_report_note(r->rep, "--stage: nothing to copy for --dataset %s (give the data "
                          "with --data-dir to stage it)", c->dataset);
        return 0;
    }
    int automatic = !strcmp(c->stage, "auto");
    const char *base = c->stage;
    if (automatic) {
        base = getenv("SLURM_TMPDIR");
        if (!base || !*base)
            base = getenv("TMPDIR");
        if (!base || !*base) {
            train_report_note(r->rep, "--stage auto: neither SLURM_TMPDIR nor TMPDIR is set: "
                              "reading %s where it is", src);
            return 0;
        }
    }
    /* Every rank takes the same decision from what it sees; local rank 0
     * of each node acts on it. */
    struct stat ss, bs;
    struct statfs sf;
    errno = 0;
    if (stat(src, &ss) != 0 || !(S_ISDIR(ss.st_mode) || S_ISREG(ss.st_mode)))
        return cdl_error("--stage: the dataset's %s: %s (pass --data-dir)", src,
                         errno ? strerror(errno) : "not a folder or file");
    if (stat(base, &bs) != 0 || !S_ISDIR(bs.st_mode))
        return cdl_error("--stage %s: %s is not a directory: create it or use --stage off",
                         c->stage, base);
    int local = ss.st_dev == bs.st_dev || (statfs(src, &sf) == 0 && !is_network_fs(sf.f_type));
    if (automatic && local) {
        train_report_note(r->rep, "--stage auto: %s is on a local file system: read where it is",
                          src);
        return 0;
    }
    char dir[1100];
    const char *job = r->ri.job_id[0] ? r->ri.job_id : getenv("SLURM_JOB_ID");
    char name[80];
    snprintf(name, sizeof name, "%s", job && *job ? job : "");
    if (!name[0])
        snprintf(name, sizeof name, "pid%ld", (long)getpid());
    for (char *p = name; *p; p++)   /* a file name, whatever the job id holds */
        if (*p == '/')
            *p = '_';
    if (strchr(c->dataset, '/') || c->dataset[0] == '.')
        return cdl_error("--stage: dataset name '%s' is not a plain name", c->dataset);
    if (automatic)
        snprintf(dir, sizeof dir, "%.900s/cdl-stage-%s", base, name);
    else
        kept_dir(base, c->dataset, src, dir, sizeof dir);
    double t0 = train_now();
    double v[V_LEN] = {0};
    stage_stats st = {0};
    int peers = r->dist && r->ri.world > 1;
    double timeout = c->dist_config && c->dist_config->timeout_s > 0
                         ? c->dist_config->timeout_s : 300;
    if (peers) {   /* a beat well within each wait's bound (CDL_TIMEOUT, default 300 s) */
        st.r = r;
        st.every = timeout / 4 < 10 ? timeout / 4 : 10;
        st.last = t0;
    }
    if (r->ri.local_rank == 0) {
        char *buf = cdl_malloc(BUF);
        int threads = 1;
        int swept = automatic ? train_stage_sweep(base) : 0;
        if (swept)
            train_report_note(r->rep, "--stage auto: removed %d cop%s under %s left by runs "
                              "that were killed before they could remove them", swept,
                              swept == 1 ? "y" : "ies", base);
        int rc = buf ? stage_threads(&threads) : -1;
        /* One file (npz, csv, a corpus) keeps only itself and the meta.pkl
         * beside it, if there is one, in its folder. */
        int one = !S_ISDIR(ss.st_mode);
        char meta[4200];
        int has_meta = one && !strcmp(c->dataset, "tokens") &&
                       tokens_meta_path(src, meta, sizeof meta);
        /* The room check before the lock: a disk too small gets no
         * folder. A job's own copy (auto) is pruned first too: what
         * another copier writes meanwhile is of the dataset; a kept one
         * only once no other run reads it (kept_lock). */
        const char *only = one ? base_name(src) : NULL, *meta_name = has_meta ? "meta.pkl" : NULL;
        if (rc == 0)
            rc = own_dir(dir, 0);
        if (rc == 0 && automatic)
            prune_tree(src, dir, only, meta_name, 0, &st);
        if (rc == 0)
            rc = enough_room(src, &ss, dir, base, &st);
        if (rc == 0 && !automatic)
            rc = own_dir(dir, 1);
        if (rc == 0 && automatic && (rc = stage_lock(dir, timeout, &st)) >= 0) {
            r->stage_lock = rc;
            rc = 0;
        }
        double waited = 0;
        if (rc == 0)
            rc = copy_lock(dir, timeout, &st, &waited);
        if (rc == 0 && waited >= 1)
            train_report_note(r->rep, "--stage: waited %.1f s for another run copying into %s%s",
                              waited, dir, st.locked ? "" : " (it made no progress: copying "
                              "beside it)");
        int kept_fd = -1, exclusive = 0;
        if (rc == 0 && !automatic)
            rc = kept_lock(src, &ss, dir, only, meta_name, timeout, &st, &kept_fd, &exclusive);
        if (rc == 0 && exclusive)
            prune_tree(src, dir, only, meta_name, 0, &st);
        dir_id above[STAGE_MAX_DEPTH + 1];
        if (rc == 0 && !one) {
            copy_list jobs = {0};
            rc = copy_tree(src, dir, 0, above, &jobs, &st);
            if (rc == 0)
                rc = copy_all(&jobs, threads, &st);
            free_jobs(&jobs);
        } else if (rc == 0) {   /* one file (npz, csv): into dir under its name */
            char to[1400];
            snprintf(to, sizeof to, "%.1000s/%.300s", dir, base_name(src));
            rc = copy_file(src, to, buf, &st);
            if (rc == 0 && has_meta)
                rc = copy_meta_pkl(src, dir, buf, &st);
        }
        cdl_free(buf);
        if (kept_fd >= 0) {   /* read from until the run ends, shared with other readers */
            if (exclusive && rc == 0)
                rc = share_kept(kept_fd, dir, timeout, &st);
            r->stage_lock = kept_fd;
        }
        if (st.locked)
            close(st.lock_fd);   /* the next copier finds the files there */
        st.locked = 0;
        /* Only a folder this run holds the lock of is its to remove: the
         * name of --stage auto's folder is predictable (the job's ids), so
         * another account of the node can make it first (a folder, a file,
         * a link), and removing what is in there would act on their files,
         * or through their links on this account's own. A kept copy of
         * --stage DIR is locked too (shared, while the run reads it) but is
         * never the run's to remove. */
        if (automatic && r->stage_lock >= 0)
            snprintf(r->stage_owned, sizeof r->stage_owned, "%s", dir);
        if (automatic && rc == -2) {
            log_line(CDL_LOG_WARNING, stderr, "cdl: rank %d (node %d): %s; --stage auto reads "
                     "%s where it is instead (another account can make a folder of that name "
                     "in a shared $TMPDIR: a private one per job, Slurm's job_container/tmpfs, "
                     "prevents that)", r->ri.rank, r->ri.node_rank, cdl_last_error(), src);
            v[V_SKIP] = 1;
            rc = 0;
        }
        if (st.beat_failed)
            return cdl_error("--stage: the other ranks stopped waiting while this rank copied "
                             "%s: %s", src, cdl_last_error());
        v[V_STOP] = rc != 0 && train_stop_requested();
        v[V_FAIL] = rc != 0 && !v[V_STOP];
        v[V_SECS] = train_now() - t0;
        v[V_NODES] = 1;
        if (v[V_FAIL] > 0)
            log_line(CDL_LOG_WARNING, stderr, "cdl: rank %d (node %d): %s", r->ri.rank,
                     r->ri.node_rank, cdl_last_error());
    }
    /* Rounds until no copy is running: every rank adds its outcome (the
     * copiers' final ones, zeros elsewhere) to each round, while the
     * copiers still at work add pending beats (beat); the last round
     * holds every node's outcome once. */
    for (double sum[V_LEN] = {[V_PENDING] = 1}; peers && sum[V_PENDING] > 0;) {
        memcpy(sum, v, sizeof sum);
        if (cdl_dist_allreduce_f64(r->dist, sum, V_LEN) != 0)
            return cdl_error("--stage: waiting for the copies of the dataset on every node "
                             "failed: %s (a copy that made no progress for CDL_TIMEOUT, or a "
                             "rank that died)", cdl_last_error());
        if (sum[V_PENDING] == 0)
            memcpy(v, sum, sizeof sum);
    }
    if (v[V_STOP] > 0)   /* SIGTERM or SIGUSR1 on a copying rank: all stop now, agreed */
        return 1;
    if (v[V_FAIL] > 0)
        return cdl_error("--stage: copying %s to node-local storage failed on %.0f node%s (the "
                         "first error is above, from its local rank 0): use --stage off or "
                         "another --stage DIR", src, v[V_FAIL], v[V_FAIL] > 1 ? "s" : "");
    if (v[V_SKIP] > 0) {
        train_report_note(r->rep, "--stage auto: not staged: its folder %s was taken by another "
                          "account on %.0f node%s (see above): reading %s where it is", dir,
                          v[V_SKIP], v[V_SKIP] > 1 ? "s" : "", src);
        return 0;
    }
    if (S_ISDIR(ss.st_mode))
        snprintf(r->data_dir, sizeof r->data_dir, "%s", dir);
    else
        snprintf(r->data_dir, sizeof r->data_dir, "%.900s/%.150s", dir, base_name(src));
    char removed[64] = "";
    if (st.removed)
        snprintf(removed, sizeof removed, ", %ld removed that the dataset no longer holds",
                 st.removed);
    train_report_note(r->rep, "staged %s to %s: %ld file%s, %.1f MB (%ld copied%s) in %.2f s "
                      "(mean of %.0f node%s: %.2f s)", src, dir, st.files, st.files == 1 ? "" : "s", st.bytes / 1e6,
                      st.copied, removed,
                      v[V_SECS] > 0 && v[V_NODES] == 1 ? v[V_SECS] : train_now() - t0,
                      v[V_NODES], v[V_NODES] == 1 ? "" : "s",
                      v[V_NODES] > 0 ? v[V_SECS] / v[V_NODES] : 0.0);
    return 0;
}

void train_stage_cleanup(run *r, int ok)
{
    if (!r->stage_owned[0]) {
        if (r->stage_lock >= 0)   /* a kept copy's: other runs may change it now */
            close(r->stage_lock);
        r->stage_lock = -1;
        return;
    }
    /* After a good run the node's other ranks are done reading once they
     * reach this barrier; after a failure the run is over for all. */
    if (ok && r->dist && r->ri.world > 1)
        cdl_dist_barrier(r->dist);
    remove_tree(r->stage_owned);
    r->stage_owned[0] = '\0';
    if (r->stage_lock >= 0)
        close(r->stage_lock);
    r->stage_lock = -1;
}
