//! The live dashboard's data: what the admin server's `/` page and `/api/v1/status` show.
//!
//! Everything here runs off the request path. A sampler task reads the routes' cumulative
//! counters every [`SAMPLE_INTERVAL`] and keeps the last [`KEPT_SAMPLES`] rates per route
//! that had a request in that window ([`History`]); `/api/v1/status` joins them with the current snapshot (routes, endpoints,
//! policy, certificates) and the warnings the control plane reported
//! ([`Warning`](crate::observe::control_info::Warning)).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use sluice_routing::TlsCertificate;

use crate::observe::metrics::{RouteKey, RouteMetrics, RouteTotals, request_bucket_bounds};
use crate::snapshot::{Snapshot, TableShared, service_label};

/// How often route figures are sampled.
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_secs(2);
/// Samples kept per route: five minutes at [`SAMPLE_INTERVAL`].
pub(crate) const KEPT_SAMPLES: usize = 150;

/// One sample of a route.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    rps: f64,
    /// Share of 5xx answers among the sample's requests (0 when there were none).
    error_rate: f64,
    /// Estimated 99th percentile of the sample's request durations, in milliseconds.
    p99_ms: Option<f64>,
}

#[derive(Debug)]
struct RouteHistory {
    last: RouteTotals,
    /// The last [`KEPT_SAMPLES`] points; none while the route has had no request in that
    /// many samples (at 10,000 routes, mostly idle, full histories would hold 50 MB).
    points: VecDeque<Point>,
    /// Samples since the last one with a request.
    idle: usize,
}

impl RouteHistory {
    /// The history of a route first seen with `totals`: no points until it has traffic.
    fn new(totals: RouteTotals) -> Self {
        RouteHistory {
            last: totals,
            points: VecDeque::new(),
            idle: KEPT_SAMPLES,
        }
    }

    /// Adds the point between the last reading and `now`, `seconds` later.
    fn record(&mut self, now: RouteTotals, seconds: f64) {
        let point = point_between(&self.last, &now, seconds);
        self.idle = if now.requests > self.last.requests {
            0
        } else {
            self.idle.saturating_add(1)
        };
        self.last = now;
        if self.idle >= KEPT_SAMPLES {
            // Every kept point is idle: nothing to draw.
            self.points = VecDeque::new();
            return;
        }
        if self.points.len() == KEPT_SAMPLES {
            self.points.pop_front();
        }
        if self.points.capacity() == 0 {
            self.points.reserve_exact(KEPT_SAMPLES);
        }
        self.points.push_back(point);
    }
}

/// Recent figures per route, keyed by (namespace, Ingress, service).
#[derive(Debug, Default)]
pub(crate) struct History {
    routes: Mutex<HashMap<RouteKey, RouteHistory>>,
}

impl History {
    /// Takes one sample of every route of `snapshot`, `elapsed` after the previous one, and
    /// forgets routes that are gone.
    pub(crate) fn sample(&self, snapshot: &Snapshot, elapsed: Duration) {
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        let mut seen = HashMap::new();
        for metrics in snapshot
            .routes
            .iter()
            .flat_map(|c| c.iter())
            .map(|(_, m)| m)
        {
            seen.entry(metrics.key()).or_insert(metrics);
        }
        routes.retain(|key, _| seen.contains_key(key));
        let seconds = elapsed.as_secs_f64().max(0.001);
        for (key, metrics) in seen {
            let now = metrics.totals();
            match routes.get_mut(&key) {
                Some(history) => history.record(now, seconds),
                None => {
                    routes.insert(key, RouteHistory::new(now));
                }
            }
        }
    }

    /// The samples of one route as JSON arrays, oldest first.
    fn series(&self, metrics: &RouteMetrics) -> Value {
        let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        let Some(history) = routes.get(&metrics.key()) else {
            return json!({"rps": [], "error_rate": [], "p99_ms": []});
        };
        let round = |v: f64| (v * 1000.0).round() / 1000.0;
        json!({
            "rps": history.points.iter().map(|p| round(p.rps)).collect::<Vec<_>>(),
            "error_rate": history.points.iter().map(|p| round(p.error_rate)).collect::<Vec<_>>(),
            "p99_ms": history.points.iter().map(|p| p.p99_ms.map(round)).collect::<Vec<_>>(),
        })
    }
}

/// The rates between two cumulative readings `seconds` apart.
fn point_between(before: &RouteTotals, after: &RouteTotals, seconds: f64) -> Point {
    let requests = after.requests.saturating_sub(before.requests);
    let errors = after.errors.saturating_sub(before.errors);
    let buckets: Vec<u64> = after
        .buckets
        .iter()
        .zip(&before.buckets)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    Point {
        rps: requests as f64 / seconds,
        error_rate: if requests == 0 {
            0.0
        } else {
            errors as f64 / requests as f64
        },
        p99_ms: quantile(&buckets, request_bucket_bounds(), 0.99).map(|s| s * 1000.0),
    }
}

/// The `q` quantile of per-bucket counts (`bounds` in seconds, `+Inf` last), interpolated
/// linearly inside its bucket as Prometheus's `histogram_quantile` does; `None` without
/// observations. The `+Inf` bucket reports the highest finite bound.
pub(crate) fn quantile(buckets: &[u64], bounds: &[f64], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, &count) in buckets.iter().enumerate() {
        if count > 0 && (below + count) as f64 >= rank {
            let Some(&upper) = bounds.get(i) else {
                return bounds.last().copied();
            };
            let lower = if i == 0 { 0.0 } else { bounds[i - 1] };
            let within = (rank - below as f64) / count as f64;
            return Some(lower + (upper - lower) * within.clamp(0.0, 1.0));
        }
        below += count;
    }
    bounds.last().copied()
}

/// The `/api/v1/status` document.
pub(crate) fn status(shared: &TableShared, history: &History) -> Value {
    let snapshot = shared.current.load();
    let table = &snapshot.table;
    let mut routes = Vec::new();
    for (route, entry_id) in table.routes_with_entries() {
        let entry = table.entry(entry_id);
        let backend = &entry.backend;
        let stats = snapshot
            .routes
            .get(entry_id)
            .and_then(|choices| choices.first())
            .map(|(_, metrics)| {
                let totals = metrics.totals();
                let mut stats = history.series(metrics);
                stats["requests"] = json!(totals.requests);
                stats["errors"] = json!(totals.errors);
                stats
            })
            .unwrap_or(Value::Null);
        routes.push(json!({
            "host": if route.host.is_empty() { "*" } else { route.host.as_str() },
            "path_type": route.path_type,
            "path": route.path,
            "ingress": format!("{}/{}", entry.source.namespace, entry.source.name),
            "backend": service_label(&backend.service),
            "endpoints": {
                "ready": backend.endpoints.len(),
                "total": backend.endpoints.len() + backend.not_ready,
            },
            "policy": entry.policy.summary(),
            "canary": entry.canary.as_ref().map(|c| format!("{}/{}", c.source.namespace, c.source.name)),
            "stats": stats,
        }));
    }
    let default_backend = table.default_backend().map(|backend| {
        json!({
            "backend": service_label(&backend.service),
            "endpoints": {
                "ready": backend.endpoints.len(),
                "total": backend.endpoints.len() + backend.not_ready,
            },
        })
    });
    let control = shared.control.lock().unwrap_or_else(|e| e.into_inner());
    let mut warnings: Vec<Value> = control
        .warnings
        .iter()
        .map(|w| {
            json!({"object": w.object, "field": w.field, "reason": w.reason, "message": w.message})
        })
        .collect();
    drop(control);
    // Only backends some route forwards to: a redirect-only rule's is never asked.
    for backend in table.forwarded_backends() {
        if backend.endpoints.is_empty() {
            warnings.push(json!({
                "object": format!("Service {}/{}", backend.service.namespace, backend.service.name),
                "field": format!("port {}", backend.service.port),
                "reason": "NoReadyEndpoints",
                "message": format!(
                    "Service {} has no ready endpoint ({} not ready): its routes answer 503",
                    backend.service, backend.not_ready
                ),
            }));
        }
    }
    let now = SystemTime::now();
    let certificates: Vec<Value> = table
        .certificates()
        .map(|cert| certificate(cert, now))
        .collect();
    json!({
        "generation": shared.metrics.generation.get(),
        "sample_interval_seconds": SAMPLE_INTERVAL.as_secs(),
        "routes": routes,
        "default_backend": default_backend,
        "certificates": certificates,
        "warnings": warnings,
    })
}

/// A certificate's names and expiry, read from its leaf.
fn certificate(cert: &TlsCertificate, now: SystemTime) -> Value {
    let secret = format!("{}/{}", cert.secret.namespace, cert.secret.name);
    let leaf = match crate::observe::certificate::leaf(cert) {
        Ok(leaf) => leaf,
        Err(error) => return json!({"secret": secret, "error": error}),
    };
    let (names, not_after) = (leaf.names, leaf.not_after);
    let now_unix = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let expiry = u64::try_from(not_after)
        .ok()
        .map(|s| UNIX_EPOCH + Duration::from_secs(s));
    json!({
        "secret": secret,
        "names": names,
        "not_after": expiry.map(httpdate::fmt_http_date),
        "not_after_unix": not_after,
        "days_left": (not_after - now_unix).div_euclid(86_400),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_the_bucket() {
        let bounds = [0.001, 0.01, 0.1];
        // 100 observations: 90 below 1 ms, 10 between 1 and 10 ms.
        let buckets = [90, 10, 0, 0];
        let p50 = quantile(&buckets, &bounds, 0.5).unwrap();
        assert!((p50 - 0.001 * 50.0 / 90.0).abs() < 1e-9, "{p50}");
        let p99 = quantile(&buckets, &bounds, 0.99).unwrap();
        assert!((p99 - (0.001 + 0.009 * 0.9)).abs() < 1e-9, "{p99}");
        assert_eq!(quantile(&[0, 0, 0, 0], &bounds, 0.99), None);
        // Everything in +Inf: the highest finite bound.
        assert_eq!(quantile(&[0, 0, 0, 5], &bounds, 0.99), Some(0.1));
    }

    #[test]
    fn points_are_rates_between_readings() {
        let before = RouteTotals {
            requests: 10,
            errors: 1,
            buckets: vec![0; request_bucket_bounds().len() + 1],
        };
        let mut after = before.clone();
        after.requests = 30;
        after.errors = 6;
        after.buckets[0] = 20;
        let point = point_between(&before, &after, 2.0);
        assert_eq!(point.rps, 10.0);
        assert_eq!(point.error_rate, 0.25);
        assert!(point.p99_ms.unwrap() <= request_bucket_bounds()[0] * 1000.0);
        let idle = point_between(&after, &after, 2.0);
        assert_eq!((idle.rps, idle.error_rate, idle.p99_ms), (0.0, 0.0, None));
    }

    #[test]
    fn an_idle_route_keeps_no_points_and_a_busy_one_at_most_the_window() {
        let totals = |requests: u64| RouteTotals {
            requests,
            errors: 0,
            buckets: vec![0; request_bucket_bounds().len() + 1],
        };
        let mut history = RouteHistory::new(totals(0));
        for _ in 0..3 * KEPT_SAMPLES {
            history.record(totals(0), 2.0);
        }
        assert_eq!(
            history.points.capacity(),
            0,
            "never a request: nothing kept"
        );

        // Traffic: one point per sample, the window at most.
        for n in 1..=2 * KEPT_SAMPLES as u64 {
            history.record(totals(n), 2.0);
            assert!(history.points.len() <= KEPT_SAMPLES);
        }
        assert_eq!(history.points.len(), KEPT_SAMPLES);
        assert!(history.points.iter().all(|p| p.rps == 0.5));

        // Idle again: the points stay while one with a request is among them, then go.
        let last = 2 * KEPT_SAMPLES as u64;
        for _ in 0..KEPT_SAMPLES - 1 {
            history.record(totals(last), 2.0);
        }
        assert_eq!(history.points.len(), KEPT_SAMPLES);
        assert_eq!(history.points.back().map(|p| p.rps), Some(0.0));
        assert_eq!(history.points.front().map(|p| p.rps), Some(0.5));
        history.record(totals(last), 2.0);
        assert!(history.points.is_empty(), "the whole window idle");
        assert_eq!(history.points.capacity(), 0, "and its memory given back");
    }
}
