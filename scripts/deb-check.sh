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
#      training, the plugstack snippet installed disabled;
#   6. docs/admin.md followed there with Slurm's client (no daemon): the
#      plugin enabled as written (srun --cdl-version), a misspelled key
#      refused naming it and FILE:LINE, unattended upgrades (no terminal,
#      no --force-conf*) with cdl.conf edited, to a rebuild with a changed
#      snippet and from a 0.1.0-style package (a conffile), apt remove
#      naming the line left enabled, apt purge leaving nothing.
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
    # libcdl0 also Breaks and Replaces a libcdl0-cuda before its own version:
    # that package shipped libcdl.so.0 until it became the CUDA module alone.
    libver=$(dpkg-deb -f "$lib_deb" Version)
    if [ "$(dpkg-deb -f "$lib_deb" Breaks)" = "cdl-tools (<< $since~), libcdl0-cuda (<< $libver), slurm-spank-cdl (<< $since~)" ] &&
       [ "$(dpkg-deb -f "$lib_deb" Replaces)" = "libcdl0-cuda (<< $libver)" ] &&
       [ "$(dpkg-deb -f "$plug_deb" Breaks)" = "libcdl0 (<< $since~)" ]; then
        ok "libcdl0 and slurm-spank-cdl break each other's releases before contract $contract ($since)"
    else
        bad "Breaks: libcdl0 '$(dpkg-deb -f "$lib_deb" Breaks)' (Replaces '$(dpkg-deb -f "$lib_deb" Replaces)'), slurm-spank-cdl '$(dpkg-deb -f "$plug_deb" Breaks)': expected those before $since, and libcdl0-cuda before $libver"
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

# 6. docs/admin.md followed as written, in the same root, with Slurm's
# client (srun loads the plugin to parse its options; no daemon runs:
# policy-rc.d stops munge's start, srun needs no slurmctld for what is
# checked here).
conf=/etc/slurm/plugstack.conf.d/cdl.conf
template=/usr/share/slurm-spank-cdl/cdl.conf
# Installs .deb files with apt as an unattended upgrade does: no terminal,
# no --force-conf* option. Fails on a conffile question, on a package left
# unconfigured, and on any file dpkg leaves beside cdl.conf.
apt_unattended() {
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -q --no-install-recommends \
        --allow-downgrades "$@" </dev/null >"$work/upgrade.log" 2>&1 &&
    ! grep -qiE "conffile prompt|Configuration file '" "$work/upgrade.log" &&
    [ "$(chroot "$root" dpkg-query -W -f='${db:Status-Abbrev}' slurm-spank-cdl)" = "ii " ] &&
    [ -z "$(find "$root${conf%/*}" -name 'cdl.conf?*')" ]
}
# A slurm-spank-cdl .deb made from the one built here: VERSION, the
# snippet changed (an added comment, as a release with a new setting
# has) and, with "conffile", laid out as releases before 0.2.0 shipped it
# (a dpkg conffile in /etc, no postinst).
repack() {
    local version=$1 layout=$2 out=$3 d=$work/repack
    rm -rf "$d" && dpkg-deb -R "$plug_deb" "$d" || return 1
    sed -i "s/^Version: .*/Version: $version/" "$d/DEBIAN/control"
    rm -f "$d/DEBIAN/md5sums"
    echo "#   some_new_key=...   a setting of release $version" >>"$d$template"
    if [ "$layout" = conffile ]; then
        mkdir -p "$d${conf%/*}" && mv "$d$template" "$d$conf" && rmdir "$d${template%/*}" &&
            echo "$conf" >"$d/DEBIAN/conffiles" && rm -f "$d/DEBIAN/postinst"
    fi
    dpkg-deb -b "$d" "$out" >/dev/null
}
snapshot() { (cd "$root" && find etc usr var/lib -xdev \( -type f -o -type l \) \
    ! -path 'var/lib/dpkg/*' ! -path 'var/lib/apt/*' | sort); }
if [ -x "$root/usr/bin/cdl-train" ] && [ -f "$plug_deb" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod 755 "$root/usr/sbin/policy-rc.d"
    if DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -q --no-install-recommends \
            slurm-client >"$work/client.log" 2>&1; then
        printf 'ClusterName=debcheck\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost Default=YES\n' \
            >"$root/etc/slurm/slurm.conf"
    else
        tail -n 20 "$work/client.log"; bad "apt-get install slurm-client into the root (log above)"
    fi
    before=$(snapshot)
    owned=$(chroot "$root" dpkg -L libcdl0 cdl-tools slurm-spank-cdl | sort -u)
    # "Enable it: remove the # before optional ...cdl_spank.so (add settings
    # from "Settings" below on the same line)": README's sed, one setting.
    sed -i 's|^#optional \(.*\)|optional \1 default_bind=cores|' "$root$conf"
    v=$(in_root srun --cdl-version 2>&1)
    if [ "$v" = "cdl_spank $ac_version (rank contract $contract)" ]; then
        ok "enabled as docs/admin.md says: srun --cdl-version prints '$v'"
    else
        bad "after enabling $conf, srun --cdl-version printed '$v'"
    fi
    # A typo in an option, with `required` (the recommended line).
    cp "$root$conf" "$work/cdl.conf.good"
    sed -i 's|^optional \(.*\) default_bind=cores|required \1 defualt_bind=cores|' "$root$conf"
    lineno=$(grep -n '^required ' "$root$conf" | cut -d: -f1)
    err=$(in_root srun --cdl-version 2>&1); rc=$?
    if [ "$rc" -ne 0 ] && echo "$err" | grep -q "unknown key 'defualt_bind'" &&
       echo "$err" | grep -qF "$conf:$lineno"; then
        ok "a typo in an option: srun refuses, naming the key and $conf:$lineno"
    else
        echo "$err"; bad "a typo in an option (defualt_bind=) in $conf:$lineno: srun rc=$rc (output above)"
    fi
    cp "$work/cdl.conf.good" "$root$conf"
    # An upgrade to a release whose snippet changed, the plugin enabled:
    # no question, the admin's file kept, this release's snippet named.
    if repack "$ac_version+1" template "$root/tmp/debs/next.deb" && apt_unattended /tmp/debs/next.deb &&
       cmp -s "$work/cdl.conf.good" "$root$conf" && grep -q "kept your edited $conf" "$work/upgrade.log" &&
       grep -q some_new_key "$root$template"; then
        ok "upgrade $ac_version -> $ac_version+1 (snippet changed) over the enabled cdl.conf: no prompt, the admin's file kept"
    else
        cat "$work/upgrade.log"; bad "unattended upgrade to $ac_version+1 over an edited cdl.conf (log above)"
    fi
    # apt remove with the line still enabled: named; the file stays.
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get remove -y -q slurm-spank-cdl >"$work/remove.log" 2>&1
    if grep -q "slurm-spank-cdl: $conf:[0-9]* still loads the removed plugin" "$work/remove.log" &&
       cmp -s "$work/cdl.conf.good" "$root$conf"; then
        ok "apt remove keeps cdl.conf and names its line that still loads the plugin"
    else
        cat "$work/remove.log"; bad "apt remove slurm-spank-cdl with the plugin enabled (log above)"
    fi
    # apt purge of all three: none of their files, nothing new in /etc.
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get purge -y -q libcdl0 cdl-tools slurm-spank-cdl \
        >"$work/purge.log" 2>&1
    after=$(snapshot)
    left=$( (comm -13 <(echo "$before") <(echo "$after"); comm -12 <(echo "$owned" | sed 's|^/||' | sort) <(echo "$after");
             echo "$after" | grep -E '^(etc/slurm/plugstack.conf.d/cdl.conf|var/lib/slurm-spank-cdl/)') | sort -u)
    if [ -z "$left" ] && [ -z "$(chroot "$root" dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' 2>/dev/null |
                                 grep -E ' (libcdl0|cdl-tools|slurm-spank-cdl)$')" ]; then
        ok "apt purge libcdl0 cdl-tools slurm-spank-cdl: no file of theirs left, nothing in /etc"
    else
        echo "$left"; cat "$work/purge.log"; bad "apt purge left files (listed above)"
    fi
    # From a release that shipped cdl.conf as a conffile (before 0.2.0):
    # edited, it stays the admin's; unedited, it becomes this release's.
    if repack 0.1.0 conffile "$root/tmp/debs/old.deb"; then
        for edited in yes no; do
            chroot "$root" dpkg -i /tmp/debs/old.deb >"$work/old.log" 2>&1 || cat "$work/old.log"
            [ $edited = yes ] && sed -i 's|^#optional |optional |' "$root$conf"
            cp "$root$conf" "$work/cdl.conf.old"
            if apt_unattended "/tmp/debs/${plug_deb##*/}" &&
               if [ $edited = yes ]; then cmp -s "$work/cdl.conf.old" "$root$conf"
               else cmp -s "$root$template" "$root$conf"; fi; then
                ok "upgrade from a conffile release (0.1.0 layout) -> $ac_version, cdl.conf $([ $edited = yes ] && echo "edited: no prompt, kept" || echo "unedited: replaced by this release's")"
            else
                cat "$work/upgrade.log"; bad "upgrade 0.1.0 layout -> $ac_version with cdl.conf edited=$edited (log above)"
            fi
            DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get purge -y -q slurm-spank-cdl >"$work/purge.log" 2>&1
            if [ -e "$root$conf" ] || [ -e "$root/var/lib/slurm-spank-cdl" ]; then
                bad "apt purge after the upgrade from 0.1.0 left $conf or /var/lib/slurm-spank-cdl"
            fi
        done
    else
        bad "repacking slurm-spank-cdl in the 0.1.0 layout"
    fi
fi

t_admin=$SECONDS

if [ "${CDL_DEB_KEEP:-}" = 1 ] && ls "$work"/src/*.deb >/dev/null 2>&1; then
    mkdir -p "$top/_build/deb" &&
        cp "$work"/src/*.deb "$work"/src/*.changes "$work"/src/*.buildinfo "$top/_build/deb/"
fi
cleanup; trap - EXIT
if awk -v w="$work" 'index($2, w) == 1 { found = 1 } END { exit !found }' /proc/mounts || [ -e "$work" ]; then
    bad "the temporary root $work is still there or mounted"
fi
echo "deb-check: seconds from start: packages built $((t_build - t0)), lintian $((t_lint - t0)), clean root with packages $((t_root - t0)), admin's steps $((t_admin - t0)), all $((SECONDS - t0))"
summary
[ "$nfail" -eq 0 ]
