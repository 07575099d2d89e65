/* libFuzzer target: a model spec file through the parser, then shape
 * inference on its own input line (or 1x28x28 without one), as cdl-train
 * does before building the model. The same bytes (up to the first NUL, at
 * most 255) are also a --model value: a built-in's name with its options
 * ("gpt:n_layer=...", "resnet50:stem=...") is parsed and its text read by
 * the same parser. */
#include <string.h>

#include <cdl/cdl.h>

#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cdl_model_spec spec;   /* large: not on the stack */
    static cdl_shape shapes[CDL_MAX_LAYERS + 1];
    char name[256];
    size_t n = size < sizeof name - 1 ? size : sizeof name - 1;
    memcpy(name, data, n);
    name[n] = '\0';
    if (cdl_spec_is_builtin(name)) {
        const cdl_shape in = {3, 32, 32}, tokens = {64, 1, 1};
        if (cdl_spec_builtin(name, in, 10, &spec) == 0)
            cdl_spec_infer(&spec, in, shapes);
        if (cdl_spec_builtin(name, tokens, 256, &spec) == 0)
            cdl_spec_infer(&spec, tokens, shapes);
    }
    if (cdl_spec_load(fuzz_write("model.spec", data, size), &spec) != 0)
        return 0;
    cdl_shape in = spec.input.c ? spec.input : (cdl_shape){ 1, 28, 28 };
    cdl_spec_infer(&spec, in, shapes);
    return 0;
}
