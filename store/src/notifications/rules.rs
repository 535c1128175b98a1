//! The pure rules of a delivery, apart from the statements: which notify URLs are refused
//! before anything is written, what an attempt's outcome writes (tried again at its retry
//! time, or dead after its last attempt), and how a notify URL is shown without the tokens
//! its path or query may hold.

use super::{AttemptOutcome, AttemptRow, DeliveryStatus, NewDelivery, Notification};
use crate::clock::Millis;
use crate::{Error, Result};

/// Refuses a notify URL that could never be tried.
pub(super) fn check_deliveries(deliveries: &[NewDelivery]) -> Result<()> {
    match deliveries.iter().find(|d| d.max_attempts < 1) {
        Some(d) => Err(Error::Invalid(format!(
            "max_attempts must be at least 1 (got {} for a notify URL)",
            d.max_attempts
        ))),
        None => Ok(()),
    }
}

/// What the outcome of a claimed attempt on `delivery` writes: a failure of its last
/// attempt makes it dead, an earlier one tries again at `retry_at`.
pub(super) fn attempt_row<'a>(
    delivery: &Notification,
    outcome: &'a AttemptOutcome,
    now: Millis,
) -> AttemptRow<'a> {
    let row = AttemptRow {
        id: delivery.id,
        claim_token: delivery.claim_token,
        status: DeliveryStatus::Delivered,
        next_attempt_at: None,
        error: None,
        status_code: None,
        delivered_at: None,
        now,
    };
    match outcome {
        AttemptOutcome::Delivered { status_code } => AttemptRow {
            status_code: Some(i64::from(*status_code)),
            delivered_at: Some(now),
            ..row
        },
        AttemptOutcome::Failed {
            error,
            status_code,
            retry_at,
        } => {
            let last = delivery.attempts >= delivery.max_attempts;
            AttemptRow {
                status: if last {
                    DeliveryStatus::Dead
                } else {
                    DeliveryStatus::Pending
                },
                next_attempt_at: (!last).then_some(*retry_at),
                error: Some(error.as_str()),
                status_code: status_code.map(i64::from),
                ..row
            }
        }
    }
}

/// A notify URL as logs, the API, the CLI and the dashboard show it: `scheme://host[:port]/`,
/// with `…` standing for any path or query (they often hold tokens); userinfo is dropped
/// (pure).
pub fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        // Not a place on the web (`github-check-run:NAME`): a name, shown as it is.
        Ok(u) if u.cannot_be_a_base() && u.scheme() != "http" && u.scheme() != "https" => {
            url.to_string()
        }
        Ok(u) => {
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            let rest = if u.path() == "/" && u.query().is_none() {
                "/"
            } else {
                "/…"
            };
            format!(
                "{}://{}{port}{rest}",
                u.scheme(),
                u.host_str().unwrap_or("")
            )
        }
        Err(_) => "(invalid URL)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_urls_hide_paths_queries_and_userinfo() {
        assert_eq!(
            shown_url("https://hooks.example.com/services/T000/B000/XXXX?token=s3cret"),
            "https://hooks.example.com/…"
        );
        assert_eq!(
            shown_url("http://127.0.0.1:9000/"),
            "http://127.0.0.1:9000/"
        );
        assert_eq!(shown_url("http://127.0.0.1:9000"), "http://127.0.0.1:9000/");
        assert_eq!(
            shown_url("https://u:pw@h.example?k=v"),
            "https://h.example/…"
        );
        assert_eq!(shown_url("nope"), "(invalid URL)");
        assert_eq!(shown_url("not a url"), "(invalid URL)");
        assert_eq!(
            shown_url("github-check-run:Nightshift review"),
            "github-check-run:Nightshift review"
        );
    }

    fn claimed(attempts: i64, max_attempts: i64) -> Notification {
        Notification {
            id: 7,
            delivery_id: "d".into(),
            outbox_id: 1,
            run_id: "r".into(),
            url: "http://127.0.0.1/".into(),
            secret_env: "S".into(),
            status: DeliveryStatus::Pending,
            attempts,
            max_attempts,
            next_attempt_at: 0,
            claim_token: 3,
            last_error: None,
            last_status_code: None,
            created_at: 0,
            updated_at: 0,
            delivered_at: None,
        }
    }

    fn failed(status_code: Option<u16>) -> AttemptOutcome {
        AttemptOutcome::Failed {
            error: "HTTP 500".into(),
            status_code,
            retry_at: 9_000,
        }
    }

    #[test]
    fn a_delivered_attempt_records_its_answer_under_its_claim() {
        let outcome = AttemptOutcome::Delivered { status_code: 204 };
        let row = attempt_row(&claimed(1, 3), &outcome, 50);
        assert_eq!(
            row,
            AttemptRow {
                id: 7,
                claim_token: 3,
                status: DeliveryStatus::Delivered,
                next_attempt_at: None,
                error: None,
                status_code: Some(204),
                delivered_at: Some(50),
                now: 50,
            }
        );
    }

    #[test]
    fn a_failure_with_attempts_left_is_tried_again_at_its_retry_time() {
        let outcome = failed(Some(500));
        let row = attempt_row(&claimed(2, 3), &outcome, 50);
        assert_eq!(row.status, DeliveryStatus::Pending);
        assert_eq!(row.next_attempt_at, Some(9_000));
        assert_eq!((row.error, row.status_code), (Some("HTTP 500"), Some(500)));
        assert_eq!(row.delivered_at, None);
    }

    #[test]
    fn a_failure_of_the_last_attempt_is_dead_and_keeps_its_due_time() {
        let outcome = failed(None);
        let row = attempt_row(&claimed(3, 3), &outcome, 50);
        assert_eq!(row.status, DeliveryStatus::Dead);
        assert_eq!(row.next_attempt_at, None, "NULL keeps next_attempt_at");
        assert_eq!((row.error, row.status_code), (Some("HTTP 500"), None));
    }

    #[test]
    fn a_notify_url_needs_at_least_one_attempt() {
        let url = |max_attempts| NewDelivery {
            url: "http://127.0.0.1/".into(),
            secret_env: "S".into(),
            max_attempts,
        };
        assert!(check_deliveries(&[]).is_ok());
        assert!(check_deliveries(&[url(1), url(5)]).is_ok());
        assert!(matches!(
            check_deliveries(&[url(3), url(0)]),
            Err(Error::Invalid(m)) if m.contains("got 0")
        ));
    }
}
