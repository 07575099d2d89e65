/* Preloaded by tests/e2e/mixed-libcdl.sh: a libcdl.so.0 of an older
 * release, as LD_LIBRARY_PATH naming another installation's libdir gives
 * one (its cdl_version() is all the programs ask it). */
const char *cdl_version(void);
const char *cdl_version(void)
{
    return "0.0.1";
}
