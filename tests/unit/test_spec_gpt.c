/* Sequence layers in specs (embedding, posembedding, layernorm, attention,
 * linear per position, tied linear), the gpt built-in and the spec file's
 * gpt line: names, shapes, sizes left to the data, errors. No backend. */
#include "testutil.h"

#include <string.h>
#include <unistd.h>

#include <cdl/cdl.h>

static cdl_model_spec spec, other;   /* large: not on the stack */
static cdl_shape sh[CDL_MAX_LAYERS + 1];

static int find(const cdl_model_spec *s, const char *name)
{
    for (int i = 0; i < s->nlayers; i++)
        if (!strcmp(s->layers[i].name, name))
            return i;
    return -1;
}

static void assert_error(const char *want)
{
    if (!strstr(cdl_last_error(), want))
        fail_msg("error '%s' lacks '%s'", cdl_last_error(), want);
}

/* nanoGPT's module names, sizes and GPT-2 init in the built-in. */
static void test_gpt_builtin(void **state)
{
    (void)state;
    cdl_shape in = {16, 1, 1};
    assert_true(cdl_spec_is_builtin("gpt"));
    assert_true(cdl_spec_is_builtin("gpt:n_layer=2"));
    assert_false(cdl_spec_is_builtin("gpt2"));
    assert_int_equal(cdl_spec_builtin("gpt:n_layer=2,n_head=4,n_embd=32", in, 65, &spec), 0);
    static const char *const names[] = {
        "transformer.wte", "transformer.wpe", "transformer.h.0.ln_1",
        "transformer.h.0.attn.c_attn", "transformer.h.0.attn.c_proj", "transformer.h.0.ln_2",
        "transformer.h.0.mlp.c_fc", "transformer.h.0.mlp.c_proj", "transformer.h.1.ln_1",
        "transformer.h.1.mlp.c_proj", "transformer.ln_f", "lm_head"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (find(&spec, names[i]) < 0)
            fail_msg("no layer %s", names[i]);
    const cdl_layer_spec *wte = &spec.layers[find(&spec, "transformer.wte")];
    assert_int_equal(wte->kind, CDL_LAYER_EMBEDDING);
    assert_int_equal(wte->vocab, 65);
    assert_int_equal(wte->out, 32);
    assert_true(wte->init_std == 0.02f);
    const cdl_layer_spec *wpe = &spec.layers[find(&spec, "transformer.wpe")];
    assert_int_equal(wpe->block, 16);   /* the input's length */
    const cdl_layer_spec *proj = &spec.layers[find(&spec, "transformer.h.1.mlp.c_proj")];
    assert_true(proj->init_std == (float)(0.02 / 2.0));   /* 0.02 / sqrt(2 * n_layer) */
    const cdl_layer_spec *head = &spec.layers[spec.nlayers - 1];
    assert_string_equal(head->name, "lm_head");
    assert_int_equal(head->tie, find(&spec, "transformer.wte") + 1);
    assert_int_equal(head->bias, 0);
    assert_int_equal(spec.layers[find(&spec, "transformer.h.0.attn.c_attn") + 1].heads, 4);
    /* dropout 0: no dropout layers */
    for (int i = 0; i < spec.nlayers; i++)
        assert_int_not_equal(spec.layers[i].kind, CDL_LAYER_DROPOUT);

    assert_int_equal(cdl_spec_infer(&spec, in, sh), 0);
    cdl_shape out = sh[spec.nlayers];
    assert_int_equal(out.c, 16);   /* (T, 1, V): logits at every position */
    assert_int_equal(out.h, 1);
    assert_int_equal(out.w, 65);
    int attn = find(&spec, "transformer.h.0.attn.c_attn") + 1;
    assert_int_equal(sh[attn].w, 96);       /* c_attn: 3C */
    assert_int_equal(sh[attn + 1].w, 32);   /* attention: C */

    /* Options: bias, dropout, a block larger than the data's sequences. */
    assert_int_equal(cdl_spec_builtin("gpt:n_layer=1,n_head=2,n_embd=8,bias=false,dropout=0.1,"
                                      "block_size=32", in, 10, &spec), 0);
    assert_int_equal(spec.layers[find(&spec, "transformer.wpe")].block, 32);
    assert_int_equal(spec.layers[find(&spec, "transformer.ln_f")].bias, 0);
    int drops = 0;
    for (int i = 0; i < spec.nlayers; i++)
        drops += spec.layers[i].kind == CDL_LAYER_DROPOUT;
    assert_int_equal(drops, 3);   /* after the embeddings and each projection */
    assert_int_equal(cdl_spec_infer(&spec, in, sh), 0);

    /* The deepest gpt fits CDL_MAX_LAYERS, with its dropout layers. */
    assert_int_equal(cdl_spec_builtin("gpt:n_layer=33,n_head=1,n_embd=4,dropout=0.1", in, 10,
                                      &spec), 0);
    assert_int_equal(cdl_spec_infer(&spec, in, sh), 0);
    assert_int_equal(cdl_spec_builtin("gpt:n_layer=34", in, 10, &spec), -1);
    assert_error("gpt n_layer=34: use a whole number from 1 to 33");
    assert_int_equal(cdl_spec_builtin("gpt:n_head=3,n_embd=32", in, 10, &spec), -1);
    assert_error("n_head=3 does not divide n_embd=32");
    assert_int_equal(cdl_spec_builtin("gpt:n_layers=2", in, 10, &spec), -1);
    assert_error("gpt option 'n_layers=2'");
    assert_int_equal(cdl_spec_builtin("gpt:vocab_size=50", in, 10, &spec), -1);
    assert_error("vocab_size=50 but the data has 10 tokens: use vocab_size=10, or give "
                 "tokens:DIR data --vocab-size 50");
    assert_int_equal(cdl_spec_builtin("gpt:block_size=8", in, 10, &spec), -1);
    assert_error("block_size=8 but the data's sequences have 16 tokens");
    assert_int_equal(cdl_spec_builtin("gpt", (cdl_shape){3, 32, 32}, 10, &spec), -1);
    assert_error("a gpt reads sequences of token ids");

    assert_int_equal(cdl_spec_block_size("gpt:block_size=128,n_layer=2"), 128);
    assert_int_equal(cdl_spec_block_size("gpt"), 0);
    assert_int_equal(cdl_spec_block_size("lenet"), 0);
    assert_int_equal(cdl_spec_block_size("gpt:bias=maybe"), -1);
}

/* A spec file's gpt line equals the built-in; sizes it leaves out come
 * from the data through cdl_spec_fit. */
static void test_gpt_line(void **state)
{
    (void)state;
    cdl_shape in = {16, 1, 1};
    assert_int_equal(cdl_spec_parse("# a char GPT\ngpt n_layer=2 n_head=4 n_embd=32\n", "g.spec",
                                    &spec), 0);
    assert_int_equal(cdl_spec_infer(&spec, in, sh), -1);
    assert_error("vocabulary is not known");
    /* --model's comma syntax on a spec line: one word, n_layer='1,n_head=4'. */
    assert_int_equal(cdl_spec_parse("gpt n_layer=1,n_head=4,n_embd=32\n", "g.spec", &other),
                     -1);
    assert_error("g.spec:1: gpt option 'n_layer=1,n_head=4,n_embd=32' holds a comma: a gpt line "
                 "of a spec file separates its options by spaces");
    assert_int_equal(cdl_spec_fit(&spec, in, 65), 0);
    assert_int_equal(cdl_spec_infer(&spec, in, sh), 0);
    assert_int_equal(cdl_spec_builtin("gpt:n_layer=2,n_head=4,n_embd=32", in, 65, &other), 0);
    assert_int_equal(spec.nlayers, other.nlayers);
    for (int i = 0; i < spec.nlayers; i++) {
        const cdl_layer_spec *a = &spec.layers[i], *b = &other.layers[i];
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->kind, b->kind);
        assert_int_equal(a->out, b->out);
        assert_int_equal(a->vocab, b->vocab);
        assert_int_equal(a->block, b->block);
        assert_int_equal(a->tie, b->tie);
        assert_int_equal(a->nin, b->nin);
        assert_memory_equal(a->in, b->in, sizeof a->in);
    }

    assert_int_equal(cdl_spec_parse("gpt n_layer=1 n_head=2 n_embd=8 vocab_size=50 "
                                    "block_size=8\n", "g.spec", &spec), 0);
    assert_int_equal(cdl_spec_fit(&spec, (cdl_shape){8, 1, 1}, 10), -1);
    assert_error("vocabulary is 50 tokens but the data has 10");
    assert_int_equal(cdl_spec_fit(&spec, (cdl_shape){8, 1, 1}, 50), 0);
    assert_int_equal(cdl_spec_infer(&spec, (cdl_shape){16, 1, 1}, sh), -1);
    assert_error("sequence be at most the block");

    /* cdl_spec_block_size reads a spec file's block. */
    char dir[64], path[96];
    assert_int_equal(test_mkdtemp(dir, sizeof dir, "spec-gpt"), 0);
    snprintf(path, sizeof path, "%s/g.spec", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("gpt n_layer=1 n_head=2 n_embd=8 block_size=24\n", f);
    fclose(f);
    assert_int_equal(cdl_spec_block_size(path), 24);
    /* An input line gives the window itself, which may be shorter. */
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("input 16x1x1\ngpt n_layer=1 n_head=2 n_embd=8 block_size=24\n", f);
    fclose(f);
    assert_int_equal(cdl_spec_block_size(path), 16);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("input 32x1x1\ngpt n_layer=1 n_head=2 n_embd=8\n", f);
    fclose(f);
    assert_int_equal(cdl_spec_block_size(path), 32);
    unlink(path);
    rmdir(dir);

    assert_int_equal(cdl_spec_parse("gpt n_layer=1\ngpt n_layer=1\n", "g.spec", &spec), -1);
    assert_error("g.spec:2: a second gpt line");
    assert_int_equal(cdl_spec_parse("linear 3\ngpt n_layer=1\n", "g.spec", &spec), -1);
    assert_error("g.spec:2: the gpt line must come before any layer");
    /* Nor after it: the gpt line ends at lm_head, as nanoGPT's GPT. */
    assert_int_equal(cdl_spec_parse("gpt n_layer=1\nrelu\nlinear 256\n", "g.spec", &spec), -1);
    assert_error("g.spec:2: a layer after the gpt line");
    assert_int_equal(cdl_spec_parse("block b\nrelu\nend\ngpt n_layer=1\nuse b name=x\n",
                                    "g.spec", &spec), -1);
    assert_error("g.spec:5: a layer after the gpt line");
    assert_int_equal(cdl_spec_parse("gpt dropout=1\n", "g.spec", &spec), -1);
    assert_error("g.spec:1: gpt dropout=1: use a probability");
}

/* Hand-written sequence specs: shapes, automatic names, errors. */
static void test_sequence_layers(void **state)
{
    (void)state;
    cdl_shape in = {6, 1, 1};
    const char *text = "embedding 20 12\n"        /* 6x1x12 */
                       "posembedding 8 12\n"
                       "layernorm bias=false eps=1e-6\n"
                       "linear 36\n"              /* 6x1x36 */
                       "attention heads=3\n"      /* 6x1x12 */
                       "gelu\n"
                       "flatten\n"                /* 72 */
                       "layernorm\n"
                       "linear 5\n";
    assert_int_equal(cdl_spec_parse(text, "s.spec", &spec), 0);
    assert_string_equal(spec.layers[0].name, "emb1");
    assert_string_equal(spec.layers[1].name, "pos1");
    assert_string_equal(spec.layers[2].name, "ln1");
    assert_string_equal(spec.layers[7].name, "ln2");
    assert_true(spec.layers[2].eps == 1e-6f);
    assert_int_equal(cdl_spec_infer(&spec, in, sh), 0);
    const int want[10][3] = {{6, 1, 1},  {6, 1, 12}, {6, 1, 12}, {6, 1, 12}, {6, 1, 36},
                             {6, 1, 12}, {6, 1, 12}, {72, 1, 1}, {72, 1, 1}, {5, 1, 1}};
    for (int i = 0; i < 10; i++) {
        assert_int_equal(sh[i].c, want[i][0]);
        assert_int_equal(sh[i].h, want[i][1]);
        assert_int_equal(sh[i].w, want[i][2]);
    }

    static const struct {
        const char *text, *err;
    } bad[] = {
        {"embedding 20 12\nconv2d 3 kernel=1\n", "s.spec:2: conv2d works on images, but its "
                                                 "input is a sequence (6 positions of 12"},
        {"embedding 20 12\nlinear 30\nattention heads=4\n", "s.spec:3: attention heads=4 reads q"},
        {"linear 4\nattention heads=1\n", "s.spec:2: attention needs a sequence"},
        {"embedding 20 12\nposembedding 4 12\n", "s.spec:2: posembedding 4 12 (block x size) on "
                                                  "a sequence of 6 x 12"},
        {"embedding 20 12\nlinear 12\nembedding 20 12\n", "s.spec:3: embedding reads token ids"},
        {"embedding 20 12 name=wte\nlinear 21 tie=wte\n", "s.spec:2: a linear 12 -> 21 cannot "
                                                           "share the weight of the embedding"},
        {"embedding 20 12 name=wte\nlinear 20 tie=wte\nlinear 12\nlinear 20 tie=wte\n",
         "s.spec:4: 'wte' is already tied to the linear at layer 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(cdl_spec_parse(bad[i].text, "s.spec", &spec), 0);
        assert_int_equal(cdl_spec_infer(&spec, in, sh), -1);
        assert_error(bad[i].err);
    }
    static const struct {
        const char *text, *err;
    } badparse[] = {
        {"attention\n", "s.spec:1: attention needs heads=H"},
        {"linear 4 name=a\nlinear 4 tie=a\n", "s.spec:2: tie=a: a linear ties its weight to an "
                                               "embedding layer, and a is linear"},
        {"embedding 20\n", "s.spec:1: embedding is missing its sizes"},
        {"linear 0\n", "s.spec:1: linear output size 0 is out of range"},
        {"layernorm heads=2\n", "unknown key 'heads' for layernorm"},
    };
    for (size_t i = 0; i < sizeof badparse / sizeof badparse[0]; i++) {
        assert_int_equal(cdl_spec_parse(badparse[i].text, "s.spec", &spec), -1);
        assert_error(badparse[i].err);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_builtin),
        cmocka_unit_test(test_gpt_line),
        cmocka_unit_test(test_sequence_layers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
