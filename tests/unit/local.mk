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
endif
EXTRA_DIST += tests/unit/testutil.h lib/core/rng.h lib/dist/contract.h
