/* The RESP2 server of `segd cache --resp` (cache/resp.h): listening
 * sockets, epoll loops, per-connection buffers and back-pressure, and the
 * front's metrics. Parsing and answering are cache/resp_parse.c and
 * cache/resp_cmd.c. */
#define _GNU_SOURCE /* accept4 */
#include "cache/resp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/secret.h"
#include "cache/resp_cmd.h"
#include "metrics/listen.h"

#define READ_CHUNK (64 * 1024)
/* Replies waiting for a slow client: above this no more commands are read. */
#define OUT_HIGH (4 * 1024 * 1024)
#define MAX_EVENTS 64
#define ACCEPT_RETRY_MS 100
#define IDLE_CHECK_MAX_MS 1000 /* idle connections are looked for at least this often */
#define MAX_CLIENTS_REPLY "-ERR max number of clients reached\r\n"
/* After a protocol error the client may still be sending (a 1 GB bulk
 * string): closing with unread input would reset the connection and could
 * destroy the error reply before the client reads it. So the reply is
 * followed by a half-close and this much input is read and dropped. */
#define LINGER_MAX (4 * 1024 * 1024)

typedef struct conn {
    struct conn *prev, *next; /* the worker's open connections */
    int fd;
    uint32_t events;   /* registered with epoll */
    int closing;       /* close once the replies are sent */
    int lingering;     /* protocol error sent: input is read and dropped */
    size_t dropped;    /* bytes dropped while lingering */
    segd_buf_t in, out;
    size_t in_pos, out_pos;
    int64_t active_ms; /* segd_mono_ms of the last input read or output sent */
    segd_resp_client_t client;
} conn_t;

typedef struct worker {
    struct segd_resp *server;
    pthread_t thread;
    int started;
    int lfd, ep, wake;       /* listening socket, epoll, eventfd that stops the loop */
    segd_resp_worker_t exec; /* command scratch and counters */
    segd_resp_cmd_t cmd;     /* 24 KiB: one per worker, not on the stack */
    conn_t *conns;           /* open connections, closed at stop */
    int accept_paused;       /* out of descriptors: lfd is off the epoll set */
    int64_t next_idle_check; /* segd_mono_ms; with an idle timeout */
    void *listen_tag;        /* epoll data of lfd */
    _Atomic uint64_t accepted, proto_errors;
    _Atomic uint64_t refused, idle_closed; /* past max_clients; idle too long */
} worker_t;

struct segd_resp {
    segd_resp_shared_t shared;
    segd_resp_opts_t o;
    worker_t *workers;
    int nworkers;
    segd_metrics_t *metrics;
    segd_metric_t *commands, *connections, *accepted, *proto_errors, *reply_lookups;
    segd_metric_t *refused, *idle_closed;
    char *password; /* shared.password's memory; NULL = none */
};

/* ---- connections ------------------------------------------------------- */

static void accept_resume(worker_t *w)
{
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = w->listen_tag};
    if (w->accept_paused && !epoll_ctl(w->ep, EPOLL_CTL_ADD, w->lfd, &le))
        w->accept_paused = 0;
}

static void conn_close(worker_t *w, conn_t *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    segd_buf_free(&c->in);
    segd_buf_free(&c->out);
    free(c);
    atomic_fetch_sub(&w->server->shared.connections, 1);
    accept_resume(w); /* a descriptor is free again */
}

static size_t pending_out(const conn_t *c) { return c->out.len - c->out_pos; }

/* Reading while replies pile up would let a client that never reads make
 * us buffer without bound: input waits until the output drains. */
static int conn_want(worker_t *w, conn_t *c)
{
    uint32_t ev = 0;
    if (!c->closing && pending_out(c) <= OUT_HIGH)
        ev |= EPOLLIN;
    if (pending_out(c))
        ev |= EPOLLOUT;
    if (ev == c->events)
        return 0;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    c->events = ev;
    return epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &e);
}

/* Every complete command in the input, answered in order. -1: close now. */
static int conn_process(worker_t *w, conn_t *c)
{
    char err[128];
    while (!c->closing && pending_out(c) <= OUT_HIGH) {
        size_t used = 0;
        segd_resp_parse_rc_t rc = segd_resp_parse(
            (const char *)c->in.data + c->in_pos, c->in.len - c->in_pos,
            !segd_resp_authenticated(&w->exec, &c->client), &w->cmd, &used, err, sizeof(err));
        if (rc == SEGD_RESP_MORE)
            break;
        if (rc == SEGD_RESP_PROTO) {
            atomic_fetch_add_explicit(&w->proto_errors, 1, memory_order_relaxed);
            c->closing = c->lingering = 1;
            return segd_resp_error(&c->out, err) ? -1 : 0;
        }
        int r = segd_resp_exec(&w->exec, &c->client, &w->cmd, &c->out);
        c->in_pos += used;
        if (r < 0)
            return -1;
        c->closing = r == 1;
    }
    if (c->in_pos == c->in.len) {
        c->in.len = c->in_pos = 0;
    } else if (c->in_pos > c->in.len / 2) {
        memmove(c->in.data, c->in.data + c->in_pos, c->in.len - c->in_pos);
        c->in.len -= c->in_pos;
        c->in_pos = 0;
    }
    return 0;
}

static int conn_read(worker_t *w, conn_t *c)
{
    if (segd_buf_reserve(&c->in, READ_CHUNK))
        return -1;
    ssize_t n = read(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len);
    if (n == 0)
        return -1;
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    c->in.len += (size_t)n;
    c->active_ms = segd_mono_ms();
    return conn_process(w, c);
}

static int conn_write(conn_t *c)
{
    while (pending_out(c)) {
        ssize_t n = send(c->fd, c->out.data + c->out_pos, pending_out(c), MSG_NOSIGNAL);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        c->out_pos += (size_t)n;
        c->active_ms = segd_mono_ms();
    }
    c->out.len = c->out_pos = 0;
    /* a reply of many MiB once need not stay allocated for the connection */
    if (c->out.cap > OUT_HIGH) {
        segd_buf_free(&c->out);
    }
    return 0;
}

/* Drops input until the client closes, or LINGER_MAX bytes. -1: close. */
static int conn_drop(conn_t *c)
{
    char b[16384];
    ssize_t n = read(c->fd, b, sizeof(b));
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    c->dropped += (size_t)n;
    return n == 0 || c->dropped > LINGER_MAX ? -1 : 0;
}

static void conn_event(worker_t *w, conn_t *c, uint32_t ev)
{
    if (c->lingering && c->closing && !pending_out(c)) {
        if (conn_drop(c))
            conn_close(w, c);
        return;
    }
    int bad = (ev & (EPOLLERR | EPOLLHUP)) && !(ev & EPOLLIN);
    if (!bad && (ev & EPOLLIN) && !c->closing)
        bad = conn_read(w, c);
    if (!bad && pending_out(c))
        bad = conn_write(c);
    /* input held back by back-pressure is answered once the output drained */
    if (!bad && !c->closing && !pending_out(c) && c->in.len > c->in_pos)
        bad = conn_process(w, c) || conn_write(c);
    if (!bad && c->lingering && !pending_out(c)) {
        shutdown(c->fd, SHUT_WR);
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        c->events = EPOLLIN;
        if (!epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &e))
            return;
        bad = 1;
    }
    if (bad || (c->closing && !pending_out(c)) || conn_want(w, c))
        conn_close(w, c);
}

/* A slot among max_clients, counted over all workers; 0: none left. */
static int take_slot(worker_t *w)
{
    _Atomic int64_t *open = &w->server->shared.connections;
    if (atomic_fetch_add(open, 1) < w->server->o.max_clients)
        return 1;
    atomic_fetch_sub(open, 1);
    return 0;
}

/* As Redis does past maxclients: the error, best effort (the socket is new
 * and its buffer empty, so one send fits), then the close. Without a limit
 * every client held buffers until the descriptors ran out. */
static void refuse(worker_t *w, int fd)
{
    ssize_t sent = send(fd, MAX_CLIENTS_REPLY, sizeof(MAX_CLIENTS_REPLY) - 1, MSG_NOSIGNAL);
    (void)sent;
    close(fd);
    atomic_fetch_add_explicit(&w->refused, 1, memory_order_relaxed);
}

static void accept_all(worker_t *w)
{
    for (;;) {
        int fd = accept4(w->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            /* Out of descriptors, the pending connection stays readable: a
             * level-triggered loop would spin on it. Accepting resumes when
             * one of ours closes, or after ACCEPT_RETRY_MS. */
            if ((errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) &&
                !epoll_ctl(w->ep, EPOLL_CTL_DEL, w->lfd, NULL))
                w->accept_paused = 1;
            return;
        }
        if (!take_slot(w)) {
            refuse(w, fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        conn_t *c = calloc(1, sizeof(*c));
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        if (!c || epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &e)) {
            free(c);
            close(fd);
            atomic_fetch_sub(&w->server->shared.connections, 1);
            continue;
        }
        c->fd = fd;
        c->events = EPOLLIN;
        c->active_ms = segd_mono_ms();
        c->next = w->conns;
        if (w->conns)
            w->conns->prev = c;
        w->conns = c;
        c->client.id = atomic_fetch_add(&w->server->shared.next_client_id, 1) + 1;
        atomic_fetch_add_explicit(&w->accepted, 1, memory_order_relaxed);
    }
}

/* Closes the connections idle for idle_timeout_ms (Redis's timeout): a
 * client that went away without a FIN, or a pool's forgotten connection,
 * otherwise holds its slot and buffers for ever. */
static void close_idle(worker_t *w, int64_t now)
{
    int64_t timeout = w->server->o.idle_timeout_ms;
    for (conn_t *c = w->conns, *next; c; c = next) {
        next = c->next;
        if (now - c->active_ms >= timeout) {
            atomic_fetch_add_explicit(&w->idle_closed, 1, memory_order_relaxed);
            conn_close(w, c);
        }
    }
}

/* epoll_wait's timeout: the accept retry while paused, the next look for
 * idle connections when they time out, else none (-1). */
static int wait_ms(worker_t *w, int64_t now)
{
    int ms = w->accept_paused ? ACCEPT_RETRY_MS : -1;
    if (w->server->o.idle_timeout_ms > 0) {
        int64_t d = w->next_idle_check - now;
        int idle = d < 0 ? 0 : (int)d;
        ms = ms < 0 || idle < ms ? idle : ms;
    }
    return ms;
}

static void idle_tick(worker_t *w)
{
    int64_t timeout = w->server->o.idle_timeout_ms, now = segd_mono_ms();
    if (timeout <= 0 || now < w->next_idle_check)
        return;
    close_idle(w, now);
    int64_t every = timeout / 4 < IDLE_CHECK_MAX_MS ? timeout / 4 : IDLE_CHECK_MAX_MS;
    w->next_idle_check = now + (every > 10 ? every : 10);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    struct epoll_event ev[MAX_EVENTS];
    static const int listen_tag = 0, wake_tag = 0;
    struct epoll_event le = {.events = EPOLLIN, .data.ptr = (void *)&listen_tag};
    w->listen_tag = (void *)&listen_tag;
    struct epoll_event we = {.events = EPOLLIN, .data.ptr = (void *)&wake_tag};
    if (epoll_ctl(w->ep, EPOLL_CTL_ADD, w->lfd, &le) ||
        epoll_ctl(w->ep, EPOLL_CTL_ADD, w->wake, &we))
        return NULL;
    for (int stop = 0; !stop;) {
        int n = epoll_wait(w->ep, ev, MAX_EVENTS, wait_ms(w, segd_mono_ms()));
        if (n == 0)
            accept_resume(w);
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == &wake_tag)
                stop = 1;
            else if (ev[i].data.ptr == &listen_tag)
                accept_all(w);
            else
                conn_event(w, ev[i].data.ptr, ev[i].events);
        }
        idle_tick(w); /* after the events: it frees connections they point to */
    }
    while (w->conns)
        conn_close(w, w->conns);
    return NULL;
}

/* A listening socket on sa for one worker; all share the port. */
static int open_listener(const struct sockaddr_storage *sa, socklen_t salen)
{
    int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0)
        return -1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) ||
        bind(fd, (const struct sockaddr *)sa, salen) || listen(fd, 1024)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static segd_err_t worker_open(segd_resp_t *r, worker_t *w, struct sockaddr_storage *sa,
                              socklen_t salen, char *errstr, size_t n, const char *listen)
{
    w->server = r;
    w->lfd = w->ep = w->wake = -1;
    if (segd_resp_worker_init(&w->exec, &r->shared))
        return SEGD_ERR_NOMEM;
    w->lfd = open_listener(sa, salen);
    if (w->lfd < 0)
        return segd_errf(SEGD_ERR_IO, errstr, n, "--resp %s: cannot listen: %s", listen,
                         strerror(errno));
    if (!segd_listen_port(sa)) { /* port 0: the others join the port the first got */
        socklen_t len = salen;
        getsockname(w->lfd, (struct sockaddr *)sa, &len);
        r->shared.port = segd_listen_port(sa);
    }
    w->ep = epoll_create1(EPOLL_CLOEXEC);
    w->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->ep < 0 || w->wake < 0)
        return segd_errf(SEGD_ERR_IO, errstr, n, "--resp: epoll: %s", strerror(errno));
    if (pthread_create(&w->thread, NULL, worker_main, w))
        return segd_errf(SEGD_ERR_IO, errstr, n, "--resp: cannot start a thread");
    w->started = 1;
    return SEGD_OK;
}

static void collect(void *ctx)
{
    segd_resp_t *r = ctx;
    size_t ncmd = segd_resp_command_count();
    for (size_t k = 0; k < ncmd; k++) {
        for (int res = 0; res < 2; res++) {
            uint64_t sum = 0;
            for (int i = 0; i < r->nworkers; i++)
                if (r->workers[i].exec.counts)
                    sum += atomic_load_explicit(&r->workers[i].exec.counts[k][res],
                                                memory_order_relaxed);
            const char *labels[2] = {segd_resp_command_name(k), res ? "error" : "ok"};
            if (sum)
                segd_metric_set(r->commands, labels, (double)sum);
        }
    }
    uint64_t acc = 0, perr = 0, hits = 0, misses = 0, refused = 0, idle = 0;
    for (int i = 0; i < r->nworkers; i++) {
        acc += atomic_load_explicit(&r->workers[i].accepted, memory_order_relaxed);
        refused += atomic_load_explicit(&r->workers[i].refused, memory_order_relaxed);
        idle += atomic_load_explicit(&r->workers[i].idle_closed, memory_order_relaxed);
        perr += atomic_load_explicit(&r->workers[i].proto_errors, memory_order_relaxed);
        hits += atomic_load_explicit(&r->workers[i].exec.reply_hits, memory_order_relaxed);
        misses += atomic_load_explicit(&r->workers[i].exec.reply_misses, memory_order_relaxed);
    }
    if (hits + misses) {
        segd_metric_set(r->reply_lookups, (const char *[]){"hit"}, (double)hits);
        segd_metric_set(r->reply_lookups, (const char *[]){"miss"}, (double)misses);
    }
    segd_metric_set(r->accepted, NULL, (double)acc);
    segd_metric_set(r->refused, NULL, (double)refused);
    segd_metric_set(r->idle_closed, NULL, (double)idle);
    segd_metric_set(r->proto_errors, NULL, (double)perr);
    segd_metric_set(r->connections, NULL, (double)atomic_load(&r->shared.connections));
}

static segd_err_t register_metrics(segd_resp_t *r)
{
    segd_metrics_t *m = r->metrics;
    if (!m)
        return SEGD_OK;
    r->commands = segd_metrics_counter(m, "segd_resp_commands_total",
                                       "RESP commands answered, by command and result.",
                                       "command,result");
    r->connections = segd_metrics_gauge(m, "segd_resp_connections",
                                        "RESP client connections open.", NULL);
    r->accepted = segd_metrics_counter(m, "segd_resp_connections_total",
                                       "RESP client connections accepted.", NULL);
    r->proto_errors = segd_metrics_counter(m, "segd_resp_protocol_errors_total",
                                           "RESP connections closed for a protocol error or "
                                           "an oversize command.", NULL);
    r->reply_lookups = segd_metrics_counter(m, "segd_resp_reply_cache_lookups_total",
                                            "Range replies looked up in the workers' reply "
                                            "caches, by result (hit, miss).", "result");
    r->refused = segd_metrics_counter(m, "segd_resp_connections_refused_total",
                                      "RESP connections refused: max clients reached.", NULL);
    r->idle_closed = segd_metrics_counter(m, "segd_resp_idle_closed_total",
                                          "RESP connections closed after the idle timeout.",
                                          NULL);
    if (!r->commands || !r->connections || !r->accepted || !r->proto_errors ||
        !r->reply_lookups || !r->refused || !r->idle_closed)
        return SEGD_ERR_NOMEM;
    return segd_metrics_add_collector(m, collect, r);
}

segd_err_t segd_resp_start(segd_resp_t **out, const char *listen, int threads,
                           segd_edge_t *edge, segd_metrics_t *metrics, char *errstr,
                           size_t errstr_size)
{
    return segd_resp_start_cached(out, listen, threads,
                                  (size_t)SEGD_RESP_REPLY_CACHE_DEFAULT_MB << 20, edge, metrics,
                                  errstr, errstr_size);
}

void segd_resp_opts_default(segd_resp_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->reply_cache_bytes = (size_t)SEGD_RESP_REPLY_CACHE_DEFAULT_MB << 20;
    o->max_clients = SEGD_RESP_MAX_CLIENTS_DEFAULT;
}

segd_err_t segd_resp_start_cached(segd_resp_t **out, const char *listen, int threads,
                                  size_t reply_cache_bytes, segd_edge_t *edge,
                                  segd_metrics_t *metrics, char *errstr, size_t errstr_size)
{
    segd_resp_opts_t o;
    segd_resp_opts_default(&o);
    o.reply_cache_bytes = reply_cache_bytes;
    return segd_resp_start_opts(out, listen, threads, &o, edge, metrics, errstr, errstr_size);
}

segd_err_t segd_resp_start_opts(segd_resp_t **out, const char *listen, int threads,
                                const segd_resp_opts_t *o, segd_edge_t *edge,
                                segd_metrics_t *metrics, char *errstr, size_t errstr_size)
{
    struct sockaddr_storage sa;
    socklen_t salen;
    segd_err_t err = segd_listen_parse("--resp", listen, &sa, &salen, errstr, errstr_size);
    if (err)
        return err;
    if (threads < 1 || threads > 256)
        return segd_errf(SEGD_ERR_CONFIG, errstr, errstr_size,
                         "--resp-threads %d: want 1 to 256", threads);
    if (o->max_clients < 1 || o->idle_timeout_ms < 0)
        return segd_errf(SEGD_ERR_CONFIG, errstr, errstr_size,
                         "--resp-max-clients %d, idle timeout %lld ms: want >= 1 and >= 0",
                         o->max_clients, (long long)o->idle_timeout_ms);
    segd_resp_t *r = calloc(1, sizeof(*r));
    if (!r || !(r->workers = calloc((size_t)threads, sizeof(*r->workers)))) {
        free(r);
        return SEGD_ERR_NOMEM;
    }
    r->o = *o;
    r->shared.edge = edge;
    r->shared.reply_cache_bytes = o->reply_cache_bytes;
    r->shared.started_ms = segd_wall_ms();
    r->shared.port = segd_listen_port(&sa);
    r->metrics = metrics;
    if (o->password && !(r->password = strdup(o->password))) {
        free(r->workers);
        free(r);
        return SEGD_ERR_NOMEM;
    }
    r->shared.password = r->password;
    r->o.password = r->password; /* the caller's copy is only borrowed */
    r->shared.password_len = o->password ? strlen(o->password) : 0;
    for (; r->nworkers < threads; r->nworkers++) {
        err = worker_open(r, &r->workers[r->nworkers], &sa, salen, errstr, errstr_size, listen);
        if (err) {
            r->nworkers++; /* its parts are closed by stop */
            goto out_stop;
        }
    }
    if ((err = register_metrics(r)))
        goto out_stop;
    *out = r;
    return SEGD_OK;
out_stop:
    segd_resp_stop(r);
    return err;
}

void segd_resp_set_ready(segd_resp_t *r, int ready)
{
    atomic_store_explicit(&r->shared.serving, ready, memory_order_release);
}

int segd_resp_port(const segd_resp_t *r) { return r->shared.port; }

void segd_resp_stop(segd_resp_t *r)
{
    if (!r)
        return;
    if (r->metrics)
        segd_metrics_remove_collector(r->metrics, collect, r);
    for (int i = 0; i < r->nworkers; i++) {
        worker_t *w = &r->workers[i];
        uint64_t one = 1;
        if (w->started && write(w->wake, &one, sizeof(one)) == sizeof(one))
            pthread_join(w->thread, NULL);
    }
    for (int i = 0; i < r->nworkers; i++) {
        worker_t *w = &r->workers[i];
        if (w->lfd >= 0)
            close(w->lfd);
        if (w->ep >= 0)
            close(w->ep);
        if (w->wake >= 0)
            close(w->wake);
        segd_resp_worker_free(&w->exec);
    }
    free(r->workers);
    segd_secret_free(r->password);
    free(r);
}
