/* The step's store secret (see secret.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nettle/hmac.h>

#include "lib/dist/contract.h"
#include "spank/secret.h"
#include "spank/util.h"

/* The uid of Slurm's SlurmUser (the account slurmctld runs as) in the
 * slurm.conf at conf (a line "SlurmUser=NAME", keys case-insensitive as
 * Slurm reads them); root when the file does not name one (Slurm's
 * default), (uid_t)-1 when it cannot be read. name gets the account. */
static uid_t slurm_user(const char *conf, char *name, size_t len)
{
    char line[1024];
    uid_t uid = 0;
    FILE *f = fopen(conf, "re");
    snprintf(name, len, "root");
    if (!f)
        return (uid_t)-1;
    while (fgets(line, sizeof line, f)) {
        char *p = line + strspn(line, " \t");
        if (strncasecmp(p, "SlurmUser", 9) != 0)
            continue;
        p += 9 + strspn(p + 9, " \t");
        if (*p != '=')
            continue;
        p++;
        p += strspn(p, " \t");
        p[strcspn(p, " \t\r\n#")] = '\0';
        struct passwd *pw = getpwnam(p);
        snprintf(name, len, "%s", p);
        uid = pw ? pw->pw_uid : (uid_t)-1;
    }
    fclose(f);
    return uid;
}

/* Who may own the site key, a rule an administrator can check: root,
 * Slurm's SlurmUser (from the slurm.conf slurmstepd was started with:
 * SLURM_CONF, else /etc/slurm/slurm.conf) and the account `munge` (munge's
 * key, the default secret_key, is munge's). Any other account (a person's,
 * or an unrelated service's) could read the key or swap it for its own.
 * The process reading it may own it too (root in slurmstepd; the unit
 * tests run as whoever runs them). owners gets the rule in words. */
static int key_owner_ok(uid_t uid, char *owners, size_t len)
{
    const char *conf = getenv("SLURM_CONF");
    char su_name[64];
    if (!conf || !*conf)
        conf = "/etc/slurm/slurm.conf";
    uid_t su = slurm_user(conf, su_name, sizeof su_name);
    struct passwd *mu = getpwnam("munge");
    uid_t munge = mu ? mu->pw_uid : (uid_t)-1;
    if (su == (uid_t)-1)
        snprintf(owners, len, "root or munge (SlurmUser unknown: %s unreadable or its "
                 "SlurmUser=%.60s has no account)", conf, su_name);
    else
        snprintf(owners, len, "root, SlurmUser (%.60s, in %.200s) or munge", su_name, conf);
    return uid == 0 || uid == geteuid() || (su != (uid_t)-1 && uid == su) ||
           (munge != (uid_t)-1 && uid == munge);
}

/* Whoever may write the key's directory may swap the key for one of their
 * own (a sticky directory keeps others' files: /tmp is accepted there). */
static int dir_safe(const char *path, uid_t file_owner)
{
    char dir[SPK_PATH_MAX];
    const char *slash = strrchr(path, '/');
    struct stat st;
    size_t n = slash && slash != path ? (size_t)(slash - path) : 1;
    if (n >= sizeof dir)
        return spk_error("secret_key=%s: path too long", path);
    memcpy(dir, path, n);
    dir[n] = '\0';
    if (stat(dir, &st) != 0)
        return spk_error("secret_key=%s: %s: %s", path, dir, strerror(errno));
    if ((st.st_uid != 0 && st.st_uid != file_owner) ||
        ((st.st_mode & 022) && !(st.st_mode & S_ISVTX)))
        return spk_error("secret_key=%s: its directory %s may be written by others than root "
                         "and the key's owner, who could swap the key for one of their own: "
                         "keep the key in a directory like /etc/munge", path, dir);
    /* The same for every directory above (as its links resolve): whoever
     * may write one could rename the key's directory and put one with a
     * key of their own in its place. */
    char real[PATH_MAX], bad[PATH_MAX];
    if (!realpath(dir, real))
        return spk_error("secret_key=%s: %s: %s", path, dir, strerror(errno));
    int rc = spk_dirs_above_ok(real, file_owner, bad, sizeof bad);
    if (rc < 0)
        return spk_error("secret_key=%s: %s: %s", path, bad, strerror(errno));
    if (rc > 0)
        return spk_error("secret_key=%s: the directory %s above it may be written by others "
                         "than root and the key's owner, who could put a directory with a key "
                         "of their own in its place: keep the key in a directory like "
                         "/etc/munge", path, bad);
    return 0;
}

int spk_secret_read_key(const char *path, unsigned char *key, size_t cap, size_t *len)
{
    struct stat st;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return spk_error("secret_key=%s: %s: a step on several nodes needs this site key to "
                         "derive its secret; point secret_key at a key only root can read "
                         "(docs/admin.md)", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077)) {
        close(fd);
        return spk_error("secret_key=%s must be a regular file that group and others cannot "
                         "access (chmod 0600): anyone who can read it can join other users' "
                         "jobs as a rank", path);
    }
    /* Its owner can read it too, and can replace it with a key of their
     * own: only the accounts the key belongs to on a Slurm cluster may own
     * it (key_owner_ok). */
    char owners[SPK_PATH_MAX + 160];
    if (!key_owner_ok(st.st_uid, owners, sizeof owners)) {
        char who[64];
        struct passwd *pw = getpwuid(st.st_uid);
        snprintf(who, sizeof who, "%s", pw ? pw->pw_name : "no account");
        close(fd);
        return spk_error("secret_key=%s is owned by uid %u (%s), who can read the site key "
                         "and join other users' jobs as a rank: it must belong to %s "
                         "(chown root %s, or point secret_key at munge's key)", path,
                         (unsigned)st.st_uid, who, owners, path);
    }
    if (dir_safe(path, st.st_uid) != 0) {
        close(fd);
        return -1;
    }
    n = read(fd, key, cap);
    close(fd);
    if (n < 32 || (size_t)n >= cap)
        return spk_error("secret_key=%s: expected 32 to %d bytes of key", path, (int)cap - 1);
    *len = (size_t)n;
    return 0;
}

void spk_secret_derive(const unsigned char *key, size_t klen, uint32_t uid, uint32_t jobid,
                       uint32_t stepid, char *out)
{
    struct hmac_sha256_ctx ctx;
    unsigned char digest[SHA256_DIGEST_SIZE];
    char msg[96];
    int n = snprintf(msg, sizeof msg, "cdl-step-secret/1|%u|%u|%u", uid, jobid, stepid);
    hmac_sha256_set_key(&ctx, klen, key);
    hmac_sha256_update(&ctx, (size_t)n, (const uint8_t *)msg);
    hmac_sha256_digest(&ctx, sizeof digest, digest);
    for (size_t i = 0; i < sizeof digest; i++)
        snprintf(out + 2 * i, 3, "%02x", digest[i]);
    memset(&ctx, 0, sizeof ctx);
}

int spk_secret_step(const char *key_path, uint32_t nnodes, uint32_t uid, uint32_t jobid,
                    uint32_t stepid, char *out, size_t len)
{
    unsigned char key[SPK_SECRET_KEY_MAX];
    size_t klen;
    contract_err e;
    if (len < SPK_SECRET_HEX + 1)
        return spk_error("internal: secret buffer too small");
    if (nnodes <= 1)
        return contract_token_make(out, len, &e) ? spk_error("%s", e.msg) : 0;
    if (spk_secret_read_key(key_path, key, sizeof key, &klen) != 0)
        return -1;
    spk_secret_derive(key, klen, uid, jobid, stepid, out);
    memset(key, 0, sizeof key);
    return 0;
}
