/* Layer probe: algorithms/ reaching the transport's private header must not
 * compile (algorithms see only transport/services.h). */
#include "transport/transport.h"
