//! Per-worker shards of the request-path metrics, summed when they are scraped.
//!
//! A counter that every worker increments is one cache line that every core keeps taking
//! from the others: with N workers each increment waits for the line to cross cores. Here
//! each worker thread counts into a line of its own ([`Line`]), found by a thread-local index
//! set when the worker starts ([`set_thread_shard`]); a scrape adds the lines up. Threads
//! that are not workers (tests, the shared runtime without `--workers`) share shard 0, which
//! stays exact because every update is an atomic add.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::family::MetricConstructor;
use prometheus_client::metrics::{MetricType, TypedMetric};

thread_local! {
    /// The shard this thread counts into (its worker index; 0 off the workers).
    static SHARD: Cell<usize> = const { Cell::new(0) };
}

/// Makes the calling thread count into shard `index` (taken modulo the shard count).
pub(crate) fn set_thread_shard(index: usize) {
    SHARD.with(|shard| shard.set(index));
}

/// The calling thread's shard among `len`.
fn shard(len: usize) -> usize {
    let index = SHARD.with(Cell::get);
    if index < len { index } else { index % len }
}

/// One cache line (two, for the adjacent-line prefetcher) holding one shard's values.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Line<T>(T);

/// How many shards each request-path metric gets: one per worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shards(usize);

impl Shards {
    /// One shard per worker thread (at least one).
    pub(crate) fn new(workers: usize) -> Shards {
        Shards(workers.max(1))
    }

    /// A counter with these shards.
    pub(crate) fn counter(self) -> ShardedCounter {
        ShardedCounter {
            lines: (0..self.0).map(|_| Line::default()).collect(),
        }
    }

    /// A gauge with these shards.
    pub(crate) fn gauge(self) -> ShardedGauge {
        ShardedGauge {
            lines: (0..self.0).map(|_| Line::default()).collect(),
        }
    }

    /// A histogram over `bounds` (seconds, ascending, at most [`MAX_BOUNDS`]) with these
    /// shards.
    pub(crate) fn histogram(self, bounds: &'static [f64]) -> ShardedHistogram {
        assert!(bounds.len() <= MAX_BOUNDS, "too many histogram buckets");
        ShardedHistogram {
            inner: Arc::new(HistogramInner {
                bounds,
                bounds_nanos: bounds.iter().map(|b| (b * 1e9) as u64).collect(),
                lines: (0..self.0).map(|_| Line::default()).collect(),
            }),
        }
    }
}

impl MetricConstructor<ShardedCounter> for Shards {
    fn new_metric(&self) -> ShardedCounter {
        self.counter()
    }
}

/// A monotonic counter, one line per shard. Clones share the lines.
#[derive(Clone, Debug)]
pub(crate) struct ShardedCounter {
    lines: Arc<[Line<AtomicU64>]>,
}

impl ShardedCounter {
    /// Adds one.
    pub(crate) fn inc(&self) {
        self.inc_by(1);
    }

    /// Adds `v`.
    pub(crate) fn inc_by(&self, v: u64) {
        self.lines[shard(self.lines.len())]
            .0
            .fetch_add(v, Ordering::Relaxed);
    }

    /// The sum over every shard.
    pub(crate) fn get(&self) -> u64 {
        self.lines
            .iter()
            .map(|line| line.0.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

impl TypedMetric for ShardedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ShardedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A gauge, one line per shard: a value raised on one thread may be lowered on another
/// (the shard values are signed), only their sum means anything.
#[derive(Clone, Debug)]
pub(crate) struct ShardedGauge {
    lines: Arc<[Line<AtomicI64>]>,
}

impl ShardedGauge {
    /// Adds one.
    pub(crate) fn inc(&self) {
        self.lines[shard(self.lines.len())]
            .0
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Subtracts one.
    pub(crate) fn dec(&self) {
        self.lines[shard(self.lines.len())]
            .0
            .fetch_sub(1, Ordering::Relaxed);
    }

    /// The sum over every shard.
    pub(crate) fn get(&self) -> i64 {
        self.lines
            .iter()
            .map(|line| line.0.load(Ordering::Relaxed))
            .fold(0, i64::wrapping_add)
    }
}

impl TypedMetric for ShardedGauge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for ShardedGauge {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.get())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Most bucket bounds a [`ShardedHistogram`] takes (`+Inf` comes on top).
pub(crate) const MAX_BOUNDS: usize = 16;

/// One shard of a histogram: per-bucket (not cumulative) counts, `+Inf` included, then the
/// sum of observations in nanoseconds (584 years before it wraps).
type Row = [AtomicU64; MAX_BOUNDS + 2];

/// A histogram of durations, one row of buckets per shard; an observation is two relaxed
/// atomic adds on the calling worker's own line. Clones share the rows.
#[derive(Clone, Debug)]
pub(crate) struct ShardedHistogram {
    inner: Arc<HistogramInner>,
}

#[derive(Debug)]
struct HistogramInner {
    /// Upper bounds in seconds; the `+Inf` bucket is implicit.
    bounds: &'static [f64],
    /// The same bounds in nanoseconds, compared against observations.
    bounds_nanos: Box<[u64]>,
    lines: Box<[Line<Row>]>,
}

impl ShardedHistogram {
    /// Records one duration.
    pub(crate) fn observe(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let inner = &*self.inner;
        let bucket = inner
            .bounds_nanos
            .iter()
            .position(|&bound| nanos <= bound)
            .unwrap_or(inner.bounds_nanos.len());
        let row = &inner.lines[shard(inner.lines.len())].0;
        row[bucket].fetch_add(1, Ordering::Relaxed);
        row[MAX_BOUNDS + 1].fetch_add(nanos, Ordering::Relaxed);
    }

    /// Per-bucket (not cumulative) counts summed over the shards, `+Inf` last.
    pub(crate) fn buckets(&self) -> Vec<u64> {
        let inner = &*self.inner;
        let mut sums = vec![0u64; inner.bounds.len() + 1];
        for line in inner.lines.iter() {
            for (sum, count) in sums.iter_mut().zip(line.0.iter()) {
                *sum = sum.wrapping_add(count.load(Ordering::Relaxed));
            }
        }
        sums
    }

    /// The sum of every observation, in seconds.
    pub(crate) fn sum_seconds(&self) -> f64 {
        let nanos = self
            .inner
            .lines
            .iter()
            .map(|line| line.0[MAX_BOUNDS + 1].load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add);
        nanos as f64 / 1e9
    }

    /// Number of observations so far.
    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.buckets().iter().sum()
    }
}

impl TypedMetric for ShardedHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for ShardedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets: Vec<(f64, u64)> = self
            .inner
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.buckets())
            .collect();
        let count = buckets.iter().map(|(_, c)| c).sum();
        encoder.encode_histogram::<NoLabelSet>(self.sum_seconds(), count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Makes histograms over fixed bounds for a metric family.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HistogramShards {
    pub(crate) shards: Shards,
    pub(crate) bounds: &'static [f64],
}

impl MetricConstructor<ShardedHistogram> for HistogramShards {
    fn new_metric(&self) -> ShardedHistogram {
        self.shards.histogram(self.bounds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_sum_across_threads() {
        let shards = Shards::new(3);
        let counter = shards.counter();
        let gauge = shards.gauge();
        let histogram = shards.histogram(&[0.001, 0.01]);
        std::thread::scope(|scope| {
            for index in 0..5 {
                let (counter, gauge, histogram) = (&counter, &gauge, &histogram);
                scope.spawn(move || {
                    set_thread_shard(index);
                    for _ in 0..1000 {
                        counter.inc();
                        gauge.inc();
                        histogram.observe(Duration::from_micros(500));
                    }
                    counter.inc_by(10);
                    histogram.observe(Duration::from_secs(1));
                    // Lowered on another shard than the one that raised it.
                    set_thread_shard(index + 1);
                    for _ in 0..1000 {
                        gauge.dec();
                    }
                });
            }
        });
        assert_eq!(counter.get(), 5 * 1010);
        assert_eq!(gauge.get(), 0);
        assert_eq!(histogram.buckets(), vec![5000, 0, 5]);
        assert_eq!(histogram.count(), 5005);
        assert!((histogram.sum_seconds() - (5.0 * 0.5 + 5.0)).abs() < 1e-9);
        // Every shard got its share: the writes were spread, not all on one line.
        let lines: Vec<u64> = counter
            .lines
            .iter()
            .map(|line| line.0.load(Ordering::Relaxed))
            .collect();
        assert!(lines.iter().all(|&n| n > 0), "{lines:?}");
    }

    #[test]
    fn lines_do_not_share_cache_lines() {
        assert_eq!(std::mem::align_of::<Line<AtomicU64>>(), 128);
        let counter = Shards::new(2).counter();
        let a = &counter.lines[0] as *const _ as usize;
        let b = &counter.lines[1] as *const _ as usize;
        assert!(b - a >= 128);
    }
}
