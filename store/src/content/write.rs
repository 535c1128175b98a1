//! Writing a run's content: the blobs of an event or a checkpoint, inside the transaction
//! that writes its row.
//!
//! A lease holder's [`ContentWriter`] remembers its chain (the history the next blob is
//! deflated against) and the blobs it knows by hash. A write works on a [`Draft`] of that
//! memory and the caller keeps the draft only once the transaction committed
//! ([`WriterState::keep`]): a write the lease fence refused, or that failed, leaves the
//! memory as the database is.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;

use flate2::Compression;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};

use super::chain::{self, History};
use super::literals;
use super::statements::{ContentStatements, NewBlob};
use crate::Result;
use crate::backend::Conn;
use crate::clock::Millis;

type Hash = [u8; 32];

/// What one lease holder remembers of the content it writes. Shared by the clones of its
/// [`LeasedJob`](crate::LeasedJob), and locked for the whole of each write, so the blobs of
/// one holder form one chain in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct ContentWriter(Arc<tokio::sync::Mutex<WriterState>>);

impl ContentWriter {
    pub(crate) async fn lock(&self) -> tokio::sync::MutexGuard<'_, WriterState> {
        self.0.lock().await
    }
}

/// The writer's chain and the blobs it knows.
#[derive(Debug, Default)]
pub(crate) struct WriterState {
    history: History,
    /// The first blob of the current chain, once it has one.
    chain: Option<i64>,
    known: HashMap<Hash, i64>,
    /// Whether `known` holds every blob of the run (loaded for a checkpoint).
    all_known: bool,
}

/// A write in progress: the writer's memory as it will be if the write commits.
#[derive(Debug)]
pub(crate) struct Draft {
    history: History,
    chain: Option<i64>,
    learned: HashMap<Hash, i64>,
    all_known: bool,
}

impl WriterState {
    /// A draft to write with.
    pub(crate) fn draft(&self) -> Draft {
        Draft {
            history: self.history.clone(),
            chain: self.chain,
            learned: HashMap::new(),
            all_known: self.all_known,
        }
    }

    /// Takes on what a committed write learned.
    pub(crate) fn keep(&mut self, draft: Draft) {
        self.history = draft.history;
        self.chain = draft.chain;
        self.known.extend(draft.learned);
        self.all_known = draft.all_known;
    }

    fn known(&self, draft: &Draft, hash: &Hash) -> Option<i64> {
        draft
            .learned
            .get(hash)
            .or_else(|| self.known.get(hash))
            .copied()
    }
}

fn hash_of(content: &str) -> Hash {
    Sha256::digest(content.as_bytes()).into()
}

/// The id of a blob of `run_id` holding `content`: one already stored, or a new one deflated
/// against the draft's chain. `everything`: on the first unknown hash, learn every blob of
/// the run first (a checkpoint, whose strings are nearly all stored already).
async fn put_blob<B: ContentStatements>(
    c: &mut Conn<B>,
    run_id: &str,
    (state, draft): (&WriterState, &mut Draft),
    content: &str,
    everything: bool,
    now: Millis,
) -> Result<i64> {
    let hash = hash_of(content);
    if let Some(id) = state.known(draft, &hash) {
        return Ok(id);
    }
    if everything && !draft.all_known {
        for (h, id) in B::blob_hashes(c, run_id).await? {
            if let Ok(h) = Hash::try_from(h.as_slice()) {
                draft.learned.insert(h, id);
            }
        }
        draft.all_known = true;
        if let Some(id) = state.known(draft, &hash) {
            return Ok(id);
        }
    }
    if draft.history.full() {
        draft.history = History::default();
        draft.chain = None;
    }
    let body = chain::deflate(&draft.history, content.as_bytes());
    let blob = NewBlob {
        run_id,
        chain: draft.chain,
        hash: &hash,
        raw_size: i64::try_from(content.len()).unwrap_or(i64::MAX),
        body: &body,
        now,
    };
    let id = match B::insert_blob(c, blob).await? {
        Some(id) => {
            if draft.chain.is_none() {
                B::start_chain(c, id).await?;
                draft.chain = Some(id);
            }
            draft.history.push(content.as_bytes());
            id
        }
        // Stored meanwhile by another writer of the run (a stale lease holder's transaction
        // that committed first): refer to it.
        None => B::blob_by_hash(c, run_id, &hash).await?.ok_or_else(|| {
            crate::Error::Corrupt(format!(
                "run {run_id}: a blob was refused as stored already but is not there"
            ))
        })?,
    };
    draft.learned.insert(hash, id);
    Ok(id)
}

/// Stores the long strings of `text` and returns its skeleton.
async fn put_document<B: ContentStatements>(
    c: &mut Conn<B>,
    run_id: &str,
    (state, draft): (&WriterState, &mut Draft),
    text: &str,
    everything: bool,
    now: Millis,
) -> Result<String> {
    let mut ids = Vec::new();
    for value in literals::long_values(text) {
        ids.push(put_blob::<B>(c, run_id, (state, draft), value, everything, now).await?);
    }
    Ok(literals::skeleton(text, &ids))
}

/// Stores an event's payload: its long strings, then its skeleton, each a blob. Returns the
/// skeleton's blob, which the event's row names.
pub(crate) async fn put_event<B: ContentStatements>(
    c: &mut Conn<B>,
    run_id: &str,
    (state, draft): (&WriterState, &mut Draft),
    payload: &str,
    now: Millis,
) -> Result<i64> {
    let skeleton = put_document::<B>(c, run_id, (state, draft), payload, false, now).await?;
    put_blob::<B>(c, run_id, (state, draft), &skeleton, false, now).await
}

/// Stores a checkpoint's long strings (nearly all stored already, by the events it covers)
/// and returns the gzip of its skeleton, the checkpoint row's body.
pub(crate) async fn put_checkpoint<B: ContentStatements>(
    c: &mut Conn<B>,
    run_id: &str,
    (state, draft): (&WriterState, &mut Draft),
    document: &str,
    now: Millis,
) -> Result<Vec<u8>> {
    let skeleton = put_document::<B>(c, run_id, (state, draft), document, true, now).await?;
    let mut gz = GzEncoder::new(
        Vec::with_capacity(skeleton.len() / 4),
        Compression::default(),
    );
    gz.write_all(skeleton.as_bytes())
        .expect("writing to memory");
    Ok(gz.finish().expect("writing to memory"))
}
