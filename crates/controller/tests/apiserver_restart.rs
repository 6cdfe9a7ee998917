//! The API server restarts under a running controller: the last table keeps serving while it
//! is down, watching resumes, and later changes apply. Its own test binary, so that the
//! restart does not disturb other tests' watches.

mod support;

use serde_json::json;
use std::time::Duration;
use support::{World, get, until_routed};

#[tokio::test]
async fn last_table_serves_while_the_api_server_is_down_and_watching_resumes() -> anyhow::Result<()>
{
    let w = World::new("apirestart").await?;
    for app in ["a", "b"] {
        w.service(app).await?;
    }
    let _pa = w.pod("a", "a-0").await?;
    let _pb = w.pod("b", "b-0").await?;
    let rule = |svc: &str| {
        json!({"rules": [{"host": "r.test", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": svc, "port": {"number": 80}}}}
        ]}}]})
    };
    w.ingress("r", rule("a")).await?;
    let run = w.start(&[]).await?;
    until_routed(run.http, "r.test", "/", "a", 200).await?;

    w.cp.stop_apiserver();
    for _ in 0..20 {
        let r = get(run.http, "r.test", "/").await?;
        assert_eq!(
            (r.status, r.service().as_str()),
            (200, "a"),
            "while the API server is down"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    w.cp.start_apiserver().await?;

    // A change made after the restart reaches the data plane.
    w.ingress("r", rule("b")).await?;
    until_routed(run.http, "r.test", "/", "b", 200).await?;
    run.stop().await
}
