//! HTTP/1.1 chunked transfer coding (RFC 9112 §7.1): an incremental decoder for upstream
//! response bodies and the framing for request bodies of unknown length.
//!
//! Pure: the decoder takes whatever bytes have arrived and hands back body data as it
//! becomes complete, so it can be fed by any read size (tested with every split).

use bytes::{Buf, Bytes, BytesMut};

/// Longest chunk-size line accepted (size, extensions, CRLF); a guard against garbage.
const MAX_LINE: usize = 4096;

/// Longest trailer section accepted; trailers are read and dropped.
const MAX_TRAILERS: usize = 16 * 1024;

/// The upstream's chunked framing is broken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid chunked body: {0}")]
pub(crate) struct ChunkedError(&'static str);

/// Where the decoder is in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a chunk-size line.
    Size,
    /// Inside chunk data, this many bytes left.
    Data(u64),
    /// The CRLF after chunk data.
    DataEnd,
    /// Trailer lines after the last chunk, until an empty line.
    Trailers { seen: usize },
    /// The body is complete.
    Done,
}

/// Incremental chunked decoder.
#[derive(Debug, Clone)]
pub(crate) struct ChunkedDecoder {
    state: State,
}

/// What one [`ChunkedDecoder::decode`] step produced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decoded {
    /// Body data.
    Data(Bytes),
    /// More input is needed.
    NeedMore,
    /// The body is over (the last chunk and trailers were consumed).
    Done,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder { state: State::Size }
    }
}

impl ChunkedDecoder {
    /// Whether the terminating chunk and trailers have been consumed.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes framing from `buf` and returns the next piece of body data, `NeedMore` when
    /// `buf` ends mid-frame, or `Done` at the end. Data is split off `buf` without copying.
    pub(crate) fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, ChunkedError> {
        loop {
            match self.state {
                State::Done => return Ok(Decoded::Done),
                State::Size => {
                    let found = find_crlf(buf);
                    // The limit holds however the bytes arrive: a complete line is
                    // measured too, so acceptance never depends on TCP segmentation.
                    if found.map_or(buf.len(), |end| end + 2) > MAX_LINE {
                        return Err(ChunkedError("chunk size line too long"));
                    }
                    let Some(end) = found else {
                        return Ok(Decoded::NeedMore);
                    };
                    let size = parse_size(&buf[..end])?;
                    buf.advance(end + 2);
                    self.state = if size == 0 {
                        State::Trailers { seen: 0 }
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let data = buf.split_to(take).freeze();
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                    return Ok(Decoded::Data(data));
                }
                State::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Decoded::NeedMore);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(ChunkedError("chunk data not followed by CRLF"));
                    }
                    buf.advance(2);
                    self.state = State::Size;
                }
                State::Trailers { seen } => {
                    let Some(end) = find_crlf(buf) else {
                        if seen + buf.len() > MAX_TRAILERS {
                            return Err(ChunkedError("trailer section too large"));
                        }
                        return Ok(Decoded::NeedMore);
                    };
                    buf.advance(end + 2);
                    self.state = if end == 0 {
                        State::Done
                    } else if seen + end + 2 > MAX_TRAILERS {
                        return Err(ChunkedError("trailer section too large"));
                    } else {
                        State::Trailers {
                            seen: seen + end + 2,
                        }
                    };
                }
            }
        }
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

/// `1a;ext=1` → 26. Hex digits, then optional whitespace and extensions (ignored).
fn parse_size(line: &[u8]) -> Result<u64, ChunkedError> {
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    if digits == 0 {
        return Err(ChunkedError("chunk size is not hexadecimal"));
    }
    if digits > 15 {
        return Err(ChunkedError("chunk size too large"));
    }
    let rest = &line[digits..];
    let rest_ok = rest.is_empty() || matches!(rest.trim_ascii_start().first(), Some(b';'));
    if !rest_ok {
        return Err(ChunkedError("chunk size followed by garbage"));
    }
    let mut size = 0u64;
    for &b in &line[..digits] {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => b - b'A' + 10,
        };
        size = size * 16 + u64::from(digit);
    }
    Ok(size)
}

/// The chunk header for `len` bytes of data (`"1a\r\n"`); the caller writes the data and
/// then [`CHUNK_END`].
pub(crate) fn chunk_header(len: usize) -> Vec<u8> {
    format!("{len:x}\r\n").into_bytes()
}

/// What follows each chunk's data.
pub(crate) const CHUNK_END: &[u8] = b"\r\n";

/// The last chunk with an empty trailer section.
pub(crate) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `step` bytes; returns the body or the error.
    fn decode_in_steps(input: &[u8], step: usize) -> Result<(Vec<u8>, bool, usize), ChunkedError> {
        let mut decoder = ChunkedDecoder::default();
        let mut buf = BytesMut::new();
        let mut body = Vec::new();
        for piece in input.chunks(step.max(1)) {
            buf.extend_from_slice(piece);
            loop {
                match decoder.decode(&mut buf)? {
                    Decoded::Data(d) => body.extend_from_slice(&d),
                    Decoded::NeedMore => break,
                    Decoded::Done => return Ok((body, true, buf.len())),
                }
            }
        }
        Ok((body, decoder.is_done(), buf.len()))
    }

    #[test]
    fn decodes_at_every_split() {
        let input =
            b"5\r\nhello\r\n1;name=value\r\n \r\nA\r\n0123456789\r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        for step in 1..=input.len() {
            let (body, done, rest) = decode_in_steps(input, step).unwrap();
            assert_eq!(body, b"hello 0123456789", "step {step}");
            assert!(done, "step {step}");
            // Bytes after the body (a pipelined response, in theory) are left alone.
            if step >= input.len() {
                assert_eq!(rest, 4);
            }
        }
    }

    #[test]
    fn incomplete_is_not_done() {
        let (body, done, _) = decode_in_steps(b"5\r\nhel", 3).unwrap();
        assert_eq!(body, b"hel");
        assert!(!done);
        let (_, done, _) = decode_in_steps(b"0\r\n", 1).unwrap();
        assert!(
            !done,
            "the empty line after the last chunk is still missing"
        );
    }

    #[test]
    fn rejects_broken_framing() {
        for bad in [
            &b"x\r\n"[..],
            b"5\r\nhelloXX",
            b"ffffffffffffffff\r\n",
            b"5 garbage\r\nhello\r\n",
            b"\r\n",
        ] {
            assert!(decode_in_steps(bad, bad.len()).is_err(), "{bad:?}");
        }
        let long = vec![b'1'; MAX_LINE + 10];
        assert!(decode_in_steps(&long, long.len()).is_err());
    }

    #[test]
    fn encoder_round_trips() {
        let mut wire = Vec::new();
        for piece in [&b"abc"[..], &[b'z'; 300][..]] {
            wire.extend_from_slice(&chunk_header(piece.len()));
            wire.extend_from_slice(piece);
            wire.extend_from_slice(CHUNK_END);
        }
        wire.extend_from_slice(LAST_CHUNK);
        let (body, done, rest) = decode_in_steps(&wire, 7).unwrap();
        assert_eq!(body.len(), 303);
        assert!(done);
        assert_eq!(rest, 0);
    }
}
