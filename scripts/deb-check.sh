#!/usr/bin/env bash
# CI stage: the Debian packages from the tree (debian/), checked the way a
# site admin would use them.
#   1. debian/changelog's version is the package's (lib/cdl/version.h,
#      which configure.ac's AC_INIT reads);
#   2. dpkg-buildpackage -b in a temporary copy of the tree (the source tree
#      is never written to), without the unit tests, which other stages run;
#   3. lintian on the .changes: any error fails;
#   4. a clean Debian root (debootstrap --variant=minbase, made while the
#      packages build), apt-get installs libcdl0, cdl-tools and
#      slurm-spank-cdl into it from the .deb files, resolving their Depends
#      from the mirror;
#   5. inside that root: cdl-train --version and one epoch of synthetic
#      training, the plugstack snippet installed disabled.
# The temporary directory, the root with it, goes at the end, also on
# failure or interrupt; nothing stays mounted (checked).
#
# Usage: scripts/deb-check.sh   (root; network access to the Debian mirror)
# Env:   CDL_DEB_MIRROR (default http://deb.debian.org/debian),
#        CDL_DEB_SUITE (default bookworm), CDL_DEB_KEEP=1 keeps the .deb
#        files in ./_build/deb/ for a look, CDL_DEB_DIR=DIR checks the
#        packages (.changes and .deb) already built in DIR instead of
#        building them.
# Prints PASS:/FAIL:/SKIP: lines and an automake-style "# PASS: N" summary
# (scripts/test.sh counts those); exit 0 all passed, 1 a check failed,
# 77 skipped (not root, or a tool missing: scripts/install-deps.sh --test).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
mirror=${CDL_DEB_MIRROR:-http://deb.debian.org/debian}
suite=${CDL_DEB_SUITE:-bookworm}

skip() { echo "SKIP: deb: $*"; printf '# PASS:  0\n# SKIP:  1\n# FAIL:  0\n'; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap, chroot)"
for tool in dpkg-buildpackage dh lintian debootstrap fakeroot chroot; do
    command -v "$tool" >/dev/null || skip "$tool is missing (scripts/install-deps.sh --test)"
done

npass=0 nfail=0
ok()  { echo "PASS: deb: $*"; npass=$((npass + 1)); }
bad() { echo "FAIL: deb: $*"; nfail=$((nfail + 1)); }
summary() { printf '# PASS:  %d\n# SKIP:  0\n# FAIL:  %d\n' "$npass" "$nfail"; }

work=$(mktemp -d "${TMPDIR:-/tmp}/cdl-deb.XXXXXX") || exit 1
root=$work/root
boot_pid=
# Unmounts whatever is mounted under the root (deepest first), then removes
# the whole temporary directory without crossing into another file system.
cleanup() {
    # debootstrap runs in its own process group: stop it with its dpkg children.
    [ -n "$boot_pid" ] && kill -- -"$boot_pid" 2>/dev/null && wait "$boot_pid" 2>/dev/null
    awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts |
        sort -r | while read -r m; do umount -l "$m" || echo "deb-check: cannot unmount $m" >&2; done
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
t0=$SECONDS

# 1. One version everywhere.
ac_version=$(sed -n 's/^#define CDL_VERSION_STRING "\(.*\)"$/\1/p' "$top/lib/cdl/version.h")
contract=$(sed -n 's/^#define CDL_CONTRACT_VERSION \([0-9]*\)$/\1/p' "$top/lib/dist/contract.h")
deb_version=$(cd "$top" && dpkg-parsechangelog -SVersion)
if [ -n "$ac_version" ] && [ "$deb_version" = "$ac_version" ]; then
    ok "debian/changelog version $deb_version = lib/cdl/version.h"
else
    bad "debian/changelog says '$deb_version', lib/cdl/version.h says '$ac_version': add a debian/changelog entry (dch -v $ac_version)"
fi

# 4a. The clean root, in the background while the packages build.
setsid debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 &
boot_pid=$!

# 2. Build in a copy: tracked files and untracked ones git does not ignore
# (what the tree's commit will hold), else everything but build outputs.
src=$work/src/cdl
mkdir -p "$src"
if [ -n "${CDL_DEB_DIR:-}" ]; then
    cp "$CDL_DEB_DIR"/*.deb "$CDL_DEB_DIR"/*.changes "$CDL_DEB_DIR"/*.buildinfo "$work/src/" &&
        ok "packages taken from $CDL_DEB_DIR" || bad "no packages in CDL_DEB_DIR=$CDL_DEB_DIR"
elif git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$top" && git ls-files -z --cached --others --exclude-standard |
        tar --null -T - -cf - 2>/dev/null) | tar -xf - -C "$src"
else
    (cd "$top" && tar --exclude=./_build --exclude='./*.deb' -cf - .) | tar -xf - -C "$src"
fi
if [ -z "${CDL_DEB_DIR:-}" ]; then
    if (cd "$src" && DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" \
            dpkg-buildpackage -us -uc -b -Pnocheck) >"$work/build.log" 2>&1; then
        ok "dpkg-buildpackage -b ($(cd "$work/src" && echo *.deb | wc -w) packages)"
    else
        tail -n 40 "$work/build.log"
        bad "dpkg-buildpackage -b (log above)"
    fi
fi
(cd "$work/src" && ls -l ./*.deb 2>/dev/null)
t_build=$SECONDS

# 3. lintian: errors fail the stage, warnings are shown.
changes=$(echo "$work"/src/cdl_*.changes)
if [ -f "$changes" ]; then
    # lintian leaves its MLDBM caches (mldbm-elf-*) in TMPDIR: give it
    # one inside $work, which the trap removes.
    mkdir -p "$work/lintian-tmp"
    if TMPDIR=$work/lintian-tmp lintian --fail-on error "$changes" >"$work/lintian.log" 2>&1; then
        ok "lintian (no errors)"
    else
        bad "lintian reports errors"
    fi
    grep -v '^running with root privileges' "$work/lintian.log"
fi
t_lint=$SECONDS

# 3b. One rank contract per node: libcdl0 Breaks a slurm-spank-cdl and a
# cdl-tools of a release before its contract (debian/rules'
# contract_since), and the plugin Breaks such a libcdl0, so that apt never
# upgrades one alone (every cdl-train on the node then refused its jobs).
# dpkg must refuse libcdl0 beside an older plugin (a fake one) in a root
# of its own.
since=$(sed -n 's/^contract_since = //p' "$top/debian/rules")
lib_deb=$(echo "$work"/src/libcdl0_*.deb)
plug_deb=$(echo "$work"/src/slurm-spank-cdl_*.deb)
if [ -f "$lib_deb" ] && [ -f "$plug_deb" ] && [ -n "$since" ]; then
    if [ "$(dpkg-deb -f "$lib_deb" Breaks)" = "cdl-tools (<< $since~), slurm-spank-cdl (<< $since~)" ] &&
       [ "$(dpkg-deb -f "$plug_deb" Breaks)" = "libcdl0 (<< $since~)" ]; then
        ok "libcdl0 and slurm-spank-cdl break each other's releases before contract $contract ($since)"
    else
        bad "Breaks: libcdl0 '$(dpkg-deb -f "$lib_deb" Breaks)', slurm-spank-cdl '$(dpkg-deb -f "$plug_deb" Breaks)': expected those before $since"
    fi
    droot=$work/dpkg-root fake=$work/fake-plugin
    mkdir -p "$droot/var/lib/dpkg/info" "$droot/var/lib/dpkg/updates" "$fake/DEBIAN"
    touch "$droot/var/lib/dpkg/status" "$droot/var/lib/dpkg/available"
    printf 'Package: slurm-spank-cdl\nVersion: 0.0.1\nArchitecture: %s\nMaintainer: deb-check <root@localhost>\nDescription: a plugin of an older rank contract\n' \
        "$(dpkg --print-architecture)" >"$fake/DEBIAN/control"
    dpkg() { command dpkg --root="$droot" --force-script-chrootless --force-depends "$@"; }
    if dpkg-deb --build "$fake" "$work/fake.deb" >/dev/null && dpkg -i "$work/fake.deb" >/dev/null 2>&1 &&
       ! dpkg -i "$lib_deb" >"$work/breaks.log" 2>&1 &&
       grep -q "installing libcdl0.* would break slurm-spank-cdl" "$work/breaks.log"; then
        ok "dpkg refuses libcdl0 $ac_version beside slurm-spank-cdl 0.0.1"
    else
        cat "$work/breaks.log"; bad "dpkg installed libcdl0 beside a slurm-spank-cdl of an older contract"
    fi
    unset -f dpkg
fi

# 4b. Install the runtime packages into the clean root.
if wait "$boot_pid"; then
    boot_pid=
    mkdir -p "$root/tmp/debs"
    debs=()
    for p in libcdl0 cdl-tools slurm-spank-cdl; do
        for f in "$work"/src/"$p"_*.deb; do
            [ -f "$f" ] && cp "$f" "$root/tmp/debs/" && debs+=("/tmp/debs/${f##*/}")
        done
    done
    [ ${#debs[@]} -eq 3 ] ||
        echo "deb-check: expected libcdl0, cdl-tools and slurm-spank-cdl .deb files, found: ${debs[*]}" >"$work/install.log"
    if [ ${#debs[@]} -eq 3 ] && chroot "$root" apt-get update -q >>"$work/install.log" 2>&1 &&
       DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -q --no-install-recommends \
           "${debs[@]}" >>"$work/install.log" 2>&1; then
        ok "apt-get install libcdl0 cdl-tools slurm-spank-cdl into a clean $suite root"
    else
        tail -n 30 "$work/install.log"
        bad "apt-get install into the clean root (log above)"
    fi
else
    boot_pid=
    tail -n 20 "$work/debootstrap.log"
    bad "debootstrap --variant=minbase $suite from $mirror (log above)"
fi
t_root=$SECONDS

# 5. The installed files at work.
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp "$@"; }
if [ -x "$root/usr/bin/cdl-train" ]; then
    v=$(in_root cdl-train --version 2>&1)
    # The release, and the rank contract every node must share (75939db).
    want="cdl-train (cdl) $ac_version (rank contract $contract)"
    if [ "$(echo "$v" | head -n1)" = "$want" ]; then ok "cdl-train --version: ${v%%$'\n'*}"
    else bad "cdl-train --version printed '$v', expected '$want' first"; fi
    # No /proc in the root: cdl-train still leaves OpenBLAS's SSE3 fallback
    # on a CPU with AVX2 (cli/blas_core.c).
    blas=$(echo "$v" | sed -n 's/^OpenBLAS kernels: //p')
    if grep -qw avx2 /proc/cpuinfo && [ "$blas" = Prescott ]; then
        bad "cdl-train in the clean root runs OpenBLAS's SSE3 kernels on a CPU with AVX2"
    else ok "cdl-train in the clean root: OpenBLAS kernels ${blas:-unknown}"; fi
    if in_root cdl-train --dataset synthetic --synthetic-size 512 --epochs 1 --batch-size 64 \
            --threads 1 --seed 1 --metrics /tmp/m.jsonl >"$work/train.log" 2>&1 &&
       grep -q '"epoch": *1[,}]' "$root/tmp/m.jsonl"; then
        ok "one epoch of synthetic training from the installed files"
    else
        cat "$work/train.log"; bad "cdl-train one synthetic epoch in the clean root (output above)"
    fi
    conf=$root/etc/slurm/plugstack.conf.d/cdl.conf
    if [ -f "$root/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/slurm-wlm/cdl_spank.so" ] &&
       grep -q '^#optional /usr/lib/.*/slurm-wlm/cdl_spank.so$' "$conf" &&
       ! grep -q '^[^#]' "$conf"; then
        ok "cdl_spank.so in Slurm's plugin directory, $(basename "$conf") installed disabled"
    else
        bad "slurm-spank-cdl: plugin or disabled plugstack snippet missing in the clean root"
    fi
else
    bad "cdl-train is not installed in the clean root"
fi

if [ "${CDL_DEB_KEEP:-}" = 1 ] && ls "$work"/src/*.deb >/dev/null 2>&1; then
    mkdir -p "$top/_build/deb" &&
        cp "$work"/src/*.deb "$work"/src/*.changes "$work"/src/*.buildinfo "$top/_build/deb/"
fi
cleanup; trap - EXIT
if awk -v w="$work" 'index($2, w) == 1 { found = 1 } END { exit !found }' /proc/mounts || [ -e "$work" ]; then
    bad "the temporary root $work is still there or mounted"
fi
echo "deb-check: seconds from start: packages built $((t_build - t0)), lintian $((t_lint - t0)), clean root with packages $((t_root - t0)), all $((SECONDS - t0))"
summary
[ "$nfail" -eq 0 ]
