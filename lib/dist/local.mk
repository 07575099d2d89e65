# lib/dist: rank discovery, bootstrap (PMIx, TCP store), collectives.
libcdl_base_la_SOURCES += lib/dist/contract.c lib/dist/contract.h lib/dist/discover.c lib/dist/util.c lib/dist/config.c lib/dist/boot.c \
	lib/dist/pmix_boot.c lib/dist/store.c lib/dist/store_server.c lib/dist/store_io.c lib/dist/hmac.c lib/dist/hmac.h \
	lib/dist/port_owner.c lib/dist/port_owner.h lib/dist/watchdog.c lib/dist/watchdog.h \
	lib/dist/dist.c lib/dist/reduce.c lib/dist/coll_single.c lib/dist/coll_shm.c lib/dist/oversub.c lib/dist/oversub.h \
	lib/dist/coll_mpi.c lib/dist/coll_hier.c lib/dist/coll_store.c lib/dist/coll_none.c \
	lib/dist/util.h lib/dist/boot.h lib/dist/store.h lib/dist/store_proto.h \
	lib/dist/coll.h lib/dist/reduce.h lib/dist/gpu_group.c lib/dist/gpu_group.h lib/dist/rank_gpu.c \
	lib/dist/dist_gpu.h lib/dist/announce.h
# lib/dist/coll_nccl.c belongs to the CUDA module (kernels/cuda/local.mk).
