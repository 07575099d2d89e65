#!/usr/bin/env bash
# debian/slurm-spank-cdl.postinst: /etc/slurm/plugstack.conf.d/cdl.conf is
# the admin's file, not a conffile (a conffile made dpkg ask at every
# upgrade on the nodes where the plugin was enabled, which stopped
# unattended upgrades). configure copies the package's snippet
# (/usr/share/slurm-spank-cdl/cdl.conf) where there is none, refreshes an
# unedited copy, and keeps an edited one without a question, naming the
# release's snippet. Run against a fake root (DPKG_ROOT, as dpkg --root
# sets it); scripts/deb-check.sh runs it through dpkg and apt.
. "${top_srcdir:-.}/tests/e2e/common.sh"

POSTINST="$top_srcdir/debian/slurm-spank-cdl.postinst"
root=$TMP/root
conf=$root/etc/slurm/plugstack.conf.d/cdl.conf
tmpl=$root/usr/share/slurm-spank-cdl/cdl.conf
mkdir -p "$root/etc/slurm/plugstack.conf.d" "${tmpl%/*}"
run() { expect_status 0 env DPKG_ROOT="$root" sh "$POSTINST" configure "$@" </dev/null; }

printf '# release 1\n#optional /usr/lib/x/slurm-wlm/cdl_spank.so\n' >"$tmpl"
run
cmp -s "$tmpl" "$conf" || die "first configure did not install $tmpl as cdl.conf"
[ ! -s "$TMP/err" ] || die "first configure printed: $(cat "$TMP/err")"

# Unedited, the next release's snippet replaces it.
printf '# release 2\n#optional /usr/lib/x/slurm-wlm/cdl_spank.so\n' >"$tmpl"
run 0.2.0
cmp -s "$tmpl" "$conf" || die "configure did not refresh an unedited cdl.conf"

# Edited (enabled): kept, byte for byte, and the new snippet named.
sed -i 's|^#optional|optional|' "$conf"
cp "$conf" "$TMP/edited"
printf '# release 3\n#optional /usr/lib/x/slurm-wlm/cdl_spank.so\n' >"$tmpl"
run 0.2.0
cmp -s "$TMP/edited" "$conf" || die "configure changed the admin's edited cdl.conf"
expect_err "kept your edited /etc/slurm/plugstack.conf.d/cdl.conf"
expect_err "/usr/share/slurm-spank-cdl/cdl.conf (diff the two"
[ -z "$(find "${conf%/*}" -name 'cdl.conf?*')" ] || die "configure left files beside cdl.conf"

# Deleted by the admin: an upgrade does not bring it back (as dpkg does
# with a deleted conffile); after purge (no record) install makes it again.
rm "$conf"
run 0.2.0
[ ! -e "$conf" ] || die "configure brought back a cdl.conf the admin deleted"
[ ! -s "$TMP/err" ] || die "configure printed for a deleted cdl.conf: $(cat "$TMP/err")"
rm -rf "$root/var/lib/slurm-spank-cdl"
run
cmp -s "$tmpl" "$conf" || die "configure after purge did not install cdl.conf"
cp "$TMP/edited" "$conf"

# A file of the admin's from before any configure (no record): kept.
rm -rf "$root/var/lib/slurm-spank-cdl"
run 0.2.0
cmp -s "$TMP/edited" "$conf" || die "configure replaced a cdl.conf it did not make"
echo "PASS: slurm-spank-cdl.postinst"
