# lib/data: idx / CIFAR readers, synthetic data, the threaded loader.
libcdl_base_la_SOURCES += lib/data/dataset.c lib/data/idx.c lib/data/cifar.c \
	lib/data/sampler.c lib/data/augment.c lib/data/loader.c
libcdl_base_la_SOURCES += lib/data/internal.h lib/data/open.c
libcdl_base_la_SOURCES += lib/data/fileio.c lib/data/image.c lib/data/imagefolder.c
libcdl_base_la_SOURCES += lib/data/npy.c lib/data/csv.c
libcdl_base_la_SOURCES += lib/data/split.c
libcdl_base_la_SOURCES += lib/data/tokens.c
libcdl_base_la_SOURCES += lib/data/stream.c lib/data/decodegate.c
libcdl_base_la_SOURCES += lib/data/meta_pkl.c
libcdl_base_la_SOURCES += lib/data/fingerprint.c
