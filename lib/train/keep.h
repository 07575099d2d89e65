/* Numbered checkpoints of --keep-last / --keep-every (keep.c). */
#ifndef CDL_TRAIN_KEEP_H
#define CDL_TRAIN_KEEP_H

#include <stddef.h>

#include <cdl/cdl.h>

/* Whether name is a numbered checkpoint cdl writes,
 * "step-" + 8 to 18 digits + ".safetensors" (its step into *step). */
int ckpt_keep_name(const char *name, long *step);
/* Whether the checkpoint of step gets a numbered file. */
int ckpt_keep_wanted(long step, long keep_last, long keep_every);
/* DIR/step-NNNNNNNN.safetensors (into out) as a hard link to last, the
 * checkpoint just written (a file of dir, linked by its name there),
 * replacing one of that step atomically, relative to dir opened once
 * (afile_dir_open: refused when every account may write to it without
 * the sticky bit). 0 done;
 * 1 the file system has no hard links (write a copy to out instead); 2
 * out is something else than a regular file (a link, a directory: left
 * alone, nothing kept); -1
 * an error (cdl_error names the file and what to do). */
int ckpt_keep_link(const char *dir, const char *last, long step, char *out, size_t len);
/* Removes the numbered checkpoints beyond the keep_last newest (dir
 * checked as ckpt_keep_link's; the one
 * of step now counted among them), except steps that are multiples of
 * keep_every and the file resumed (the path the run resumed from, or
 * NULL). -1 with msg saying which file could not be removed. */
int ckpt_keep_prune(const char *dir, long keep_last, long keep_every, long now,
                    const char *resumed, char *msg, size_t len);

#endif
