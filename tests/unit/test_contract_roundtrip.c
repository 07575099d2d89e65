/* Whatever the plugin or cdlrun writes, libcdl's discovery reads back
 * identically. The plugin side runs its real contract code (spank/) on a
 * few step layouts; cdlrun is run on this very program, which then prints
 * what it discovered (argument --print). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "dist_fork.h"

#include <cdl/cdl.h>

#include "lib/dist/contract.h"
#include "spank/conf.h"
#include "spank/contract.h"

/* Applies the plugin's variables as slurmstepd would (spank_setenv). */
static void apply(const struct spk_env *env)
{
    for (int i = 0; i < env->n; i++) {
        if (env->v[i].unset)
            unsetenv(env->v[i].name);
        else if (!env->v[i].skip)
            setenv(env->v[i].name, env->v[i].value, 1);
    }
}

/* Every task of a step: nodes x tasks-per-node, block distribution. */
static void plugin_step(const char *nodelist, const char *master, uint32_t nnodes,
                        uint32_t per_node, int replicas)
{
    struct spk_conf conf;
    spk_conf_defaults(&conf);
    for (uint32_t node = 0; node < nnodes; node++)
        for (uint32_t local = 0; local < per_node; local++) {
            struct spk_step s = {
                .jobid = 811, .stepid = 4, .nnodes = nnodes, .nodeid = node,
                .ntasks = nnodes * per_node, .local_tasks = per_node, .cpus_per_task = 2,
                .nodelist = nodelist, .replicas_per_gpu = replicas,
            };
            struct spk_step_contract sc;
            struct spk_env env;
            uint32_t global = node * per_node + local;
            clear_launcher_env();
            setenv("RANK", "0", 1);            /* from the submit shell: must not survive */
            setenv("CDL_STORE_FD", "9", 1);    /* likewise */
            setenv("CDL_STORE_PORT", "9", 1);  /* likewise: the store would bind it */
            assert_int_equal(spk_contract_step(&conf, &s, NULL, &sc), 0);
            snprintf(sc.token, sizeof sc.token, "feedfacefeedfacefeedfacefeedface");
            assert_int_equal(spk_contract_task(&s, &sc, local, global, &env), 0);
            apply(&env);
            cdl_rank_info info;
            if (cdl_rank_discover(&info) != 0)
                fail_msg("task %u: %s", global, cdl_last_error());
            assert_string_equal(info.source, "contract");
            assert_int_equal(info.rank, (int)global);
            assert_int_equal(info.world, (int)(nnodes * per_node));
            assert_int_equal(info.local_rank, (int)local);
            assert_int_equal(info.local_world, (int)per_node);
            assert_int_equal(info.node_rank, (int)node);
            assert_int_equal(info.nnodes, (int)nnodes);
            assert_int_equal(info.replicas_per_gpu, replicas);
            assert_int_equal(info.master_port, sc.master_port);
            assert_string_equal(info.master_addr, master);
            assert_string_equal(info.job_id, "811.4");
            assert_null(getenv("CDL_STORE_FD"));
            assert_null(getenv("CDL_STORE_PORT"));
            assert_string_equal(getenv("CDL_STORE_TOKEN"), sc.token);
        }
    clear_launcher_env();
}

static void test_plugin_round_trip(void **state)
{
    (void)state;
    plugin_step("n[1-2]", "n1", 2, 3, 1);
    plugin_step("a[08-10]b", "a08b", 3, 2, 2);
    plugin_step("n[1-2]-ib", "n1-ib", 1, 4, 4);
    plugin_step("gpu[01-02,05]-x[1-2]", "gpu01-x1", 6, 1, 1);
}

static void test_cdlrun_round_trip(void **state)
{
    (void)state;
    const char *top = getenv("top_builddir");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s/launcher/cdlrun -n 3 --bind none %s/tests/unit/test_contract_roundtrip --print",
             top && *top ? top : ".", top && *top ? top : ".");
    clear_launcher_env();
    setenv("RANK", "7", 1);   /* cdlrun's contract replaces it */
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[512];
    int seen[3] = {0}, port = -1;
    char job[64] = "";
    while (fgets(line, sizeof line, p)) {
        int r, w, lr, lw, node, nn, rpg, mp, env_mp;
        char addr[64], jid[64], src[32], tok[64];
        if (sscanf(line, "rank=%d world=%d local=%d/%d node=%d/%d rpg=%d addr=%63s port=%d "
                   "job=%63s source=%31s token=%63s master_port=%d", &r, &w, &lr, &lw, &node,
                   &nn, &rpg, addr, &mp, jid, src, tok, &env_mp) != 13)
            fail_msg("unexpected line from a rank: %s", line);
        assert_in_range(r, 0, 2);
        seen[r]++;
        assert_int_equal(w, 3);
        assert_int_equal(lr, r);
        assert_int_equal(lw, 3);
        assert_int_equal(node, 0);
        assert_int_equal(nn, 1);
        assert_int_equal(rpg, 1);
        assert_string_equal(addr, "127.0.0.1");
        assert_string_equal(src, "contract");
        assert_int_equal((int)strlen(tok), CONTRACT_TOKEN_LEN);
        if (port < 0) {
            port = mp;
            snprintf(job, sizeof job, "%s", jid);
        }
        assert_int_equal(mp, port);   /* one run, one store */
        /* MASTER_PORT is left to the program (PyTorch's rank 0 binds it):
         * not the port cdlrun holds for cdl's store. */
        assert_in_range(env_mp, 1, 65535);
        assert_int_not_equal(env_mp, mp);
        assert_string_equal(jid, job);
    }
    assert_int_equal(pclose(p), 0);
    for (int r = 0; r < 3; r++)
        assert_int_equal(seen[r], 1);
    unsetenv("RANK");
}

/* As a rank of cdlrun: what discovery says, one line. */
static int print_discovered(void)
{
    cdl_rank_info i;
    const char *tok = getenv(CDL_ENV_STORE_TOKEN), *mp = getenv(CDL_ENV_MASTER_PORT);
    if (cdl_rank_discover(&i) != 0) {
        fprintf(stderr, "%s\n", cdl_last_error());
        return 1;
    }
    printf("rank=%d world=%d local=%d/%d node=%d/%d rpg=%d addr=%s port=%d job=%s source=%s "
           "token=%s master_port=%s\n", i.rank, i.world, i.local_rank, i.local_world,
           i.node_rank, i.nnodes, i.replicas_per_gpu, i.master_addr, i.master_port, i.job_id,
           i.source, tok ? tok : "-", mp ? mp : "-");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--print"))
        return print_discovered();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plugin_round_trip),
        cmocka_unit_test(test_cdlrun_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
