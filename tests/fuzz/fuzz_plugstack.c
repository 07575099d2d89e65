/* libFuzzer target: the plugin's parsers of administrator and user text,
 * which run as root in slurmstepd and slurmd: the plugstack.conf arguments
 * (spk_conf_parse), the option values of --cdl-mps and --cdl-bind, Slurm's
 * --cpu-bind value (also as --hint sets it) and node lists
 * (lib/dist/contract.c, compiled into the plugin), and the job environment's values the plugin reads as root:
 * SLURM_CPU_BIND_LIST masks, CUDA_VISIBLE_DEVICES, SLURM_STEP_RESV_PORTS;
 * Slurm's GPU binding of a task (SLURMD_TRES_BIND, read in the task);
 * and the /dev/shm names, which any user chooses, that the plugin matches
 * as root to remove a step's leftover segments (spank/shmsweep.c).
 *
 * Also the task's command line as the plugin reads it for torchrun
 * (spank/torchrun.c; in the task, as the user).
 *
 * Input: one selector byte, then text. Selector 0 (mod 8): the text split
 * at whitespace into an argument vector, for the plugstack parser and as a
 * task's command line; otherwise the text is one value for the parser
 * chosen. */
#include <stdlib.h>
#include <string.h>

#include "lib/dist/contract.h"
#include "spank/conf.h"
#include "spank/options.h"
#include "spank/shmsweep.h"
#include "spank/packing.h"
#include "spank/port.h"
#include "spank/torchrun.h"
#include "spank/util.h"
#include "tests/fuzz/fuzz.h"

enum { MAX_ARGS = 64 };

static void quiet(const char *msg)
{
    (void)msg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 8192)
        return 0;
    spk_set_log(quiet);
    /* A refused line is looked for in the node's slurm.conf and plugstack
     * files (the admin's, not untrusted input): none here, so that every
     * run reads the same nothing and no file per input. */
    setenv("SLURM_CONF", "/nonexistent/slurm.conf", 1);
    char *text = malloc(size);   /* size - 1 bytes of text and a NUL */
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    switch (data[0] % 8) {
    case 0: {
        char *av[MAX_ARGS];
        int ac = 0;
        for (char *save = NULL, *t = strtok_r(text, " \t\n", &save); t && ac < MAX_ARGS;
             t = strtok_r(NULL, " \t\n", &save))
            av[ac++] = t;
        struct spk_conf c;
        spk_conf_parse(&c, ac, av);
        struct spk_torchrun t;
        int nproc;
        spk_torchrun_parse(ac, av, &t);
        spk_torchrun_check(&t, 4, 2);
        spk_torchrun_threads(&t, ac > 1 ? av[1] : NULL, 8, &nproc);
        break;
    }
    case 1: {
        int n;
        spk_opt_mps(size > 1 ? text : NULL, 16, &n);
        break;
    }
    case 2: {
        enum spk_bind_mode m;
        int verbose;
        spk_opt_bind(text, SPK_BIND_NONE, &m, &verbose);
        break;
    }
    case 3:
        spk_user_cpu_bind(text);
        spk_cpu_bind_from_hint(text, "1");
        break;
    case 4: {
        char host[256];
        contract_err e;
        contract_hostlist_nth(text, 0, host, sizeof host, &e);
        contract_hostlist_nth(text, 7, host, sizeof host, &e);
        contract_hostlist_count(text, &e);
        break;
    }
    case 5: {
        cpu_set_t set;
        spk_cpu_mask_union(text, &set);
        break;
    }
    case 6: {
        struct spk_gpus g;
        if (spk_gpus_parse(text, &g) == 0)
            for (int t = 0; t < 4; t++)
                spk_task_gpu_index(&g, t, 1 + t % 2);
        /* SLURMD_TRES_BIND, read in the task (as the user). */
        spk_tres_bind_tasks_per_gpu(text);
        if (spk_tres_bind_per_task(text) > 1024)
            abort();
        const char *w = spk_tres_bind_task_gpus(text);
        if (w && !strchr("pms", w[0]))
            abort();   /* one of its words, or NULL */
        for (int t = 0; t < 4; t++)
            spk_tres_bind_map_gpu(text, t * 5);
        break;
    }
    default: {
        int port, reserved;
        contract_err e;
        spk_port_choose(text, 811, 3, 40000, 40999, &port, &reserved);
        contract_resv_port(text, &port, &e);
        spk_shm_name_is_step(text, 811, 3);
        spk_shm_name_is_step(text, 811, SPK_SHM_ANY_STEP);
        break;
    }
    }
    free(text);
    return 0;
}
