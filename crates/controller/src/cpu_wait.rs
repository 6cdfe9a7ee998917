//! How long the calling thread has waited, runnable, for a core (the run-queue delay
//! Linux keeps in `/proc/thread-self/schedstat`). The rebuild's debug line carries the wait
//! during the rebuild, so that a slow rebuild tells work from a machine with no core to
//! give it.
//!
//! Only the wait is read: the kernel adds it when the thread is put on a core, so it is
//! current whenever the thread runs. The file's time on a CPU is not: for the running
//! thread it lags until the next scheduler tick.

use std::time::Duration;

/// The calling thread's run-queue wait since it started; `None` where the kernel does not
/// keep it (not Linux, or schedstats compiled out).
pub fn waited_for_cpu() -> Option<Duration> {
    parse(&std::fs::read_to_string("/proc/thread-self/schedstat").ok()?)
}

/// `schedstat`'s line: nanoseconds on a CPU, nanoseconds waiting on a run queue, time
/// slices run (the kernel's Documentation/scheduler/sched-stats.rst); the wait.
fn parse(line: &str) -> Option<Duration> {
    let mut fields = line.split_ascii_whitespace();
    fields.next()?.parse::<u64>().ok()?;
    let waiting = fields.next()?.parse().ok()?;
    fields.next()?.parse::<u64>().ok()?;
    Some(Duration::from_nanos(waiting))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_lines_parse_and_others_do_not() {
        assert_eq!(
            parse("123456789 2000 17\n"),
            Some(Duration::from_nanos(2000))
        );
        for bad in ["", "1 2", "1 x 3", "-1 2 3", "1 2 3.5", "1 -2 3"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn this_threads_wait_is_read_and_never_goes_back() {
        let Some(first) = waited_for_cpu() else {
            // No schedstats on this kernel: nothing to read.
            return;
        };
        for _ in 0..100 {
            std::thread::yield_now();
        }
        let second = waited_for_cpu().expect("read once, readable again");
        assert!(second >= first, "{first:?} then {second:?}");
    }
}
