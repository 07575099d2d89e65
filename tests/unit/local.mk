# Unit tests (cmocka). Each area keeps its tests in its own fragment.
if HAVE_CMOCKA
include tests/unit/core.mk
include tests/unit/kernels.mk
include tests/unit/model.mk
include tests/unit/optim.mk
include tests/unit/data.mk
include tests/unit/ckpt.mk
include tests/unit/dist.mk
include tests/unit/train.mk
include tests/unit/spank.mk
include tests/unit/launcher.mk
include tests/unit/generate.mk
endif
EXTRA_DIST += tests/unit/testutil.h tests/unit/topo_testutil.h lib/core/rng.h tests/test_rng.h

# make check-valgrind: the unit tests under valgrind (memcheck), failing on
# errors and on definite or indirect leaks; script tests are left out. The
# slow tests run their cases at smaller sizes there (CDL_TEST_SMALL,
# test_size in testutil.h) and hang guards are longer (CDL_TEST_SLOW).
# The longest under valgrind start first (make -j runs TESTS in order).
# Their time goes to FMA instructions (the AVX2 conv and linear kernels):
# valgrind emulates every lane of one through a helper call: some 70% of
# memcheck's time on a training run of lenet or the mlp, where 280M plain
# instructions fewer (half of the run's) saved 5%. So the training tests
# take fewer samples in smaller batches there, for the same steps.
VALGRIND_FLAGS = --leak-check=full --show-leak-kinds=definite,indirect \
	--errors-for-leak-kinds=definite,indirect --error-exitcode=1 --quiet
VALGRIND_FIRST = tests/unit/test_train tests/unit/test_kernels tests/unit/test_kernels_linear \
	tests/unit/test_dist_coll tests/unit/test_train_resume
check-valgrind:
	$(MAKE) $(AM_MAKEFLAGS) check LOG_COMPILER="valgrind $(VALGRIND_FLAGS)" \
	  TESTS="$(filter $(VALGRIND_FIRST),$(TESTS)) $(filter-out %.sh $(VALGRIND_FIRST),$(TESTS))" \
	  TESTS_ENVIRONMENT="CDL_TEST_SCOPE=unit CDL_TEST_SMALL=1 CDL_TEST_SLOW=1"
.PHONY: check-valgrind
