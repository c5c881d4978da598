/* Framed bootstrap connections: every wait bounded by a deadline, every frame
 * after the handshake authenticated. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/boot/boot.h"
#include "runtime/log.h"

/* Direction byte of the frame MACs: a frame cannot be reflected back. */
#define DIR_FROM_ROOT 'R'
#define DIR_FROM_JOINER 'J'

static const char *peer_name(int peer, char *buf, size_t len)
{
    if (peer >= 0)
        snprintf(buf, len, "rank %d", peer);
    else
        snprintf(buf, len, "a connection that has not authenticated");
    return buf;
}

static shs_status_t io_full(int fd, void *buf, size_t len, bool sending, shs__deadline_t dl,
                            int peer, const char *what)
{
    uint8_t *p = buf;
    char name[64];

    while (len > 0) {
        ssize_t n = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) {
            SHS_ERROR("%s closed its connection during %s",
                      peer_name(peer, name, sizeof(name)), what);
            return SHS_ERR_PEER_FAILED;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int left = shs__deadline_remaining_ms(dl);
            if (left == 0) {
                SHS_ERROR("timed out waiting for %s during %s",
                          peer_name(peer, name, sizeof(name)), what);
                return SHS_ERR_TIMEOUT;
            }
            struct pollfd pfd = {.fd = fd, .events = sending ? POLLOUT : POLLIN};
            if (poll(&pfd, 1, left) < 0 && errno != EINTR) {
                SHS_ERROR("poll on %s failed during %s: %s",
                          peer_name(peer, name, sizeof(name)), what, strerror(errno));
                return SHS_ERR_IO;
            }
            continue;
        }
        if (errno == ECONNRESET || errno == EPIPE || errno == ETIMEDOUT ||
            errno == EHOSTUNREACH || errno == ENETUNREACH) {
            SHS_ERROR("connection to %s broke during %s: %s",
                      peer_name(peer, name, sizeof(name)), what, strerror(errno));
            return SHS_ERR_PEER_FAILED;
        }
        SHS_ERROR("%s on the connection to %s failed during %s: %s",
                  sending ? "send" : "recv", peer_name(peer, name, sizeof(name)), what,
                  strerror(errno));
        return SHS_ERR_IO;
    }
    return SHS_OK;
}

void shs__boot_link_init(link_t *l, int fd, bool root_side)
{
    memset(l, 0, sizeof(*l));
    l->fd = fd;
    l->tx_dir = root_side ? DIR_FROM_ROOT : DIR_FROM_JOINER;
    l->rx_dir = root_side ? DIR_FROM_JOINER : DIR_FROM_ROOT;
}

void shs__boot_link_close(link_t *l)
{
    shs__mac_abort(&l->rx);
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    l->authed = false;
    /* the session key is of no use to anyone after the job */
    memset(l->key, 0, sizeof(l->key));
}

/* MAC of one frame: direction, sequence number, then header and payload. */
static shs_status_t frame_mac_begin(const link_t *l, uint8_t dir, uint64_t seq,
                                    const uint8_t hdr[SHS_BOOT_HDR_LEN], shs__mac_t *m)
{
    uint8_t pre[9];
    pre[0] = dir;
    shs__put_u64(pre + 1, seq);
    shs_status_t st = shs__mac_begin(m, l->key, sizeof(l->key));
    if (st != SHS_OK)
        return st;
    shs__mac_update(m, pre, sizeof(pre));
    shs__mac_update(m, hdr, SHS_BOOT_HDR_LEN);
    return SHS_OK;
}

shs_status_t shs__boot_send(link_t *l, uint16_t type, const void *fixed, size_t fixed_len,
                            const void *data, size_t data_len, shs__deadline_t dl,
                            int peer, const char *what)
{
    uint8_t head[SHS_BOOT_HDR_LEN + SHS_BOOT_HELLO_LEN];
    uint8_t mac[MAC_LEN];
    shs__boot_hdr_t h = {SHS_BOOT_MAGIC, SHS_BOOT_PROTOCOL_VERSION, type,
                         (uint32_t)(fixed_len + data_len)};

    shs__boot_hdr_encode(&h, head);
    if (fixed_len > 0)
        memcpy(head + SHS_BOOT_HDR_LEN, fixed, fixed_len);
    if (l->authed) {
        shs__mac_t m;
        shs_status_t st = frame_mac_begin(l, l->tx_dir, l->tx_seq, head, &m);
        if (st != SHS_OK)
            return st;
        shs__mac_update(&m, head + SHS_BOOT_HDR_LEN, fixed_len);
        shs__mac_update(&m, data, data_len);
        if ((st = shs__mac_end(&m, mac)) != SHS_OK)
            return st;
        l->tx_seq++;
    }
    shs_status_t st = io_full(l->fd, head, SHS_BOOT_HDR_LEN + fixed_len, true, dl, peer, what);
    if (st == SHS_OK && data_len > 0)
        st = io_full(l->fd, (void *)(uintptr_t)data, data_len, true, dl, peer, what);
    if (st == SHS_OK && l->authed)
        st = io_full(l->fd, mac, sizeof(mac), true, dl, peer, what);
    return st;
}

shs_status_t shs__boot_recv_hdr(link_t *l, shs__boot_hdr_t *hdr, shs__deadline_t dl, int peer,
                                const char *what)
{
    uint8_t raw[SHS_BOOT_HDR_LEN];
    char name[64];

    shs__mac_abort(&l->rx);
    shs_status_t st = io_full(l->fd, raw, sizeof(raw), false, dl, peer, what);
    if (st != SHS_OK)
        return st;
    st = shs__boot_hdr_decode(raw, sizeof(raw), SHS_BOOT_MAX_MSG, hdr);
    if (st == SHS_ERR_VERSION_MISMATCH)
        SHS_ERROR("%s speaks bootstrap protocol version %u, this rank %u (during %s); "
                  "mixed shadowsync versions in one job",
                  peer_name(peer, name, sizeof(name)), shs__get_u16(raw + 4),
                  SHS_BOOT_PROTOCOL_VERSION, what);
    else if (st != SHS_OK)
        SHS_ERROR("malformed bootstrap frame from %s during %s (magic 0x%08x, length %u); "
                  "is another service listening on the bootstrap port?",
                  peer_name(peer, name, sizeof(name)), what, shs__get_u32(raw),
                  shs__get_u32(raw + 8));
    if (st == SHS_OK && l->authed)
        st = frame_mac_begin(l, l->rx_dir, l->rx_seq, raw, &l->rx);
    return st;
}

shs_status_t shs__boot_recv_body(link_t *l, void *buf, size_t len, shs__deadline_t dl, int peer,
                                 const char *what)
{
    shs_status_t st = io_full(l->fd, buf, len, false, dl, peer, what);
    if (st == SHS_OK && l->authed)
        shs__mac_update(&l->rx, buf, len);
    return st;
}

shs_status_t shs__boot_recv_discard(link_t *l, size_t len, shs__deadline_t dl, int peer,
                                    const char *what)
{
    uint8_t sink[4096];
    while (len > 0) {
        size_t n = len < sizeof(sink) ? len : sizeof(sink);
        shs_status_t st = shs__boot_recv_body(l, sink, n, dl, peer, what);
        if (st != SHS_OK)
            return st;
        len -= n;
    }
    return SHS_OK;
}

shs_status_t shs__boot_recv_end(link_t *l, shs__deadline_t dl, int peer, const char *what)
{
    uint8_t got[MAC_LEN], want[MAC_LEN];
    char name[64];

    if (!l->authed)
        return SHS_OK;
    shs_status_t st = io_full(l->fd, got, sizeof(got), false, dl, peer, what);
    if (st != SHS_OK) {
        shs__mac_abort(&l->rx);
        return st;
    }
    if ((st = shs__mac_end(&l->rx, want)) != SHS_OK)
        return st;
    if (!shs__mac_equal(got, want)) {
        SHS_ERROR("a bootstrap frame from %s failed authentication during %s (frame %llu): "
                  "altered, injected or replayed on the way; dropping the job",
                  peer_name(peer, name, sizeof(name)), what, (unsigned long long)l->rx_seq);
        return SHS_ERR_PROTOCOL;
    }
    l->rx_seq++;
    return SHS_OK;
}

/* The joiner's side of an error frame: log what rank 0 said, return its status. */
shs_status_t shs__boot_recv_error(link_t *l, const shs__boot_hdr_t *h, shs__deadline_t dl,
                                  const char *what)
{
    uint8_t buf[ERROR_FIXED + ERROR_TEXT_MAX];
    shs__boot_error_t e;

    if (h->length < ERROR_FIXED || h->length > sizeof(buf)) {
        SHS_ERROR("malformed error frame from rank 0 during %s (length %u)", what, h->length);
        return SHS_ERR_PROTOCOL;
    }
    shs_status_t st = shs__boot_recv_body(l, buf, h->length, dl, 0, what);
    if (st == SHS_OK)
        st = shs__boot_recv_end(l, dl, 0, what);
    if (st != SHS_OK)
        return st;
    if (shs__boot_error_decode(buf, h->length, &e) != SHS_OK) {
        SHS_ERROR("error frame from rank 0 carries status %d during %s",
                  (int)(int32_t)shs__get_u32(buf), what);
        return SHS_ERR_PROTOCOL;
    }
    SHS_ERROR("rank 0 reports during %s: %s", what, e.text);
    return (shs_status_t)e.status;
}

/* Best effort and never blocking: used when the job is already failing, and a
 * peer that does not drain its socket must not delay the others' news. */
void shs__boot_send_error_nowait(link_t *l, shs_status_t st, int culprit, const char *text)
{
    uint8_t buf[SHS_BOOT_HDR_LEN + ERROR_FIXED + ERROR_TEXT_MAX + MAC_LEN];
    size_t tlen = strnlen(text, ERROR_TEXT_MAX);
    size_t len = SHS_BOOT_HDR_LEN + ERROR_FIXED + tlen;
    shs__boot_hdr_t h = {SHS_BOOT_MAGIC, SHS_BOOT_PROTOCOL_VERSION, FT_ERROR,
                         (uint32_t)(ERROR_FIXED + tlen)};

    shs__boot_hdr_encode(&h, buf);
    shs__put_u32(buf + SHS_BOOT_HDR_LEN, (uint32_t)(int32_t)st);
    shs__put_u32(buf + SHS_BOOT_HDR_LEN + 4, (uint32_t)(int32_t)culprit);
    memcpy(buf + SHS_BOOT_HDR_LEN + ERROR_FIXED, text, tlen);
    if (l->authed) {
        shs__mac_t m;
        if (frame_mac_begin(l, l->tx_dir, l->tx_seq, buf, &m) != SHS_OK)
            return;
        shs__mac_update(&m, buf + SHS_BOOT_HDR_LEN, len - SHS_BOOT_HDR_LEN);
        if (shs__mac_end(&m, buf + len) != SHS_OK)
            return;
        len += MAC_LEN;
        l->tx_seq++;
    }
    if (send(l->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        SHS_DEBUG("could not deliver an error frame: %s", strerror(errno));
}

/* Rank 0 tells every other rank why the job stops, then poisons the object. */
shs_status_t shs__boot_fail_all(shs__boot_t *b, shs_status_t st, int culprit,
                                const char *text)
{
    for (int r = 1; r < b->size; r++)
        if (r != culprit && b->peer[r].fd >= 0)
            shs__boot_send_error_nowait(&b->peer[r], st, culprit, text);
    b->poisoned = st;
    return st;
}

int shs__boot_socket_options(int fd)
{
    int one = 1;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -1;
    /* Frames are a header then a payload; without NODELAY a barrier can stall
     * on the 40 ms delayed-ack timer. */
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}
