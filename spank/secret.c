/* The step's store secret (see secret.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nettle/hmac.h>

#include "lib/dist/contract.h"
#include "spank/secret.h"
#include "spank/util.h"

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
     * own: an account of a person (uid 1000 and up, Debian's and most
     * distributions' first user id) must not own it. root, a daemon
     * account (munge's key belongs to munge) and whoever runs this (a
     * test) may. */
    if (st.st_uid != 0 && st.st_uid != geteuid() && st.st_uid >= 1000) {
        close(fd);
        return spk_error("secret_key=%s is owned by uid %u, a user account: that user can read "
                         "the site key and join other users' jobs as a rank; give it to root "
                         "(chown root) or point secret_key at munge's key", path,
                         (unsigned)st.st_uid);
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
