/* Built-in models, written as spec text and read by the same parser as spec
 * files, so a built-in and the equivalent file give identical models. */
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "model_internal.h"

/* LeNet-5 as in the classic PyTorch module (conv1, conv2, fc1, fc2, fc3).
 * conv1 is padded by 2 for 28x28 inputs so that fc1 sees 16x5x5 = 400
 * features both for 1x28x28 (MNIST) and 3x32x32 (CIFAR) images. */
static const char lenet_fmt[] =
    "conv2d 6 kernel=5 padding=%d\n"
    "relu\n"
    "maxpool2d 2\n"
    "conv2d 16 kernel=5\n"
    "relu\n"
    "maxpool2d 2\n"
    "flatten\n"
    "linear 120\n"
    "relu\n"
    "linear 84\n"
    "relu\n"
    "linear %d\n";

static const char mlp_fmt[] =
    "flatten\n"
    "linear 256\n"
    "relu\n"
    "linear 128\n"
    "relu\n"
    "linear %d\n";

int cdl_spec_builtin(const char *name, cdl_shape input, int classes, cdl_model_spec *out)
{
    char text[512];
    if (!name)
        name = "(null)";
    if (input.c < 1 || input.h < 1 || input.w < 1 || input.c > SPEC_MAX_DIM ||
        input.h > SPEC_MAX_DIM || input.w > SPEC_MAX_DIM)
        return cdl_error("model %s: invalid input shape %dx%dx%d: every size must be from 1 to %d",
                         name, input.c, input.h, input.w, SPEC_MAX_DIM);
    if (classes < 1 || classes > SPEC_MAX_FEATURES)
        return cdl_error("model %s: invalid number of classes %d: use 1 to %d", name, classes,
                         SPEC_MAX_FEATURES);
    if (!strcmp(name, "lenet"))
        snprintf(text, sizeof text, lenet_fmt, input.h == 28 && input.w == 28 ? 2 : 0, classes);
    else if (!strcmp(name, "mlp"))
        snprintf(text, sizeof text, mlp_fmt, classes);
    else
        return cdl_error("unknown built-in model '%s': use lenet, mlp or the path of a spec file",
                         name);

    cdl_model_spec spec;
    if (cdl_spec_parse(text, name, &spec))
        return -1;
    for (int i = 0; i < spec.nlayers; i++)
        spec.layers[i].line = 0;   /* built-in: errors name the layer, not a line */
    spec.input = input;
    *out = spec;
    return 0;
}
