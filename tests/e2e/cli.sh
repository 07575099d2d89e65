#!/usr/bin/env bash
# cdl-train's command line: help, version, and a clear one-line error with
# exit status 2 for every bad option or value.
. "${top_srcdir:-.}/tests/e2e/common.sh"

expect_status 0 "$CDL_TRAIN" --help
grep -q -- '--resume auto|never|PATH' "$TMP/out" || die "--help lacks --resume"
expect_status 0 "$CDL_TRAIN" --version
grep -qx 'cdl-train (cdl) [0-9][0-9.]* (rank contract [0-9]*)' "$TMP/out" || die "--version output"
# Two builds of one version differ in the build line (git describe of the
# source; none outside a git checkout), and the checkpoints record it.
id=$(git -C "$top_srcdir" describe --always --dirty --tags 2>/dev/null) || id=
for prog in "$CDL_TRAIN" "$CDL_EVAL" "$CDL_PREDICT" "$top_builddir/cli/cdl-generate"; do
    expect_status 0 "$prog" --version
    if [ -n "$id" ]; then
        grep -qxF "libcdl build $id" "$TMP/out" || die "$prog --version does not name the build $id: $(cat "$TMP/out")"
    else
        ! grep -q '^libcdl build' "$TMP/out" || die "$prog built outside git names a build: $(cat "$TMP/out")"
    fi
done
# OpenBLAS's kernels: on a CPU it does not know, cdl-train starts again with
# OPENBLAS_CORETYPE set to the kernels the CPU has, never the SSE3 fallback
# (cli/blas_core.c); a type the user sets is kept.
env -u OPENBLAS_CORETYPE "$CDL_TRAIN" --version >"$TMP/out" 2>"$TMP/err" || die "--version failed"
blas=$(sed -n 's/^OpenBLAS kernels: //p' "$TMP/out")
[ -n "$blas" ] || die "--version does not name OpenBLAS's kernels"
if grep -qw avx2 /proc/cpuinfo 2>/dev/null && [ "$blas" = Prescott ]; then
    die "cdl-train runs OpenBLAS's SSE3 kernels on a CPU with AVX2"
fi
[ ! -s "$TMP/err" ] || die "--version wrote to stderr: $(cat "$TMP/err")"
OPENBLAS_CORETYPE=Prescott "$CDL_TRAIN" --version >"$TMP/out" 2>&1 || die "--version failed"
grep -qx 'OpenBLAS kernels: Prescott' "$TMP/out" || die "OPENBLAS_CORETYPE=Prescott not kept"
# With a libcdl.so of another release (LD_LIBRARY_PATH to the site's, a
# $HOME install's), --version names the library's release too.
printf 'const char *cdl_version(void);\nconst char *cdl_version(void) { return "9.9.9"; }\n' \
    >"$TMP/v.c"
if "${CC:-cc}" -shared -fPIC -o "$TMP/v.so" "$TMP/v.c" 2>/dev/null; then
    LD_PRELOAD="$TMP/v.so" "$CDL_TRAIN" --version >"$TMP/out" 2>&1 || die "--version failed"
    grep -qx 'libcdl 9.9.9 (this cdl-train was built with [0-9][0-9.]*)' "$TMP/out" ||
        die "--version hides another libcdl: $(cat "$TMP/out")"
fi
expect_status 0 "$CDLRUN" --version
grep -qx 'cdlrun (cdl) [0-9][0-9.]* (rank contract [0-9]*)' "$TMP/out" || die "cdlrun --version output"

expect_status 2 "$CDL_TRAIN" --epochs 0;            expect_err "--epochs '0'"
expect_status 2 "$CDL_TRAIN" --epochs 3x;           expect_err "expected an integer"
expect_status 2 "$CDL_TRAIN" --lr -1;               expect_err "--lr '-1'"
expect_status 2 "$CDL_TRAIN" --lr nan;              expect_err "--lr 'nan'"
expect_status 2 "$CDL_TRAIN" --optimizer lbfgs;     expect_err "expected sgd, adam or adamw"
expect_status 2 "$CDL_TRAIN" --dataset imagenet;    expect_err "fashion-mnist"
expect_status 2 "$CDL_TRAIN" --schedule linear;     expect_err "--schedule 'linear'"
expect_status 2 "$CDL_TRAIN" --no-such-option;      expect_err "unknown option '--no-such-option'"
expect_status 2 "$CDL_TRAIN" --batch-size;          expect_err "needs a value"
# More Slurm CPUs than the affinity mask allows: a one-line warning, and the
# smaller count is used (checked with a bad option after it: nothing runs).
SLURM_CPUS_PER_TASK=4096 expect_status 2 "$CDL_TRAIN" --epochs 0
expect_err "SLURM_CPUS_PER_TASK is 4096 but this process may run on $(nproc) CPUs"
[ "$(grep -c warning "$TMP/err")" -eq 1 ] || die "the CPU warning is not printed once"
# OMP_NUM_THREADS alike (a shell profile's count ran that many threads on
# a smaller task, without a word).
SLURM_CPUS_PER_TASK= OMP_NUM_THREADS=4096 expect_status 2 "$CDL_TRAIN" --epochs 0
expect_err "OMP_NUM_THREADS is 4096 but this process may run on $(nproc) CPUs; cdl uses the smaller"
# An explicit --threads stands: the warning says so, not "the smaller".
more=$(($(nproc) + 1))
SLURM_CPUS_PER_TASK=4096 expect_status 2 "$CDL_TRAIN" --threads $more --epochs 0
expect_err "--threads $more but this process may run on $(nproc) CPU"
grep -q "uses the smaller" "$TMP/err" && die "--threads $more is said to be cut down"
# On a GPU the count does not matter (the CUDA backend computes on one
# thread): --device cuda was warned all the same, and auto says so.
grep -q "a run on a GPU computes on one thread" "$TMP/err" ||
    die "--device auto's CPU warning does not say a GPU run is not concerned"
SLURM_CPUS_PER_TASK= OMP_NUM_THREADS=4096 expect_status 2 "$CDL_TRAIN" --device cuda --epochs 0
grep -q warning "$TMP/err" && die "--device cuda warned about OMP_NUM_THREADS: $(cat "$TMP/err")"
expect_status 2 "$CDL_TRAIN" --device cuda --threads $more --epochs 0
grep -q warning "$TMP/err" && die "--device cuda warned about --threads $more: $(cat "$TMP/err")"
# One rank of several (cdlrun, srun --cdl-ddp: every rank prints it) says
# whose warning it is, as its errors do.
RANK=1 WORLD_SIZE=2 expect_status 2 "$CDL_TRAIN" --threads $more --epochs 0
expect_err "cdl-train: rank 1: warning: --threads $more"
# --summary: the model's layers for the data, and nothing written or trained.
expect_status 0 "$CDL_TRAIN" --model resnet20 --summary --ckpt-dir "$TMP/sum-ck" \
    --metrics "$TMP/sum.jsonl" --tensorboard "$TMP/sum-tb"
grep -q '^model resnet20: input 1x28x28, 272186 parameters' "$TMP/out" || die "--summary header"
grep -qE '^ +9  - +add <- layer1.0.bn2, #3 +16x28x28 +0$' "$TMP/out" || die "--summary add row"
grep -qE '^ +[0-9]+  linear +linear 10 +10 +650$' "$TMP/out" || die "--summary head row"
[ ! -e "$TMP/sum-ck" ] && [ ! -e "$TMP/sum.jsonl" ] && [ ! -e "$TMP/sum-tb" ] ||
    die "--summary wrote files"
# --summary refuses what the run refuses, before it prints (it printed the
# layers of a run that then failed on its options).
{ echo "a,b,label"; for i in $(seq 40); do echo "$i,$((i * 7 % 13)),$((i % 2))"; done; } >"$TMP/sum.csv"
for bad in "--augment flip" "--batch-size 64 --drop-last" "--init $TMP/none.safetensors"; do
    # shellcheck disable=SC2086
    expect_status 1 "$CDL_TRAIN" --dataset "csv:$TMP/sum.csv" --model mlp --threads 1 $bad
    cp "$TMP/err" "$TMP/run.err"
    # shellcheck disable=SC2086
    expect_status 1 "$CDL_TRAIN" --dataset "csv:$TMP/sum.csv" --model mlp --threads 1 $bad --summary
    cmp -s "$TMP/err" "$TMP/run.err" || die "--summary $bad: '$(cat "$TMP/err")', not the run's error"
    [ ! -s "$TMP/out" ] || die "--summary $bad printed before refusing: $(cat "$TMP/out")"
done
# Options on a built-in that takes none.
expect_status 1 "$CDL_TRAIN" --model lenet:stem=cifar --max-steps 1
expect_err "the built-in lenet takes no options (drop ':stem=cifar')"
# A misspelt option gets the nearest one; PyTorch's spellings get cdl's.
expect_status 2 "$CDL_TRAIN" --epohcs 3;            expect_err "did you mean --epochs?"
expect_status 2 "$CDL_TRAIN" --lerning-rate 1;      expect_err "unknown option '--lerning-rate' (see"
expect_status 2 "$CDL_TRAIN" --batch_size 64;       expect_err "use --batch-size (cdl's options use dashes)"
expect_status 2 "$CDL_TRAIN" --num_workers=2;       expect_err "use --workers"
expect_status 2 "$CDL_TRAIN" --lr-scheduler cosine; expect_err "use --schedule"
expect_status 2 "$CDL_TRAIN" --max_epochs 3;        expect_err "use --epochs"
expect_status 2 "$CDL_TRAIN" --device gpu;          expect_err "use --device cuda"
[ "$(wc -l <"$TMP/err")" -eq 1 ] || die "error is not one line"
expect_status 2 "$CDLRUN" --nproc_per_node 2 true;  expect_err "use -n"
expect_status 2 "$CDLRUN" --labl -n 2 true;         expect_err "did you mean --label?"
expect_status 2 "$CDL_TRAIN" stray;                 expect_err "unexpected argument 'stray'"
expect_status 2 "$CDL_TRAIN" --optimizer adam --nesterov; expect_err "--nesterov"
# cdl-eval's loss is the plain cross-entropy; the run's val and test losses
# of a --label-smoothing run include the smoothing term: cdl-eval says so
# (the numbers differed without a word).
"$CDL_TRAIN" --dataset synthetic --synthetic-size 200 --model mlp --epochs 1 --threads 1 \
    --label-smoothing 0.3 --ckpt-dir "$TMP/ls" -q || die "a --label-smoothing run failed"
expect_status 0 "$CDL_EVAL" "$TMP/ls/last.safetensors" --split val
expect_err "note: the loss is the plain cross-entropy; the run trained with --label-smoothing 0.3, and its val and test losses include the smoothing term"
"$CDL_TRAIN" --dataset synthetic --synthetic-size 200 --model mlp --epochs 1 --threads 1 \
    --ckpt-dir "$TMP/nols" -q || die "a run failed"
expect_status 0 "$CDL_EVAL" "$TMP/nols/last.safetensors" --split val
grep -q "smoothing" "$TMP/err" && die "a note of label smoothing for a run without: $(cat "$TMP/err")"
# Options the run would not use are refused, not ignored (Adam ran with
# beta1 0.9 under --momentum 0.95; --step-epochs without --schedule step
# ran the default cosine).
expect_status 2 "$CDL_TRAIN" --optimizer adam --momentum 0.95
expect_err "--momentum applies to --optimizer sgd only (it is adam: Adam's momentum is --beta1)"
expect_status 2 "$CDL_TRAIN" --dampening 0.1 --optimizer adamw; expect_err "--dampening applies"
expect_status 2 "$CDL_TRAIN" --beta1 0.8
expect_err "--beta1 applies to --optimizer adam and adamw only (it is sgd: add --optimizer adam or adamw, or drop --beta1)"
expect_status 2 "$CDL_TRAIN" --optimizer sgd --eps 1e-6; expect_err "--eps applies"
expect_status 2 "$CDL_TRAIN" --step-epochs 2
expect_err "--step-epochs 2 applies to --schedule step only (it is --schedule cosine): add --schedule step, or drop --step-epochs"
[ "$(wc -l <"$TMP/err")" -eq 1 ] || die "error is not one line"
# The default learning rate follows the optimizer (SGD's 0.05 diverges
# Adam); an --lr given before or after --optimizer is kept.
for c in "adamw 0.001" "adam 0.001" "sgd 0.05" "adamw 0.02 --lr 0.02 --optimizer adamw" \
         "adam 0.02 --optimizer adam --lr 0.02"; do
    set -- $c
    opt=$1 lr=$2; shift 2
    [ $# -gt 0 ] || set -- --optimizer "$opt"
    expect_status 0 "$CDL_TRAIN" "$@" --dataset synthetic --synthetic-size 64 --val-split 0 \
        --model lenet --epochs 1 --batch-size 32 --max-steps 1 --device cpu --threads 1 --no-progress
    cat "$TMP/out" "$TMP/err" | grep -q "^optimizer $opt, lr $lr: " ||
        die "$*: lr $lr not reported: $(cat "$TMP/out" "$TMP/err" | grep "^optimizer")"
done
# One of a thing is singular in the run's lines ("with 1 threads" was not).
cat "$TMP/out" "$TMP/err" | grep -q "cpu backend with 1 thread, 1 rank$" ||
    die "run header: $(cat "$TMP/out" "$TMP/err" | grep "backend with")"
# --fast-conv and CDL_FAST_CONV reach the CPU backend (its CDL_LOG=cpu
# line) and the run's header and configuration record; the option wins.
for how in "--fast-conv on" "env CDL_FAST_CONV=on" "env CDL_FAST_CONV=on --fast-conv off"; do
    set -- $how
    pre=()
    [ "$1" = env ] && { pre=("$2"); shift 2; }
    want=1
    [ "$*" = "--fast-conv off" ] && want=0
    expect_status 0 env CDL_LOG=cpu "${pre[@]}" "$CDL_TRAIN" "$@" --dataset synthetic \
        --synthetic-size 32 --val-split 0 --model resnet20 --epochs 1 --batch-size 16 \
        --max-steps 1 --device cpu --threads 1 --no-progress --metrics "$TMP/fc.jsonl"
    log=$(cat "$TMP/out" "$TMP/err")
    if [ $want = 1 ]; then
        echo "$log" | grep -q "^cdl: cpu backend with 1 thread, fast_conv" &&
            echo "$log" | grep -q "cpu backend with 1 thread, 1 rank, --fast-conv on$" ||
            die "$how: fast_conv not reported: $(echo "$log" | grep "backend with")"
    else
        echo "$log" | grep -q "^cdl: cpu backend with 1 thread$" ||
            die "$how: fast_conv reported: $(echo "$log" | grep "backend with")"
    fi
    grep -q "\"fast_conv\":$want" "$TMP/fc.jsonl" || die "$how: no fast_conv $want in the metrics"
    rm -f "$TMP/fc.jsonl"
done
# The schedule in steps: warm-up over 2 steps, cosine to 0 by step 6, the
# step records' lr as PyTorch's LinearLR then CosineAnnealingLR give them
# (step s trains at the schedule's value at s - 1); --max-steps stops the
# run without shortening the schedule, and the schedule line says so.
small="--dataset synthetic --synthetic-size 64 --val-split 0 --model mlp --epochs 5
       --batch-size 32 --device cpu --threads 1 --no-progress"
expect_status 0 "$CDL_TRAIN" $small --warmup-steps 2 --decay-steps 6 --metrics "$TMP/m.jsonl" \
    --metrics-every 1 --ckpt-dir "$TMP/sched"
grep -q "^schedule cosine: warm-up over 2 steps, then lr 0.05 decays to 0 by step 6 (--decay-steps)$" \
    "$TMP/err" || die "schedule line: $(grep '^schedule' "$TMP/err")"
# Every field of the records (the config record's too) is in docs/metrics.md.
for k in $(grep -o '"[a-z_0-9]*":' "$TMP/m.jsonl" | tr -d '":' | sort -u); do
    grep -q "\`$k\`" "${top_srcdir:-.}/docs/metrics.md" ||
        die "the metrics field '$k' is not described in docs/metrics.md"
done
lrs=$(sed -n 's/.*"type":"step".*"lr":\([^,}]*\).*/\1/p' "$TMP/m.jsonl" | tr '\n' ' ')
[ "$lrs" = "0.025 0.05 0.05 0.0426777 0.025 0.00732233 0 0 0 0 " ] || die "step lrs: $lrs"
# --min-lr: the cosine ends there, as CosineAnnealingLR's eta_min (nanoGPT's
# min_lr) puts it; in [0, --lr], for the cosine only, and kept on resume.
expect_status 0 "$CDL_TRAIN" $small --warmup-steps 2 --decay-steps 6 --min-lr 0.005 \
    --metrics "$TMP/min.jsonl" --metrics-every 1
grep -q "^schedule cosine: warm-up over 2 steps, then lr 0.05 decays to 0.005 by step 6 (--decay-steps)$" \
    "$TMP/err" || die "schedule line with --min-lr: $(grep '^schedule' "$TMP/err")"
lrs=$(sed -n 's/.*"type":"step".*"lr":\([^,}]*\).*/\1/p' "$TMP/min.jsonl" | tr '\n' ' ')
[ "$lrs" = "0.025 0.05 0.05 0.0434099 0.0275 0.0115901 0.005 0.005 0.005 0.005 " ] ||
    die "step lrs with --min-lr 0.005: $lrs"
expect_status 1 "$CDL_TRAIN" $small --min-lr 0.1
expect_err "--min-lr 0.1: give where the cosine ends, from 0 to --lr 0.05"
expect_status 1 "$CDL_TRAIN" $small --schedule step --min-lr 0.01
expect_err "only the cosine schedule ends at a floor"
expect_status 1 "$CDL_TRAIN" $small --warmup-steps 2 --decay-steps 6 --min-lr 0.001 \
    --ckpt-dir "$TMP/sched" --epochs 6 --resume-allow epochs
expect_err "--min-lr 0 -> 0.001"
expect_status 0 "$CDL_TRAIN" $small --max-steps 3
grep -q "decays to 0 by step 10 (the end of the last epoch); --max-steps 3 stops the run before, at lr 0.0452254 (--decay-steps 3 would end the decay there)$" \
    "$TMP/err" || die "no --max-steps note: $(grep '^schedule' "$TMP/err")"
# --max-steps past the epochs' end stops nothing: README's language model
# asked for 2000 steps of a corpus whose 10 default epochs are 30 steps and
# trained 30 without a word. The run says so and which --epochs would do.
expect_status 0 "$CDL_TRAIN" $small --max-steps 12
# Said as cdl-train's other messages are (it began "warning:" alone).
grep -q "^cdl-train: warning: --max-steps 12 is past the run's end: 5 epochs of 2 steps end it at step 10; give --epochs 6 (or more) to train 12 steps$" \
    "$TMP/err" || die "no warning for --max-steps past the run's end: $(cat "$TMP/err")"
# A warning of a likely mistake is not output that --quiet silences.
expect_status 0 "$CDL_TRAIN" $small --max-steps 12 --quiet
grep -q "^cdl-train: warning: --max-steps 12 is past the run's end" "$TMP/err" ||
    die "--quiet silenced the warning for --max-steps past the run's end: $(cat "$TMP/err")"
[ ! -s "$TMP/out" ] || die "--quiet printed on stdout: $(cat "$TMP/out")"
expect_status 0 "$CDL_TRAIN" $small --max-steps 10
! grep -q "past the run's end" "$TMP/err" || die "--max-steps at the run's end warned: $(cat "$TMP/err")"
# A finished run started again says why it trains nothing (it said
# "resuming from ...: epoch 6" of a 5-epoch run and nothing else).
expect_status 0 "$CDL_TRAIN" $small --ckpt-dir "$TMP/done"
expect_status 0 "$CDL_TRAIN" $small --ckpt-dir "$TMP/done"
expect_err "all 5 epochs are done: nothing to train (a larger --epochs with --resume-allow epochs goes on)"
expect_status 0 "$CDL_TRAIN" $small --epochs 1 --ckpt-dir "$TMP/done1"
expect_status 0 "$CDL_TRAIN" $small --epochs 1 --ckpt-dir "$TMP/done1"
expect_err "all 1 epoch is done: nothing to train"
# Nor does it test the final weights again when --metrics ends the run with
# their test record (a resubmitted finished job wrote a second one); a start
# stopped before that record (here: the record removed) does test them.
tested="--dataset synthetic --synthetic-size 64 --val-split 16 --model mlp --epochs 1
        --batch-size 32 --device cpu --threads 1 --no-progress --ckpt-dir $TMP/tested
        --metrics $TMP/t.jsonl"
expect_status 0 "$CDL_TRAIN" $tested
expect_status 0 "$CDL_TRAIN" $tested
expect_err "test: the final weights' result is in $TMP/t.jsonl already (the run ended before)"
! grep -q '^test ' "$TMP/out" || die "the finished run tested its weights again"
[ "$(grep -c '"type":"test"' "$TMP/t.jsonl")" = 1 ] || die "test records: $(grep -c '"type":"test"' "$TMP/t.jsonl")"
sed -i '/"type":"test"/d' "$TMP/t.jsonl"
expect_status 0 "$CDL_TRAIN" $tested
grep -q '^test  loss' "$TMP/out" || die "the untested final weights were not tested"
[ "$(grep -c '"type":"test"' "$TMP/t.jsonl")" = 1 ] || die "no test record after the rerun"
# --metrics into a pipe (/dev/stdout | tee, a FIFO) holds no earlier
# records, so it tests. It read its own pipe for them and, once the pipe
# was empty, hung for ever, deaf to SIGTERM. The FIFO is held open and
# read only after the run; timeout only guards.
mkfifo "$TMP/mf"
exec 3<>"$TMP/mf"
st=0; timeout -s KILL 30 "$CDL_TRAIN" $tested --metrics "$TMP/mf" 2>"$TMP/err" || st=$?
exec 4<"$TMP/mf" 3>&-
cat <&4 >"$TMP/out"; exec 4<&-
[ "$st" = 0 ] || die "a finished run with --metrics into a FIFO ended with $st (137: hung)"
grep -q '"type":"test"' "$TMP/out" || die "no test record into the FIFO"
# Stored in the checkpoint: a resume with another decay is refused.
expect_status 1 "$CDL_TRAIN" $small --warmup-steps 2 --decay-steps 8 --ckpt-dir "$TMP/sched" \
    --epochs 6 --resume-allow epochs
expect_err "--decay-steps 6 -> 8"
expect_status 2 "$CDL_TRAIN" --decay-steps x;        expect_err "--decay-steps 'x'"
expect_status 1 "$CDL_TRAIN" $small --schedule step --decay-steps 3
expect_err "only the cosine schedule decays over steps"
expect_status 1 "$CDL_TRAIN" $small --warmup-epochs 1 --warmup-steps 3
expect_err "both set the warm-up"
expect_status 1 "$CDL_TRAIN" $small --warmup-steps 6 --decay-steps 6
expect_err "is not below --decay-steps 6"
# A warm-up as long as the run's cosine (no --decay-steps): it never decayed,
# nor reached --lr, while the note said it decayed by the last epoch.
expect_status 1 "$CDL_TRAIN" $small --epochs 1 --warmup-steps 500
expect_err "--warmup-steps 500 is not below the cosine's "
expect_err "shorten the warm-up, add epochs, or give --decay-steps"
expect_status 1 "$CDL_TRAIN" $small --epochs 2 --warmup-epochs 2
expect_err "--warmup-epochs 2 ("
# So with a constant or step schedule: the run ended in its warm-up under a
# note saying "warm-up over N steps, then lr X", never training at --lr.
expect_status 1 "$CDL_TRAIN" $small --epochs 1 --schedule constant --warmup-steps 500
expect_err "--warmup-steps 500 is not below the run's "
expect_err "the run would end in its warm-up, its last step at lr "
expect_err "shorten the warm-up, or add epochs"
expect_status 1 "$CDL_TRAIN" $small --epochs 2 --schedule step --warmup-epochs 3
expect_err "--warmup-epochs 3 ("
expect_status 0 "$CDL_TRAIN" $small --epochs 2 --schedule step --warmup-epochs 1
# A --decay-steps past the epochs' end: the run ended at a high rate unsaid.
expect_status 0 "$CDL_TRAIN" $small --epochs 2 --decay-steps 1000
grep -qF -- "(--decay-steps); the run's 4 steps (--epochs 2) end before, at lr " "$TMP/out" "$TMP/err" ||
    die "no note of --decay-steps past the run's end: $(grep '^schedule' "$TMP/out" "$TMP/err")"
grep -qF -- "(--epochs 500 would reach step 1000)" "$TMP/out" "$TMP/err" ||
    die "the note does not name the --epochs that reach --decay-steps"
# --max-steps inside the warm-up: no --decay-steps advice (it would be refused).
expect_status 0 "$CDL_TRAIN" $small --epochs 100 --warmup-steps 50 --max-steps 2
grep -qF -- "--max-steps 2 stops the run inside the warm-up, at lr " "$TMP/out" "$TMP/err" ||
    die "no note of --max-steps inside the warm-up"
# The environment is read by cdl-train (libcdl takes its settings by value).
CDL_TF32=maybe expect_status 2 "$CDL_TRAIN" --epochs 1;        expect_err "CDL_TF32 'maybe'"
CDL_DDP_BUCKET_KB=0 expect_status 2 "$CDL_TRAIN" --epochs 1;   expect_err "CDL_DDP_BUCKET_KB '0'"
CDL_CUDA_GRAPHS=maybe expect_status 2 "$CDL_TRAIN" --epochs 1; expect_err "CDL_CUDA_GRAPHS 'maybe'"
CDL_FAST_CONV=yes expect_status 2 "$CDL_TRAIN" --epochs 1;     expect_err "CDL_FAST_CONV 'yes'"
expect_status 2 "$CDL_TRAIN" --tf32 maybe;          expect_err "--tf32 'maybe'"
expect_status 2 "$CDL_TRAIN" --fast-conv 1;         expect_err "--fast-conv '1'"
# Adam's betas as PyTorch checks them: 0 <= beta < 1.
expect_status 2 "$CDL_TRAIN" --beta2 1;             expect_err "not including, 1"
expect_status 2 "$CDL_TRAIN" --beta1 -0.1;          expect_err "--beta1 '-0.1'"
# A 100 KB value is echoed cut short.
big=$(head -c 100000 /dev/zero | tr '\0' 7)
expect_status 2 "$CDL_TRAIN" --lr "$big";           expect_err "777..."
[ "$(wc -c <"$TMP/err")" -lt 300 ] || die "a 100 KB value is echoed whole"
expect_status 2 "$CDL_TRAIN" "--$big";              expect_err "777..."
[ "$(wc -c <"$TMP/err")" -lt 300 ] || die "a 100 KB option name is echoed whole"

# Every backend docs/data-parallel.md lists is accepted (one process: unused).
expect_status 2 "$CDL_TRAIN" --dist-backend hier:tcp;  expect_err "hier:store"
expect_status 0 "$CDL_TRAIN" --dist-backend hier:store --dataset synthetic --synthetic-size 64 \
    --model mlp --epochs 1 --batch-size 32 --quiet

# Runtime errors: exit 1, naming what is wrong.
expect_status 1 "$CDL_TRAIN" --data-dir "$TMP/none" --epochs 1
expect_err "$TMP/none"
expect_status 1 "$CDL_TRAIN" --model "$TMP/missing.spec" --dataset synthetic --epochs 1
expect_err "missing.spec"
printf 'conv2d 6 kernel=5\nbogus 3\n' >"$TMP/bad.spec"
expect_status 1 "$CDL_TRAIN" --model "$TMP/bad.spec" --dataset synthetic --epochs 1
expect_err "bad.spec:2"
expect_status 1 "$CDL_TRAIN" --dataset synthetic --resume "$TMP/nope.safetensors"
expect_err "nope.safetensors"
expect_status 1 "$CDL_TRAIN" --device cuda --dataset synthetic --epochs 1
expect_err "--device cpu"
# Two runs in one --ckpt-dir would overwrite each other's checkpoints: the
# second is refused while the first holds the directory's lock (held here
# by flock(1), as a running cdl-train holds it), and runs once it is free.
small="--dataset synthetic --synthetic-size 64 --model mlp --epochs 1 --device cpu --threads 1"
expect_status 0 "$CDL_TRAIN" $small --ckpt-dir "$TMP/shared" --quiet
grep -q "^pid [0-9]* on .* since " "$TMP/shared/.lock" || die "the lock file names no holder"
if command -v flock >/dev/null; then
    expect_status 1 flock "$TMP/shared/.lock" "$CDL_TRAIN" $small --ckpt-dir "$TMP/shared" --quiet
    expect_err "--ckpt-dir $TMP/shared is in use by another run (pid "
    expect_status 0 "$CDL_TRAIN" $small --ckpt-dir "$TMP/shared" --quiet
fi
# --peak-tflops for an image model, whose MFU is not counted: said, not
# silently ignored.
expect_status 0 "$CDL_TRAIN" --dataset synthetic --synthetic-size 64 --epochs 1 --threads 1 \
    --workers 0 --peak-tflops 100
expect_err "--peak-tflops: no MFU for lenet"
echo "PASS: cdl-train command line"
