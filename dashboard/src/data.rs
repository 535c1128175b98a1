//! The one place the runs list reads the store: [`Store::runs_page`], keyset-paginated and
//! filtered by the store's indexes (see `nightshift_store::listing`), the same query the
//! API's `GET /v1/runs` answers from.

use nightshift_store::{Result, Store};
pub use nightshift_store::{RunFilter, RunPage, RunSummary};

/// A page of runs passing `filter`, after `cursor`, at most `limit` (1-200).
pub async fn runs_page(
    store: &Store,
    filter: &RunFilter,
    cursor: Option<&str>,
    limit: i64,
) -> Result<RunPage> {
    store.runs_page(filter, cursor, limit).await
}
