//! The fields a proxied response gets on its way to the client, decided once by the
//! pipeline and applied by whichever writer sends the head: the route's set fields (CORS,
//! `more_set_headers`, HSTS), Gateway API `ResponseHeaderModifier` add and remove, the
//! session affinity cookie and the auth service's cookies.

use http::{HeaderMap, HeaderName, HeaderValue};
use sluice_routing::{ADD_HEADER_STATUSES, ResponseRewrites};

use crate::pipeline::snippet::SnippetResponse;
use crate::settings::ServerHeader;
use crate::snapshot::Snapshot;

/// The edits of one response, kept with the request's snapshot (the route's add and
/// remove lists are read from it, not copied).
#[derive(Debug)]
pub(crate) struct Edits {
    /// Fields that replace the upstream's of the same name.
    pub(crate) set: Vec<(HeaderName, HeaderValue)>,
    /// The route entry whose add and remove lists apply.
    pub(crate) entry: usize,
    /// `Set-Cookie` values added to the upstream's: the session affinity cookie, then
    /// the auth service's (nginx `add_header Set-Cookie $auth_cookie`).
    pub(crate) cookies: Vec<HeaderValue>,
    /// How many of `cookies`, the last ones, are the auth service's: sent on nginx's
    /// `add_header` statuses only, unless [`Edits::auth_cookies_always`].
    pub(crate) auth_cookies: usize,
    /// `auth-always-set-cookie`: the auth service's cookies go with every status.
    pub(crate) auth_cookies_always: bool,
    /// A snippet's `add_header`s and wildcard `more_clear_headers`.
    pub(crate) snippet: Option<Box<SnippetResponse>>,
}

impl Edits {
    /// The edits as the writers take them for a response with `status`, borrowed from
    /// `snapshot`.
    pub(crate) fn resolve<'s>(&'s self, snapshot: &'s Snapshot, status: u16) -> ResponseEdits<'s> {
        let policy = &snapshot.table.entry(self.entry).policy;
        let sent = if self.auth_cookies_always || ADD_HEADER_STATUSES.contains(&status) {
            self.cookies.len()
        } else {
            self.cookies.len().saturating_sub(self.auth_cookies)
        };
        ResponseEdits {
            set: &self.set,
            add: &policy.response_headers_add,
            remove: &policy.response_headers_remove,
            cookies: &self.cookies[..sent],
            rewrites: policy.response_rewrites.as_deref(),
            server: snapshot.settings.server_header,
            snippet: self.snippet.as_deref(),
            status,
        }
    }
}

/// A response's edits, in the order they apply: `set` replaces, `add` appends, `remove`
/// removes whoever set the field (Gateway API `ResponseHeaderModifier`: set, add,
/// remove), then the affinity and auth cookies are appended.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ResponseEdits<'a> {
    /// Replace the upstream's fields of the same name (nginx `more_set_headers`).
    pub(crate) set: &'a [(HeaderName, HeaderValue)],
    /// Appended after the upstream's fields.
    pub(crate) add: &'a [(HeaderName, HeaderValue)],
    /// Never sent, whoever set them.
    pub(crate) remove: &'a [HeaderName],
    /// `Set-Cookie` values appended last, never replacing the upstream's cookies.
    pub(crate) cookies: &'a [HeaderValue],
    /// Rewrites of the upstream's `Location`, `Refresh` and `Set-Cookie` (nginx
    /// `proxy_redirect`, `proxy_cookie_domain`, `proxy_cookie_path`), before the rest.
    pub(crate) rewrites: Option<&'a ResponseRewrites>,
    /// A snippet's edits: its clears apply to every field, its `add_header`s after `add`.
    pub(crate) snippet: Option<&'a SnippetResponse>,
    /// The response's status (nginx `add_header` depends on it).
    pub(crate) status: u16,
    /// What becomes of the upstream's `Server` field (`server-tokens`,
    /// `allow-backend-server-header`).
    pub(crate) server: ServerHeader,
}

/// `Server: sluice`, for `server-tokens: "true"`.
pub(crate) const OUR_SERVER: &[u8] = b"sluice";

impl ResponseEdits<'_> {
    /// Whether the upstream's field `name` is dropped for the proxy's `Server` policy:
    /// ingress-nginx's `more_clear_headers Server` unless `allow-backend-server-header`;
    /// replaced by ours with `server-tokens`.
    pub(crate) fn drops_server(&self, name: &[u8]) -> bool {
        self.server != ServerHeader::Backend && name.eq_ignore_ascii_case(b"server")
    }
}

impl ResponseEdits<'_> {
    /// Applies the edits to a header map (responses hyper writes).
    pub(crate) fn apply(&self, headers: &mut HeaderMap) {
        if let Some(rewrites) = self.rewrites {
            for name in [
                http::header::LOCATION,
                http::header::REFRESH,
                http::header::SET_COOKIE,
            ] {
                let values: Vec<HeaderValue> = headers
                    .get_all(&name)
                    .iter()
                    .map(|value| {
                        rewrites
                            .rewrite(name.as_str().as_bytes(), value.as_bytes())
                            .and_then(|new| HeaderValue::from_bytes(&new).ok())
                            .unwrap_or_else(|| value.clone())
                    })
                    .collect();
                if values.is_empty() {
                    continue;
                }
                headers.remove(&name);
                for value in values {
                    headers.append(&name, value);
                }
            }
        }
        for (name, value) in self.set {
            headers.insert(name, value.clone());
        }
        for (name, value) in self.add {
            headers.append(name, value.clone());
        }
        for name in self.remove {
            headers.remove(name);
        }
        if let Some(snippet) = self.snippet {
            let cleared: Vec<HeaderName> = headers
                .keys()
                .filter(|name| snippet.clears(name.as_str().as_bytes()))
                .cloned()
                .collect();
            for name in cleared {
                headers.remove(&name);
            }
            for (name, value) in snippet.added(self.status) {
                headers.append(name, value.clone());
            }
        }
        for cookie in self.cookies {
            headers.append(http::header::SET_COOKIE, cookie.clone());
        }
        match self.server {
            ServerHeader::Backend => {}
            ServerHeader::None => {
                headers.remove(http::header::SERVER);
            }
            ServerHeader::Ours => {
                headers.insert(http::header::SERVER, HeaderValue::from_static("sluice"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_replaces_add_appends_remove_wins_cookie_last_gateway_api_response_header_modifier() {
        let mut headers = HeaderMap::new();
        headers.insert("x-a", HeaderValue::from_static("upstream"));
        headers.insert("x-gone", HeaderValue::from_static("upstream"));
        headers.insert("set-cookie", HeaderValue::from_static("app=1"));
        let set = [(
            HeaderName::from_static("x-a"),
            HeaderValue::from_static("set"),
        )];
        let add = [
            (
                HeaderName::from_static("x-a"),
                HeaderValue::from_static("added"),
            ),
            (
                HeaderName::from_static("x-gone"),
                HeaderValue::from_static("added"),
            ),
        ];
        let remove = [HeaderName::from_static("x-gone")];
        let cookie = [HeaderValue::from_static("route=abc")];
        let edits = ResponseEdits {
            set: &set,
            add: &add,
            remove: &remove,
            cookies: &cookie,
            rewrites: None,
            server: ServerHeader::Backend,
            snippet: None,
            status: 200,
        };
        edits.apply(&mut headers);
        let all = |name: &str| -> Vec<&str> {
            headers
                .get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap())
                .collect()
        };
        assert_eq!(all("x-a"), ["set", "added"]);
        assert!(all("x-gone").is_empty());
        assert_eq!(all("set-cookie"), ["app=1", "route=abc"]);
    }
}
