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

/* PyTorch's BasicBlock (torchvision.models.resnet), with and without the
 * projection shortcut; SC names the shortcut module (torchvision's
 * "downsample", the CIFAR ResNets' "shortcut"). */
static const char resnet_blocks[] =
    "block basic PLANES\n"
    "conv2d $PLANES kernel=3 padding=1 bias=false\n"
    "batchnorm2d\n"
    "relu\n"
    "conv2d $PLANES kernel=3 padding=1 bias=false\n"
    "batchnorm2d\n"
    "add input\n"
    "relu\n"
    "end\n"
    "block down PLANES SC STRIDE=2\n"
    "conv2d $PLANES kernel=3 stride=$STRIDE padding=1 bias=false\n"
    "batchnorm2d\n"
    "relu\n"
    "conv2d $PLANES kernel=3 padding=1 bias=false\n"
    "batchnorm2d\n"
    "conv2d $PLANES kernel=1 stride=$STRIDE bias=false from=input name=$SC.0\n"
    "batchnorm2d name=$SC.1\n"
    "add bn2\n"
    "relu\n"
    "end\n"
    "conv2d %d kernel=3 padding=1 bias=false\n"   /* conv1, bn1: the 3x3 stem */
    "batchnorm2d\n"
    "relu\n";

/* He et al. 2016's CIFAR ResNet-20: 3 stages of 3 basic blocks, 16/32/64
 * channels, projection shortcuts (option B) where the shape changes, with
 * the names of the widely used PyTorch CIFAR ResNets (layerK.J.convI,
 * shortcut.0/1, linear). */
static const char resnet20_fmt[] =
    "use basic 16 name=layer1.0\n"
    "use basic 16 name=layer1.1\n"
    "use basic 16 name=layer1.2\n"
    "use down 32 shortcut name=layer2.0\n"
    "use basic 32 name=layer2.1\n"
    "use basic 32 name=layer2.2\n"
    "use down 64 shortcut name=layer3.0\n"
    "use basic 64 name=layer3.1\n"
    "use basic 64 name=layer3.2\n"
    "globalavgpool\n"
    "flatten\n"
    "linear %d name=linear\n";

/* torchvision's resnet18 with the CIFAR stem (3x3 conv1, no max-pool):
 * the parameter names are torchvision's. */
static const char resnet18_fmt[] =
    "use basic 64 name=layer1.0\n"
    "use basic 64 name=layer1.1\n"
    "use down 128 downsample name=layer2.0\n"
    "use basic 128 name=layer2.1\n"
    "use down 256 downsample name=layer3.0\n"
    "use basic 256 name=layer3.1\n"
    "use down 512 downsample name=layer4.0\n"
    "use basic 512 name=layer4.1\n"
    "globalavgpool\n"
    "flatten\n"
    "linear %d name=fc\n";

int cdl_spec_is_builtin(const char *name)
{
    static const char *const names[] = {"lenet", "mlp", "resnet20", "resnet18"};
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i]))
            return 1;
    return 0;
}

int cdl_spec_builtin(const char *name, cdl_shape input, int classes, cdl_model_spec *out)
{
    char text[4096];
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
    else if (!strcmp(name, "resnet20") || !strcmp(name, "resnet18")) {
        int r20 = !strcmp(name, "resnet20");
        int n = snprintf(text, sizeof text, resnet_blocks, r20 ? 16 : 64);
        snprintf(text + n, sizeof text - (size_t)n, r20 ? resnet20_fmt : resnet18_fmt, classes);
    } else
        return cdl_error("unknown built-in model '%s': use lenet, mlp, resnet20, resnet18 or the "
                         "path of a spec file", name);

    cdl_model_spec spec;
    if (cdl_spec_parse(text, name, &spec))
        return -1;
    for (int i = 0; i < spec.nlayers; i++)
        spec.layers[i].line = spec.layers[i].use_line = 0;   /* built-in: errors name the layer */
    spec.input = input;
    *out = spec;
    return 0;
}
