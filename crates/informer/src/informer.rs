//! One watch, a local indexed cache, many event handlers (client-go `SharedIndexInformer`).
//!
//! ```text
//! ListWatch --events--> Reflector --deltas--> DeltaFifo --pop--> store update + notifications
//!                                                                  |--> handler 1 (own buffer + thread)
//!                                                                  |--> handler 2 (own buffer + thread)
//! ```
//!
//! Each handler gets its own unbounded buffer drained by its own thread, so a slow handler
//! only delays itself. Handlers added while the informer runs first receive the current store
//! content as adds. Notifications carry `Arc<K>`s shared with the store: objects are never
//! cloned per handler.

use std::{
    fmt,
    panic::AssertUnwindSafe,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use kube::Resource;
use parking_lot::{Mutex, RwLock};
use tokio::{sync::mpsc, sync::watch, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::{
    delta_fifo::{DeletedObject, DeltaFifo, DeltaObject, DeltaType},
    list_watch::ListWatch,
    reflector::{Reflector, ReflectorStats},
    store::{Store, StoreWriter},
    transform::{AlreadyStarted, TransformFn},
};

/// Receives notifications from an informer (client-go `ResourceEventHandler`).
///
/// Methods run on the handler's own thread, one notification at a time, in order. They may
/// block; only this handler waits. A tokio runtime context is entered, so `tokio::spawn` works.
pub trait ResourceEventHandler<K>: Send + Sync + 'static {
    /// An object appeared. `is_in_initial_list` is true for objects of the initial list (and
    /// for the replay of the store to a handler added late).
    fn on_add(&self, obj: Arc<K>, is_in_initial_list: bool) {
        let _ = (obj, is_in_initial_list);
    }

    /// An object changed from `old` to `new`. On a periodic resync `old` and `new` are the
    /// same object (`Arc::ptr_eq`).
    fn on_update(&self, old: Arc<K>, new: Arc<K>) {
        let _ = (old, new);
    }

    /// An object was deleted: the final object, or a tombstone
    /// ([`crate::DeletedFinalStateUnknown`]) if the deletion was detected on a relist.
    fn on_delete(&self, obj: DeletedObject<K>) {
        let _ = obj;
    }
}

type AddFn<K> = Box<dyn Fn(Arc<K>, bool) + Send + Sync>;
type UpdateFn<K> = Box<dyn Fn(Arc<K>, Arc<K>) + Send + Sync>;
type DeleteFn<K> = Box<dyn Fn(DeletedObject<K>) + Send + Sync>;

/// A handler made of optional closures (client-go `ResourceEventHandlerFuncs`).
pub struct HandlerFuncs<K> {
    add: Option<AddFn<K>>,
    update: Option<UpdateFn<K>>,
    delete: Option<DeleteFn<K>>,
}

impl<K> Default for HandlerFuncs<K> {
    fn default() -> Self {
        Self {
            add: None,
            update: None,
            delete: None,
        }
    }
}

impl<K> HandlerFuncs<K> {
    /// A handler that ignores everything until closures are set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the `on_add` closure.
    #[must_use]
    pub fn on_add(mut self, f: impl Fn(Arc<K>, bool) + Send + Sync + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }

    /// Sets the `on_update` closure.
    #[must_use]
    pub fn on_update(mut self, f: impl Fn(Arc<K>, Arc<K>) + Send + Sync + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    /// Sets the `on_delete` closure.
    #[must_use]
    pub fn on_delete(mut self, f: impl Fn(DeletedObject<K>) + Send + Sync + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K: Send + Sync + 'static> ResourceEventHandler<K> for HandlerFuncs<K> {
    fn on_add(&self, obj: Arc<K>, initial: bool) {
        if let Some(f) = &self.add {
            f(obj, initial);
        }
    }

    fn on_update(&self, old: Arc<K>, new: Arc<K>) {
        if let Some(f) = &self.update {
            f(old, new);
        }
    }

    fn on_delete(&self, obj: DeletedObject<K>) {
        if let Some(f) = &self.delete {
            f(obj);
        }
    }
}

enum Notification<K> {
    Add(Arc<K>, bool),
    Update(Arc<K>, Arc<K>),
    Delete(DeletedObject<K>),
    Synced,
}

#[derive(Debug, Default)]
struct ListenerState {
    synced: AtomicBool,
    delivered: AtomicU64,
    queued: AtomicU64,
}

struct Listener<K> {
    id: u64,
    tx: mpsc::UnboundedSender<Notification<K>>,
    state: Arc<ListenerState>,
}

impl<K: Send + Sync + 'static> Listener<K> {
    fn spawn(id: u64, handler: Arc<dyn ResourceEventHandler<K>>, name: &str) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Notification<K>>();
        let state = Arc::new(ListenerState::default());
        let st = state.clone();
        let rt = tokio::runtime::Handle::try_current().ok();
        let thread_name = format!("handler-{id}-{name}");
        let spawned = std::thread::Builder::new()
            .name(thread_name.chars().take(15).collect())
            .spawn(move || {
                let _guard = rt.as_ref().map(|h| h.enter());
                while let Some(n) = rx.blocking_recv() {
                    let res = std::panic::catch_unwind(AssertUnwindSafe(|| match n {
                        Notification::Add(o, initial) => handler.on_add(o, initial),
                        Notification::Update(old, new) => handler.on_update(old, new),
                        Notification::Delete(o) => handler.on_delete(o),
                        Notification::Synced => st.synced.store(true, Ordering::Release),
                    }));
                    if res.is_err() {
                        tracing::error!(handler = id, "event handler panicked; continuing");
                    }
                    st.delivered.fetch_add(1, Ordering::AcqRel);
                }
            });
        if let Err(err) = spawned {
            tracing::error!(error = %err, "cannot start an event handler thread");
        }
        Self { id, tx, state }
    }

    fn send(&self, n: Notification<K>) {
        self.state.queued.fetch_add(1, Ordering::AcqRel);
        // A send error means the handler thread is gone; nothing to do.
        let _ = self.tx.send(n);
    }
}

/// Handle on a registered handler (client-go `ResourceEventHandlerRegistration`).
#[derive(Debug, Clone)]
pub struct HandlerRegistration {
    id: u64,
    state: Arc<ListenerState>,
}

impl HandlerRegistration {
    /// Whether this handler has processed every notification of the initial list (or, for a
    /// handler added late, of the replayed store content).
    pub fn has_synced(&self) -> bool {
        self.state.synced.load(Ordering::Acquire)
    }

    /// Whether this handler has processed everything sent to it so far.
    pub fn is_idle(&self) -> bool {
        self.state.delivered.load(Ordering::Acquire) >= self.state.queued.load(Ordering::Acquire)
    }

    /// Notifications queued for this handler and not yet processed.
    pub fn backlog(&self) -> u64 {
        self.state
            .queued
            .load(Ordering::Acquire)
            .saturating_sub(self.state.delivered.load(Ordering::Acquire))
    }
}

struct Shared<K> {
    handlers: RwLock<Vec<Listener<K>>>,
    synced: AtomicBool,
    synced_tx: watch::Sender<bool>,
    next_id: AtomicU64,
}

impl<K: Send + Sync + 'static> Shared<K> {
    fn mark_synced(&self) {
        let handlers = self.handlers.read();
        self.synced.store(true, Ordering::Release);
        for l in handlers.iter() {
            l.send(Notification::Synced);
        }
        self.synced_tx.send_replace(true);
    }
}

struct RunState<K> {
    started: bool,
    tasks: Vec<JoinHandle<()>>,
    keep_managed_fields: bool,
    transform: Option<TransformFn<K>>,
}

impl<K> Default for RunState<K> {
    fn default() -> Self {
        Self {
            started: false,
            tasks: Vec::new(),
            keep_managed_fields: false,
            transform: None,
        }
    }
}

struct Inner<K> {
    name: String,
    source: Arc<dyn ListWatch<K>>,
    /// The only writer of the cache; consumers get read-only [`Store`]s.
    store: StoreWriter<K>,
    fifo: Arc<DeltaFifo<K>>,
    shared: Arc<Shared<K>>,
    resync: Option<Duration>,
    run: Mutex<RunState<K>>,
    shutdown: CancellationToken,
    stats: Arc<ReflectorStats>,
}

/// A shared informer with an indexed store (client-go `SharedIndexInformer`). Cheap to clone.
pub struct SharedIndexInformer<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for SharedIndexInformer<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K> fmt::Debug for SharedIndexInformer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedIndexInformer")
            .field("source", &self.inner.name)
            .field("synced", &self.inner.shared.synced.load(Ordering::Relaxed))
            .finish()
    }
}

fn same_version<K: Resource>(a: &K, b: &K) -> bool {
    match (&a.meta().resource_version, &b.meta().resource_version) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

impl<K: Resource + Send + Sync + 'static> SharedIndexInformer<K> {
    /// An informer over `source`, with an optional resync period (`None`: never resync).
    /// Call [`SharedIndexInformer::start`] to run it.
    pub fn new(source: impl ListWatch<K>, resync: Option<Duration>) -> Self {
        Self::with_store(source, resync, StoreWriter::new())
    }

    /// Like [`SharedIndexInformer::new`] but with a store prepared by the caller (extra
    /// indexes, or content pre-warmed from an earlier run: objects that no longer exist are
    /// reported deleted, as tombstones, after the first list). The informer takes the
    /// writer: from now on only it changes the content.
    pub fn with_store(
        source: impl ListWatch<K>,
        resync: Option<Duration>,
        store: StoreWriter<K>,
    ) -> Self {
        let (synced_tx, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            handlers: RwLock::new(Vec::new()),
            synced: AtomicBool::new(false),
            synced_tx,
            next_id: AtomicU64::new(1),
        });
        let hook_shared = shared.clone();
        let fifo = Arc::new(
            DeltaFifo::new(Some(store.as_reader()))
                .with_synced_hook(move || hook_shared.mark_synced()),
        );
        let name = source.describe();
        Self {
            inner: Arc::new(Inner {
                name,
                source: Arc::new(source),
                store,
                fifo,
                shared,
                resync,
                run: Mutex::new(RunState::default()),
                shutdown: CancellationToken::new(),
                stats: Arc::default(),
            }),
        }
    }

    /// The informer's store, with its indexes, read-only (client-go `GetIndexer`/`GetStore`):
    /// only the informer writes it.
    pub fn store(&self) -> &Store<K> {
        &self.inner.store
    }

    /// Adds a named index (client-go `AddIndexers`); existing content is indexed at once, so
    /// this works before [`SharedIndexInformer::start`] as well as after.
    pub fn add_index(
        &self,
        name: &str,
        f: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) -> Result<(), crate::store::StoreError> {
        self.inner.store.add_index(name, f)
    }

    /// A typed lister reading from this informer's store.
    pub fn lister(&self) -> crate::lister::Lister<K> {
        crate::lister::Lister::new(self.inner.store.as_reader())
    }

    /// Registers a handler. On a started informer the handler first receives the store's
    /// content as adds (before start there is nothing to replay: a store seeded with
    /// `with_store` is reported on by the first list). The handler runs on its own thread
    /// with its own unbounded buffer.
    pub fn add_event_handler(&self, handler: impl ResourceEventHandler<K>) -> HandlerRegistration {
        self.add_event_handler_arc(Arc::new(handler))
    }

    /// [`SharedIndexInformer::add_event_handler`] for a handler already in an `Arc`.
    pub fn add_event_handler_arc(
        &self,
        handler: Arc<dyn ResourceEventHandler<K>>,
    ) -> HandlerRegistration {
        let shared = &self.inner.shared;
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let listener = Listener::spawn(id, handler, &self.inner.name);
        let reg = HandlerRegistration {
            id,
            state: listener.state.clone(),
        };
        // Holding the write lock blocks delta processing: nothing changes between the replay
        // of the store and the registration.
        let mut handlers = shared.handlers.write();
        // As client-go: only a running informer replays its store. Before start, the store
        // holds at most objects seeded by the caller (`with_store`); the first list reports
        // on those as updates or deletions, and a replayed add would double them.
        if self.is_started() {
            for obj in self.inner.store.list() {
                listener.send(Notification::Add(obj, true));
            }
        }
        if shared.synced.load(Ordering::Acquire) {
            listener.send(Notification::Synced);
        }
        handlers.push(listener);
        reg
    }

    /// Unregisters a handler; its thread ends after draining its buffer.
    pub fn remove_event_handler(&self, reg: &HandlerRegistration) {
        self.inner
            .shared
            .handlers
            .write()
            .retain(|l| l.id != reg.id);
    }

    /// Whether the first list has been processed into the store (client-go `HasSynced`).
    pub fn has_synced(&self) -> bool {
        self.inner.shared.synced.load(Ordering::Acquire)
    }

    /// Waits until [`SharedIndexInformer::has_synced`], at most `timeout`; returns whether it did.
    pub async fn wait_for_sync(&self, timeout: Duration) -> bool {
        let mut rx = self.inner.shared.synced_tx.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|s| *s))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// List/watch counters (lists done, watch events, errors).
    pub fn stats(&self) -> Arc<ReflectorStats> {
        self.inner.stats.clone()
    }

    /// A description of the source (resource URL and selectors).
    pub fn describe(&self) -> &str {
        &self.inner.name
    }

    /// Sets a transform applied to every object before it enters the cache (client-go
    /// `SetTransform`): handlers, the store and listers only see what it returns. It runs
    /// after the default stripping of `metadata.managedFields`. Only before
    /// [`SharedIndexInformer::start`]; the informer is shared, so the transform applies to every
    /// consumer.
    pub fn set_transform(
        &self,
        f: impl Fn(K) -> K + Send + Sync + 'static,
    ) -> Result<(), AlreadyStarted> {
        let mut run = self.inner.run.lock();
        if run.started {
            return Err(AlreadyStarted);
        }
        run.transform = Some(Arc::new(f));
        Ok(())
    }

    /// Keeps `metadata.managedFields` in cached objects (stripped by default, see
    /// [`crate::transform`]). Only before [`SharedIndexInformer::start`].
    pub fn keep_managed_fields(&self) -> Result<(), AlreadyStarted> {
        let mut run = self.inner.run.lock();
        if run.started {
            return Err(AlreadyStarted);
        }
        run.keep_managed_fields = true;
        Ok(())
    }

    /// Whether [`SharedIndexInformer::start`] was called.
    pub fn is_started(&self) -> bool {
        self.inner.run.lock().started
    }

    /// Whether the informer was shut down.
    pub fn is_stopped(&self) -> bool {
        self.inner.shutdown.is_cancelled()
    }

    /// Starts listing, watching and dispatching on the current tokio runtime. Idempotent.
    ///
    /// # Panics
    /// When called outside a tokio runtime.
    pub fn start(&self) {
        let mut run = self.inner.run.lock();
        if run.started || self.inner.shutdown.is_cancelled() {
            return;
        }
        run.started = true;

        // Reflector: source events -> (transform) -> deltas.
        let inner = self.inner.clone();
        let (keep, transform) = (run.keep_managed_fields, run.transform.clone());
        run.tasks.push(tokio::spawn(async move {
            let reflector = Reflector::new(inner.fifo.clone())
                .named(inner.name.clone())
                .with_stats(inner.stats.clone())
                .with_transform(keep, transform);
            reflector
                .run(inner.source.as_ref(), inner.shutdown.clone())
                .await;
            inner.fifo.close();
        }));

        // Processor: deltas -> store + notifications.
        let inner = self.inner.clone();
        run.tasks.push(tokio::spawn(async move {
            let shared = inner.shared.clone();
            while inner
                .fifo
                .pop(|key, deltas| process_deltas(&inner.store, &shared, key, deltas))
                .await
                .is_some()
            {}
            // Dropping the listeners ends the handler threads once they drain their buffers.
            shared.handlers.write().clear();
        }));

        // Periodic resync.
        if let Some(period) = self.inner.resync.filter(|p| !p.is_zero()) {
            let inner = self.inner.clone();
            run.tasks.push(tokio::spawn(async move {
                let mut tick =
                    tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                loop {
                    tokio::select! {
                        _ = inner.shutdown.cancelled() => break,
                        _ = tick.tick() => {
                            if inner.shared.synced.load(Ordering::Acquire) {
                                inner.fifo.resync();
                            }
                        }
                    }
                }
            }));
        }
    }

    /// Starts the informer and waits until it is shut down.
    pub async fn run(&self) {
        self.start();
        self.inner.shutdown.cancelled().await;
        self.join().await;
    }

    /// Stops watching and dispatching; handlers finish what is already in their buffers.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.fifo.close();
        self.join().await;
        self.inner.shared.handlers.write().clear();
    }

    async fn join(&self) {
        let tasks = std::mem::take(&mut self.inner.run.lock().tasks);
        for t in tasks {
            let _ = t.await;
        }
    }
}

/// client-go `sharedIndexInformer.HandleDeltas`: apply deltas to the store, notify handlers.
fn process_deltas<K: Resource + Send + Sync + 'static>(
    store: &StoreWriter<K>,
    shared: &Shared<K>,
    key: String,
    deltas: Vec<crate::delta_fifo::Delta<K>>,
) {
    let handlers = shared.handlers.read();
    let initial = !shared.synced.load(Ordering::Acquire);
    let notify = |n: &dyn Fn() -> Notification<K>| {
        for l in handlers.iter() {
            l.send(n());
        }
    };
    for delta in deltas {
        match delta.kind {
            DeltaType::Added | DeltaType::Updated | DeltaType::Replaced | DeltaType::Sync => {
                let DeltaObject::Object(new) = delta.object else {
                    // Tombstones only come with Deleted.
                    continue;
                };
                match store.get_by_key(&key) {
                    Some(old) => {
                        if delta.kind == DeltaType::Sync {
                            notify(&|| Notification::Update(old.clone(), old.clone()));
                        } else if delta.kind == DeltaType::Replaced
                            && same_version(old.as_ref(), new.as_ref())
                        {
                            // Unchanged on relist: keep the stored object, say nothing.
                        } else {
                            store.insert_with_key(key.clone(), new.clone());
                            notify(&|| Notification::Update(old.clone(), new.clone()));
                        }
                    }
                    None => {
                        store.insert_with_key(key.clone(), new.clone());
                        notify(&|| Notification::Add(new.clone(), initial));
                    }
                }
            }
            DeltaType::Deleted => {
                store.delete_by_key(&key);
                let obj = delta.object;
                notify(&|| Notification::Delete(obj.clone()));
            }
        }
    }
}
