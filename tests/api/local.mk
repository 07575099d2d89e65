# tests/api: libcdl as a C programmer uses it: its exported symbols against
# its headers.
TESTS += tests/api/symbols.sh
EXTRA_DIST += tests/api/symbols.sh
