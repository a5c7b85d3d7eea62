/* A small libiscsi client for the data-integrity test (tests/tools.rs): the Debian
 * libiscsi tools have no dd, fio lacks its libiscsi engine and qemu's iSCSI module is
 * packaged apart, so the test builds this against libiscsi-dev.
 *
 *   roundtrip write URL FILE   write FILE at LBA 0 (256 KiB WRITE16s, then SYNCHRONIZE CACHE)
 *   roundtrip read URL LEN OUT read LEN bytes from LBA 0 into OUT (READ16s)
 *
 * Environment: RT_DIGEST=1 asks for CRC32C header and data digests; RT_TARGET_USER and
 * RT_TARGET_PASSWORD turn on mutual CHAP. Exit status 0 on success.
 */
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK (256 * 1024)

static struct scsi_task *check(struct iscsi_context *iscsi, struct scsi_task *t, const char *what) {
    if (t == NULL || t->status != SCSI_STATUS_GOOD) {
        fprintf(stderr, "%s failed: %s\n", what, iscsi_get_error(iscsi));
        exit(1);
    }
    return t;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: roundtrip write URL FILE | read URL LEN OUT\n");
        return 2;
    }
    struct iscsi_context *iscsi = iscsi_create_context("iqn.2026-01.org.strata:roundtrip");
    struct iscsi_url *url = iscsi_parse_full_url(iscsi, argv[2]);
    if (url == NULL) {
        fprintf(stderr, "bad URL: %s\n", iscsi_get_error(iscsi));
        return 1;
    }
    iscsi_set_targetname(iscsi, url->target);
    iscsi_set_session_type(iscsi, ISCSI_SESSION_NORMAL);
    if (getenv("RT_DIGEST"))
        iscsi_set_header_digest(iscsi, ISCSI_HEADER_DIGEST_CRC32C);
    if (url->user[0])
        iscsi_set_initiator_username_pwd(iscsi, url->user, url->passwd);
    if (getenv("RT_TARGET_USER"))
        iscsi_set_target_username_pwd(iscsi, getenv("RT_TARGET_USER"), getenv("RT_TARGET_PASSWORD"));
    if (iscsi_full_connect_sync(iscsi, url->portal, url->lun) != 0) {
        fprintf(stderr, "login failed: %s\n", iscsi_get_error(iscsi));
        return 1;
    }
    struct scsi_task *t = check(iscsi, iscsi_readcapacity16_sync(iscsi, url->lun), "READ CAPACITY 16");
    struct scsi_readcapacity16 *rc = scsi_datain_unmarshall(t);
    if (rc == NULL) {
        fprintf(stderr, "cannot parse READ CAPACITY 16\n");
        return 1;
    }
    int bs = rc->block_length;
    unsigned char *buf = malloc(CHUNK);
    if (strcmp(argv[1], "write") == 0) {
        FILE *f = fopen(argv[3], "rb");
        if (f == NULL) {
            perror(argv[3]);
            return 1;
        }
        uint64_t lba = 0;
        size_t n;
        while ((n = fread(buf, 1, CHUNK, f)) > 0) {
            size_t padded = (n + bs - 1) / bs * bs;
            memset(buf + n, 0, padded - n);
            scsi_free_scsi_task(check(iscsi, iscsi_write16_sync(iscsi, url->lun, lba, buf, padded, bs, 0, 0, 0, 0, 0), "WRITE16"));
            lba += padded / bs;
        }
        fclose(f);
        scsi_free_scsi_task(check(iscsi, iscsi_synchronizecache10_sync(iscsi, url->lun, 0, 0, 0, 0), "SYNCHRONIZE CACHE 10"));
    } else if (strcmp(argv[1], "read") == 0 && argc >= 5) {
        uint64_t len = strtoull(argv[3], NULL, 10), lba = 0, done = 0;
        FILE *f = fopen(argv[4], "wb");
        if (f == NULL) {
            perror(argv[4]);
            return 1;
        }
        while (done < len) {
            size_t want = len - done < CHUNK ? len - done : CHUNK;
            size_t padded = (want + bs - 1) / bs * bs;
            t = check(iscsi, iscsi_read16_sync(iscsi, url->lun, lba, padded, bs, 0, 0, 0, 0, 0), "READ16");
            if (t->datain.size < (int)padded) {
                fprintf(stderr, "READ16 returned %d bytes, wanted %zu\n", t->datain.size, padded);
                return 1;
            }
            fwrite(t->datain.data, 1, want, f);
            scsi_free_scsi_task(t);
            done += want;
            lba += padded / bs;
        }
        fclose(f);
    } else {
        fprintf(stderr, "unknown command %s\n", argv[1]);
        return 2;
    }
    iscsi_logout_sync(iscsi);
    iscsi_destroy_url(url);
    iscsi_destroy_context(iscsi);
    return 0;
}
