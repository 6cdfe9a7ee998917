//! Small responses the echo server builds itself (JSON documents, errors).

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use crate::body::{self, ResponseBody};

/// A JSON error document `{"error": msg}` with the given status.
pub(crate) fn error(status: StatusCode, msg: &str) -> Response<ResponseBody> {
    let json = serde_json::json!({ "error": msg }).to_string();
    json_response(status, json.into_bytes())
}

pub(crate) fn json_response(status: StatusCode, json: Vec<u8>) -> Response<ResponseBody> {
    build(
        status,
        Some("application/json"),
        body::full(Bytes::from(json)),
    )
}

pub(crate) fn build(
    status: StatusCode,
    content_type: Option<&'static str>,
    body: ResponseBody,
) -> Response<ResponseBody> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    if let Some(content_type) = content_type {
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    response
}
