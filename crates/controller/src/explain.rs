//! `sluice explain URL`: which Ingress and rule a request matches, why the others do not,
//! the backend with its endpoints, and the policy applied. Asks a running sluice's admin
//! port (`/api/v1/explain`, answered from the objects it compiled last) or reads a
//! directory of manifests as `sluice serve` does; the answer is
//! [`sluice_routing::explain`]'s either way.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use serde::de::DeserializeOwned;
use sluice_routing::gateway::{
    Gateway, GatewayClass, GrpcRoute, HttpRoute, ReferenceGrant, TcpRoute, TlsRoute, UdpRoute,
};
use sluice_routing::{ExplainRequest, Inputs};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::manifest_dir::Scanner;
use crate::serve::{ClassArgs, DefaultsArgs};
use crate::sources::manifest_kinds;

/// Flags of `sluice explain`.
#[derive(clap::Args, Clone, Debug)]
pub struct ExplainArgs {
    /// The request: `http://host/path?query`, `https://host/path` (the HTTPS listeners) or
    /// `host/path`.
    #[arg(value_name = "URL")]
    pub url: String,

    /// The request's method (for Gateway API method matches); default `GET`.
    #[arg(short = 'X', long, value_name = "METHOD", default_value = "GET")]
    pub method: String,

    /// A request header field, `Name: value` (repeatable; for Gateway API header matches
    /// and canary headers).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,

    /// Read this directory of manifests (as `sluice serve --manifests` does) instead of
    /// asking a running sluice.
    #[arg(long, value_name = "DIR", conflicts_with = "admin_addr")]
    pub manifests: Option<PathBuf>,

    /// Admin address of the running sluice (its `--admin-addr`) to ask.
    // `--admin`: the spelling of earlier releases, warned about by the binary.
    #[arg(long = "admin-addr", alias = "admin", value_name = "HOST:PORT",
          default_value = "127.0.0.1:10254", value_parser = parse_host_port)]
    pub admin_addr: String,

    /// Which Ingresses are ours (class flags).

    #[command(flatten)]
    pub class: ClassArgs,

    /// Cluster-wide defaults (default backend, certificate).

    #[command(flatten)]
    pub defaults: DefaultsArgs,
}

/// `--admin-addr`: `HOST:PORT` (a name or an address, and a port number).
pub fn parse_host_port(value: &str) -> Result<String, String> {
    match value.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(value.to_owned())
        }
        _ => Err(format!(
            "{value:?} is not an address to ask; expected HOST:PORT, such as \
             127.0.0.1:10254 or sluice.example:10254"
        )),
    }
}

/// `-H 'Name: value'`.
pub fn parse_header(value: &str) -> Result<(String, String), String> {
    match value.split_once(':') {
        Some((name, field))
            if !name.trim().is_empty() && name.trim().bytes().all(|b| b.is_ascii_graphic()) =>
        {
            Ok((name.trim().to_owned(), field.trim().to_owned()))
        }
        _ => Err(format!("{value:?}: expected `Name: value`")),
    }
}

/// The request `args` asks about.
fn request_of(args: &ExplainArgs) -> Result<ExplainRequest, String> {
    let (host, path) = split_url(&args.url)?;
    let query = args
        .url
        .split_once('?')
        .map(|(_, q)| q.split('#').next().unwrap_or("").to_owned())
        .unwrap_or_default();
    Ok(ExplainRequest {
        host,
        path,
        query,
        method: args.method.to_ascii_uppercase(),
        https: args.url.starts_with("https://"),
        headers: args.headers.clone(),
    })
}

/// Splits a URL into host (with port, if any) and path (without query or fragment).
pub fn split_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url);
    let (host, path) = match rest.find(['/', '?', '#']) {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    if host.is_empty() {
        return Err(format!(
            "{url:?} has no host; give e.g. http://shop.example.com/"
        ));
    }
    let path = path.split(['?', '#']).next().unwrap_or("");
    let path = if path.is_empty() { "/" } else { path };
    Ok((host.to_owned(), path.to_owned()))
}

/// Runs `sluice explain`: prints the explanation on `out`, problems on `err`. Exit status:
/// 0 when a rule or a default backend answers, 1 when the request would get 404, 2 when
/// the question could not be answered.
pub async fn run(args: &ExplainArgs, out: &mut impl Write, err: &mut impl Write) -> i32 {
    let request = match request_of(args) {
        Ok(request) => request,
        Err(error) => {
            let _ = writeln!(err, "sluice explain: {error}");
            return 2;
        }
    };
    let text = match &args.manifests {
        Some(dir) => match from_manifests(dir, args, &request, err) {
            Ok(text) => text,
            Err(error) => {
                let _ = writeln!(err, "sluice explain: {}: {error}", dir.display());
                return 2;
            }
        },
        None => match ask(&args.admin_addr, &request).await {
            Ok(text) => text,
            Err(error) => {
                let _ = writeln!(
                    err,
                    "sluice explain: asking the admin port {}: {error} (is sluice running \
                     there? or pass --manifests DIR)",
                    args.admin_addr
                );
                return 2;
            }
        },
    };
    let _ = out.write_all(text.as_bytes());
    if text.contains(NOT_FOUND_LINE) { 1 } else { 0 }
}

/// How the explanation's text says the request gets 404 (see `Explanation`'s `Display`).
const NOT_FOUND_LINE: &str = "no rule matches and there is no default backend";

/// Explains from a directory of manifests; files that do not parse are reported on `err`.
fn from_manifests(
    dir: &Path,
    args: &ExplainArgs,
    request: &ExplainRequest,
    err: &mut impl Write,
) -> std::io::Result<String> {
    let mut scanner = Scanner::new(dir, manifest_kinds());
    scanner.scan()?;
    let snapshot = scanner.snapshot();
    for (file, error) in &snapshot.errors {
        let _ = writeln!(err, "warning: {}: {error}", file.display());
    }
    let mut inputs = Inputs::default();
    for (key, value) in &snapshot.objects {
        let kind = (key.api_version.as_str(), key.kind.as_str());
        let pushed = match kind {
            _ if is::<Ingress>(kind) => push(value, &mut inputs.ingresses),
            _ if is::<IngressClass>(kind) => push(value, &mut inputs.ingress_classes),
            _ if is::<Service>(kind) => push(value, &mut inputs.services),
            _ if is::<Endpoints>(kind) => push(value, &mut inputs.endpoints),
            _ if is::<EndpointSlice>(kind) => push(value, &mut inputs.endpoint_slices),
            _ if is::<Secret>(kind) => push(value, &mut inputs.secrets),
            _ if is::<GatewayClass>(kind) => push(value, &mut inputs.gateway_classes),
            _ if is::<Gateway>(kind) => push(value, &mut inputs.gateways),
            _ if is::<HttpRoute>(kind) => push(value, &mut inputs.http_routes),
            _ if is::<GrpcRoute>(kind) => push(value, &mut inputs.grpc_routes),
            _ if is::<TcpRoute>(kind) => push(value, &mut inputs.tcp_routes),
            _ if is::<TlsRoute>(kind) => push(value, &mut inputs.tls_routes),
            _ if is::<UdpRoute>(kind) => push(value, &mut inputs.udp_routes),
            _ if is::<ReferenceGrant>(kind) => push(value, &mut inputs.reference_grants),
            _ if is::<Namespace>(kind) => push(value, &mut inputs.namespaces),
            // Those annotations name (`auth-proxy-set-headers`, `custom-headers`).
            _ if is::<ConfigMap>(kind) => push(value, &mut inputs.annotation_config_maps),
            _ => Ok(()),
        };
        if let Err(error) = pushed {
            let _ = writeln!(err, "warning: {key}: {error}");
        }
    }
    let options = args.defaults.apply(args.class.compile_options(None));
    Ok(sluice_routing::explain_request(&inputs, &options, request).to_string())
}

fn is<K: k8s_openapi::Resource>((api_version, kind): (&str, &str)) -> bool {
    api_version == K::API_VERSION && kind == K::KIND
}

fn push<K: DeserializeOwned>(
    value: &serde_json::Value,
    out: &mut sluice_routing::ObjectList<K>,
) -> Result<(), String> {
    let object = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    out.push(Arc::new(object));
    Ok(())
}

/// Asks a running sluice's admin port (plain HTTP/1.1, one request).
async fn ask(admin: &str, request: &ExplainRequest) -> Result<String, String> {
    let mut query = format!(
        "host={}&path={}&query={}&method={}&https={}",
        encode(&request.host),
        encode(&request.path),
        encode(&request.query),
        encode(&request.method),
        request.https
    );
    for (name, value) in &request.headers {
        query.push_str(&format!("&header={}", encode(&format!("{name}: {value}"))));
    }
    let request = format!(
        "GET /api/v1/explain?{query} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
    );
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(admin).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream
            .take(16 * 1024 * 1024)
            .read_to_end(&mut response)
            .await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| "no answer within 10s".to_owned())?
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("the answer is not HTTP")?;
    let status = head.split(' ').nth(1).unwrap_or("");
    if status != "200" {
        return Err(format!("HTTP {status}: {}", body.trim()));
    }
    // The admin server answers with Content-Length (hyper, fixed body): the body is whole.
    Ok(body.to_owned())
}

/// Percent-encodes a query value (everything but unreserved characters and `/`).
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/:".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_host_and_path() {
        let split = |u| split_url(u).unwrap();
        assert_eq!(
            split("http://a.example/x?y=1"),
            ("a.example".into(), "/x".into())
        );
        assert_eq!(
            split("https://a.example:8443"),
            ("a.example:8443".into(), "/".into())
        );
        assert_eq!(
            split("a.example/p/q#f"),
            ("a.example".into(), "/p/q".into())
        );
        assert_eq!(split("a.example?x"), ("a.example".into(), "/".into()));
        assert!(split_url("http:///x").is_err());
    }

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(encode("/a b&c=d%"), "/a%20b%26c%3Dd%25");
        assert_eq!(encode("Shop.example:80"), "Shop.example:80");
    }
}
