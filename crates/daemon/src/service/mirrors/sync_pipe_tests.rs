//! A sync mirror between two in-process daemons paired as peers: concurrent syncs send their
//! appends without waiting for each other's answers, the target writes appends that came
//! back to back with one journal write, every acknowledged frame is in the target's
//! journal once — also when the session is cut with appends in flight.

use super::super::sync::{Phase, Sink};
use crate::peer_net::tests::{cleanup, daemon, pair_at};
use crate::service::Daemon;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Writers that each write and sync their own file `rounds` times, at once.
fn writers(a: &Daemon, n: usize, rounds: usize, tag: &str) {
    let pool = a.pool("default").unwrap();
    let vol = pool.volume_id("db").unwrap();
    std::thread::scope(|s| {
        for i in 0..n {
            let pool = pool.clone();
            s.spawn(move || {
                let obj = pool.create_object(vol, format!("{tag}-{i}").as_bytes()).unwrap();
                for r in 0..rounds {
                    pool.write(vol, obj, (r * 8192) as u64, &[i as u8; 8192]).unwrap();
                    pool.sync_object(vol, obj).expect("a sync to an `on` mirror returns Ok");
                }
            });
        }
    });
}

/// A TCP proxy in front of `target`: once `cut` is set, the next bytes from the source are
/// dropped and that connection is cut (the target sees an append end half way).
struct Proxy {
    address: String,
    cut: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
    /// While set, connections are closed as they come (the target looks down).
    down: Arc<AtomicBool>,
}

fn proxy(target: std::net::SocketAddr) -> Proxy {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = l.local_addr().unwrap().to_string();
    let (cut, cuts) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let (cut2, cuts2) = (cut.clone(), cuts.clone());
    let down = Arc::new(AtomicBool::new(false));
    let down2 = down.clone();
    std::thread::spawn(move || {
        for client in l.incoming() {
            let Ok(client) = client else { continue };
            if down2.load(Ordering::SeqCst) {
                continue;
            }
            let Ok(server) = TcpStream::connect(target) else { continue };
            let (mut from, mut to) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (cut, cuts) = (cut2.clone(), cuts2.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let n = match from.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if cut.swap(false, Ordering::SeqCst) {
                        // Half of what came, then the end.
                        let _ = to.write_all(&buf[..n / 2]);
                        cuts.fetch_add(1, Ordering::SeqCst);
                        break;
                    }
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = from.shutdown(Shutdown::Both);
                let _ = to.shutdown(Shutdown::Both);
            });
            std::thread::spawn(move || {
                let (mut from, mut to) = (server, client);
                let _ = std::io::copy(&mut from, &mut to);
                let _ = to.shutdown(Shutdown::Both);
            });
        }
    });
    Proxy { address, cut, cuts, down }
}

/// (appends answered, journal writes, last frame) of the target's journal.
fn target_journal(b: &Daemon) -> (u64, u64, u64) {
    let j = b.mirrors.journals.lock().unwrap().get("default/db").cloned().expect("the target's journal is open");
    let j = j.lock().unwrap();
    (j.appends, j.writes, j.last_seq)
}

#[test]
fn concurrent_syncs_pipeline_appends_and_the_target_journals_them_together() {
    let (a, b) = (daemon("pipe-a"), daemon("pipe-b"));
    let proxy = proxy(b.peers.listen_addr().unwrap());
    pair_at(&a, &b, &proxy.address);
    let vol: strata_api::CreateVolume = serde_json::from_value(serde_json::json!({"name": "db"})).unwrap();
    a.create_volume("default", &vol).unwrap();
    let req = serde_json::json!({"source": "default/db", "dest_pool": "b:default", "sync": "on"});
    a.create_mirror(&serde_json::from_value(req).unwrap(), "test").unwrap();
    let name = "b:default/db";
    let start = Instant::now();
    let link = loop {
        if let Some(l) = a.sync_link(name).filter(|l| l.phase() == Phase::InSync) {
            break l;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "never in sync: {:?}", a.sync_link(name).map(|l| l.phase()));
        std::thread::sleep(Duration::from_millis(50));
    };
    let pool = a.pool("default").unwrap();

    // Eight writers: every frame pushed is durable on the target once they are done, and
    // appends that reached the target back to back shared a journal write.
    writers(&a, 8, 100, "first");
    let pushed = pool.sync_tap_pushed();
    assert_eq!(link.acks.durable(), pushed, "every frame of the acknowledged syncs is durable");
    let (appends, writes, last) = target_journal(&b);
    assert_eq!(last, pushed, "the target's journal holds every frame");
    assert!(writes < appends, "no appends were journaled together ({appends} appends, {writes} writes)");

    // Sessions cut in the middle of appends (by the proxy, and by the source giving one
    // up): a new session sends every unanswered frame again, the target skips what it
    // has and refuses a gap, and no sync notices.
    let (cuts, given_up) = std::thread::scope(|s| {
        let w = s.spawn(|| writers(&a, 4, 200, "second"));
        let mut given_up = 0;
        while !w.is_finished() {
            std::thread::sleep(Duration::from_millis(10));
            proxy.cut.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(10));
            if let Sink::Remote(r) = &mut *link.sink.lock().unwrap() {
                r.end_session();
                given_up += 1;
            }
        }
        (proxy.cuts.load(Ordering::SeqCst), given_up)
    });
    let pushed = pool.sync_tap_pushed();
    assert_eq!(link.acks.durable(), pushed);
    assert_eq!(target_journal(&b).2, pushed, "the target's journal holds every frame after the cuts");
    assert_eq!(link.phase(), Phase::InSync, "the cuts made the link fall back");
    assert!(link.acks.refused().is_none());
    assert!(cuts >= 2 && given_up >= 2, "the writers were done after {cuts} cuts: make them write longer");
    let frames = link.acks.frames.load(Ordering::Relaxed);
    assert_eq!(frames, pushed, "every frame counted once, also those sent again after a cut");

    // The target unreachable for a moment with the session cut: the link keeps making new
    // sessions (for a second) rather than fall back, and the syncs wait for it.
    proxy.down.store(true, Ordering::SeqCst);
    if let Sink::Remote(r) = &mut *link.sink.lock().unwrap() {
        r.end_session();
    }
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            proxy.down.store(false, Ordering::SeqCst);
        });
        writers(&a, 2, 5, "third");
    });
    assert!(start.elapsed() >= Duration::from_millis(300), "the syncs did not wait for the target");
    assert_eq!(link.phase(), Phase::InSync, "the link fell back while the target was unreachable");
    assert_eq!(link.acks.durable(), pool.sync_tap_pushed());
    a.disarm_sync(name);
    cleanup(&[&a, &b]);
    drop::<Arc<Daemon>>(b);
}
