/* nfsload: an NFSv3 load generator on libnfs's asynchronous API, so Strata and
 * nfs-ganesha are measured through the same user-space client (Debian's fio has no nfs
 * engine). One connection, QD requests in flight, for SECONDS; prints one line of
 * key=value results: iops, MiB/s, latency p50/p99 in microseconds (all requests), then
 * the same for reads (rd50, rd99) and writes (wr50, wr99) alone.
 *
 *   nfsload URL FILE SIZE_MIB BLOCK_BYTES READ_PERCENT QD SECONDS rand|seq
 *   URL: nfs://127.0.0.1/export?nfsport=N&mountport=M
 * The file is created and filled with random data (1 MiB writes) if shorter than SIZE.
 * NFSLOAD_TRACE=PATH also writes one line per request there: completion time since the
 * start in ms, latency in µs, r or w (to see when the slow requests happen).
 */
#include <sys/time.h>
#include <nfsc/libnfs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <time.h>

struct slot { uint64_t start_ns; int is_read; };

static struct nfs_context *nfs;
static struct nfsfh *fh;
static uint64_t file_bytes, block, deadline_ns, ops, errors, seq_off;
static int read_pct, sequential, in_flight;
static char *wbuf;
struct lats { uint64_t *v; size_t n, cap; };
static struct lats lat, rlat, wlat;
static uint64_t rng = 88172645463325252ULL, start_ns;
static FILE *trace;

static uint64_t now_ns(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + t.tv_nsec;
}
static uint64_t next_rand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static void issue(struct slot *s);

static void push(struct lats *l, uint64_t v) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 1 << 20;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v) { perror("realloc"); exit(1); }
    }
    l->v[l->n++] = v;
}

static void done(int err, struct nfs_context *n, void *data, void *priv) {
    (void)n; (void)data;
    struct slot *s = priv;
    uint64_t t = now_ns();
    in_flight--;
    if (err < 0) errors++;
    else {
        ops++;
        push(&lat, t - s->start_ns);
        push(s->is_read ? &rlat : &wlat, t - s->start_ns);
        if (trace) fprintf(trace, "%.3f %.0f %c\n", (t - start_ns) / 1e6, (t - s->start_ns) / 1e3, s->is_read ? 'r' : 'w');
    }
    if (t < deadline_ns) issue(s);
}

static void issue(struct slot *s) {
    uint64_t blocks = file_bytes / block, off;
    if (sequential) { off = seq_off; seq_off = (seq_off + block) % (blocks * block); }
    else off = (next_rand() % blocks) * block;
    s->is_read = (int)(next_rand() % 100) < read_pct;
    s->start_ns = now_ns();
    int r = s->is_read ? nfs_pread_async(nfs, fh, off, block, done, s)
                       : nfs_pwrite_async(nfs, fh, off, block, wbuf, done, s);
    if (r != 0) { errors++; fprintf(stderr, "issue: %s\n", nfs_get_error(nfs)); exit(1); }
    in_flight++;
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Percentile q (0..1) of l in microseconds, sorting it first; 0 when empty. */
static double pct(struct lats *l, double q) {
    if (!l->n) return 0;
    qsort(l->v, l->n, sizeof *l->v, cmp);
    return l->v[(size_t)(l->n * q)] / 1e3;
}

int main(int argc, char **argv) {
    if (argc != 9) { fprintf(stderr, "usage: nfsload URL FILE SIZE_MIB BLOCK READ_PCT QD SECONDS rand|seq\n"); return 2; }
    file_bytes = strtoull(argv[3], 0, 10) << 20; block = strtoull(argv[4], 0, 10);
    read_pct = atoi(argv[5]); int qd = atoi(argv[6]); double secs = atof(argv[7]);
    sequential = strcmp(argv[8], "seq") == 0;
    nfs = nfs_init_context();
    struct nfs_url *u = nfs_parse_url_dir(nfs, argv[1]);
    if (!u || nfs_mount(nfs, u->server, u->path) != 0) { fprintf(stderr, "mount %s: %s\n", argv[1], nfs_get_error(nfs)); return 1; }
    wbuf = malloc(block > (1 << 20) ? block : (1 << 20));
    for (size_t i = 0; i < (block > (1 << 20) ? block : (1 << 20)); i++) wbuf[i] = (char)next_rand();
    struct nfs_stat_64 st;
    if (nfs_stat64(nfs, argv[2], &st) != 0 || st.nfs_size < file_bytes) {
        if (nfs_open2(nfs, argv[2], O_RDWR | O_CREAT, 0644, &fh) != 0) { fprintf(stderr, "create: %s\n", nfs_get_error(nfs)); return 1; }
        for (uint64_t off = 0; off < file_bytes; off += 1 << 20)
            if (nfs_pwrite(nfs, fh, off, 1 << 20, wbuf) < 0) { fprintf(stderr, "fill: %s\n", nfs_get_error(nfs)); return 1; }
        nfs_fsync(nfs, fh); nfs_close(nfs, fh);
    }
    if (nfs_open(nfs, argv[2], O_RDWR, &fh) != 0) { fprintf(stderr, "open: %s\n", nfs_get_error(nfs)); return 1; }
    struct slot *slots = calloc(qd, sizeof *slots);
    const char *trace_path = getenv("NFSLOAD_TRACE");
    if (trace_path && !(trace = fopen(trace_path, "w"))) { perror(trace_path); return 1; }
    uint64_t t0 = now_ns();
    start_ns = t0;
    deadline_ns = t0 + (uint64_t)(secs * 1e9);
    for (int i = 0; i < qd; i++) issue(&slots[i]);
    while (in_flight > 0) {
        struct pollfd p = { .fd = nfs_get_fd(nfs), .events = nfs_which_events(nfs) };
        if (poll(&p, 1, 1000) < 0) { perror("poll"); return 1; }
        if (nfs_service(nfs, p.revents) < 0) { fprintf(stderr, "service: %s\n", nfs_get_error(nfs)); return 1; }
    }
    double elapsed = (now_ns() - t0) / 1e9;
    if (trace) fclose(trace);
    nfs_fsync(nfs, fh); nfs_close(nfs, fh);
    printf("iops=%.0f mibs=%.1f p50_us=%.0f p99_us=%.0f rd50=%.0f rd99=%.0f wr50=%.0f wr99=%.0f errors=%llu\n",
           ops / elapsed, ops * (double)block / elapsed / (1 << 20), pct(&lat, 0.5), pct(&lat, 0.99),
           pct(&rlat, 0.5), pct(&rlat, 0.99), pct(&wlat, 0.5), pct(&wlat, 0.99), (unsigned long long)errors);
    return errors ? 1 : 0;
}
