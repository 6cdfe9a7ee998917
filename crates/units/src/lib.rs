//! Durations and sizes as people write them for an ingress controller, in one syntax for
//! every flag, ConfigMap key and annotation of the project (so that a value that works in one
//! place works in every other).
//!
//! * [`parse_duration`]: whole seconds as ingress-nginx's annotations take them (`60`), or
//!   numbers with units in decreasing order, as nginx (`ngx_parse_time`) and Go
//!   (`time.ParseDuration`) write them: `500ms`, `30s`, `2m`, `1h`, `1m30s`, `1.5s`.
//!   Units: `ms`, `s`, `m` (or `min`), `h`, `d`, `w`, `M` (30 days), `y` (365 days).
//! * [`parse_size`]: bytes, with an optional binary unit in any case, as nginx
//!   (`ngx_parse_size`: `k`, `m`, `g`) and Kubernetes-style flags (`KiB`, `MB`) write them.
//!
//! * [`parse_bool`]: `true` or `false`, the one spelling of a boolean flag (`--flag`,
//!   `--flag=false`); `on`/`off`, `yes`/`no` and `1`/`0`, which older releases took, are
//!   still read ([`is_legacy_bool`] tells them apart so that callers can warn).
//!
//! Zero is a valid value here; whether it means "off" or is refused is the caller's call.

#![forbid(unsafe_code)]

use std::time::Duration;

/// (unit, nanoseconds), longest spelling first where one is a prefix of another.
const TIME_UNITS: [(&str, u128); 9] = [
    ("ms", 1_000_000),
    ("min", 60_000_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
    ("w", 7 * 86_400_000_000_000),
    ("M", 30 * 86_400_000_000_000),
    ("y", 365 * 86_400_000_000_000),
];

const DURATION_SYNTAX: &str = "whole seconds, or numbers with units ms, s, m, h, d, w, M, y \
                               in decreasing order, such as 500ms, 30s, 1m30s, 1.5h";

/// Reads a duration (see the crate docs for the syntax). The error says what was wrong and
/// what the syntax is, without repeating the value (the caller names it with its field).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("is empty; expected {DURATION_SYNTAX}"));
    }
    let too_large = || "is too large".to_owned();
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map(Duration::from_secs)
            .map_err(|_| too_large());
    }
    let not_a_duration = || format!("is not a duration; expected {DURATION_SYNTAX}");
    let mut rest = text;
    let mut last_scale = u128::MAX;
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(not_a_duration)?;
        let (number, after) = rest.split_at(end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() || !fraction.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(not_a_duration());
        }
        let (unit, scale) = TIME_UNITS
            .iter()
            .find(|(unit, _)| after.starts_with(unit))
            .ok_or_else(not_a_duration)?;
        if *scale >= last_scale {
            return Err(format!(
                "has its units out of order; expected {DURATION_SYNTAX}"
            ));
        }
        last_scale = *scale;
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_large())?
        };
        // Fraction digits beyond nanoseconds do not count.
        let digits = fraction.len().min(18);
        let fraction_value: u128 = if digits == 0 {
            0
        } else {
            fraction[..digits].parse().map_err(|_| not_a_duration())?
        };
        let part = whole
            .checked_mul(*scale)
            .and_then(|n| n.checked_add(fraction_value * *scale / 10u128.pow(digits as u32)))
            .ok_or_else(too_large)?;
        nanos = nanos.checked_add(part).ok_or_else(too_large)?;
        rest = after[unit.len()..].trim_start();
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| too_large())?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// Reads a size in bytes (see the crate docs for the syntax).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let syntax = "expected bytes with an optional unit: k, m, g (nginx), KiB, MiB, GiB, KB, MB, GB";
    if number.is_empty() {
        return Err(format!("is not a size; {syntax}"));
    }
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("is not a size; {syntax}")),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| "is too large".to_owned())
}

/// The words older releases took for a boolean, besides `true`/`false`.
const LEGACY_BOOLS: [(&str, bool); 6] = [
    ("on", true),
    ("off", false),
    ("yes", true),
    ("no", false),
    ("1", true),
    ("0", false),
];

/// Reads a boolean: `true` or `false` (any case); the legacy words of [`is_legacy_bool`]
/// too. The error says what is accepted.
pub fn parse_bool(text: &str) -> Result<bool, String> {
    let word = text.trim().to_ascii_lowercase();
    match word.as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => LEGACY_BOOLS
            .iter()
            .find(|(legacy, _)| *legacy == word)
            .map(|(_, value)| *value)
            .ok_or_else(|| format!("is not a boolean; expected true or false, got {text:?}")),
    }
}

/// Whether `text` is a boolean in a spelling other than `true`/`false` (`on`, `off`, `yes`,
/// `no`, `1`, `0`): read by [`parse_bool`], but deprecated.
pub fn is_legacy_bool(text: &str) -> bool {
    let word = text.trim().to_ascii_lowercase();
    LEGACY_BOOLS.iter().any(|(legacy, _)| *legacy == word)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn ingress_nginx_whole_seconds() {
        assert_eq!(parse_duration("60"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration(" 5 "), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn nginx_ngx_parse_time_units() {
        assert_eq!(parse_duration("500ms"), Ok(ms(500)));
        assert_eq!(parse_duration("30s"), Ok(ms(30_000)));
        assert_eq!(parse_duration("2m"), Ok(ms(120_000)));
        assert_eq!(parse_duration("1h"), Ok(ms(3_600_000)));
        assert_eq!(parse_duration("1d"), Ok(ms(86_400_000)));
        assert_eq!(parse_duration("1w"), Ok(ms(7 * 86_400_000)));
        assert_eq!(parse_duration("1M"), Ok(ms(30 * 86_400_000)));
        assert_eq!(parse_duration("1y"), Ok(ms(365 * 86_400_000)));
        assert_eq!(parse_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("1m 30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("1h2m3s4ms"), Ok(ms(3_723_004)));
    }

    #[test]
    fn go_time_parse_duration_forms() {
        assert_eq!(parse_duration("1.5s"), Ok(ms(1_500)));
        assert_eq!(parse_duration(".5s"), Ok(ms(500)));
        assert_eq!(parse_duration("1.5h"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration("2min"), Ok(ms(120_000)));
        assert_eq!(parse_duration("0.001s"), Ok(ms(1)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn refusals_say_why() {
        for bad in [
            "", "s", "1x", "1.2.3s", "1s1m", "1s1s", "ms", "-1s", "1 s x", ".",
        ] {
            let error = parse_duration(bad).expect_err(bad);
            assert!(
                error.contains("expected") || error.contains("too large"),
                "{bad}: {error}"
            );
        }
        assert!(parse_duration("1s1m").unwrap_err().contains("out of order"));
        assert!(
            parse_duration("99999999999999999999999")
                .unwrap_err()
                .contains("too large")
        );
        assert!(
            parse_duration("999999999999999y")
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn sizes_in_nginx_and_flag_syntax() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("8k"), Ok(8 << 10));
        assert_eq!(parse_size("8K"), Ok(8 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("10MB"), Ok(10 << 20));
        assert_eq!(parse_size("1 GiB"), Ok(1 << 30));
        assert_eq!(parse_size("7b"), Ok(7));
        for bad in ["", "k", "12x", "1.5m", "-1", "1kk"] {
            assert!(parse_size(bad).unwrap_err().contains("expected"), "{bad}");
        }
        assert!(
            parse_size("99999999999g")
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn booleans_true_false_and_the_legacy_words() {
        assert_eq!(parse_bool("true"), Ok(true));
        assert_eq!(parse_bool("False"), Ok(false));
        for (word, value) in LEGACY_BOOLS {
            assert_eq!(parse_bool(word), Ok(value), "{word}");
            assert!(is_legacy_bool(word), "{word}");
        }
        assert!(!is_legacy_bool("true") && !is_legacy_bool("false"));
        for bad in ["", "maybe", "2", "tru", "enabled"] {
            let error = parse_bool(bad).expect_err(bad);
            assert!(error.contains("expected true or false"), "{bad}: {error}");
            assert!(!is_legacy_bool(bad), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn every_combination_of_decreasing_units_adds_up(
            h in 0u64..1000, m in 0u64..60, s in 0u64..60, millis in 0u64..1000
        ) {
            let text = format!("{h}h{m}m{s}s{millis}ms");
            let expected = ((h * 60 + m) * 60 + s) * 1000 + millis;
            prop_assert_eq!(parse_duration(&text), Ok(ms(expected)));
        }

        #[test]
        fn whole_seconds_and_seconds_unit_agree(n in 0u64..10_000_000) {
            prop_assert_eq!(parse_duration(&n.to_string()), parse_duration(&format!("{n}s")));
        }

        #[test]
        fn any_text_is_parsed_or_refused_without_panicking(text in ".{0,24}") {
            let _ = parse_duration(&text);
            let _ = parse_size(&text);
        }

        #[test]
        fn sizes_scale_exactly(n in 0u64..1_000_000, unit in 0usize..4) {
            let (suffix, factor) = [("", 1u64), ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30)][unit];
            prop_assert_eq!(parse_size(&format!("{n}{suffix}")), Ok(n * factor));
        }
    }
}
