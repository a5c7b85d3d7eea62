//! A real pool image patched by the fuzzer: the input is a list of (offset, bytes) patches
//! applied to a small pool holding volumes, objects and key-value entries. Opening,
//! reading everything, checking and committing may fail with errors, never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};
use strata_engine::{BlockDevice, CheckOptions, Pool, VolumeOptions};
use strata_testkit::{model, test_create_options, test_pool_options, SimDisk};

fn pristine() -> &'static Vec<u8> {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let disk = Arc::new(SimDisk::new(16 << 20, 4096));
        let pool = Pool::create(disk.clone(), test_create_options(9), test_pool_options()).unwrap();
        let vol = pool.create_volume("v", &VolumeOptions { record_size: 4096, quota_bytes: 0, ..Default::default() }).unwrap();
        for i in 0..6u8 {
            let o = pool.create_object(vol, &[i]).unwrap();
            pool.write(vol, o, i as u64 * 3000, &vec![i + 1; 20_000]).unwrap();
            pool.kv_put(vol, &[b'k', i], &[i; 40]).unwrap();
        }
        pool.commit().unwrap();
        drop(pool);
        disk.current_image()
    })
}

fuzz_target!(|data: &[u8]| {
    let mut img = pristine().clone();
    // Patches: u32 offset (folded into the first 2 MiB, where the metadata lives), u8
    // length, then that many bytes.
    let mut rest = data;
    while rest.len() >= 5 {
        let off = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize % (2 << 20);
        let len = (rest[4] as usize).min(rest.len() - 5);
        img[off..off + len].copy_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
    }
    let disk = Arc::new(SimDisk::from_image(img, 4096));
    if let Ok(pool) = Pool::open(disk as Arc<dyn BlockDevice>, test_pool_options()) {
        let _ = model::capture(&pool);
        let _ = pool.check(CheckOptions::default());
        let _ = pool.commit();
    }
});
