//! Request cookies by name, for canaries (`canary-by-cookie`), session affinity and
//! `upstream-hash-by: $cookie_<name>`.

/// The value of cookie `name` in `Cookie` field values (`a=1; b=2`).
pub(crate) fn cookie<'a>(values: impl Iterator<Item = &'a [u8]>, name: &str) -> Option<&'a [u8]> {
    values
        .flat_map(|value| value.split(|&b| b == b';'))
        .map(<[u8]>::trim_ascii)
        .find_map(|pair| {
            let (key, value) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
            (key == name.as_bytes()).then(|| &value[1..])
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_by_exact_name() {
        let values: [&[u8]; 2] = [b"a=1; canary=always", b"other=x"];
        assert_eq!(cookie(values.into_iter(), "canary"), Some(&b"always"[..]));
        assert_eq!(cookie(values.into_iter(), "other"), Some(&b"x"[..]));
        assert_eq!(cookie(values.into_iter(), "canar"), None);
        let empty: [&[u8]; 1] = [b"flag; canary="];
        assert_eq!(cookie(empty.into_iter(), "canary"), Some(&b""[..]));
    }
}
