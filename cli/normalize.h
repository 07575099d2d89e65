/* --normalize auto|none|MEAN,STD|M1,..,Mc,S1,..,Sc: one parser for
 * cdl-train (how a run normalises) and cdl-eval/cdl-predict (how the
 * weights' training normalised, for weights that do not store it). */
#ifndef CDL_CLI_NORMALIZE_H
#define CDL_CLI_NORMALIZE_H

/* What --normalize says; mean and std hold count (1..16) values each when
 * kind is CDL_NORMALIZE_GIVEN. */
typedef struct cli_normalize {
    int kind;                 /* enum cdl_normalize */
    int count;
    float mean[16], std[16];
} cli_normalize;

/* Parses arg into out: 0, or -1 with *why set to what is wrong with it. */
int cli_parse_normalize(const char *arg, cli_normalize *out, const char **why);

#endif
