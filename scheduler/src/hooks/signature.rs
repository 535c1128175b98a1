//! Checking webhook signatures.
//!
//! Guarantees: a delivery is accepted only when its signature header holds the HMAC of the
//! exact raw body (and, for the timestamped schemes, of the signed timestamp, which must be
//! within the tolerance of the store's clock) under the hook's secret. Digests are compared
//! in constant time (`subtle`); a malformed header is a refusal, never a panic. Refusal
//! messages say what was missing or wrong and never echo the secret.

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use subtle::ConstantTimeEq;

use super::config::{DigestEncoding, HmacAlgorithm, HmacConfig, SignatureScheme};
use super::error::{SignatureError, VerifierError};

/// A secret read from the environment. Its `Debug` never shows the value.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<Vec<u8>>) -> Self {
        Secret(value.into())
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// How one hook checks its deliveries.
#[derive(Debug, Clone)]
pub enum Verifier {
    Github(Secret),
    Hmac(Secret, HmacConfig),
    Stripe { secret: Secret, tolerance_s: i64 },
    Slack { secret: Secret, tolerance_s: i64 },
    None,
}

/// Computes the HMAC of the concatenated `parts`.
pub fn hmac(algorithm: HmacAlgorithm, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        let mut mac = <M as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
        for p in parts {
            mac.update(p);
        }
        mac.finalize().into_bytes().to_vec()
    }
    match algorithm {
        HmacAlgorithm::Sha1 => run::<Hmac<sha1::Sha1>>(key, parts),
        HmacAlgorithm::Sha256 => run::<Hmac<sha2::Sha256>>(key, parts),
        HmacAlgorithm::Sha512 => run::<Hmac<sha2::Sha512>>(key, parts),
    }
}

/// Whether `given` (as written in the header) is the digest `expected`, in constant time.
fn digest_matches(given: &str, encoding: DigestEncoding, expected: &[u8]) -> bool {
    let decoded = match encoding {
        DigestEncoding::Hex => hex::decode(given.trim()),
        DigestEncoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(given.trim())
            .map_err(|_| hex::FromHexError::InvalidStringLength),
    };
    match decoded {
        Ok(bytes) => bool::from(bytes.ct_eq(expected)),
        Err(_) => false,
    }
}

impl Verifier {
    /// The verifier for `scheme` with `secret` (`None` only for the `none` scheme).
    pub fn new(
        scheme: SignatureScheme,
        secret: Option<Secret>,
        hmac: Option<&HmacConfig>,
        tolerance_s: u64,
    ) -> Result<Verifier, VerifierError> {
        let tolerance_s = i64::try_from(tolerance_s).unwrap_or(i64::MAX);
        let need = |s: Option<Secret>| s.ok_or(VerifierError::NoSecret);
        Ok(match scheme {
            SignatureScheme::Github => Verifier::Github(need(secret)?),
            SignatureScheme::Hmac => Verifier::Hmac(
                need(secret)?,
                hmac.cloned().ok_or(VerifierError::NoHmacTable)?,
            ),
            SignatureScheme::Stripe => Verifier::Stripe {
                secret: need(secret)?,
                tolerance_s,
            },
            SignatureScheme::Slack => Verifier::Slack {
                secret: need(secret)?,
                tolerance_s,
            },
            SignatureScheme::None => Verifier::None,
        })
    }

    /// Checks a delivery: `header` looks a request header up by name, `now_ms` is the store's
    /// clock. The error says what is wrong.
    pub fn verify(
        &self,
        header: &dyn Fn(&str) -> Option<String>,
        body: &[u8],
        now_ms: i64,
    ) -> Result<(), SignatureError> {
        match self {
            Verifier::None => Ok(()),
            Verifier::Github(secret) => verify_github(secret, header, body),
            Verifier::Hmac(secret, cfg) => verify_hmac(secret, cfg, header, body),
            Verifier::Stripe {
                secret,
                tolerance_s,
            } => verify_stripe(secret, *tolerance_s, header, body, now_ms),
            Verifier::Slack {
                secret,
                tolerance_s,
            } => verify_slack(secret, *tolerance_s, header, body, now_ms),
        }
    }
}

/// The value of header `name`, which must be there and not blank.
fn required(header: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<String, SignatureError> {
    header(name)
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| SignatureError::Missing {
            header: name.to_string(),
        })
}

/// `Ok` when `matches`, else the refusal saying that `what` does not match the body.
fn matched(matches: bool, what: impl Into<String>) -> Result<(), SignatureError> {
    if matches {
        Ok(())
    } else {
        Err(SignatureError::Mismatch { what: what.into() })
    }
}

/// `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`.
fn verify_github(
    secret: &Secret,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
) -> Result<(), SignatureError> {
    let given = required(header, "X-Hub-Signature-256")?;
    let Some(digest) = given.trim().strip_prefix("sha256=") else {
        return Err(SignatureError::Shape {
            header: "X-Hub-Signature-256",
            shape: "sha256=<hex digest>",
        });
    };
    let expected = hmac(HmacAlgorithm::Sha256, &secret.0, &[body]);
    matched(
        digest_matches(digest, DigestEncoding::Hex, &expected),
        "X-Hub-Signature-256 signature",
    )
}

/// The configured header holding the prefix and the digest of the body.
fn verify_hmac(
    secret: &Secret,
    cfg: &HmacConfig,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
) -> Result<(), SignatureError> {
    let given = required(header, &cfg.header)?;
    let Some(digest) = given.trim().strip_prefix(cfg.prefix.as_str()) else {
        return Err(SignatureError::Prefix {
            header: cfg.header.clone(),
            prefix: cfg.prefix.clone(),
        });
    };
    let expected = hmac(cfg.algorithm, &secret.0, &[body]);
    matched(
        digest_matches(digest, cfg.encoding, &expected),
        format!("{} signature", cfg.header),
    )
}

/// `Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "{t}.{body}">`, the timestamp within
/// the tolerance; any `v1` may match (Stripe sends one per active secret while rolling them).
fn verify_stripe(
    secret: &Secret,
    tolerance_s: i64,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
    now_ms: i64,
) -> Result<(), SignatureError> {
    let given = required(header, "Stripe-Signature")?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in given.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => timestamp = Some(t.to_string()),
            Some(("v1", v)) => signatures.push(v.to_string()),
            _ => {}
        }
    }
    let (Some(t), false) = (timestamp, signatures.is_empty()) else {
        return Err(SignatureError::Shape {
            header: "Stripe-Signature",
            shape: "t=<unix time>,v1=<hex>",
        });
    };
    check_timestamp(&t, now_ms, tolerance_s)?;
    let expected = hmac(
        HmacAlgorithm::Sha256,
        &secret.0,
        &[t.as_bytes(), b".", body],
    );
    // Every one is compared, so the time taken does not say which matched.
    let any = signatures.iter().fold(false, |acc, s| {
        acc | digest_matches(s, DigestEncoding::Hex, &expected)
    });
    matched(any, "Stripe-Signature")
}

/// `X-Slack-Request-Timestamp: <unix>` within the tolerance, and `X-Slack-Signature:
/// v0=<hex HMAC-SHA256 of "v0:{ts}:{body}">`.
fn verify_slack(
    secret: &Secret,
    tolerance_s: i64,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
    now_ms: i64,
) -> Result<(), SignatureError> {
    let ts = required(header, "X-Slack-Request-Timestamp")?;
    let given = required(header, "X-Slack-Signature")?;
    let Some(digest) = given.trim().strip_prefix("v0=") else {
        return Err(SignatureError::Shape {
            header: "X-Slack-Signature",
            shape: "v0=<hex digest>",
        });
    };
    let ts = ts.trim();
    check_timestamp(ts, now_ms, tolerance_s)?;
    let expected = hmac(
        HmacAlgorithm::Sha256,
        &secret.0,
        &[b"v0:", ts.as_bytes(), b":", body],
    );
    matched(
        digest_matches(digest, DigestEncoding::Hex, &expected),
        "X-Slack-Signature",
    )
}

/// A signed Unix timestamp (seconds) must be within `tolerance_s` of `now_ms`, either way.
fn check_timestamp(t: &str, now_ms: i64, tolerance_s: i64) -> Result<(), SignatureError> {
    let Ok(secs) = t.trim().parse::<i64>() else {
        return Err(SignatureError::NotATime {
            timestamp: t.to_string(),
        });
    };
    let skew = (now_ms / 1000).saturating_sub(secs).saturating_abs();
    if skew > tolerance_s {
        return Err(SignatureError::Stale { skew, tolerance_s });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> + use<> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect();
        move |name: &str| {
            let name = name.to_ascii_lowercase();
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn github_signatures_are_checked_against_the_raw_body() {
        // The example from GitHub's documentation ("Validating webhook deliveries").
        let secret = Secret::new("It's a Secret to Everybody");
        let v = Verifier::Github(secret);
        let body = b"Hello, World!";
        let good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(
            v.verify(&headers(&[("X-Hub-Signature-256", good.into())]), body, 0),
            Ok(())
        );
        let err = v
            .verify(
                &headers(&[("X-Hub-Signature-256", good.into())]),
                b"Hello, World?",
                0,
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not match"), "{err}");
        let err = v.verify(&headers(&[]), body, 0).unwrap_err().to_string();
        assert!(
            err.contains("X-Hub-Signature-256 header is missing"),
            "{err}"
        );
        let err = v
            .verify(
                &headers(&[("X-Hub-Signature-256", "sha1=abc".into())]),
                body,
                0,
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("sha256=<hex"), "{err}");
        let err = v
            .verify(
                &headers(&[("X-Hub-Signature-256", "sha256=zz".into())]),
                body,
                0,
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not match"), "not hex: {err}");
    }

    #[test]
    fn generic_hmac_takes_header_algorithm_prefix_and_encoding() {
        let body = b"{\"id\":1}";
        for (algorithm, encoding, prefix) in [
            (HmacAlgorithm::Sha1, DigestEncoding::Hex, "sha1="),
            (HmacAlgorithm::Sha256, DigestEncoding::Base64, ""),
            (HmacAlgorithm::Sha512, DigestEncoding::Hex, "v1,"),
        ] {
            let cfg = HmacConfig {
                header: "X-Signature".into(),
                algorithm,
                prefix: prefix.into(),
                encoding,
            };
            let v = Verifier::Hmac(Secret::new("k"), cfg);
            let mac = hmac(algorithm, b"k", &[body]);
            let text = match encoding {
                DigestEncoding::Hex => hex::encode(&mac),
                DigestEncoding::Base64 => base64::engine::general_purpose::STANDARD.encode(&mac),
            };
            let ok = headers(&[("x-signature", format!("{prefix}{text}"))]);
            assert_eq!(v.verify(&ok, body, 0), Ok(()), "{algorithm:?}");
            assert!(v.verify(&ok, b"{\"id\":2}", 0).is_err());
            let wrong_key = hmac(algorithm, b"other", &[body]);
            let bad = headers(&[("X-Signature", format!("{prefix}{}", hex::encode(wrong_key)))]);
            assert!(v.verify(&bad, body, 0).is_err());
        }
    }

    #[test]
    fn timestamped_schemes_refuse_stale_and_future_timestamps() {
        let now_ms = 1_700_000_000_000;
        let body = b"{\"id\":\"evt_1\",\"type\":\"invoice.paid\"}";
        let stripe = Verifier::Stripe {
            secret: Secret::new("whsec_test"),
            tolerance_s: 300,
        };
        let sign_stripe = |t: i64| {
            let mac = hmac(
                HmacAlgorithm::Sha256,
                b"whsec_test",
                &[t.to_string().as_bytes(), b".", body],
            );
            headers(&[(
                "Stripe-Signature",
                format!("t={t},v1={},v0=ignored", hex::encode(mac)),
            )])
        };
        let t = now_ms / 1000;
        assert_eq!(stripe.verify(&sign_stripe(t - 299), body, now_ms), Ok(()));
        assert_eq!(stripe.verify(&sign_stripe(t + 10), body, now_ms), Ok(()));
        let err = stripe
            .verify(&sign_stripe(t - 301), body, now_ms)
            .unwrap_err()
            .to_string();
        assert!(err.contains("301 s away"), "{err}");
        assert!(stripe.verify(&sign_stripe(t + 301), body, now_ms).is_err());
        assert!(
            stripe
                .verify(&sign_stripe(t), b"{\"id\":\"evt_2\"}", now_ms)
                .is_err()
        );

        let slack = Verifier::Slack {
            secret: Secret::new("8f742231b10e8888abcd99yyyzzz85a5"),
            tolerance_s: 300,
        };
        // The example from Slack's "Verifying requests from Slack".
        let slack_body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let ts = 1_531_420_618_i64;
        let h = headers(&[
            ("X-Slack-Request-Timestamp", ts.to_string()),
            (
                "X-Slack-Signature",
                "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503".into(),
            ),
        ]);
        assert_eq!(slack.verify(&h, slack_body, ts * 1000 + 5_000), Ok(()));
        let err = slack
            .verify(&h, slack_body, (ts + 600) * 1000)
            .unwrap_err()
            .to_string();
        assert!(err.contains("tolerance 300 s"), "{err}");
        assert!(slack.verify(&h, b"token=other", ts * 1000).is_err());
    }

    #[test]
    fn each_refusal_keeps_its_words() {
        let github = Verifier::Github(Secret::new("s"));
        let refusal = |v: &Verifier, pairs: &[(&str, String)], now_ms: i64| {
            v.verify(&headers(pairs), b"{}", now_ms)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refusal(&github, &[], 0),
            "the X-Hub-Signature-256 header is missing; sign each delivery"
        );
        assert_eq!(
            refusal(&github, &[("X-Hub-Signature-256", "md5=00".into())], 0),
            "X-Hub-Signature-256 must look like sha256=<hex digest>"
        );
        assert_eq!(
            refusal(&github, &[("X-Hub-Signature-256", "sha256=00".into())], 0),
            "the X-Hub-Signature-256 signature does not match the body; check that the \
             sender's webhook secret is the one in this hook's secret_env"
        );
        let cfg = HmacConfig {
            header: "X-Sig".into(),
            algorithm: HmacAlgorithm::Sha256,
            prefix: "v1=".into(),
            encoding: DigestEncoding::Hex,
        };
        assert_eq!(
            refusal(
                &Verifier::Hmac(Secret::new("s"), cfg),
                &[("X-Sig", "00".into())],
                0
            ),
            "the X-Sig header must start with 'v1='"
        );
        let stripe = Verifier::Stripe {
            secret: Secret::new("s"),
            tolerance_s: 300,
        };
        assert_eq!(
            refusal(&stripe, &[("Stripe-Signature", "t=soon,v1=00".into())], 0),
            "the signed timestamp 'soon' is not a Unix time in seconds"
        );
        assert_eq!(
            refusal(&stripe, &[("Stripe-Signature", "t=1000,v1=00".into())], 0),
            "the signed timestamp is 1000 s away from now (tolerance 300 s): a replayed or \
             stale delivery, or a clock that is off; sign it afresh"
        );
    }

    #[test]
    fn the_secret_never_shows_in_debug_output() {
        let v = Verifier::Github(Secret::new("hunter2-value"));
        assert!(!format!("{v:?}").contains("hunter2"));
    }
}
