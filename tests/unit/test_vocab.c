/* cdl-generate's character vocabulary (cli/vocab.c): the checkpoint's
 * "itos" metadata back into strings (line breaks and backslashes are
 * symbols of a character vocabulary), and a prompt encoded as nanoGPT's
 * stoi does, with a character outside the vocabulary named. */
#include "testutil.h"

#include <string.h>

#include <cdl/cdl.h>

#include "cli/vocab.h"

static void test_parse(void **state)
{
    (void)state;
    char **t;
    /* {0: '\n', 1: ' ', 2: '\\', 3: 'a', 4: 'é'} as cdl-train writes it. */
    assert_int_equal(vocab_parse("\\n\n \n\\\\\na\n\xc3\xa9", 5, &t), 0);
    assert_string_equal(t[0], "\n");
    assert_string_equal(t[1], " ");
    assert_string_equal(t[2], "\\");
    assert_string_equal(t[3], "a");
    assert_string_equal(t[4], "\xc3\xa9");
    cdl_free(t);
    /* Fewer, more or empty entries than the vocabulary: damaged. */
    assert_int_equal(vocab_parse("a\nb", 3, &t), -1);
    assert_non_null(strstr(cdl_last_error(), "3 non-empty strings"));
    assert_null(t);
    assert_int_equal(vocab_parse("a\nb\nc", 2, &t), -1);
    assert_int_equal(vocab_parse("a\n\nc", 3, &t), -1);
    assert_int_equal(vocab_parse("", 1, &t), -1);
}

static void test_encode(void **state)
{
    (void)state;
    char *table[] = {"\n", " ", "a", "b", "\xc3\xa9", "ab"};
    int *ids, n;
    assert_int_equal(vocab_encode("a b\xc3\xa9\n", table, 5, &ids, &n), 0);
    int want[] = {2, 1, 3, 4, 0};
    assert_int_equal(n, 5);
    assert_memory_equal(ids, want, sizeof want);
    cdl_free(ids);
    /* The longest entry that matches: "ab" is one token. */
    assert_int_equal(vocab_encode("aab", table, 6, &ids, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 5);
    cdl_free(ids);
    /* A character outside the vocabulary: named, with its byte offset. */
    assert_int_equal(vocab_encode("ab\xe2\x82\xac!", table, 5, &ids, &n), -1);
    assert_non_null(strstr(cdl_last_error(), "'\xe2\x82\xac' (byte 2) is not in the model's "
                                             "vocabulary of 5 symbols"));
    assert_int_equal(vocab_encode("a\tb", table, 5, &ids, &n), -1);
    assert_non_null(strstr(cdl_last_error(), "'\\x09' (byte 1)"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
