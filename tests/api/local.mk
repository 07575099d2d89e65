# tests/api: libcdl as a C programmer uses it: its exported symbols against
# its headers, the C programs of the docs.
TESTS += tests/api/symbols.sh tests/api/docs.sh
EXTRA_DIST += tests/api/symbols.sh tests/api/docs.sh
