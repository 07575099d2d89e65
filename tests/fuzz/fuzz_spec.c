/* libFuzzer target: a model spec file through the parser, then shape
 * inference on its own input line (or 1x28x28 without one), as cdl-train
 * does before building the model. */
#include <cdl/cdl.h>

#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static cdl_model_spec spec;   /* large: not on the stack */
    if (cdl_spec_load(fuzz_write("model.spec", data, size), &spec) != 0)
        return 0;
    cdl_shape shapes[CDL_MAX_LAYERS + 1];
    cdl_shape in = spec.input.c ? spec.input : (cdl_shape){ 1, 28, 28 };
    cdl_spec_infer(&spec, in, shapes);
    return 0;
}
