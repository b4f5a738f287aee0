/* Test helper: a real nginx (Debian's) on a free loopback port, serving a
 * directory, started as a child and stopped by pid. */
#ifndef SEGD_TEST_NGINX_UTIL_H
#define SEGD_TEST_NGINX_UTIL_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct nginx {
    pid_t pid;
    int port;
    char dir[64]; /* prefix: nginx.conf, logs, www/ */
} nginx_t;

static inline int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || getsockname(fd, (struct sockaddr *)&a, &len))
        return -1;
    close(fd);
    return ntohs(a.sin_port);
}

static inline int port_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* extra: server-block directives (locations). Returns 0 when serving. */
static inline int nginx_start(nginx_t *n, const char *extra)
{
    snprintf(n->dir, sizeof(n->dir), "/tmp/segd-nginx-XXXXXX");
    if (!mkdtemp(n->dir) || chmod(n->dir, 0755))
        return -1;
    n->port = free_port();
    char path[128];
    snprintf(path, sizeof(path), "%s/www", n->dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/nginx.conf", n->dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f,
            "daemon off;\nmaster_process on;\nworker_processes 1;\nuser root;\n"
            "pid %s/nginx.pid;\nerror_log %s/error.log;\nevents {}\n"
            "http {\n access_log off;\n client_body_temp_path %s/body;\n"
            " server {\n  listen 127.0.0.1:%d;\n  root %s/www;\n  default_type application/json;\n"
            "  %s\n }\n}\n",
            n->dir, n->dir, n->dir, n->port, n->dir, extra ? extra : "");
    fclose(f);
    n->pid = fork();
    if (n->pid == 0) {
        execl("/usr/sbin/nginx", "nginx", "-p", n->dir, "-c", path, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 100; i++) {
        if (port_open(n->port))
            return 0;
        usleep(50000);
    }
    return -1;
}

static inline void nginx_stop(nginx_t *n)
{
    if (n->pid > 0) {
        kill(n->pid, SIGTERM);
        waitpid(n->pid, NULL, 0);
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", n->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", n->dir);
}

/* Prints nginx's error log to stderr: why it did not start. */
static inline void nginx_print_errors(const nginx_t *n)
{
    char cmd[160];
    fprintf(stderr, "nginx did not start; its error log:\n");
    snprintf(cmd, sizeof(cmd), "cat %s/error.log >&2", n->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "(none)\n");
}

/* Writes a file under www/ (parent directories created). */
static inline int nginx_put_file(const nginx_t *n, const char *rel, const char *body)
{
    char path[512], cmd[600];
    snprintf(path, sizeof(path), "%s/www/%s", n->dir, rel);
    snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
    if (system(cmd) != 0)
        return -1;
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(body, f);
    return fclose(f);
}

#endif
