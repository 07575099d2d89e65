/* Files a run writes in folders other accounts may write to (owned.c):
 * --metrics, --tensorboard, and the checkpoint folder's files (ckpt_dir.c).
 * Whoever else can write the folder (root's /tmp, a folder of one's own
 * with mode 0777, a project's) may have put a file or a link there first:
 * to be appended to (a link to a file of the run's user, root's included),
 * read back, or shown as the run's. Files of root are trusted (root can
 * do anything anyway), and so is a link of the run's own account to a file
 * elsewhere (--metrics /dev/stdout, a link into scratch: its owner chose
 * it). */
#ifndef CDL_TRAIN_OWNED_H
#define CDL_TRAIN_OWNED_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

/* 1 when st's owner is neither this process's account (euid) nor root,
 * with "uid N (name)" in owner[len]; 0 otherwise. */
int train_foreign(const struct stat *st, char *owner, size_t len);

/* path (for option opt, e.g. "--metrics") opened for appending, created
 * 0644 if missing. A link by that name is followed only when this account
 * or root owns it; the file opened must be this account's or root's (its
 * descriptor is checked, so nothing put there after a look is written to);
 * a folder of another account that every account may write to and that
 * is not sticky (anyone could rename the file away and put theirs) is
 * refused. NULL with cdl_error naming the file, its owner and what to do. */
FILE *train_open_append(const char *opt, const char *path);

/* The same check of a descriptor path was opened as (a reader's): 0, or -1
 * with cdl_error when the file is another account's. */
int train_check_fd(const char *opt, const char *path, int fd);

/* dir (for opt, e.g. "--tensorboard"; it exists) opened as a directory
 * descriptor, for openat(O_EXCL | O_NOFOLLOW) of new files in it. A link
 * by that name is followed only when this account's or root's; another
 * account's directory that every account may write to is refused (as
 * --ckpt-dir's: /tmp itself, but for root), and so is a file in it whose
 * name starts with prefix that another account owns (TensorBoard would
 * show its events as this run's). -1 with cdl_error. */
int train_open_dir(const char *opt, const char *dir, const char *prefix);

/* 0 unless dir (for opt; st its stat) belongs to another account and every
 * account may write to it (/tmp itself, but for root; a name in it someone
 * made first with mode 0777): then -1 with cdl_error saying what anyone
 * there could do (risk, e.g. "put a checkpoint there that this run resumes
 * from") and to give a directory of one's own. A folder another account
 * shares only with its group (a project's) is fine. One's own folder that
 * every account may write to without the sticky bit (mode 0777) is
 * refused too: anyone could swap a file in it between a check and its
 * use. */
int train_shared_dir(const char *opt, const char *dir, const struct stat *st, const char *risk);

#endif
