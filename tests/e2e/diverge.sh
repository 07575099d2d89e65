#!/usr/bin/env bash
# A run that diverges (SGD at --lr 1000: the loss overflows within a few
# steps). Its weights turn non-finite at a step whose own loss is still
# finite (the update overflows, not the forward pass): a checkpoint due at
# that step must not replace last.safetensors (it did, and every resume then
# failed at its first step, with no good checkpoint left); the error names
# the step and what to do. A NaN loss names the step as the step records do
# (it said one less) and the checkpoint to resume from.
. "${top_srcdir:-.}/tests/e2e/common.sh"
PY=${CDL_TEST_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || { echo "SKIP: no $PY"; exit 77; }

for i in $(seq 3000); do echo "line $i of a small text, with some words $((i * 7 % 13))"; done >"$TMP/lm.txt"
run() {   # run DIR CKPT_EVERY [OPTION...]: the diverging run, a step record every step
    local dir=$1 every=$2
    shift 2
    "$CDL_TRAIN" --dataset "text:$TMP/lm.txt" --model gpt:n_layer=1,n_head=1,n_embd=16 \
        --block-size 16 --batch-size 4 --optimizer sgd --lr 1000 --epochs 100 --max-steps 100 \
        --threads 1 --workers 0 --ckpt-dir "$TMP/$dir" --ckpt-every "$every" --metrics-every 1 \
        --metrics "$TMP/$dir.jsonl" -q "$@"
}
last_record() { sed -n 's/.*"type":"step".*"step":\([0-9]*\),.*/\1/p' "$TMP/$1.jsonl" | tail -n 1; }
# Which tensors of a checkpoint hold a NaN or an infinity, and its step.
check="import json, math, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); d = b[8 + n:]; meta = h.pop('__metadata__')
bad = [k for k, t in h.items() if t['dtype'] == 'F32' and not all(map(math.isfinite,
       struct.unpack('<%df' % ((t['data_offsets'][1] - t['data_offsets'][0]) // 4),
                     d[t['data_offsets'][0]:t['data_offsets'][1]])))]
print(meta['step'], ' '.join(bad))"

# A checkpoint every step: the one after the step that overflowed is refused.
expect_status 1 run every 1
s=$(last_record every)
[ -n "$s" ] && [ "$s" -ge 2 ] || die "the run diverged before its second step record: $s"
expect_err "$TMP/every/last.safetensors not written:"
expect_err "of the model or its optimizer state after step $s are NaN or infinite"
expect_err "the checkpoints in $TMP/every are left as they were, from before: resume from them with a lower learning rate (--lr X --resume-allow lr), or with the gradient norm clipped (--clip-grad 1 --resume-allow clip-grad)"
read -r cstep bad < <("$PY" -c "$check" "$TMP/every/last.safetensors") || die "cannot read last"
[ "$cstep" = $((s - 1)) ] || die "last.safetensors holds step $cstep, not $((s - 1))"
[ -z "$bad" ] || die "last.safetensors holds non-finite values in: $bad"
ls -A "$TMP/every" | grep -q tmp && die "a temporary file is left: $(ls -A "$TMP/every")"

# A checkpoint every 1000 steps (none before the divergence): the NaN loss
# stops the run at the step after the last record, saying there is no
# checkpoint. That record's gradient norm, not finite, is in it ("nan" or
# "inf": JSON has neither) and in TensorBoard (it was left out of both).
expect_status 1 run none 1000 --tensorboard "$TMP/tb"
s=$(last_record none)
tail -n 1 "$TMP/none.jsonl" | grep -Eq '"step":'"$s"',.*"grad_norm":"(nan|inf)"' ||
    die "the diverged step's record has no non-finite grad_norm: $(tail -n 1 "$TMP/none.jsonl")"
"$PY" -c "import glob, json, math, sys, subprocess
f = glob.glob(sys.argv[1] + '/events.out.tfevents.*')[0]
d = json.loads(subprocess.check_output([sys.executable, sys.argv[2], f]))
last = d['scalars']['step/grad_norm'][-1]
assert last[0] == int(sys.argv[3]) and not math.isfinite(last[1]), last" \
    "$TMP/tb" "$top_srcdir/tests/e2e/tfevents_read.py" "$s" ||
    die "TensorBoard lacks the diverged step's non-finite step/grad_norm"
expect_err "loss is "
expect_err " at step $((s + 1)): training diverged; no checkpoint to resume from: start again with a lower --lr"

# The same run resumed from a checkpoint of its first step: the NaN loss
# names that checkpoint.
"$CDL_TRAIN" --dataset "text:$TMP/lm.txt" --model gpt:n_layer=1,n_head=1,n_embd=16 \
    --block-size 16 --batch-size 4 --optimizer sgd --lr 1000 --epochs 100 --max-steps 1 \
    --threads 1 --workers 0 --ckpt-dir "$TMP/one" -q || die "one step failed"
expect_status 1 run one 1000
expect_err "training diverged; resume from the last checkpoint, $TMP/one/last.safetensors (step 1), with a lower learning rate (--lr X --resume-allow lr), or with the gradient norm clipped (--clip-grad 1 --resume-allow clip-grad)"

# LeNet at --lr 100 with a checkpoint every step: the weights of step 5 are
# finite (their loss is 1e31), so last.safetensors holds them, and their
# loss at step 6 is NaN. A resume from last fails there again whatever the
# --lr, which is what the error told the user to do (a loop): it names an
# earlier checkpoint instead, and a resume from that one trains.
lenet=(--dataset synthetic --synthetic-size 2000 --epochs 1 --threads 1 --workers 0
       --ckpt-every 1 -q)
expect_status 1 "$CDL_TRAIN" "${lenet[@]}" --ckpt-dir "$TMP/k" --keep-last 2 --lr 100
expect_err "loss is nan at step 6: training diverged; the last checkpoint, $TMP/k/last.safetensors, holds the weights of step 5 that gave this loss, so a resume from it fails here again whatever the learning rate: resume from an earlier one, --resume $TMP/k/step-00000004.safetensors (step 4), with a lower learning rate"
expect_status 1 "$CDL_TRAIN" "${lenet[@]}" --ckpt-dir "$TMP/k" --lr 0.01 --resume-allow lr
expect_err "loss is nan at step 6: training diverged; the last checkpoint"
"$CDL_TRAIN" "${lenet[@]}" --ckpt-dir "$TMP/k" --lr 0.01 --resume-allow lr --resume "$TMP/k/step-00000004.safetensors" ||
    die "the resume from the checkpoint the error named failed"
# That run's last.safetensors is of step 29 now. A resume from step 5's file
# fails at once; the file that holds those weights is step 5's, not last
# (which the error named, as if it were from before).
expect_status 1 "$CDL_TRAIN" "${lenet[@]}" --ckpt-dir "$TMP/k" --lr 0.01 --resume-allow lr \
    --resume "$TMP/k/step-00000005.safetensors"
expect_err "loss is nan at step 6: training diverged; the last checkpoint, $TMP/k/step-00000005.safetensors, holds the weights of step 5 that gave this loss, so a resume from it fails here again whatever the learning rate: resume from an earlier one, --resume $TMP/k/step-00000004.safetensors (step 4)"
# A resume from step 3 that diverges again, at step 18, with numbered
# files of the first run's steps 4 and 5 still there (no --keep-last to
# prune them): those are the abandoned run's, whose weights went on to
# NaN, not this run's past; step 3's file, where it began, is named.
"$CDL_TRAIN" "${lenet[@]}" --ckpt-dir "$TMP/b" --keep-last 3 --lr 100 2>/dev/null
ls "$TMP/b/step-00000003.safetensors" "$TMP/b/step-00000005.safetensors" >/dev/null ||
    die "no numbered checkpoints: $(ls "$TMP/b")"
expect_status 1 "$CDL_TRAIN" "${lenet[@]}" --ckpt-dir "$TMP/b" --lr 100 --clip-grad 1 \
    --resume-allow clip-grad --resume "$TMP/b/step-00000003.safetensors"
expect_err "holds the weights of step 17 that gave this loss, so a resume from it fails here again whatever the learning rate: resume from an earlier one, --resume $TMP/b/step-00000003.safetensors (step 3)"
# Without numbered checkpoints there is none earlier: start again.
expect_status 1 "$CDL_TRAIN" "${lenet[@]}" --ckpt-dir "$TMP/k1" --lr 100
expect_err "no earlier checkpoint is kept (--keep-last N keeps some): start again with a lower --lr or --clip-grad 1 (--resume never)"

# --init of weights holding a NaN (a checkpoint edited, or PyTorch's of a
# diverged model, saved without a word) is refused naming the file and the tensor; it trained
# and blamed the learning rate ("loss is nan at step 1: training diverged;
# start again with a lower --lr").
"$PY" -c "import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); d = bytearray(b[8 + n:]); del h['__metadata__']['cdl_checksum']
o = h['transformer.ln_f.weight']['data_offsets'][0] + 4; d[o:o + 4] = struct.pack('<f', float('nan'))
j = json.dumps(h).encode(); j += b' ' * (-len(j) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(j)) + j + d)" \
    "$TMP/one/last.safetensors" "$TMP/nan.safetensors" || die "cannot write nan.safetensors"
expect_status 1 "$CDL_TRAIN" --dataset "text:$TMP/lm.txt" --model gpt:n_layer=1,n_head=1,n_embd=16 \
    --block-size 16 --batch-size 4 --lr 0.01 --max-steps 1 --threads 1 --workers 0 \
    --ckpt-dir "$TMP/nan" --init "$TMP/nan.safetensors"
expect_err "$TMP/nan.safetensors: tensor 'transformer.ln_f.weight' holds 1 NaN or infinite value"
! grep -q "lower --lr" "$TMP/err" || die "--init of NaN weights blamed the learning rate"
# Clipping already, with no checkpoint: the advice is a lower --lr only (it
# said "or --clip-grad 1" to a run that clipped, where the checkpoint
# messages left clipping out).
expect_status 1 "$CDL_TRAIN" --dataset synthetic --synthetic-size 2000 --epochs 1 --threads 1 \
    --workers 0 -q --lr 100 --clip-grad 1e30
expect_err "training diverged; no checkpoint to resume from: start again with a lower --lr"
! grep -q -- "--clip-grad 1" "$TMP/err" || die "a clipping run was told to clip: $(cat "$TMP/err")"
echo "PASS: a diverged run keeps its last good checkpoint and says where it stopped"
