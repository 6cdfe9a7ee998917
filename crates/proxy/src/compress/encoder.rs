//! The body encoder: a response body compressed piece by piece as it streams, never held
//! whole. The codecs are the ones `async-compression` wraps (flate2, brotli, zstd), driven
//! through their synchronous `Write` side into a buffer that is handed on after each step.
//!
//! Flushing: while the upstream has more ready, pieces are compressed without a flush (a
//! flush costs ratio); when the upstream has nothing ready (a slow backend, server-sent
//! events, a long poll), what was compressed so far is flushed and sent, so the client
//! sees each piece when the upstream sends it, not when the body ends.

use std::io::Write as _;
use std::task::{Context, Poll};

use bytes::Bytes;

use super::negotiate::Coding;
use super::settings::Compression;

/// Output gathered before it is handed on without waiting for the upstream to pause: big
/// enough for few, large writes; small enough that a fast upstream's body streams.
const OUT_HIGH: usize = 16 * 1024;

/// brotli's window (log2 bytes): nginx's brotli module's default (`brotli_window 512k`).
const BROTLI_WINDOW: u32 = 19;

/// brotli's internal buffer size.
const BROTLI_BUFFER: usize = 4096;

/// One codec writing into a buffer.
enum Codec {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    // Boxed: brotli's state is large, and most responses are not brotli.
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Codec {
    fn new(coding: Coding, settings: &Compression) -> std::io::Result<Codec> {
        Ok(match coding {
            Coding::Gzip => Codec::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(settings.gzip_level),
            )),
            Coding::Brotli => Codec::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                BROTLI_BUFFER,
                settings.brotli_level,
                BROTLI_WINDOW,
            ))),
            Coding::Zstd => Codec::Zstd(zstd::stream::write::Encoder::new(
                Vec::new(),
                settings.zstd_level,
            )?),
        })
    }

    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Codec::Gzip(e) => e.write_all(data),
            Codec::Brotli(e) => e.write_all(data),
            Codec::Zstd(e) => e.write_all(data),
        }
    }

    /// Ends the current block so everything written so far can be decoded (gzip's sync
    /// flush, brotli's flush, zstd's block end); the codec's history is kept.
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Codec::Gzip(e) => e.flush(),
            Codec::Brotli(e) => e.flush(),
            Codec::Zstd(e) => e.flush(),
        }
    }

    /// The compressed bytes so far, taken.
    fn take(&mut self) -> Vec<u8> {
        match self {
            Codec::Gzip(e) => std::mem::take(e.get_mut()),
            Codec::Brotli(e) => std::mem::take(e.get_mut()),
            Codec::Zstd(e) => std::mem::take(e.get_mut()),
        }
    }

    fn buffered(&mut self) -> usize {
        match self {
            Codec::Gzip(e) => e.get_ref().len(),
            Codec::Brotli(e) => e.get_ref().len(),
            Codec::Zstd(e) => e.get_ref().len(),
        }
    }

    /// Ends the stream: the rest of the compressed bytes, trailer included.
    fn finish(self) -> std::io::Result<Vec<u8>> {
        match self {
            Codec::Gzip(e) => e.finish(),
            Codec::Brotli(e) => Ok(e.into_inner()),
            Codec::Zstd(e) => e.finish(),
        }
    }
}

/// Why a compressed body stopped.
#[derive(Debug)]
pub(crate) enum Failure<E> {
    /// The upstream body failed.
    Upstream(E),
    /// The codec failed (it writes to memory; not expected).
    Encoder(std::io::Error),
}

/// A body being compressed. Poll it with the upstream body's own poll; it gives the
/// compressed pieces, then `None`.
pub(crate) struct Compressing {
    /// `None` once finished.
    codec: Option<Codec>,
    /// Input went in since the last flush.
    unflushed: bool,
}

impl std::fmt::Debug for Compressing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressing")
            .field("finished", &self.codec.is_none())
            .finish_non_exhaustive()
    }
}

impl Compressing {
    /// A compressor for `coding` at the settings' level.
    pub(crate) fn new(coding: Coding, settings: &Compression) -> std::io::Result<Compressing> {
        Ok(Compressing {
            codec: Some(Codec::new(coding, settings)?),
            unflushed: false,
        })
    }

    /// Whether the compressed body is over (every byte handed on).
    pub(crate) fn is_finished(&self) -> bool {
        self.codec.is_none()
    }

    /// Compresses a whole body at once (one that came complete with its head).
    pub(crate) fn whole(mut self, data: &[u8]) -> std::io::Result<Bytes> {
        let Some(mut codec) = self.codec.take() else {
            return Ok(Bytes::new());
        };
        codec.write(data)?;
        let mut out = codec.take();
        out.extend_from_slice(&codec.finish()?);
        Ok(Bytes::from(out))
    }

    /// The next compressed piece. `upstream` polls the uncompressed body (data pieces, then
    /// `None` at its end).
    pub(crate) fn poll_next<E>(
        &mut self,
        cx: &mut Context<'_>,
        mut upstream: impl FnMut(&mut Context<'_>) -> Poll<Option<Result<Bytes, E>>>,
    ) -> Poll<Option<Result<Bytes, Failure<E>>>> {
        loop {
            let Some(codec) = self.codec.as_mut() else {
                return Poll::Ready(None);
            };
            match upstream(cx) {
                Poll::Ready(Some(Ok(data))) => {
                    if data.is_empty() {
                        continue;
                    }
                    if let Err(error) = codec.write(&data) {
                        self.codec = None;
                        return Poll::Ready(Some(Err(Failure::Encoder(error))));
                    }
                    self.unflushed = true;
                    if codec.buffered() >= OUT_HIGH {
                        return Poll::Ready(Some(Ok(Bytes::from(codec.take()))));
                    }
                }
                Poll::Ready(Some(Err(error))) => {
                    self.codec = None;
                    return Poll::Ready(Some(Err(Failure::Upstream(error))));
                }
                Poll::Ready(None) => {
                    let Some(mut codec) = self.codec.take() else {
                        return Poll::Ready(None);
                    };
                    let mut out = codec.take();
                    return match codec.finish() {
                        Ok(rest) => {
                            out.extend_from_slice(&rest);
                            Poll::Ready(Some(Ok(Bytes::from(out))))
                        }
                        Err(error) => Poll::Ready(Some(Err(Failure::Encoder(error)))),
                    };
                }
                Poll::Pending => {
                    // The upstream paused: what it sent so far goes to the client now.
                    if self.unflushed {
                        self.unflushed = false;
                        if let Err(error) = codec.flush() {
                            self.codec = None;
                            return Poll::Ready(Some(Err(Failure::Encoder(error))));
                        }
                    }
                    if codec.buffered() > 0 {
                        return Poll::Ready(Some(Ok(Bytes::from(codec.take()))));
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::io::Read as _;

    fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Brotli => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Zstd => out = zstd::decode_all(data).unwrap(),
        }
        out
    }

    fn on() -> Compression {
        Compression::default()
    }

    #[test]
    fn whole_bodies_round_trip_in_every_coding() {
        let body = b"{\"hello\": \"world\"} ".repeat(500);
        for coding in Coding::PREFERENCE {
            let out = Compressing::new(coding, &on())
                .unwrap()
                .whole(&body)
                .unwrap();
            assert!(out.len() < body.len() / 4, "{coding:?}: {}", out.len());
            assert_eq!(decode(coding, &out), body, "{coding:?}");
        }
    }

    /// An upstream that gives `script`'s pieces, `None` standing for "nothing ready yet".
    fn run(coding: Coding, script: Vec<Option<&'static [u8]>>) -> Vec<Vec<u8>> {
        let mut compressing = Compressing::new(coding, &on()).unwrap();
        let mut script: VecDeque<_> = script.into();
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut pieces = Vec::new();
        loop {
            let poll = compressing.poll_next(&mut cx, |_| match script.pop_front() {
                Some(Some(data)) => Poll::Ready(Some(Ok::<_, ()>(Bytes::from_static(data)))),
                Some(None) => Poll::Pending,
                None => Poll::Ready(None),
            });
            match poll {
                Poll::Ready(Some(Ok(piece))) => pieces.push(piece.to_vec()),
                Poll::Ready(Some(Err(_))) => panic!("failed"),
                Poll::Ready(None) => break,
                Poll::Pending => {}
            }
        }
        assert!(compressing.is_finished());
        pieces
    }

    #[test]
    fn a_pause_of_the_upstream_flushes_what_it_sent() {
        for coding in Coding::PREFERENCE {
            let pieces = run(
                coding,
                vec![Some(b"data: one\n\n"), None, Some(b"data: two\n\n")],
            );
            // The first piece alone decodes to the first event (a flushed prefix).
            let first = &pieces[0];
            let mut partial = Vec::new();
            match coding {
                Coding::Gzip => {
                    let _ = flate2::read::GzDecoder::new(&first[..]).read_to_end(&mut partial);
                }
                Coding::Brotli => {
                    let _ = brotli::Decompressor::new(&first[..], 4096).read_to_end(&mut partial);
                }
                Coding::Zstd => {
                    let mut decoder = zstd::stream::read::Decoder::new(&first[..]).unwrap();
                    let _ = decoder.read_to_end(&mut partial);
                }
            }
            assert_eq!(partial, b"data: one\n\n", "{coding:?}");
            assert_eq!(
                decode(coding, &pieces.concat()),
                b"data: one\n\ndata: two\n\n"
            );
        }
    }

    #[test]
    fn a_ready_upstream_is_not_flushed_per_piece() {
        let script: Vec<Option<&'static [u8]>> = (0..100).map(|_| Some(&b"abcdefgh"[..])).collect();
        let pieces = run(Coding::Gzip, script);
        // Everything came ready: one piece, at the end.
        assert_eq!(pieces.len(), 1);
        assert_eq!(decode(Coding::Gzip, &pieces[0]), b"abcdefgh".repeat(100));
    }

    #[test]
    fn an_empty_body_still_ends_the_stream_properly() {
        for coding in Coding::PREFERENCE {
            let pieces = run(coding, vec![]);
            assert_eq!(decode(coding, &pieces.concat()), b"", "{coding:?}");
        }
    }
}
