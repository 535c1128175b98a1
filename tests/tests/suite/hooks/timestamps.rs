//! Timestamped signatures (Stripe's and Slack's) follow the store's clock: inside the
//! tolerance accepted, outside it refused.

use std::time::Duration;

use nightshift_scheduler::hooks::config::HmacAlgorithm;
use nightshift_scheduler::hooks::signature::hmac;
use nightshift_store::ManualClock;
use nightshift_tests::TestDb;
use reqwest::StatusCode;

use super::harness::{Intake, hex_encode, run_id};

pub(super) async fn timestamped_signatures(db: &TestDb) {
    let intake = Intake::start(db).await;
    let now_s = || intake.clock.now_secs();
    let stripe_body = br#"{"id":"evt_1QXb2d","object":"event","api_version":"2024-06-20","created":1764426000,"data":{"object":{"id":"in_1QXb2c","object":"invoice","status":"paid"}},"livemode":false,"type":"invoice.paid"}"#.to_vec();
    let stripe_sig = |t: i64, body: &[u8]| {
        let mac = hmac(
            HmacAlgorithm::Sha256,
            b"whsec_test_stripe",
            &[t.to_string().as_bytes(), b".", body],
        );
        format!("t={t},v1={}", hex_encode(&mac))
    };
    let signed_at = now_s();
    let header = stripe_sig(signed_at, &stripe_body);
    let (status, body) = intake
        .post(
            "stripe",
            &[("Stripe-Signature", header.clone())],
            stripe_body.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        (&body["delivery"], &body["event"]),
        (&"evt_1QXb2d".into(), &"invoice.paid".into())
    );
    let run = intake.store.run(&run_id(&body)).await.unwrap().unwrap();
    assert!(run.input.starts_with(
        "Invoice in_1QXb2c was paid\n\n[webhook stripe delivery=evt_1QXb2d event=invoice.paid]"
    ));
    // The same signed request replayed six minutes later is refused before dedupe.
    intake.clock.advance(Duration::from_secs(360));
    let (status, body) = intake
        .post(
            "stripe",
            &[("Stripe-Signature", header)],
            stripe_body.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("360 s away"),
        "{body}"
    );

    let slack_body = br#"{"token":"XXYYZZ","team_id":"T0001","api_app_id":"A0001","event":{"type":"app_mention","user":"U061F7AUR","text":"<@U0LAN0Z89> is the deploy done?","ts":"1764426000.000200","channel":"C0LAN2Q65","event_ts":"1764426000.000200"},"type":"event_callback","event_id":"Ev0LAN670R","event_time":1764426000}"#.to_vec();
    let slack_headers = |ts: i64, body: &[u8]| {
        let mac = hmac(
            HmacAlgorithm::Sha256,
            b"slack-signing-secret",
            &[b"v0:", ts.to_string().as_bytes(), b":", body],
        );
        vec![
            ("X-Slack-Request-Timestamp", ts.to_string()),
            ("X-Slack-Signature", format!("v0={}", hex_encode(&mac))),
        ]
    };
    let (status, body) = intake
        .post(
            "slack",
            &slack_headers(now_s() - 61, &slack_body),
            slack_body.clone(),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "outside the 60 s tolerance: {body}"
    );
    let (status, body) = intake
        .post(
            "slack",
            &slack_headers(now_s() - 30, &slack_body),
            slack_body.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let run = intake.store.run(&run_id(&body)).await.unwrap().unwrap();
    assert!(
        run.input
            .starts_with("U061F7AUR said: <@U0LAN0Z89> is the deploy done?")
    );
    assert_eq!(intake.runs().await.len(), 2);
    // Slack's url_verification handshake: the signed challenge is echoed, nothing enqueued.
    let before = intake.runs().await.len();
    let handshake = br#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#.to_vec();
    let (status, body) = intake
        .post(
            "slack",
            &slack_headers(now_s(), &handshake),
            handshake.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        serde_json::json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
    );
    let (status, _) = intake
        .post("slack", &slack_headers(now_s(), b"{}"), handshake)
        .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "an unsigned challenge gets nothing"
    );
    assert_eq!(intake.runs().await.len(), before);
}

trait NowSecs {
    fn now_secs(&self) -> i64;
}

impl NowSecs for ManualClock {
    fn now_secs(&self) -> i64 {
        nightshift_store::Clock::now(self) / 1000
    }
}
