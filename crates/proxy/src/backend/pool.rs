//! Idle keep-alive connections to upstream endpoints, one pool per worker thread.
//!
//! A connection is checked out by the request that uses it and checked in by the response
//! body once the response has been read to its end, on whatever thread that happens. Being
//! thread-local, the pool needs no lock and no atomic; a worker thread reuses the
//! connections it last used (most recent first, as their TCP state is warmest).
//!
//! Idle connections are not polled, so one the upstream closed is found at checkout: its
//! socket reads ready (end of stream, or unsolicited bytes), which the runtime learnt from
//! epoll without a system call here, and it is dropped.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::net::TcpStream;

/// Idle connections kept per endpoint and thread; beyond that, finished ones are closed.
const MAX_IDLE_PER_ENDPOINT: usize = 256;

/// Largest read or write buffer kept with an idle connection.
const MAX_KEPT_BUFFER: usize = 16 * 1024;

/// How often a thread's pool is swept of connections idle past their timeout.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// An open upstream connection with its read buffer (which may hold bytes already read).
#[derive(Debug)]
pub(crate) struct Conn {
    /// The socket.
    pub(crate) stream: TcpStream,
    /// Bytes read but not consumed yet.
    pub(crate) buf: BytesMut,
    /// Scratch space for request heads, kept with the connection to save an allocation.
    pub(crate) wbuf: Vec<u8>,
    /// Whether it served a request before (a failure on it may just be a stale keep-alive).
    pub(crate) reused: bool,
    /// Responses read to their end on it so far.
    pub(crate) requests: u64,
    /// When it was opened.
    pub(crate) born: Instant,
}

impl Conn {
    /// A connection just opened.
    pub(crate) fn new(stream: TcpStream, buf: BytesMut, wbuf: Vec<u8>) -> Conn {
        Conn {
            stream,
            buf,
            wbuf,
            reused: false,
            requests: 0,
            born: Instant::now(),
        }
    }
}

/// Identifies a proxy's pool, so two proxies in one process (tests) never share sockets
/// that belong to different runtimes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct PoolId(u64);

impl PoolId {
    /// A fresh id.
    pub(crate) fn next() -> PoolId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        PoolId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// The pool settings a proxy hands to checkout and checkin.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PoolConfig {
    /// Whose connections.
    pub(crate) id: PoolId,
    /// Idle connections older than this are closed (nginx `keepalive_timeout` in an
    /// upstream block, ingress-nginx `upstream-keepalive-timeout`); zero: none is kept.
    pub(crate) idle_timeout: Duration,
    /// A connection is closed after this many responses (`upstream-keepalive-requests`).
    pub(crate) max_requests: Option<u64>,
    /// A connection is not reused once this old (`upstream-keepalive-time`).
    pub(crate) max_age: Option<Duration>,
    /// Idle connections kept per endpoint and thread (`upstream-keepalive-connections`).
    pub(crate) max_idle: usize,
}

impl PoolConfig {
    /// A pool `id` with the flags' idle timeout and no other limit.
    pub(crate) fn new(id: PoolId, idle_timeout: Duration) -> PoolConfig {
        PoolConfig {
            id,
            idle_timeout,
            max_requests: None,
            max_age: None,
            max_idle: MAX_IDLE_PER_ENDPOINT,
        }
    }

    /// Whether `conn` may not carry another request: too many served, or too old.
    fn retired(&self, conn_requests: u64, born: Instant, now: Instant) -> bool {
        self.max_requests.is_some_and(|max| conn_requests >= max)
            || self
                .max_age
                .is_some_and(|age| now.duration_since(born) >= age)
    }
}

struct Idle {
    stream: TcpStream,
    /// The read buffer, kept so its allocation can be reused once the bytes handed out of
    /// it are gone.
    buf: BytesMut,
    wbuf: Vec<u8>,
    since: Instant,
    requests: u64,
    born: Instant,
}

#[derive(Default)]
struct ThreadPool {
    endpoints: HashMap<(PoolId, SocketAddr), Vec<Idle>, BuildHasherDefault<Fnv>>,
    last_sweep: Option<Instant>,
}

/// FNV-1a: the keys are this process's own addresses, not attacker-chosen, so a fast
/// non-keyed hash is safe here and twice per request it matters.
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = hash;
    }
}

thread_local! {
    static POOL: RefCell<ThreadPool> = RefCell::new(ThreadPool::default());
}

/// An idle connection to `addr`, if this thread has a live one.
pub(crate) fn checkout(config: PoolConfig, addr: SocketAddr) -> Option<Conn> {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let idle = pool.endpoints.get_mut(&(config.id, addr))?;
        let now = Instant::now();
        while let Some(conn) = idle.pop() {
            if now.duration_since(conn.since) >= config.idle_timeout
                || config.retired(conn.requests, conn.born, now)
                || !looks_open(&conn.stream)
            {
                continue;
            }
            return Some(Conn {
                stream: conn.stream,
                buf: conn.buf,
                wbuf: conn.wbuf,
                reused: true,
                requests: conn.requests,
                born: conn.born,
            });
        }
        None
    })
}

/// Returns a connection whose last response was read to its end.
pub(crate) fn checkin(config: PoolConfig, addr: SocketAddr, mut conn: Conn) {
    if !conn.buf.is_empty() {
        // Bytes beyond the response: the upstream is confused; do not reuse.
        return;
    }
    conn.requests += 1;
    if config.idle_timeout.is_zero() || config.retired(conn.requests, conn.born, Instant::now()) {
        return;
    }
    // During thread teardown the pool may be gone; the connection just closes.
    let _ = POOL.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        let now = Instant::now();
        if pool
            .last_sweep
            .is_none_or(|at| now.duration_since(at) >= SWEEP_EVERY)
        {
            pool.last_sweep = Some(now);
            let timeout = config.idle_timeout;
            pool.endpoints.retain(|_, idle| {
                idle.retain(|c| now.duration_since(c.since) < timeout);
                !idle.is_empty()
            });
        }
        let idle = pool.endpoints.entry((config.id, addr)).or_default();
        if idle.len() < config.max_idle {
            // Buffers grown by a large transfer are not kept: hundreds of idle connections
            // must not pin 64 KiB each.
            let Conn {
                stream,
                mut buf,
                mut wbuf,
                requests,
                born,
                ..
            } = conn;
            if buf.capacity() > MAX_KEPT_BUFFER {
                buf = BytesMut::new();
            }
            if wbuf.capacity() > MAX_KEPT_BUFFER {
                wbuf = Vec::new();
            }
            idle.push(Idle {
                stream,
                buf,
                wbuf,
                since: now,
                requests,
                born,
            });
        }
    });
}

/// Whether an idle connection still looks usable: not readable. An idle keep-alive
/// connection has nothing to say; if it reads ready, the peer closed it (or misbehaves).
fn looks_open(stream: &TcpStream) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    matches!(stream.poll_read_ready(&mut cx), Poll::Pending)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    fn fresh_config() -> PoolConfig {
        PoolConfig::new(PoolId::next(), Duration::from_secs(60))
    }

    async fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (client.unwrap(), accepted.unwrap().0)
    }

    fn conn(stream: TcpStream) -> Conn {
        Conn::new(stream, BytesMut::new(), Vec::new())
    }

    #[tokio::test]
    async fn reuses_live_and_drops_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = fresh_config();
        assert!(checkout(config, addr).is_none());

        let (live, _live_peer) = pair(&listener).await;
        let (dead, dead_peer) = pair(&listener).await;
        checkin(config, addr, conn(live));
        checkin(config, addr, conn(dead));
        drop(dead_peer);
        // Let the runtime see the close through epoll.
        tokio::time::sleep(Duration::from_millis(50)).await;

        let got = checkout(config, addr).expect("the live connection");
        assert!(got.reused);
        assert!(
            checkout(config, addr).is_none(),
            "the closed one was dropped"
        );

        // A connection with unread bytes waiting is not reused either.
        let (chatty, mut chatty_peer) = pair(&listener).await;
        checkin(config, addr, conn(chatty));
        chatty_peer.write_all(b"surprise").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(checkout(config, addr).is_none());

        // Pools of different proxies do not mix.
        let other = fresh_config();
        checkin(config, addr, got);
        assert!(checkout(other, addr).is_none());
        assert!(checkout(config, addr).is_some());
    }

    #[tokio::test]
    async fn large_buffers_are_not_kept() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = fresh_config();
        let (stream, _peer) = pair(&listener).await;
        let mut big = conn(stream);
        big.buf.reserve(1 << 20);
        big.wbuf.reserve(1 << 20);
        checkin(config, addr, big);
        let back = checkout(config, addr).expect("reused");
        assert!(back.buf.capacity() <= MAX_KEPT_BUFFER);
        assert!(back.wbuf.capacity() <= MAX_KEPT_BUFFER);

        let (stream, _peer) = pair(&listener).await;
        let mut small = conn(stream);
        small.wbuf.reserve(512);
        let kept = small.wbuf.capacity();
        checkin(config, addr, small);
        let back = checkout(config, addr).expect("reused");
        assert_eq!(
            back.wbuf.capacity(),
            kept,
            "a small buffer is kept for reuse"
        );
    }

    #[tokio::test]
    async fn idle_timeout_expires() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = PoolConfig::new(PoolId::next(), Duration::from_millis(20));
        let (stream, _peer) = pair(&listener).await;
        checkin(config, addr, conn(stream));
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(checkout(config, addr).is_none());
    }

    /// nginx's upstream `keepalive_requests` and `keepalive_time` (ingress-nginx
    /// `upstream-keepalive-requests`, `-time`) and `keepalive` (`-connections`).
    #[tokio::test]
    async fn connections_retire_after_their_requests_age_or_count() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut config = fresh_config();
        config.max_requests = Some(2);
        let (stream, _peer) = pair(&listener).await;
        checkin(config, addr, conn(stream));
        let again = checkout(config, addr).expect("one response: kept");
        checkin(config, addr, again);
        assert!(checkout(config, addr).is_none(), "two responses: closed");

        let mut config = fresh_config();
        config.max_age = Some(Duration::from_millis(30));
        let (stream, _peer) = pair(&listener).await;
        checkin(config, addr, conn(stream));
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(checkout(config, addr).is_none(), "too old to reuse");

        let mut config = fresh_config();
        config.max_idle = 1;
        let (one, _p1) = pair(&listener).await;
        let (two, _p2) = pair(&listener).await;
        checkin(config, addr, conn(one));
        checkin(config, addr, conn(two));
        assert!(checkout(config, addr).is_some());
        assert!(checkout(config, addr).is_none(), "only one idle kept");

        let mut config = fresh_config();
        config.idle_timeout = Duration::ZERO;
        let (stream, _peer) = pair(&listener).await;
        checkin(config, addr, conn(stream));
        assert!(
            checkout(config, addr).is_none(),
            "keep-alive off: none kept"
        );
    }
}
