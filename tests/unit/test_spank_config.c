/* The plugin's admin settings (plugstack.conf arguments) and the user's
 * option values: strict parsing, errors that name the culprit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"

#include "spank/conf.h"
#include "spank/options.h"

static int parse(struct spk_conf *c, int ac, const char **av)
{
    spk_clear_error();
    return spk_conf_parse(c, ac, (char **)av);
}

static void test_defaults(void **state)
{
    (void)state;
    struct spk_conf c;
    assert_int_equal(parse(&c, 0, NULL), 0);
    assert_string_equal(c.mps_control, "/usr/bin/nvidia-cuda-mps-control");
    assert_string_equal(c.runtime_dir, "/run/cdl");
    assert_string_equal(c.topology, "");
    assert_int_equal(c.port_lo, 29500);
    assert_int_equal(c.port_hi, 32499);
    assert_int_equal(c.max_replicas_per_gpu, 16);
    assert_int_equal(c.default_bind, SPK_BIND_NONE);
    assert_int_equal(c.addr_policy, SPK_ADDR_HOSTNAME);
    assert_string_equal(c.addr_suffix, "");
    assert_int_equal(c.allow_batch, 1);
    assert_int_equal(c.mps_thread_percentage, 0);
    assert_int_equal(c.mps_timeout_s, 10);
}

static void test_every_key(void **state)
{
    (void)state;
    struct spk_conf c;
    const char *av[] = {
        "mps_control=/opt/cuda/bin/nvidia-cuda-mps-control", "runtime_dir=/var/run/cdl-mps",
        "topology=/etc/cdl/topo.xml", "port_range=40000-40999", "max_replicas_per_gpu=8",
        "default_bind=closest", "master_addr=ip:-ib", "allow_batch=no",
        "mps_thread_percentage=30", "mps_timeout=25",
    };
    assert_int_equal(parse(&c, 10, av), 0);
    assert_string_equal(c.mps_control, "/opt/cuda/bin/nvidia-cuda-mps-control");
    assert_string_equal(c.runtime_dir, "/var/run/cdl-mps");
    assert_string_equal(c.topology, "/etc/cdl/topo.xml");
    assert_int_equal(c.port_lo, 40000);
    assert_int_equal(c.port_hi, 40999);
    assert_int_equal(c.max_replicas_per_gpu, 8);
    assert_int_equal(c.default_bind, SPK_BIND_CLOSEST);
    assert_int_equal(c.addr_policy, SPK_ADDR_IP);
    assert_string_equal(c.addr_suffix, "-ib");
    assert_int_equal(c.allow_batch, 0);
    assert_int_equal(c.mps_thread_percentage, 30);
    assert_int_equal(c.mps_timeout_s, 25);

    const char *av2[] = {"master_addr=hostname:.ib0.cluster", "mps_thread_percentage=auto",
                         "default_bind=cores", "port_range=2000-2000"};
    assert_int_equal(parse(&c, 4, av2), 0);
    assert_int_equal(c.addr_policy, SPK_ADDR_HOSTNAME);
    assert_string_equal(c.addr_suffix, ".ib0.cluster");
    assert_int_equal(c.mps_thread_percentage, 0);
    assert_int_equal(c.default_bind, SPK_BIND_CORES);
    assert_int_equal(c.port_lo, 2000);
    assert_int_equal(c.port_hi, 2000);
}

/* The message names the file and line that loads the plugin with these
 * arguments (Debian loads it from plugstack.conf.d/cdl.conf, included by
 * plugstack.conf): "plugstack.conf: unknown key" sent the admin to the
 * wrong file. The place goes last, so the key stays first. Found through SLURM_CONF's PlugStackConfig and the include
 * globs; the first line with exactly these arguments. */
static void write_file(const char *dir, const char *name, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void test_error_names_file_and_line(void **state)
{
    (void)state;
    char dir[128], text[1024], want[600];
    struct spk_conf c;
    const char *typo[] = {"defualt_bind=cores"}, *bad[] = {"mps_timeout=0", "x"};
    const char *good[] = {"default_bind=cores"};
    const char *old = getenv("SLURM_CONF");
    char *saved = old ? strdup(old) : NULL;
    assert_int_equal(test_mkdtemp(dir, sizeof dir, "where"), 0);
    snprintf(text, sizeof text, "%s/d", dir);
    assert_int_equal(mkdir(text, 0700), 0);
    snprintf(text, sizeof text, "ClusterName=c\nPlugStackConfig=%s/stack.conf # ours\n", dir);
    write_file(dir, "slurm.conf", text);
    /* A line of another plugin and one of ours with other arguments
     * first; the include relative to plugstack.conf's directory. */
    write_file(dir, "stack.conf", "optional /usr/lib/other.so defualt_bind=cores\n"
                                  "include d/*.conf\n");
    write_file(dir, "d/cdl.conf", "# disabled copy:\n"
                                  "#required /usr/lib/slurm/cdl_spank.so defualt_bind=cores\n"
                                  "optional   /usr/lib/slurm/cdl_spank.so\n"
                                  "required /usr/lib/slurm/cdl_spank.so\tdefualt_bind=cores # typo\n");
    snprintf(text, sizeof text, "%s/slurm.conf", dir);
    setenv("SLURM_CONF", text, 1);
    assert_int_equal(parse(&c, 1, typo), -1);
    assert_non_null(strstr(spk_last_error(), "plugstack.conf: unknown key 'defualt_bind' ("));
    snprintf(want, sizeof want, "submit host) (at %s/d/cdl.conf:4)", dir);
    assert_non_null(strstr(spk_last_error(), want));
    assert_int_equal(parse(&c, 1, good), 0);
    /* No line with these arguments: the message as before. */
    assert_int_equal(parse(&c, 2, bad), -1);
    assert_string_equal(spk_last_error(),
                        "plugstack.conf: mps_timeout=0: expected an integer in 1..300");
    /* Without PlugStackConfig: plugstack.conf beside slurm.conf. */
    write_file(dir, "slurm.conf", "ClusterName=c\n");
    write_file(dir, "plugstack.conf", "\n\nrequired cdl_spank.so mps_timeout=0 x\n");
    assert_int_equal(parse(&c, 2, bad), -1);
    snprintf(want, sizeof want, "plugstack.conf: mps_timeout=0: expected an integer in 1..300 "
                                "(at %s/plugstack.conf:3)", dir);
    assert_string_equal(spk_last_error(), want);
    if (saved)
        setenv("SLURM_CONF", saved, 1);
    else
        unsetenv("SLURM_CONF");
    free(saved);
    assert_int_equal(test_rm_rf(dir), 0);
}

/* Each bad argument fails and the message names the key (or the argument). */
static void test_bad_values_named(void **state)
{
    (void)state;
    static const struct {
        const char *arg, *named;
    } bad[] = {
        {"frobnicate=1", "unknown key 'frobnicate'"},
        /* A key of a later release on a host not yet upgraded. */
        {"frobnicate=1", "(cdl_spank " PACKAGE_VERSION " knows mps_control, "},
        {"frobnicate=1", "needs that release's plugin on every node and submit host"},
        {"mps_control", "key 'mps_control' has no value: write mps_control=VALUE, with no spaces"},
        {"mps_contrl", "not key=value (no spaces around '=')"},
        {"=x", "not key=value"},
        {"mps_control=", "empty value"},
        {"mps_control=nvidia-cuda-mps-control", "not an absolute path"},
        {"mps_control=/usr/bin/../bin/x", "'..'"},
        {"runtime_dir=/run/./cdl", "'.'"},
        {"runtime_dir=/run//cdl", "'//'"},
        {"runtime_dir=/run/cdl/", "ends with '/'"},
        {"runtime_dir=/run/c$dl", "runtime_dir"},
        {"runtime_dir=/run/c dl", "runtime_dir"},
        {"port_range=29500", "port_range"},
        {"port_range=500-600", "port_range"},
        {"port_range=30000-29000", "port_range"},
        {"port_range=30000-70000", "port_range"},
        {"port_range=-1-5", "port_range"},
        {"max_replicas_per_gpu=0", "max_replicas_per_gpu"},
        {"max_replicas_per_gpu=49", "max_replicas_per_gpu"},
        {"max_replicas_per_gpu=4x", "max_replicas_per_gpu"},
        {"max_replicas_per_gpu=+4", "max_replicas_per_gpu"},
        {"default_bind=sockets", "default_bind"},
        {"master_addr=fqdn", "master_addr"},
        {"master_addr=hostname:", "master_addr"},
        {"master_addr=ip:a/b", "master_addr"},
        {"master_addr=hostnamex", "master_addr"},
        {"allow_batch=true", "allow_batch"},
        {"mps_thread_percentage=101", "mps_thread_percentage"},
        {"mps_thread_percentage=0", "mps_thread_percentage"},
        {"mps_thread_percentage=half", "expected auto or an integer in 1..100"},
        {"mps_timeout=0", "mps_timeout"},
        {"mps_timeout=99999999999", "mps_timeout"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct spk_conf c;
        const char *av[] = {bad[i].arg};
        if (parse(&c, 1, av) != -1 || !strstr(spk_last_error(), bad[i].named))
            fail_msg("'%s' gave \"%s\"", bad[i].arg, spk_last_error());
    }
}

/* "runtime_dir = /run/cdl" reaches the plugin as three arguments. */
static void test_spaces_around_equals(void **state)
{
    (void)state;
    struct spk_conf c;
    const char *av[] = {"runtime_dir", "=", "/run/cdl"};
    assert_int_equal(parse(&c, 3, av), -1);
    assert_non_null(strstr(spk_last_error(), "write runtime_dir=VALUE, with no spaces around '='"));
}

/* A plugstack.conf saved with Windows line endings (CRLF): the line's last
 * argument ends in '\r', or is "\r" alone after a space. The message said
 * "default_bind=cores<CR>: expected none, cores or closest", which a
 * terminal shows overwritten, as if cores were refused. It must name the
 * cause, and no message may carry a control byte. */
static void test_crlf_named(void **state)
{
    (void)state;
    struct spk_conf c;
    const char *ends[][2] = {{"port_range=29500-29599", "default_bind=cores\r"},
                             {"default_bind=cores", "\r"},
                             {"runtime_dir=/run/cdl\r", NULL}};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        int n = ends[i][1] ? 2 : 1;
        assert_int_equal(parse(&c, n, ends[i]), -1);
        const char *e = spk_last_error();
        assert_non_null(strstr(e, "Windows line endings"));
        assert_non_null(strstr(e, "sed -i 's/\\r$//'"));
        for (const char *p = e; *p; p++)
            assert_true((unsigned char)*p >= 0x20 && *p != 0x7f);
    }
    /* Another control byte is named by its code, never printed. */
    const char *tab[] = {"default_bind=co\x01res"};
    assert_int_equal(parse(&c, 1, tab), -1);
    assert_non_null(strstr(spk_last_error(), "control character 0x01 in 'default_bind=co'"));
}

static void test_repeated_key(void **state)
{
    (void)state;
    struct spk_conf c;
    const char *av[] = {"mps_timeout=5", "mps_timeout=6"};
    assert_int_equal(parse(&c, 2, av), -1);
    assert_non_null(strstr(spk_last_error(), "'mps_timeout' given twice"));
}

static void test_overlong_path(void **state)
{
    (void)state;
    char arg[SPK_PATH_MAX + 64] = "runtime_dir=/";
    memset(arg + 13, 'a', SPK_PATH_MAX + 10);
    arg[13 + SPK_PATH_MAX + 10] = '\0';
    struct spk_conf c;
    const char *av[] = {arg};
    assert_int_equal(parse(&c, 1, av), -1);
    assert_non_null(strstr(spk_last_error(), "at most"));
}

static void test_opt_mps(void **state)
{
    (void)state;
    int n = -1;
    assert_int_equal(spk_opt_mps(NULL, 16, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(spk_opt_mps("", 16, &n), 0);
    assert_int_equal(n, 0);
    /* sbatch --cdl-mps without a value reaches the job's sruns as this. */
    n = -1;
    assert_int_equal(spk_opt_mps("(null)", 16, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(spk_opt_mps("8", 16, &n), 0);
    assert_int_equal(n, 8);
    assert_int_equal(spk_opt_mps("16", 16, &n), 0);
    assert_int_equal(n, 16);
    static const char *const bad[] = {"0", "17", "-1", "4 ", " 4", "8x", "../8", "0x8", "999",
                                      "1e3", "8,verbose"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spk_clear_error();
        if (spk_opt_mps(bad[i], 16, &n) != -1 || !strstr(spk_last_error(), "--cdl-mps="))
            fail_msg("--cdl-mps=%s accepted or unnamed: %s", bad[i], spk_last_error());
        assert_non_null(strstr(spk_last_error(), "1..16"));
    }
    /* An overlong value is quoted shortened, not in full. */
    char lng[5000];
    memset(lng, '9', sizeof lng - 1);
    lng[sizeof lng - 1] = '\0';
    assert_int_equal(spk_opt_mps(lng, 16, &n), -1);
    assert_true(strlen(spk_last_error()) < 300);
}

static void test_opt_bind(void **state)
{
    (void)state;
    enum spk_bind_mode m;
    int v;
    assert_int_equal(spk_opt_bind("cores", SPK_BIND_NONE, &m, &v), 0);
    assert_int_equal(m, SPK_BIND_CORES);
    assert_int_equal(v, 0);
    assert_int_equal(spk_opt_bind("closest,verbose", SPK_BIND_NONE, &m, &v), 0);
    assert_int_equal(m, SPK_BIND_CLOSEST);
    assert_int_equal(v, 1);
    assert_int_equal(spk_opt_bind("verbose,none", SPK_BIND_CORES, &m, &v), 0);
    assert_int_equal(m, SPK_BIND_NONE);
    assert_int_equal(v, 1);
    assert_int_equal(spk_opt_bind("verbose", SPK_BIND_CORES, &m, &v), 0);
    assert_int_equal(m, SPK_BIND_CORES);   /* the admin's default, printed */
    assert_int_equal(v, 1);
    /* With default_bind=none "verbose" alone bound nothing and printed
     * nothing, silently: refused, saying what to write. */
    spk_clear_error();
    assert_int_equal(spk_opt_bind("verbose", SPK_BIND_NONE, &m, &v), -1);
    assert_non_null(strstr(spk_last_error(), "--cdl-bind=verbose: this site's default binding "
                                              "(default_bind) is none"));
    assert_int_equal(spk_opt_bind("none,verbose", SPK_BIND_NONE, &m, &v), 0);
    static const char *const bad[] = {"", "sockets", "cores,closest", "verbose,verbose",
                                      "Cores", "cores,", ",", "cores;id", "../cores",
                                      "cores,verbose,extra", "cores\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spk_clear_error();
        if (spk_opt_bind(bad[i], SPK_BIND_NONE, &m, &v) != -1 ||
            !strstr(spk_last_error(), "--cdl-bind="))
            fail_msg("--cdl-bind=%s accepted or unnamed: %s", bad[i], spk_last_error());
    }
    char lng[300];
    memset(lng, 'c', sizeof lng - 1);
    lng[sizeof lng - 1] = '\0';
    assert_int_equal(spk_opt_bind(lng, SPK_BIND_NONE, &m, &v), -1);
    assert_non_null(strstr(spk_last_error(), "..."));
    assert_int_equal(spk_opt_bind(NULL, SPK_BIND_NONE, &m, &v), -1);
}

static void test_user_cpu_bind(void **state)
{
    (void)state;
    assert_int_equal(spk_user_cpu_bind(NULL), 0);
    assert_int_equal(spk_user_cpu_bind(""), 0);
    assert_int_equal(spk_user_cpu_bind("quiet,none"), 0);
    assert_int_equal(spk_user_cpu_bind("verbose"), 0);
    assert_int_equal(spk_user_cpu_bind("quiet,cores"), 1);
    assert_int_equal(spk_user_cpu_bind("quiet,corescores"), 1);   /* what srun exports */
    assert_int_equal(spk_user_cpu_bind("verbose,map_cpu:0,2"), 1);
    assert_int_equal(spk_user_cpu_bind("mask_cpu:0x3"), 1);
}

/* srun's renderings (Slurm 22.05) of --hint and --threads-per-core, with
 * the SLURM_THREADS_PER_CORE they come with, against explicit bindings. */
static void test_cpu_bind_from_hint(void **state)
{
    (void)state;
    assert_int_equal(spk_cpu_bind_from_hint("quiet,threads", "1"), 1);   /* nomultithread */
    assert_int_equal(spk_cpu_bind_from_hint("quiet,cores", "1"), 1);     /* compute_bound */
    assert_int_equal(spk_cpu_bind_from_hint("verbose,threads", "2"), 1);
    assert_int_equal(spk_cpu_bind_from_hint("quiet,threads", ""), 0);    /* multithread */
    assert_int_equal(spk_cpu_bind_from_hint("quiet,threads", NULL), 0);
    assert_int_equal(spk_cpu_bind_from_hint("quiet,threadsthreads", "1"), 0);   /* --cpu-bind */
    assert_int_equal(spk_cpu_bind_from_hint("quiet,corescores", "1"), 0);
    assert_int_equal(spk_cpu_bind_from_hint("quiet,rank", "1"), 0);
    assert_int_equal(spk_cpu_bind_from_hint("quiet,map_cpu:0,1", "1"), 0);
    assert_int_equal(spk_cpu_bind_from_hint("quiet,threads,cores", "1"), 0);
    assert_int_equal(spk_cpu_bind_from_hint("quiet", "1"), 0);
    assert_int_equal(spk_cpu_bind_from_hint(NULL, "1"), 0);
}

static void test_cpu_mask_union(void **state)
{
    (void)state;
    cpu_set_t m;
    assert_int_equal(spk_cpu_mask_union("0x3", &m), 0);
    assert_int_equal(CPU_COUNT(&m), 2);
    assert_true(CPU_ISSET(0, &m) && CPU_ISSET(1, &m));
    /* One mask per local task (task/affinity's automatic binding). */
    assert_int_equal(spk_cpu_mask_union("0x1,0x2,0x30", &m), 0);
    assert_int_equal(CPU_COUNT(&m), 4);
    assert_true(CPU_ISSET(4, &m) && CPU_ISSET(5, &m) && !CPU_ISSET(3, &m));
    /* Wider than 64 CPUs: one hexadecimal number, CPU 0 in the last digit. */
    assert_int_equal(spk_cpu_mask_union("0x10000000000000000000000000000001", &m), 0);
    assert_true(CPU_ISSET(0, &m) && CPU_ISSET(124, &m) && CPU_COUNT(&m) == 2);
    assert_int_equal(spk_cpu_mask_union("0xF0", &m), 0);
    assert_int_equal(CPU_COUNT(&m), 4);
    /* Anything else: the caller keeps the task's own affinity. */
    assert_int_equal(spk_cpu_mask_union(NULL, &m), -1);
    assert_int_equal(spk_cpu_mask_union("", &m), -1);
    assert_int_equal(spk_cpu_mask_union("0x0", &m), -1);
    assert_int_equal(spk_cpu_mask_union("3", &m), -1);
    assert_int_equal(spk_cpu_mask_union("0x", &m), -1);
    assert_int_equal(spk_cpu_mask_union("0x3,", &m), -1);
    assert_int_equal(spk_cpu_mask_union("0x3g", &m), -1);
    assert_int_equal(spk_cpu_mask_union("1,0", &m), -1);   /* map_cpu: CPU ids */
}

/* Masks of another step, inherited through the environment by an srun
 * inside a bound task, were taken as this step's CPUs: the plan divided
 * CPUs the task may not use. Only masks that hold the task's own count. */
static void test_cpu_mask_is_step(void **state)
{
    (void)state;
    cpu_set_t all, own;
    assert_int_equal(spk_cpu_mask_union("0x1,0x2", &all), 0);
    CPU_ZERO(&own);
    CPU_SET(1, &own);
    assert_int_equal(spk_cpu_mask_is_step(&all, &own), 1);   /* task 1's own mask */
    CPU_SET(2, &own);
    assert_int_equal(spk_cpu_mask_is_step(&all, &own), 0);   /* CPU 2 is not in them */
    CPU_ZERO(&own);
    CPU_SET(6, &own);
    CPU_SET(7, &own);
    assert_int_equal(spk_cpu_mask_is_step(&all, &own), 0);   /* another step's masks */
    CPU_ZERO(&own);
    assert_int_equal(spk_cpu_mask_is_step(&all, &own), 0);
}

/* Slurm's CPUs per core: 1 where it counts each PU as a core (CR_CPU,
 * CPUs=N alone on an SMT node). */
static void test_slurm_threads(void **state)
{
    (void)state;
    assert_int_equal(spk_slurm_threads("0-1", "2"), 1);
    assert_int_equal(spk_slurm_threads("0-1", "4"), 2);
    assert_int_equal(spk_slurm_threads("0-3,8,10-11", "14"), 2);
    assert_int_equal(spk_slurm_threads("0-1", "3"), 0);    /* not whole */
    assert_int_equal(spk_slurm_threads("", "2"), 0);
    assert_int_equal(spk_slurm_threads(NULL, "2"), 0);
    assert_int_equal(spk_slurm_threads("0-1", ""), 0);
    assert_int_equal(spk_slurm_threads("0-1", NULL), 0);
    assert_int_equal(spk_slurm_threads("0-1", "x"), 0);
    assert_int_equal(spk_slurm_threads("1-0", "2"), 0);
    assert_int_equal(spk_slurm_threads("0,", "2"), 0);
    assert_int_equal(spk_slurm_threads("a", "2"), 0);
}

static void test_parse_uint_charset(void **state)
{
    (void)state;
    long v;
    assert_int_equal(spk_parse_uint("0", 0, 5, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(spk_parse_uint("123456789", 0, 999999999, &v), 0);
    assert_int_equal(spk_parse_uint("1234567890", 0, 2000000000, &v), -1);   /* > 9 digits */
    assert_int_equal(spk_parse_uint("6", 0, 5, &v), -1);
    assert_int_equal(spk_parse_uint("", 0, 5, &v), -1);
    assert_int_equal(spk_parse_uint(NULL, 0, 5, &v), -1);
    assert_int_equal(spk_charset_ok("abc-1", 8, 1, "-"), 1);
    assert_int_equal(spk_charset_ok("abc-1", 5, 1, "-"), 0);   /* needs 6 bytes */
    assert_int_equal(spk_charset_ok("a/b", 8, 1, "-"), 0);
    assert_int_equal(spk_charset_ok("", 8, 1, "-"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_key),
        cmocka_unit_test(test_bad_values_named),
        cmocka_unit_test(test_repeated_key),
        cmocka_unit_test(test_crlf_named),
        cmocka_unit_test(test_spaces_around_equals),
        cmocka_unit_test(test_overlong_path),
        cmocka_unit_test(test_opt_mps),
        cmocka_unit_test(test_opt_bind),
        cmocka_unit_test(test_user_cpu_bind),
        cmocka_unit_test(test_cpu_bind_from_hint),
        cmocka_unit_test(test_cpu_mask_union),
        cmocka_unit_test(test_cpu_mask_is_step),
        cmocka_unit_test(test_slurm_threads),
        cmocka_unit_test(test_parse_uint_charset),
        cmocka_unit_test(test_error_names_file_and_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
