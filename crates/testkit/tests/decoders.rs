//! Every on-disk decoder survives arbitrary bytes: random buffers of every interesting
//! length, and mutations (bit flips, byte stores, truncation, extension) of valid
//! encodings — the inputs that get past the magic and checksum checks and reach the
//! field validation. No panic, no unbounded allocation. (The coverage-guided fuzzer in
//! fuzz/ runs the same entry point, `pipeline::decode_all`.)

use strata_engine::format::blkptr::{BlockKind, BlockPtr, ChecksumAlgo, Compression};
use strata_engine::format::codec::Reader;
use strata_engine::format::features::{Features, INCOMPAT_LOG_DEVICE};
use strata_engine::format::label::LabelPhys;
use strata_engine::format::logdev::LogDeviceLabelPhys;
use strata_engine::format::node::{BtreeNodePhys, IndirectPhys};
use strata_engine::format::records::{DnodePhys, SnapshotRecordPhys, VolumeRecordPhys};
use strata_engine::format::space::{PackPhys, PoolSpacePhys, VolumeSpacePhys};
use strata_engine::format::spacemap::{SpacemapChunkPhys, CHUNK_BITS_BYTES};
use strata_engine::format::uberblock::UberblockPhys;
use strata_engine::pipeline::compress::{compress, decompress, CompressionPolicy};
use strata_engine::pipeline::decode_all;
use strata_testkit::{iters_from_env, seed_from_env, SimRng};

fn bp(rng: &mut SimRng) -> BlockPtr {
    BlockPtr {
        addr: (rng.range(1, 1000)) * 4096,
        birth_txg: rng.range(1, 100),
        psize: 100,
        lsize: 16384,
        device: 0,
        kind: BlockKind::Data,
        compression: Compression::None,
        checksum_algo: ChecksumAlgo::Blake3,
        packed: false,
        dedup: false,
        checksum: [7; 32],
    }
}

/// A record inside a pack: sector aligned, flagged.
fn packed_bp(rng: &mut SimRng) -> BlockPtr {
    BlockPtr { addr: rng.range(1, 1000) * 4096 + rng.range(0, 8) * 512, packed: true, ..bp(rng) }
}

fn valid_encodings(rng: &mut SimRng) -> Vec<Vec<u8>> {
    let label = LabelPhys {
        label_index: 0,
        pool_guid: 1,
        device_guid: 2,
        device_index: 0,
        device_count: 1,
        device_size: 64 << 20,
        spacemap_offset: 512 << 10,
        spacemap_chunks: 1,
        data_offset: 5 << 20,
        data_units: 15000,
        log_offset: 1 << 20,
        log_bytes: 4 << 20,
        log_device_guid: 0,
        features: Features::default(),
        created_ns: 5,
        checksum_algo: ChecksumAlgo::Blake3,
        pool_name: "p".into(),
        generation: 3,
        groups: vec![],
    };
    let ub = UberblockPhys {
        txg: 1000,
        pool_guid: 1,
        timestamp_ns: 3,
        catalog_root: bp(rng),
        allocated_units: 10,
        next_volume_id: 2,
        features_incompat: 0,
        host_id: 0x4057,
        pool_state: strata_engine::HostState::Active,
    };
    let chunk = SpacemapChunkPhys { chunk_index: 0, txg: 4, pool_guid: 1, bits: rng.bytes(CHUNK_BITS_BYTES) };
    let leaf = BtreeNodePhys::Leaf { entries: vec![(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), rng.blob(100))] };
    let internal = BtreeNodePhys::Internal { level: 1, entries: vec![(vec![], bp(rng)), (b"m".to_vec(), bp(rng))] };
    let mut ind = IndirectPhys::empty();
    ind.bps[3] = bp(rng);
    let dn = DnodePhys {
        size: 100_000,
        record_size: 16384,
        levels: 1,
        root: bp(rng),
        data_sectors: 35,
        attr: b"attr".to_vec(),
    };
    let vr = VolumeRecordPhys {
        id: 1,
        record_size: 16384,
        sync_policy: 0,
        tree_root: bp(rng),
        next_object_id: 5,
        used_sectors: 75,
        created_txg: 1,
        created_ns: 2,
        quota_bytes: 0,
        compression: CompressionPolicy::Zstd { level: 3 },
        saved_bytes: Some(12288),
        dedup: true,
        parent: 3,
        deadlist: 4,
        written_sectors: 43,
        origin: 3,
        total_sectors: 99,
    };
    let sr = SnapshotRecordPhys {
        id: 3,
        volume: 1,
        txg: 200,
        created_ns: 9,
        tree_root: bp(rng),
        parent: 0,
        deadlist: 0,
        referenced_sectors: 81,
        written_sectors: 80,
        next_object_id: 4,
        record_size: 16384,
        group: 0,
        saved_bytes: Some(4096),
    };
    // Compressed data record payloads: mutations of them exercise the decompressors
    // (decode_all runs them), the part of a read that runs after the checksum passed.
    let text: Vec<u8> = (0..16384u32).map(|i| b"insert into t values (42, 'abc'); "[(i % 34) as usize]).collect();
    let lz4 = compress(CompressionPolicy::Lz4, &text).expect("text compresses").1;
    let zst = compress(CompressionPolicy::Zstd { level: 3 }, &text).expect("text compresses").1;
    let space = VolumeSpacePhys { reservation_bytes: 1 << 30 }.encode();
    let pool_space = PoolSpacePhys { capacity_alert_percent: 10 }.encode();
    let pack = PackPhys { units: 5, live: 12 }.encode();
    vec![
        label.encode(),
        ub.encode(),
        chunk.encode(),
        leaf.encode(),
        internal.encode(),
        ind.encode(),
        dn.encode(),
        vr.encode(),
        sr.encode(),
        bp(rng).encode().to_vec(),
        lz4,
        zst,
        space,
        pool_space,
        // A separate log device's label, and a pool label that names one.
        LogDeviceLabelPhys::for_device(1, 9, 32 << 20, 5, "p").expect("big enough").encode(),
        LabelPhys {
            log_device_guid: 9,
            features: Features { incompat: INCOMPAT_LOG_DEVICE, ..Features::default() },
            ..label.clone()
        }
        .encode(),
        packed_bp(rng).encode().to_vec(),
        pack,
        // A pool label with device groups (`pool add`).
        LabelPhys {
            features: Features {
                incompat: strata_engine::format::features::INCOMPAT_DEVICE_GROUPS,
                ..Features::default()
            },
            groups: vec![
                strata_engine::format::label::GroupPhys { set_guid: 5, base: 64 << 20, bytes: 32 << 20 },
                strata_engine::format::label::GroupPhys { set_guid: 6, base: 97 << 20, bytes: 32 << 20 },
            ],
            ..label.clone()
        }
        .encode(),
    ]
}

#[test]
fn valid_encodings_decode_back() {
    let mut rng = SimRng::new(1);
    let v = valid_encodings(&mut rng);
    assert!(LabelPhys::decode(&v[0], 0).is_ok());
    assert!(UberblockPhys::decode(&v[1], 0).unwrap().is_some());
    assert!(SpacemapChunkPhys::decode(&v[2], 0).unwrap().is_some());
    assert!(BtreeNodePhys::decode(&v[3], None).is_ok());
    assert!(BtreeNodePhys::decode(&v[4], None).is_ok());
    assert!(IndirectPhys::decode(&v[5], None).is_ok());
    assert!(DnodePhys::decode(&v[6]).is_ok());
    assert_eq!(VolumeRecordPhys::decode(&v[7]).unwrap().encode(), v[7]);
    assert_eq!(SnapshotRecordPhys::decode(&v[8]).unwrap().encode(), v[8]);
    assert!(BlockPtr::decode_from(&mut Reader::new(&v[9], "t", None)).is_ok());
    assert_eq!(decompress(Compression::Lz4, &v[10], 16384).unwrap()[..34], *b"insert into t values (42, 'abc'); ");
    assert_eq!(decompress(Compression::Zstd, &v[11], 16384).unwrap()[..34], *b"insert into t values (42, 'abc'); ");
    assert!(VolumeSpacePhys::decode(&v[12]).is_ok());
    assert!(PoolSpacePhys::decode(&v[13]).is_ok());
    assert!(LogDeviceLabelPhys::decode(&v[14]).is_ok());
    assert_eq!(LabelPhys::decode(&v[15], 0).unwrap().log_device_guid, 9);
    assert!(BlockPtr::decode_from(&mut Reader::new(&v[16], "t", None)).unwrap().packed);
    assert_eq!(PackPhys::decode(&v[17]).unwrap(), PackPhys { units: 5, live: 12 });
    let grown = LabelPhys::decode(&v[18], 0).unwrap();
    assert_eq!((grown.groups.len(), grown.groups[1].base, grown.generation), (2, 97 << 20, 3));
    assert_eq!(grown.encode(), v[18]);
    // Groups without the feature flag, or overlapping, are damage.
    let mut bad = grown.clone();
    bad.features.incompat = 0;
    assert!(LabelPhys::decode(&bad.encode(), 0).is_err());
    let mut bad = grown;
    bad.groups[1].base = 90 << 20;
    assert!(LabelPhys::decode(&bad.encode(), 0).is_err());
    // Space figures in sectors survive the units + remainder split.
    assert_eq!(DnodePhys::decode(&v[6]).unwrap().data_sectors, 35);
    // A guid without the feature flag (or the reverse) is damage, not a format.
    let mut no_flag = LabelPhys::decode(&v[15], 0).unwrap();
    no_flag.features.incompat = 0;
    assert!(LabelPhys::decode(&no_flag.encode(), 0).is_err());
    // Every valid encoding is accepted by at least one decoder of decode_all.
    for e in &v {
        assert!(decode_all(e) > 0);
    }
}

#[test]
fn decoders_survive_arbitrary_bytes() {
    let seed = seed_from_env(0xF022);
    let iters = iters_from_env(100_000);
    let mut rng = SimRng::new(seed);
    let valid = valid_encodings(&mut rng);
    let mut accepted = 0usize;
    for i in 0..iters {
        let input = if i % 4 == 0 {
            let len = *rng.pick(&[0usize, 1, 7, 8, 63, 64, 80, 128, 4095, 4096, 16384, 20000]);
            rng.bytes(len)
        } else {
            let mut v = rng.pick(&valid).clone();
            for _ in 0..rng.range(1, 4) {
                match rng.below(5) {
                    0 if !v.is_empty() => {
                        let at = rng.below(v.len() as u64) as usize;
                        v[at] ^= 1 << rng.below(8);
                    }
                    1 if !v.is_empty() => {
                        let at = rng.below(v.len() as u64) as usize;
                        v[at] = *rng.pick(&[0u8, 1, 0x7f, 0x80, 0xff]);
                    }
                    2 => {
                        let keep = rng.below(v.len() as u64 + 1) as usize;
                        v.truncate(keep);
                    }
                    3 => v.extend(rng.blob(64)),
                    _ if v.len() >= 8 => {
                        // A length or count field set to something huge.
                        let at = rng.below(v.len() as u64 - 3) as usize;
                        v[at..at + 2].copy_from_slice(&[0xff, 0xff]);
                    }
                    _ => {}
                }
            }
            v
        };
        accepted += decode_all(&input);
    }
    // Mutated encodings whose checksums are not self-contained (nodes, records) often
    // still decode: that is what makes them worth fuzzing.
    assert!(accepted > 0);
}
