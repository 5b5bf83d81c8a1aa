/* base/version.c: mxp_version, mxp_version_number, mxp_abi_version
 * (mixprec/base.h): the values of mixprec/api.h this library was built
 * with. */
#include <mixprec/base.h>

const char *mxp_version(void) { return MIXPREC_VERSION_STRING; }
int mxp_version_number(void) { return MIXPREC_VERSION_NUMBER; }
int mxp_abi_version(void) { return MIXPREC_ABI_VERSION; }
