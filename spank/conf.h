/* The administrator's settings: the arguments after the plugin's path in
 * plugstack.conf, strict key=value (docs/admin.md lists them). An unknown
 * key, a repeated key or a bad value is an error that names it. */
#ifndef CDL_SPANK_CONF_H
#define CDL_SPANK_CONF_H

#include "spank/util.h"

enum spk_bind_mode { SPK_BIND_NONE = 0, SPK_BIND_CORES, SPK_BIND_CLOSEST };

/* How MASTER_ADDR is derived from the Slurm node name of task 0's node. */
enum spk_addr_policy {
    SPK_ADDR_HOSTNAME = 0,   /* the node name as is */
    SPK_ADDR_IP              /* the address the (suffixed) node name resolves to */
};

struct spk_conf {
    char mps_control[SPK_PATH_MAX];   /* absolute path of nvidia-cuda-mps-control */
    char runtime_dir[SPK_PATH_MAX];   /* root-owned parent of the per-step dirs */
    char topology[SPK_PATH_MAX];      /* hwloc XML to load instead of probing ("" = probe) */
    char secret_key[SPK_PATH_MAX];    /* site key the secrets of multi-node steps derive from */
    int port_lo, port_hi;             /* MASTER_PORT range when Slurm reserved none */
    int max_replicas_per_gpu;         /* upper bound of --cdl-mps=N */
    enum spk_bind_mode default_bind;  /* binding when --cdl-ddp is given without --cdl-bind */
    enum spk_addr_policy addr_policy;
    char addr_suffix[64];             /* appended to the node name ("-ib"); "" = none */
    int allow_batch;                  /* sbatch/salloc accept the options */
    int mps_thread_percentage;        /* 0 = auto: ceil(100 / replicas per GPU) */
    int mps_timeout_s;                /* bound on every wait for the MPS daemon */
};

/* The defaults, also documented in spank/cdl.conf and docs/admin.md. */
void spk_conf_defaults(struct spk_conf *c);

/* Parses plugstack arguments into *c (defaults first). Returns 0, or -1
 * with spk_last_error() naming the argument and the accepted values. */
int spk_conf_parse(struct spk_conf *c, int ac, char **av);

#endif
