# tests/api: libcdl as a C programmer uses it: its exported symbols against
# its headers, the C programs of the docs, the installed headers and
# library through pkg-config.
TESTS += tests/api/symbols.sh tests/api/docs.sh tests/api/installed.sh
EXTRA_DIST += tests/api/symbols.sh tests/api/docs.sh tests/api/installed.sh tests/api/make-install.sh
# Not beside tests/e2e/install.sh: two `make install` runs in one build tree
# under make -j may relink the same files.
tests/api/installed.log: tests/e2e/install.log
