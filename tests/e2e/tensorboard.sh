#!/usr/bin/env bash
# cdl-train --tensorboard: one event file named like TensorFlow's, every
# record's masked CRC32C right (read back by tests/e2e/tfevents_read.py,
# standard library only, which must also reject a damaged copy), the
# scalars per step and epoch equal to the metrics file's values, the
# hparams plugin's records; then read by the TensorBoard library itself
# (EventAccumulator) from a venv with tensorboard from PyPI, cached in the
# build tree (tests/e2e/tensorboard-venv, removed by make clean); without
# PyPI that part is skipped, saying so, and the rest still runs.
. "${top_srcdir:-.}/tests/e2e/common.sh"
PY=${CDL_TEST_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || { echo "SKIP: no $PY"; exit 77; }
READ="$top_srcdir/tests/e2e/tfevents_read.py"
TB_PIN="tensorboard==2.15.2 numpy<2"   # its numpy stub needs NumPy 1 (Debian 12 has 1.24)

"$PY" -c "import sys; sys.path.insert(0, '$top_srcdir/tests/e2e'); import tfevents_read as t
assert t.crc32c(b'123456789') == 0xE3069283" || die "the reader's CRC32C is wrong"

"$CDL_TRAIN" --dataset synthetic --synthetic-size 256 --batch-size 64 --epochs 2 --threads 1 \
    --workers 0 --metrics-every 2 --metrics "$TMP/m.jsonl" --tensorboard "$TMP/tb" -q ||
    die "training with --tensorboard failed"
set -- "$TMP"/tb/events.out.tfevents.*
[ $# = 1 ] && [ -s "$1" ] || die "expected one event file in $TMP/tb: $*"
ev=$1
basename "$ev" | grep -qE '^events\.out\.tfevents\.[0-9]{10}\.[A-Za-z0-9._-]+$' ||
    die "$(basename "$ev") is not named events.out.tfevents.<time>.<host>"

"$PY" "$READ" "$ev" >"$TMP/ev.json" || die "tfevents_read.py rejects $ev"
"$PY" - "$TMP/ev.json" "$TMP/m.jsonl" <<'PY' || die "the event file disagrees with the metrics file"
import json, sys
ev = json.load(open(sys.argv[1]))
recs = [json.loads(l) for l in open(sys.argv[2])]
assert ev["version"] == "brain.Event:2", ev["version"]
sc = ev["scalars"]
steps = [r for r in recs if r["type"] == "step"]
epochs = [r for r in recs if r["type"] == "epoch"]
assert len(steps) == 4 and len(epochs) == 2, (len(steps), len(epochs))
def same(tag, rs, key, tol=1e-5):   # float32 in events, 6 digits in JSON
    got = sc[tag]
    assert [s for s, _ in got] == [r["step"] for r in rs], (tag, got)
    for (_, v), r in zip(got, rs):
        assert abs(v - r[key]) <= tol * max(1, abs(r[key])), (tag, v, r[key])
same("step/loss", steps, "loss")
same("step/lr", steps, "lr")
same("step/grad_norm", steps, "grad_norm")
same("epoch/val_accuracy", epochs, "val_acc")
same("epoch/train_loss", epochs, "train_loss")
same("epoch/images_per_sec", epochs, "images_per_sec", 1e-3)   # JSON: 1 decimal
same("epoch/samples_per_sec", epochs, "samples_per_sec", 1e-3)
assert all(r["images_per_sec"] == r["samples_per_sec"] for r in epochs), epochs
tests = [dict(r, step=epochs[-1]["step"]) for r in recs if r["type"] == "test"]
assert len(tests) == 1, tests
same("test/loss", tests, "test_loss")
same("test/accuracy", tests, "test_acc")
for tag in ("_hparams_/experiment", "_hparams_/session_start_info"):
    assert ev["hparams"][tag]["plugin"] == "hparams", ev["hparams"]
print("event file:", ev["records"], "records,", len(sc), "scalar tags, CRCs right")
PY

# A language model's samples are windows of --block-size tokens: its
# epoch records and tags say samples_per_sec (windows) and tokens_per_sec,
# not images_per_sec (which they were named).
for i in $(seq 300); do echo "line $i of a small text"; done >"$TMP/lm.txt"
"$CDL_TRAIN" --dataset "text:$TMP/lm.txt" --model gpt:n_layer=1,n_head=1,n_embd=8 \
    --block-size 16 --batch-size 8 --epochs 1 --max-steps 4 --threads 1 --workers 0 \
    --metrics "$TMP/lm.jsonl" --tensorboard "$TMP/tblm" -q || die "training a GPT with --tensorboard failed"
"$PY" "$READ" "$TMP"/tblm/events.out.tfevents.* >"$TMP/evlm.json" || die "tfevents_read.py rejects the GPT's file"
"$PY" - "$TMP/evlm.json" "$TMP/lm.jsonl" <<'PY' || die "a GPT's speed is named as images"
import json, sys
sc = json.load(open(sys.argv[1]))["scalars"]
epochs = [r for r in map(json.loads, open(sys.argv[2])) if r["type"] == "epoch"]
assert len(epochs) == 1 and "images_per_sec" not in epochs[0], epochs
r = epochs[0]
assert r["tokens_per_sec"] > 0 and abs(r["tokens_per_sec"] - 16 * r["samples_per_sec"]) < 1, r
assert "epoch/images_per_sec" not in sc and "epoch/samples_per_sec" in sc, sorted(sc)
assert "epoch/tokens_per_sec" in sc, sorted(sc)
PY

# The hparams' batch in all is the optimizer step's: 8 samples x 2
# micro-batches (--accum-steps), not 8. A schedule in steps, the run's
# length and clipping are hparams too (runs measured in steps differ by
# them, and showed the same warmup_epochs 0).
"$CDL_TRAIN" --dataset synthetic --synthetic-size 64 --batch-size 8 --accum-steps 2 --epochs 1 \
    --warmup-steps 2 --decay-steps 4 --min-lr 0.001 --max-steps 3 --clip-grad 0.5 \
    --threads 1 --workers 0 --tensorboard "$TMP/tb-accum" -q || die "training with --accum-steps failed"
"$PY" "$READ" "$TMP"/tb-accum/events.out.tfevents.* >"$TMP/accum.json" || die "tfevents_read.py, accum"
"$PY" - "$TMP/accum.json" <<'PY' || die "hparams global_batch_size leaves out --accum-steps"
import json, sys
hp = json.load(open(sys.argv[1]))["hparam_values"]
assert hp["batch_size"] == 8 and hp["global_batch_size"] == 16 and hp["accum_steps"] == 2, hp
assert (hp["warmup_steps"], hp["decay_steps"], hp["max_steps"]) == (2, 4, 3), hp
assert abs(hp["min_lr"] - 0.001) < 1e-9 and hp["clip_grad"] == 0.5, hp
PY

# The reader can fail: one flipped byte in the last record.
cp "$ev" "$TMP/damaged"
size=$(stat -c %s "$TMP/damaged")
printf '\377' | dd of="$TMP/damaged" bs=1 seek=$((size - 6)) conv=notrunc status=none
"$PY" "$READ" "$TMP/damaged" >/dev/null 2>"$TMP/err" && die "a damaged event file reads as good"
expect_err "CRC mismatch"

# A running job's events are in the file as they happen, not only at the
# epoch's end: killed (SIGKILL, as Slurm does after the grace time) in its
# first epoch, after its third step record, the file holds the hparams and
# the first two steps' scalars. (They sat in a stdio buffer and were lost.)
live="--dataset synthetic --synthetic-size 4096 --batch-size 32 --epochs 100 --threads 1
      --workers 0 --metrics-every 1 --ckpt-every 2 --ckpt-dir $TMP/ck-live
      --tensorboard $TMP/tb-live -q"
mkfifo "$TMP/live"
# shellcheck disable=SC2086
"$CDL_TRAIN" $live --metrics "$TMP/live" &
pid=$!
n=0
while read -r line; do
    case $line in *'"type":"step"'*) n=$((n + 1)); [ $n = 3 ] && kill -9 $pid ;; esac
done <"$TMP/live"
st=0; wait $pid 2>/dev/null || st=$?
[ $st = 137 ] || die "the run to kill ended with $st before its third step record was read"
"$PY" "$READ" "$TMP"/tb-live/events.out.tfevents.* >"$TMP/live.json" ||
    die "tfevents_read.py rejects the killed run's event file"
"$PY" - "$TMP/live.json" <<'PY' || die "a killed run's event file lacks the steps before it"
import json, sys
ev = json.load(open(sys.argv[1]))
steps = [s for s, _ in ev["scalars"].get("step/loss", [])]
assert steps[:2] == [1, 2], ev["scalars"]
assert "_hparams_/session_start_info" in ev["hparams"], ev["hparams"]
assert ev["starts"] == [1], ev["starts"]
PY
# Resumed from its last checkpoint, which may be older than the last step
# in the file: the new file starts its session at the step after the
# checkpoint's, so TensorBoard drops the killed run's steps from there
# (they were drawn twice; checked with TensorBoard's reader below).
# shellcheck disable=SC2086
"$CDL_TRAIN" $live --max-steps 12 --metrics "$TMP/live.jsonl" || die "resuming the killed run failed"
set -- "$TMP"/tb-live/events.out.tfevents.*
[ $# = 2 ] || die "expected a second event file for the resumed run: $*"
"$PY" "$READ" "$2" >"$TMP/live2.json" || die "tfevents_read.py rejects the resumed run's event file"
"$PY" - "$TMP/live2.json" "$TMP/live.jsonl" <<'PY' || die "the resumed run's session start is wrong"
import json, sys
ev = json.load(open(sys.argv[1]))
start = json.loads(open(sys.argv[2]).readline())["start_step"]
assert start > 0 and ev["starts"] == [start + 1], (start, ev["starts"])
PY

# Another run into the same directory with --resume never: refused.
expect_status 1 "$CDL_TRAIN" --dataset synthetic --synthetic-size 64 --epochs 1 --resume never \
    --tensorboard "$TMP/tb" -q
expect_err "--tensorboard $TMP/tb"

# TensorBoard's own reader.
venv=$(mkdir -p "$top_builddir/tests/e2e" && cd "$top_builddir/tests/e2e" && pwd)/tensorboard-venv
if ! "$venv/bin/python" -c 'import tensorboard' >/dev/null 2>&1; then
    rm -rf "$venv" "$venv.tmp"
    # shellcheck disable=SC2086
    if "$PY" -m venv --system-site-packages "$venv.tmp" >/dev/null 2>&1 &&
       timeout 600 "$venv.tmp/bin/python" -m pip install -q --no-cache-dir \
           --disable-pip-version-check $TB_PIN >"$TMP/pip.log" 2>&1; then
        mv "$venv.tmp" "$venv"   # only a complete venv is cached
    else
        rm -rf "$venv.tmp"
        tail -n 3 "$TMP/pip.log" 2>/dev/null
        echo "PASS (TensorBoard library part skipped: cannot install $TB_PIN from PyPI here)"
        exit 0
    fi
fi
run_id=$(head -n 1 "$TMP/m.jsonl" | sed 's/.*"run_id":"\([0-9a-f]*\)".*/\1/')
"$venv/bin/python" - "$TMP/tb" "$run_id" <<'PY' || die "TensorBoard cannot read the event file"
import sys
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.plugins.hparams import plugin_data_pb2
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0})
acc.Reload()
tags = acc.Tags()["scalars"]
for t in ("epoch/val_accuracy", "epoch/train_loss", "epoch/lr", "epoch/images_per_sec",
          "epoch/samples_per_sec", "step/loss", "step/grad_norm", "step/samples_per_sec"):
    assert t in tags, (t, tags)
assert [e.step for e in acc.Scalars("epoch/val_loss")] == [4, 8]
assert [e.step for e in acc.Scalars("step/loss")] == [2, 4, 6, 8]
content = acc.PluginTagToContent("hparams")
start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
hp = start.session_start_info.hparams
assert abs(hp["lr"].number_value - 0.05) < 1e-7, hp["lr"]
assert hp["dataset"].string_value == "synthetic", hp["dataset"]
assert start.session_start_info.group_name == sys.argv[2]
exp = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
assert "lr" in [h.name for h in exp.hparam_infos]
# The validations of runs measured in steps (--eval-every) and the
# training loss too: a language model's run may end no epoch.
for tag in ("epoch/val_accuracy", "eval/val_loss", "eval/val_accuracy", "step/loss"):
    assert tag in [m.name.tag for m in exp.metric_infos], (tag, exp.metric_infos)
print("TensorBoard reads", len(tags), "scalar tags and the hparams of run", sys.argv[2])
PY
"$venv/bin/python" - "$TMP/tb-live" 2>/dev/null <<'PY' || die "TensorBoard draws a resumed run's steps twice"
import sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0})
acc.Reload()
steps = [e.step for e in acc.Scalars("step/loss")]
assert steps == list(range(1, 13)), steps
PY
echo "PASS: TensorBoard event files"
