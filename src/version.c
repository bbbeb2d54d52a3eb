/* The library's version string (kvlm_version, see kvlm.h): the header's
 * KVLM_VERSION as it was when the library was compiled. */
#include "kvlm.h"

const char *kvlm_version(void) { return KVLM_VERSION; }
