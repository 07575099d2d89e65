/* The ResNets among the built-in models, as spec text for the parser:
 * He et al.'s CIFAR ResNet-20, and torchvision's resnet18, resnet34,
 * resnet50 and resnet101 with torchvision's parameter names, so that a
 * cdl checkpoint loads strictly into torchvision.models.resnetNN and
 * torchvision's weights (saved as safetensors) start a cdl run (--init).
 *
 * torchvision's models have the ImageNet stem (7x7 stride-2 conv1, then a
 * 3x3 stride-2 max-pool: a 224x224 picture is 56x56 at layer1); on 32x32
 * pictures that leaves 1x1 maps at layer4, so CIFAR-sized inputs take the
 * CIFAR stem instead (3x3 stride-1 conv1, no max-pool: He et al.'s and
 * the usual CIFAR variant's). "resnetNN:stem=cifar|imagenet" chooses; the
 * default, auto, takes the ImageNet stem for pictures more than
 * RESNET_CIFAR_MAX_SIDE pixels on their shorter side. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cdl/cdl.h>

#include "model_internal.h"

#define RESNET_CIFAR_MAX_SIDE 64

/* PyTorch's BasicBlock, with and without a projection shortcut; SC names
 * the shortcut module (torchvision's "downsample", the CIFAR ResNets'
 * "shortcut"). */
static const char basic_blocks[] =
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
    "end\n";

/* torchvision's Bottleneck (ResNet v1.5: the stride is on the 3x3 conv2),
 * WIDTH channels inside, OUT = 4 WIDTH out; with a projection shortcut
 * (downsample) where the first block of a stage changes the shape. */
static const char bottleneck_blocks[] =
    "block bottleneck WIDTH OUT\n"
    "conv2d $WIDTH kernel=1 bias=false\n"
    "batchnorm2d\n"
    "relu\n"
    "conv2d $WIDTH kernel=3 padding=1 bias=false\n"
    "batchnorm2d\n"
    "relu\n"
    "conv2d $OUT kernel=1 bias=false\n"
    "batchnorm2d\n"
    "add input\n"
    "relu\n"
    "end\n"
    "block bottleneck_down WIDTH OUT STRIDE\n"
    "conv2d $WIDTH kernel=1 bias=false\n"
    "batchnorm2d\n"
    "relu\n"
    "conv2d $WIDTH kernel=3 stride=$STRIDE padding=1 bias=false\n"
    "batchnorm2d\n"
    "relu\n"
    "conv2d $OUT kernel=1 bias=false\n"
    "batchnorm2d\n"
    "conv2d $OUT kernel=1 stride=$STRIDE bias=false from=input name=downsample.0\n"
    "batchnorm2d name=downsample.1\n"
    "add bn3\n"
    "relu\n"
    "end\n";

/* The stems: conv1, bn1 (and torchvision's maxpool, which has no
 * parameters). The CIFAR one takes the first stage's width. */
static const char stem_cifar[] =
    "conv2d %d kernel=3 padding=1 bias=false\n"
    "batchnorm2d\n"
    "relu\n";
static const char stem_imagenet[] =
    "conv2d 64 kernel=7 stride=2 padding=3 bias=false\n"
    "batchnorm2d\n"
    "relu\n"
    "maxpool2d 3 stride=2 padding=1\n";

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

/* torchvision's ResNets: blocks per stage (64, 128, 256, 512 planes). */
typedef struct tv_resnet {
    const char *name;
    int blocks[4];
    int bottleneck;
} tv_resnet;

static const tv_resnet tv_resnets[] = {
    {"resnet18", {2, 2, 2, 2}, 0},
    {"resnet34", {3, 4, 6, 3}, 0},
    {"resnet50", {3, 4, 6, 3}, 1},
    {"resnet101", {3, 4, 23, 3}, 1},
};

/* The torchvision ResNet that name ("resnetNN" or "resnetNN:KEY=VALUE...")
 * names, or NULL; *opts: what follows the colon ("" without one). */
static const tv_resnet *tv_lookup(const char *name, const char **opts)
{
    for (size_t i = 0; name && i < sizeof tv_resnets / sizeof tv_resnets[0]; i++) {
        size_t n = strlen(tv_resnets[i].name);
        if (!strncmp(name, tv_resnets[i].name, n) && (!name[n] || name[n] == ':')) {
            *opts = name[n] ? name + n + 1 : "";
            return &tv_resnets[i];
        }
    }
    return NULL;
}

int spec_is_resnet(const char *name)
{
    const char *opts;
    return name && (!strcmp(name, "resnet20") || tv_lookup(name, &opts));
}

/* The stem that opts ("", "stem=auto|cifar|imagenet") asks for, given the
 * input: 1 ImageNet, 0 CIFAR, -1 error. */
static int imagenet_stem(const char *name, const char *opts, cdl_shape input)
{
    int side = input.h < input.w ? input.h : input.w;
    int autostem = side > RESNET_CIFAR_MAX_SIDE;
    if (!*opts || !strcmp(opts, "stem=auto"))
        return autostem;
    if (!strcmp(opts, "stem=cifar"))
        return 0;
    if (!strcmp(opts, "stem=imagenet"))
        return 1;
    return cdl_error("model %s: unknown option '%s': use stem=auto (the default: ImageNet's "
                     "7x7 stem above %d pixels a side, else CIFAR's 3x3), stem=cifar or "
                     "stem=imagenet", name, opts, RESNET_CIFAR_MAX_SIDE);
}

/* Appends the printf-formatted text to text (length *n so far, room
 * len); -1 when it does not fit. */
static int put(char *text, size_t len, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int put(char *text, size_t len, size_t *n, const char *fmt, ...)
{
    if (*n >= len)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(text + *n, len - *n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= len - *n)
        return -1;
    *n += (size_t)k;
    return 0;
}

int spec_resnet_stem(const char *name, cdl_shape input)
{
    const char *opts;
    if (!tv_lookup(name, &opts))
        return -1;
    int big = imagenet_stem(name, opts, input);
    return big < 0 ? -1 : big;
}

int spec_resnet_text(const char *name, cdl_shape input, int classes, char *text, size_t len)
{
    size_t n = 0;
    int r = 0;
    if (!strcmp(name, "resnet20")) {
        r |= put(text, len, &n, "%s", basic_blocks);
        r |= put(text, len, &n, stem_cifar, 16);
        r |= put(text, len, &n, resnet20_fmt, classes);
    } else {
        const char *opts = "";
        const tv_resnet *a = tv_lookup(name, &opts);
        if (!a)
            return cdl_error("unknown ResNet '%s': use resnet20, resnet18, resnet34, resnet50 or "
                             "resnet101", name);
        int big = imagenet_stem(name, opts, input);
        if (big < 0)
            return -1;
        r |= put(text, len, &n, "%s", a->bottleneck ? bottleneck_blocks : basic_blocks);
        if (big)
            r |= put(text, len, &n, "%s", stem_imagenet);
        else
            r |= put(text, len, &n, stem_cifar, 64);
        for (int s = 0; s < 4; s++) {
            int planes = 64 << s, stride = s ? 2 : 1;
            for (int j = 0; j < a->blocks[s]; j++) {
                if (a->bottleneck && j == 0)
                    /* Every first bottleneck projects: 4x the planes out. */
                    r |= put(text, len, &n, "use bottleneck_down %d %d %d name=layer%d.0\n", planes,
                             4 * planes, stride, s + 1);
                else if (a->bottleneck)
                    r |= put(text, len, &n, "use bottleneck %d %d name=layer%d.%d\n", planes,
                             4 * planes, s + 1, j);
                else if (j == 0 && s > 0)
                    r |= put(text, len, &n, "use down %d downsample name=layer%d.0\n", planes, s + 1);
                else
                    r |= put(text, len, &n, "use basic %d name=layer%d.%d\n", planes, s + 1, j);
            }
        }
        r |= put(text, len, &n, "globalavgpool\nflatten\nlinear %d name=fc\n", classes);
    }
    if (r)
        return cdl_error("model %s: its spec text is longer than %zu characters", name, len);
    return 0;
}
