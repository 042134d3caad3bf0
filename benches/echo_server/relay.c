/*
 * relay.c: the cheapest process hop there is, for the fan-out benchmarks.
 *
 *   relay PROGRAM [ARGS...]
 *
 * Runs PROGRAM as its child and copies bytes both ways, unchanged: its own stdin to the
 * child's stdin, the child's stdout to its own stdout. No parsing, no framing: one
 * poll() loop in C over non-blocking pipes, each direction with its own buffer (so a
 * full pipe one way never stops the other: no deadlock at any load).
 *
 * Why: trunkline puts a worker process between the host and every server. Put this
 * relay in the raw client's place of that worker (`raw-relay` in fanout.py) and what is
 * measured is the floor any design with a process per server pays for the hop itself:
 * two more pipe crossings and two more wake-ups per call.
 *
 * Exits once the child's stdout has ended and all of it is written (it closes the
 * child's stdin on its own stdin's EOF), with the child's exit status.
 *
 * Build: cc -O2 -o relay relay.c     (POSIX only)
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHUNK (256 * 1024)
/* Past this many bytes waiting one way, stop reading that way until they drain: the
 * back-pressure of a pipe, kept (memory stays bounded at any load). */
#define HELD_MAX (4 * 1024 * 1024)

struct way {
    int from, to;       /* read end, write end; -1 once closed */
    char *buf;
    size_t off, len, cap;  /* buf[off..len): read and not yet written */
};

static void nonblocking(int fd) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* Bytes read one way and not yet written. */
static size_t held(const struct way *w) { return w->len - w->off; }

/* Read what is there into the way's buffer; 0 at EOF or on an error, else 1. */
static int fill(struct way *w) {
    if (w->off > 0 && w->off >= held(w)) {
        /* The unwritten rest to the front: never more bytes than were written since the
         * last move, so each byte is moved at most once on average. */
        memmove(w->buf, w->buf + w->off, held(w));
        w->len -= w->off;
        w->off = 0;
    }
    if (w->cap - w->len < CHUNK) {
        w->cap = w->cap * 2 > w->len + CHUNK ? w->cap * 2 : w->len + CHUNK;
        w->buf = realloc(w->buf, w->cap);
        if (!w->buf) { perror("relay: realloc"); exit(2); }
    }
    ssize_t n = read(w->from, w->buf + w->len, w->cap - w->len);
    if (n > 0) { w->len += (size_t)n; return 1; }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 1;
    return 0;
}

/* Write what the pipe takes now; -1 when the other end is gone. */
static int drain(struct way *w) {
    while (w->off < w->len) {
        ssize_t n = write(w->to, w->buf + w->off, w->len - w->off);
        if (n < 0) return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
        w->off += (size_t)n;
    }
    w->off = w->len = 0;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: relay PROGRAM [ARGS...]\n"); return 2; }
    int in[2], out[2];
    if (pipe(in) || pipe(out)) { perror("relay: pipe"); return 2; }
    pid_t pid = fork();
    if (pid < 0) { perror("relay: fork"); return 2; }
    if (pid == 0) {
        dup2(in[0], 0); dup2(out[1], 1);
        close(in[0]); close(in[1]); close(out[0]); close(out[1]);
        execvp(argv[1], argv + 1);
        perror("relay: exec"); _exit(127);
    }
    close(in[0]); close(out[1]);
    struct way down = {0, in[1], NULL, 0, 0, 0};   /* client -> server */
    struct way up = {out[0], 1, NULL, 0, 0, 0};    /* server -> client */
    nonblocking(0); nonblocking(1); nonblocking(in[1]); nonblocking(out[0]);
    while (up.from >= 0 || held(&up) > 0) {
        struct pollfd fds[4] = {
            {held(&down) < HELD_MAX ? down.from : -1, POLLIN, 0},
            {held(&down) ? down.to : -1, POLLOUT, 0},
            {held(&up) < HELD_MAX ? up.from : -1, POLLIN, 0},
            {held(&up) ? up.to : -1, POLLOUT, 0},
        };
        if (poll(fds, 4, -1) < 0) {
            if (errno == EINTR) continue;
            perror("relay: poll"); return 2;
        }
        if (fds[0].revents && !fill(&down)) { down.from = -1; }
        if (fds[2].revents && !fill(&up)) up.from = -1;   /* the server is done */
        if (drain(&down) < 0) { down.off = down.len = 0; down.from = -1; }
        if (drain(&up) < 0) break;                 /* the client is gone */
        if (down.from < 0 && held(&down) == 0 && down.to >= 0) { close(down.to); down.to = -1; }
    }
    if (down.to >= 0) close(down.to);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
