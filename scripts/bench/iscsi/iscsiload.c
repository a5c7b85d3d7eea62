/* iscsiload: an iSCSI load generator on libiscsi's asynchronous API, so Strata's target and
 * tgt are measured through the same user-space initiator (Debian's fio has no libiscsi
 * engine). One session, QD commands in flight, for SECONDS; prints one line of key=value
 * results like scripts/bench/nfs/nfsload.c: iops, MiB/s, latency p50/p99 in microseconds
 * (all commands), then reads (rd50, rd99) and writes (wr50, wr99) alone.
 *
 *   iscsiload URL SIZE_MIB BLOCK_BYTES READ_PERCENT QD SECONDS rand|seq|flush
 *   URL: iscsi://[user%secret@]127.0.0.1:3260/IQN/LUN
 * READ16/WRITE16 over the first SIZE_MIB of the LUN; `flush` issues a SYNCHRONIZE CACHE
 * after every write and counts the pair as one operation (a database's commit: QD 1).
 * `fill` as the mode writes SIZE_MIB sequentially with 1 MiB writes and exits.
 */
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct slot { uint64_t start_ns; int is_read; int flushing; };

static struct iscsi_context *iscsi;
static int lun;
static uint32_t lba_size;
static uint64_t area_bytes, block, deadline_ns, ops, errors, seq_off;
static int read_pct, sequential, flush_mode, in_flight;
static unsigned char *wbuf;
struct lats { uint64_t *v; size_t n, cap; };
static struct lats lat, rlat, wlat;
static uint64_t rng = 88172645463325252ULL;

static uint64_t now_ns(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + t.tv_nsec;
}
static uint64_t next_rand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static void push(struct lats *l, uint64_t v) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 1 << 20;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v) { perror("realloc"); exit(1); }
    }
    l->v[l->n++] = v;
}

static void issue(struct slot *s);

static void done(struct iscsi_context *ctx, int status, void *command_data, void *priv) {
    (void)ctx;
    struct slot *s = priv;
    struct scsi_task *task = command_data;
    uint64_t t = now_ns();
    if (status != SCSI_STATUS_GOOD) {
        errors++;
        fprintf(stderr, "command failed: status %d: %s\n", status, iscsi_get_error(iscsi));
    }
    if (task) scsi_free_scsi_task(task);
    if (status == SCSI_STATUS_GOOD && flush_mode && !s->is_read && !s->flushing) {
        /* The write is in: now the cache flush that makes it durable. */
        s->flushing = 1;
        if (!iscsi_synchronizecache10_task(iscsi, lun, 0, 0, 0, 0, done, s)) {
            fprintf(stderr, "issue flush: %s\n", iscsi_get_error(iscsi)); exit(1);
        }
        return;
    }
    in_flight--;
    if (status == SCSI_STATUS_GOOD) {
        ops++;
        push(&lat, t - s->start_ns);
        push(s->is_read ? &rlat : &wlat, t - s->start_ns);
    }
    if (t < deadline_ns && !errors) issue(s);
}

static void issue(struct slot *s) {
    uint64_t blocks = area_bytes / block, off;
    if (sequential) { off = seq_off; seq_off = (seq_off + block) % (blocks * block); }
    else off = (next_rand() % blocks) * block;
    s->is_read = (int)(next_rand() % 100) < read_pct;
    s->flushing = 0;
    s->start_ns = now_ns();
    struct scsi_task *t = s->is_read
        ? iscsi_read16_task(iscsi, lun, off / lba_size, block, lba_size, 0, 0, 0, 0, 0, done, s)
        : iscsi_write16_task(iscsi, lun, off / lba_size, wbuf, block, lba_size, 0, 0, 0, 0, 0, done, s);
    if (!t) { fprintf(stderr, "issue: %s\n", iscsi_get_error(iscsi)); exit(1); }
    in_flight++;
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(struct lats *l, double q) {
    if (!l->n) return 0;
    qsort(l->v, l->n, sizeof *l->v, cmp);
    return l->v[(size_t)(l->n * q)] / 1e3;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: iscsiload URL SIZE_MIB BLOCK READ_PCT QD SECONDS rand|seq|flush|fill\n");
        return 2;
    }
    area_bytes = strtoull(argv[2], 0, 10) << 20; block = strtoull(argv[3], 0, 10);
    read_pct = atoi(argv[4]); int qd = atoi(argv[5]); double secs = atof(argv[6]);
    sequential = strcmp(argv[7], "seq") == 0 || strcmp(argv[7], "fill") == 0;
    flush_mode = strcmp(argv[7], "flush") == 0;
    iscsi = iscsi_create_context("iqn.2026-11.io.strata:iscsiload");
    struct iscsi_url *u = iscsi ? iscsi_parse_full_url(iscsi, argv[1]) : NULL;
    if (!u) { fprintf(stderr, "url %s: %s\n", argv[1], iscsi ? iscsi_get_error(iscsi) : "no context"); return 1; }
    iscsi_set_targetname(iscsi, u->target);
    iscsi_set_session_type(iscsi, ISCSI_SESSION_NORMAL);
    iscsi_set_header_digest(iscsi, ISCSI_HEADER_DIGEST_NONE);
    if (u->user[0]) iscsi_set_initiator_username_pwd(iscsi, u->user, u->passwd);
    lun = u->lun;
    if (iscsi_full_connect_sync(iscsi, u->portal, lun) != 0) {
        fprintf(stderr, "login to %s: %s\n", argv[1], iscsi_get_error(iscsi)); return 1;
    }
    struct scsi_task *rc = iscsi_readcapacity16_sync(iscsi, lun);
    struct scsi_readcapacity16 *cap = rc ? scsi_datain_unmarshall(rc) : NULL;
    if (!cap) { fprintf(stderr, "READ CAPACITY(16): %s\n", iscsi_get_error(iscsi)); return 1; }
    lba_size = cap->block_length;
    uint64_t lun_bytes = (cap->returned_lba + 1) * lba_size;
    scsi_free_scsi_task(rc);
    if (area_bytes > lun_bytes) { fprintf(stderr, "the LUN holds %llu bytes, less than asked\n", (unsigned long long)lun_bytes); return 1; }
    size_t wlen = block > (1 << 20) ? block : (1 << 20);
    wbuf = malloc(wlen);
    for (size_t i = 0; i < wlen; i++) wbuf[i] = (unsigned char)next_rand();
    if (strcmp(argv[7], "fill") == 0) { block = 1 << 20; read_pct = 0; qd = 4; secs = 1e9; }
    struct slot *slots = calloc(qd, sizeof *slots);
    uint64_t t0 = now_ns();
    deadline_ns = t0 + (uint64_t)(secs * 1e9);
    if (strcmp(argv[7], "fill") == 0) deadline_ns = UINT64_MAX;
    uint64_t fill_ops = area_bytes / block;
    for (int i = 0; i < qd; i++) issue(&slots[i]);
    while (in_flight > 0) {
        if (strcmp(argv[7], "fill") == 0 && ops + in_flight >= fill_ops) deadline_ns = 0;
        struct pollfd p = { .fd = iscsi_get_fd(iscsi), .events = iscsi_which_events(iscsi) };
        if (poll(&p, 1, 1000) < 0) { perror("poll"); return 1; }
        if (iscsi_service(iscsi, p.revents) < 0) { fprintf(stderr, "service: %s\n", iscsi_get_error(iscsi)); return 1; }
    }
    double elapsed = (now_ns() - t0) / 1e9;
    printf("iops=%.0f mibs=%.1f p50_us=%.0f p99_us=%.0f rd50=%.0f rd99=%.0f wr50=%.0f wr99=%.0f errors=%llu\n",
           ops / elapsed, ops * (double)block / elapsed / (1 << 20), pct(&lat, 0.5), pct(&lat, 0.99),
           pct(&rlat, 0.5), pct(&rlat, 0.99), pct(&wlat, 0.5), pct(&wlat, 0.99), (unsigned long long)errors);
    iscsi_logout_sync(iscsi);
    iscsi_destroy_context(iscsi);
    return errors ? 1 : 0;
}
