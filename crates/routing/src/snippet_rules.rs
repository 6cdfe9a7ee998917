//! What the interpreted nginx snippets (`configuration-snippet`, `server-snippet`) do at
//! request time: the part of them that depends on the request (variables, `if`, `rewrite`,
//! `return`, status-dependent `add_header`). The parts that do not are lowered into the
//! ordinary [`crate::Policy`] fields by `ingress/annotations/snippet`.
//!
//! Pure data plus a pure evaluation ([`SnippetRules::run`]): the proxy hands in the
//! request's facts and applies the [`SnippetOutcome`]. Values are [`Template`]s of literal
//! text and a fixed set of variables, never configuration text.

use http::{HeaderName, HeaderValue};

/// An nginx variable a snippet may use (any other makes its directive refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    /// `$host`: the request's host, without port, lower case.
    Host,
    /// `$request_uri`: the target as the client sent it (path and query).
    RequestUri,
    /// `$uri`: the normalised path, as rewritten so far.
    Uri,
    /// `$scheme`: `http` or `https`.
    Scheme,
    /// `$remote_addr`: the client's address.
    RemoteAddr,
    /// `$args` (alias `$query_string`): the query, without `?`, as rewritten so far.
    Args,
    /// `$request_method`.
    RequestMethod,
    /// `$http_<name>`: a request field (`_` in the name for `-`); empty when absent.
    Header(HeaderName),
    /// `$1`..`$9`: a capture of the last regex that matched (`rewrite`, `if`).
    Capture(u8),
}

/// A piece of a [`Template`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Literal text.
    Text(String),
    /// A variable's value.
    Var(Var),
}

/// A value with variables, expanded per request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Template(pub Vec<Part>);

impl Template {
    /// The text when it has no variables.
    pub fn constant(&self) -> Option<String> {
        let mut out = String::new();
        for part in &self.0 {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Var(_) => return None,
            }
        }
        Some(out)
    }

    /// Whether the template starts with a scheme (`http://`, `https://` or `$scheme`), which
    /// makes a `rewrite` replacement or a `return` target a redirect (nginx).
    pub fn is_absolute_url(&self) -> bool {
        match self.0.first() {
            Some(Part::Var(Var::Scheme)) => true,
            Some(Part::Text(text)) => text.starts_with("http://") || text.starts_with("https://"),
            _ => false,
        }
    }

    /// The expanded text.
    pub fn expand(&self, facts: &Facts<'_>, state: &State) -> String {
        let mut out = String::new();
        for part in &self.0 {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Var(var) => var_value(var, facts, state, &mut out),
            }
        }
        out
    }
}

/// Which response fields a `more_clear_headers` pattern names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderPattern {
    /// One name.
    Exact(HeaderName),
    /// `X-*`: every name starting with this (lower case), as headers-more's trailing `*`.
    Prefix(String),
}

impl HeaderPattern {
    /// Whether the field `name` is covered.
    pub fn matches(&self, name: &[u8]) -> bool {
        match self {
            HeaderPattern::Exact(exact) => exact.as_str().as_bytes().eq_ignore_ascii_case(name),
            HeaderPattern::Prefix(prefix) => {
                name.len() >= prefix.len()
                    && name[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
            }
        }
    }
}

/// nginx `add_header`: added only to responses with the statuses below unless `always`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddHeader {
    /// The field.
    pub name: HeaderName,
    /// Its value.
    pub value: Template,
    /// `always`: every status.
    pub always: bool,
}

/// The statuses nginx's `add_header` applies to without `always`.
pub const ADD_HEADER_STATUSES: &[u16] = &[200, 201, 204, 206, 301, 302, 303, 304, 307, 308];

/// `rewrite`'s flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewriteFlag {
    /// None: the next rewrite directives see the new path.
    Continue,
    /// `last` or `break`: no further rewrite directive runs (sluice does not match the
    /// route again after `last`).
    Break,
    /// `redirect`: 302.
    Redirect,
    /// `permanent`: 301.
    Permanent,
}

/// An `if` condition.
#[derive(Debug, Clone)]
pub enum Condition {
    /// `($var)`: not empty and not `0`.
    Set(Var),
    /// `=` and `!=` (with `negate`).
    Equals {
        /// The variable.
        var: Var,
        /// What it is compared with.
        value: Template,
        /// `!=`.
        negate: bool,
    },
    /// `~`, `~*`, `!~`, `!~*`.
    Matches {
        /// The variable.
        var: Var,
        /// The regex (case-insensitive for `~*`).
        regex: regex::Regex,
        /// `!~`, `!~*`.
        negate: bool,
    },
}

/// A rewrite-phase step, in the snippet's order.
#[derive(Debug, Clone)]
pub enum Step {
    /// `return code [text|URL]`.
    Return {
        /// The status.
        status: u16,
        /// The `Location` of a redirect status, else the body.
        text: Option<Template>,
    },
    /// `rewrite regex replacement [flag]`.
    Rewrite {
        /// Matched against the path.
        regex: regex::Regex,
        /// The new path (and query), `$1`.. for captures.
        replacement: Template,
        /// The flag.
        flag: RewriteFlag,
    },
    /// `if (condition) { ... }`.
    If {
        /// The condition.
        condition: Condition,
        /// What runs when it holds.
        then: Vec<Step>,
    },
    /// `more_set_headers` inside an `if`.
    SetResponse(HeaderName, Template),
    /// `more_clear_headers` inside an `if`.
    ClearResponse(HeaderPattern),
    /// `add_header` inside an `if`.
    AddResponse(AddHeader),
}

/// What the snippets of a route do per request.
#[derive(Debug, Clone, Default)]
pub struct SnippetRules {
    /// The snippet texts these came from (what equality compares).
    pub source: Vec<String>,
    /// Rewrite-phase steps: server snippet's first, then the location's.
    pub steps: Vec<Step>,
    /// Request fields with variables (`proxy_set_header`, `more_set_input_headers`).
    pub request_set: Vec<(HeaderName, Template)>,
    /// Response fields with variables (`more_set_headers`), replacing the upstream's.
    pub response_set: Vec<(HeaderName, Template)>,
    /// `add_header`s.
    pub response_add: Vec<AddHeader>,
    /// `more_clear_headers` with a wildcard.
    pub response_clear: Vec<HeaderPattern>,
}

impl PartialEq for SnippetRules {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for SnippetRules {}

/// The request as a snippet sees it.
pub struct Facts<'a> {
    /// The host without port, lower case.
    pub host: &'a str,
    /// The target as received.
    pub request_uri: &'a str,
    /// The normalised path.
    pub path: &'a str,
    /// The query as received (without `?`), empty for none.
    pub query: &'a str,
    /// `http` or `https`.
    pub scheme: &'a str,
    /// The client's address.
    pub remote_addr: &'a str,
    /// The method.
    pub method: &'a str,
    /// A request field's value by lower-case name.
    pub field: &'a dyn Fn(&str) -> Option<&'a [u8]>,
}

/// The state a request's steps build: the path and query as rewritten, the captures.
pub struct State {
    /// `$uri`.
    pub path: String,
    /// `$args`.
    pub query: String,
    /// `$1`..`$9` of the last match.
    captures: Vec<Option<String>>,
}

/// A snippet's own answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnippetAnswer {
    /// The status.
    pub status: u16,
    /// `Location`, for a redirect.
    pub location: Option<String>,
    /// The body of a `return code text`.
    pub body: Option<String>,
}

/// What the snippets decided for one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnippetOutcome {
    /// Answer now.
    pub answer: Option<SnippetAnswer>,
    /// The path and query to send upstream, when a rewrite changed them.
    pub target: Option<String>,
    /// The rewritten path (not escaped) and query, when a rewrite changed them.
    pub rewritten: Option<(String, String)>,
    /// A `rewrite ... break|last` ran: no further rewrite (`rewrite-target`) applies.
    pub stopped: bool,
    /// Request fields to set.
    pub request_set: Vec<(HeaderName, HeaderValue)>,
    /// Response fields to set (replacing the upstream's).
    pub response_set: Vec<(HeaderName, HeaderValue)>,
    /// Response fields to add: (name, value, always).
    pub response_add: Vec<(HeaderName, HeaderValue, bool)>,
    /// Response fields to clear.
    pub response_clear: Vec<HeaderPattern>,
}

/// How the step loop ended.
enum Flow {
    Next,
    Stop,
}

impl SnippetRules {
    /// Runs the rules for a request.
    pub fn run(&self, facts: &Facts<'_>) -> SnippetOutcome {
        let mut state = State {
            path: facts.path.to_owned(),
            query: facts.query.to_owned(),
            captures: Vec::new(),
        };
        let mut out = SnippetOutcome::default();
        let _ = run_steps(&self.steps, facts, &mut state, &mut out);
        if out.answer.is_none() && (state.path != facts.path || state.query != facts.query) {
            let mut target = crate::escape_path(&state.path).into_owned();
            if !state.query.is_empty() {
                target.push('?');
                target.push_str(&state.query);
            }
            out.target = Some(target);
            out.rewritten = Some((state.path.clone(), state.query.clone()));
        }
        for (name, value) in &self.request_set {
            if let Ok(value) = HeaderValue::try_from(value.expand(facts, &state)) {
                out.request_set.push((name.clone(), value));
            }
        }
        for (name, value) in &self.response_set {
            if let Ok(value) = HeaderValue::try_from(value.expand(facts, &state)) {
                out.response_set.push((name.clone(), value));
            }
        }
        for add in &self.response_add {
            push_add(add, facts, &state, &mut out);
        }
        out.response_clear
            .extend(self.response_clear.iter().cloned());
        out
    }
}

fn push_add(add: &AddHeader, facts: &Facts<'_>, state: &State, out: &mut SnippetOutcome) {
    // nginx `add_header` with an empty value adds nothing.
    let value = add.value.expand(facts, state);
    if value.is_empty() {
        return;
    }
    if let Ok(value) = HeaderValue::try_from(value) {
        out.response_add.push((add.name.clone(), value, add.always));
    }
}

fn run_steps(
    steps: &[Step],
    facts: &Facts<'_>,
    state: &mut State,
    out: &mut SnippetOutcome,
) -> Flow {
    for step in steps {
        match step {
            Step::Return { status, text } => {
                out.answer = Some(answer_of(*status, text.as_ref(), facts, state));
                return Flow::Stop;
            }
            Step::Rewrite {
                regex,
                replacement,
                flag,
            } => {
                let Some(captures) = regex.captures(&state.path) else {
                    continue;
                };
                // nginx keeps the previous captures when a regex has no groups.
                if regex.captures_len() > 1 {
                    state.captures = captures
                        .iter()
                        .map(|m| m.map(|m| m.as_str().to_owned()))
                        .collect();
                }
                let replaced = replacement.expand(facts, state);
                let redirect = match flag {
                    RewriteFlag::Redirect => Some(302),
                    RewriteFlag::Permanent => Some(301),
                    _ if replacement.is_absolute_url() => Some(302),
                    _ => None,
                };
                let (path, query) = new_path_and_query(&replaced, &state.query);
                if let Some(status) = redirect {
                    let mut location = if replacement.is_absolute_url() {
                        path
                    } else {
                        // nginx makes a relative Location absolute (`absolute_redirect on`,
                        // `server_name_in_redirect off`, ingress-nginx's `port_in_redirect
                        // off`).
                        format!("{}://{}{}", facts.scheme, facts.host, path)
                    };
                    if !query.is_empty() {
                        location.push('?');
                        location.push_str(&query);
                    }
                    out.answer = Some(SnippetAnswer {
                        status,
                        location: Some(location),
                        body: None,
                    });
                    return Flow::Stop;
                }
                state.path = path;
                state.query = query;
                if *flag == RewriteFlag::Break {
                    out.stopped = true;
                    return Flow::Stop;
                }
            }
            Step::If { condition, then } => {
                if holds(condition, facts, state)
                    && let Flow::Stop = run_steps(then, facts, state, out)
                {
                    return Flow::Stop;
                }
            }
            Step::SetResponse(name, value) => {
                if let Ok(value) = HeaderValue::try_from(value.expand(facts, state)) {
                    out.response_set.push((name.clone(), value));
                }
            }
            Step::ClearResponse(pattern) => out.response_clear.push(pattern.clone()),
            Step::AddResponse(add) => push_add(add, facts, state, out),
        }
    }
    Flow::Next
}

/// nginx's `rewrite` replacement: a `?` in it gives new arguments, to which the request's
/// are appended unless it ends in `?`; without one, the request's arguments stay.
fn new_path_and_query(replaced: &str, query: &str) -> (String, String) {
    match replaced.split_once('?') {
        None => (replaced.to_owned(), query.to_owned()),
        Some((path, "")) => (path.to_owned(), String::new()),
        Some((path, args)) if query.is_empty() => (path.to_owned(), args.to_owned()),
        Some((path, args)) => (path.to_owned(), format!("{args}&{query}")),
    }
}

/// nginx `return`: 301, 302, 303, 307 and 308 take a URL (a relative one made absolute),
/// the others a body.
fn answer_of(
    status: u16,
    text: Option<&Template>,
    facts: &Facts<'_>,
    state: &State,
) -> SnippetAnswer {
    let text = text.map(|t| t.expand(facts, state));
    if matches!(status, 301 | 302 | 303 | 307 | 308) {
        let location = text.map(|url| {
            if url.starts_with('/') {
                format!("{}://{}{}", facts.scheme, facts.host, url)
            } else {
                url
            }
        });
        return SnippetAnswer {
            status,
            location,
            body: None,
        };
    }
    SnippetAnswer {
        status,
        location: None,
        // nginx: `return 200;` answers with an empty body, `return 404;` with its page.
        body: text.or_else(|| (status < 400).then(String::new)),
    }
}

fn holds(condition: &Condition, facts: &Facts<'_>, state: &mut State) -> bool {
    let value = |var: &Var, state: &State| {
        let mut out = String::new();
        var_value(var, facts, state, &mut out);
        out
    };
    match condition {
        Condition::Set(var) => {
            let value = value(var, state);
            !value.is_empty() && value != "0"
        }
        Condition::Equals {
            var,
            value: v,
            negate,
        } => (value(var, state) == v.expand(facts, state)) != *negate,
        Condition::Matches { var, regex, negate } => {
            let subject = value(var, state);
            match regex.captures(&subject) {
                Some(captures) => {
                    if !negate && regex.captures_len() > 1 {
                        // nginx: a matching `if` regex with groups sets the captures.
                        state.captures = captures
                            .iter()
                            .map(|m| m.map(|m| m.as_str().to_owned()))
                            .collect();
                    }
                    !negate
                }
                None => *negate,
            }
        }
    }
}

fn var_value(var: &Var, facts: &Facts<'_>, state: &State, out: &mut String) {
    match var {
        Var::Host => out.push_str(facts.host),
        Var::RequestUri => out.push_str(facts.request_uri),
        Var::Uri => out.push_str(&state.path),
        Var::Scheme => out.push_str(facts.scheme),
        Var::RemoteAddr => out.push_str(facts.remote_addr),
        Var::Args => out.push_str(&state.query),
        Var::RequestMethod => out.push_str(facts.method),
        Var::Header(name) => {
            if let Some(value) = (facts.field)(name.as_str()) {
                out.push_str(&String::from_utf8_lossy(value));
            }
        }
        Var::Capture(n) => {
            if let Some(Some(capture)) = state.captures.get(usize::from(*n)) {
                out.push_str(capture);
            }
        }
    }
}
