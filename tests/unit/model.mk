# tests for model
check_PROGRAMS += tests/unit/test_spec tests/unit/test_model tests/unit/test_model_torch
TESTS += tests/unit/test_spec tests/unit/test_model tests/unit/test_model_torch
check_PROGRAMS += tests/unit/test_spec_gpt tests/unit/test_spec_compare
TESTS += tests/unit/test_spec_gpt tests/unit/test_spec_compare

tests_unit_test_spec_SOURCES = tests/unit/test_spec.c
tests_unit_test_spec_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_spec_LDADD = $(TEST_LDADD)

tests_unit_test_spec_gpt_SOURCES = tests/unit/test_spec_gpt.c
tests_unit_test_spec_gpt_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_spec_gpt_LDADD = $(TEST_LDADD)

tests_unit_test_spec_compare_SOURCES = tests/unit/test_spec_compare.c
tests_unit_test_spec_compare_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_spec_compare_LDADD = $(TEST_LDADD)

# Gradients against finite differences of the double reference ops.
tests_unit_test_model_SOURCES = tests/unit/test_model.c tests/unit/model_testutil.h \
	tests/unit/ref_ops.c tests/unit/ref_ops.h
tests_unit_test_model_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_model_LDADD = $(TEST_LDADD)

# Against PyTorch: tests/fixtures/*.fix from tests/fixtures/make_fixtures.py.
tests_unit_test_model_torch_SOURCES = tests/unit/test_model_torch.c tests/unit/model_testutil.h \
	tests/unit/fixture.c tests/unit/fixture.h
tests_unit_test_model_torch_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_model_torch_LDADD = $(TEST_LDADD)

EXTRA_DIST += tests/fixtures/make_fixtures.py tests/fixtures/torch_ref.py tests/fixtures/README.md \
	tests/fixtures/lenet.fix tests/fixtures/allkinds.fix tests/fixtures/optim.fix \
	tests/fixtures/make_resnet_fixture.py tests/fixtures/resnet20.fix \
	tests/fixtures/gpt_ref.py tests/fixtures/make_gpt_fixture.py tests/fixtures/gpt.fix
