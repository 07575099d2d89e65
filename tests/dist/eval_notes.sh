#!/usr/bin/env bash
# cdl-eval on several ranks (cdlrun -n 3, srun --cdl-ddp) prints its notes
# and warnings once, from rank 0, as one process does: every rank printed
# them, and a user saw each warning three times.
. "${top_srcdir:-.}/tests/dist/common.sh"
cat >"$tmp/net.spec" <<'SPEC'
input 3x32x32
conv2d 4 kernel=3 stride=2 name=c
relu
flatten
linear 10
SPEC
abs_train=$(realpath "$train")
(cd "$tmp" && "$abs_train" --model net.spec --dataset synthetic --synthetic-size 60 \
    --epochs 1 --threads 1 --no-progress -q --ckpt-dir ck) || fail "training the spec"
# The file edited since (relu -> tanh): --model takes it, with a warning.
sed -i 's/^relu$/tanh/' "$tmp/net.spec"
timeout 300 "$cdlrun" -n 3 "$ev" "$tmp/ck/last.safetensors" --model "$tmp/net.spec" --threads 1 \
    >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; fail "cdl-eval on 3 ranks"; }
n=$(grep -c 'warning: --model .* is not the model' "$tmp/err")
[ "$n" = 1 ] || { cat "$tmp/err"; fail "3 ranks printed the --model warning $n times, not once"; }
grep -q '^accuracy' "$tmp/out" || fail "cdl-eval on 3 ranks printed no results"
echo "cdl-eval on 3 ranks warns once"
