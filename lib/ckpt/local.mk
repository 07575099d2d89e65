# lib/ckpt: safetensors checkpoints (reader, writer, atomic files, base64).
libcdl_base_la_SOURCES += lib/ckpt/json.h lib/ckpt/json.c lib/ckpt/atomic.h lib/ckpt/atomic.c \
	lib/ckpt/safetensors_write.c lib/ckpt/safetensors_read.c lib/ckpt/base64.c \
	lib/ckpt/checksum.h lib/ckpt/checksum.c
