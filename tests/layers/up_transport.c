/* Layer probe: runtime/ including a transport header must not compile. */
#include "transport/services.h"
