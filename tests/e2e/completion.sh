#!/usr/bin/env bash
# The bash completion in completions/: every option that cdl-train --help
# and cdlrun --help print completes, and option values come from their lists.
. "${top_srcdir:-.}/tests/e2e/common.sh"

shopt -s extglob   # as bash-completion sets it (the file patterns use @(...))
. "$top_srcdir/completions/cdl-train"
# complete FUNCTION WORD...: COMPREPLY for the last WORD, one per line.
complete_words() {
    local f=$1; shift
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=()
    "$f"
    printf '%s\n' "${COMPREPLY[@]}"
}
complete_words _cdl_train cdl-train --bat | grep -qx -- --batch-size || die "--bat does not complete to --batch-size"
complete_words _cdl_train cdl-train --optimizer ad | sort | tr '\n' ' ' | grep -qx 'adam adamw ' ||
    die "--optimizer ad does not complete to adam adamw"
complete_words _cdl_train cdl-train --device c | grep -qx cuda || die "--device c does not give cuda"
complete_words _cdl_train cdl-train --schedule '' | grep -qx cosine || die "--schedule lacks cosine"
complete_words _cdl_train cdl-train --dataset f | grep -qx fashion-mnist || die "--dataset f"
complete_words _cdl_train cdl-train --model g | grep -qx gpt || die "--model g does not complete to gpt"
complete_words _cdl_train cdl-train --model res | grep -qx resnet18 || die "--model res lacks resnet18"
complete_words _cdlrun cdlrun --bi | grep -qx -- --bind || die "cdlrun --bi does not complete"

# check_options PROGRAM FUNCTION: each option of PROGRAM --help completes.
check_options() {
    local prog=$1 f=$2 opt missing=
    "$prog" --help >"$TMP/help" || die "$prog --help failed"
    local opts
    opts=$(grep -oE -- '(^|[^-A-Za-z0-9])(--[a-z][a-z0-9-]*|-[A-Za-z])([^-A-Za-z0-9]|$)' "$TMP/help" |
           grep -oE -- '--?[A-Za-z][a-z0-9-]*' | grep -vx -- --cdl-ddp | sort -u)   # srun's option
    [ -n "$opts" ] || die "no options found in $prog --help"
    for opt in $opts; do
        complete_words "$f" "$(basename "$prog")" "$opt" | grep -qx -- "$opt" || missing="$missing $opt"
    done
    [ -z "$missing" ] || die "completions/cdl-train does not complete $prog's options:$missing"
    echo "$(basename "$prog"): $(echo "$opts" | wc -l) options of --help complete"
}
check_options "$CDL_TRAIN" _cdl_train
check_options "$CDLRUN" _cdlrun
check_options "$top_builddir/cli/cdl-plot" _cdl_plot
check_options "$CDL_EVAL" _cdl_eval
check_options "$CDL_PREDICT" _cdl_eval
check_options "$top_builddir/cli/cdl-generate" _cdl_generate
complete_words _cdl_eval cdl-eval x.safetensors --split v | grep -qx val || die "cdl-eval --split v"
# cdl-predict's files after the checkpoint: pictures and CSV tables.
mkdir "$TMP/in" && touch "$TMP/in/a.png" "$TMP/in/rows.csv" "$TMP/in/notes.txt"
[ "$(complete_words _cdl_eval cdl-predict x.safetensors "$TMP/in/" | sort | tr '\n' ' ')" = \
  "$TMP/in/a.png $TMP/in/rows.csv " ] ||
    die "cdl-predict CKPT files: $(complete_words _cdl_eval cdl-predict x.safetensors "$TMP/in/")"
