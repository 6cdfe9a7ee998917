//! Response bodies: small in-memory ones, and the generated `/bytes/N` stream.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, combinators::BoxBody};
use hyper::body::{Body, Frame, SizeHint};

/// The one body type every handler returns, so routes can mix body kinds.
pub(crate) type ResponseBody = BoxBody<Bytes, Infallible>;

/// A complete in-memory body.
pub(crate) fn full(data: impl Into<Bytes>) -> ResponseBody {
    Full::new(data.into()).boxed()
}

/// A body with no bytes at all (204, 304, 101).
pub(crate) fn empty() -> ResponseBody {
    Empty::new().boxed()
}

/// Size of each frame `/bytes/N` sends.
pub(crate) const CHUNK: usize = 64 * 1024;

/// The pattern's period: `a` to `z`.
const PERIOD: usize = 26;

/// One chunk of pattern plus a period of slack, so a chunk starting at any
/// phase of the pattern is a zero-copy slice of this shared buffer.
fn pattern() -> &'static Bytes {
    static PATTERN: OnceLock<Bytes> = OnceLock::new();
    PATTERN.get_or_init(|| {
        (0..CHUNK + PERIOD)
            .map(|i| b'a' + (i % PERIOD) as u8)
            .collect::<Vec<u8>>()
            .into()
    })
}

/// Streams `len` bytes of `abc..z` repeated, 64 KiB per frame, without ever
/// holding more than the shared 64 KiB pattern in memory.
#[derive(Debug)]
pub(crate) struct PatternBody {
    remaining: u64,
    sent: u64,
}

impl PatternBody {
    /// A body that will yield exactly `len` bytes.
    pub(crate) fn new(len: u64) -> Self {
        Self {
            remaining: len,
            sent: 0,
        }
    }
}

impl Body for PatternBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.remaining == 0 {
            return Poll::Ready(None);
        }
        // Both casts are bounded: by CHUNK and by PERIOD respectively.
        let len = this.remaining.min(CHUNK as u64) as usize;
        let phase = (this.sent % PERIOD as u64) as usize;
        let chunk = pattern().slice(phase..phase + len);
        this.remaining -= len as u64;
        this.sent += len as u64;
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pattern_body_yields_exact_length_and_continuous_pattern() {
        let len = 3 * CHUNK as u64 + 7;
        let collected = PatternBody::new(len).collect().await.unwrap().to_bytes();
        assert_eq!(collected.len() as u64, len);
        assert!(
            collected
                .iter()
                .enumerate()
                .all(|(i, b)| *b == b'a' + (i % PERIOD) as u8)
        );
    }

    #[tokio::test]
    async fn empty_pattern_body_ends_at_once() {
        let body = PatternBody::new(0);
        assert!(body.is_end_stream());
        assert_eq!(body.collect().await.unwrap().to_bytes().len(), 0);
    }
}
