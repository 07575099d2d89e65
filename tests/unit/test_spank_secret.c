/* The step secret (spank/secret.h): the same on every node of a step
 * without any exchange, different for every step and user, and only from
 * a site key that group and others cannot read. */
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

#include "spank/secret.h"
#include "spank/util.h"

static const unsigned char key[32] = "0123456789abcdef0123456789abcdef";

static void test_derive(void **state)
{
    (void)state;
    char a[SPK_SECRET_HEX + 1], b[SPK_SECRET_HEX + 1];
    spk_secret_derive(key, sizeof key, 1000, 77, 3, a);
    spk_secret_derive(key, sizeof key, 1000, 77, 3, b);
    assert_string_equal(a, b);   /* every node computes the same */
    assert_int_equal(strlen(a), SPK_SECRET_HEX);
    spk_secret_derive(key, sizeof key, 1000, 77, 4, b);
    assert_string_not_equal(a, b);
    spk_secret_derive(key, sizeof key, 1001, 77, 3, b);
    assert_string_not_equal(a, b);
    spk_secret_derive(key, sizeof key, 1000, 78, 3, b);
    assert_string_not_equal(a, b);
    static const unsigned char other[32] = "fedcba9876543210fedcba9876543210";
    spk_secret_derive(other, sizeof other, 1000, 77, 3, b);
    assert_string_not_equal(a, b);
}

/* One node: random, so two steps with the same ids still differ. */
static void test_one_node_random(void **state)
{
    (void)state;
    char a[SPK_SECRET_HEX + 1], b[SPK_SECRET_HEX + 1];
    assert_int_equal(spk_secret_step("/nonexistent", 1, 1000, 77, 3, a, sizeof a), 0);
    assert_int_equal(spk_secret_step("/nonexistent", 1, 1000, 77, 3, b, sizeof b), 0);
    assert_string_not_equal(a, b);
}

static void test_key_file(void **state)
{
    (void)state;
    char path[] = "/tmp/cdl-test-key-XXXXXX", a[SPK_SECRET_HEX + 1], b[SPK_SECRET_HEX + 1];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, key, sizeof key), (ssize_t)sizeof key);
    close(fd);
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(spk_secret_step(path, 2, 1000, 77, 3, a, sizeof a), 0);
    spk_secret_derive(key, sizeof key, 1000, 77, 3, b);
    assert_string_equal(a, b);
    /* Owned by an account other than root, SlurmUser (from the slurm.conf
     * in SLURM_CONF) and munge, it is that account's to read and replace:
     * refused, naming the owner and the rule. The old rule guessed from
     * the uid and let any account below 1000 own it (www-data: 33) while
     * refusing Debian's SlurmUser `slurm` (64030). */
    if (geteuid() == 0) {
        char conf[] = "/tmp/cdl-test-slurmconf-XXXXXX";
        int cfd = mkstemp(conf);
        assert_true(cfd >= 0);
        static const char text[] = "# a site's slurm.conf\nClusterName=x\n"
                                   "SlurmdUser=root\n  slurmuser = nobody  # the account\n";
        assert_int_equal(write(cfd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
        close(cfd);
        const char *old = getenv("SLURM_CONF");
        char saved[512];
        snprintf(saved, sizeof saved, "%s", old ? old : "");
        setenv("SLURM_CONF", "/nonexistent/slurm.conf", 1);
        assert_int_equal(chown(path, 65534, 65534), 0);
        assert_int_equal(spk_secret_step(path, 2, 1000, 77, 3, a, sizeof a), -1);
        assert_non_null(strstr(spk_last_error(), "owned by uid 65534 (nobody)"));
        assert_non_null(strstr(spk_last_error(), "SlurmUser unknown"));
        if (getpwuid(33)) {
            assert_int_equal(chown(path, 33, 0), 0);
            assert_int_equal(spk_secret_step(path, 2, 1000, 77, 3, a, sizeof a), -1);
            assert_non_null(strstr(spk_last_error(), "owned by uid 33"));
        }
        /* SlurmUser=nobody: now nobody may own it, www-data still not. */
        setenv("SLURM_CONF", conf, 1);
        assert_int_equal(chown(path, 65534, 65534), 0);
        assert_int_equal(spk_secret_step(path, 2, 1000, 77, 3, a, sizeof a), 0);
        if (getpwuid(33)) {
            assert_int_equal(chown(path, 33, 0), 0);
            assert_int_equal(spk_secret_step(path, 2, 1000, 77, 3, a, sizeof a), -1);
            assert_non_null(strstr(spk_last_error(), "SlurmUser (nobody, in /tmp/"));
        }
        struct passwd *mu = getpwnam("munge");
        if (mu) {
            assert_int_equal(chown(path, mu->pw_uid, 0), 0);
            assert_int_equal(spk_secret_step(path, 2, 1000, 77, 3, a, sizeof a), 0);
        }
        assert_int_equal(chown(path, 0, 0), 0);
        if (old)
            setenv("SLURM_CONF", saved, 1);
        else
            unsetenv("SLURM_CONF");
        unlink(conf);
    }
    /* Readable by others: refused, naming the setting. */
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(spk_secret_step(path, 2, 1000, 77, 3, a, sizeof a), -1);
    assert_non_null(strstr(spk_last_error(), "secret_key="));
    assert_non_null(strstr(spk_last_error(), "0600"));
    unlink(path);
    assert_int_equal(spk_secret_step(path, 2, 1000, 77, 3, a, sizeof a), -1);
    assert_non_null(strstr(spk_last_error(), "several nodes"));
}

/* A key in a directory others may write to can be swapped for theirs:
 * refused, unless the directory is sticky (others cannot replace it). */
static void test_key_dir(void **state)
{
    (void)state;
    char dir[] = "/tmp/cdl-test-keydir-XXXXXX", path[64], a[SPK_SECRET_HEX + 1];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/key", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, key, sizeof key), (ssize_t)sizeof key);
    close(fd);
    assert_int_equal(spk_secret_step(path, 2, 1000, 77, 3, a, sizeof a), 0);
    assert_int_equal(chmod(dir, 0777), 0);
    assert_int_equal(spk_secret_step(path, 2, 1000, 77, 3, a, sizeof a), -1);
    assert_non_null(strstr(spk_last_error(), "its directory"));
    assert_int_equal(chmod(dir, 01777), 0);
    assert_int_equal(spk_secret_step(path, 2, 1000, 77, 3, a, sizeof a), 0);
    /* A directory further up that others may write: they could rename the
     * key's directory and put one of their own in its place. */
    char sub[96], deep[128];
    assert_int_equal(chmod(dir, 0755), 0);
    snprintf(sub, sizeof sub, "%s/keys", dir);
    snprintf(deep, sizeof deep, "%s/key", sub);
    assert_int_equal(mkdir(sub, 0700), 0);
    assert_int_equal(rename(path, deep), 0);
    assert_int_equal(spk_secret_step(deep, 2, 1000, 77, 3, a, sizeof a), 0);
    assert_int_equal(chmod(dir, 0777), 0);
    assert_int_equal(spk_secret_step(deep, 2, 1000, 77, 3, a, sizeof a), -1);
    assert_non_null(strstr(spk_last_error(), "the directory /tmp/cdl-test-keydir-"));
    assert_non_null(strstr(spk_last_error(), "above it"));
    assert_int_equal(chmod(dir, 01777), 0);
    assert_int_equal(spk_secret_step(deep, 2, 1000, 77, 3, a, sizeof a), 0);
    assert_int_equal(unlink(deep), 0);
    assert_int_equal(rmdir(sub), 0);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_derive),
        cmocka_unit_test(test_one_node_random),
        cmocka_unit_test(test_key_file),
        cmocka_unit_test(test_key_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
