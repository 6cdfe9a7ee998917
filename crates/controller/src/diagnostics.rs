//! Reporting the compiler's diagnostics once, when they appear, not on every rebuild.

use sluice_routing::Diagnostic;
use std::collections::HashSet;

/// Remembers which diagnostics were reported, to report each one only when it appears.
#[derive(Debug, Default)]
pub struct Seen {
    current: HashSet<(String, String, String)>,
}

fn key(d: &Diagnostic) -> (String, String, String) {
    (d.object.to_string(), d.field.clone(), d.message.clone())
}

impl Seen {
    /// The diagnostics in `now` that were not in the previous call's set. A diagnostic that
    /// disappears and comes back is new again.
    pub fn appeared<'a>(&mut self, now: &'a [Diagnostic]) -> Vec<&'a Diagnostic> {
        let next: HashSet<_> = now.iter().map(key).collect();
        let fresh = now
            .iter()
            .filter(|d| !self.current.contains(&key(d)))
            .collect();
        self.current = next;
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_routing::{ObjectRef, Reason};

    fn diag(name: &str) -> Diagnostic {
        Diagnostic {
            object: ObjectRef {
                kind: "Ingress",
                namespace: "ns".into(),
                name: name.into(),
            },
            field: "spec.rules[0].host".into(),
            reason: Reason::InvalidHost,
            message: format!("Ingress ns/{name}: bad host"),
        }
    }

    #[test]
    fn reports_on_appearance_only() {
        let mut seen = Seen::default();
        let (a, b) = (diag("a"), diag("b"));
        assert_eq!(seen.appeared(std::slice::from_ref(&a)).len(), 1);
        assert!(
            seen.appeared(std::slice::from_ref(&a)).is_empty(),
            "same again: silent"
        );
        let both = [a.clone(), b.clone()];
        assert_eq!(seen.appeared(&both), vec![&b]);
        assert!(seen.appeared(&[]).is_empty());
        assert_eq!(
            seen.appeared(&both).len(),
            2,
            "gone and back: reported again"
        );
    }
}
