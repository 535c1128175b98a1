//! Webhook intake: `POST /hooks/{name}` turned into runs, exactly once per delivery.
//!
//! A delivery goes through these steps, in this order ([`deliver`]; one function per step in
//! `delivery.rs`, the decisions pure):
//!
//! 1. **Authenticate** the raw body ([`signature`]): a bad or missing signature is refused
//!    before the body is even parsed.
//! 2. **Parse** the body as JSON and read the delivery id and the event name.
//! 3. **Route** ([`route`]): the *first* route whose event and conditions match takes the
//!    delivery (GitHub users expect one event → one route; order routes from specific to
//!    general). Its templates are rendered now. No match → refused (422), nothing written;
//!    except GitHub's `ping` (sent when the webhook is added), answered 200 with no runs.
//! 4. **Check** what the route renders through the intake's checks ([`crate::Intake`]):
//!    the run's agent, prompt and options, or the unfinished run a resume continues. A
//!    refusal here writes nothing.
//! 5. **Take** the delivery in one transaction (`Store::take_webhook_delivery`): claim its
//!    row — when it is recorded `done` (a redelivery), count this arrival and answer 200 with
//!    the runs recorded there (`duplicate: true`), enqueueing nothing — else enqueue the run
//!    or resume job with an idempotency key that is a pure function of the delivery (the
//!    route's `idempotency_key` template, or `webhook:<hook>:<route>:<delivery id>`), and
//!    record the run on the row as `done`.
//! 6. **Answer** 202 with the run ids.
//!
//! A delivery that steps 3 and 4 would not take (refused, or a `ping`) is then looked up in
//! `webhook_deliveries`: when it was done before — the config changed since, or the run a
//! resume continued has finished — it is answered as a redelivery, as step 5 would have.
//!
//! What that guarantees:
//! - **A refused request changes nothing**: steps 1–4 write nothing, and a step 5 whose
//!   enqueue is refused (the run finished meanwhile, it is busy) rolls back whole.
//! - **No delivery is lost and none enqueues twice, whatever crashes.** Step 5 commits the
//!   claim, the run and the record together, or nothing: a crash before its commit leaves
//!   nothing, and the sender's retry starts afresh. (A `claimed` row left by an older version
//!   is finished by the retry with the same idempotency key.) Only `done` rows short-cut the
//!   enqueue.
//! - **Concurrent copies of one delivery make one run and one 202**: in one process, copies
//!   of a delivery id take steps 3–6 one after another, so the later ones find it `done` at
//!   step 5's claim and answer 200 as redeliveries. Copies taken by different daemons on one
//!   database meet at that claim, which locks the row: the later one goes on once the first
//!   committed, finds the row `done` and answers 200 with the runs recorded there. Never a
//!   409 or 500 for a copy.
//! - **Deliveries share commits**: on SQLite, deliveries (and enqueues) taken at the same
//!   time are written in one transaction and one commit; a batch in which one is refused is
//!   written again item by item, so one delivery's refusal never undoes another's.
//! - **Traceable prompts**: Nightshift (not the user's template) appends
//!   `[webhook <hook> delivery=<id> event=<event>]` to every prompt and resume message.
//!
//! - **A 202 means committed**: the answer is sent only after the run (or resume job) and
//!   the delivery's record are committed. A delivery that got no 2xx (the daemon died first)
//!   either committed whole (a redelivery answers 200 with its runs) or left nothing (a
//!   redelivery enqueues it). GitHub does not retry by itself: redeliver from the webhook's
//!   "Recent Deliveries" page.
//!
//! Limits: the dedupe is per `(hook, delivery id)`; a sender that reuses delivery ids for
//! different events will see the later ones answered as redeliveries. A route changed in the
//! config between a crash and the retry renders with the new config. A `resume` whose job was
//! enqueued before a crash, retried after its run finished, answers 404 (no unfinished run)
//! although the first attempt's job ran; nothing runs twice. Outcome counters
//! ([`Counters`]) live in this process (per daemon, reset on restart); the
//! `webhook_deliveries` table is the durable history.

pub mod checkout;
pub mod config;
mod context;
mod delivery;
pub mod error;
mod in_flight;
pub mod route;
pub mod signature;

pub use delivery::deliver;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde::Serialize;

use config::{DEFAULT_TOLERANCE_SECONDS, FieldSource};
pub use config::{HookConfig, RouteConfig, RouteKind, SignatureScheme};
pub use error::{CheckoutTemplateError, ConfigError, RenderError, SignatureError, VerifierError};
use route::CompiledRoute;
use signature::{Secret, Verifier};

/// Looks a request header up by name (case-insensitively).
pub type Headers<'a> = dyn Fn(&str) -> Option<String> + Sync + 'a;

/// The longest delivery id accepted, in bytes.
pub const MAX_DELIVERY_ID_BYTES: usize = 100;

/// What each outcome of a hook's deliveries has been, since this daemon started.
#[derive(Debug, Default)]
pub struct Counters {
    pub accepted: AtomicU64,
    pub duplicate: AtomicU64,
    pub unauthorized: AtomicU64,
    pub bad_request: AtomicU64,
    pub too_large: AtomicU64,
    pub unmatched: AtomicU64,
    pub no_run: AtomicU64,
    pub error: AtomicU64,
    pub ping: AtomicU64,
    pub ignored: AtomicU64,
}

/// The outcome a counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    Accepted,
    Duplicate,
    Unauthorized,
    BadRequest,
    TooLarge,
    Unmatched,
    NoRun,
    Error,
    /// GitHub's `ping` (sent when a webhook is added), answered without enqueuing.
    Ping,
    /// No route takes it and the hook ignores such deliveries (`unmatched = "ignore"`).
    Ignored,
}

impl DeliveryOutcome {
    /// Its name, as `GET /v1/hooks` and the metrics show it.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryOutcome::Accepted => "accepted",
            DeliveryOutcome::Duplicate => "duplicate",
            DeliveryOutcome::Unauthorized => "unauthorized",
            DeliveryOutcome::BadRequest => "bad_request",
            DeliveryOutcome::TooLarge => "too_large",
            DeliveryOutcome::Unmatched => "unmatched",
            DeliveryOutcome::NoRun => "no_run",
            DeliveryOutcome::Error => "error",
            DeliveryOutcome::Ping => "ping",
            DeliveryOutcome::Ignored => "ignored",
        }
    }
}

impl Counters {
    /// Counts one outcome.
    pub fn count(&self, outcome: DeliveryOutcome) {
        let c = match outcome {
            DeliveryOutcome::Accepted => &self.accepted,
            DeliveryOutcome::Duplicate => &self.duplicate,
            DeliveryOutcome::Unauthorized => &self.unauthorized,
            DeliveryOutcome::BadRequest => &self.bad_request,
            DeliveryOutcome::TooLarge => &self.too_large,
            DeliveryOutcome::Unmatched => &self.unmatched,
            DeliveryOutcome::NoRun => &self.no_run,
            DeliveryOutcome::Error => &self.error,
            DeliveryOutcome::Ping => &self.ping,
            DeliveryOutcome::Ignored => &self.ignored,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `other`'s counts to these (a reloaded hook keeps its counts).
    pub fn add_from(&self, other: &Counters) {
        for (to, from) in [
            (&self.accepted, &other.accepted),
            (&self.duplicate, &other.duplicate),
            (&self.unauthorized, &other.unauthorized),
            (&self.bad_request, &other.bad_request),
            (&self.too_large, &other.too_large),
            (&self.unmatched, &other.unmatched),
            (&self.no_run, &other.no_run),
            (&self.error, &other.error),
            (&self.ping, &other.ping),
            (&self.ignored, &other.ignored),
        ] {
            to.fetch_add(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// The counts by outcome name.
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        BTreeMap::from([
            ("accepted", get(&self.accepted)),
            ("duplicate", get(&self.duplicate)),
            ("unauthorized", get(&self.unauthorized)),
            ("bad_request", get(&self.bad_request)),
            ("too_large", get(&self.too_large)),
            ("unmatched", get(&self.unmatched)),
            ("no_run", get(&self.no_run)),
            ("error", get(&self.error)),
            ("ping", get(&self.ping)),
            ("ignored", get(&self.ignored)),
        ])
    }
}

/// One configured hook, ready to take deliveries.
#[derive(Debug)]
pub struct Hook {
    pub name: String,
    pub scheme: SignatureScheme,
    pub max_body_bytes: usize,
    verifier: Verifier,
    delivery_source: FieldSource,
    event_source: Option<FieldSource>,
    routes: Vec<CompiledRoute>,
    /// How a delivery no route takes is answered.
    pub unmatched: config::Unmatched,
    pub counters: Counters,
    /// The deliveries this process is taking now (copies of one wait for each other).
    in_flight: in_flight::InFlight,
}

impl Hook {
    /// The route names, in matching order.
    pub fn route_names(&self) -> Vec<&str> {
        self.routes.iter().map(|r| r.name.as_str()).collect()
    }

    /// The routes, in matching order (for pages that show what each takes and makes).
    pub fn routes(&self) -> &[CompiledRoute] {
        &self.routes
    }
}

/// Every configured hook, by name. [`HookSet::replace`] swaps in the hooks of a reloaded
/// config for every holder at once; a delivery being handled keeps the hook it started with.
#[derive(Debug, Default)]
pub struct HookSet {
    hooks: RwLock<Arc<BTreeMap<String, Arc<Hook>>>>,
    /// Requests to `/hooks/{name}` for a name that is not configured.
    pub unknown: AtomicU64,
}

impl HookSet {
    /// Builds the hooks of `configs`, reading each secret with `env` (the NAME in
    /// `secret_env`). A missing or empty variable is an error naming it and the hook.
    pub fn build(
        configs: &[HookConfig],
        agents: &[&str],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<HookSet, ConfigError> {
        Self::build_with(configs, agents, env, &BTreeMap::new())
    }

    /// [`HookSet::build`], with the checkout templates of the agents that check out (by
    /// agent name): a route starting such an agent renders them into its runs' context.
    pub fn build_with(
        configs: &[HookConfig],
        agents: &[&str],
        env: impl Fn(&str) -> Option<String>,
        checkouts: &BTreeMap<String, checkout::CheckoutTemplates>,
    ) -> Result<HookSet, ConfigError> {
        let mut hooks = BTreeMap::new();
        for c in configs {
            let routes = c
                .compile(agents)?
                .into_iter()
                .map(|r| match r.agent.as_ref().and_then(|a| checkouts.get(a)) {
                    Some(t) => {
                        let at = format!("hooks.{}.routes.{}", c.name, r.name);
                        r.with_checkout(t, &at)
                    }
                    None => Ok(r),
                })
                .collect::<Result<Vec<_>, _>>()?;
            let secret = match &c.secret_env {
                None => None,
                Some(var) => match env(var) {
                    Some(v) if !v.is_empty() => Some(Secret::new(v)),
                    _ => {
                        return Err(ConfigError::SecretUnset {
                            hook: c.name.clone(),
                            var: var.clone(),
                        });
                    }
                },
            };
            let tolerance = c.tolerance_seconds.unwrap_or(DEFAULT_TOLERANCE_SECONDS);
            let verifier = Verifier::new(c.signature, secret, c.hmac.as_ref(), tolerance).map_err(
                |source| ConfigError::Verifier {
                    hook: c.name.clone(),
                    source,
                },
            )?;
            let hook = Hook {
                name: c.name.clone(),
                scheme: c.signature,
                max_body_bytes: c.max_body_bytes,
                verifier,
                delivery_source: c.delivery_source().ok_or_else(|| {
                    ConfigError::value(format!("hooks.{}.delivery_id", c.name), "is missing")
                })?,
                event_source: c.event_source(),
                routes,
                unmatched: c.unmatched,
                counters: Counters::default(),
                in_flight: in_flight::InFlight::default(),
            };
            if hooks.insert(c.name.clone(), Arc::new(hook)).is_some() {
                return Err(ConfigError::table(
                    "hooks",
                    format!("'{}' is defined twice; hook names must be unique", c.name),
                ));
            }
        }
        Ok(HookSet {
            hooks: RwLock::new(Arc::new(hooks)),
            unknown: AtomicU64::new(0),
        })
    }

    fn current(&self) -> Arc<BTreeMap<String, Arc<Hook>>> {
        self.hooks.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The hook named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Hook>> {
        self.current().get(name).cloned()
    }

    /// All hooks, by name, as they are now.
    pub fn iter(&self) -> impl Iterator<Item = Arc<Hook>> + use<> {
        let current = self.current();
        current.values().cloned().collect::<Vec<_>>().into_iter()
    }

    /// From now on, the hooks of `new` (a reloaded config): a hook kept by name keeps its
    /// counts, a removed one answers 404 from now on, deliveries in flight finish on the hook
    /// they started with.
    pub fn replace(&self, new: HookSet) {
        let old = self.current();
        let hooks = new.hooks.into_inner().unwrap_or_else(|e| e.into_inner());
        for (name, hook) in hooks.iter() {
            if let Some(before) = old.get(name) {
                hook.counters.add_from(&before.counters);
            }
        }
        *self.hooks.write().unwrap_or_else(|e| e.into_inner()) = hooks;
    }
}

/// One run a delivery made (or found), as the store recorded it and as answered.
pub use nightshift_store::DeliveryRun;

/// An accepted delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Accepted {
    pub hook: String,
    pub delivery: String,
    pub event: String,
    /// True when this delivery id was processed before: `runs` are the original ones.
    pub redelivery: bool,
    /// True for GitHub's `ping` when no route takes it: authentic, answered 200, nothing
    /// enqueued or recorded.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ping: bool,
    /// True when no route takes it and the hook ignores such deliveries
    /// (`unmatched = "ignore"`): authentic, answered 200, nothing enqueued or recorded.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ignored: bool,
    /// Slack's `url_verification` handshake (sent when an Events API URL is set): the
    /// challenge to echo back. Authentic, nothing enqueued or recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub challenge: Option<String>,
    pub runs: Vec<DeliveryRun>,
}

/// Why a delivery was refused. Nothing was enqueued.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Bad or missing signature (401).
    #[error("{0}")]
    Unauthorized(String),
    /// Not JSON, or no delivery id (400).
    #[error("{0}")]
    BadRequest(String),
    /// No route matched (422).
    #[error("{0}")]
    Unmatched(String),
    /// A resume route found no unfinished run (404).
    #[error("{0}")]
    NoRun(String),
    /// A template failed on this payload, or the intake refused what it rendered (422).
    #[error("{0}")]
    Invalid(String),
    /// The store failed (503 when retrying can help, else 500).
    #[error(transparent)]
    Store(#[from] nightshift_store::Error),
}

impl Refused {
    fn outcome(&self) -> DeliveryOutcome {
        match self {
            Refused::Unauthorized(_) => DeliveryOutcome::Unauthorized,
            Refused::BadRequest(_) => DeliveryOutcome::BadRequest,
            Refused::Unmatched(_) => DeliveryOutcome::Unmatched,
            Refused::NoRun(_) => DeliveryOutcome::NoRun,
            Refused::Invalid(_) | Refused::Store(_) => DeliveryOutcome::Error,
        }
    }
}
