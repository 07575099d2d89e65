libcdl_base_la_SOURCES += lib/core/error.c lib/core/alloc.c lib/core/threads.c lib/core/threads.h lib/core/backend.c lib/core/backends.h \
	lib/core/sized.c lib/core/sized.h lib/core/memlimit.c lib/core/memlimit.h lib/core/cpuquota.c lib/core/cpuquota.h \
	lib/core/forked.c lib/core/forked.h lib/core/log.c lib/core/log.h
# cdl_build_id(), generated: git describe of the source
# ("v0.1.0-72-g755e68e-dirty"; empty outside a git checkout, as from a
# release tarball, even one unpacked inside another checkout: only a
# top_srcdir that is a checkout's top is asked). Looked at on every make, rewritten only when it
# changes, so that an edit after configure shows as -dirty and an
# unchanged tree recompiles nothing. Where git cannot answer but could
# before (`sudo make install`: git refuses a tree of another owner), the
# id stays as built. A source of its own, not a header of error.c: the
# fuzz targets compile error.c without the library's generated files.
nodist_libcdl_base_la_SOURCES = cdl_build_id.c
BUILT_SOURCES = cdl_build_id.c
CLEANFILES += cdl_build_id.c
cdl_build_id.c: cdl-build-id-force
	$(AM_V_GEN)if test -e "$(top_srcdir)/.git" && \
	    id=`git -C "$(top_srcdir)" describe --always --dirty --tags 2>/dev/null`; then \
	    :; elif test -f $@; then exit 0; else id=; fi; \
	id=`printf '%s' "$$id" | LC_ALL=C tr -cd 'A-Za-z0-9._+-'`; \
	{ echo '/* Written by make (lib/core/local.mk): which build this libcdl is. */'; \
	  echo '#include <cdl/cdl.h>'; \
	  printf 'const char *cdl_build_id(void) { return "%s"; }\n' "$$id"; } >$@.tmp && \
	if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv -f $@.tmp $@; fi
cdl-build-id-force:
.PHONY: cdl-build-id-force
