//! Sizes on the command line and in tables: "16K", "10G", "1.5T" (binary units); intervals:
//! "30s", "5m", "1h", "7d".

/// An interval: a whole number and a unit s (the default), m, h or d → seconds.
pub fn parse_interval(s: &str) -> Result<u64, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a number with a unit s, m, h or d (e.g. 5m)"))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(format!("{s:?}: give a number and a unit s, m, h or d (e.g. 5m)")),
    };
    Ok(n.saturating_mul(mult))
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_uppercase();
            let m: u64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                "P" => 1 << 50,
                _ => return Err(format!("size {s:?}: unknown unit (use K, M, G, T or P)")),
            };
            (&t[..i], m)
        }
        None => (t, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("size {s:?}: not a number (e.g. 16K, 10G)"))?;
    if !(n.is_finite() && n >= 0.0) {
        return Err(format!("size {s:?}: must be a positive number"));
    }
    let bytes = n * mult as f64;
    if bytes > u64::MAX as f64 / 2.0 {
        return Err(format!("size {s:?}: too large"));
    }
    Ok(bytes as u64)
}

pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "K", "M", "G", "T", "P"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes}B")
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("30").unwrap(), 30);
        assert_eq!(parse_interval("5m").unwrap(), 300);
        assert_eq!(parse_interval("2h").unwrap(), 7200);
        assert_eq!(parse_interval("7d").unwrap(), 7 * 86400);
        for bad in ["", "m", "5x", "1.5h", "-1s"] {
            let e = parse_interval(bad).unwrap_err();
            assert!(e.contains("unit s, m, h or d"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16K").unwrap(), 16384);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert_eq!(parse_size("2MiB").unwrap(), 2 << 20);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("abc").is_err());
        assert_eq!(human(16384), "16.0K");
        assert_eq!(human(10), "10B");
    }
}
