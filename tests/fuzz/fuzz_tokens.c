/* libFuzzer target: token data (text and nanoGPT's uint16 .bin). The first
 * input byte picks the token width, the block size and the validation
 * split; the rest is the file. Both splits are read and windows copied out
 * at drawn and at fixed starts, as the loader does (a window holding an id
 * past the vocabulary must be refused). The input is also read as the
 * itos table cdl-train writes into checkpoints from meta.pkl, which
 * cdl-generate parses and encodes its prompt with (cli/vocab.c). The whole input is
 * also read as nanoGPT's meta.pkl (its vocab_size). */
#include <stdlib.h>
#include <string.h>

#include <cdl/cdl.h>

#include "cli/vocab.h"
#include "lib/data/internal.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    long vocab = 0;
    char **itos = NULL;
    if (tokens_meta_vocab(data, size, "meta.pkl", &vocab, &itos) == 1)
        tokens_itos_free(itos, vocab);
    if (size < 1)
        return 0;
    /* The itos metadata: vocab from the first byte, then the text; the
     * prompt is the text too. */
    char *meta = malloc(size);
    if (!meta)
        return 0;
    memcpy(meta, data + 1, size - 1);
    meta[size - 1] = '\0';
    char **table;
    int *ids, n, nv = 1 + data[0] % 64;
    if (vocab_parse(meta, nv, &table) == 0) {
        if (vocab_encode(meta, table, nv, &ids, &n) == 0) {
            for (int i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= nv)
                    abort();
            cdl_free(ids);
        }
        cdl_free(table);
    }
    free(meta);
    int bytes = data[0] & 1 ? 2 : 1;
    cdl_dataset_options o;   /* as cdl_dataset_options_defaults (dataset.c) leaves it */
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.block_size = 1 + (data[0] >> 1 & 15);
    o.vocab_size = bytes == 2 ? 1 + (data[0] >> 5) * 9000 : 0;
    o.val_split = data[0] & 0x80 ? 0 : 0.5;
    float x[16];
    int32_t y[16];
    for (int train = 0; train < 2; train++) {
        cdl_dataset d;
        memset(&d, 0, sizeof d);
        if (tokens_read_mem(data + 1, size - 1, "fuzz.bin", bytes, &o, train, 0, &d) != 0)
            continue;
        for (long i = 0; i < d.n && i < 64; i++) {
            size_t at[2] = {tokens_window_start(&d, 1, 7, (int)i, i),
                            tokens_window_start(&d, 0, 0, 0, d.n - 1 - i)};
            for (int k = 0; k < 2; k++) {
                if (tokens_window(&d, at[k], x, y) != 0)
                    continue;   /* a bad id: refused, with the error */
                for (int j = 0; j < d.label_len; j++)
                    if (y[j] >= d.classes || x[j] >= (float)d.classes)
                        abort();   /* a window handed out a bad id */
            }
        }
        tokens_unmap(&d);
    }
    return 0;
}
