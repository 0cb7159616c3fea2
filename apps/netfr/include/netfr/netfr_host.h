/* Upstream NetFR's header name (telescope-proj/netfr: netfr/netfr_host.h), so that code including
 * it builds unchanged: this library declares its whole C API in netfr/netfr.h. */
#ifndef NETFR_NETFR_HOST_H
#define NETFR_NETFR_HOST_H
#include "netfr.h"  // beside this header, whatever the include path
#endif
