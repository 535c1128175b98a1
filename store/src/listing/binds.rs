//! The bind-only implementation of [`ListingStatements`](super::ListingStatements), the same
//! on both backends: `listing_statements!(Backend, "dir")` reads `store/sql/<dir>/listing/`.
//! The page and exact statements are sent unprepared (`persistent(false)`), so that each is
//! planned with its own values.

/// Implements [`ListingStatements`](crate::listing::ListingStatements) for a backend from its
/// SQL directory.
macro_rules! listing_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::listing::ListingStatements for $backend {
            async fn runs_page(
                c: &mut $crate::backend::Conn<Self>,
                shape: $crate::listing::Shape,
                q: &$crate::listing::PageQuery<'_>,
            ) -> $crate::Result<Vec<$crate::listing::SummaryRow>> {
                use $crate::listing::Shape;
                let sql = match shape {
                    Shape::All => $crate::backend::sql!($dir, "listing/page"),
                    Shape::Status => $crate::backend::sql!($dir, "listing/page_status"),
                    Shape::Agent => $crate::backend::sql!($dir, "listing/page_agent"),
                    Shape::Trigger => $crate::backend::sql!($dir, "listing/page_trigger"),
                    Shape::Key => $crate::backend::sql!($dir, "listing/page_key"),
                };
                // Not kept prepared: planned with this page's values every time (see the
                // module doc of `listing`).
                Ok(sqlx::query_as(sql)
                    .persistent(false)
                    .bind(q.status)
                    .bind(q.agent)
                    .bind(q.trigger)
                    .bind($crate::text::Text::opt(q.key))
                    .bind(q.since)
                    .bind(q.until)
                    .bind($crate::text::Text::opt(q.text))
                    .bind(q.before.0)
                    .bind(q.before.1)
                    .bind(q.limit)
                    .fetch_all(c)
                    .await?)
            }

            async fn runs_exact(
                c: &mut $crate::backend::Conn<Self>,
                needle: &str,
                q: &$crate::listing::PageQuery<'_>,
            ) -> $crate::Result<Vec<$crate::listing::SummaryRow>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "listing/exact"))
                    .persistent(false)
                    .bind($crate::text::Text(needle))
                    .bind(q.status)
                    .bind(q.agent)
                    .bind(q.trigger)
                    .bind($crate::text::Text::opt(q.key))
                    .bind(q.since)
                    .bind(q.until)
                    .bind(q.before.0)
                    .bind(q.before.1)
                    .fetch_all(c)
                    .await?)
            }

            async fn live_jobs(
                c: &mut $crate::backend::Conn<Self>,
            ) -> $crate::Result<Vec<(String, String, i64)>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "listing/live_jobs"))
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn oldest_due(
                c: &mut $crate::backend::Conn<Self>,
                now: $crate::clock::Millis,
            ) -> $crate::Result<Option<$crate::clock::Millis>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "listing/oldest_due"))
                        .bind(now)
                        .fetch_one(c)
                        .await?,
                )
            }

            async fn gauge_jobs(
                c: &mut $crate::backend::Conn<Self>,
                now: $crate::clock::Millis,
            ) -> $crate::Result<Vec<(String, String, i64)>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "listing/gauge_jobs"))
                        .bind(now)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn oldest_due_per_lane(
                c: &mut $crate::backend::Conn<Self>,
                now: $crate::clock::Millis,
            ) -> $crate::Result<Vec<(String, $crate::clock::Millis)>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "listing/oldest_due_per_lane"))
                        .bind(now)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn gauge_backlogs(
                c: &mut $crate::backend::Conn<Self>,
            ) -> $crate::Result<(
                i64,
                Option<$crate::clock::Millis>,
                i64,
                Option<$crate::clock::Millis>,
            )> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "listing/gauge_backlogs"))
                        .fetch_one(c)
                        .await?,
                )
            }

            async fn leases(
                c: &mut $crate::backend::Conn<Self>,
            ) -> $crate::Result<Vec<$crate::listing::LeaseRow>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "listing/leases"))
                        .fetch_all(c)
                        .await?,
                )
            }
        }
    };
}
pub(crate) use listing_statements;
