/* Checkpoints as safetensors files.
 *
 * Model tensors carry PyTorch's names and layouts, so in Python
 *   sd = safetensors.torch.load_file(path)
 *   model.load_state_dict({k: v for k, v in sd.items()
 *                          if not k.startswith("optimizer.")}, strict=True)
 * loads them into the equivalent torch.nn model. Training checkpoints add
 * the optimizer's state as tensors named optimizer.<state>.<parameter>
 * (docs/checkpoints.md); the rest of what resuming needs (position in the
 * run, the run's configuration) is small text in __metadata__.
 *
 * Every file written carries CRC-32s of its data and of its header in
 * __metadata__ ("cdl_checksum"), verified on every read.
 *
 * Writes are atomic: a temporary file in the same directory, fsync, rename,
 * fsync of the directory. Readers validate everything and reject a corrupt or
 * mismatched file with an error naming it; nothing starts from scratch
 * silently.
 */
#ifndef CDL_CKPT_H
#define CDL_CKPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest header we write or accept (the safetensors reference limit). */
#define CDL_ST_MAX_HEADER 100000000u

/* One tensor to write (host memory): float32 from data ("F32"), or, when
 * i64 is not NULL, int64 from i64 ("I64", data unused: PyTorch's integer
 * buffers such as BatchNorm's num_batches_tracked). */
typedef struct cdl_st_tensor {
    const char *name;
    const float *data;
    int ndim;
    int64_t shape[4];
    const int64_t *i64;
} cdl_st_tensor;

/* One __metadata__ entry (both strings). */
typedef struct cdl_st_meta {
    const char *key;
    const char *value;
} cdl_st_meta;

/* Writes path atomically. Tensors are stored in the order given, offsets
 * contiguous from 0, little-endian ("F32", or "I64"). */
int cdl_st_write(const char *path, const cdl_st_tensor *tensors, int ntensors,
                 const cdl_st_meta *meta, int nmeta);

/* A validated safetensors file held in memory. */
typedef struct cdl_st_file cdl_st_file;

/* Reads and validates: header length, JSON syntax, dtypes, shapes against
 * data_offsets, offsets contiguous and covering the data exactly, file
 * length. Errors name the file and the defect. */
cdl_st_file *cdl_st_open(const char *path);
void cdl_st_close(cdl_st_file *f);

int cdl_st_count(const cdl_st_file *f);
const char *cdl_st_name(const cdl_st_file *f, int i);
/* Looks a tensor up by name: its index, or -1. */
int cdl_st_find(const cdl_st_file *f, const char *name);
/* Shape and data (host, little-endian float32 converted to native; only F32
 * tensors are returned, others are an error). */
int cdl_st_shape(const cdl_st_file *f, int i, int *ndim, int64_t shape[8]);
const float *cdl_st_data(const cdl_st_file *f, int i, size_t *numel);
/* The same for an I64 tensor (little-endian int64 converted to native);
 * other dtypes are an error. */
const int64_t *cdl_st_data_i64(const cdl_st_file *f, int i, size_t *numel);
/* Tensor i as float32 into out (numel values, its element count): F32 as
 * it is, F16 and BF16 widened (exactly), F64 rounded to nearest, as
 * PyTorch's load_state_dict copies a half or double tensor into a float
 * model. Other dtypes, another count, or a double beyond float32's range
 * are an error naming the tensor. */
int cdl_st_data_float(const cdl_st_file *f, int i, float *out, size_t numel);
/* The tensor's safetensors dtype ("F32", "I64", "BF16", ...), or NULL. */
const char *cdl_st_dtype(const cdl_st_file *f, int i);
/* A __metadata__ value, or NULL. */
const char *cdl_st_meta_get(const cdl_st_file *f, const char *key);
int cdl_st_meta_count(const cdl_st_file *f);
const char *cdl_st_meta_key(const cdl_st_file *f, int i);
const char *cdl_st_path(const cdl_st_file *f);
/* 1 if the file carried cdl's checksums of its data and header (metadata
 * "cdl_checksum", written by cdl_st_write) and cdl_st_open verified them;
 * 0 for a file without them (other writers, older cdl), which loads as it
 * is. A mismatch is an error of cdl_st_open. */
int cdl_st_checksummed(const cdl_st_file *f);

/* Base64 of raw bytes (for binary state in __metadata__); returns a
 * cdl_malloc'd NUL-terminated string or NULL. */
char *cdl_base64_encode(const void *data, size_t bytes);
/* Decodes exactly `bytes` bytes into out; -1 if the text is not valid base64
 * of that length. */
int cdl_base64_decode(const char *text, void *out, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
