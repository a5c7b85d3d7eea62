//! Tests of the configuration file: every key, every refusal, and the shipped file.

use super::*;

const SHIPPED: &str = include_str!("../../../../packaging/strata.toml");

const FULL: &str = r#"
data_dir = "/srv/strata"

[api]
socket = "/run/strata/api.sock"
socket_group = "storage-admins"
tcp = "10.0.0.5:7420"
tls_cert = "/etc/strata/tls/cert.pem"
tls_key = "/etc/strata/tls/key.pem"

[pools]
default_pool_size = "64G"
txg_interval_seconds = 10
cache_size = "4G"
dirty_limit = "512M"
dedup_table_max = 1000000

[fuse]
writeback_cache = false
threads = 16

[nfs]
port = 2050
bind = "0.0.0.0"
portmap_port = 111
"#;

fn err(source: &str) -> String {
    parse(source, "test.toml").expect_err("the configuration must be refused")
}

#[test]
fn full_example_parses_to_its_values() {
    let c = parse(FULL, "full.toml").expect("valid");
    assert_eq!(
        c,
        Config {
            data_dir: "/srv/strata".into(),
            api: ApiConfig {
                socket: "/run/strata/api.sock".into(),
                socket_group: "storage-admins".into(),
                tcp: Some("10.0.0.5:7420".into()),
                tls_cert: Some("/etc/strata/tls/cert.pem".into()),
                tls_key: Some("/etc/strata/tls/key.pem".into()),
            },
            pools: PoolsConfig {
                default_pool_size: Size(64 << 30),
                txg_interval_seconds: 10,
                cache_size: Some(Size(4 << 30)),
                dirty_limit: Some(Size(512 << 20)),
                dedup_table_max: 1_000_000,
            },
            fuse: FuseConfig { writeback_cache: false, threads: 16 },
            nfs: Some(NfsConfig { port: 2050, bind: "0.0.0.0".parse().unwrap(), portmap_port: Some(111) }),
        }
    );
    assert_eq!(c.api.tcp_addr(), Some("10.0.0.5:7420".parse().unwrap()));
    assert!(c.api.tls());
}

#[test]
fn empty_file_is_the_defaults() {
    let c = parse("", "empty.toml").expect("valid");
    assert_eq!(c, Config::default());
    assert_eq!(c.data_dir, Path::new("/var/lib/strata"));
    assert_eq!(c.api.socket, Path::new("/run/strata/strata.sock"));
    assert_eq!(c.api.socket_group, "strata");
    assert_eq!(c.api.tcp_addr(), None);
    assert_eq!(c.pools.default_pool_size, Size(16 << 30));
    assert_eq!(c.pools.txg_interval_seconds, 5);
    assert_eq!((c.pools.cache_size, c.pools.dirty_limit), (None, None));
    assert_eq!(c.pools.dedup_table_max, 262_144);
    assert_eq!(c.fuse, FuseConfig { writeback_cache: true, threads: 4 });
    assert_eq!(c.nfs, None);
}

#[test]
fn empty_nfs_table_turns_nfs_on_with_defaults() {
    let c = parse("[nfs]\n", "t").expect("valid");
    assert_eq!(c.nfs, Some(NfsConfig { port: 2049, bind: IpAddr::V4(Ipv4Addr::LOCALHOST), portmap_port: None }));
}

#[test]
fn the_shipped_file_parses_and_validates() {
    let c = parse(SHIPPED, "packaging/strata.toml").expect("the shipped configuration is valid");
    c.validate().expect("valid");
    // Everything in it is commented out: it is the defaults.
    assert_eq!(c, Config::default());
}

/// Uncommenting every `# key = value` and `# [table]` line of the shipped file gives a
/// valid file, whose keys are exactly the known ones, at the documented defaults.
#[test]
fn the_shipped_file_documents_every_key_with_its_default() {
    let mut documented = Vec::new();
    let mut table: Option<String> = None;
    let mut uncommented = String::new();
    for line in SHIPPED.lines() {
        let rest = line.strip_prefix("# ").unwrap_or(line);
        let mut text = line;
        if let Some(name) = header(rest) {
            documented.push(name.clone());
            table = Some(name);
            text = rest;
        } else if let Some((k, _)) = rest.split_once(" = ") {
            if line.starts_with("# ") && !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                documented.push(table.as_ref().map_or(k.to_string(), |t| format!("{t}.{k}")));
                text = rest;
            }
        }
        uncommented.push_str(text);
        uncommented.push('\n');
    }
    documented.sort();
    let mut known: Vec<String> = EXAMPLES.iter().map(|(k, _)| k.to_string()).collect();
    known.sort();
    assert_eq!(documented, known, "packaging/strata.toml and EXAMPLES must list the same keys, once each");

    let c = parse(&uncommented, "uncommented").unwrap_or_else(|e| panic!("{e}\n---\n{uncommented}"));
    let d = Config::default();
    assert_eq!(c.data_dir, d.data_dir);
    assert_eq!((&c.api.socket, &c.api.socket_group), (&d.api.socket, &d.api.socket_group));
    assert_eq!(c.pools.default_pool_size, d.pools.default_pool_size);
    assert_eq!(c.pools.txg_interval_seconds, d.pools.txg_interval_seconds);
    assert_eq!(c.pools.dedup_table_max, d.pools.dedup_table_max);
    assert_eq!(c.fuse, d.fuse);
    let nfs = c.nfs.expect("[nfs] is in the file");
    assert_eq!((nfs.port, nfs.bind), (2049, IpAddr::V4(Ipv4Addr::LOCALHOST)));
}

/// Every field of every table has an example (and so, by the test above, a line in the
/// shipped file): serde's "unknown field" error lists the fields a table has.
#[test]
fn examples_cover_every_field() {
    for table in ["", "api", "pools", "fuse", "nfs"] {
        let source =
            if table.is_empty() { "zz_unknown = 1\n".to_string() } else { format!("[{table}]\nzz_unknown = 1\n") };
        let e = err(&source);
        // serde: "expected `a`", "expected `a` or `b`", "expected one of `a`, `b`, `c`".
        let (_, expected) = e.split_once("expected ").unwrap_or_else(|| panic!("{e}"));
        let expected = expected.lines().next().expect("a line");
        let expected = expected.trim_start_matches("one of ");
        let fields: Vec<&str> =
            expected.split(", ").flat_map(|f| f.split(" or ")).map(|f| f.trim_matches('`')).collect();
        assert!(fields.len() >= 2, "{e}");
        for field in fields {
            let key = if table.is_empty() { field.to_string() } else { format!("{table}.{field}") };
            assert!(example(&key).is_some(), "no example for {key}: add it to EXAMPLES and packaging/strata.toml");
        }
    }
}

#[test]
fn unknown_keys_are_refused_by_name() {
    let e = err("[api]\nsocket = \"/run/s.sock\"\ntpc = \"127.0.0.1:7420\"\n");
    assert!(e.starts_with("test.toml:3:1: api.tpc: unknown field `tpc`"), "{e}");
    assert!(e.contains("expected one of `socket`, `socket_group`, `tcp`"), "{e}");
    assert!(e.contains("  | tpc = \"127.0.0.1:7420\"\n  | ^^^"), "{e}");

    let e = err("datadir = \"/srv\"\n");
    assert!(e.starts_with("test.toml:1:1: datadir: unknown field `datadir`"), "{e}");

    let e = err("[pool]\n");
    assert!(e.starts_with("test.toml:1:2: pool: unknown field `pool`"), "{e}");
}

#[test]
fn type_errors_name_the_key_and_an_example() {
    let e = err("[fuse]\nthreads = \"four\"\n");
    assert!(e.starts_with("test.toml:2:11: fuse.threads: invalid type: string \"four\""), "{e}");
    assert!(e.ends_with("write e.g.: threads = 4"), "{e}");

    let e = err("[nfs]\nport = 70000\n");
    assert!(e.starts_with("test.toml:2:8: nfs.port: invalid value: integer `70000`"), "{e}");
    assert!(e.ends_with("write e.g.: port = 2049"), "{e}");

    let e = err("[nfs]\nbind = \"localhost\"\n");
    assert!(e.starts_with("test.toml:2:8: nfs.bind:"), "{e}");

    let e = err("data_dir = \n");
    assert!(e.starts_with("test.toml:1:12: data_dir:"), "{e}");
}

#[test]
fn size_errors_point_at_the_value() {
    let e = err("[pools]\ncache_size = \"4Q\"\n");
    assert!(e.starts_with("test.toml:2:14: pools.cache_size: size \"4Q\": unknown unit \"Q\""), "{e}");
    assert!(e.contains("\n  | cache_size = \"4Q\"\n  |              ^^^^"), "{e}");
    assert!(e.ends_with("write e.g.: cache_size = \"4G\""), "{e}");

    let e = err("[pools]\ndirty_limit = -5\n");
    assert!(e.contains("pools.dirty_limit: size -5 is negative"), "{e}");

    let e = err("[pools]\ncache_size = true\n");
    assert!(e.contains("expected a size such as \"16G\""), "{e}");

    let c = parse("[pools]\ncache_size = 0\ndirty_limit = 33554432\n", "t").expect("valid");
    assert_eq!((c.pools.cache_size, c.pools.dirty_limit), (Some(Size(0)), Some(Size(32 << 20))));
}

#[test]
fn sizes() {
    assert_eq!(parse_size("16G"), Ok(16 << 30));
    assert_eq!(parse_size("512M"), Ok(512 << 20));
    assert_eq!(parse_size("0"), Ok(0));
    assert_eq!(parse_size("4096"), Ok(4096));
    assert_eq!(parse_size(" 2t "), Ok(2 << 40));
    assert_eq!(parse_size("1.5G"), Ok(3 << 29));
    assert_eq!(parse_size("2MiB"), Ok(2 << 20));
    assert_eq!(parse_size("8KB"), Ok(8 << 10));
    assert_eq!(parse_size("100B"), Ok(100));
    assert_eq!(parse_size("0.3K"), Ok(307));
    assert_eq!(parse_size(".5K"), Ok(512));
    assert_eq!(parse_size("1P"), Ok(1 << 50));
    assert!(parse_size("").unwrap_err().starts_with("empty size"));
    assert!(parse_size("-1G").unwrap_err().contains("is negative"));
    assert!(parse_size("12Q").unwrap_err().contains("unknown unit \"Q\""));
    assert!(parse_size("G").unwrap_err().contains("no number before the unit"));
    assert!(parse_size("1.2.3G").unwrap_err().contains("not a number"));
    assert!(parse_size("99999999999999999999999999999999999999999G").unwrap_err().contains("too large"));
    assert!(parse_size("8192P").unwrap_err().contains("too large"));
    assert_eq!(parse_size("8191P"), Ok(8191 << 50));
    for s in [0u64, 100, 16 << 30, 1536 << 20, 3 << 40, 5000] {
        assert_eq!(parse_size(&Size(s).to_string()), Ok(s), "{}", Size(s));
    }
    assert_eq!(Size(1536 << 20).to_string(), "1536M");
}

fn invalid(mutate: impl FnOnce(&mut Config)) -> String {
    let mut c = Config::default();
    mutate(&mut c);
    c.validate().expect_err("must be refused")
}

#[test]
fn each_invalid_value_gets_its_message() {
    assert_eq!(
        invalid(|c| c.api.tcp = Some("127.0.0.1".into())),
        "api.tcp: \"127.0.0.1\" is not an address and port: write an IP address and a port, e.g. \"127.0.0.1:7420\" or \"[::1]:7420\" (no host names)"
    );
    assert_eq!(
        invalid(|c| c.api.tcp = Some("0.0.0.0:7420".into())),
        "api.tcp: 0.0.0.0:7420 is not a loopback address: TLS is required off loopback: set api.tls_cert and api.tls_key"
    );
    assert!(invalid(|c| c.api.tcp = Some("localhost:7420".into())).contains("no host names"));
    assert!(invalid(|c| c.api.tcp = Some("127.0.0.1:0".into())).starts_with("api.tcp: \"127.0.0.1:0\": port 0"));
    assert_eq!(
        invalid(|c| {
            c.api.tcp = Some("10.1.2.3:7420".into());
            c.api.tls_cert = Some("/etc/strata/tls/cert.pem".into());
        }),
        "api.tls_key: api.tls_cert is set but api.tls_key is not: set both, e.g. tls_key = \"/etc/strata/tls/key.pem\"\n\
         api.tcp: 10.1.2.3:7420 is not a loopback address: TLS is required off loopback: set api.tls_cert and api.tls_key"
    );
    assert!(invalid(|c| {
        c.api.tls_cert = Some("/c.pem".into());
        c.api.tls_key = Some("/k.pem".into());
    })
    .starts_with("api.tcp: TLS is configured but api.tcp is not"));
    assert_eq!(
        invalid(|c| c.data_dir = "var/lib/strata".into()),
        "data_dir: var/lib/strata is a relative path (the daemon's working directory is /): write an absolute path, e.g. \"/var/lib/strata\""
    );
    assert_eq!(invalid(|c| c.api.socket = "".into()), "api.socket: empty path: write an absolute path");
    assert!(invalid(|c| c.api.socket = format!("/run/{}", "s".repeat(120)).into())
        .contains("a Unix socket path holds at most 107"));
    assert!(invalid(|c| {
        c.api.tcp = Some("[::1]:7420".into());
        c.api.tls_cert = Some("tls/cert.pem".into());
        c.api.tls_key = Some("/k.pem".into());
    })
    .starts_with("api.tls_cert: tls/cert.pem is a relative path"));
    assert!(invalid(|c| c.api.socket_group = "-x".into()).starts_with("api.socket_group: \"-x\" is not a group name"));
    assert!(invalid(|c| c.api.socket_group = "".into()).starts_with("api.socket_group"));
    assert_eq!(
        invalid(|c| c.pools.dirty_limit = Some(Size(8 << 20))),
        "pools.dirty_limit: 8M is below 16M: write at least \"16M\", e.g. \"256M\" or \"2G\""
    );
    assert!(invalid(|c| c.pools.default_pool_size = Size(1 << 20))
        .starts_with("pools.default_pool_size: 1M is below the smallest pool, 16M"));
    assert!(
        invalid(|c| c.pools.txg_interval_seconds = 0).starts_with("pools.txg_interval_seconds: 0 is outside 1 to 300")
    );
    assert!(invalid(|c| c.pools.txg_interval_seconds = 301).starts_with("pools.txg_interval_seconds: 301"));
    assert_eq!(
        invalid(|c| c.fuse.threads = 0),
        "fuse.threads: 0 is outside 1 to 64: write e.g. 4 (or 16 for many concurrent clients)"
    );
    assert!(invalid(|c| c.fuse.threads = 65).starts_with("fuse.threads: 65 is outside 1 to 64"));
    assert!(invalid(|c| c.nfs = Some(NfsConfig { port: 0, ..NfsConfig::default() })).starts_with("nfs.port: 0"));
    assert_eq!(
        invalid(|c| c.nfs = Some(NfsConfig { portmap_port: Some(2049), ..NfsConfig::default() })),
        "nfs.portmap_port: 2049 is also nfs.port: the portmapper needs its own port, normally 111"
    );

    // The edges that are fine.
    let mut c = Config::default();
    c.api.tcp = Some("[::1]:7420".into());
    c.pools.dirty_limit = Some(Size(16 << 20));
    c.pools.txg_interval_seconds = 300;
    c.fuse.threads = 64;
    c.nfs = Some(NfsConfig { portmap_port: Some(111), ..NfsConfig::default() });
    c.validate().expect("valid");
    assert!(!c.api.tls());
}

#[test]
fn validation_errors_from_a_file_carry_line_and_example() {
    let e = err("data_dir = \"/var/lib/strata\"\n\n[api]\ntcp = \"0.0.0.0:7420\"\n\n[fuse]\nthreads = 100\n");
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(
        lines[0],
        "test.toml:4:1: api.tcp: 0.0.0.0:7420 is not a loopback address: TLS is required off loopback: set api.tls_cert and api.tls_key"
    );
    assert_eq!(lines[1], "  | tcp = \"0.0.0.0:7420\"");
    assert_eq!(lines[2], "  | ^^^");
    assert_eq!(lines[3], "  write e.g.: tcp = \"127.0.0.1:7420\"");
    assert!(lines[4].starts_with("test.toml:7:1: fuse.threads: 100 is outside 1 to 64"), "{e}");
    assert_eq!(lines.last(), Some(&"  write e.g.: threads = 4"));

    // A problem about a key the file lacks points at its table's header, and the
    // example is not repeated when the message already gives it.
    let e = err("\n[api]\ntls_cert = \"/c.pem\"\n");
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(
        lines,
        [
            "test.toml:2:2: api.tls_key: api.tls_cert is set but api.tls_key is not: set both, e.g. tls_key = \"/etc/strata/tls/key.pem\"",
            "  | [api]",
            "  |  ^^^",
            "test.toml:2:2: api.tcp: TLS is configured but api.tcp is not: TLS applies only to the TCP listener; set tcp = \"IP:PORT\" or remove tls_cert and tls_key",
            "  | [api]",
            "  |  ^^^",
            "  write e.g.: tcp = \"127.0.0.1:7420\"",
        ]
    );
    // Dotted keys: neither the key's line nor a table header to point at; the message
    // still names the file and the key.
    let e = err("api.tls_cert = \"/c.pem\"\n");
    assert!(e.starts_with("test.toml: api.tls_key: api.tls_cert is set but api.tls_key is not"), "{e}");
}

#[test]
fn load_names_a_missing_file() {
    let e = load(Path::new("/nonexistent/strata.toml")).expect_err("missing");
    assert!(e.starts_with("read configuration /nonexistent/strata.toml: "), "{e}");
    assert!(e.contains("copy packaging/strata.toml there"), "{e}");
}

#[test]
fn load_reads_a_file() {
    let dir = std::env::temp_dir().join(format!("strata-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("make temp dir");
    let path = dir.join("strata.toml");
    std::fs::write(&path, "[fuse]\nthreads = 8\n").expect("write config");
    let c = load(&path).expect("valid");
    assert_eq!(c.fuse.threads, 8);
    std::fs::write(&path, "[fuse]\nthreads = 0\n").expect("write config");
    let e = load(&path).expect_err("invalid");
    assert!(e.starts_with(&format!("{}:2:1: fuse.threads: 0 is outside", path.display())), "{e}");
    std::fs::remove_dir_all(&dir).expect("remove temp dir");
}

#[test]
fn groups_are_looked_up() {
    assert_eq!(lookup_group("root"), Ok(Some(0)));
    assert_eq!(lookup_group("no-such-group-strata-test"), Ok(None));
    assert!(lookup_group("a\0b").is_err());
}
