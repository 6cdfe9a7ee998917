//! Which requests' spans are sampled (exported): ingress-nginx's `otel-sampler`,
//! `otel-sampler-ratio` and `otel-sampler-parent-based`. The decision is a pure function of
//! the trace id and the caller's `sampled` flag; the SDK asks it through [`ShouldSample`].

use opentelemetry::trace::{Link, SpanKind, TraceContextExt as _, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};

/// `otel-sampler`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OtelSampler {
    /// Every span is sampled.
    #[value(name = "AlwaysOn")]
    AlwaysOn,
    /// No span is sampled (ingress-nginx's default).
    #[default]
    #[value(name = "AlwaysOff")]
    AlwaysOff,
    /// A share of the traces (`otel-sampler-ratio`), decided by the trace id, so every
    /// service that samples the same ratio keeps the same traces.
    #[value(name = "TraceIdRatioBased")]
    TraceIdRatioBased,
}

/// The sampling settings, copied out of the flags.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Sampling {
    /// `otel-sampler`.
    pub(crate) sampler: OtelSampler,
    /// `otel-sampler-ratio`, within 0 to 1.
    pub(crate) ratio: f64,
    /// `otel-sampler-parent-based`: a trusted caller's `sampled` flag decides.
    pub(crate) parent_based: bool,
}

impl Sampling {
    /// Whether a span of trace `trace_id` is sampled; `parent` is the trusted caller's
    /// `sampled` flag, if the request continues a trace.
    pub(crate) fn sampled(&self, trace_id: [u8; 16], parent: Option<bool>) -> bool {
        if self.parent_based
            && let Some(parent) = parent
        {
            return parent;
        }
        match self.sampler {
            OtelSampler::AlwaysOn => true,
            OtelSampler::AlwaysOff => false,
            OtelSampler::TraceIdRatioBased => ratio_sampled(trace_id, self.ratio),
        }
    }
}

/// The OpenTelemetry specification's `TraceIdRatioBased`, as its SDKs compute it: the low
/// 63 bits of the trace id's last 8 bytes below `ratio` times 2^63.
pub(crate) fn ratio_sampled(trace_id: [u8; 16], ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    (u64::from_be_bytes(low) >> 1) < bound
}

impl ShouldSample for Sampling {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        // The request's tracer gives a parent only when the caller's span is trusted.
        let parent = parent_context
            .filter(|cx| cx.has_active_span())
            .map(|cx| cx.span().span_context().clone());
        let sampled = self.sampled(trace_id.to_bytes(), parent.as_ref().map(|p| p.is_sampled()));
        SamplingResult {
            decision: if sampled {
                SamplingDecision::RecordAndSample
            } else {
                SamplingDecision::Drop
            },
            attributes: Vec::new(),
            trace_state: parent.map_or_else(TraceState::default, |p| p.trace_state().clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sampling(sampler: OtelSampler, ratio: f64, parent_based: bool) -> Sampling {
        Sampling {
            sampler,
            ratio,
            parent_based,
        }
    }

    #[test]
    fn always_on_and_off() {
        let id = [7; 16];
        assert!(sampling(OtelSampler::AlwaysOn, 0.0, false).sampled(id, Some(false)));
        assert!(!sampling(OtelSampler::AlwaysOff, 1.0, false).sampled(id, Some(true)));
    }

    #[test]
    fn parent_based_follows_the_callers_flag_and_the_sampler_without_one() {
        let id = [7; 16];
        let off = sampling(OtelSampler::AlwaysOff, 0.0, true);
        assert!(off.sampled(id, Some(true)));
        assert!(!off.sampled(id, None));
        let on = sampling(OtelSampler::AlwaysOn, 0.0, true);
        assert!(!on.sampled(id, Some(false)));
        assert!(on.sampled(id, None));
    }

    #[test]
    fn ratio_reads_the_low_half_of_the_trace_id() {
        let mut low = [0u8; 16];
        low[15] = 2; // (2 >> 1) = 1: below any bound above 2^-63.
        assert!(ratio_sampled(low, 0.01));
        let high = [0xff; 16];
        assert!(!ratio_sampled(high, 0.99));
        assert!(ratio_sampled(high, 1.0));
        assert!(!ratio_sampled(low, 0.0));
        // The high half plays no part.
        let mut other = low;
        other[0] = 0xff;
        assert!(ratio_sampled(other, 0.01));
    }

    /// The SDK's own `TraceIdRatioBased` makes the same decisions.
    #[test]
    fn ratio_agrees_with_the_sdk() {
        use opentelemetry_sdk::trace::Sampler;
        for (n, ratio) in [0.0, 0.01, 0.25, 0.5, 0.9].into_iter().enumerate() {
            for i in 0..200u64 {
                let id = (u128::from(i) << 64 | u128::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
                    .wrapping_add(n as u128)
                    .to_be_bytes();
                let sdk = Sampler::TraceIdRatioBased(ratio).should_sample(
                    None,
                    TraceId::from_bytes(id),
                    "",
                    &SpanKind::Server,
                    &[],
                    &[],
                );
                let expected = matches!(sdk.decision, SamplingDecision::RecordAndSample);
                assert_eq!(ratio_sampled(id, ratio), expected, "{ratio} {id:?}");
            }
        }
    }

    proptest! {
        /// Deterministic, and monotone in the ratio: a trace sampled at r is sampled at
        /// every larger ratio.
        #[test]
        fn ratio_is_deterministic_and_monotone(id: [u8; 16], a in 0.0f64..=1.0, b in 0.0f64..=1.0) {
            let (low, high) = if a <= b { (a, b) } else { (b, a) };
            prop_assert_eq!(ratio_sampled(id, low), ratio_sampled(id, low));
            if ratio_sampled(id, low) {
                prop_assert!(ratio_sampled(id, high));
            }
        }

        /// Without parent-based sampling the caller's flag never matters.
        #[test]
        fn the_callers_flag_matters_only_parent_based(id: [u8; 16], ratio in 0.0f64..=1.0, flag: bool) {
            let s = sampling(OtelSampler::TraceIdRatioBased, ratio, false);
            prop_assert_eq!(s.sampled(id, Some(flag)), s.sampled(id, None));
            let p = sampling(OtelSampler::TraceIdRatioBased, ratio, true);
            prop_assert_eq!(p.sampled(id, Some(flag)), flag);
        }
    }
}
