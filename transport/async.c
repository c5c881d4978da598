/* The event thread: device/port/QP async events and, in rdmacm mode, late
 * connection events. It only marks peers (or the device) failed; the
 * caller's thread sees that at its next call. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "runtime/log.h"
#include "transport/transport.h"

static void fail_all(shs_ctx_t *ctx, const char *why)
{
    for (int r = 0; r < ctx->size; r++)
        if (r != ctx->rank)
            shs__peer_fail(&ctx->peers[r], SHS_ERR_DEVICE, "%s", why);
}

static void handle_async(shs_ctx_t *ctx)
{
    struct ibv_async_event ev;

    while (ibv_get_async_event(ctx->verbs, &ev) == 0) {
        switch (ev.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR: {
            shs__conn_t *conn = ev.element.qp->qp_context;
            if (conn != NULL)
                shs__peer_fail(conn->peer, SHS_ERR_TRANSPORT, "qp 0x%x: %s",
                               ev.element.qp->qp_num, ibv_event_type_str(ev.event_type));
            break;
        }
        case IBV_EVENT_PORT_ERR:
            if (ev.element.port_num == ctx->port)
                SHS_ERROR("%s port %d went down: connections will fail until it is back "
                          "(check the link and the netdev)", ctx->dev_name, ctx->port);
            break;
        case IBV_EVENT_PORT_ACTIVE:
            if (ev.element.port_num == ctx->port)
                SHS_WARN("%s port %d is active again", ctx->dev_name, ctx->port);
            break;
        case IBV_EVENT_DEVICE_FATAL:
            SHS_ERROR("%s: fatal device error; every connection is lost", ctx->dev_name);
            atomic_store(&ctx->device_failed, 1);
            fail_all(ctx, "local device fatal error");
            break;
        case IBV_EVENT_CQ_ERR:
            SHS_ERROR("%s: completion queue overrun", ctx->dev_name);
            atomic_store(&ctx->device_failed, 1);
            fail_all(ctx, "completion queue error");
            break;
        default:
            SHS_DEBUG("%s: async event %s", ctx->dev_name, ibv_event_type_str(ev.event_type));
            break;
        }
        ibv_ack_async_event(&ev);
    }
}

static void *async_main(void *arg)
{
    shs_ctx_t *ctx = arg;
    struct pollfd pfd[3] = {
        {.fd = ctx->wake_pipe[0], .events = POLLIN},
        {.fd = ctx->verbs->async_fd, .events = POLLIN},
        {.fd = ctx->cm_channel != NULL ? ctx->cm_channel->fd : -1, .events = POLLIN},
    };

    for (;;) {
        /* no deadline: this thread sleeps until an event or shutdown */
        int n = poll(pfd, 3, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            SHS_ERROR("event thread: poll: %s; device events are no longer watched",
                      strerror(errno));
            return NULL;
        }
        if (pfd[0].revents != 0)
            return NULL;
        if (pfd[1].revents != 0)
            handle_async(ctx);
        if (pfd[2].revents != 0) {
            struct rdma_cm_event *ev;
            while (rdma_get_cm_event(ctx->cm_channel, &ev) == 0) {
                shs__rdmacm_handle_late_event(ctx, ev);
                shs__rdmacm_ack_event(ev);
            }
        }
    }
}

shs_status_t shs__async_start(shs_ctx_t *ctx)
{
    int fl = fcntl(ctx->verbs->async_fd, F_GETFL);
    if (fl < 0 || fcntl(ctx->verbs->async_fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        SHS_ERROR("async fd: fcntl: %s", strerror(errno));
        return SHS_ERR_IO;
    }
    if (pipe2(ctx->wake_pipe, O_CLOEXEC) != 0) {
        SHS_ERROR("pipe: %s", strerror(errno));
        return SHS_ERR_IO;
    }
    int rc = pthread_create(&ctx->async_thread, NULL, async_main, ctx);
    if (rc != 0) {
        SHS_ERROR("pthread_create (event thread): %s", strerror(rc));
        close(ctx->wake_pipe[0]);
        close(ctx->wake_pipe[1]);
        return SHS_ERR_NO_RESOURCE;
    }
    ctx->async_running = true;
    return SHS_OK;
}

void shs__async_stop(shs_ctx_t *ctx)
{
    if (!ctx->async_running)
        return;
    char c = 0;
    if (write(ctx->wake_pipe[1], &c, 1) != 1)
        SHS_WARN("event thread: wake: %s", strerror(errno));
    pthread_join(ctx->async_thread, NULL);
    close(ctx->wake_pipe[0]);
    close(ctx->wake_pipe[1]);
    ctx->async_running = false;
}
