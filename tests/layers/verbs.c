/* Layer probe: a verbs call outside transport/ must not compile. */
#include <infiniband/verbs.h>

int probe(struct ibv_qp *qp);
int probe(struct ibv_qp *qp)
{
    return ibv_post_send(qp, 0, 0);
}
