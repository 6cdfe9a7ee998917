//! Comparing an incremental compile with a full one, for the property tests.

use std::fmt::Debug;
use std::sync::LazyLock;

use proptest::test_runner::TestCaseError;
use regex::Regex;

static BACKEND_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bid: \d+").expect("valid regex"));

/// `Debug` with backend ids masked: they legitimately differ between the two compilers.
pub fn canon(x: &impl Debug) -> String {
    BACKEND_ID
        .replace_all(&format!("{x:?}"), "id: _")
        .into_owned()
}

/// Fails naming `what` and both values when they differ.
pub fn eq_or_fail<T: PartialEq + Debug>(
    what: &str,
    inc: &T,
    full: &T,
) -> Result<(), TestCaseError> {
    if inc == full {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!(
            "{what} differs:\n  incremental: {inc:?}\n  full:        {full:?}"
        )))
    }
}

/// Element-wise, naming the first difference.
pub fn lists_eq<T: PartialEq + Debug>(
    what: &str,
    inc: &[T],
    full: &[T],
) -> Result<(), TestCaseError> {
    for (i, (x, y)) in inc.iter().zip(full).enumerate() {
        eq_or_fail(&format!("{what}[{i}]"), x, y)?;
    }
    if inc.len() != full.len() {
        let (longer, which) = if inc.len() > full.len() {
            (inc, "incremental")
        } else {
            (full, "full")
        };
        let extra = &longer[inc.len().min(full.len())..];
        return Err(TestCaseError::fail(format!(
            "{what}: incremental has {} items, full {}; only {which} has {extra:?}",
            inc.len(),
            full.len(),
        )));
    }
    Ok(())
}
