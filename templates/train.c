/* A minimal training program on libcdl, run under Slurm with the rank
 * contract of the SPANK plugin:
 *
 *   cc -O2 train.c $(pkg-config --cflags --libs cdl) -o train
 *   srun -N2 --ntasks-per-node=2 --cdl-ddp ./train [DATA_DIR]
 *
 * libcdl reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, ...
 * (set by --cdl-ddp, or by cdlrun) by itself; the first block only shows
 * where this process stands. Exits 75 (CDL_EXIT_REQUEUE) after writing a
 * checkpoint on SIGUSR1/SIGTERM, so the long-requeue.sbatch template can
 * requeue it and `resume = "auto"` continues from there. */
#define _POSIX_C_SOURCE 200809L   /* sigprocmask under -std=c11 too */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

int main(int argc, char **argv)
{
    /* A SIGUSR1/SIGTERM from here on (a job signalled as it starts) stops
     * the run at its set-up with 75 instead of killing this process. */
    cdl_train_signals_early();
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGUSR1);
    sigaddset(&stop, SIGTERM);
    sigprocmask(SIG_UNBLOCK, &stop, NULL);

    cdl_rank_info me;
    if (cdl_rank_discover(&me) != 0) {
        fprintf(stderr, "train: %s\n", cdl_last_error());
        return 1;
    }
    printf("rank %d of %d (local %d of %d, node %d of %d), rendezvous %s:%d, from %s\n",
           me.rank, me.world, me.local_rank, me.local_world, me.node_rank, me.nnodes,
           me.master_addr, me.master_port, me.source);

    cdl_train_config cfg;
    cdl_train_defaults(&cfg);   /* lenet on fashion-mnist, SGD, cosine */
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s",
             argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist");
    cfg.epochs = 3;
    cfg.batch_size = 64;        /* per rank */
    snprintf(cfg.ckpt_dir, sizeof cfg.ckpt_dir, "ckpt");
    snprintf(cfg.resume, sizeof cfg.resume, "auto");
    cfg.quiet = me.rank != 0;   /* one rank reports */

    cdl_train_result res;
    int rc = cdl_train_run(&cfg, &res);
    if (rc == CDL_EXIT_REQUEUE)
        return CDL_EXIT_REQUEUE;
    if (rc != 0) {
        fprintf(stderr, "train (rank %d): %s\n", me.rank, cdl_last_error());
        return 1;
    }
    if (me.rank == 0)
        printf("done: %d epochs, %ld steps, validation accuracy %.4f\n", res.epochs_done,
               res.steps, res.final_val_acc);
    return 0;
}
