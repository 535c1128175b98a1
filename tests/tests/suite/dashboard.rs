//! The web dashboard over a real listener on loopback and a real store on both backends,
//! spoken to as a browser would (forms, a session cookie, `Origin`): signing in, the pages
//! rendering a run, and every state-changing POST refused without its CSRF token or from
//! another site — changing nothing — while the right one acts through the store.

use std::sync::Arc;

use nightshift_runner::api::{ApiState, router};
use nightshift_store::{NewRun, RunStatus, Store};
use nightshift_tests::{TestDb, on_both_backends};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, ORIGIN, SET_COOKIE};

on_both_backends! {
    signing_in_takes_the_api_token_and_nothing_else => signing_in;
    a_signed_in_operator_sees_the_run_and_cancels_it_with_csrf => pages_and_actions;
}

pub(super) const TOKEN: &str = "dash-token-456";

/// The API's router (with the dashboard) on a loopback port, and a client that does not
/// follow redirects (shared with `dashboard_pages`).
pub(super) struct Dash {
    pub(super) base: String,
    pub(super) http: reqwest::Client,
    pub(super) store: Store,
    _server: tokio::task::JoinHandle<()>,
}

impl Dash {
    pub(super) async fn start(db: &TestDb) -> Dash {
        Dash::start_with(db.store().await, nightshift_runner::hooks::none()).await
    }

    /// Serves `store` with agent `helper` and the webhooks `hooks`.
    pub(super) async fn start_with(
        store: Store,
        hooks: Arc<nightshift_scheduler::hooks::HookSet>,
    ) -> Dash {
        let state = ApiState {
            store: store.clone(),
            intake: nightshift_scheduler::Intake::new(store.clone(), ["helper"]),
            tokens: nightshift_runner::api_tokens::ApiTokens::single(TOKEN.to_string()),
            hooks,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, router(state)).await.unwrap();
        });
        // The product's client builder installs the rustls crypto provider; this client
        // must not follow redirects, so that the tests see them.
        nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        Dash {
            base,
            http,
            store,
            _server: server,
        }
    }

    pub(super) async fn post_form(
        &self,
        path: &str,
        body: &str,
        cookie: Option<&str>,
        origin: Option<&str>,
    ) -> reqwest::Response {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body.to_string());
        if let Some(c) = cookie {
            req = req.header(COOKIE, c);
        }
        if let Some(o) = origin {
            req = req.header(ORIGIN, o);
        }
        req.send().await.unwrap()
    }

    pub(super) async fn get(
        &self,
        path: &str,
        cookie: Option<&str>,
    ) -> (StatusCode, String, String) {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(c) = cookie {
            req = req.header(COOKIE, c);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let location = resp
            .headers()
            .get(LOCATION)
            .map(|l| l.to_str().unwrap().to_string())
            .unwrap_or_default();
        (status, location, resp.text().await.unwrap())
    }

    /// Signs in with the right token; the session cookie as a `Cookie` header value.
    pub(super) async fn sign_in(&self) -> String {
        let resp = self
            .post_form("/ui/login", &format!("token={TOKEN}"), None, None)
            .await;
        assert_eq!(resp.status(), StatusCode::SEE_OTHER);
        let set = resp.headers()[SET_COOKIE].to_str().unwrap().to_string();
        set.split(';').next().unwrap().to_string()
    }
}

/// The value of the first hidden `csrf` field of a page.
pub(super) fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with a csrf field");
    let rest = &page[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

async fn signing_in(db: &TestDb) {
    let d = Dash::start(db).await;
    let (status, location, _) = d.get("/ui/runs", None).await;
    assert_eq!(
        (status, location.as_str()),
        (StatusCode::SEE_OTHER, "/ui/login"),
        "pages need a session"
    );
    let (status, _, login) = d.get("/ui/login", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(login.contains("id=\"login\"") && login.contains("name=\"token\""));

    let wrong = d.post_form("/ui/login", "token=nope", None, None).await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(
        wrong.headers().get(SET_COOKIE).is_none(),
        "no session for a wrong token"
    );
    let foreign = d
        .post_form(
            "/ui/login",
            &format!("token={TOKEN}"),
            None,
            Some("http://evil.example"),
        )
        .await;
    assert_eq!(
        foreign.status(),
        StatusCode::FORBIDDEN,
        "a cross-site sign-in"
    );
    assert!(foreign.headers().get(SET_COOKIE).is_none());

    let resp = d
        .post_form("/ui/login", &format!("token={TOKEN}"), None, None)
        .await;
    assert_eq!(resp.status(), StatusCode::SEE_OTHER);
    assert_eq!(resp.headers()[LOCATION], "/ui/runs");
    let set = resp.headers()[SET_COOKIE].to_str().unwrap().to_string();
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(set.contains(attr), "{attr} missing from {set}");
    }
    assert!(!set.contains(TOKEN), "the cookie is not the token");
    let cookie = set.split(';').next().unwrap().to_string();
    let (status, _, page) = d.get("/ui/runs", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("id=\"runs\""));
    assert!(!page.contains(TOKEN), "a page never shows the token");

    // The API keeps its bearer token: the dashboard's cookie does not open it.
    let api = d
        .http
        .get(format!("{}/v1/runs", d.base))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::UNAUTHORIZED);
    // A forged session (the right shape, another signature) is refused. The last hex digit
    // is changed to one it is not (always '0' forged nothing one time in sixteen).
    let (name, value) = cookie.split_once('=').unwrap();
    let other = if value.ends_with('0') { '1' } else { '0' };
    let forged = format!("{name}={}{other}", &value[..value.len() - 1]);
    assert_ne!(forged, cookie);
    let (status, location, _) = d.get("/ui/runs", Some(&forged)).await;
    assert_eq!(
        (status, location.as_str()),
        (StatusCode::SEE_OTHER, "/ui/login")
    );
}

async fn pages_and_actions(db: &TestDb) {
    let d = Dash::start(db).await;
    let cookie = d.sign_in().await;
    let run = d
        .store
        .enqueue(&NewRun::new("helper", "Summarise <the> & logs"))
        .await
        .unwrap();
    let id = run.run_id;

    let (status, _, list) = d.get("/ui/runs", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(list.contains(&format!("data-run-id=\"{id}\"")), "{list}");
    assert!(
        list.contains("Summarise &lt;the&gt; &amp; logs"),
        "the prompt is shown escaped"
    );
    let (_, _, filtered) = d.get("/ui/runs?status=succeeded", Some(&cookie)).await;
    assert!(!filtered.contains(&format!("data-run-id=\"{id}\"")));
    let (status, _, bad) = d.get("/ui/runs?status=sleeping", Some(&cookie)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(bad.contains("unknown run status"), "{bad}");

    let path = format!("/ui/runs/{id}");
    let (status, _, page) = d.get(&path, Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("id=\"run-status\""), "{page}");
    assert!(page.contains("data-action=\"cancel\""), "{page}");
    let csrf = csrf_of(&page);
    let cancel = format!("{path}/cancel");
    let still_queued = || async {
        assert_eq!(
            d.store.run(&id).await.unwrap().unwrap().status,
            RunStatus::Queued,
            "a refused action changed nothing"
        );
    };

    let no_token = d
        .post_form(&cancel, "confirmed=yes", Some(&cookie), None)
        .await;
    assert_eq!(no_token.status(), StatusCode::FORBIDDEN);
    still_queued().await;
    let wrong_token = d
        .post_form(&cancel, "csrf=00&confirmed=yes", Some(&cookie), None)
        .await;
    assert_eq!(wrong_token.status(), StatusCode::FORBIDDEN);
    still_queued().await;
    let cross_site = d
        .post_form(
            &cancel,
            &format!("csrf={csrf}&confirmed=yes"),
            Some(&cookie),
            Some("http://evil.example"),
        )
        .await;
    assert_eq!(cross_site.status(), StatusCode::FORBIDDEN);
    still_queued().await;
    let signed_out = d
        .post_form(&cancel, &format!("csrf={csrf}&confirmed=yes"), None, None)
        .await;
    let to_login = signed_out.status() == StatusCode::SEE_OTHER
        && signed_out.headers()[LOCATION] == "/ui/login";
    assert!(
        to_login || signed_out.status() == StatusCode::FORBIDDEN,
        "a POST without a session is sent to sign in: {}",
        signed_out.status()
    );
    still_queued().await;

    // Unconfirmed, an irreversible action asks first and changes nothing.
    let unconfirmed = d
        .post_form(&cancel, &format!("csrf={csrf}"), Some(&cookie), None)
        .await;
    assert_eq!(unconfirmed.status(), StatusCode::OK);
    assert!(
        unconfirmed
            .text()
            .await
            .unwrap()
            .contains("cannot be undone")
    );
    still_queued().await;

    let done = d
        .post_form(
            &cancel,
            &format!("csrf={csrf}&confirmed=yes"),
            Some(&cookie),
            Some(&d.base),
        )
        .await;
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    let back = done.headers()[LOCATION].to_str().unwrap().to_string();
    assert!(back.starts_with(&path), "{back}");
    assert_eq!(
        d.store.run(&id).await.unwrap().unwrap().status,
        RunStatus::Cancelled
    );
    let (_, _, after) = d.get(&back, Some(&cookie)).await;
    assert!(after.contains("Run cancelled."), "the flash is shown");
    // A link cannot put its own words on the page: an unsigned flash is not shown.
    let (_, _, spoofed) = d
        .get(
            &format!("{path}?flash=Sign+in+at+evil.example"),
            Some(&cookie),
        )
        .await;
    assert!(!spoofed.contains("evil.example"), "{spoofed}");
}
