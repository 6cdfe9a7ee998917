//! The control plane's own runtime, apart from the proxy's workers.
//!
//! Everything that reads control-plane input runs here: the manifest scanner (file reads and
//! YAML parsing), the informers, the rebuild loop (route compiling), status, Events and
//! leader election. Those steps take time proportional to their input and block while they
//! run; on the proxy's runtime a huge manifest or API object would stall every request on
//! the worker it landed on. Here it can only delay the next table: traffic keeps flowing on
//! the last one, which reaches the proxy through [`sluice_proxy::TableHandle::update`]
//! (an atomic swap, callable from any thread).
//!
//! One worker thread is enough: the work is a queue of rebuilds, scans and API calls, not
//! parallel, and a second thread would compete with the proxy's workers for the cores.

use anyhow::Context;
use std::future::Future;
use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

/// Name of the control plane's threads (visible in `top -H` and in panics).
pub const THREAD_NAME: &str = "sluice-control";

/// A tokio runtime with one worker thread named [`THREAD_NAME`], for the control plane.
///
/// Dropping it stops whatever still runs on it without waiting, so it may be dropped from
/// inside another runtime (a plain `Runtime` would panic there).
pub struct ControlRuntime {
    runtime: Option<Runtime>,
}

impl ControlRuntime {
    /// Starts the runtime and its thread.
    pub fn new() -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(THREAD_NAME)
            .enable_all()
            .build()
            .context("starting the control-plane runtime")?;
        Ok(ControlRuntime {
            runtime: Some(runtime),
        })
    }

    /// The runtime's handle.
    pub fn handle(&self) -> &Handle {
        match &self.runtime {
            Some(rt) => rt.handle(),
            // Only `drop` takes the runtime out.
            None => unreachable!("control runtime used after drop"),
        }
    }

    /// Spawns `task` on the control plane.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle().spawn(task)
    }

    /// Runs `task` on the control plane and waits for its result from any runtime. A panic
    /// in `task` becomes an error.
    pub async fn run<F>(&self, task: F) -> anyhow::Result<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.spawn(task)
            .await
            .map_err(|e| anyhow::anyhow!("control-plane task failed: {e}"))
    }
}

impl Drop for ControlRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[tokio::test]
    async fn runs_on_its_own_named_thread_and_drops_inside_a_runtime() {
        let control = ControlRuntime::new().unwrap();
        let name = control
            .run(async { std::thread::current().name().map(str::to_string) })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some(THREAD_NAME));
        // A blocked control thread does not block this runtime.
        let blocked = control.spawn(async { std::thread::sleep(Duration::from_millis(1000)) });
        let started = Instant::now();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(started.elapsed() < Duration::from_millis(500));
        blocked.await.unwrap();
        drop(control); // must not panic inside this async context
    }
}
