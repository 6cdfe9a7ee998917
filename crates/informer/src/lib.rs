//! client-go's `tools/cache` and `util/workqueue`, for Rust, on top of kube-rs (being built).
