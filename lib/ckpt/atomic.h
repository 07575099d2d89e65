/* Atomic replacement of a file: readers see the old content or the complete
 * new one, never a torn file, even after a crash or power loss.
 *
 *   afile a;
 *   if (afile_open(&a, path)) return -1;
 *   if (afile_write(&a, buf, n) || ...) { afile_abort(&a); return -1; }
 *   return afile_commit(&a);
 *
 * The data goes to a temporary ".NAME.tmp.XXXXXX" in the target's directory
 * (rename is atomic only within one file system); commit fsyncs it, renames
 * it over the target and fsyncs the directory so the rename itself is
 * durable. Any failure removes the temporary file and leaves an existing
 * target untouched. The new file gets mode 0666 & ~umask, like fopen's, or
 * the permission bits of this account's regular file it replaces (not
 * through a link, no set-id bits).
 */
#ifndef CDL_CKPT_ATOMIC_H
#define CDL_CKPT_ATOMIC_H

#include <stddef.h>

typedef struct afile {
    int fd;
    int dirfd;          /* the target's directory, checked once: every later
                         * step (create, rename, fsync) is relative to it */
    const char *path;   /* the target (not copied: must outlive the afile) */
    char *tmp;          /* cdl_malloc'd temporary path */
    char *dir;          /* cdl_malloc'd directory of path */
} afile;

/* afile_open refuses a directory every account may write to without the
 * sticky bit (mode 0777): any of them could rename the temporary file
 * away and put another in its place between its writing and its rename,
 * or replace the target at any time. */

int afile_open(afile *a, const char *path);
/* The same check for other writers that rename files into a directory
 * (--keep-last's numbered checkpoints, cdl-plot's charts): opens dir, where
 * the file path (named in errors) goes, and returns its descriptor, to
 * which every later create, rename and removal must be relative; -1 (with
 * cdl_error) when it cannot be opened or every account may write to it
 * without the sticky bit. */
int afile_dir_open(const char *dir, const char *path);
/* afile_open in the directory dirfd that afile_dir_open returned for
 * path's directory (duplicated: the caller still owns and closes dirfd),
 * so that a writer of several files checks their directory once and
 * creates, renames and removes each relative to it. */
int afile_openat(afile *a, int dirfd, const char *path);
/* Writes all n bytes (retrying short writes and EINTR); on failure the
 * caller must still call afile_abort. */
int afile_write(afile *a, const void *buf, size_t n);
/* fsync, rename, fsync of the directory; cleans up in every case. */
int afile_commit(afile *a);
/* Closes and removes the temporary file. */
void afile_abort(afile *a);

#endif
