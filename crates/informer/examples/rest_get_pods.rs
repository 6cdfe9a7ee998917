//! Raw REST: `GET /api/v1/namespaces/NS/pods` through `kube::Client::request`, no types.
//!
//! `cargo run -p sluice-informer --example rest_get_pods -- --namespace default`

mod common;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = common::Args::parse();
    let ns = args.namespace();
    let client = kube::Client::try_default().await?;
    let req = http::Request::get(format!("/api/v1/namespaces/{ns}/pods")).body(Vec::new())?;
    let list: serde_json::Value = client.request(req).await?;
    let items = list["items"].as_array().cloned().unwrap_or_default();
    println!(
        "{} pods in namespace {ns} (resourceVersion {})",
        items.len(),
        list["metadata"]["resourceVersion"].as_str().unwrap_or("?")
    );
    for pod in items {
        println!(
            "pod {} phase={}",
            pod["metadata"]["name"].as_str().unwrap_or("?"),
            pod["status"]["phase"].as_str().unwrap_or("Unknown")
        );
    }
    Ok(())
}
