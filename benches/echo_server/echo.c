/*
 * echo.c: a small, fast MCP stdio server for the fan-out benchmarks.
 *
 * Speaks MCP 2026-07-28 (server/discover) and, for clients that insist on the
 * handshake, answers a legacy `initialize` with 2025-11-25. One JSON-RPC
 * message per line on stdin; all answers produced while handling one read()
 * are written with one write() (or a few, when they pass FLUSH_AT bytes), so
 * the server is never the bottleneck of a benchmark. Exits on stdin EOF.
 *
 *   server/discover -> DiscoverResult (modern, serverInfo in _meta)
 *   initialize      -> legacy InitializeResult (2025-11-25)
 *   ping            -> {}
 *   tools/list      -> one tool, `echo` {token: string, size: integer}
 *   tools/call echo -> CallToolResult whose only text content is `token`,
 *                      padded with '.' to `size` bytes when size is larger
 *   notifications   -> ignored;   unknown methods -> -32601
 *
 * Parsing is a small scanner over the top-level object: it skips strings
 * (honouring escapes) and nested values, so keys such as "id" inside params or
 * _meta are never mistaken for the top-level ones, whatever the key order.
 * The request id is copied verbatim (number or string). The token is copied
 * as its raw JSON string body, so any escapes it holds round-trip unchanged;
 * padding counts the raw bytes (the benchmark tokens are plain ASCII).
 *
 * Build: cc -O2 -o echo echo.c     (stdlib + POSIX only)
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_CHUNK (1 << 20)
#define FLUSH_AT (1 << 20)
#define MAX_PAD (64L << 20)

typedef struct {
    char *p;
    size_t len, cap;
} buf_t;

static buf_t out;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void reserve(buf_t *b, size_t extra) {
    if (b->len + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->len + extra) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) die("realloc");
    b->p = p;
    b->cap = cap;
}

static void put(const char *s, size_t n) {
    reserve(&out, n);
    memcpy(out.p + out.len, s, n);
    out.len += n;
}

#define PUTS(lit) put(lit, sizeof(lit) - 1)

static void flush_out(void) {
    size_t off = 0;
    while (off < out.len) {
        ssize_t w = write(1, out.p + off, out.len - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            exit(0); /* the client went away (EPIPE): nothing left to do */
        }
        off += (size_t)w;
    }
    out.len = 0;
}

/* ---- a minimal JSON scanner (positions only, no allocation) ---- */

static const char *ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    return p;
}

/* p at the opening quote; returns just past the closing quote, or NULL. */
static const char *skip_string(const char *p, const char *e) {
    for (p++; p < e; p++) {
        if (*p == '\\') {
            p++;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

/* p at the first byte of a value; returns just past it, or NULL. */
static const char *skip_value(const char *p, const char *e) {
    if (p >= e) return NULL;
    if (*p == '"') return skip_string(p, e);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        while (p < e) {
            char c = *p;
            if (c == '"') {
                p = skip_string(p, e);
                if (!p) return NULL;
                continue;
            }
            if (c == '{' || c == '[') depth++;
            else if (c == '}' || c == ']') {
                if (--depth == 0) return p + 1;
            }
            p++;
        }
        return NULL;
    }
    /* number, true, false, null */
    while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' &&
           *p != '\r' && *p != '\n')
        p++;
    return p;
}

typedef struct {
    const char *key;
    size_t klen;
    const char *v, *v_end; /* value span, NULL when absent */
} field_t;

/* Walk one object (p at '{') and fill the spans of the wanted keys.
 * Returns 0 on success, -1 when the object is malformed. */
static int scan_object(const char *p, const char *e, field_t *f, int nf) {
    for (int i = 0; i < nf; i++) f[i].v = f[i].v_end = NULL;
    if (p >= e || *p != '{') return -1;
    p = ws(p + 1, e);
    if (p < e && *p == '}') return 0;
    while (p < e) {
        if (*p != '"') return -1;
        const char *k = p + 1;
        const char *k_end = skip_string(p, e);
        if (!k_end) return -1;
        size_t klen = (size_t)(k_end - 1 - k);
        p = ws(k_end, e);
        if (p >= e || *p != ':') return -1;
        p = ws(p + 1, e);
        const char *v = p;
        const char *v_end = skip_value(p, e);
        if (!v_end) return -1;
        for (int i = 0; i < nf; i++) {
            if (!f[i].v && f[i].klen == klen && memcmp(f[i].key, k, klen) == 0) {
                f[i].v = v;
                f[i].v_end = v_end;
            }
        }
        p = ws(v_end, e);
        if (p < e && *p == ',') {
            p = ws(p + 1, e);
            continue;
        }
        if (p < e && *p == '}') return 0;
        return -1;
    }
    return -1;
}

#define FIELD(name) {name, sizeof(name) - 1, NULL, NULL}

static int str_is(const field_t *f, const char *lit, size_t n) {
    /* f is a string value span including quotes */
    return f->v && (size_t)(f->v_end - f->v) == n + 2 && f->v[0] == '"' &&
           memcmp(f->v + 1, lit, n) == 0;
}

#define STR_IS(f, lit) str_is(f, lit, sizeof(lit) - 1)

/* ---- answers ---- */

static void reply_head(const field_t *id) {
    PUTS("{\"jsonrpc\":\"2.0\",\"id\":");
    put(id->v, (size_t)(id->v_end - id->v));
}

static void reply_result(const field_t *id, const char *result, size_t n) {
    reply_head(id);
    PUTS(",\"result\":");
    put(result, n);
    PUTS("}\n");
}

static void reply_error(const field_t *id, const char *code_and_message) {
    if (id && id->v) {
        reply_head(id);
    } else {
        PUTS("{\"jsonrpc\":\"2.0\",\"id\":null");
    }
    PUTS(",\"error\":{");
    put(code_and_message, strlen(code_and_message));
    PUTS("}}\n");
}

static const char DISCOVER[] =
    "{\"resultType\":\"complete\",\"supportedVersions\":[\"2026-07-28\"],"
    "\"capabilities\":{\"tools\":{}},\"ttlMs\":0,\"cacheScope\":\"public\","
    "\"_meta\":{\"io.modelcontextprotocol/serverInfo\":{\"name\":\"echo\",\"version\":\"1.0.0\"}}}";

static const char INITIALIZE[] =
    "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{\"tools\":{}},"
    "\"serverInfo\":{\"name\":\"echo\",\"version\":\"1.0.0\"}}";

static const char TOOLS[] =
    "{\"tools\":[{\"name\":\"echo\",\"description\":\"Return token, padded with '.' to size bytes\","
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{\"token\":{\"type\":\"string\"},"
    "\"size\":{\"type\":\"integer\"}}}}],"
    "\"resultType\":\"complete\",\"ttlMs\":0,\"cacheScope\":\"public\"}";

static long parse_int(const field_t *f) {
    if (!f->v) return 0;
    const char *p = f->v;
    int neg = 0;
    long n = 0;
    if (p < f->v_end && *p == '-') {
        neg = 1;
        p++;
    }
    for (; p < f->v_end && *p >= '0' && *p <= '9'; p++) {
        n = n * 10 + (*p - '0');
        if (n > MAX_PAD) return MAX_PAD;
    }
    return neg ? -n : n;
}

static void tools_call(const field_t *id, const field_t *params) {
    field_t pf[] = {FIELD("name"), FIELD("arguments")};
    if (!params->v || scan_object(params->v, params->v_end, pf, 2) != 0) {
        reply_error(id, "\"code\":-32602,\"message\":\"Invalid params\"");
        return;
    }
    if (!STR_IS(&pf[0], "echo")) {
        reply_error(id, "\"code\":-32602,\"message\":\"Unknown tool\"");
        return;
    }
    field_t af[] = {FIELD("token"), FIELD("size")};
    if (pf[1].v && scan_object(pf[1].v, pf[1].v_end, af, 2) != 0) {
        reply_error(id, "\"code\":-32602,\"message\":\"Invalid arguments\"");
        return;
    }
    const char *tok = "";
    size_t tlen = 0;
    if (af[0].v) {
        if (af[0].v[0] != '"') {
            reply_error(id, "\"code\":-32602,\"message\":\"token must be a string\"");
            return;
        }
        tok = af[0].v + 1;
        tlen = (size_t)(af[0].v_end - af[0].v - 2);
    }
    long size = parse_int(&af[1]);
    size_t pad = size > (long)tlen ? (size_t)size - tlen : 0;

    reply_head(id);
    PUTS(",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"");
    put(tok, tlen);
    if (pad) {
        reserve(&out, pad);
        memset(out.p + out.len, '.', pad);
        out.len += pad;
    }
    PUTS("\"}],\"isError\":false,\"resultType\":\"complete\"}}\n");
}

static void handle_line(const char *p, const char *e) {
    p = ws(p, e);
    while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
    if (p == e) return;
    field_t top[] = {FIELD("id"), FIELD("method"), FIELD("params")};
    if (scan_object(p, e, top, 3) != 0) {
        reply_error(NULL, "\"code\":-32700,\"message\":\"Parse error\"");
        return;
    }
    field_t *id = &top[0], *method = &top[1], *params = &top[2];
    if (!method->v) return; /* a response to us, or junk without a method */
    if (!id->v) return;     /* a notification: nothing to answer */

    if (STR_IS(method, "tools/call")) {
        tools_call(id, params);
    } else if (STR_IS(method, "server/discover")) {
        reply_result(id, DISCOVER, sizeof(DISCOVER) - 1);
    } else if (STR_IS(method, "tools/list")) {
        reply_result(id, TOOLS, sizeof(TOOLS) - 1);
    } else if (STR_IS(method, "initialize")) {
        reply_result(id, INITIALIZE, sizeof(INITIALIZE) - 1);
    } else if (STR_IS(method, "ping")) {
        reply_result(id, "{}", 2);
    } else {
        reply_error(id, "\"code\":-32601,\"message\":\"Method not found\"");
    }
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    buf_t in = {0};
    size_t scanned = 0; /* bytes of `in` already searched for '\n' */
    for (;;) {
        reserve(&in, READ_CHUNK);
        ssize_t n = read(0, in.p + in.len, in.cap - in.len);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("read");
        }
        if (n == 0) break;
        in.len += (size_t)n;

        size_t start = 0;
        char *nl;
        while ((nl = memchr(in.p + scanned, '\n', in.len - scanned)) != NULL) {
            handle_line(in.p + start, nl);
            start = scanned = (size_t)(nl - in.p) + 1;
            if (out.len >= FLUSH_AT) flush_out();
        }
        scanned = in.len;
        if (start) {
            memmove(in.p, in.p + start, in.len - start);
            in.len -= start;
            scanned -= start;
        }
        flush_out();
    }
    flush_out();
    return 0;
}
