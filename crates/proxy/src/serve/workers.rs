//! Thread-per-core serving (`--workers N`): N threads, each with its own current-thread
//! runtime and its own listening sockets for HTTP and HTTPS, bound to the same addresses
//! with `SO_REUSEPORT` so the kernel spreads new connections over them (by a hash of the
//! connection's addresses, whatever a worker is busy with). A connection lives and dies on
//! the worker that accepted it, with that thread's upstream pools: no locks and no
//! cross-thread wake-ups on the request path. The routing snapshot stays one shared atomic
//! pointer; request metrics are sharded per worker ([`crate::runtime::shard`]) and summed
//! on scrape. Each worker also accepts on its copy of every Gateway socket
//! ([`crate::runtime::gateway_sockets`]).
//!
//! Where `SO_REUSEPORT` is refused, the workers share one socket through duplicated file
//! descriptors instead (every worker is woken for every connection, and the first to
//! accept wins).

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

use prometheus_client::metrics::counter::Counter;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::context::Shared;
use crate::front::listener::{self, Listening, Protocols, Transport};
use crate::runtime::gateway_sockets::NewSocket;
use crate::runtime::shutdown::Phases;

/// Period of a worker's [`timer_heartbeat`].
const HEARTBEAT: std::time::Duration = std::time::Duration::from_millis(100);

/// Keeps the worker's timer driver planning to wake up soon.
///
/// tokio wakes its own event loop through an eventfd (a `write`, then a spare
/// `epoll_wait` round) whenever a timer is registered that is due before the wake-up the
/// driver planned when it last went to sleep; with no timer due soon, that is the first
/// timeout every new connection or request registers. A tick every [`HEARTBEAT`] keeps the
/// planned wake-up near, so timeouts of seconds register without it: two system calls fewer
/// per connection, for ten wake-ups a second on an idle worker.
async fn timer_heartbeat() {
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
    }
}

/// The listening sockets of one worker.
#[derive(Debug)]
pub(crate) struct WorkerSockets {
    pub(crate) http: std::net::TcpListener,
    pub(crate) https: std::net::TcpListener,
}

/// Everything a worker thread needs, cloned per worker.
pub(crate) struct WorkerContext {
    pub(crate) shared: Arc<Shared>,
    pub(crate) protocols: Arc<Protocols>,
    pub(crate) tls: crate::front::tls::TlsConfigs,
    pub(crate) phases: Phases,
    pub(crate) connections: TaskTracker,
    /// Cancelled once draining is over: the worker's runtime then stops, dropping whatever
    /// is left on it.
    pub(crate) finished: CancellationToken,
    /// Pin worker `i` to the `i`-th allowed CPU.
    pub(crate) pin: bool,
}

/// A worker's own counters, registered per worker on the admin port.
pub(crate) struct WorkerCounters {
    /// `sluice_worker_connections_accepted_total{worker}`.
    pub(crate) accepted: Counter,
    /// `sluice_worker_requests_total{worker}`.
    pub(crate) requests: Counter,
}

/// Starts worker `index` on a thread of its own.
pub(crate) fn spawn(
    index: usize,
    sockets: WorkerSockets,
    gateway_sockets: tokio::sync::mpsc::UnboundedReceiver<NewSocket>,
    context: &WorkerContext,
    counters: WorkerCounters,
) -> io::Result<JoinHandle<()>> {
    let WorkerCounters { accepted, requests } = counters;
    let shared = Arc::clone(&context.shared);
    let protocols = Arc::clone(&context.protocols);
    let tls = context.tls.clone();
    let phases = context.phases.clone();
    let connections = context.connections.clone();
    let finished = context.finished.clone();
    let pin = context.pin;
    std::thread::Builder::new()
        .name(format!("sluice-worker-{index}"))
        .spawn(move || {
            if pin {
                pin_to_cpu(index);
            }
            crate::observe::metrics::set_worker_requests(requests);
            crate::runtime::shard::set_thread_shard(index);
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    warn!(worker = index, %error, "worker runtime failed to start");
                    return;
                }
            };
            runtime.block_on(async move {
                let listeners = (
                    sockets
                        .http
                        .set_nonblocking(true)
                        .and_then(|()| TcpListener::from_std(sockets.http)),
                    sockets
                        .https
                        .set_nonblocking(true)
                        .and_then(|()| TcpListener::from_std(sockets.https)),
                );
                let (Ok(http), Ok(https)) = listeners else {
                    warn!(
                        worker = index,
                        "worker could not take its listening sockets"
                    );
                    return;
                };
                let accept = |listening| {
                    listener::accept_loop(
                        listening,
                        Arc::clone(&shared),
                        Arc::clone(&protocols),
                        phases.clone(),
                        connections.clone(),
                        Some(accepted.clone()),
                    )
                };
                // Ends with the runtime.
                tokio::spawn(timer_heartbeat());
                tokio::join!(
                    accept(Listening::shared(http, Transport::Plain)),
                    accept(Listening::shared(https, Transport::Tls(tls.clone()))),
                    listener::accept_gateway_sockets(
                        gateway_sockets,
                        tls,
                        Arc::clone(&shared),
                        Arc::clone(&protocols),
                        phases.clone(),
                        connections.clone(),
                        Some(accepted.clone()),
                    )
                );
                // Connections accepted here run on this runtime: keep it going until the
                // drain is over.
                finished.cancelled().await;
            });
            debug!(worker = index, "worker stopped");
        })
}

/// Restricts the calling thread to the `index`-th CPU of those the process may use.
fn pin_to_cpu(index: usize) {
    // SAFETY: cpu_set_t is plain data; the calls only read and write the set we own.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) != 0 {
            return;
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &allowed))
            .collect();
        if cpus.is_empty() {
            return;
        }
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpus[index % cpus.len()], &mut one);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) != 0 {
            warn!(worker = index, "pinning the worker to a CPU failed");
        }
    }
}
