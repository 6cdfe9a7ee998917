//! What sluice does with each key of ingress-nginx's ConfigMap (ingress-nginx docs,
//! "ConfigMaps", the table of configuration options), for the Events on the ConfigMap,
//! `sluice migrate` and the table of docs/configmap.md.

/// What sluice does with a ConfigMap key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// The default of the Ingress annotation of the same name: every Ingress without the
    /// annotation gets the ConfigMap's value (annotations override, as in ingress-nginx).
    /// Read live.
    AnnotationDefault,
    /// Applied to every request of every Ingress host. Read live.
    Server,
    /// A setting of the whole proxy (every listener and request, Gateway API routes too):
    /// overrides the flag of the same meaning where there is one, named here. Read live.
    Global(Option<&'static str>),
    /// A setting of the whole process: this flag of `sluice serve` and `sluice controller`.
    Flag(&'static str),
    /// Not applied; what to use instead, or why there is nothing to set.
    No(&'static str),
}

/// Keys whose values are Ingress annotation defaults (the same name and value syntax).
const ANNOTATION_DEFAULTS: &[&str] = &[
    "custom-http-errors",
    "denylist-source-range",
    "force-ssl-redirect",
    "limit-rate",
    "limit-rate-after",
    "load-balance",
    "proxy-body-size",
    "proxy-buffering",
    "proxy-connect-timeout",
    "proxy-next-upstream",
    "proxy-next-upstream-timeout",
    "proxy-next-upstream-tries",
    "proxy-read-timeout",
    "proxy-request-buffering",
    "proxy-send-timeout",
    "ssl-redirect",
    "whitelist-source-range",
];

/// Keys applied to every request of every Ingress host.
const SERVER: &[&str] = &[
    "block-cidrs",
    "block-user-agents",
    "block-referers",
    "allow-snippet-annotations",
    "annotations-risk-level",
];

/// What sluice does with `key`; `None`: not a key of ingress-nginx's ConfigMap.
pub fn support(key: &str) -> Option<Support> {
    use Support::*;
    if ANNOTATION_DEFAULTS.contains(&key) {
        return Some(AnnotationDefault);
    }
    if SERVER.contains(&key) || super::global_auth::KEYS.contains(&key) {
        return Some(Server);
    }
    let flag = |f| Some(Flag(f));
    let global = |f| Some(Global(Some(f)));
    let global_only = Some(Global(None));
    match key {
        "use-gzip" => global("--gzip"),
        "gzip-level" => global("--gzip-level"),
        "gzip-min-length" => global("--gzip-min-length"),
        "gzip-types" => global("--gzip-types"),
        "gzip-disable" => global("--gzip-disable"),
        "enable-brotli" => global("--brotli"),
        "brotli-level" => global("--brotli-level"),
        "brotli-min-length" => global("--brotli-min-length"),
        "brotli-types" => global("--brotli-types"),
        "global-rate-limit-memcached-host" => global("--global-rate-limit-memcached-host"),
        "global-rate-limit-memcached-port" => global("--global-rate-limit-memcached-port"),
        "global-rate-limit-memcached-connect-timeout" => {
            global("--global-rate-limit-memcached-connect-timeout")
        }
        "global-rate-limit-memcached-max-idle-timeout" => {
            global("--global-rate-limit-memcached-max-idle-timeout")
        }
        "global-rate-limit-memcached-pool-size" => {
            global("--global-rate-limit-memcached-pool-size")
        }
        "global-rate-limit-status-code" => global("--global-rate-limit-status-code"),
        "limit-req-status-code" => global("--limit-req-status-code"),
        "limit-conn-status-code" => global("--limit-req-status-code"),
        "use-forwarded-headers" | "proxy-real-ip-cidr" | "enable-real-ip" => {
            global("--trusted-proxies")
        }
        "compute-full-forwarded-for" | "forwarded-for-header" => global("--trusted-proxies"),
        "use-proxy-protocol" => global("--proxy-protocol"),
        "enable-underscores-in-headers" => global("--allow-underscore-headers"),
        "hsts" => global("--hsts"),
        "hsts-max-age" => global("--hsts-max-age"),
        "hsts-include-subdomains" => global("--hsts-include-subdomains"),
        "hsts-preload" => global("--hsts-preload"),
        "client-header-timeout" => global("--client-header-timeout"),
        "client-body-timeout" => global("--client-body-timeout"),
        "keep-alive" => global("--idle-timeout"),
        "keep-alive-requests" => global_only,
        "upstream-keepalive-timeout" => global("--idle-timeout"),
        "upstream-keepalive-requests"
        | "upstream-keepalive-time"
        | "upstream-keepalive-connections" => global_only,
        "server-tokens" | "allow-backend-server-header" => global_only,
        "disable-access-log" => global("--access-log"),
        "large-client-header-buffers" => global("--max-header-bytes"),
        "worker-processes" => flag("--workers"),
        "worker-shutdown-timeout" => flag("--drain-timeout"),
        "access-log-path" | "http-access-log-path" => flag("--access-log"),
        "client-header-buffer-size" => Some(No(
            "one buffer per connection grows to --max-header-bytes (large-client-header-buffers)",
        )),
        "enable-opentelemetry" => global("--enable-opentelemetry"),
        "opentelemetry-trust-incoming-span" => global("--opentelemetry-trust-incoming-span"),
        "opentelemetry-operation-name" => global("--opentelemetry-operation-name"),
        "otlp-collector-host" => global("--otlp-collector-host"),
        "otlp-collector-port" => global("--otlp-collector-port"),
        "otel-service-name" => global("--otel-service-name"),
        "otel-sampler" => global("--otel-sampler"),
        "otel-sampler-ratio" => global("--otel-sampler-ratio"),
        "otel-sampler-parent-based" => global("--otel-sampler-parent-based"),
        "otel-max-queuesize" => global("--otel-max-queuesize"),
        "otel-schedule-delay-millis" => global("--otel-schedule-delay-millis"),
        "otel-max-export-batch-size" => global("--otel-max-export-batch-size"),
        "annotation-value-word-blocklist" => Some(No(
            "nothing is templated into configuration: interpreted snippets are read \
             directive by directive",
        )),
        "ssl-protocols"
        | "ssl-ciphers"
        | "ssl-session-tickets"
        | "ssl-session-cache"
        | "ssl-session-cache-size" => global_only,
        "ssl-ecdh-curve" | "ssl-dh-param" => Some(No(
            "rustls's key exchanges (X25519, P-256, P-384) apply; there is no finite-field DH",
        )),
        "ssl-session-ticket-key" => Some(No(
            "each replica makes its ticket keys at start and rotates them; a ticket resumes on \
             the replica that issued it",
        )),
        "ssl-session-timeout" => Some(No(
            "rustls's lifetimes apply: tickets are valid for 6 hours, cached sessions until \
             the cache is full",
        )),
        "use-http2" => Some(No("HTTP/2 is always offered (ALPN h2) on HTTPS")),
        "log-format-upstream" | "log-format-escape-json" | "log-format-escape-none" => {
            global("--access-log")
        }
        "log-format-stream" => Some(No("stream (TCP/UDP) routes have no access log")),
        "service-upstream" => Some(No(
            "sluice sends to the endpoints, not the Service's ClusterIP",
        )),
        "main-snippet"
        | "http-snippet"
        | "server-snippet"
        | "stream-snippet"
        | "location-snippet"
        | "modsecurity-snippet" => {
            Some(No("snippets are nginx configuration; sluice refuses them"))
        }
        "global-auth-snippet" => Some(No(
            "snippets are nginx configuration: sluice interprets only configuration-snippet \
             and server-snippet, and only where allow-snippet-annotations allows them; the \
             global auth request goes without it",
        )),
        "enable-modsecurity" | "enable-owasp-modsecurity-crs" => {
            Some(No("ModSecurity is not part of sluice"))
        }
        _ if key.starts_with("jaeger-") => {
            Some(No("Jaeger tracing was removed from ingress-nginx"))
        }
        _ if KNOWN_NGINX_INTERNALS.contains(&key) => Some(No(
            "an nginx internal (buffers, hash tables, workers, logs, Lua) with no equivalent",
        )),
        _ if KNOWN_OTHERS.contains(&key) => Some(No("not supported yet")),
        _ => None,
    }
}

/// ingress-nginx keys for nginx internals.
const KNOWN_NGINX_INTERNALS: &[&str] = &[
    "access-log-params",
    "client-body-buffer-size",
    "enable-aio-write",
    "enable-multi-accept",
    "enable-serial-reloads",
    "error-log-level",
    "error-log-path",
    "grpc-buffer-size-kb",
    "http2-max-concurrent-streams",
    "http2-max-field-size",
    "http2-max-header-size",
    "http2-max-requests",
    "lua-shared-dicts",
    "map-hash-bucket-size",
    "max-worker-connections",
    "max-worker-open-files",
    "proxy-buffer-size",
    "proxy-buffers-number",
    "proxy-busy-buffers-size",
    "proxy-headers-hash-bucket-size",
    "proxy-headers-hash-max-size",
    "reuse-port",
    "server-name-hash-bucket-size",
    "server-name-hash-max-size",
    "ssl-buffer-size",
    "stream-access-log-path",
    "variables-hash-bucket-size",
    "variables-hash-max-size",
    "worker-cpu-affinity",
];

/// Other ingress-nginx keys sluice does not apply yet.
const KNOWN_OTHERS: &[&str] = &[
    "add-headers",
    "allow-cross-namespace-resources",
    "bind-address",
    "debug-connections",
    "default-type",
    "disable-ipv6",
    "disable-ipv6-dns",
    "enable-access-log-for-default-backend",
    "enable-ocsp",
    "enable-syslog",
    "forwarded-for-proxy-protocol-header",
    "generate-request-id",
    "geoip2-autoreload-in-minutes",
    "hide-headers",
    "http-redirect-code",
    "ignore-invalid-headers",
    "limit-conn-zone-variable",
    "nginx-status-ipv4-whitelist",
    "nginx-status-ipv6-whitelist",
    "no-tls-redirect-locations",
    "proxy-add-original-uri-header",
    "proxy-cookie-domain",
    "proxy-cookie-path",
    "proxy-protocol-header-timeout",
    "proxy-redirect-from",
    "proxy-set-headers",
    "proxy-ssl-location-only",
    "proxy-stream-next-upstream",
    "proxy-stream-next-upstream-timeout",
    "proxy-stream-next-upstream-tries",
    "proxy-stream-responses",
    "proxy-stream-timeout",
    "relative-redirects",
    "retry-non-idempotent",
    "skip-access-log-urls",
    "ssl-reject-handshake",
    "strict-validate-path-type",
    "syslog-host",
    "syslog-port",
    "use-geoip",
    "use-geoip2",
];
