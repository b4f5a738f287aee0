/* The /metrics, /healthz, /readyz server; see server.h. The listening
 * socket is made here, not by libmicrohttpd, so that a port in use is
 * reported with its errno instead of MHD's bare failure. */
#define _GNU_SOURCE
#include "metrics/server.h"

#include "metrics/listen.h"

#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define EXPOSITION_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct segd_metrics_server {
    struct MHD_Daemon *d;
    int fd;
    int port;
    segd_metrics_t *m;
    segd_ready_cb ready;
    void *ctx;
};

int segd_metrics_listen_enabled(const char *listen)
{
    return listen && *listen && strcmp(listen, "off");
}

/* Takes the bytes of b (MUST_FREE) or copies text; returns MHD's result. */
static int send_body(struct MHD_Connection *c, unsigned status, const char *type,
                     segd_buf_t *b, const char *text)
{
    struct MHD_Response *r;
    if (b) {
        r = MHD_create_response_from_buffer(b->len, b->data, MHD_RESPMEM_MUST_FREE);
        if (r)
            *b = (segd_buf_t){0};
    } else {
        r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    }
    if (!r) {
        if (b)
            segd_buf_free(b);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

int segd_metrics_reply(struct MHD_Connection *c, segd_metrics_t *m)
{
    segd_buf_t b = {0};
    if (segd_metrics_render(m, &b)) {
        segd_buf_free(&b);
        return send_body(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain", NULL,
                         "out of memory\n");
    }
    if (!b.len) /* MHD takes no NULL buffer: an empty registry is an empty page */
        return send_body(c, MHD_HTTP_OK, EXPOSITION_TYPE, NULL, "");
    return send_body(c, MHD_HTTP_OK, EXPOSITION_TYPE, &b, NULL);
}

static int readyz(segd_metrics_server_t *s, struct MHD_Connection *c)
{
    segd_buf_t b = {0};
    int ready = s->ready ? s->ready(s->ctx, &b) : 1;
    unsigned status = ready ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
    if (!b.len) {
        segd_buf_free(&b);
        return send_body(c, status, "application/json", NULL,
                         ready ? "{\"ready\":true}" : "{\"ready\":false}");
    }
    return send_body(c, status, "application/json", &b, NULL);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **req_cls)
{
    (void)version, (void)upload, (void)upload_size, (void)req_cls;
    segd_metrics_server_t *s = cls;
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return send_body(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", NULL, "GET only\n");
    if (!strcmp(url, "/metrics"))
        return segd_metrics_reply(c, s->m);
    if (!strcmp(url, "/healthz"))
        return send_body(c, MHD_HTTP_OK, "application/json", NULL, "{\"status\":\"ok\"}");
    if (!strcmp(url, "/readyz"))
        return readyz(s, c);
    return send_body(c, MHD_HTTP_NOT_FOUND, "text/plain", NULL,
                     "no such endpoint: /metrics, /healthz, /readyz\n");
}

static int bound_port(int fd)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    if (getsockname(fd, (struct sockaddr *)&sa, &len))
        return -1;
    return ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                          : ((struct sockaddr_in *)&sa)->sin_port);
}

static segd_err_t open_socket(segd_metrics_server_t *s, const char *addr, char *errstr,
                              size_t n)
{
    struct sockaddr_storage sa;
    socklen_t len = 0;
    segd_err_t err = segd_listen_parse("metrics.listen", addr, &sa, &len, errstr, n);
    if (err)
        return err;
    s->fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (s->fd < 0 || setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(s->fd, (struct sockaddr *)&sa, len) || listen(s->fd, 64))
        return segd_errf(SEGD_ERR_IO, errstr, n, "metrics.listen %s: cannot listen: %s", addr,
                         strerror(errno));
    s->port = bound_port(s->fd);
    return SEGD_OK;
}

segd_err_t segd_metrics_server_start(segd_metrics_server_t **out, const char *listen,
                                     segd_metrics_t *m, segd_ready_cb ready, void *ctx,
                                     char *errstr, size_t n)
{
    segd_metrics_server_t *s = calloc(1, sizeof(*s));
    if (!s)
        return SEGD_ERR_NOMEM;
    s->fd = -1;
    s->m = m;
    s->ready = ready;
    s->ctx = ctx;
    segd_err_t err = open_socket(s, listen, errstr, n);
    if (err)
        goto out_free;
    s->d = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                            handle, s, MHD_OPTION_LISTEN_SOCKET, s->fd,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_END);
    if (!s->d) {
        err = segd_errf(SEGD_ERR_IO, errstr, n, "metrics.listen %s: HTTP server did not start",
                        listen);
        goto out_free;
    }
    *out = s;
    return SEGD_OK;
out_free:
    if (s->fd >= 0)
        close(s->fd);
    free(s);
    return err;
}

int segd_metrics_server_port(const segd_metrics_server_t *s) { return s->port; }

void segd_metrics_server_stop(segd_metrics_server_t *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->d); /* MHD closes a listen socket it was given */
    free(s);
}
