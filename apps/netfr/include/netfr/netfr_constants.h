/* Upstream NetFR's header name (telescope-proj/netfr: netfr/netfr_constants.h), so that code
 * including it builds unchanged: this library declares its whole C API in netfr/netfr.h. */
#ifndef NETFR_NETFR_CONSTANTS_H
#define NETFR_NETFR_CONSTANTS_H
#include "netfr.h"  // beside this header, whatever the include path
#endif
