# Sourced by the bench scripts: torch2_venv DIR makes (once) a venv in DIR
# with PyTorch 2.x and numpy from PyPI — the version a user would
# `pip install` — and prints DIR/bin/python, or prints nothing and explains
# on stderr. The venv does not see the system site-packages, so Debian's
# 1.13 cannot shadow it; it is built in DIR.tmp and moved into place only
# when complete, so an interrupted install is redone. NO_VENV=1 skips it;
# PIP_ARGS adds pip options; PYTHON picks the interpreter that makes it.
# torch2_venv DIR torchvision also installs torchvision (the loader bench),
# into an existing venv too.
torch2_venv() {
    local venv=$1 python=${PYTHON:-/usr/bin/python3} extra=${2:-}
    [ "${NO_VENV:-0}" = 1 ] && return 0
    if [ -n "$extra" ] && "$venv/bin/python" -c 'import torch, numpy' >/dev/null 2>&1 &&
       ! "$venv/bin/python" -c "import $extra" >/dev/null 2>&1; then
        timeout 1800 "$venv/bin/python" -m pip install -q --no-cache-dir ${PIP_ARGS:-} "$extra" >&2 ||
            { echo "could not add $extra to $venv; NO_VENV=1 skips that column" >&2; return 0; }
    fi
    if ! "$venv/bin/python" -c "import torch, numpy${extra:+, $extra}" >/dev/null 2>&1; then
        rm -rf "$venv" "$venv.tmp"
        mkdir -p "$(dirname "$venv")"
        if "$python" -m venv "$venv.tmp" &&
           timeout 1800 "$venv.tmp/bin/python" -m pip install -q --no-cache-dir ${PIP_ARGS:-} \
               'torch>=2' numpy $extra >&2; then
            mv "$venv.tmp" "$venv"
        else
            rm -rf "$venv.tmp"
            echo "could not make the PyTorch 2.x venv in $venv (python3-venv installed? PyPI" \
                 "reachable?); NO_VENV=1 skips that column" >&2
            return 0
        fi
    fi
    echo "$venv/bin/python"
}
