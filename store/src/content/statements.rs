//! The statements of a run's stored content (`store/sql/<backend>/content/`): blobs, the
//! rows that name them, and what a run's storage holds. Bound the same way on both backends
//! by [`content_statements!`].

use std::future::Future;

use crate::Result;
use crate::backend::{Backend, Conn};
use crate::clock::Millis;
use crate::model::Event;

/// A blob to insert (`content/insert_blob.sql`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewBlob<'a> {
    pub run_id: &'a str,
    /// The chain's first blob; `None` for a blob that starts a chain.
    pub chain: Option<i64>,
    pub hash: &'a [u8],
    pub raw_size: i64,
    pub body: &'a [u8],
    pub now: Millis,
}

/// A stored blob as a reader decodes it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct BlobRow {
    pub id: i64,
    pub chain: i64,
    pub raw_size: i64,
    pub body: Vec<u8>,
}

/// An event row as stored: `blob_id` names its payload's blob, or is `None` for an event
/// written before v22, whose `payload` is the text itself.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct EventRecord {
    #[sqlx(flatten)]
    pub event: Event,
    pub blob_id: Option<i64>,
}

/// A checkpoint row as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct CheckpointRecord {
    pub run_id: String,
    pub through_seq: i64,
    pub format_version: i64,
    pub body: Vec<u8>,
    pub size_bytes: i64,
    pub job_id: i64,
    pub lease_token: i64,
    pub created_at: Millis,
    /// 0: `body` is a whole gzipped document; 1: the gzip of a skeleton.
    pub encoding: i64,
}

/// What one run's log takes in the database (`content/run_storage.sql`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct RunStorage {
    /// Events in the run's log.
    pub events: i64,
    /// Bytes of payload text kept in event rows (events written before v22).
    pub event_bytes: i64,
    /// Blobs of the run.
    pub blobs: i64,
    /// Bytes of their compressed bodies.
    pub blob_bytes: i64,
    /// Bytes of content they hold, uncompressed.
    pub blob_raw_bytes: i64,
    /// Checkpoints kept.
    pub checkpoints: i64,
    /// Bytes of the checkpoints' bodies.
    pub checkpoint_bytes: i64,
}

impl RunStorage {
    /// Every byte of the run's log, checkpoints and content as stored (bodies and payloads;
    /// rows and indexes besides).
    pub fn stored_bytes(&self) -> i64 {
        self.event_bytes + self.blob_bytes + self.checkpoint_bytes
    }
}

/// The statements of stored content.
pub(crate) trait ContentStatements: Backend {
    /// `content/insert_blob.sql`: the new blob's id, `None` when the run holds one of that hash.
    fn insert_blob(
        c: &mut Conn<Self>,
        blob: NewBlob<'_>,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;
    /// `content/start_chain.sql`: makes blob `id` the first of its own chain.
    fn start_chain(c: &mut Conn<Self>, id: i64) -> impl Future<Output = Result<()>> + Send;
    /// `content/blob_by_hash.sql`.
    fn blob_by_hash(
        c: &mut Conn<Self>,
        run_id: &str,
        hash: &[u8],
    ) -> impl Future<Output = Result<Option<i64>>> + Send;
    /// `content/hashes.sql`: every blob of the run, as (hash, id).
    fn blob_hashes(
        c: &mut Conn<Self>,
        run_id: &str,
    ) -> impl Future<Output = Result<Vec<(Vec<u8>, i64)>>> + Send;
    /// `content/chains_of.sql`: (id, chain) of the blobs in `ids` (a JSON array).
    fn chains_of(
        c: &mut Conn<Self>,
        ids: &str,
    ) -> impl Future<Output = Result<Vec<(i64, i64)>>> + Send;
    /// `content/chain_blobs.sql`: every blob of the chains in `chains` (a JSON array), by
    /// chain then id.
    fn chain_blobs(
        c: &mut Conn<Self>,
        chains: &str,
    ) -> impl Future<Output = Result<Vec<BlobRow>>> + Send;
    /// `content/prune_checkpoints.sql`: drops the checkpoints of job `job_id`'s run older
    /// than `through_seq`.
    fn prune_checkpoints(
        c: &mut Conn<Self>,
        job_id: i64,
        through_seq: i64,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `content/run_storage.sql`.
    fn run_storage(
        c: &mut Conn<Self>,
        run_id: &str,
    ) -> impl Future<Output = Result<RunStorage>> + Send;
}

/// Implements [`ContentStatements`] for a backend from its SQL directory.
macro_rules! content_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::content::ContentStatements for $backend {
            async fn insert_blob(
                c: &mut $crate::backend::Conn<Self>,
                blob: $crate::content::NewBlob<'_>,
            ) -> $crate::Result<Option<i64>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "content/insert_blob"))
                        .bind(blob.run_id)
                        .bind(blob.chain)
                        .bind(blob.hash)
                        .bind(blob.raw_size)
                        .bind(blob.body)
                        .bind(blob.now)
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn start_chain(
                c: &mut $crate::backend::Conn<Self>,
                id: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "content/start_chain"))
                    .bind(id)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn blob_by_hash(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                hash: &[u8],
            ) -> $crate::Result<Option<i64>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "content/blob_by_hash"))
                        .bind(run_id)
                        .bind(hash)
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn blob_hashes(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<Vec<(Vec<u8>, i64)>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "content/hashes"))
                        .bind(run_id)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn chains_of(
                c: &mut $crate::backend::Conn<Self>,
                ids: &str,
            ) -> $crate::Result<Vec<(i64, i64)>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "content/chains_of"))
                        .bind(ids)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn chain_blobs(
                c: &mut $crate::backend::Conn<Self>,
                chains: &str,
            ) -> $crate::Result<Vec<$crate::content::BlobRow>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "content/chain_blobs"))
                        .bind(chains)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn prune_checkpoints(
                c: &mut $crate::backend::Conn<Self>,
                job_id: i64,
                through_seq: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "content/prune_checkpoints"))
                    .bind(job_id)
                    .bind(through_seq)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn run_storage(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<$crate::content::RunStorage> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "content/run_storage"))
                        .bind(run_id)
                        .fetch_one(c)
                        .await?,
                )
            }
        }
    };
}
pub(crate) use content_statements;
