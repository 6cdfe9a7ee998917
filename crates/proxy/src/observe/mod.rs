//! What the proxy tells about itself: Prometheus `metrics`, the JSON `access_log`, the
//! `admin` listener (`/metrics`, `/healthz`, `/readyz`, the `dashboard`), the controller's
//! view of the table (`control_info`: `explain`, warnings) and the log filter.

pub(crate) mod access_log;
pub(crate) mod certificate;
pub(crate) mod control_info;
pub(crate) mod ingress_nginx_metrics;
pub(crate) mod log_filter;
pub(crate) mod metrics;
