//! The dashboard in a real headless Chromium (Debian's `chromium` through `chromedriver`),
//! against a real daemon with scripted models and real command tools.
//!
//! - `harness`: the browser, its driver, waiting on page conditions, screenshots.
//! - `daemon`: the daemon under test and its agents.
//! - `flows`: sign-in, reading a run, approving, cancelling, waking, filters and pages, live
//!   updates, the keyboard alone, and a cross-site form refused.
//! - `live_page`: a run's page kept live without losing what the operator is doing: a deny
//!   reason being typed survives the item's update, and the header follows the run.
//! - `looks`: the pages on a laptop, a phone and in dark mode, as screenshots.
//!
//! Screenshots go to `target/screenshots/`; `./scripts/screenshots` refreshes the committed
//! ones in `docs/screenshots/`.

mod daemon;
mod flows;
mod harness;
mod live_page;
mod looks;
