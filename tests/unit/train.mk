check_PROGRAMS += tests/unit/test_train
TESTS += tests/unit/test_train
tests_unit_test_train_SOURCES = tests/unit/test_train.c
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
