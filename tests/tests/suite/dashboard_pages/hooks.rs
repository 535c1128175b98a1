//! The webhooks page: each hook's routes, its deliveries counted, and the runs a signed
//! delivery made.

use std::sync::Arc;

use nightshift_runner::config::Config;
use nightshift_scheduler::hooks::HookSet;
use nightshift_scheduler::hooks::config::HmacAlgorithm;
use nightshift_scheduler::hooks::signature::hmac;
use nightshift_tests::TestDb;
use reqwest::StatusCode;

use super::{element, get, row};
use crate::dashboard::Dash;

const HOOK_SECRET: &str = "dash-hook-secret-5f2e";
const HOOKS: &str = r#"
[providers.p]
kind = "scripted"
script = "script.json"

[[agents]]
name = "helper"
provider = "p"
model = "scripted-1"

[[hooks]]
name = "gh"
signature = "github"
secret_env = "NS_DASH_HOOK_SECRET"

[[hooks.routes]]
name = "pushes"
event = "push"
agent = "helper"
prompt = "Look at {{ ref }}"
"#;

pub(super) async fn hooks_page(db: &TestDb) {
    let config = Config::parse(HOOKS, "dashboard hooks config").unwrap();
    let hooks = HookSet::build(&config.hooks, &["helper"], |var| {
        (var == "NS_DASH_HOOK_SECRET").then(|| HOOK_SECRET.to_string())
    })
    .unwrap();
    let d = Dash::start_with(db.store().await, Arc::new(hooks)).await;
    let body = br#"{"ref":"refs/heads/main"}"#.to_vec();
    let signature = format!(
        "sha256={}",
        hex::encode(hmac(
            HmacAlgorithm::Sha256,
            HOOK_SECRET.as_bytes(),
            &[&body]
        ))
    );
    let send = |sig: String| {
        let d = &d;
        let body = body.clone();
        async move {
            d.http
                .post(format!("{}/hooks/gh", d.base))
                .header("content-type", "application/json")
                .header("X-GitHub-Event", "push")
                .header("X-GitHub-Delivery", "delivery-1")
                .header("X-Hub-Signature-256", sig)
                .body(body)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(send(signature).await, StatusCode::ACCEPTED);
    assert_eq!(send("sha256=00".into()).await, StatusCode::UNAUTHORIZED);
    let recorded = d.store.webhook_deliveries("gh", 10).await.unwrap();
    let runs: serde_json::Value =
        serde_json::from_str(recorded[0].runs.as_deref().unwrap()).unwrap();
    let run_id = runs[0]["run_id"].as_str().unwrap().to_string();

    let cookie = d.sign_in().await;
    let (status, _, page) = get(&d, "/ui/hooks", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    let hook = element(
        &page,
        "<section class=\"hook\" data-hook=\"gh\"",
        "</section>",
    );
    let routes = element(hook, "<table class=\"routes", "</table>");
    assert!(
        routes.contains("data-route=\"pushes\"") && routes.contains(">push<"),
        "{routes}"
    );
    let counts = element(hook, "<dl class=\"counts\"", "</dl>");
    assert!(counts.contains("data-outcome=\"accepted\">1<"), "{counts}");
    assert!(
        counts.contains("data-outcome=\"unauthorized\">1<"),
        "{counts}"
    );
    let delivery = row(hook, "data-delivery-id=\"delivery-1\"");
    assert!(
        delivery.contains(&format!("href=\"/ui/runs/{run_id}\"")),
        "{delivery}"
    );
    assert!(delivery.contains("data-status=\"done\""), "{delivery}");
    assert!(
        !page.contains(HOOK_SECRET),
        "a hook's secret is never shown"
    );
}
