//! Reading a run's content back: events and checkpoints as the text they were given.
//!
//! A read gathers the blobs it needs, fetches their chains in one query, decodes each chain
//! from its start (each blob once), then joins the skeletons. Blobs a skeleton refers to
//! outside those chains (a checkpoint's strings, stored by events long before) are fetched
//! the same way in a second round.

use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;

use flate2::read::GzDecoder;

use super::chain::{self, History};
use super::literals;
use super::statements::{CheckpointRecord, ContentStatements, EventRecord, RunStorage};
use crate::backend::Conn;
use crate::model::{Checkpoint, Event};
use crate::{Error, Result};

/// Decompressed checkpoints larger than this are refused as corrupt (a gzip bomb guard).
const MAX_DOCUMENT_BYTES: u64 = 512 << 20;

/// Decoded blobs, by id.
#[derive(Debug, Default)]
struct Blobs(HashMap<i64, String>);

impl Blobs {
    /// Fetches and decodes the chains of those of `ids` not decoded yet.
    async fn load<B: ContentStatements>(
        &mut self,
        c: &mut Conn<B>,
        run_id: &str,
        ids: impl IntoIterator<Item = i64>,
    ) -> Result<()> {
        let missing: Vec<i64> = ids
            .into_iter()
            .filter(|id| !self.0.contains_key(id))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let list = |ids: &[i64]| serde_json::to_string(ids).expect("a list of numbers");
        // The highest blob needed of each chain: a chain is decoded up to it.
        let mut upto: BTreeMap<i64, i64> = BTreeMap::new();
        for (id, chain) in B::chains_of(c, &list(&missing)).await? {
            let top = upto.entry(chain).or_insert(id);
            *top = (*top).max(id);
        }
        let chains: Vec<i64> = upto.keys().copied().collect();
        let mut history = History::default();
        let mut current = None;
        for row in B::chain_blobs(c, &list(&chains)).await? {
            if current != Some(row.chain) {
                current = Some(row.chain);
                history = History::default();
            }
            if row.id > upto.get(&row.chain).copied().unwrap_or(i64::MIN) {
                continue;
            }
            if let Some(text) = self.0.get(&row.id) {
                history.push(text.as_bytes());
                continue;
            }
            let size = usize::try_from(row.raw_size)
                .ok()
                .filter(|s| (*s as u64) <= MAX_DOCUMENT_BYTES)
                .ok_or_else(|| {
                    corrupt(
                        run_id,
                        format!("blob {} records {} bytes", row.id, row.raw_size),
                    )
                })?;
            let content = chain::inflate(&history, &row.body, size)
                .map_err(|e| Error::Corrupt(format!("run {run_id}: blob {}: {e}", row.id)))?;
            history.push(&content);
            let text = String::from_utf8(content).map_err(|_| {
                Error::Corrupt(format!("run {run_id}: blob {} is not UTF-8", row.id))
            })?;
            self.0.insert(row.id, text);
        }
        match missing.iter().find(|id| !self.0.contains_key(id)) {
            Some(gone) => Err(missing_blob(run_id, *gone)),
            None => Ok(()),
        }
    }

    /// `skeleton` with its references joined, loading the blobs they name.
    async fn join<B: ContentStatements>(
        &mut self,
        c: &mut Conn<B>,
        run_id: &str,
        skeleton: &str,
    ) -> Result<String> {
        let refs = literals::references(skeleton).map_err(|e| corrupt(run_id, e))?;
        self.load::<B>(c, run_id, refs).await?;
        literals::join(skeleton, |id| self.0.get(&id).map(String::as_str))
            .map_err(|e| corrupt(run_id, e))
    }
}

fn missing_blob(run_id: &str, id: i64) -> Error {
    Error::Corrupt(format!("run {run_id}: blob {id} is missing"))
}

fn corrupt(run_id: &str, e: impl std::fmt::Display) -> Error {
    Error::Corrupt(format!("run {run_id}: {e}"))
}

/// The events of `records` (one run's, in order) with their payloads as they were given.
pub(crate) async fn events<B: ContentStatements>(
    c: &mut Conn<B>,
    records: Vec<EventRecord>,
) -> Result<Vec<Event>> {
    let Some(first) = records.first() else {
        return Ok(Vec::new());
    };
    let run_id = first.event.run_id.clone();
    let mut blobs = Blobs::default();
    blobs
        .load::<B>(c, &run_id, records.iter().filter_map(|r| r.blob_id))
        .await?;
    let mut events = Vec::with_capacity(records.len());
    for EventRecord { mut event, blob_id } in records {
        if let Some(id) = blob_id {
            let skeleton = blobs
                .0
                .get(&id)
                .cloned()
                .ok_or_else(|| missing_blob(&run_id, id))?;
            event.payload = blobs.join::<B>(c, &run_id, &skeleton).await?;
        }
        events.push(event);
    }
    Ok(events)
}

/// A checkpoint with its document as it was given.
pub(crate) async fn checkpoint<B: ContentStatements>(
    c: &mut Conn<B>,
    record: CheckpointRecord,
) -> Result<Checkpoint> {
    let run_id = record.run_id.clone();
    let gunzipped = gunzip(&record.body)
        .map_err(|e| corrupt(&run_id, format!("checkpoint is corrupt or truncated: {e}")))?;
    let document = match record.encoding {
        0 => gunzipped,
        1 => Blobs::default().join::<B>(c, &run_id, &gunzipped).await?,
        other => return Err(corrupt(&run_id, format!("checkpoint encoding {other}"))),
    };
    Ok(Checkpoint {
        run_id: record.run_id,
        through_seq: record.through_seq,
        format_version: record.format_version,
        document,
        size_bytes: record.size_bytes,
        job_id: record.job_id,
        lease_token: record.lease_token,
        created_at: record.created_at,
    })
}

fn gunzip(body: &[u8]) -> std::result::Result<String, String> {
    let mut text = Vec::new();
    GzDecoder::new(body)
        .take(MAX_DOCUMENT_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("gzip: {e}"))?;
    if text.len() as u64 > MAX_DOCUMENT_BYTES {
        return Err(format!(
            "decompresses to more than {MAX_DOCUMENT_BYTES} bytes"
        ));
    }
    String::from_utf8(text).map_err(|_| "not UTF-8".to_string())
}

pub(crate) async fn run_storage<B: ContentStatements>(b: &B, run_id: &str) -> Result<RunStorage> {
    B::run_storage(&mut *b.reader().await?, run_id).await
}
