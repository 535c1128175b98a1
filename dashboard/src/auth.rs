//! Sign-in, sessions and CSRF.
//!
//! Guarantees:
//! - **Stateless sessions.** The cookie is `expiry.id.name.role.mac` with `mac =
//!   HMAC-SHA256(key, "session|expiry|id|name|role")` and the key derived from the main API
//!   token, so a session works on every daemon sharing the token and across restarts, and
//!   rotating the main token signs everyone out. Anyone with an API token signs in: the
//!   session carries that token's name (what the audit trail records) and whether it only
//!   reads (a read-only session is refused every action). Sessions end after [`SESSION_MS`].
//! - **CSRF.** Every state-changing form carries `csrf = HMAC(key, "csrf|id")`, compared in
//!   constant time; and a request whose `Sec-Fetch-Site` is present and not `same-origin`, or
//!   whose `Origin` is present and not this host, is refused ([`cross_site`]).
//! - The token is compared in constant time and never rendered; the `/v1` API never sees the
//!   cookie (it keeps its bearer rule).
//!
//! The checks are pure functions of the key, the cookie text and the headers.

use axum::http::{HeaderMap, header};
use hmac::{Hmac, KeyInit, Mac};
use nightshift_store::Millis;
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The session cookie's name.
pub const COOKIE: &str = "nightshift_session";
/// How long a session lasts: 12 hours.
pub const SESSION_MS: i64 = 12 * 3_600_000;

/// The signing key of sessions and CSRF tokens, derived from the API token.
#[derive(Clone)]
pub struct Keys {
    key: [u8; 32],
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys([redacted])")
    }
}

/// A valid session: its id (the CSRF token is bound to it), and who signed in — the name of
/// the API token used (`admin` for the main one), and whether that token only reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub id: String,
    pub expires_at: Millis,
    pub name: String,
    pub read_only: bool,
}

impl Session {
    /// How the audit trail names this session's actions.
    pub fn actor(&self) -> String {
        format!("dashboard:{}", self.name)
    }
}

/// Who a sign-in token is: its name and whether it only reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    pub name: String,
    pub read_only: bool,
}

/// Tells who a sign-in token is, if it is one the API accepts (compared in constant time).
pub type SignIn = std::sync::Arc<dyn Fn(&str) -> Option<Signer> + Send + Sync>;

/// A [`SignIn`] that knows only `token`, as `admin`.
pub fn only(token: std::sync::Arc<String>) -> SignIn {
    std::sync::Arc::new(move |given: &str| {
        token_ok(&token, given).then(|| Signer {
            name: "admin".into(),
            read_only: false,
        })
    })
}

impl Keys {
    /// The keys for `token`.
    pub fn new(token: &str) -> Keys {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(b"nightshift dashboard v1")
            .expect("HMAC takes a key of any length");
        mac.update(token.as_bytes());
        let key: [u8; 32] = mac.finalize().into_bytes().into();
        Keys { key }
    }

    fn mac(&self, text: &str) -> String {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key).expect("any key length");
        mac.update(text.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// A new session's cookie value for `signer`, valid until `now + SESSION_MS`:
    /// `expiry.id.NAME_HEX.role.mac`, every part signed.
    pub fn issue(&self, now: Millis, signer: &Signer) -> String {
        let expires = now + SESSION_MS;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let name = hex::encode(signer.name.as_bytes());
        let role = if signer.read_only { "r" } else { "w" };
        let mac = self.mac(&format!("session|{expires}|{id}|{name}|{role}"));
        format!("{expires}.{id}.{name}.{role}.{mac}")
    }

    /// The session `value` names, when its MAC is right and it has not expired.
    pub fn verify(&self, value: &str, now: Millis) -> Option<Session> {
        let mut parts = value.split('.');
        let (expires, id, name, role, mac) = (
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
        );
        if parts.next().is_some() {
            return None;
        }
        let expires_at: Millis = expires.parse().ok()?;
        let want = self.mac(&format!("session|{expires_at}|{id}|{name}|{role}"));
        if !bool::from(want.as_bytes().ct_eq(mac.as_bytes())) || expires_at <= now {
            return None;
        }
        let name = String::from_utf8(hex::decode(name).ok()?).ok()?;
        Some(Session {
            id: id.to_string(),
            expires_at,
            name,
            read_only: role == "r",
        })
    }

    /// The CSRF token of `session`.
    pub fn csrf(&self, session: &Session) -> String {
        self.mac(&format!("csrf|{}", session.id))
    }

    /// The signature of a flash message shown to `session` (so a link cannot put words on
    /// the page).
    pub fn flash_mac(&self, session: &Session, text: &str) -> String {
        self.mac(&format!("flash|{}|{text}", session.id))
    }

    /// Whether `mac` signs `text` for `session` (constant time).
    pub fn flash_ok(&self, session: &Session, text: &str, mac: &str) -> bool {
        bool::from(
            self.flash_mac(session, text)
                .as_bytes()
                .ct_eq(mac.as_bytes()),
        )
    }

    /// Whether `given` is the CSRF token of `session` (constant time).
    pub fn csrf_ok(&self, session: &Session, given: &str) -> bool {
        bool::from(self.csrf(session).as_bytes().ct_eq(given.as_bytes()))
    }
}

/// Whether `given` is the API token (constant time).
pub fn token_ok(token: &str, given: &str) -> bool {
    bool::from(given.as_bytes().ct_eq(token.as_bytes()))
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Why a state-changing request is refused as cross-site, if it is: `Sec-Fetch-Site`
/// present and not `same-origin`, or `Origin` present and not `http(s)://<Host>` (`null`
/// allowed only with `Sec-Fetch-Site: same-origin`).
pub fn cross_site(headers: &HeaderMap) -> Option<String> {
    // A browser sets Sec-Fetch-Site itself (no page can forge it). Same-origin requests may
    // still carry `Origin: null` (a privacy-stripped context), which is then no evidence of
    // another site; any other value must be this host.
    let mut null_origin_ok = false;
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or("?");
        if site != "same-origin" {
            return Some(format!(
                "the request came from another site (Sec-Fetch-Site: {site}); act from the dashboard's own pages"
            ));
        }
        null_origin_ok = true;
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("?");
        if origin == "null" && null_origin_ok {
            return None;
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let same = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|o| !host.is_empty() && o == host);
        if !same {
            return Some(format!(
                "the request came from origin {origin}, not this dashboard ({host}); act from the dashboard's own pages"
            ));
        }
    }
    None
}

/// The `Set-Cookie` value of a new session.
pub fn set_cookie(value: &str) -> String {
    format!(
        "{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/ui; Max-Age={}",
        SESSION_MS / 1000
    )
}

/// The `Set-Cookie` value that ends the session.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/ui; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn admin() -> Signer {
        Signer {
            name: "admin".into(),
            read_only: false,
        }
    }

    #[test]
    fn a_session_verifies_until_it_expires_and_not_under_another_token() {
        let keys = Keys::new("tok-1");
        let cookie = keys.issue(1_000, &admin());
        let s = keys.verify(&cookie, 2_000).expect("valid");
        assert_eq!(s.expires_at, 1_000 + SESSION_MS);
        assert_eq!((s.name.as_str(), s.read_only), ("admin", false));
        assert!(
            keys.verify(&cookie, 1_000 + SESSION_MS).is_none(),
            "expired"
        );
        assert!(
            Keys::new("tok-2").verify(&cookie, 2_000).is_none(),
            "rotated"
        );
        let forged = cookie.replacen(&(1_000 + SESSION_MS).to_string(), "99999999999999", 1);
        assert!(keys.verify(&forged, 2_000).is_none(), "expiry is signed");
        assert!(keys.verify("garbage", 2_000).is_none());
    }

    #[test]
    fn a_session_carries_its_signers_name_and_role_and_neither_can_be_changed() {
        let keys = Keys::new("tok");
        let grafana = Signer {
            name: "ops.grafana".into(),
            read_only: true,
        };
        let cookie = keys.issue(0, &grafana);
        let s = keys.verify(&cookie, 1).unwrap();
        assert_eq!(s.actor(), "dashboard:ops.grafana");
        assert!(s.read_only);
        let writer = cookie.replacen(".r.", ".w.", 1);
        assert!(keys.verify(&writer, 1).is_none(), "the role is signed");
        let renamed = cookie.replacen(&hex::encode("ops.grafana"), &hex::encode("admin"), 1);
        assert!(keys.verify(&renamed, 1).is_none(), "the name is signed");
        let sign_in = only(std::sync::Arc::new("main-token".into()));
        assert_eq!(sign_in("main-token"), Some(admin()));
        assert_eq!(sign_in("main-toke"), None);
    }

    #[test]
    fn csrf_tokens_are_bound_to_their_session() {
        let keys = Keys::new("tok");
        let a = keys.verify(&keys.issue(0, &admin()), 1).unwrap();
        let b = keys.verify(&keys.issue(0, &admin()), 1).unwrap();
        assert!(keys.csrf_ok(&a, &keys.csrf(&a)));
        assert!(!keys.csrf_ok(&a, &keys.csrf(&b)));
        assert!(!keys.csrf_ok(&a, ""));
    }

    #[test]
    fn cross_site_requests_are_named_and_same_origin_ones_pass() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert_eq!(cross_site(&h), None);
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        h.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert_eq!(cross_site(&h), None);
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(cross_site(&h).unwrap().contains("evil.example"));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(cross_site(&h).unwrap().contains("cross-site"));
        // `Origin: null` passes only where the browser vouches the request is same-origin.
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(cross_site(&h).is_some());
        h.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert_eq!(cross_site(&h), None);
        h.remove("sec-fetch-site");
        assert!(cross_site(&h).unwrap().contains("origin null"));
    }

    #[test]
    fn the_session_cookie_is_read_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; nightshift_session=x.y.z"),
        );
        assert_eq!(cookie(&h, COOKIE), Some("x.y.z"));
        assert_eq!(cookie(&h, "b"), None);
    }
}
