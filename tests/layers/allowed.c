/* Layer probe, the control: what algorithms/ may include compiles. */
#include "algorithms/rules.h"
#include "runtime/log.h"
#include "runtime/wait.h"
#include "transport/services.h"

int probe(void);
int probe(void)
{
    return 0;
}
