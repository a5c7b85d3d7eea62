//! The event history through the daemon: a mirror transfer, a scrub, a refused request and a
//! mirror break are recorded with their kind, pool and target; `--limit`; the history and
//! its ids survive a restart. Needs root and /dev/fuse.

mod common;
use common::*;
use serde_json::Value;

fn kinds(v: &Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect()
}

#[test]
fn events_record_transfers_scrubs_refusals_and_breaks_and_survive_a_restart() {
    let dir = temp_dir("events");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut d = Daemon { child: None, socket: dir.join("strata.sock"), dir: dir.clone() };
    d.spawn_with(&["--tcp", &addr]);
    let img = dir.join("p2.img");
    d.ok(&["pool", "create", "p2", "--device", img.to_str().unwrap(), "--size", "256M"]);
    d.ok(&["volume", "create", "default/db"]);
    let m = d.json(&["mirror", "create", "default/db", "p2"]);
    assert_eq!(m["state"], "mirrored", "{m}");
    d.ok(&["pool", "scrub", "default"]);
    // A request with a forged token over TCP is refused, and recorded.
    let (code, _, err) = d.cli(&["--api", &addr, "--token", "strata_0000000000000001_00", "whoami"]);
    assert_ne!(code, 0, "{err}");
    d.json(&["mirror", "break", "p2/db"]);

    let ev = d.json(&["events", "--limit", "100"]);
    let k = kinds(&ev);
    for want in ["mirror.transfer", "scrub.finished", "request.refused", "mirror.break"] {
        assert!(k.iter().any(|x| x == want), "no {want} event in {ev}");
    }
    let t = ev.as_array().unwrap().iter().find(|e| e["kind"] == "mirror.transfer").unwrap();
    assert_eq!(t["pool"], "default", "{t}");
    assert_eq!(t["target"], "p2/db", "{t}");
    assert!(t["message"].as_str().unwrap().starts_with("transferred mirror-"), "{t}");
    let s = ev.as_array().unwrap().iter().find(|e| e["kind"] == "scrub.finished").unwrap();
    assert_eq!(s["severity"], "info", "{s}");
    assert!(s["message"].as_str().unwrap().contains("blocks verified"), "{s}");
    let ids: Vec<u64> = ev.as_array().unwrap().iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "oldest first, ids growing: {ids:?}");
    let last = d.json(&["events", "--limit", "1"]);
    assert_eq!(last.as_array().unwrap().len(), 1);
    assert_eq!(last[0]["id"].as_u64().unwrap(), *ids.last().unwrap(), "the newest");

    // A restart keeps the history; new events go on from the last id.
    d.stop();
    d.spawn_with(&["--tcp", &addr]);
    let after = d.json(&["events", "--limit", "100"]);
    assert_eq!(kinds(&after), k, "the same history after a restart");
    d.json(&["mirror", "resync", "p2/db"]);
    let newest = d.json(&["events", "--limit", "1"]);
    assert_eq!(newest[0]["kind"], "mirror.resync", "{newest}");
    assert!(newest[0]["id"].as_u64().unwrap() > *ids.last().unwrap());
    assert!(d.ok(&["events"]).contains("mirror.resync"), "the human form lists it too");
}
