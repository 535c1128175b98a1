//! Secrets bound to hosts, against real loopback servers that record what they receive: a
//! bound secret reaches its host; sent to another allow-listed host it is refused before
//! anything is sent (that server receives nothing), in a header or in the body; a redirect
//! does not carry it on; the model cannot set `Host` or hop-by-hop headers.

use std::net::SocketAddr;

use nightshift_tools::{
    HttpAllowlist, HttpRequest, SecretBindings, SecretResolver, SecretSpec, ToolContext,
};
use serde_json::json;

use crate::common::{Fixture, call};
use crate::http::{Seen, server, server_on};

const BOUND: &str = "b0und-t0ken-value-1234";
const FREE: &str = "fr33-t0ken-value-5678";

/// A context allowing both servers, with `BOUND_TOKEN` bound to `home` only and `FREE_TOKEN`
/// unbound.
fn ctx(fx: &Fixture, home: SocketAddr, other: SocketAddr) -> ToolContext {
    fx.ctx()
        .with_http_allowlist(HttpAllowlist::new([home.to_string(), other.to_string()]))
        .with_secrets(SecretResolver::from_map([
            ("BOUND_TOKEN", BOUND),
            ("FREE_TOKEN", FREE),
        ]))
        .with_secret_bindings(SecretBindings::from_specs(&[
            SecretSpec::bound("BOUND_TOKEN", [home.to_string()]),
            SecretSpec::unbound("FREE_TOKEN"),
        ]))
}

/// A second server on another loopback address (another host), or on 127.0.0.1 where the
/// kernel does not route all of 127/8.
async fn other_server() -> (SocketAddr, Seen) {
    match tokio::net::TcpListener::bind("127.0.0.2:0").await {
        Ok(probe) => {
            drop(probe);
            server_on("127.0.0.2").await
        }
        Err(_) => server().await,
    }
}

#[tokio::test]
async fn a_bound_secret_reaches_its_host_and_is_refused_for_any_other() {
    let (home, home_seen) = server().await;
    let (other, other_seen) = other_server().await;
    let fx = Fixture::new();
    let ctx = ctx(&fx, home, other);
    let tool = HttpRequest::new();

    let sent = call(
        &tool,
        &ctx,
        json!({"method": "POST", "url": format!("http://{home}/echo"),
               "headers": {"Authorization": "Bearer {{secret:BOUND_TOKEN}}"},
               "body": "t={{secret:BOUND_TOKEN}}"}),
    )
    .await;
    assert!(!sent.is_error, "{}", sent.content);
    let got = home_seen.all();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].headers["authorization"],
        format!("Bearer {BOUND}").as_str()
    );
    assert_eq!(got[0].body, format!("t={BOUND}"));

    for input in [
        json!({"method": "GET", "url": format!("http://{other}/echo"),
               "headers": {"Authorization": "Bearer {{secret:BOUND_TOKEN}}"}}),
        json!({"method": "GET", "url": format!("http://{other}/echo"),
               "headers": {"X-Anything": "{{ secret:BOUND_TOKEN }}"}}),
        json!({"method": "POST", "url": format!("http://{other}/echo"),
               "body": "{\"token\": \"{{secret:BOUND_TOKEN}}\"}"}),
    ] {
        let out = call(&tool, &ctx, input.clone()).await;
        assert!(out.is_error, "{input}: {}", out.content);
        assert!(
            out.content.starts_with(&format!(
                "secret `BOUND_TOKEN` may only be sent to {home}, not to `{other}`; the \
                 request was not sent"
            )),
            "{input}: {}",
            out.content
        );
    }
    assert!(
        other_seen.all().is_empty(),
        "the other host received a request: {:?}",
        other_seen.all()
    );

    // Positive control: the other host is reachable, and an unbound secret may go there.
    let free = call(
        &tool,
        &ctx,
        json!({"method": "GET", "url": format!("http://{other}/echo"),
               "headers": {"Authorization": "{{secret:FREE_TOKEN}}"}}),
    )
    .await;
    assert!(!free.is_error, "{}", free.content);
    let got = other_seen.all();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].headers["authorization"], FREE);
    assert!(!got[0].body.contains(BOUND));
}

#[tokio::test]
async fn a_redirect_does_not_carry_a_bound_secret_to_another_host() {
    let (home, home_seen) = server().await;
    let (other, other_seen) = other_server().await;
    let fx = Fixture::new();
    let ctx = ctx(&fx, home, other);
    let out = call(
        &HttpRequest::new(),
        &ctx,
        json!({"method": "GET", "url": format!("http://{home}/goto?http://{other}/stolen"),
               "headers": {"Authorization": "{{secret:BOUND_TOKEN}}"}}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert!(
        out.content.starts_with("HTTP 302 Found\n"),
        "{}",
        out.content
    );
    assert!(
        out.content
            .contains(&format!("location: http://{other}/stolen")),
        "{}",
        out.content
    );
    assert_eq!(home_seen.all().len(), 1);
    assert!(other_seen.all().is_empty(), "the redirect was followed");
}

#[tokio::test]
async fn host_and_hop_by_hop_headers_are_refused_before_sending() {
    let (home, seen) = server().await;
    let (other, _) = other_server().await;
    let fx = Fixture::new();
    let ctx = ctx(&fx, home, other);
    for (name, value, why) in [
        (
            "Host",
            "internal.example",
            "the Host header is set from the URL",
        ),
        (
            "host",
            "internal.example",
            "the Host header is set from the URL",
        ),
        ("Transfer-Encoding", "chunked", "hop-by-hop and framing"),
        (
            "Connection",
            "close, Authorization",
            "hop-by-hop and framing",
        ),
        ("Content-Length", "0", "hop-by-hop and framing"),
        ("X-Forwarded-Host", "internal.example", "routing headers"),
        ("X-HTTP-Method-Override", "DELETE", "method overrides"),
        (":authority", "internal.example", "pseudo-headers"),
    ] {
        let out = call(
            &HttpRequest::new(),
            &ctx,
            json!({"method": "GET", "url": format!("http://{home}/hello"),
                   "headers": {name: value}}),
        )
        .await;
        assert!(out.is_error, "{name}: {}", out.content);
        assert!(
            out.content
                .starts_with(&format!("header `{name}` cannot be set: "))
                && out.content.contains(why)
                && out.content.contains("the request was not sent"),
            "{name}: {}",
            out.content
        );
    }
    assert!(seen.all().is_empty(), "a refused request was sent");
    // Positive control: an ordinary header goes through, and Host is the URL's.
    let ok = call(
        &HttpRequest::new(),
        &ctx,
        json!({"method": "GET", "url": format!("http://{home}/hello"),
               "headers": {"Accept": "text/plain"}}),
    )
    .await;
    assert!(!ok.is_error, "{}", ok.content);
    let got = seen.all();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].headers["host"], home.to_string().as_str());
    assert_eq!(got[0].headers["accept"], "text/plain");
}

#[tokio::test]
async fn a_port_less_entry_refuses_another_port_and_says_why() {
    let (home, seen) = server().await;
    let fx = Fixture::new();
    let ctx = fx
        .ctx()
        .with_http_allowlist(HttpAllowlist::new(["127.0.0.1"]));
    let out = call(
        &HttpRequest::new(),
        &ctx,
        json!({"method": "GET", "url": format!("http://{home}/hello")}),
    )
    .await;
    assert!(out.is_error, "{}", out.content);
    assert!(
        out.content.starts_with(&format!(
            "`{home}` is not on this agent's HTTP allowlist (allowed: 127.0.0.1; an entry \
             without a port allows only port 80 for http); the request was not sent"
        )),
        "{}",
        out.content
    );
    assert!(seen.all().is_empty());
}

/// A webhook URL that is itself the credential (Slack's incoming webhooks): a URL that is one
/// placeholder of a bound secret goes to that URL when its host is the secret's; a URL whose
/// value points elsewhere, an unbound secret, a placeholder in part of a URL and a secret that
/// is not a URL are refused before anything is sent, and the URL is shown to the model only as
/// its placeholder.
#[tokio::test]
async fn a_bound_secret_can_be_the_whole_url_and_nothing_else() {
    let (home, home_seen) = server().await;
    let (other, other_seen) = other_server().await;
    let fx = Fixture::new();
    let hook = format!("http://{home}/services/T000/B000/s3cretPath");
    let stray = format!("http://{other}/services/T000/B000/s3cretPath");
    let ctx = fx
        .ctx()
        .with_http_allowlist(HttpAllowlist::new([home.to_string(), other.to_string()]))
        .with_secrets(SecretResolver::from_map([
            ("HOOK_URL", hook.as_str()),
            ("STRAY_URL", stray.as_str()),
            ("FREE_URL", hook.as_str()),
            ("NOT_A_URL", "just-a-token-value"),
        ]))
        .with_secret_bindings(SecretBindings::from_specs(&[
            SecretSpec::bound("HOOK_URL", [home.to_string()]),
            SecretSpec::bound("STRAY_URL", [home.to_string()]),
            SecretSpec::bound("NOT_A_URL", [home.to_string()]),
            SecretSpec::unbound("FREE_URL"),
        ]))
        .with_idempotency_key("run:call");
    let tool = HttpRequest::new();

    let sent = call(
        &tool,
        &ctx,
        json!({"method": "POST", "url": "{{secret:HOOK_URL}}", "body": "{\"text\": \"digest\"}"}),
    )
    .await;
    assert!(!sent.is_error, "{}", sent.content);
    let got = home_seen.all();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/services/T000/B000/s3cretPath");
    assert!(!sent.content.contains("s3cretPath"), "{}", sent.content);

    for (url, says) in [
        ("{{secret:STRAY_URL}}", "may only be sent to"),
        ("{{secret:FREE_URL}}", "only when it is bound to hosts"),
        ("{{secret:NOT_A_URL}}", "is not an http(s) URL"),
        (
            &format!("http://{home}/services/{{{{secret:HOOK_URL}}}}") as &str,
            "never in part of a URL",
        ),
    ] {
        let out = call(
            &tool,
            &ctx,
            json!({"method": "POST", "url": url, "body": "x"}),
        )
        .await;
        assert!(
            out.is_error && out.content.contains(says),
            "{url}: {}",
            out.content
        );
        assert!(!out.content.contains("s3cretPath"), "{}", out.content);
    }
    assert_eq!(home_seen.all().len(), 1, "nothing more was sent home");
    // What a server echoes of the URL (an error page naming its path) is redacted too.
    // (FREE_URL holds the same value; a value under two names is marked with the first.)
    assert_eq!(
        ctx.secrets()
            .redact("Cannot POST /services/T000/B000/s3cretPath"),
        "Cannot POST [REDACTED:FREE_URL]"
    );
    assert!(other_seen.all().is_empty(), "nothing was sent elsewhere");
}
