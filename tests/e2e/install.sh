#!/usr/bin/env bash
# `make install DESTDIR=...` from the build tree: no libtool .la in the
# plugin directory, the man pages and the modulefile installed, the
# modulefile's paths pointing at the configured prefix, and `make uninstall`
# removing all of it again.
. "${top_srcdir:-.}/tests/e2e/common.sh"

. "$top_srcdir/tests/api/make-install.sh"
# Under the build tree (writable even in distcheck's read-only source tree).
DEST=$(cd "$top_builddir" && pwd)/install-test.$$
trap 'rm -rf "$DEST" "$TMP"' EXIT
make_install "$DEST"

prefix=$(var prefix) mandir=$(var mandir) version=$(var VERSION)
modfile="$DEST$(var modulefilesdir)/cdl/$version"
[ -n "$prefix" ] && [ -n "$version" ] || die "cannot read prefix/VERSION from the Makefile"

if [ "$(var slurmplugin_LTLIBRARIES)" != "" ]; then
    plugdir="$DEST$(var slurmplugindir)"
    [ -f "$plugdir/cdl_spank.so" ] || die "cdl_spank.so not installed into $plugdir"
    [ ! -e "$plugdir/cdl_spank.la" ] || die "make install left cdl_spank.la in $plugdir"
    [ -f "$DEST$(var plugstackdir)/cdl.conf" ] || die "cdl.conf not installed into $(var plugstackdir)"
fi
for page in man1/cdl-train.1 man1/cdlrun.1 man1/cdl-plot.1 man1/cdl-generate.1 man3/libcdl.3 man3/cdl_train_run.3 man3/cdl_train_defaults.3 man5/cdl-model-spec.5 man8/cdl_spank.8; do
    [ -s "$DEST$mandir/$page" ] || die "man page $mandir/$page not installed"
done

# The guides the installed man pages and templates README name (they said
# docs/data.md, ..., which make install left out) are installed in docdir.
docdir=$(var docdir)
[ -s "$DEST$docdir/README.md" ] || die "README.md not installed into $docdir"
for doc in "$top_srcdir"/docs/*.md; do
    [ -s "$DEST$docdir/${doc##*/}" ] || die "${doc#"$top_srcdir"/} is not installed into $docdir (dist_doc_DATA in Makefile.am)"
done
# The installed README's relative links resolve there (they said
# docs/X.md, the source tree's path, with the guides beside README.md).
links=$(grep -oE '\]\([^)]+\)' "$DEST$docdir/README.md" | sed -E 's/^\]\(//; s/\)$//; s/#.*//' |
    grep -vE '^([a-z]+:|$)' | sort -u)
[ -n "$links" ] || die "no relative link in the installed README.md: the check is blind"
for link in $links; do
    [ -e "$DEST$docdir/$link" ] || die "the installed README.md links $link, which is not in $docdir"
done
grep -qE '(^|[^A-Za-z0-9_/.-])docs/[a-z-]+\.md' "$DEST$docdir/README.md" &&
    die "the installed README.md names docs/X.md, a path of the source tree"
named=$(cat "$DEST$mandir"/man[1358]/* "$DEST$(var templatesdir)/README.md" |
    grep -oE '\b[A-Za-z][A-Za-z-]*\.md\b' | sort -u)
[ -n "$named" ] || die "no guide named by the man pages: the check is blind"
for name in $named; do
    [ -s "$DEST$docdir/$name" ] || die "$name, named by an installed man page or the templates README, is not installed in $docdir"
done
grep -q 'docs/[a-z-]*\.md' "$DEST$mandir"/man[1358]/* "$DEST$(var templatesdir)/README.md" &&
    die "an installed man page or the templates README names docs/X.md, a path of the source tree"

for prog in cdl-train cdlrun cdl-plot cdl-generate; do
    [ -s "$DEST$(var bashcompletiondir)/$prog" ] || die "bash completion for $prog not installed"
done
[ -f "$modfile" ] || die "modulefile not installed as $modfile"
head -1 "$modfile" | grep -q '^#%Module' || die "$modfile lacks the #%Module magic"
grep -q '@[a-z]*@' "$modfile" && die "$modfile has unexpanded @...@"
grep -q '\${' "$modfile" && die "$modfile has unexpanded \${...}"
for v in PATH MANPATH PKG_CONFIG_PATH CPATH LIBRARY_PATH LD_RUN_PATH; do
    dir=$(awk -v v="$v" '$1 == "prepend-path" && $2 == v { print $3 }' "$modfile")
    # LD_RUN_PATH is left out for a libdir the loader searches anyway.
    [ "$v" = LD_RUN_PATH ] && [ -z "$dir" ] && case "$(var libdir)" in /usr/lib*|/lib*) continue ;; esac
    case "$dir" in
        "$prefix"/*) ;;
        *) die "$modfile: $v -> '$dir', not under the prefix $prefix" ;;
    esac
done
# With tclsh, the file must be valid Tcl that does what the awk above read:
# the modulefile commands are stubbed to print their arguments.
if command -v tclsh >/dev/null; then
    tclsh >"$TMP/tcl" 2>&1 <<TCL || { cat "$TMP/tcl" >&2; die "$modfile is not valid Tcl"; }
proc prepend-path {var dir} { puts "\$var=\$dir" }
proc module-whatis {text} {}
proc conflict {args} {}
source {$modfile}
TCL
    grep -qx "MANPATH=$mandir" "$TMP/tcl" || { cat "$TMP/tcl" >&2; die "$modfile: MANPATH is not $mandir"; }
fi
grep -q "prepend-path PATH *$(var bindir)\$" "$modfile" || die "$modfile: PATH is not bindir"
grep -qE '^[^#]*LD_LIBRARY_PATH' "$modfile" && die "$modfile sets LD_LIBRARY_PATH (programs use their run path)"
[ -x "$DEST$(var bindir)/cdl-train" ] || die "cdl-train not installed"
"$DEST$(var bindir)/cdlrun" --version | grep -q "^cdlrun (cdl) $version (rank contract [0-9]*)\$" || die "cdlrun --version"
# The plugstack snippet is the admin's to edit (`required`, settings): a
# second make install (the next release) replaced it with the default
# `optional` line, dropping the settings without a word. An edited file is
# kept and the release's goes beside it as cdl.conf.new; an unedited one is
# replaced.
if [ "$(var slurmplugin_LTLIBRARIES)" != "" ]; then
    conf=$DEST$(var plugstackdir)/cdl.conf
    make_install "$DEST"
    [ ! -e "$conf.new" ] || die "make install over an unedited cdl.conf left cdl.conf.new"
    sed -i 's/^optional \(.*\)$/required \1 port_range=30000-30099/' "$conf"
    make_install "$DEST"
    grep -q '^required .* port_range=30000-30099$' "$conf" ||
        die "make install replaced the admin's edited $conf: $(grep -v '^#' "$conf")"
    cmp -s "$conf.new" "$top_builddir/spank/cdl.conf" || die "make install did not put this release's snippet in $conf.new"
    grep -q "kept .*cdl.conf.*cdl.conf.new" "$TMP/log" || die "make install did not say it kept $conf"
    # Two installations side by side share the plugstack dir: the other
    # one's snippet (its own plugin path) must survive uninstalling this
    # one, also as the cdl.conf.new the other's make install left. It used
    # to be removed, and the cluster lost the plugin without a word.
    other='optional /opt/cdl-other/lib/slurm-wlm/cdl_spank.so'
    echo "$other" >"$conf"
    mk uninstall DESTDIR="$DEST" >"$TMP/log" 2>&1 || { tail -30 "$TMP/log" >&2; die "make uninstall failed"; }
    [ "$(cat "$conf" 2>/dev/null)" = "$other" ] ||
        die "make uninstall removed $conf, which loads another installation's plugin"
    grep -q "kept .*cdl.conf: it loads another installation's plugin (/opt/cdl-other/" "$TMP/log" ||
        { cat "$TMP/log" >&2; die "make uninstall did not say why it kept $conf"; }
    make_install "$DEST"
    # ... and installing this one beside it says whose the kept file is
    # (it said "kept the edited cdl.conf").
    grep -q "kept .*cdl.conf: it loads another installation's plugin (/opt/cdl-other/.*rename it to cdl.conf" "$TMP/log" ||
        { cat "$TMP/log" >&2; die "make install beside another installation's cdl.conf did not name it"; }
    mv "$conf" "$conf.keep" && mv "$conf.new" "$conf" && mv "$conf.keep" "$conf.new"
    mk uninstall DESTDIR="$DEST" >"$TMP/log" 2>&1 || { tail -30 "$TMP/log" >&2; die "make uninstall failed"; }
    [ ! -e "$conf" ] || die "make uninstall left $conf, which loads the removed plugin"
    [ "$(cat "$conf.new" 2>/dev/null)" = "$other" ] ||
        die "make uninstall removed $conf.new, another installation's snippet"
    grep -q "kept .*cdl.conf.new: .*rename it to cdl.conf" "$TMP/log" ||
        { cat "$TMP/log" >&2; die "make uninstall did not say to rename $conf.new"; }
    # The Debian package's cdl.conf, its line disabled: the package's file.
    pkg='#optional /usr/lib/x86_64-linux-gnu/slurm-wlm/cdl_spank.so'
    echo "$pkg" >"$conf"
    mk uninstall DESTDIR="$DEST" >"$TMP/log" 2>&1 || { tail -30 "$TMP/log" >&2; die "make uninstall failed"; }
    [ "$(cat "$conf" 2>/dev/null)" = "$pkg" ] ||
        die "make uninstall removed $conf, the package's snippet with its line disabled"
    rm -f "$conf" "$conf.new"
    make_install "$DEST"
fi
# A release installed over an older one in the same prefix: the older
# modulefile (its PATH is this bindir) used to stay, so `module load
# cdl/0.0.1` gave this release's programs. It goes, named; a modulefile of
# another prefix stays.
moddir=$(dirname "$modfile")
printf '#%%Module1.0\nprepend-path PATH            %s\n' "$(var bindir)" >"$moddir/0.0.1"
printf '#%%Module1.0\nprepend-path PATH            /opt/cdl/0.0.2/bin\n' >"$moddir/0.0.2"
make_install "$DEST"
[ ! -e "$moddir/0.0.1" ] || die "make install left the modulefile cdl/0.0.1 of this prefix's older release"
grep -q "removed the modulefile .*/cdl/0.0.1: $version is now installed in its prefix" "$TMP/log" ||
    { cat "$TMP/log" >&2; die "make install did not say it removed cdl/0.0.1"; }
[ -f "$moddir/0.0.2" ] || die "make install removed cdl/0.0.2, another prefix's modulefile"
rm -f "$moddir/0.0.2"
# make uninstall takes everything away again (distcheck's rule), the plugin
# included although libtool no longer has its .la to go by.
mk uninstall DESTDIR="$DEST" >"$TMP/log" 2>&1 || { tail -30 "$TMP/log" >&2; die "make uninstall failed"; }
left=$(find "$DEST" -type f | head -5)
[ -z "$left" ] || die "make uninstall left files: $left"
echo "PASS: make install (prefix $prefix, modulefile cdl/$version)"
