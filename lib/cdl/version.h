/* The version of the libcdl headers a program is compiled against:
 * compare CDL_VERSION_NUMBER with CDL_VERSION_ENCODE(0, 2, 0) in #if to
 * use a newer API only where it exists. cdl_version() gives the library's
 * own at run time. configure reads the version from this file (the one
 * place it is written). */
#ifndef CDL_VERSION_H
#define CDL_VERSION_H

#define CDL_VERSION_MAJOR 0
#define CDL_VERSION_MINOR 2
#define CDL_VERSION_PATCH 0
#define CDL_VERSION_STRING "0.2.0"

/* Versions as one number, ordered as the versions are (minor and patch
 * below 100). */
#define CDL_VERSION_ENCODE(major, minor, patch) ((major) * 10000 + (minor) * 100 + (patch))
#define CDL_VERSION_NUMBER \
    CDL_VERSION_ENCODE(CDL_VERSION_MAJOR, CDL_VERSION_MINOR, CDL_VERSION_PATCH)

#endif
