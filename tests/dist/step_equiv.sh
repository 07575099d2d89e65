# Sourced by the equivalence tests: one training step at a time, from the
# same checkpoint, compared by its update (docs/hacking.md, "Comparing
# floating-point results"). Needs $builddir, $tmp and fail().
#
# Why one step: runs that sum the same gradient in another order (more
# ranks, another backend) agree to a few float32 roundings after a step,
# but over a whole run a rounding difference can grow until it is anything
# (each ReLU or max-pool that flips sends it elsewhere), and where it ends
# depends on the CPU's BLAS kernels. One step from the same weights never
# compounds: the difference stays what the summation order makes it.
#
# The model: LeNet's layers and shapes without ReLU, max-pool replaced by
# average-pool. Its parameters and buckets are LeNet's, but its gradient is
# a smooth function of the weights, so a rounding difference in the
# forward pass (another GEMM kernel for another batch split) cannot flip a
# branch and change a gradient by a whole sample's share.
STEP_MODEL=$tmp/smooth-lenet.spec
printf 'conv2d 6 kernel=5\navgpool2d 2\nconv2d 16 kernel=5\navgpool2d 2\nflatten\nlinear 120\nlinear 84\nlinear 10\n' \
    >"$STEP_MODEL"

# The tolerance, relative to the tensor's largest update (weights_cmp
# --base). Two summation orders of the same float32 gradient differ by
# about sqrt(n) * 2^-24 of the terms' magnitude for n terms, a few 1e-7 of
# the update here (measured: at most 3e-7 with OpenBLAS's Haswell,
# Sandybridge and Prescott kernels, ranks 1 to 4, shm and hier; the
# momentum buffers, which checkpoints hold as tensors since format 3, up to
# 5.2e-7 on Haswell). One sample
# more or less in a global batch of 32 changes the update by ~1e-1 (the
# negative check in train_equiv.sh), so 1e-5 is 30x from either.
STEP_TOL=1e-5

# step_same REF DIR BASE [TOL]: DIR's step from BASE (a checkpoint
# directory) equals REF's within TOL of the update.
step_same() {
    out=$("$builddir/tests/dist/weights_cmp" "$tmp/$1/last.safetensors" "$tmp/$2/last.safetensors" \
        --base "$3/last.safetensors" --rel "${4:-$STEP_TOL}" 2>&1)
    rc=$?
    echo "  $2 vs $1: ${out##*difference }"
    [ $rc -eq 0 ] || fail "the step of $2 differs from that of $1 beyond ${4:-$STEP_TOL} of the update"
}
