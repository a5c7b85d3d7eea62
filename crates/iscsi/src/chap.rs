//! CHAP with MD5 (RFC 1994, as iSCSI uses it: RFC 7143 §12.1.3): the response is
//! MD5(identifier ‖ secret ‖ challenge). MD5 is implemented here (RFC 1321) because it is
//! the only hash CHAP_A=5 allows and a dozen lines of table do not justify a dependency;
//! it authenticates, it does not protect the data (iSCSI without IPsec is cleartext).

const S: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20,
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15,
    21,
];

fn k(i: usize) -> u32 {
    // K[i] = floor(|sin(i + 1)| · 2^32) (RFC 1321 §3.4).
    ((i as f64 + 1.0).sin().abs() * 4294967296.0) as u32
}

pub fn md5(input: &[u8]) -> [u8; 16] {
    let mut h: [u32; 4] = [0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476];
    let mut msg = input.to_vec();
    let bit_len = (input.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_le_bytes());
    for chunk in msg.chunks_exact(64) {
        let m: Vec<u32> = chunk.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
        let [mut a, mut b, mut c, mut d] = h;
        for (i, shift) in S.iter().enumerate() {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f = f.wrapping_add(a).wrapping_add(k(i)).wrapping_add(m[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f.rotate_left(*shift));
        }
        h[0] = h[0].wrapping_add(a);
        h[1] = h[1].wrapping_add(b);
        h[2] = h[2].wrapping_add(c);
        h[3] = h[3].wrapping_add(d);
    }
    let mut out = [0u8; 16];
    for (i, w) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// The CHAP response for `id`, `secret` and `challenge`.
pub fn response(id: u8, secret: &[u8], challenge: &[u8]) -> [u8; 16] {
    let mut v = Vec::with_capacity(1 + secret.len() + challenge.len());
    v.push(id);
    v.extend_from_slice(secret);
    v.extend_from_slice(challenge);
    md5(&v)
}

/// Compare without an early exit, so timing does not tell how much matched.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Random bytes for challenges and identifiers, from the kernel.
pub fn random_bytes(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`.
        let n = unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n <= 0 {
            // getrandom does not fail on Linux ≥ 3.17 once seeded; as a last resort mix the
            // clock in rather than hand out a predictable zero challenge.
            let t =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
            for (i, b) in buf[filled..].iter_mut().enumerate() {
                *b = (t >> ((i % 16) * 8)) as u8 ^ i as u8;
            }
            return;
        }
        filled += n as usize;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn md5_test_vectors() {
        // RFC 1321 appendix A.5.
        assert_eq!(hex(&md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(&md5(b"abc")), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            hex(&md5(b"12345678901234567890123456789012345678901234567890123456789012345678901234567890")),
            "57edf4a22be3c955ac49da2e2107b67a"
        );
    }

    #[test]
    fn response_binds_id_secret_and_challenge() {
        let r = response(1, b"secret", b"challenge");
        assert_ne!(r, response(2, b"secret", b"challenge"));
        assert_ne!(r, response(1, b"secreT", b"challenge"));
        assert!(same(&r, &response(1, b"secret", b"challenge")));
    }
}
