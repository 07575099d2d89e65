/* Model specs: the parser (every error names file:line), the built-ins, and
 * shape inference. No backend needed. */
#include "testutil.h"

#include <string.h>
#include <unistd.h>

#include <cdl/cdl.h>

static const char lenet_text[] =
    "# LeNet-5 for Fashion-MNIST\n"
    "input 1x28x28          # optional; else the dataset's shape\n"
    "conv2d 6 kernel=5 padding=2\n"
    "relu\n"
    "maxpool2d 2\n"
    "conv2d 16 kernel=5\n"
    "relu\n"
    "maxpool2d 2\n"
    "flatten\n"
    "linear 120\n"
    "relu\n"
    "dropout 0.5\n"
    "linear 84 name=fc2\n"
    "relu\n"
    "linear 10\n";

static void assert_layer(const cdl_layer_spec *l, cdl_layer_kind kind, int out, int kernel,
                         int stride, int pad, const char *name)
{
    assert_int_equal(l->kind, kind);
    assert_int_equal(l->out, out);
    assert_int_equal(l->kernel, kernel);
    assert_int_equal(l->stride, stride);
    assert_int_equal(l->pad, pad);
    assert_string_equal(l->name, name);
}

static void test_parse_lenet_example(void **state)
{
    (void)state;
    cdl_model_spec s;
    assert_int_equal(cdl_spec_parse(lenet_text, "lenet.spec", &s), 0);
    assert_string_equal(s.source, "lenet.spec");
    assert_int_equal(s.input.c, 1);
    assert_int_equal(s.input.h, 28);
    assert_int_equal(s.input.w, 28);
    assert_int_equal(s.nlayers, 13);
    assert_layer(&s.layers[0], CDL_LAYER_CONV2D, 6, 5, 1, 2, "conv1");
    assert_layer(&s.layers[1], CDL_LAYER_RELU, 0, 0, 0, 0, "");
    assert_layer(&s.layers[2], CDL_LAYER_MAXPOOL2D, 0, 2, 0, 0, "");
    assert_layer(&s.layers[3], CDL_LAYER_CONV2D, 16, 5, 1, 0, "conv2");
    assert_layer(&s.layers[6], CDL_LAYER_FLATTEN, 0, 0, 0, 0, "");
    assert_layer(&s.layers[7], CDL_LAYER_LINEAR, 120, 0, 0, 0, "fc1");
    assert_layer(&s.layers[9], CDL_LAYER_DROPOUT, 0, 0, 0, 0, "");
    assert_true(s.layers[9].p == 0.5f);
    assert_layer(&s.layers[10], CDL_LAYER_LINEAR, 84, 0, 0, 0, "fc2");
    assert_layer(&s.layers[12], CDL_LAYER_LINEAR, 10, 0, 0, 0, "fc3");
    for (int i = 0; i < s.nlayers; i++) {
        assert_int_equal(s.layers[i].line, i + 3);   /* two header lines */
        if (s.layers[i].kind == CDL_LAYER_CONV2D || s.layers[i].kind == CDL_LAYER_LINEAR)
            assert_int_equal(s.layers[i].bias, 1);
    }
}

static void test_parse_options(void **state)
{
    (void)state;
    cdl_model_spec s;
    /* Tabs, CRLF, no final newline, keys in any order. */
    const char *text = "conv2d\t8 padding=1 bias=false stride=2 kernel=3 name=stem\r\n"
                       "avgpool2d 3 stride=1 padding=1\r\n"
                       "maxpool2d 3 stride=2\n"
                       "flatten\n"
                       "linear 10 bias=false name=head";
    assert_int_equal(cdl_spec_parse(text, "x.spec", &s), 0);
    assert_int_equal(s.input.c, 0);   /* not given: the dataset's shape */
    assert_int_equal(s.nlayers, 5);
    assert_layer(&s.layers[0], CDL_LAYER_CONV2D, 8, 3, 2, 1, "stem");
    assert_int_equal(s.layers[0].bias, 0);
    assert_layer(&s.layers[1], CDL_LAYER_AVGPOOL2D, 0, 3, 1, 1, "");
    assert_layer(&s.layers[2], CDL_LAYER_MAXPOOL2D, 0, 3, 2, 0, "");
    assert_layer(&s.layers[4], CDL_LAYER_LINEAR, 10, 0, 0, 0, "head");
    assert_int_equal(s.layers[4].bias, 0);
    assert_int_equal(s.layers[4].line, 5);
}

/* Each bad spec fails with a message that starts with the place and says
 * what is wrong. */
static void test_parse_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text, *where, *what;
    } cases[] = {
        {"# c\n\nconv3d 6\n", "f.spec:3: ", "unknown layer 'conv3d'"},
        {"conv2d 6\n", "f.spec:1: ", "conv2d needs kernel=K"},
        {"conv2d kernel=5\n", "f.spec:1: ", "conv2d is missing its output size"},
        {"linear\n", "f.spec:1: ", "linear is missing its output size: write 'linear OUT"},
        {"maxpool2d stride=2\n", "f.spec:1: ", "missing its kernel size"},
        {"dropout\n", "f.spec:1: ", "dropout is missing its probability"},
        {"relu\nconv2d 6 kernel=5 foo=1\n", "f.spec:2: ", "unknown key 'foo' for conv2d: it takes kernel=, stride="},
        {"linear 10 kernel=3\n", "f.spec:1: ", "unknown key 'kernel' for linear: it takes bias=, name="},
        {"maxpool2d 2 eps=1\n", "f.spec:1: ", "unknown key 'eps' for maxpool2d"},
        {"relu x\n", "f.spec:1: ", "unexpected 'x': write 'relu"},
        {"linear 10 20\n", "f.spec:1: ", "unexpected '20'"},
        {"relu inplace=true\n", "f.spec:1: ", "unknown key 'inplace' for relu: it takes name=, from="},
        {"conv2d 6x kernel=5\n", "f.spec:1: ", "conv2d output size '6x' is not a whole number"},
        {"conv2d 6 kernel=\n", "f.spec:1: ", "kernel='' is not a whole number"},
        {"conv2d 0 kernel=5\n", "f.spec:1: ", "conv2d output size 0 is out of range: use a number from 1"},
        {"conv2d 6 kernel=5 stride=0\n", "f.spec:1: ", "stride=0 is out of range"},
        {"conv2d 6 kernel=5 padding=-1\n", "f.spec:1: ", "padding=-1 is out of range"},
        {"linear 99999999999999999999\n", "f.spec:1: ", "out of range"},
        {"conv2d 6 kernel=5 kernel=3\n", "f.spec:1: ", "kernel= is given twice"},
        {"conv2d 6 kernel=5 bias=yes\n", "f.spec:1: ", "bias=yes: write bias=true or bias=false"},
        {"linear 10 name=1fc\n", "f.spec:1: ", "invalid linear name '1fc'"},
        {"linear 10 name=fc..1\n", "f.spec:1: ", "invalid linear name 'fc..1'"},
        {"linear 10 name=fc.\n", "f.spec:1: ", "invalid linear name 'fc.'"},
        {"linear 10 name=abcdefghijabcdefghijabcdefghijabcdefghijabcdefgh\n", "f.spec:1: ",
         "invalid linear name"},
        {"dropout 1.0\n", "f.spec:1: ", "dropout probability 1.0 is out of range"},
        {"dropout -0.1\n", "f.spec:1: ", "out of range"},
        {"dropout abc\n", "f.spec:1: ", "dropout probability 'abc' is not a number"},
        {"dropout nan\n", "f.spec:1: ", "is not a number"},
        {"maxpool2d 2 padding=2\n", "f.spec:1: ", "padding=2 is more than half the kernel 2"},
        {"input 1x28\nlinear 1\n", "f.spec:1: ", "input shape '1x28' is not CxHxW"},
        {"input 1x28x28x3\nlinear 1\n", "f.spec:1: ", "is not CxHxW"},
        {"input 0x28x28\nlinear 1\n", "f.spec:1: ", "input shape '0x28x28' is out of range"},
        {"input\n", "f.spec:1: ", "input takes one shape"},
        {"linear 10\ninput 1x2x3\n", "f.spec:2: ", "the input line must come before the first layer"},
        {"input 1x2x3\ninput 1x2x3\nlinear 1\n", "f.spec:2: ", "a second input line"},
        {"linear 10 name=a\nrelu\nlinear 5 name=a\n", "f.spec:3: ",
         "the name 'a' is already used at f.spec:1"},
        {"linear 10 name=fc2\nlinear 5\n", "f.spec:2: ",
         "the name 'fc2' is used twice (here and at f.spec:1"},
        {"# only a comment\n\n   \n", "f.spec: ", "the spec has no layers"},
        {"relu a b c d e f g h i j k l m n o p q\n", "f.spec:1: ", "more than 16 words"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cdl_model_spec s;
        memset(&s, 0x5a, sizeof s);
        s.nlayers = 77;
        int rc = cdl_spec_parse(cases[i].text, "f.spec", &s);
        const char *e = cdl_last_error();
        if (rc != -1 || strncmp(e, cases[i].where, strlen(cases[i].where)) ||
            !strstr(e, cases[i].what))
            fail_msg("case %zu \"%s\": rc %d, error \"%s\"; want \"%s...%s\"", i, cases[i].text,
                     rc, e, cases[i].where, cases[i].what);
        assert_int_equal(s.nlayers, 77);   /* out untouched on failure */
    }
}

static void test_parse_limits(void **state)
{
    (void)state;
    cdl_model_spec s;
    char *text = malloc(8192);
    text[0] = '\0';
    for (int i = 0; i < CDL_MAX_LAYERS; i++)
        strcat(text, "relu\n");
    assert_int_equal(cdl_spec_parse(text, "many.spec", &s), 0);
    assert_int_equal(s.nlayers, CDL_MAX_LAYERS);
    strcat(text, "relu\n");
    assert_int_equal(cdl_spec_parse(text, "many.spec", &s), -1);
    assert_non_null(strstr(cdl_last_error(), "many.spec:513: more than 512 layers"));

    memset(text, ' ', 2000);
    strcpy(text + 2000, "relu\n");
    assert_int_equal(cdl_spec_parse(text, "long.spec", &s), -1);
    assert_non_null(strstr(cdl_last_error(), "long.spec:1: line is longer than"));
    free(text);

    assert_int_equal(cdl_spec_parse("relu\n", NULL, &s), 0);
    assert_string_equal(s.source, "<model spec>");
}

static void test_builtin_lenet(void **state)
{
    (void)state;
    cdl_model_spec b, f;
    cdl_shape mnist = {1, 28, 28}, cifar = {3, 32, 32};
    assert_int_equal(cdl_spec_builtin("lenet", mnist, 10, &b), 0);
    assert_string_equal(b.source, "lenet");
    assert_int_equal(b.input.c, 1);
    assert_int_equal(b.input.h, 28);
    assert_int_equal(b.nlayers, 12);
    static const cdl_layer_kind kinds[12] = {
        CDL_LAYER_CONV2D, CDL_LAYER_RELU, CDL_LAYER_MAXPOOL2D, CDL_LAYER_CONV2D,
        CDL_LAYER_RELU,   CDL_LAYER_MAXPOOL2D, CDL_LAYER_FLATTEN, CDL_LAYER_LINEAR,
        CDL_LAYER_RELU,   CDL_LAYER_LINEAR, CDL_LAYER_RELU, CDL_LAYER_LINEAR};
    for (int i = 0; i < 12; i++) {
        assert_int_equal(b.layers[i].kind, kinds[i]);
        assert_int_equal(b.layers[i].line, 0);
    }
    assert_layer(&b.layers[0], CDL_LAYER_CONV2D, 6, 5, 1, 2, "conv1");
    assert_layer(&b.layers[2], CDL_LAYER_MAXPOOL2D, 0, 2, 0, 0, "");
    assert_layer(&b.layers[3], CDL_LAYER_CONV2D, 16, 5, 1, 0, "conv2");
    assert_layer(&b.layers[7], CDL_LAYER_LINEAR, 120, 0, 0, 0, "fc1");
    assert_layer(&b.layers[9], CDL_LAYER_LINEAR, 84, 0, 0, 0, "fc2");
    assert_layer(&b.layers[11], CDL_LAYER_LINEAR, 10, 0, 0, 0, "fc3");

    /* The same model written as a file, apart from the places. */
    const char *text = "conv2d 6 kernel=5 padding=2\nrelu\nmaxpool2d 2\nconv2d 16 kernel=5\n"
                       "relu\nmaxpool2d 2\nflatten\nlinear 120\nrelu\nlinear 84\nrelu\nlinear 10\n";
    assert_int_equal(cdl_spec_parse(text, "lenet", &f), 0);
    for (int i = 0; i < 12; i++)
        f.layers[i].line = 0;
    f.input = mnist;
    assert_memory_equal(&b, &f, sizeof b);

    /* fc1 has 400 inputs for both datasets. */
    cdl_shape sh[13];
    assert_int_equal(cdl_spec_infer(&b, mnist, sh), 0);
    assert_int_equal(sh[1].c, 6);
    assert_int_equal(sh[1].h, 28);
    assert_int_equal(sh[7].c, 400);
    assert_int_equal(sh[12].c, 10);
    assert_int_equal(cdl_spec_builtin("lenet", cifar, 100, &b), 0);
    assert_int_equal(b.layers[0].pad, 0);
    assert_int_equal(cdl_spec_infer(&b, cifar, sh), 0);
    assert_int_equal(sh[1].h, 28);
    assert_int_equal(sh[7].c, 400);
    assert_int_equal(sh[12].c, 100);
}

static void test_builtin_mlp_and_errors(void **state)
{
    (void)state;
    cdl_model_spec b;
    cdl_shape in = {1, 28, 28};
    assert_int_equal(cdl_spec_builtin("mlp", in, 10, &b), 0);
    assert_int_equal(b.nlayers, 6);
    assert_layer(&b.layers[0], CDL_LAYER_FLATTEN, 0, 0, 0, 0, "");
    assert_layer(&b.layers[1], CDL_LAYER_LINEAR, 256, 0, 0, 0, "fc1");
    assert_layer(&b.layers[3], CDL_LAYER_LINEAR, 128, 0, 0, 0, "fc2");
    assert_layer(&b.layers[5], CDL_LAYER_LINEAR, 10, 0, 0, 0, "fc3");
    cdl_shape sh[7];
    assert_int_equal(cdl_spec_infer(&b, in, sh), 0);
    assert_int_equal(sh[1].c, 784);
    assert_int_equal(sh[6].c, 10);

    assert_int_equal(cdl_spec_builtin("resnet152", in, 10, &b), -1);
    assert_non_null(strstr(cdl_last_error(), "unknown built-in model 'resnet152': use lenet, mlp, "
                                             "resnet20, resnet18, resnet34, resnet50, resnet101"));
    assert_int_equal(cdl_spec_builtin("lenet", in, 0, &b), -1);
    assert_non_null(strstr(cdl_last_error(), "invalid number of classes 0"));
    cdl_shape bad = {0, 28, 28};
    assert_int_equal(cdl_spec_builtin("mlp", bad, 10, &b), -1);
    assert_non_null(strstr(cdl_last_error(), "invalid input shape 0x28x28"));

    /* A built-in that does not fit its input names the layer. */
    cdl_shape tiny = {1, 8, 8};
    assert_int_equal(cdl_spec_builtin("lenet", tiny, 10, &b), 0);
    assert_int_equal(cdl_spec_infer(&b, tiny, sh), -1);
    assert_non_null(strstr(cdl_last_error(),
                           "lenet (layer 4, conv2d): conv2d kernel 5 is larger than its 6x2x2 input"));
}

static void test_infer_shapes(void **state)
{
    (void)state;
    cdl_model_spec s;
    const char *text = "conv2d 4 kernel=3 stride=2 padding=1\n"   /* 2x9x9 -> 4x5x5 */
                       "avgpool2d 3 stride=1 padding=1\n"          /* 4x5x5 */
                       "maxpool2d 2\n"                             /* 4x2x2 */
                       "relu\n"
                       "flatten\n"                                  /* 16 */
                       "dropout 0.25\n"
                       "linear 7\n";
    assert_int_equal(cdl_spec_parse(text, "s.spec", &s), 0);
    cdl_shape sh[8], in = {2, 9, 9};
    assert_int_equal(cdl_spec_infer(&s, in, sh), 0);
    const int want[8][3] = {{2, 9, 9}, {4, 5, 5}, {4, 5, 5}, {4, 2, 2},
                            {4, 2, 2}, {16, 1, 1}, {16, 1, 1}, {7, 1, 1}};
    for (int i = 0; i < 8; i++) {
        assert_int_equal(sh[i].c, want[i][0]);
        assert_int_equal(sh[i].h, want[i][1]);
        assert_int_equal(sh[i].w, want[i][2]);
    }
    /* A conv that reduces to 1x1 gives a flat vector: linear may follow. */
    assert_int_equal(cdl_spec_parse("conv2d 5 kernel=4\nlinear 3\n", "s.spec", &s), 0);
    cdl_shape in4 = {1, 4, 4};
    assert_int_equal(cdl_spec_infer(&s, in4, sh), 0);
    assert_int_equal(sh[2].c, 3);
}

static void test_infer_errors(void **state)
{
    (void)state;
    cdl_model_spec s;
    cdl_shape sh[CDL_MAX_LAYERS + 1], in = {1, 10, 10};

    assert_int_equal(cdl_spec_parse("# x\nconv2d 6 kernel=5\nmaxpool2d 2\nconv2d 16 kernel=5\n",
                                    "k.spec", &s), 0);
    assert_int_equal(cdl_spec_infer(&s, in, sh), -1);
    assert_non_null(strstr(cdl_last_error(),
                           "k.spec:4: conv2d kernel 5 is larger than its 6x3x3 input (padding 0)"));

    /* linear on a 4-D activation is an error, not a silent flatten. */
    assert_int_equal(cdl_spec_parse("conv2d 2 kernel=3\nlinear 10\n", "l.spec", &s), 0);
    assert_int_equal(cdl_spec_infer(&s, in, sh), -1);
    assert_non_null(strstr(cdl_last_error(),
                           "l.spec:2: linear needs a flat input but gets 2x8x8: add 'flatten'"));

    assert_int_equal(cdl_spec_parse("maxpool2d 11\n", "p.spec", &s), 0);
    assert_int_equal(cdl_spec_infer(&s, in, sh), -1);
    assert_non_null(strstr(cdl_last_error(), "p.spec:1: maxpool2d kernel 11 is larger"));

    assert_int_equal(cdl_spec_parse("input 3x32x32\nflatten\nlinear 10\n", "i.spec", &s), 0);
    assert_int_equal(cdl_spec_infer(&s, in, sh), -1);
    assert_non_null(strstr(cdl_last_error(),
                           "i.spec: the spec is for 3x32x32 inputs but the data is 1x10x10"));

    /* Specs built in code are checked too. */
    assert_int_equal(cdl_spec_parse("conv2d 6 kernel=3\n", "c.spec", &s), 0);
    s.layers[0].stride = 0;
    assert_int_equal(cdl_spec_infer(&s, in, sh), -1);
    assert_non_null(strstr(cdl_last_error(), "c.spec:1: conv2d stride=0 is out of range"));
    s.layers[0].stride = 1;
    s.layers[0].line = 0;
    s.layers[0].kernel = 0;
    assert_int_equal(cdl_spec_infer(&s, in, sh), -1);
    assert_non_null(strstr(cdl_last_error(), "c.spec (layer 1, conv2d): conv2d kernel 0"));
    s.layers[0].kernel = 3;
    s.layers[0].kind = (cdl_layer_kind)42;
    assert_int_equal(cdl_spec_infer(&s, in, sh), -1);
    assert_non_null(strstr(cdl_last_error(), "unknown layer kind 42"));
    s.layers[0].kind = CDL_LAYER_DROPOUT;
    s.layers[0].p = 1.5f;
    assert_int_equal(cdl_spec_infer(&s, in, sh), -1);
    assert_non_null(strstr(cdl_last_error(), "dropout probability 1.5 is out of range"));

    /* Too many values per sample. */
    assert_int_equal(cdl_spec_parse("conv2d 1000000 kernel=1\n", "big.spec", &s), 0);
    cdl_shape large = {1, 2000, 2000};
    assert_int_equal(cdl_spec_infer(&s, large, sh), -1);
    assert_non_null(strstr(cdl_last_error(), "big.spec:1: output 1000000x2000x2000 has more than"));

    /* An input of 2^32 values: refused before flatten multiplies in int. */
    assert_int_equal(cdl_spec_parse("input 65536x65536x1\nflatten\nlinear 10\n", "huge.spec",
                                    &s), 0);
    cdl_shape huge = {65536, 65536, 1};
    assert_int_equal(cdl_spec_infer(&s, huge, sh), -1);
    assert_non_null(strstr(cdl_last_error(), "huge.spec: input 65536x65536x1 has more than"));
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void test_load(void **state)
{
    (void)state;
    char path[] = "/tmp/cdl-spec-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    cdl_model_spec s;

    write_file(path, lenet_text, strlen(lenet_text));
    assert_int_equal(cdl_spec_load(path, &s), 0);
    assert_string_equal(s.source, path);
    assert_int_equal(s.nlayers, 13);

    const char bad[] = "relu\nrelu\nlinear ten\n";
    write_file(path, bad, strlen(bad));
    assert_int_equal(cdl_spec_load(path, &s), -1);
    char want[64];
    snprintf(want, sizeof want, "%s:3: ", path);
    assert_true(!strncmp(cdl_last_error(), want, strlen(want)));

    const char nul[] = "relu\n\0linear 3\n";
    write_file(path, nul, sizeof nul - 1);
    assert_int_equal(cdl_spec_load(path, &s), -1);
    assert_non_null(strstr(cdl_last_error(), "contains a NUL byte"));

    assert_int_equal(cdl_spec_load("/tmp", &s), -1);
    assert_non_null(strstr(cdl_last_error(), "cannot read model spec '/tmp'"));

    unlink(path);
    assert_int_equal(cdl_spec_load(path, &s), -1);
    assert_non_null(strstr(cdl_last_error(), "cannot open model spec"));
    assert_non_null(strstr(cdl_last_error(), path));
}

/* ------------------------------------------------------------ graphs */

static const char resnet_text[] =
    "input 3x8x8\n"
    "block basic PLANES STRIDE=1      # PyTorch's BasicBlock\n"
    "conv2d $PLANES kernel=3 stride=$STRIDE padding=1 bias=false\n"
    "batchnorm2d\n"
    "relu\n"
    "conv2d $PLANES kernel=3 padding=1 bias=false\n"
    "batchnorm2d\n"
    "add input\n"
    "relu\n"
    "end\n"
    "block down PLANES STRIDE\n"
    "conv2d $PLANES kernel=3 stride=$STRIDE padding=1 bias=false\n"
    "batchnorm2d\n"
    "relu\n"
    "conv2d $PLANES kernel=3 padding=1 bias=false\n"
    "batchnorm2d\n"
    "conv2d $PLANES kernel=1 stride=$STRIDE bias=false from=input name=downsample.0\n"
    "batchnorm2d name=downsample.1\n"
    "add bn2\n"
    "relu\n"
    "end\n"
    "conv2d 4 kernel=3 padding=1 bias=false\n"       /* line 22: conv1 */
    "batchnorm2d\n"                                  /* bn1 */
    "relu\n"
    "use basic 4 name=layer1.0\n"                    /* line 25 */
    "use down 8 2 name=layer2.0\n"                   /* line 26 */
    "use basic STRIDE=1 PLANES=8 name=layer2.1\n"
    "globalavgpool\n"
    "flatten\n"
    "linear 10 name=fc\n";

static int find_layer(const cdl_model_spec *s, const char *name)
{
    for (int i = 0; i < s->nlayers; i++)
        if (!strcmp(s->layers[i].name, name))
            return i;
    fail_msg("no layer %s", name);
    return -1;
}

/* torchvision's ResNets: the stem each input gets (auto: ImageNet's above
 * 64 pixels a side, CIFAR's up to it; stem= chooses), the bottleneck's
 * layers (the stride on conv2: ResNet v1.5, torchvision's), and errors. */
static void test_builtin_torchvision_resnets(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        cdl_shape in;
        int imagenet;
    } stems[] = {
        {"resnet18", {3, 32, 32}, 0},          {"resnet18", {3, 64, 64}, 0},
        {"resnet18", {3, 65, 224}, 1},         {"resnet34", {3, 224, 224}, 1},
        {"resnet50:stem=imagenet", {3, 32, 32}, 1}, {"resnet50:stem=cifar", {3, 224, 224}, 0},
        {"resnet101:stem=auto", {1, 28, 28}, 0},
    };
    cdl_model_spec s;
    for (size_t t = 0; t < sizeof stems / sizeof stems[0]; t++) {
        if (cdl_spec_builtin(stems[t].name, stems[t].in, 10, &s) != 0)
            fail_msg("%s: %s", stems[t].name, cdl_last_error());
        const cdl_layer_spec *c1 = &s.layers[find_layer(&s, "conv1")];
        assert_int_equal(c1->kernel, stems[t].imagenet ? 7 : 3);
        assert_int_equal(c1->stride, stems[t].imagenet ? 2 : 1);
        assert_int_equal(s.layers[3].kind,
                         stems[t].imagenet ? CDL_LAYER_MAXPOOL2D : CDL_LAYER_CONV2D);
        if (stems[t].imagenet)
            assert_true(s.layers[3].kernel == 3 && s.layers[3].stride == 2 && s.layers[3].pad == 1);
    }

    /* resnet101: stem 4 layers; 33 bottlenecks of 3 convs, 3 batch norms,
     * 3 ReLUs and an add, 4 of them with a downsample conv and batch norm;
     * pool, flatten, fc. */
    cdl_shape in = {3, 224, 224};
    assert_int_equal(cdl_spec_builtin("resnet101", in, 10, &s), 0);
    assert_int_equal(s.nlayers, 4 + 33 * 10 + 4 * 2 + 3);
    const cdl_layer_spec *l = &s.layers[find_layer(&s, "layer3.22.conv3")];
    assert_true(l->kind == CDL_LAYER_CONV2D && l->out == 1024 && l->kernel == 1);
    l = &s.layers[find_layer(&s, "layer2.0.conv2")];
    assert_true(l->out == 128 && l->kernel == 3 && l->stride == 2);
    l = &s.layers[find_layer(&s, "layer2.0.conv1")];
    assert_true(l->kernel == 1 && l->stride == 1);
    l = &s.layers[find_layer(&s, "layer1.0.downsample.0")];
    assert_true(l->out == 256 && l->kernel == 1 && l->stride == 1);
    l = &s.layers[find_layer(&s, "layer4.0.downsample.0")];
    assert_true(l->out == 2048 && l->stride == 2);
    assert_int_equal(s.layers[find_layer(&s, "fc")].out, 10);
    cdl_shape sh[CDL_MAX_LAYERS + 1];
    assert_int_equal(cdl_spec_infer(&s, in, sh), 0);
    assert_true(sh[s.nlayers - 2].c == 2048 && sh[s.nlayers].c == 10);

    assert_int_equal(cdl_spec_builtin("resnet50:stem=big", in, 10, &s), -1);
    assert_non_null(strstr(cdl_last_error(), "model resnet50:stem=big: unknown option 'stem=big': "
                                             "use stem=auto"));
    assert_int_equal(cdl_spec_builtin("resnet20:stem=cifar", in, 10, &s), -1);
    assert_non_null(strstr(cdl_last_error(), "unknown built-in model 'resnet20:stem=cifar'"));
    assert_true(cdl_spec_is_builtin("resnet50") && cdl_spec_is_builtin("resnet34:stem=cifar"));
    assert_false(cdl_spec_is_builtin("resnet5") || cdl_spec_is_builtin("resnet500") ||
                 cdl_spec_is_builtin("resnet20:stem=cifar"));
}

static void test_parse_graph(void **state)
{
    (void)state;
    cdl_model_spec s;
    if (cdl_spec_parse(resnet_text, "r.spec", &s))
        fail_msg("%s", cdl_last_error());
    assert_int_equal(s.nlayers, 3 + 7 + 9 + 7 + 3);
    static const char *const names[] = {
        "conv1", "bn1", "layer1.0.conv1", "layer1.0.bn1", "layer1.0.conv2", "layer1.0.bn2",
        "layer2.0.conv1", "layer2.0.bn2", "layer2.0.downsample.0", "layer2.0.downsample.1",
        "layer2.1.conv2", "fc"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        find_layer(&s, names[i]);
    /* Inputs: the block's input, names inside the block, the previous line. */
    int relu0 = 2, add1 = find_layer(&s, "layer1.0.bn2") + 1;
    assert_int_equal(s.layers[add1].kind, CDL_LAYER_ADD);
    assert_int_equal(s.layers[add1].nin, 2);
    assert_int_equal(s.layers[add1].in[0], add1 - 1);
    assert_int_equal(s.layers[add1].in[1], relu0);
    int ds = find_layer(&s, "layer2.0.downsample.0");
    int block2 = find_layer(&s, "layer2.0.conv1");
    assert_int_equal(s.layers[ds].nin, 1);
    assert_int_equal(s.layers[ds].in[0], block2 - 1);   /* from=input */
    assert_int_equal(s.layers[ds].stride, 2);
    assert_int_equal(s.layers[ds].kernel, 1);
    int add2 = ds + 2;
    assert_int_equal(s.layers[add2].in[0], ds + 1);
    assert_int_equal(s.layers[add2].in[1], find_layer(&s, "layer2.0.bn2"));
    assert_int_equal(s.layers[block2].stride, 2);
    assert_int_equal(s.layers[find_layer(&s, "layer2.1.conv1")].stride, 1);   /* by key */
    assert_int_equal(s.layers[find_layer(&s, "layer2.1.conv1")].out, 8);
    /* Block lines keep their own line and the use line. */
    assert_int_equal(s.layers[ds].line, 17);
    assert_int_equal(s.layers[ds].use_line, 26);
    assert_int_equal(s.layers[0].line, 22);
    assert_int_equal(s.layers[0].use_line, 0);

    cdl_shape sh[CDL_MAX_LAYERS + 1];
    assert_int_equal(cdl_spec_infer(&s, s.input, sh), 0);
    assert_int_equal(sh[add2 + 1].c, 8);
    assert_int_equal(sh[add2 + 1].h, 4);
    assert_int_equal(sh[s.nlayers].c, 10);

    /* Conv2d options: rectangular, dilation, groups; concat sums channels. */
    assert_int_equal(cdl_spec_parse("conv2d 6 kernel=3x1 padding=1x0 name=a\n"
                                    "conv2d 6 kernel=3 dilation=2 padding=2 groups=3 from=input\n"
                                    "concat a\n",
                                    "c.spec", &s), 0);
    cdl_shape in = {3, 9, 9};
    assert_int_equal(cdl_spec_infer(&s, in, sh), 0);
    assert_int_equal(s.layers[0].kernel_w, 1);
    assert_int_equal(s.layers[0].pad_w, 0);
    assert_int_equal(s.layers[1].groups, 3);
    assert_int_equal(s.layers[1].dilation, 2);
    assert_int_equal(s.layers[1].in[0], -1);
    /* "concat a": the line before first, then a (the documented order). */
    assert_int_equal(s.layers[2].nin, 2);
    assert_int_equal(s.layers[2].in[0], 1);
    assert_int_equal(s.layers[2].in[1], 0);
    assert_int_equal(sh[3].c, 12);
    assert_int_equal(sh[3].h, 9);
    assert_int_equal(sh[3].w, 9);
    /* concat of 6x9x9 and 6x9x5: an error naming both. */
    assert_int_equal(cdl_spec_parse("conv2d 6 kernel=3x1 padding=1x0 stride=1x2 name=a\n"
                                    "conv2d 6 kernel=3 padding=1 from=input name=b\n"
                                    "concat a\n",
                                    "c.spec", &s), 0);
    assert_int_equal(cdl_spec_infer(&s, in, sh), -1);
    assert_non_null(strstr(cdl_last_error(), "c.spec:3: concat of 'b' (6x9x9) and 'a' (6x9x5): "
                                             "heights and widths differ"));
}

static void test_parse_graph_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text, *where, *what;
    } cases[] = {
        {"relu name=x\nadd nope\n", "f.spec:2: ", "no layer 'nope' before this line: it can use "
                                                  "input, x"},
        {"relu from=later\nrelu name=later\n", "f.spec:1: ", "no layer 'later' before this line"},
        {"add\n", "f.spec:1: ", "add needs the layers it joins: write 'add LAYER"},
        {"relu name=input\n", "f.spec:1: ", "'input' is the name of the model's"},
        {"add a from=b\n", "f.spec:1: ", "unknown key 'from' for add"},
        {"block b\nrelu\n", "f.spec:1: ", "block b has no 'end'"},
        {"end\n", "f.spec:1: ", "'end' without a block"},
        {"block b\nend\n", "f.spec:2: ", "block b has no lines"},
        {"block b\nuse b name=x\nend\n", "f.spec:2: ", "'use' inside block b (line 1)"},
        {"block relu\nend\n", "f.spec:1: ", "invalid block name 'relu'"},
        {"block b X\nrelu\nend\nblock b\nrelu\nend\n", "f.spec:4: ",
         "block 'b' is already defined at line 1"},
        {"use b name=x\n", "f.spec:1: ", "unknown block 'b': define it before"},
        {"block b X\nrelu\nend\nuse b 1\n", "f.spec:4: ", "use b needs name=PREFIX"},
        {"block b X\nrelu\nend\nuse b name=l.0\n", "f.spec:4: ", "block b needs a value for X"},
        {"block b X\nrelu\nend\nuse b 1 2 name=l.0\n", "f.spec:4: ",
         "unexpected '2': block b takes 1 argument"},
        {"block b X Z=2\nrelu\nend\nuse b Y=1 name=l.0\n", "f.spec:4: ",
         "block b has no parameter 'Y': it has X, Z"},
        {"block b X\nrelu\nend\nlinear $X\n", "f.spec:4: ", "'$X' outside a block: $PARAM is "
                                                          "filled in only in the lines of a"},
        {"block b X\nlinear $Y\nend\nuse b 3 name=l.0\n", "f.spec:2 (block b, used at line 4 as "
                                                          "l.0): ", "unknown parameter '$Y' in "
                                                                    "block b: it has X"},
        {"block b X\nlinear $X\nend\nuse b 0 name=l.0\n", "f.spec:2 (block b, used at line 4 as "
                                                          "l.0): ", "linear output size 0 is out "
                                                                    "of range"},
        {"block b\nrelu from=conv9\nend\nrelu name=conv9\nuse b name=l.0\n",
         "f.spec:2 (block b, used at line 5 as l.0): ", "no layer 'conv9' before this line in "
                                                        "this block: it can use input"},
        {"block b\nlinear 2 name=abcdefghijabcdefghijabcdefghij\nend\n"
         "use b name=abcdefghijabcdefghij\n", "f.spec:2 (block b", "is longer than 47 characters"},
        {"block b\nlinear 2\nend\nuse b name=l\nuse b name=l\n", "f.spec:2 (l.fc1, from the block "
                                                              "used at line 5): ",
         "the name 'l.fc1' is used twice"},
        {"conv2d 4 kernel=3 groups=3\n", "", ""},   /* parses; infer rejects it (below) */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cdl_model_spec s;
        int rc = cdl_spec_parse(cases[i].text, "f.spec", &s);
        if (!cases[i].where[0]) {
            assert_int_equal(rc, 0);
            continue;
        }
        const char *e = cdl_last_error();
        if (rc != -1 || strncmp(e, cases[i].where, strlen(cases[i].where)) ||
            !strstr(e, cases[i].what))
            fail_msg("case %zu \"%s\": rc %d, error \"%s\"; want \"%s...%s\"", i, cases[i].text,
                     rc, e, cases[i].where, cases[i].what);
    }

    /* Shape errors of graphs, from inference. */
    static const struct {
        const char *text, *what;
    } shapes[] = {
        {"conv2d 4 kernel=3 padding=1 name=a\nconv2d 8 kernel=1 from=input name=b\nadd a\n",
         "g.spec:3: add of 'b' (8x10x10) and 'a' (4x10x10): the shapes differ: give the shortcut "
         "a conv2d kernel=1"},
        {"conv2d 4 kernel=3 padding=1 name=a\nrelu\nrelu from=a\n",
         "g.spec:2: the output of this relu is never used"},
        {"conv2d 4 kernel=3 groups=3\n", "g.spec:1: conv2d groups=3 does not divide its 4 output "
                                         "channels"},
        {"conv2d 3 kernel=3 groups=3\n", "g.spec:1: conv2d groups=3 does not divide its 1 input "
                                         "channels"},
        {"conv2d 3 kernel=5 dilation=3\n", "g.spec:1: conv2d kernel 5 is larger than its 1x10x10 "
                                           "input (padding 0, dilated)"},
    };
    cdl_shape in = {1, 10, 10}, sh[CDL_MAX_LAYERS + 1];
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        cdl_model_spec s;
        assert_int_equal(cdl_spec_parse(shapes[i].text, "g.spec", &s), 0);
        if (cdl_spec_infer(&s, in, sh) != -1 || !strstr(cdl_last_error(), shapes[i].what))
            fail_msg("shape case %zu: error \"%s\"; want \"%s\"", i, cdl_last_error(),
                     shapes[i].what);
    }
    /* Specs built in code: inputs must come before the layer. */
    cdl_model_spec s;
    assert_int_equal(cdl_spec_parse("relu\nrelu\n", "h.spec", &s), 0);
    s.layers[0].nin = 1;
    s.layers[0].in[0] = 1;
    assert_int_equal(cdl_spec_infer(&s, in, sh), -1);
    assert_non_null(strstr(cdl_last_error(), "h.spec:1: input 1 is layer 1: a layer reads"));
}

/* Every spec example of docs/model-spec.md is a valid spec: a reader who
 * copies one into a file gets a model, not an error. Fenced blocks with
 * placeholders (the gpt template's 3C, the built-ins' CLASSES) or shell
 * commands are not specs; the count below makes sure the others were found.
 * Each is shape-checked on its `input` line's shape, else 1x28x28. */
static char *read_doc(void)
{
    const char *top = getenv("top_srcdir");
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/model-spec.md", top && *top ? top : ".");
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s (run make check, or set top_srcdir)", path);
    static char doc[1 << 17];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    assert_true(n > 0 && n < sizeof doc - 1);
    doc[n] = '\0';
    return doc;
}

static void test_doc_examples(void **state)
{
    (void)state;
    char *doc = read_doc();
    static cdl_model_spec s;
    static cdl_shape sh[CDL_MAX_LAYERS + 1];
    int checked = 0;
    for (char *p = doc; (p = strstr(p, "\n```\n")) != NULL;) {
        char *text = p + 5, *end = strstr(text, "\n```\n");
        assert_non_null(end);
        end[1] = '\0';
        p = end + 4;
        if (strstr(text, "CLASSES") || strstr(text, " 3C ") || strstr(text, "python3"))
            continue;
        char where[64];
        snprintf(where, sizeof where, "model-spec.md example %d", checked + 1);
        if (cdl_spec_parse(text, where, &s) != 0)
            fail_msg("%s does not parse:\n%s", text, cdl_last_error());
        cdl_shape in = s.input.c ? s.input : (cdl_shape){1, 28, 28};
        if (cdl_spec_infer(&s, in, sh) != 0)
            fail_msg("%s fails on %dx%dx%d:\n%s", text, in.c, in.h, in.w, cdl_last_error());
        checked++;
    }
    assert_int_equal(checked, 4);   /* LeNet, the graph, the block, ResNet-18 */
}

/* The messages of the document's Errors section are cdl's, word for word:
 * each spec below makes one, on the line the document shows. */
static void test_doc_errors(void **state)
{
    (void)state;
    const char *doc = read_doc();
    static const char *const specs[] = {
        "relu\nrelu\nconv3d 16\n",
        "relu\nrelu\nrelu\nconv2d 16\n",
        "relu\nrelu\nrelu\nrelu\nrelu\nrelu\nmaxpool2d 2 strides=2\n",
        "input 16x5x5\nrelu\nrelu\nrelu\nrelu\nrelu\nrelu\nrelu\nlinear 10\n",
        "block basic PLANES STRIDE=1\nrelu\nrelu\nrelu\nconv2d $PLANS kernel=3\nend\n"
        "relu\nrelu\nrelu\nrelu\nrelu\nrelu\nrelu\nrelu\nrelu\nrelu\nrelu\nrelu\nrelu\nrelu\n"
        "use basic 8 name=layer2.0\n",
    };
    static cdl_model_spec s;
    static cdl_shape sh[CDL_MAX_LAYERS + 1];
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        int rc = cdl_spec_parse(specs[i], "net.spec", &s);
        if (rc == 0)
            rc = cdl_spec_infer(&s, s.input, sh);
        assert_int_equal(rc, -1);
        char line[1200];
        snprintf(line, sizeof line, "\n    %s\n", cdl_last_error());
        if (!strstr(doc, line))
            fail_msg("model-spec.md's Errors do not show cdl's message:%s", line);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_lenet_example),
        cmocka_unit_test(test_parse_options),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_limits),
        cmocka_unit_test(test_builtin_lenet),
        cmocka_unit_test(test_builtin_mlp_and_errors),
        cmocka_unit_test(test_builtin_torchvision_resnets),
        cmocka_unit_test(test_infer_shapes),
        cmocka_unit_test(test_infer_errors),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_parse_graph),
        cmocka_unit_test(test_parse_graph_errors),
        cmocka_unit_test(test_doc_examples),
        cmocka_unit_test(test_doc_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
