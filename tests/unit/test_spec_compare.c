/* cdl_spec_compare: two specs whose weights fit each other compute the
 * same function only when every layer does the same at inference (what
 * cdl-eval, cdl-predict and cdl-generate warn about for a --model that is
 * not the run's). No backend. */
#include "testutil.h"

#include <string.h>

#include <cdl/cdl.h>

static cdl_model_spec a, b;   /* large: not on the stack */

static int compare_texts(const char *ta, const char *tb, char *why, size_t len)
{
    assert_int_equal(cdl_spec_parse(ta, "a.spec", &a), 0);
    assert_int_equal(cdl_spec_parse(tb, "b.spec", &b), 0);
    return cdl_spec_compare(&a, &b, why, len);
}

#define NET "conv2d 4 kernel=3 name=c\n%s\nflatten\n%slinear 10\n"

static void test_same_function(void **state)
{
    (void)state;
    char ta[256], tb[256], why[512] = "";
    /* Comments, dropout (the identity at inference) and its p. */
    snprintf(ta, sizeof ta, NET, "relu", "");
    snprintf(tb, sizeof tb, "# edited\n" NET, "relu", "dropout 0.5\n");
    assert_int_equal(compare_texts(ta, tb, why, sizeof why), 0);
    /* A spec file of LeNet and the built-in. */
    cdl_shape in = {1, 28, 28};
    assert_int_equal(cdl_spec_builtin("lenet", in, 10, &a), 0);
    assert_int_equal(cdl_spec_parse("conv2d 6 kernel=5 padding=2\nrelu\nmaxpool2d 2\n"
                                    "conv2d 16 kernel=5\nrelu\nmaxpool2d 2\nflatten\nlinear 120\n"
                                    "relu\nlinear 84\nrelu\nlinear 10\n", "lenet.spec", &b), 0);
    assert_int_equal(cdl_spec_compare(&a, &b, why, sizeof why), 0);
    /* gpt's options in another order, another dropout. */
    cdl_shape t = {16, 1, 1};
    assert_int_equal(cdl_spec_builtin("gpt:n_layer=2,n_head=2,n_embd=16", t, 65, &a), 0);
    assert_int_equal(cdl_spec_builtin("gpt:n_embd=16,dropout=0.1,n_head=2,n_layer=2", t, 65, &b),
                     0);
    assert_int_equal(cdl_spec_compare(&a, &b, why, sizeof why), 0);
}

static void test_other_function(void **state)
{
    (void)state;
    char ta[256], tb[256], why[512];
    /* relu -> tanh: the same tensors. */
    snprintf(ta, sizeof ta, NET, "relu", "");
    snprintf(tb, sizeof tb, NET, "tanh", "");
    assert_int_equal(compare_texts(tb, ta, why, sizeof why), 1);
    assert_string_equal(why, "a.spec:2: 'tanh', where b.spec has 'relu'");
    /* gelu's approximation, a leaky slope. */
    snprintf(ta, sizeof ta, NET, "gelu", "");
    snprintf(tb, sizeof tb, NET, "gelu approximate=tanh", "");
    assert_int_equal(compare_texts(ta, tb, why, sizeof why), 1);
    assert_non_null(strstr(why, "'gelu approximate=none', where b.spec has 'gelu approximate=tanh'"));
    /* A pool's stride given as its default (the kernel) is the same pool. */
    assert_int_equal(compare_texts("maxpool2d 2\nflatten\nlinear 3\n",
                                   "maxpool2d 2 stride=2\nflatten\nlinear 3\n", why, sizeof why), 0);
    /* A layer more (the same tensors). */
    assert_int_equal(compare_texts("flatten\nlinear 3\n", "flatten\nlinear 3\nsigmoid\n", why,
                                   sizeof why), 1);
    assert_non_null(strstr(why, "b.spec:3: b.spec has a layer more than a.spec: sigmoid"));
    /* Another residual wiring. */
    assert_int_equal(compare_texts("linear 4 name=x\nrelu name=r\nlinear 4\nadd r\n",
                                   "linear 4 name=x\nrelu name=r\nlinear 4\nadd x\n", why,
                                   sizeof why), 1);
    assert_non_null(strstr(why, "a.spec:4: its layer 4 (add) reads other layers"));
    /* gpt's heads shape no tensor. */
    cdl_shape t = {16, 1, 1};
    assert_int_equal(cdl_spec_builtin("gpt:n_layer=1,n_head=2,n_embd=16", t, 65, &a), 0);
    assert_int_equal(cdl_spec_builtin("gpt:n_layer=1,n_head=4,n_embd=16", t, 65, &b), 0);
    assert_int_equal(cdl_spec_compare(&a, &b, why, sizeof why), 1);
    assert_non_null(strstr(why, "'attention heads=2', where gpt:n_layer=1,n_head=4,n_embd=16 has "
                                "'attention heads=4'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_function),
        cmocka_unit_test(test_other_function),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
