//! The HAProxy PROXY protocol, versions 1 (text) and 2 (binary), as received by a listener
//! started with `--proxy-protocol`.
//!
//! Behind a TCP (layer 4) load balancer every connection comes from the balancer, so the
//! client's own address is lost: access logs, `X-Forwarded-For` and `X-Real-IP` would all
//! name the balancer. A balancer that speaks the PROXY protocol writes a short header with
//! the client's address before the client's bytes; reading it first gives the proxy the
//! real peer (ingress-nginx's `use-proxy-protocol`). Spec:
//! <https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt>.
//!
//! Pure core and thin I/O: [`parse`] looks at the bytes received so far and says
//! [`Parsed::Partial`] while more bytes could still make a valid header, an error as soon
//! as none could (a v1 IPv6 address only gets a character check until its line is
//! complete), and [`Parsed::Done`] with the header's length once it is complete.
//! [`read_header`] reads until then and leaves whatever followed the header (the start of
//! the HTTP request or TLS handshake) in the buffer. The header is mandatory on such a
//! listener: the spec forbids guessing whether it is there, since any client could then
//! claim any address.
//!
//! Strict, as the spec asks ("any sequence which does not exactly match the protocol must
//! be discarded"): v1 wants single spaces, addresses of the announced family without
//! leading zeros, decimal ports 0-65535 without sign or leading zeros and a CRLF within
//! 107 bytes; v2 wants version 2, a known command, family and protocol, and an address
//! block as long as its family needs. v2 TLVs are skipped unread.

// Nothing outside the tests calls this until the listeners honour `--proxy-protocol`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The v2 signature: the first 12 bytes of every v2 header.
pub(crate) const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// What every v1 header starts with.
const V1_PREFIX: &[u8] = b"PROXY ";

/// Longest v1 line, CRLF included (`PROXY UNKNOWN` with two full IPv6 addresses).
pub(crate) const V1_MAX_LINE: usize = 107;

/// The fixed part of a v2 header: signature, version/command, family/protocol, length.
const V2_FIXED: usize = 16;

/// Longest v2 header accepted, TLVs included (the length field allows 64 KiB; real
/// balancers send a few hundred bytes at most).
pub(crate) const V2_MAX_HEADER: usize = 4096;

/// Most bytes [`read_header`] buffers while the header is incomplete (a guard: [`parse`]
/// fails long before).
pub(crate) const MAX_READ: usize = V2_MAX_HEADER + 16;

/// Bytes asked for per read while looking for the header.
const READ_CHUNK: usize = 4096;

/// The verdict on the bytes received so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// Not a complete header yet, but more bytes could make one.
    Partial,
    /// A complete header of `header_len` bytes.
    Done {
        /// Length of the header; the client's own bytes start after it.
        header_len: usize,
        /// The client's address, or `None` when the header says to use the connection's
        /// own (v1 `UNKNOWN`, v2 `LOCAL`, and v2 families other than TCP over IPv4/IPv6).
        source: Option<SocketAddr>,
    },
}

/// Why a connection's start is not an acceptable PROXY protocol header.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyHeaderError {
    /// Neither `PROXY ` (v1) nor the v2 signature.
    #[error("not a PROXY protocol header (neither \"PROXY \" nor the v2 signature)")]
    NotProxyProtocol,
    /// No CRLF within the first 107 bytes of a v1 header.
    #[error("PROXY v1 line longer than {V1_MAX_LINE} bytes")]
    V1TooLong,
    /// A v1 line that breaks the grammar; says which part.
    #[error("invalid PROXY v1 header: {0}")]
    V1(&'static str),
    /// A v2 version other than 2.
    #[error("unsupported PROXY v2 version {0} (only 2 exists)")]
    V2Version(u8),
    /// A v2 command other than LOCAL (0) and PROXY (1).
    #[error("invalid PROXY v2 command {0} (expected 0 LOCAL or 1 PROXY)")]
    V2Command(u8),
    /// A v2 family/protocol byte with an unassigned family or protocol.
    #[error("invalid PROXY v2 family/protocol byte {0:#04x}")]
    V2Family(u8),
    /// A v2 header longer than [`V2_MAX_HEADER`].
    #[error("PROXY v2 header of {0} bytes (at most {V2_MAX_HEADER} accepted)")]
    V2TooLong(usize),
    /// A v2 address block shorter than its family's addresses.
    #[error("PROXY v2 address block of {len} bytes, {family} needs {needed}")]
    V2ShortAddress {
        /// The family announced.
        family: &'static str,
        /// The length field.
        len: usize,
        /// What the family needs.
        needed: usize,
    },
    /// The connection ended before the header did.
    #[error("connection closed before the PROXY protocol header was complete")]
    Eof,
    /// More than [`MAX_READ`] bytes without a complete header.
    #[error("no complete PROXY protocol header in {MAX_READ} bytes")]
    TooLong,
    /// Reading failed.
    #[error("reading the PROXY protocol header: {0}")]
    Io(#[from] std::io::Error),
}

/// Looks at the bytes received so far (see the module docs).
pub(crate) fn parse(buf: &[u8]) -> Result<Parsed, ProxyHeaderError> {
    match buf.first() {
        None => Ok(Parsed::Partial),
        Some(b'P') => parse_v1(buf),
        Some(b'\r') => parse_v2(buf),
        Some(_) => Err(ProxyHeaderError::NotProxyProtocol),
    }
}

/// Reads from `io` into `buf` until a complete header is there, then removes exactly the
/// header from the front of `buf` (bytes after it stay for the HTTP or TLS layer). Returns
/// the client's address, `None` when the connection's own peer address is to be used. The
/// caller bounds the time this may take.
pub(crate) async fn read_header<I: AsyncRead + Unpin>(
    io: &mut I,
    buf: &mut BytesMut,
) -> Result<Option<SocketAddr>, ProxyHeaderError> {
    loop {
        if let Parsed::Done { header_len, source } = parse(buf)? {
            buf.advance(header_len);
            return Ok(source);
        }
        if buf.len() >= MAX_READ {
            return Err(ProxyHeaderError::TooLong);
        }
        buf.reserve(READ_CHUNK);
        if io.read_buf(buf).await? == 0 {
            return Err(ProxyHeaderError::Eof);
        }
    }
}

/// Whether `buf` is a prefix of `whole` or starts with it: `Some(true)` when `whole` is
/// all there, `Some(false)` when `buf` is a proper prefix, `None` when they differ.
fn starts_with(buf: &[u8], whole: &[u8]) -> Option<bool> {
    let n = buf.len().min(whole.len());
    (buf[..n] == whole[..n]).then_some(n == whole.len())
}

fn parse_v1(buf: &[u8]) -> Result<Parsed, ProxyHeaderError> {
    match starts_with(buf, V1_PREFIX) {
        None => return Err(ProxyHeaderError::NotProxyProtocol),
        Some(false) => return Ok(Parsed::Partial),
        Some(true) => {}
    }
    let window = &buf[..buf.len().min(V1_MAX_LINE)];
    if let Some(end) = window.windows(2).position(|w| w == b"\r\n") {
        let source = v1_line(&buf[V1_PREFIX.len()..end], true)?;
        return Ok(Parsed::Done {
            header_len: end + 2,
            source,
        });
    }
    if buf.len() >= V1_MAX_LINE {
        return Err(ProxyHeaderError::V1TooLong);
    }
    // Fail early on what no further bytes can repair. A trailing CR can only be followed
    // by LF, so what precedes it must already be a whole line.
    let rest = &buf[V1_PREFIX.len()..];
    match rest.split_last() {
        Some((b'\r', line)) => v1_line(line, true)?,
        _ => v1_line(rest, false)?,
    };
    Ok(Parsed::Partial)
}

/// Checks the v1 line after `PROXY ` and before the CRLF; `whole`: the line is complete,
/// otherwise it only has to be a prefix of a valid line. Returns the source address.
fn v1_line(line: &[u8], whole: bool) -> Result<Option<SocketAddr>, ProxyHeaderError> {
    use ProxyHeaderError::V1;
    // The CRLF was not found before these: a lone CR or LF never ends a line (spec 2.1).
    if line.iter().any(|&b| b == b'\r' || b == b'\n') {
        return Err(V1("lone CR or LF in the line"));
    }
    let mut fields = line.split(|&b| b == b' ');
    let proto = fields.next().unwrap_or_default();
    // A field is complete when a space follows it or the line is whole.
    let proto_complete = whole || proto.len() < line.len();
    let v6 = match proto {
        b"TCP4" => false,
        b"TCP6" => true,
        // The receiver must ignore the rest of an UNKNOWN line.
        b"UNKNOWN" => return Ok(None),
        _ if !proto_complete
            && [&b"TCP4"[..], b"TCP6", b"UNKNOWN"]
                .iter()
                .any(|p| p.starts_with(proto)) =>
        {
            return Ok(None);
        }
        _ => return Err(V1("protocol is not TCP4, TCP6 or UNKNOWN")),
    };
    let parts: Vec<&[u8]> = fields.collect();
    if parts.len() > 4 {
        return Err(V1("more than four fields after the protocol"));
    }
    if whole && parts.len() < 4 {
        return Err(V1("fewer than four fields after the protocol"));
    }
    const NAMES: [&str; 4] = [
        "invalid source address",
        "invalid destination address",
        "invalid source port",
        "invalid destination port",
    ];
    let last = parts.len().saturating_sub(1);
    for (i, part) in parts.iter().enumerate() {
        let complete = whole || i < last;
        let ok = if i < 2 {
            address_ok(part, v6, complete)
        } else {
            decimal_ok(part, 65535, complete)
        };
        if !ok {
            return Err(V1(NAMES[i]));
        }
    }
    if !whole {
        return Ok(None);
    }
    // All four fields were checked above; these parses cannot fail.
    let ip: IpAddr = if v6 {
        IpAddr::V6(ascii(parts[0]).parse().map_err(|_| V1(NAMES[0]))?)
    } else {
        IpAddr::V4(ascii(parts[0]).parse().map_err(|_| V1(NAMES[0]))?)
    };
    let port: u16 = ascii(parts[2]).parse().map_err(|_| V1(NAMES[2]))?;
    Ok(Some(SocketAddr::new(ip, port)))
}

/// `bytes` as text (only called on fields already checked to be ASCII).
fn ascii(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap_or("")
}

/// Whether `field` is (`complete`) or may still become (otherwise) an address of the
/// family.
fn address_ok(field: &[u8], v6: bool, complete: bool) -> bool {
    let Ok(text) = std::str::from_utf8(field) else {
        return false;
    };
    if complete {
        // std refuses leading zeros in IPv4 octets (no octal confusion) and IPv6 zones.
        return if v6 {
            text.parse::<Ipv6Addr>().is_ok()
        } else {
            text.parse::<Ipv4Addr>().is_ok()
        };
    }
    if v6 {
        // A loose prefix check: the complete field is parsed exactly once the CRLF is in.
        text.len() <= 45
            && text
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
            && !text.contains(":::")
            && text.matches("::").count() <= 1
    } else {
        let octets: Vec<&str> = text.split('.').collect();
        let last = octets.len() - 1;
        octets.len() <= 4
            && octets
                .iter()
                .enumerate()
                .all(|(i, o)| decimal_ok(o.as_bytes(), 255, i < last))
    }
}

/// Whether `digits` is (`complete`) or may still become (otherwise) a decimal number of
/// at most `max`, without sign or leading zeros.
fn decimal_ok(digits: &[u8], max: u32, complete: bool) -> bool {
    if digits.is_empty() {
        return !complete;
    }
    digits.len() <= 5
        && digits.iter().all(u8::is_ascii_digit)
        && !(digits.len() > 1 && digits[0] == b'0')
        && digits
            .iter()
            .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'))
            <= max
}

fn parse_v2(buf: &[u8]) -> Result<Parsed, ProxyHeaderError> {
    match starts_with(buf, &V2_SIGNATURE) {
        None => return Err(ProxyHeaderError::NotProxyProtocol),
        Some(false) => return Ok(Parsed::Partial),
        Some(true) => {}
    }
    // Each byte is judged as soon as it is in, so garbage fails without waiting.
    let Some(&ver_cmd) = buf.get(12) else {
        return Ok(Parsed::Partial);
    };
    if ver_cmd >> 4 != 2 {
        return Err(ProxyHeaderError::V2Version(ver_cmd >> 4));
    }
    let local = match ver_cmd & 0x0f {
        0 => true,
        1 => false,
        command => return Err(ProxyHeaderError::V2Command(command)),
    };
    let Some(&fam) = buf.get(13) else {
        return Ok(Parsed::Partial);
    };
    let (family, protocol) = (fam >> 4, fam & 0x0f);
    // Families: 0 UNSPEC, 1 INET, 2 INET6, 3 UNIX; protocols: 0 UNSPEC, 1 STREAM, 2 DGRAM.
    if family > 3 || protocol > 2 {
        return Err(ProxyHeaderError::V2Family(fam));
    }
    let Some(len) = buf.get(14..16) else {
        return Ok(Parsed::Partial);
    };
    let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
    let header_len = V2_FIXED + len;
    if header_len > V2_MAX_HEADER {
        return Err(ProxyHeaderError::V2TooLong(header_len));
    }
    // LOCAL ignores the block whatever it holds; PROXY must carry the family's addresses.
    let (name, needed) = match (local, family, protocol) {
        (true, ..) | (_, 0, _) | (_, _, 0) => ("UNSPEC", 0),
        (false, 1, _) => ("AF_INET", 12),
        (false, 2, _) => ("AF_INET6", 36),
        (false, _, _) => ("AF_UNIX", 216),
    };
    if len < needed {
        return Err(ProxyHeaderError::V2ShortAddress {
            family: name,
            len,
            needed,
        });
    }
    if buf.len() < header_len {
        return Ok(Parsed::Partial);
    }
    let block = &buf[V2_FIXED..header_len];
    let port = |at: usize| u16::from_be_bytes([block[at], block[at + 1]]);
    // Only TCP carries a client address for an HTTP listener; other valid combinations
    // fall back to the connection's own (as the spec allows).
    let source = match (local, fam) {
        (false, 0x11) => {
            let ip: [u8; 4] = block[..4].try_into().expect("12 bytes checked");
            Some(SocketAddr::new(Ipv4Addr::from(ip).into(), port(8)))
        }
        (false, 0x21) => {
            let ip: [u8; 16] = block[..16].try_into().expect("36 bytes checked");
            Some(SocketAddr::new(Ipv6Addr::from(ip).into(), port(32)))
        }
        _ => None,
    };
    Ok(Parsed::Done { header_len, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn done(buf: &[u8]) -> (usize, Option<SocketAddr>) {
        match parse(buf) {
            Ok(Parsed::Done { header_len, source }) => (header_len, source),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn addr(text: &str) -> Option<SocketAddr> {
        Some(text.parse().unwrap())
    }

    /// A v1 header for a TCP connection from `src` to `dst`.
    fn v1(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
        let proto = if src.is_ipv4() { "TCP4" } else { "TCP6" };
        format!(
            "PROXY {proto} {} {} {} {}\r\n",
            src.ip(),
            dst.ip(),
            src.port(),
            dst.port()
        )
        .into_bytes()
    }

    /// A v2 header: `ver_cmd`, `fam`, then `block` (addresses and TLVs).
    fn v2_raw(ver_cmd: u8, fam: u8, block: &[u8]) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.push(ver_cmd);
        out.push(fam);
        out.extend_from_slice(&u16::try_from(block.len()).unwrap().to_be_bytes());
        out.extend_from_slice(block);
        out
    }

    /// A v2 PROXY header for TCP from `src` to `dst`, followed by `tlvs`.
    fn v2(src: SocketAddr, dst: SocketAddr, tlvs: &[u8]) -> Vec<u8> {
        let mut block = Vec::new();
        let fam = match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                block.extend_from_slice(&s.octets());
                block.extend_from_slice(&d.octets());
                0x11
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                block.extend_from_slice(&s.octets());
                block.extend_from_slice(&d.octets());
                0x21
            }
            _ => panic!("mixed families"),
        };
        block.extend_from_slice(&src.port().to_be_bytes());
        block.extend_from_slice(&dst.port().to_be_bytes());
        block.extend_from_slice(tlvs);
        v2_raw(0x21, fam, &block)
    }

    /// Every proper prefix of `header` is Partial and the whole is Done with its length.
    fn partial_at_every_cut(header: &[u8]) -> Option<SocketAddr> {
        for cut in 0..header.len() {
            assert!(
                matches!(parse(&header[..cut]), Ok(Parsed::Partial)),
                "cut {cut} of {header:?}: {:?}",
                parse(&header[..cut])
            );
        }
        let (len, source) = done(header);
        assert_eq!(len, header.len());
        source
    }

    #[test]
    fn v1_examples_from_the_spec() {
        let text = "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n\
                    GET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n";
        assert_eq!(done(text.as_bytes()), (47, addr("192.168.0.1:56324")));

        let longest_v4 = "PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n";
        assert_eq!(longest_v4.len(), 56);
        assert_eq!(
            partial_at_every_cut(longest_v4.as_bytes()),
            addr("255.255.255.255:65535")
        );

        let full6 = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
        let longest_v6 = format!("PROXY TCP6 {full6} {full6} 65535 65535\r\n");
        assert_eq!(longest_v6.len(), 104);
        assert_eq!(
            partial_at_every_cut(longest_v6.as_bytes()),
            addr("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")
        );

        assert_eq!(partial_at_every_cut(b"PROXY UNKNOWN\r\n"), None);
        assert_eq!(done(b"PROXY UNKNOWN\r\n"), (15, None));

        let worst = format!("PROXY UNKNOWN {full6} {full6} 65535 65535\r\n");
        assert_eq!(worst.len(), V1_MAX_LINE);
        assert_eq!(partial_at_every_cut(worst.as_bytes()), None);
        // One byte more and the CRLF is not within the first 107.
        let too_long = format!("PROXY UNKNOWN {full6} {full6} 65535 655350\r\n");
        assert!(matches!(
            parse(too_long.as_bytes()),
            Err(ProxyHeaderError::V1TooLong)
        ));
        assert!(matches!(
            parse(&too_long.as_bytes()[..V1_MAX_LINE]),
            Err(ProxyHeaderError::V1TooLong)
        ));
    }

    #[test]
    fn v1_unknown_ignores_the_rest_of_its_line() {
        for text in [
            &b"PROXY UNKNOWN \r\n"[..],
            b"PROXY UNKNOWN 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY UNKNOWN whatever \xff goes\r\n",
        ] {
            assert_eq!(done(text), (text.len(), None), "{text:?}");
        }
    }

    #[test]
    fn v1_is_strict() {
        for bad in [
            // Spacing.
            "PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            "PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n",
            "PROXY TCP4 1.2.3.4\t5.6.7.8 1 2\r\n",
            "PROXY\tTCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            // Fields: missing, extra, wrong family, odd numbers.
            "PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
            "PROXY TCP4\r\n",
            "PROXY\r\n",
            "PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",
            "PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n",
            "PROXY UNKNOWNX\r\n",
            "PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
            "PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
            "PROXY TCP6 ::1 1.2.3.4 1 2\r\n",
            "PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 0x1 2\r\n",
            "PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n",
            "PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n",
            "PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n",
            "PROXY TCP4 1.2.3.4.5 5.6.7.8 1 2\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX",
            "PROXY TCP4 1.2.3.4 5.6.7.8 1\n2\r\n",
            "PROXY UNKNOWN\n\r\n",
            // Not PROXY at all.
            "GET / HTTP/1.1\r\n\r\n",
            "proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            "PROXYTCP4 1.2.3.4 5.6.7.8 1 2\r\n",
            " PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad:?}");
        }
        // Port and address edges that are fine.
        assert_eq!(
            done(b"PROXY TCP4 0.0.0.0 0.0.0.0 0 0\r\n").1,
            addr("0.0.0.0:0")
        );
        assert_eq!(
            done(b"PROXY TCP6 ::1 ::ffff:10.0.0.1 8080 443\r\n").1,
            addr("[::1]:8080")
        );
        assert_eq!(
            done(b"PROXY TCP6 2001:DB8::A ::1 1 2\r\n").1,
            addr("[2001:db8::a]:1")
        );
    }

    #[test]
    fn errors_come_as_soon_as_no_byte_can_help() {
        for bad in [
            &b"X"[..],
            b"\x16\x03\x01",
            b"G",
            b"PROXX",
            b"PROXY X",
            b"PROXY TCP44",
            b"PROXY TCP4 1.2.3.4.",
            b"PROXY TCP4 256",
            b"PROXY TCP4 01",
            b"PROXY TCP4 ::",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 ",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 655350",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 +",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",
            b"PROXY TCP6 ::1::",
            b"PROXY TCP6 :::",
            b"PROXY TCP6 g",
            b"\r\n\r\n\x01",
            b"\r\n\r\n\x00\r\nQUIT\n\x11",
            b"\r\n\r\n\x00\r\nQUIT\n\x22",
            b"\r\n\r\n\x00\r\nQUIT\n\x21\x41",
            b"\r\n\r\n\x00\r\nQUIT\n\x21\x13",
            b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0b",
            b"\r\n\r\n\x00\r\nQUIT\n\x21\x21\x00\x23",
            b"\r\n\r\n\x00\r\nQUIT\n\x21\x31\x00\xd7",
            b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x10\x00",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}: {:?}", parse(bad));
        }
        for fine in [
            &b"P"[..],
            b"PROXY",
            b"PROXY ",
            b"PROXY T",
            b"PROXY U",
            b"PROXY TCP4 ",
            b"PROXY TCP4 1.2.3.",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 6553",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r",
            b"PROXY TCP6 ::ffff:1.2.",
            b"PROXY UNKNOWN anything",
            b"\r",
            b"\r\n\r\n\x00\r\nQUIT",
            b"\r\n\r\n\x00\r\nQUIT\n\x20\x00\x0f\xf0",
        ] {
            assert!(
                matches!(parse(fine), Ok(Parsed::Partial)),
                "{fine:?}: {:?}",
                parse(fine)
            );
        }
    }

    #[test]
    fn v2_examples_from_the_spec() {
        let v4_src: SocketAddr = "192.168.0.1:56324".parse().unwrap();
        let v4_dst: SocketAddr = "192.168.0.11:443".parse().unwrap();
        let v6_src: SocketAddr = "[2001:db8::1]:56324".parse().unwrap();
        let v6_dst: SocketAddr = "[2001:db8::2]:443".parse().unwrap();

        // \x11 TCP over IPv4 (12 address bytes), \x21 TCP over IPv6 (36).
        let header = v2(v4_src, v4_dst, &[]);
        assert_eq!(header.len(), 16 + 12);
        assert_eq!(partial_at_every_cut(&header), Some(v4_src));
        let header = v2(v6_src, v6_dst, &[]);
        assert_eq!(header.len(), 16 + 36);
        assert_eq!(partial_at_every_cut(&header), Some(v6_src));

        // LOCAL: the connection's own endpoints, whatever the block says; the length
        // must still be skipped ("must not assume zero is presented for LOCAL").
        assert_eq!(partial_at_every_cut(&v2_raw(0x20, 0x00, &[])), None);
        let mut local = v2(v4_src, v4_dst, &[]);
        local[12] = 0x20;
        assert_eq!(partial_at_every_cut(&local), None);

        // UDP and UNIX fall back to the real endpoints (UNSPEC mode).
        assert_eq!(done(&v2_raw(0x21, 0x12, &[7; 12])), (28, None));
        assert_eq!(done(&v2_raw(0x21, 0x22, &[7; 36])), (52, None));
        assert_eq!(done(&v2_raw(0x21, 0x31, &[0; 216])), (232, None));
        assert_eq!(done(&v2_raw(0x21, 0x32, &[0; 216])), (232, None));
        assert_eq!(done(&v2_raw(0x21, 0x00, &[])), (16, None));
        assert_eq!(done(&v2_raw(0x21, 0x00, &[1, 2, 3])), (19, None));

        // TLVs (ALPN, AUTHORITY, NOOP, UNIQUE_ID, SSL with a sub-TLV) are skipped but
        // counted in the header.
        let tlvs = [
            &b"\x01\x00\x02h2"[..],
            b"\x02\x00\x0bexample.com",
            b"\x04\x00\x03\x00\x00\x00",
            b"\x05\x00\x04uid1",
            b"\x20\x00\x0a\x01\x00\x00\x00\x00\x21\x00\x02v1",
        ]
        .concat();
        let header = v2(v4_src, v4_dst, &tlvs);
        assert_eq!(header.len(), 16 + 12 + tlvs.len());
        assert_eq!(partial_at_every_cut(&header), Some(v4_src));

        // The version must be 2; the command LOCAL or PROXY; family and protocol known.
        for (ver_cmd, fam) in [(0x11, 0x11), (0x31, 0x11), (0x22, 0x11), (0x2f, 0x11)] {
            assert!(
                parse(&v2_raw(ver_cmd, fam, &[0; 12])).is_err(),
                "{ver_cmd:#x}"
            );
        }
        for fam in [0x13, 0x41, 0xf1, 0x03] {
            assert!(parse(&v2_raw(0x21, fam, &[0; 36])).is_err(), "{fam:#x}");
        }
        // Address blocks too short for their family.
        assert!(parse(&v2_raw(0x21, 0x11, &[0; 11])).is_err());
        assert!(parse(&v2_raw(0x21, 0x21, &[0; 12])).is_err());
        assert!(parse(&v2_raw(0x21, 0x31, &[0; 36])).is_err());
    }

    #[test]
    fn v2_length_is_bounded() {
        let src: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let fits = v2(src, src, &vec![0x04; V2_MAX_HEADER - 28]);
        assert_eq!(done(&fits), (V2_MAX_HEADER, Some(src)));
        let over = v2(src, src, &vec![0x04; V2_MAX_HEADER - 27]);
        assert!(matches!(
            parse(&over[..16]),
            Err(ProxyHeaderError::V2TooLong(_))
        ));
        assert!(parse(&v2_raw(0x21, 0x11, &[0; 0xffff])).is_err());
    }

    #[test]
    fn error_messages_say_what_is_wrong() {
        let message = |buf: &[u8]| parse(buf).unwrap_err().to_string();
        assert_eq!(
            message(b"PROXY TCP4 1.2.3.4 5.6.7.8 70000 2\r\n"),
            "invalid PROXY v1 header: invalid source port"
        );
        assert_eq!(
            message(b"GET /"),
            "not a PROXY protocol header (neither \"PROXY \" nor the v2 signature)"
        );
        assert_eq!(
            message(&v2_raw(0x21, 0x11, &[0; 4])),
            "PROXY v2 address block of 4 bytes, AF_INET needs 12"
        );
    }

    #[tokio::test]
    async fn read_header_keeps_the_request_bytes() {
        let request = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        let src: SocketAddr = "[2001:db8::7]:40000".parse().unwrap();
        let dst: SocketAddr = "[2001:db8::1]:443".parse().unwrap();
        for header in [v1(src, dst), v2(src, dst, b"\x04\x00\x01\x00")] {
            let wire = [&header[..], request].concat();
            let mut reader = &wire[..];
            let mut buf = BytesMut::new();
            assert_eq!(read_header(&mut reader, &mut buf).await.unwrap(), Some(src));
            // Whatever was read past the header is the request's start; the rest is unread.
            let mut rest = buf.to_vec();
            rest.extend_from_slice(reader);
            assert_eq!(rest, request);
        }
    }

    #[tokio::test]
    async fn read_header_across_small_writes() {
        let src: SocketAddr = "203.0.113.9:5555".parse().unwrap();
        let wire = [&v1(src, src)[..], b"GET /x HTTP/1.1\r\n"].concat();
        let (mut client, mut server) = tokio::io::duplex(4);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for byte in wire {
                client.write_all(&[byte]).await.unwrap();
            }
            // Dropping `client` ends the stream, so read_to_end below returns.
        });
        let mut buf = BytesMut::new();
        let source = read_header(&mut server, &mut buf).await.unwrap();
        assert_eq!(source, Some(src));
        // Drain before joining: the writer blocks while the 4-byte pipe is full.
        let mut rest = buf.to_vec();
        server.read_to_end(&mut rest).await.unwrap();
        writer.await.unwrap();
        assert_eq!(rest, b"GET /x HTTP/1.1\r\n");
    }

    #[tokio::test]
    async fn read_header_failures() {
        let mut buf = BytesMut::new();
        let mut truncated = &b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r"[..];
        assert!(matches!(
            read_header(&mut truncated, &mut buf).await,
            Err(ProxyHeaderError::Eof)
        ));
        let mut buf = BytesMut::new();
        let mut http = &b"GET / HTTP/1.1\r\n\r\n"[..];
        assert!(matches!(
            read_header(&mut http, &mut buf).await,
            Err(ProxyHeaderError::NotProxyProtocol)
        ));
        let mut buf = BytesMut::new();
        let mut empty = &b""[..];
        assert!(matches!(
            read_header(&mut empty, &mut buf).await,
            Err(ProxyHeaderError::Eof)
        ));
    }

    fn socket_pair() -> impl Strategy<Value = (SocketAddr, SocketAddr)> {
        prop_oneof![
            (
                any::<[u8; 4]>(),
                any::<[u8; 4]>(),
                any::<u16>(),
                any::<u16>()
            )
                .prop_map(|(s, d, sp, dp)| (
                    SocketAddr::new(Ipv4Addr::from(s).into(), sp),
                    SocketAddr::new(Ipv4Addr::from(d).into(), dp)
                )),
            (
                any::<[u8; 16]>(),
                any::<[u8; 16]>(),
                any::<u16>(),
                any::<u16>()
            )
                .prop_map(|(s, d, sp, dp)| (
                    SocketAddr::new(Ipv6Addr::from(s).into(), sp),
                    SocketAddr::new(Ipv6Addr::from(d).into(), dp)
                )),
        ]
    }

    /// Bytes that often start like a header, so the fuzzing gets past the first byte.
    fn header_like() -> impl Strategy<Value = Vec<u8>> {
        let tail = prop::collection::vec(any::<u8>(), 0..160);
        let text_tail = prop::collection::vec(
            prop::sample::select(b"PROXY TCP46UNKNOW0123456789abcdef.: \r\n".to_vec()),
            0..120,
        );
        prop_oneof![
            tail.clone(),
            text_tail.prop_map(|t| [V1_PREFIX, &t].concat()),
            (0..16u8, tail.clone()).prop_map(|(k, t)| {
                let mut out = V2_SIGNATURE.to_vec();
                out.push(0x20 | (k & 1));
                out.push([0x00, 0x11, 0x12, 0x21, 0x22, 0x31, 0x32][usize::from(k % 7)]);
                out.extend_from_slice(&t);
                out
            }),
            (socket_pair(), any::<bool>(), tail).prop_map(|((s, d), text, t)| {
                let header = if text { v1(s, d) } else { v2(s, d, &[]) };
                [header, t].concat()
            }),
        ]
    }

    /// `buf` with a few bytes flipped, inserted or removed.
    fn mutated() -> impl Strategy<Value = Vec<u8>> {
        (
            header_like(),
            prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..4),
        )
            .prop_map(|(mut buf, edits)| {
                for (at, byte, kind) in edits {
                    if buf.is_empty() {
                        buf.push(byte);
                        continue;
                    }
                    let i = at.index(buf.len());
                    match kind {
                        0 => buf[i] ^= byte | 1,
                        1 => buf.insert(i, byte),
                        _ => {
                            buf.remove(i);
                        }
                    }
                }
                buf
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// v1 and v2 headers for any TCP addresses parse back to the source, at the right
        /// length, with the bytes after them left alone.
        #[test]
        fn round_trips((src, dst) in socket_pair(), tail in prop::collection::vec(any::<u8>(), 0..32)) {
            for header in [v1(src, dst), v2(src, dst, &[])] {
                let wire = [&header[..], &tail].concat();
                prop_assert_eq!(
                    parse(&wire).unwrap(),
                    Parsed::Done { header_len: header.len(), source: Some(src) }
                );
                for cut in 0..header.len() {
                    prop_assert_eq!(parse(&header[..cut]).unwrap(), Parsed::Partial);
                }
            }
        }

        /// Arbitrary bytes never panic; the verdicts on growing prefixes go Partial, then
        /// either an error that stays or Done at exactly that length that stays.
        #[test]
        fn arbitrary_bytes(buf in prop_oneof![header_like(), mutated()]) {
            let mut settled: Option<Result<usize, ()>> = None;
            for cut in 0..=buf.len() {
                let verdict = parse(&buf[..cut]);
                if let Ok(Parsed::Done { header_len, .. }) = verdict {
                    prop_assert!(header_len <= cut);
                }
                match (settled, verdict) {
                    (None, Ok(Parsed::Partial)) => {}
                    (None, Ok(Parsed::Done { header_len, .. })) => {
                        prop_assert_eq!(header_len, cut, "{:?}", buf);
                        settled = Some(Ok(header_len));
                    }
                    (None, Err(_)) => settled = Some(Err(())),
                    (Some(Ok(len)), Ok(Parsed::Done { header_len, .. })) => {
                        prop_assert_eq!(header_len, len);
                    }
                    (Some(Err(())), Err(_)) => {}
                    (before, now) => {
                        prop_assert!(false, "cut {cut} of {buf:?}: {before:?} then {now:?}");
                    }
                }
            }
        }
    }
}
