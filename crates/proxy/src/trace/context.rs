//! W3C Trace Context's `traceparent` field: parsed from a client's request, written on the
//! request to the backend (<https://www.w3.org/TR/trace-context/>). Pure: no allocation
//! to parse.

/// The fixed part of a `traceparent` value: `00-<32 hex>-<16 hex>-<2 hex>`.
pub(crate) const TRACEPARENT_LEN: usize = 55;

/// The trace a request belongs to, as a `traceparent` field carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TraceParent {
    /// The trace id (never all zeros).
    pub(crate) trace_id: [u8; 16],
    /// The id of the span this one is a child of (never all zeros).
    pub(crate) parent_id: [u8; 8],
    /// The trace flags; bit 0 is `sampled`.
    pub(crate) flags: u8,
}

impl TraceParent {
    /// Parses a `traceparent` value; `None` for anything the specification says to
    /// ignore (then a new trace starts). Versions above `00` are read by their version-00
    /// prefix, as the specification asks; `ff` is invalid.
    pub(crate) fn parse(value: &[u8]) -> Option<TraceParent> {
        // Optional whitespace around a field value is not part of it.
        let value = value.trim_ascii();
        if value.len() < TRACEPARENT_LEN {
            return None;
        }
        let version = hex_byte(&value[0..2])?;
        if version == 0xff || (version == 0 && value.len() != TRACEPARENT_LEN) {
            return None;
        }
        if version != 0 && value.len() > TRACEPARENT_LEN && value[TRACEPARENT_LEN] != b'-' {
            return None;
        }
        if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, byte) in trace_id.iter_mut().enumerate() {
            *byte = hex_byte(&value[3 + 2 * i..5 + 2 * i])?;
        }
        let mut parent_id = [0u8; 8];
        for (i, byte) in parent_id.iter_mut().enumerate() {
            *byte = hex_byte(&value[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&value[53..55])?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// The version-00 `traceparent` value.
    pub(crate) fn format(&self) -> [u8; TRACEPARENT_LEN] {
        let mut out = [b'-'; TRACEPARENT_LEN];
        out[0] = b'0';
        out[1] = b'0';
        for (i, byte) in self.trace_id.iter().enumerate() {
            put_hex(&mut out[3 + 2 * i..5 + 2 * i], *byte);
        }
        for (i, byte) in self.parent_id.iter().enumerate() {
            put_hex(&mut out[36 + 2 * i..38 + 2 * i], *byte);
        }
        put_hex(&mut out[53..55], self.flags);
        out
    }
}

/// Two lowercase hex digits (the specification allows no uppercase).
fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(pair[0])? << 4 | digit(pair[1])?)
}

fn put_hex(out: &mut [u8], byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out[0] = HEX[usize::from(byte >> 4)];
    out[1] = HEX[usize::from(byte & 0xf)];
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_specifications_example() {
        let parsed = TraceParent::parse(EXAMPLE.as_bytes()).expect("valid");
        assert_eq!(parsed.trace_id[0], 0x4b);
        assert_eq!(parsed.trace_id[15], 0x36);
        assert_eq!(parsed.parent_id, 0x00f0_67aa_0ba9_02b7_u64.to_be_bytes());
        assert_eq!(parsed.flags, 1);
        assert_eq!(&parsed.format()[..], EXAMPLE.as_bytes());
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert_eq!(
            TraceParent::parse(unsampled.as_bytes())
                .expect("valid")
                .flags,
            0
        );
    }

    #[test]
    fn what_the_specification_says_to_ignore() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            // Uppercase hex.
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            // All-zero ids.
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            // Version ff, and version 00 with more after it.
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            // Wrong separators.
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
            "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            // A later version must separate what follows with a dash.
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ] {
            assert_eq!(TraceParent::parse(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_by_its_prefix() {
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        let parsed = TraceParent::parse(later.as_bytes()).expect("valid");
        assert_eq!(&parsed.format()[..], EXAMPLE.as_bytes());
        let padded = format!("  {EXAMPLE} ");
        assert!(TraceParent::parse(padded.as_bytes()).is_some());
    }

    proptest! {
        /// Whatever is formatted parses back to itself.
        #[test]
        fn format_then_parse(trace in any::<[u8; 16]>(), parent in any::<[u8; 8]>(), flags: u8) {
            prop_assume!(trace != [0; 16] && parent != [0; 8]);
            let value = TraceParent { trace_id: trace, parent_id: parent, flags };
            prop_assert_eq!(TraceParent::parse(&value.format()), Some(value));
        }

        /// Any bytes: no panic, and what parses formats back to the same 55 bytes.
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Some(parsed) = TraceParent::parse(&bytes) {
                let trimmed = bytes.trim_ascii();
                if trimmed[..2] == *b"00" {
                    prop_assert_eq!(&parsed.format()[..], trimmed);
                }
            }
        }

        /// Lowercase hex ids in the right shape always parse.
        #[test]
        fn well_formed_values_parse(value in "00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}") {
            let parsed = TraceParent::parse(value.as_bytes());
            let zero = value[3..35].bytes().all(|c| c == b'0') || value[36..52].bytes().all(|c| c == b'0');
            prop_assert_eq!(parsed.is_some(), !zero);
        }
    }
}
