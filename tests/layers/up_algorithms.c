/* Layer probe: transport/ including an algorithms/ header must not compile. */
#include "algorithms/rules.h"
