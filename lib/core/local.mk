libcdl_core_la_SOURCES += lib/core/error.c lib/core/alloc.c lib/core/threads.c lib/core/threads.h lib/core/backend.c lib/core/backends.h \
	lib/core/sized.c lib/core/sized.h lib/core/memlimit.c lib/core/memlimit.h
