//! Child processes that can never outlive the test process.
//!
//! Every child is forked from one long-lived thread with `PR_SET_PDEATHSIG = SIGKILL`: Linux
//! delivers that signal when the *thread* that forked the child exits, so forking from a
//! tokio worker (which dies with its test's runtime) would kill a shared control plane early,
//! while forking from a thread that lives as long as the process means that a panicking,
//! aborted or SIGKILLed test binary still takes its children with it. Clean exits also run
//! the hooks registered with [`at_exit`] (network namespaces, bridges, temp dirs).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawn the testenv spawner thread");
        Mutex::new(tx)
    })
}

/// A child process that is killed and reaped when this value is dropped.
#[derive(Debug)]
pub struct Supervised {
    name: String,
    child: Option<Child>,
}

impl Supervised {
    /// Starts `cmd` so that it dies with the test process, whatever the way that ends.
    pub fn spawn(name: &str, mut cmd: Command) -> io::Result<Supervised> {
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let (tx, rx) = mpsc::channel();
        spawner()
            .lock()
            .map_err(|_| io::Error::other("spawner poisoned"))?
            .send((cmd, tx))
            .map_err(|_| io::Error::other("spawner thread is gone"))?;
        let child = rx
            .recv()
            .map_err(|_| io::Error::other("spawner thread is gone"))??;
        Ok(Supervised {
            name: name.to_string(),
            child: Some(child),
        })
    }

    /// The process id.
    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Mutable access to the child, e.g. to take its stdout.
    pub fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            tracing::debug!(name = %self.name, "stopped");
        }
    }

    /// Sends SIGTERM and waits up to `grace` before killing.
    pub fn terminate(&mut self, grace: std::time::Duration) {
        if let Some(child) = self.child.as_mut() {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = std::time::Instant::now() + grace;
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    self.child = None;
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        self.kill();
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.kill();
    }
}

type Hook = Box<dyn FnOnce() + Send>;

fn hooks() -> &'static Mutex<Vec<Hook>> {
    static HOOKS: OnceLock<Mutex<Vec<Hook>>> = OnceLock::new();
    HOOKS.get_or_init(|| {
        extern "C" fn run_hooks() {
            let hooks = match hooks().lock() {
                Ok(mut h) => std::mem::take(&mut *h),
                Err(p) => std::mem::take(&mut *p.into_inner()),
            };
            // Last registered first, like destructors.
            for hook in hooks.into_iter().rev() {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(hook));
            }
        }
        // SAFETY: registering a plain extern "C" fn.
        unsafe { libc::atexit(run_hooks) };
        Mutex::new(Vec::new())
    })
}

/// Runs `hook` when the test process exits normally (after all tests, panicked or not).
/// Used for process-wide resources such as the shared control plane and the pod bridge.
pub fn at_exit(hook: impl FnOnce() + Send + 'static) {
    match hooks().lock() {
        Ok(mut h) => h.push(Box::new(hook)),
        Err(p) => p.into_inner().push(Box::new(hook)),
    }
}
