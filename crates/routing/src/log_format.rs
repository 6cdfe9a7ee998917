//! ingress-nginx's `log-format-upstream` (nginx's `log_format` directive): the format read
//! into literal text and the variables sluice can supply, and its rendering with nginx's
//! three escapings (`escape=default`, `escape=json`, `escape=none`). Pure: the proxy hands
//! in each variable's value.

use std::fmt::Write as _;

/// ingress-nginx's default `log-format-upstream` (`internal/ingress/controller/config/config.go`,
/// `logFormatUpstream`).
pub const INGRESS_NGINX_LOG_FORMAT: &str = "$remote_addr - $remote_user [$time_local] \
     \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" \
     $request_length $request_time [$proxy_upstream_name] [$proxy_alternative_upstream_name] \
     $upstream_addr $upstream_response_length $upstream_response_time $upstream_status $req_id";

/// A variable of a log format that sluice supplies (nginx's name in the comment).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LogVariable {
    /// `$remote_addr`: the client's address (after the trusted proxies' fields).
    RemoteAddr,
    /// `$remote_port`: the client's port.
    RemotePort,
    /// `$server_port`: the port of the listener the client connected to.
    ServerPort,
    /// `$ssl_protocol`: `TLSv1.2`, `TLSv1.3` (missing without TLS).
    SslProtocol,
    /// `$ssl_cipher`: the cipher suite's OpenSSL name (missing without TLS).
    SslCipher,
    /// `$remote_user`: the user of an `Authorization: Basic` field.
    RemoteUser,
    /// `$time_local`: `27/Nov/2026:04:22:21 +0000`.
    TimeLocal,
    /// `$time_iso8601`: `2026-11-27T04:22:21+00:00`.
    TimeIso8601,
    /// `$msec`: seconds since the epoch, with milliseconds.
    Msec,
    /// `$request`: the request line (`GET /x?y HTTP/1.1`).
    Request,
    /// `$request_method`.
    RequestMethod,
    /// `$request_uri`: the target as sent, with its query.
    RequestUri,
    /// `$uri`: the normalised path.
    Uri,
    /// `$args` and `$query_string`: the query, without `?`.
    Args,
    /// `$server_protocol`: `HTTP/1.1`, `HTTP/2.0`.
    ServerProtocol,
    /// `$scheme`: `http` or `https`.
    Scheme,
    /// `$host`: the host asked for, lower case, without port.
    Host,
    /// `$status`: the status sent.
    Status,
    /// `$body_bytes_sent`: the response body's bytes sent.
    BodyBytesSent,
    /// `$bytes_sent`: the bytes sent (sluice counts the body).
    BytesSent,
    /// `$request_length`: the request's head and body bytes.
    RequestLength,
    /// `$request_time`: seconds from the request's head to the last byte sent.
    RequestTime,
    /// `$http_<name>`: a request field (`_` for `-`), lower case, `-` separated.
    Header(Box<str>),
    /// `$proxy_upstream_name`: ingress-nginx's `namespace-service-port` of the route.
    ProxyUpstreamName,
    /// `$proxy_alternative_upstream_name`: the canary's, when the canary answered.
    ProxyAlternativeUpstreamName,
    /// `$upstream_addr`: the endpoint asked.
    UpstreamAddr,
    /// `$upstream_response_length`: the response body's bytes from the endpoint.
    UpstreamResponseLength,
    /// `$upstream_response_time`: seconds until the endpoint's response was over.
    UpstreamResponseTime,
    /// `$upstream_status`: the endpoint's status.
    UpstreamStatus,
    /// `$req_id`: ingress-nginx's request id (`X-Request-ID`, else made for the request).
    ReqId,
    /// `$namespace`: the Ingress's namespace.
    Namespace,
    /// `$ingress_name`.
    IngressName,
    /// `$service_name`.
    ServiceName,
    /// `$service_port`.
    ServicePort,
}

impl LogVariable {
    /// The variable nginx names `name` (without `$`); `None`: one sluice cannot supply.
    pub fn named(name: &str) -> Option<LogVariable> {
        use LogVariable::*;
        Some(match name {
            "remote_addr" => RemoteAddr,
            "remote_port" => RemotePort,
            "server_port" => ServerPort,
            "ssl_protocol" => SslProtocol,
            "ssl_cipher" => SslCipher,
            "remote_user" => RemoteUser,
            "time_local" => TimeLocal,
            "time_iso8601" => TimeIso8601,
            "msec" => Msec,
            "request" => Request,
            "request_method" => RequestMethod,
            "request_uri" => RequestUri,
            "uri" | "document_uri" => Uri,
            "args" | "query_string" => Args,
            "server_protocol" => ServerProtocol,
            "scheme" => Scheme,
            "host" => Host,
            "status" => Status,
            "body_bytes_sent" => BodyBytesSent,
            "bytes_sent" => BytesSent,
            "request_length" => RequestLength,
            "request_time" => RequestTime,
            "proxy_upstream_name" => ProxyUpstreamName,
            "proxy_alternative_upstream_name" => ProxyAlternativeUpstreamName,
            "upstream_addr" => UpstreamAddr,
            "upstream_response_length" => UpstreamResponseLength,
            "upstream_response_time" => UpstreamResponseTime,
            "upstream_status" => UpstreamStatus,
            "req_id" => ReqId,
            "namespace" => Namespace,
            "ingress_name" => IngressName,
            "service_name" => ServiceName,
            "service_port" => ServicePort,
            _ => {
                let field = name.strip_prefix("http_").filter(|f| !f.is_empty())?;
                Header(field.to_ascii_lowercase().replace('_', "-").into())
            }
        })
    }
}

/// One piece of a format: text as written, or a variable's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogSegment {
    /// Written as it is.
    Text(Box<str>),
    /// Replaced by the variable's value, escaped.
    Variable(LogVariable),
}

/// How variable values are escaped (nginx's `log_format ... escape=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogEscape {
    /// nginx's default: `"`, `\`, control and non-ASCII bytes as `\xXX`.
    #[default]
    Default,
    /// `log-format-escape-json`: JSON string escaping.
    Json,
    /// `log-format-escape-none`: values as they are.
    None,
}

/// A parsed `log-format-upstream`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFormat {
    /// The pieces, in order.
    pub segments: Vec<LogSegment>,
    /// As written, for Events and explain.
    pub source: String,
}

impl LogFormat {
    /// Reads an nginx `log_format` string: `$name` and `${name}` are variables, everything
    /// else is text. A variable sluice cannot supply, or a `$` without a name, is refused
    /// with an error naming it.
    pub fn parse(format: &str) -> Result<LogFormat, String> {
        // One line per request: a newline in the format would split it.
        if format.chars().any(char::is_control) {
            return Err(format!("{format:?} holds control characters"));
        }
        let mut segments = Vec::new();
        let mut text = String::new();
        let mut rest = format;
        while let Some(at) = rest.find('$') {
            text.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let (name, next) = if let Some(braced) = after.strip_prefix('{') {
                let end = braced
                    .find('}')
                    .ok_or_else(|| format!("\"${{{braced}\": the variable's `}}` is missing"))?;
                (&braced[..end], &braced[end + 1..])
            } else {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            };
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!(
                    "a \"$\" at byte {} is not followed by a variable name",
                    format.len() - rest.len() + at
                ));
            }
            let variable = LogVariable::named(name).ok_or_else(|| {
                format!("${name} is not a variable sluice can log (see docs/configmap.md, the access log's format)")
            })?;
            if !text.is_empty() {
                segments.push(LogSegment::Text(std::mem::take(&mut text).into()));
            }
            segments.push(LogSegment::Variable(variable));
            rest = next;
        }
        text.push_str(rest);
        if !text.is_empty() {
            segments.push(LogSegment::Text(text.into()));
        }
        Ok(LogFormat {
            segments,
            source: format.to_owned(),
        })
    }

    /// The variables used, in order (a variable used twice is named twice).
    pub fn variables(&self) -> impl Iterator<Item = &LogVariable> {
        self.segments.iter().filter_map(|s| match s {
            LogSegment::Variable(v) => Some(v),
            LogSegment::Text(_) => None,
        })
    }

    /// Whether the format uses `variable`.
    pub fn uses(&self, variable: &LogVariable) -> bool {
        self.variables().any(|v| v == variable)
    }

    /// Appends the line (without its newline): `value` writes a variable's value into the
    /// buffer it is given and says whether there is one; a missing value is `-`, as nginx
    /// logs it.
    pub fn render(
        &self,
        escape: LogEscape,
        out: &mut String,
        mut value: impl FnMut(&LogVariable, &mut Vec<u8>) -> bool,
    ) {
        let mut buffer = Vec::new();
        for segment in &self.segments {
            match segment {
                LogSegment::Text(text) => out.push_str(text),
                LogSegment::Variable(variable) => {
                    buffer.clear();
                    if value(variable, &mut buffer) {
                        push_escaped(out, &buffer, escape);
                    } else {
                        out.push('-');
                    }
                }
            }
        }
    }
}

/// Appends `value` escaped as nginx's `log_format` does with `escape`. Bytes that are not
/// UTF-8 become U+FFFD with `Json` and `None` (the line is text); with `Default` they are
/// `\xXX` like every non-ASCII byte.
pub fn push_escaped(out: &mut String, value: &[u8], escape: LogEscape) {
    match escape {
        LogEscape::Default => {
            // ngx_http_log_escape: `"`, `\`, bytes below 0x20 and from 0x7f.
            for &b in value {
                if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
                    let _ = write!(out, "\\x{b:02X}");
                } else {
                    out.push(char::from(b));
                }
            }
        }
        LogEscape::Json => {
            // ngx_escape_json.
            for c in String::from_utf8_lossy(value).chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    '\u{8}' => out.push_str("\\b"),
                    '\u{c}' => out.push_str("\\f"),
                    c if (c as u32) < 0x20 => {
                        let _ = write!(out, "\\u{:04x}", c as u32);
                    }
                    c => out.push(c),
                }
            }
        }
        LogEscape::None => out.push_str(&String::from_utf8_lossy(value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn render(format: &LogFormat, escape: LogEscape, values: &[(&str, &[u8])]) -> String {
        let mut out = String::new();
        format.render(escape, &mut out, |variable, buffer| {
            let name = match variable {
                LogVariable::Header(name) => format!("http:{name}"),
                other => format!("{other:?}"),
            };
            match values.iter().find(|(n, _)| *n == name) {
                Some((_, v)) => {
                    buffer.extend_from_slice(v);
                    true
                }
                None => false,
            }
        });
        out
    }

    /// ingress-nginx's default `log-format-upstream` parses: every variable it uses is one
    /// sluice supplies.
    #[test]
    fn ingress_nginx_default_format_parses() {
        let format = LogFormat::parse(INGRESS_NGINX_LOG_FORMAT).unwrap();
        let used: Vec<_> = format.variables().cloned().collect();
        assert_eq!(used.len(), 17);
        assert_eq!(used[0], LogVariable::RemoteAddr);
        assert_eq!(used[6], LogVariable::Header("referer".into()));
        assert_eq!(used[16], LogVariable::ReqId);
        assert_eq!(
            format.segments[1],
            LogSegment::Text(" - ".into()),
            "text between variables is kept"
        );
    }

    /// nginx `log_format`: `$name` ends at the first byte that is not a letter, digit or
    /// `_`; `${name}` may be followed by name characters.
    #[test]
    fn variables_plain_and_braced() {
        let format = LogFormat::parse("${status}ok $uri.x $http_X_Forwarded_For").unwrap();
        assert_eq!(
            format.segments,
            [
                LogSegment::Variable(LogVariable::Status),
                LogSegment::Text("ok ".into()),
                LogSegment::Variable(LogVariable::Uri),
                LogSegment::Text(".x ".into()),
                LogSegment::Variable(LogVariable::Header("x-forwarded-for".into())),
            ]
        );
        assert!(format.uses(&LogVariable::Uri) && !format.uses(&LogVariable::Host));
    }

    #[test]
    fn unknown_and_malformed_variables_are_refused_by_name() {
        for (format, said) in [
            ("$remote_addr $ssl_client_s_dn", "$ssl_client_s_dn"),
            ("$upstream_cache_status", "$upstream_cache_status"),
            ("a $ b", "not followed by a variable name"),
            ("${status", "`}` is missing"),
            ("${sta-tus}", "not followed by a variable name"),
            ("$http_", "$http_"),
            ("$status\n", "control characters"),
        ] {
            let error = LogFormat::parse(format).expect_err(format);
            assert!(error.contains(said), "{format}: {error}");
        }
    }

    /// nginx's `ngx_http_log_escape` (escape=default), `ngx_escape_json` (escape=json),
    /// and escape=none; a missing value is `-`.
    #[test]
    fn escapings_as_nginx() {
        let format = LogFormat::parse("[$http_user_agent] [$http_referer]").unwrap();
        let agent: &[u8] = b"a\"b\\c\n\x7f\xc3\xa9";
        let values = [("http:user-agent", agent)];
        assert_eq!(
            render(&format, LogEscape::Default, &values),
            "[a\\x22b\\x5Cc\\x0A\\x7F\\xC3\\xA9] [-]"
        );
        assert_eq!(
            render(&format, LogEscape::Json, &values),
            "[a\\\"b\\\\c\\n\u{7f}é] [-]"
        );
        assert_eq!(
            render(&format, LogEscape::None, &values),
            "[a\"b\\c\n\u{7f}é] [-]"
        );
        // An empty value is empty, not missing.
        assert_eq!(
            render(&format, LogEscape::Default, &[("http:referer", b"")]),
            "[-] []"
        );
    }

    proptest! {
        /// ingress-nginx "log-format-escape-json": a JSON-shaped format renders valid JSON
        /// whatever bytes the values hold.
        #[test]
        fn json_format_with_escape_json_is_always_json(
            agent in proptest::collection::vec(any::<u8>(), 0..40),
            uri in ".{0,30}",
            user in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..10)),
        ) {
            let format = LogFormat::parse(
                r#"{"agent":"$http_user_agent","uri":"$request_uri","user":"$remote_user","status":$status}"#,
            ).unwrap();
            let mut out = String::new();
            format.render(LogEscape::Json, &mut out, |variable, buffer| match variable {
                LogVariable::Header(_) => { buffer.extend_from_slice(&agent); true }
                LogVariable::RequestUri => { buffer.extend_from_slice(uri.as_bytes()); true }
                LogVariable::RemoteUser => match &user {
                    Some(user) => { buffer.extend_from_slice(user); true }
                    None => false,
                },
                LogVariable::Status => { buffer.extend_from_slice(b"200"); true }
                _ => false,
            });
            let parsed: serde_json::Value = serde_json::from_str(&out)
                .map_err(|e| TestCaseError::fail(format!("{out}: {e}")))?;
            prop_assert_eq!(parsed["uri"].as_str(), Some(uri.as_str()));
            prop_assert_eq!(
                parsed["agent"].as_str().map(str::to_owned),
                Some(String::from_utf8_lossy(&agent).into_owned())
            );
        }
    }
}
