# Sourced by the tests that install the build tree (tests/e2e/install.sh,
# tests/api/installed.sh), after tests/e2e/common.sh: mk runs make in the
# build tree, var prints one of its Makefile's variables, make_install DEST
# installs into DEST (DESTDIR) or fails the test with make's last lines.
command -v "${MAKE:-make}" >/dev/null || { echo "SKIP: no make"; exit 77; }
# Run make as a top-level make: under `make -j2 check` the inherited
# MAKEFLAGS would print "Entering directory" into the variables read below
# and warn about the jobserver.
unset MAKEFLAGS MFLAGS MAKELEVEL
mk() { "${MAKE:-make}" -s --no-print-directory -C "$top_builddir" "$@"; }
var() { mk -f Makefile -f - print-var V="$1" <<'MK'
print-var:
	@echo '$($(V))'
MK
}
make_install() {
    mk install DESTDIR="$1" >"$TMP/log" 2>&1 ||
        { tail -30 "$TMP/log" >&2; die "make install DESTDIR=$1 failed"; }
}
