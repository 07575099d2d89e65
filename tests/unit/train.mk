check_PROGRAMS += tests/unit/test_train
TESTS += tests/unit/test_train
tests_unit_test_train_SOURCES = tests/unit/test_train.c tests/unit/train_testutil.h
tests_unit_test_train_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_train_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/unit/test_gpu_pipeline
TESTS += tests/unit/test_gpu_pipeline
tests_unit_test_gpu_pipeline_SOURCES = tests/unit/test_gpu_pipeline.c
tests_unit_test_gpu_pipeline_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_gpu_pipeline_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/unit/test_train_resume
TESTS += tests/unit/test_train_resume
tests_unit_test_train_resume_SOURCES = tests/unit/test_train_resume.c
tests_unit_test_train_resume_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_train_resume_LDADD = $(TEST_LDADD)
EXTRA_DIST += tests/fixtures/ckpt-v2/README.md tests/fixtures/ckpt-v2/tiny.spec \
	tests/fixtures/ckpt-v2/epoch1.safetensors tests/fixtures/ckpt-v2/final.safetensors
check_PROGRAMS += tests/unit/test_split
TESTS += tests/unit/test_split
tests_unit_test_split_SOURCES = tests/unit/test_split.c
tests_unit_test_split_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_split_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/unit/test_train_lm
TESTS += tests/unit/test_train_lm
tests_unit_test_train_lm_SOURCES = tests/unit/test_train_lm.c tests/unit/train_testutil.h
tests_unit_test_train_lm_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_train_lm_LDADD = $(TEST_LDADD)
# A gpt's checkpoint: PyTorch's state_dict keys (the tied lm_head.weight too), bitwise resume.
check_PROGRAMS += tests/unit/test_ckpt_gpt
TESTS += tests/unit/test_ckpt_gpt
tests_unit_test_ckpt_gpt_SOURCES = tests/unit/test_ckpt_gpt.c tests/unit/model_testutil.h \
	tests/unit/fixture.c tests/unit/fixture.h
tests_unit_test_ckpt_gpt_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_ckpt_gpt_LDADD = $(TEST_LDADD)
# --stage auto: copies of killed runs are swept, copies in use are not.
check_PROGRAMS += tests/unit/test_stage
TESTS += tests/unit/test_stage
tests_unit_test_stage_SOURCES = tests/unit/test_stage.c
tests_unit_test_stage_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_stage_LDADD = $(TEST_LDADD)
