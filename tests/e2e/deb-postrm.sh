#!/usr/bin/env bash
# debian/slurm-spank-cdl.postrm: `apt remove` keeps cdl.conf (the admin's),
# and a line still loading the removed plugin stops slurmd (required) or
# makes every srun print an error (optional). The script must name the file
# and line at remove, and stay quiet when the line is commented out (the
# package's default) or for other plugins. Run against a fake root
# (DPKG_ROOT, as dpkg --root sets it).
. "${top_srcdir:-.}/tests/e2e/common.sh"

POSTRM="$top_srcdir/debian/slurm-spank-cdl.postrm"
root=$TMP/root
mkdir -p "$root/etc/slurm/plugstack.conf.d"
conf=$root/etc/slurm/plugstack.conf.d/cdl.conf
so=/usr/lib/x86_64-linux-gnu/slurm-wlm/cdl_spank.so
echo 'include /etc/slurm/plugstack.conf.d/*.conf' >"$root/etc/slurm/plugstack.conf"
echo "required /usr/lib/x86_64-linux-gnu/slurm-wlm/other.so" >"$root/etc/slurm/plugstack.conf.d/other.conf"

printf '# comment\n#optional %s\n' "$so" >"$conf"
expect_status 0 env DPKG_ROOT="$root" sh "$POSTRM" remove
[ ! -s "$TMP/err" ] || die "postrm warned about a disabled line: $(cat "$TMP/err")"

printf '# comment\n  required %s port_range=30000-30099\n' "$so" >"$conf"
expect_status 0 env DPKG_ROOT="$root" sh "$POSTRM" remove
expect_err "/etc/slurm/plugstack.conf.d/cdl.conf:2 still loads the removed plugin"
expect_err "required $so port_range=30000-30099"
expect_err "slurmd will not start"
grep -q other.so "$TMP/err" && die "postrm warned about another plugin"
# By its bare name, as Slurm finds it in its plugin directory.
printf 'optional cdl_spank.so\n' >"$root/etc/slurm/plugstack.conf"
expect_status 0 env DPKG_ROOT="$root" sh "$POSTRM" remove
expect_err "/etc/slurm/plugstack.conf:1 still loads the removed plugin"

# Only at remove: upgrades and purge say nothing. cdl.conf is no conffile
# (debian/slurm-spank-cdl.postinst makes it): upgrade keeps it, purge
# removes it and postinst's record, and nothing else.
mkdir -p "$root/var/lib/slurm-spank-cdl"
echo 0123 >"$root/var/lib/slurm-spank-cdl/cdl.conf.sha256"
for action in upgrade purge; do
    expect_status 0 env DPKG_ROOT="$root" sh "$POSTRM" "$action" 0.1.0
    [ ! -s "$TMP/err" ] || die "postrm $action printed: $(cat "$TMP/err")"
    [ "$action" = purge ] || [ -f "$conf" ] || die "postrm $action removed $conf"
done
[ ! -e "$conf" ] || die "postrm purge left $conf"
[ ! -e "$root/var/lib/slurm-spank-cdl" ] || die "postrm purge left /var/lib/slurm-spank-cdl"
[ -f "$root/etc/slurm/plugstack.conf.d/other.conf" ] || die "postrm purge removed another plugin's file"
echo "PASS: slurm-spank-cdl.postrm"
