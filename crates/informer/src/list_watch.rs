//! Sources of objects for a reflector (client-go `ListerWatcher`).
//!
//! A [`ListWatch`] produces a never-ending stream of watcher events: an `Init`,
//! `InitApply` for every object of a (re)list, `InitDone`, then `Apply`/`Delete` as things
//! change, and a new `Init` whenever the source has to relist. This is exactly the shape of
//! [`kube::runtime::watcher`], which does list+watch, resume from the last resourceVersion,
//! relist on 410 Gone and bookmarks; [`ApiListWatch`] wraps it with kube's default backoff.
//! Other sources (a directory of YAML manifests, a test feeding events by hand with
//! [`ChannelListWatch`]) only have to produce the same events.

use std::{fmt::Debug, sync::Arc};

use futures::{StreamExt, stream::BoxStream};
use kube::{
    Api, Client, Resource,
    api::{ApiResource, DynamicObject},
    runtime::{WatchStreamExt, watcher},
};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

/// The watcher event type every source produces.
pub type Event<K> = watcher::Event<K>;

/// Errors a source reports; the reflector logs them and keeps reading the stream.
#[derive(Debug, thiserror::Error)]
pub enum ListWatchError {
    /// An error from kube's watcher (list failed, watch failed, ...). The watcher recovers by
    /// itself on the next poll (after backoff).
    #[error(transparent)]
    Watcher(#[from] watcher::Error),
    /// An error from another kind of source.
    #[error("{0}")]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// A boxed stream of source events.
pub type EventStream<K> = BoxStream<'static, Result<Event<K>, ListWatchError>>;

/// A source of objects of type `K`: list, then watch, as one stream of watcher events.
///
/// Implementations must emit `Init` .. `InitApply`* .. `InitDone` for every (re)list, so that
/// the reflector can detect objects deleted while it was not watching.
pub trait ListWatch<K>: Send + Sync + 'static {
    /// Starts listing and watching. Called once per informer run.
    fn stream(&self) -> EventStream<K>;

    /// A short description for logs (e.g. the resource URL and selectors).
    fn describe(&self) -> String {
        std::any::type_name::<K>().to_string()
    }
}

/// Server-side length of one watch request (`timeoutSeconds`). Shorter than kube's 290 s so
/// that a client whose read timeout is a little longer (the controller uses 75 s) notices a
/// connection that died without a word (a vanished node, a dropped NAT entry) within about a
/// minute instead of five, while a healthy watch costs one cheap re-watch a minute.
pub const WATCH_TIMEOUT_SECS: u32 = 60;

/// Label and field selectors narrowing what a source lists and watches.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ListOptions {
    /// Label selector, e.g. `app=web,tier in (a,b)`.
    pub label_selector: Option<String>,
    /// Field selector, e.g. `spec.nodeName=node1`.
    pub field_selector: Option<String>,
}

impl ListOptions {
    /// Sets the label selector.
    #[must_use]
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_string());
        self
    }

    /// Sets the field selector.
    #[must_use]
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_string());
        self
    }

    /// The equivalent kube watcher configuration. Watches ask the API server to end them
    /// after [`WATCH_TIMEOUT_SECS`]; kube then resumes from the last resourceVersion.
    pub fn watcher_config(&self) -> watcher::Config {
        let mut cfg = watcher::Config::default().timeout(WATCH_TIMEOUT_SECS);
        if let Some(l) = &self.label_selector {
            cfg = cfg.labels(l);
        }
        if let Some(f) = &self.field_selector {
            cfg = cfg.fields(f);
        }
        cfg
    }
}

/// A [`ListWatch`] over the API server through a `kube::Api<K>`, typed (`Api<Pod>`) or dynamic
/// (`Api<DynamicObject>`). It is [`kube::runtime::watcher`] plus its default backoff.
pub struct ApiListWatch<K> {
    api: Api<K>,
    config: watcher::Config,
}

impl<K: Clone> Clone for ApiListWatch<K> {
    fn clone(&self) -> Self {
        Self {
            api: self.api.clone(),
            config: self.config.clone(),
        }
    }
}

impl<K> ApiListWatch<K> {
    /// Lists and watches through `api` with the given watcher configuration.
    pub fn new(api: Api<K>, config: watcher::Config) -> Self {
        Self { api, config }
    }

    /// Lists and watches through `api` with the given selectors.
    pub fn with_options(api: Api<K>, options: &ListOptions) -> Self {
        Self::new(api, options.watcher_config())
    }

    /// The underlying API handle.
    pub fn api(&self) -> &Api<K> {
        &self.api
    }
}

impl ApiListWatch<DynamicObject> {
    /// A dynamic source for the resource `ar` (from discovery, see [`crate::discovery`]),
    /// in namespace `ns` or in all namespaces.
    pub fn dynamic(
        client: Client,
        ar: &ApiResource,
        ns: Option<&str>,
        options: &ListOptions,
    ) -> Self {
        let api = match ns {
            Some(ns) => Api::namespaced_with(client, ns, ar),
            None => Api::all_with(client, ar),
        };
        Self::with_options(api, options)
    }
}

impl<K> ListWatch<K> for ApiListWatch<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn stream(&self) -> EventStream<K> {
        watcher(self.api.clone(), self.config.clone())
            .default_backoff()
            .map(|r| r.map_err(ListWatchError::from))
            .boxed()
    }

    fn describe(&self) -> String {
        let mut s = self.api.resource_url().to_string();
        if let Some(l) = &self.config.label_selector {
            s.push_str(&format!(" labels={l}"));
        }
        if let Some(f) = &self.config.field_selector {
            s.push_str(&format!(" fields={f}"));
        }
        s
    }
}

/// A source fed by hand through a channel: handy for tests, and a template for sources that
/// are not an API server. Create it with [`ChannelListWatch::new`], which also returns the
/// sender; [`ListWatch::stream`] can be called once.
pub struct ChannelListWatch<K> {
    rx: Mutex<Option<ChannelReceiver<K>>>,
}

type ChannelReceiver<K> = mpsc::UnboundedReceiver<Result<Event<K>, ListWatchError>>;

/// The sending half of a [`ChannelListWatch`].
pub type ChannelSender<K> = mpsc::UnboundedSender<Result<Event<K>, ListWatchError>>;

impl<K: Send + 'static> ChannelListWatch<K> {
    /// A source and the sender that feeds it.
    pub fn new() -> (Arc<Self>, ChannelSender<K>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Arc::new(Self {
                rx: Mutex::new(Some(rx)),
            }),
            tx,
        )
    }
}

impl<K: Send + 'static> ListWatch<K> for ChannelListWatch<K> {
    fn stream(&self) -> EventStream<K> {
        match self.rx.lock().take() {
            Some(rx) => {
                futures::stream::unfold(
                    rx,
                    |mut rx| async move { rx.recv().await.map(|ev| (ev, rx)) },
                )
                .boxed()
            }
            None => futures::stream::pending().boxed(),
        }
    }

    fn describe(&self) -> String {
        format!("channel<{}>", std::any::type_name::<K>())
    }
}

impl<K, L: ListWatch<K> + ?Sized> ListWatch<K> for Arc<L> {
    fn stream(&self) -> EventStream<K> {
        (**self).stream()
    }

    fn describe(&self) -> String {
        (**self).describe()
    }
}
