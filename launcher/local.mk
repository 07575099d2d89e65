# launcher: cdlrun, the local multi-rank launcher.
bin_PROGRAMS += launcher/cdlrun
launcher_cdlrun_SOURCES = launcher/cdlrun.c launcher/spawn.c launcher/supervise.c launcher/shm_sweep.c \
	launcher/bind.c launcher/launch.h lib/dist/contract.c lib/dist/contract.h \
	lib/core/cpuquota.c lib/core/cpuquota.h lib/core/memlimit.c lib/core/memlimit.h \
	cli/suggest.c cli/suggest.h
launcher_cdlrun_CPPFLAGS = $(AM_CPPFLAGS) $(HWLOC_CFLAGS)
launcher_cdlrun_LDADD = $(HWLOC_LIBS)
if HAVE_HWLOC
launcher_cdlrun_SOURCES += lib/dist/bind.c lib/dist/bind.h
endif
# cdlrun links no libcdl and no NVIDIA library: not AM_LDFLAGS' CUDA run path.
launcher_cdlrun_LDFLAGS =
