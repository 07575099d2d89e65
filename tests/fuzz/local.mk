# libFuzzer targets, one per reader of untrusted input, built and run by
# `make fuzz` (clang only: configure checks that -fsanitize=fuzzer links).
# Each target compiles the sources it tests itself, instrumented for coverage
# and with ASan+UBSan; libcdl_core stays as configured. Seed inputs live in
# tests/fuzz/corpus/<target>/; new inputs found during a run go to a
# temporary directory, crashes to tests/fuzz/<target>-crash-* in the build.
FUZZ_TARGETS = tests/fuzz/fuzz_safetensors tests/fuzz/fuzz_st_header tests/fuzz/fuzz_spec \
	tests/fuzz/fuzz_idx tests/fuzz/fuzz_cifar tests/fuzz/fuzz_plugstack \
	tests/fuzz/fuzz_discover tests/fuzz/fuzz_store
FUZZ_TARGETS += tests/fuzz/fuzz_image tests/fuzz/fuzz_npy tests/fuzz/fuzz_npz tests/fuzz/fuzz_csv
EXTRA_PROGRAMS += $(FUZZ_TARGETS)
CLEANFILES += $(FUZZ_TARGETS) tests/fuzz/*.log tests/fuzz/*-crash-* tests/fuzz/*-leak-* \
	tests/fuzz/*-timeout-* tests/fuzz/*-oom-*
FUZZ_CFLAGS_ALL = $(AM_CFLAGS) $(FUZZ_CFLAGS)
FUZZ_CPPFLAGS_ALL = $(AM_CPPFLAGS) $(ZLIB_CFLAGS)
FUZZ_LDADD_ALL = $(ZLIB_LIBS) -lm
FUZZ_COMMON = tests/fuzz/fuzz.h tests/fuzz/fuzz_util.c lib/core/error.c lib/core/alloc.c \
	lib/core/memlimit.c

tests_fuzz_fuzz_safetensors_SOURCES = tests/fuzz/fuzz_safetensors.c $(FUZZ_COMMON) \
	lib/ckpt/safetensors_read.c lib/ckpt/json.c lib/ckpt/checksum.c
tests_fuzz_fuzz_st_header_SOURCES = tests/fuzz/fuzz_st_header.c tests/fuzz/fuzz_st.h $(FUZZ_COMMON) \
	lib/ckpt/safetensors_read.c lib/ckpt/json.c lib/ckpt/checksum.c
tests_fuzz_fuzz_spec_SOURCES = tests/fuzz/fuzz_spec.c $(FUZZ_COMMON) \
	lib/model/spec.c lib/model/layer.c lib/model/infer.c lib/model/builtin.c \
	lib/model/builtin_resnet.c
tests_fuzz_fuzz_idx_SOURCES = tests/fuzz/fuzz_idx.c $(FUZZ_COMMON) lib/data/idx.c lib/data/open.c
tests_fuzz_fuzz_cifar_SOURCES = tests/fuzz/fuzz_cifar.c $(FUZZ_COMMON) lib/data/cifar.c lib/data/open.c
# The plugin's parsers (root side), rank discovery, the store's server.
tests_fuzz_fuzz_plugstack_SOURCES = tests/fuzz/fuzz_plugstack.c $(FUZZ_COMMON) spank/util.c \
	spank/config.c spank/options.c spank/packing.c spank/port.c spank/torchrun.c spank/shmsweep.c \
	lib/dist/contract.c
tests_fuzz_fuzz_discover_SOURCES = tests/fuzz/fuzz_discover.c $(FUZZ_COMMON) \
	lib/dist/discover.c lib/dist/contract.c lib/core/log.c
tests_fuzz_fuzz_store_SOURCES = tests/fuzz/fuzz_store.c $(FUZZ_COMMON) lib/dist/store_server.c \
	lib/dist/store_io.c lib/dist/hmac.c lib/dist/util.c lib/dist/port_owner.c lib/core/log.c
tests_fuzz_fuzz_plugstack_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_discover_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_store_CFLAGS = $(FUZZ_CFLAGS_ALL) -pthread
tests_fuzz_fuzz_plugstack_CPPFLAGS = $(FUZZ_CPPFLAGS_ALL)
tests_fuzz_fuzz_discover_CPPFLAGS = $(FUZZ_CPPFLAGS_ALL)
tests_fuzz_fuzz_store_CPPFLAGS = $(FUZZ_CPPFLAGS_ALL)
tests_fuzz_fuzz_plugstack_LDADD = $(FUZZ_LDADD_ALL)
tests_fuzz_fuzz_discover_LDADD = $(FUZZ_LDADD_ALL)
tests_fuzz_fuzz_store_LDADD = $(FUZZ_LDADD_ALL) -lpthread
tests_fuzz_fuzz_safetensors_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_st_header_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_spec_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_idx_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_cifar_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_safetensors_CPPFLAGS = $(FUZZ_CPPFLAGS_ALL)
tests_fuzz_fuzz_st_header_CPPFLAGS = $(FUZZ_CPPFLAGS_ALL)
tests_fuzz_fuzz_spec_CPPFLAGS = $(FUZZ_CPPFLAGS_ALL)
tests_fuzz_fuzz_idx_CPPFLAGS = $(FUZZ_CPPFLAGS_ALL)
tests_fuzz_fuzz_cifar_CPPFLAGS = $(FUZZ_CPPFLAGS_ALL)
tests_fuzz_fuzz_safetensors_LDADD = $(FUZZ_LDADD_ALL)
tests_fuzz_fuzz_st_header_LDADD = $(FUZZ_LDADD_ALL)
tests_fuzz_fuzz_spec_LDADD = $(FUZZ_LDADD_ALL)
tests_fuzz_fuzz_idx_LDADD = $(FUZZ_LDADD_ALL)
tests_fuzz_fuzz_cifar_LDADD = $(FUZZ_LDADD_ALL)

# The readers of users' data (lib/data): pictures, .npy, .npz, CSV.
FUZZ_READERS = lib/data/dataset.c lib/data/idx.c lib/data/cifar.c lib/data/open.c lib/data/fileio.c \
	lib/data/image.c lib/data/imagefolder.c lib/data/npy.c lib/data/csv.c lib/data/tokens.c lib/data/meta_pkl.c lib/data/stream.c lib/data/decodegate.c lib/core/forked.c lib/core/sized.c \
	lib/ckpt/json.c \
	lib/core/threads.c lib/core/cpuquota.c
FUZZ_RD_CPPFLAGS = $(FUZZ_CPPFLAGS_ALL) $(PNG_CFLAGS) $(JPEG_CFLAGS) $(LIBZIP_CFLAGS)
FUZZ_RD_LDADD = $(FUZZ_LDADD_ALL) $(PNG_LIBS) $(JPEG_LIBS) $(LIBZIP_LIBS) -lpthread
tests_fuzz_fuzz_image_SOURCES = tests/fuzz/fuzz_image.c $(FUZZ_COMMON) $(FUZZ_READERS)
tests_fuzz_fuzz_npy_SOURCES = tests/fuzz/fuzz_npy.c $(FUZZ_COMMON) $(FUZZ_READERS)
tests_fuzz_fuzz_npz_SOURCES = tests/fuzz/fuzz_npz.c $(FUZZ_COMMON) $(FUZZ_READERS)
tests_fuzz_fuzz_csv_SOURCES = tests/fuzz/fuzz_csv.c $(FUZZ_COMMON) $(FUZZ_READERS)
tests_fuzz_fuzz_image_CFLAGS = $(FUZZ_CFLAGS_ALL) -pthread
tests_fuzz_fuzz_npy_CFLAGS = $(FUZZ_CFLAGS_ALL) -pthread
tests_fuzz_fuzz_npz_CFLAGS = $(FUZZ_CFLAGS_ALL) -pthread
tests_fuzz_fuzz_csv_CFLAGS = $(FUZZ_CFLAGS_ALL) -pthread
tests_fuzz_fuzz_image_CPPFLAGS = $(FUZZ_RD_CPPFLAGS)
tests_fuzz_fuzz_npy_CPPFLAGS = $(FUZZ_RD_CPPFLAGS)
tests_fuzz_fuzz_npz_CPPFLAGS = $(FUZZ_RD_CPPFLAGS)
tests_fuzz_fuzz_csv_CPPFLAGS = $(FUZZ_RD_CPPFLAGS)
tests_fuzz_fuzz_image_LDADD = $(FUZZ_RD_LDADD)
tests_fuzz_fuzz_npy_LDADD = $(FUZZ_RD_LDADD)
tests_fuzz_fuzz_npz_LDADD = $(FUZZ_RD_LDADD)
tests_fuzz_fuzz_csv_LDADD = $(FUZZ_RD_LDADD)

EXTRA_DIST += tests/fuzz/run.sh tests/fuzz/corpus

# Seconds of fuzzing per target; `make fuzz FUZZ_SECONDS=600` for a long run.
FUZZ_SECONDS = 5
if HAVE_FUZZER
fuzz: $(FUZZ_TARGETS)
	$(SHELL) $(srcdir)/tests/fuzz/run.sh $(srcdir)/tests/fuzz/corpus $(FUZZ_SECONDS) $(FUZZ_TARGETS)
else
fuzz:
	@echo "make fuzz: $(CC) cannot build libFuzzer targets (-fsanitize=fuzzer)." >&2; \
	 echo "  Configure with CC=clang (Debian: apt-get install clang libclang-rt-14-dev)." >&2; \
	 exit 1
endif
.PHONY: fuzz
# The metrics readers (libc only).
FUZZ_TARGETS += tests/fuzz/fuzz_metrics
tests_fuzz_fuzz_metrics_SOURCES = tests/fuzz/fuzz_metrics.c $(FUZZ_COMMON) cli/plot_read.c \
	cli/plot_read.h lib/train/metrics_read.c lib/train/owned.c lib/dist/port_owner.c
tests_fuzz_fuzz_metrics_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_metrics_CPPFLAGS = $(FUZZ_CPPFLAGS_ALL)
tests_fuzz_fuzz_metrics_LDADD = $(FUZZ_LDADD_ALL)
# Token data for language models (text, uint16 .bin, nanoGPT's meta.pkl).
FUZZ_TARGETS += tests/fuzz/fuzz_tokens
tests_fuzz_fuzz_tokens_SOURCES = tests/fuzz/fuzz_tokens.c $(FUZZ_COMMON) lib/data/tokens.c \
	lib/data/meta_pkl.c lib/ckpt/json.c cli/vocab.c cli/vocab.h \
	lib/data/open.c lib/data/fileio.c
tests_fuzz_fuzz_tokens_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_tokens_CPPFLAGS = $(FUZZ_CPPFLAGS_ALL)
tests_fuzz_fuzz_tokens_LDADD = $(FUZZ_LDADD_ALL)
# What a resume compares of a checkpoint's metadata (lib/train/resume_check.c).
FUZZ_TARGETS += tests/fuzz/fuzz_resume
tests_fuzz_fuzz_resume_SOURCES = tests/fuzz/fuzz_resume.c tests/fuzz/fuzz_st.h $(FUZZ_COMMON) \
	lib/train/resume_check.c lib/train/config.c lib/ckpt/safetensors_read.c lib/ckpt/json.c \
	lib/ckpt/checksum.c lib/core/sized.c
tests_fuzz_fuzz_resume_CFLAGS = $(FUZZ_CFLAGS_ALL)
tests_fuzz_fuzz_resume_CPPFLAGS = $(FUZZ_CPPFLAGS_ALL)
tests_fuzz_fuzz_resume_LDADD = $(FUZZ_LDADD_ALL)
