#!/bin/bash
# A stand-in for cdl-train in the template tests while cli/cdl-train is not
# built: it parses the options the templates pass, records the rank contract
# it was started with, and behaves like cdl-train around checkpoints:
#   --max-steps N > 0   "train" N steps, write metrics, exit 0
#   --max-steps 0       a long run: wait (at most 60 s) for SIGUSR1 or
#                       SIGTERM, then write a checkpoint and exit 75
#                       (CDL_EXIT_REQUEUE); a later start with --resume auto
#                       finds the checkpoint, resumes and finishes (exit 0)
set -u
ckpt= metrics= resume=never max_steps=0
while [ $# -gt 0 ]; do
    case $1 in
    --ckpt-dir) ckpt=$2; shift ;;
    --metrics) metrics=$2; shift ;;
    --resume) resume=$2; shift ;;
    --max-steps) max_steps=$2; shift ;;
    --model|--dataset|--data-dir|--device|--epochs|--batch-size|--lr|--optimizer|--momentum|\
    --weight-decay|--schedule|--warmup-epochs|--threads|--workers|--seed) shift ;;
    *) echo "fake-train: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$ckpt" ] && [ -n "$metrics" ] || { echo "fake-train: --ckpt-dir and --metrics needed" >&2; exit 2; }
mkdir -p "$ckpt" "$(dirname "$metrics")"
rank=${RANK:-none}
line() { [ "$rank" = 0 ] || [ "$rank" = none ] && echo "$1" >>"$metrics"; }
line "{\"event\":\"start\",\"rank\":\"$rank\",\"world\":\"${WORLD_SIZE:-none}\",\"omp\":\"${OMP_NUM_THREADS:-none}\",\"restart\":\"${SLURM_RESTART_COUNT:-0}\"}"
if [ "$resume" = auto ] && [ -e "$ckpt/state" ]; then
    line "{\"event\":\"resumed\",\"from\":\"$(cat "$ckpt/state")\"}"
    line '{"event":"done"}'
    exit 0
fi
if [ "$max_steps" -gt 0 ]; then
    line "{\"event\":\"done\",\"steps\":$max_steps}"
    exit 0
fi
interrupted=0
trap 'interrupted=1' USR1 TERM
for _ in $(seq 600); do
    [ "$interrupted" = 1 ] && break
    sleep 0.1
done
if [ "$interrupted" = 1 ]; then
    [ "$rank" = 0 ] || [ "$rank" = none ] && echo "step-123" >"$ckpt/state"
    line '{"event":"checkpoint","step":123}'
    exit 75
fi
line '{"event":"done"}'
