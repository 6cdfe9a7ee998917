//! Error pages the proxy answers with itself: a tiny static HTML page per status that names
//! no internals (no service, no endpoint, no error text).

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};

/// Builds a page at compile time; no allocation when it is served.
macro_rules! page {
    ($status:literal) => {
        concat!(
            "<html>\r\n<head><title>",
            $status,
            "</title></head>\r\n<body>\r\n<center><h1>",
            $status,
            "</h1></center>\r\n<hr><center>sluice</center>\r\n</body>\r\n</html>\r\n"
        )
    };
}

/// The body of the error page for `status`.
pub(crate) fn page_for(status: StatusCode) -> &'static str {
    match status.as_u16() {
        301 => page!("301 Moved Permanently"),
        302 => page!("302 Found"),
        303 => page!("303 See Other"),
        307 => page!("307 Temporary Redirect"),
        308 => page!("308 Permanent Redirect"),
        400 => page!("400 Bad Request"),
        403 => page!("403 Forbidden"),
        404 => page!("404 Not Found"),
        405 => page!("405 Not Allowed"),
        408 => page!("408 Request Time-out"),
        413 => page!("413 Request Entity Too Large"),
        421 => page!("421 Misdirected Request"),
        431 => page!("431 Request Header Fields Too Large"),
        500 => page!("500 Internal Server Error"),
        502 => page!("502 Bad Gateway"),
        503 => page!("503 Service Temporarily Unavailable"),
        504 => page!("504 Gateway Time-out"),
        508 => page!("508 Loop Detected"),
        _ => page!("500 Internal Server Error"),
    }
}

/// A complete error response: status, `content-type: text/html`, the static page.
pub(crate) fn error_response<B>(status: StatusCode, body: impl FnOnce(Bytes) -> B) -> Response<B> {
    let mut response = Response::new(body(Bytes::from_static(page_for(status).as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_name_status_and_nothing_else() {
        let p = page_for(StatusCode::NOT_FOUND);
        assert!(p.contains("<title>404 Not Found</title>"));
        assert!(p.contains("sluice"));
        let r = error_response(StatusCode::BAD_GATEWAY, |b| b);
        assert_eq!(r.status(), 502);
        assert!(
            std::str::from_utf8(r.body())
                .unwrap()
                .contains("502 Bad Gateway")
        );
    }
}
