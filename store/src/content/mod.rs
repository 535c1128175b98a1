//! A run's content, stored once: what keeps a long run's storage linear in what it holds.
//!
//! Every event payload and checkpoint the store is given is JSON text. Before it is stored,
//! each of its long string values (a tool's output, a model's reply, a prompt: at least
//! [`LONG_LITERAL`](literals::LONG_LITERAL) bytes) is taken out into a *blob* of the run, and
//! what remains — the *skeleton*, holding a reference where each string was — is stored:
//!
//! - an **event** keeps its skeleton in a blob of its own (`run_events.blob_id`);
//! - a **checkpoint** keeps its skeleton gzipped in its row (`checkpoints.encoding = 1`), and
//!   only the newest checkpoint of a run is kept: it refers to the same blobs as the events
//!   it covers, so it costs the size of its skeleton, not of the conversation again.
//!
//! Blobs are **content-addressed** within a run (`run_blobs (run_id, hash)` is unique): a
//! string already stored — a tool result the checkpoint repeats, a prompt sent twice — is
//! referred to, never stored again. They are **chain-compressed** ([`chain`]): each is
//! deflated against the content its writer stored just before, so many small pieces
//! compress about as well as one stream; a chain ends after
//! [`CHAIN_RAW_MAX`](chain::CHAIN_RAW_MAX) bytes, which bounds what reading one blob costs.
//!
//! What it guarantees:
//! - **Exact.** A payload or checkpoint reads back byte for byte as it was given
//!   ([`literals`] works on the text, never on a parsed value).
//! - **Atomic.** The blobs of an event or a checkpoint are written in the transaction that
//!   writes its row, under the same lease fence: a refused or failed write leaves nothing, and
//!   a row that is visible has all its blobs.
//! - **Old rows read as written.** An event from before v22 keeps its payload in its row, a
//!   checkpoint of `encoding` 0 its whole gzipped document; both read as before.
//! - **Damage is an error, never a wrong text**: a blob that does not inflate to its recorded
//!   size, or a reference to a missing blob, is [`Error::Corrupt`](crate::Error::Corrupt)
//!   naming the run.

pub(crate) mod chain;
pub(crate) mod literals;
mod read;
mod statements;
mod write;

pub(crate) use read::{checkpoint, events};
pub use statements::RunStorage;
pub(crate) use statements::{
    BlobRow, CheckpointRecord, ContentStatements, EventRecord, NewBlob, content_statements,
};
pub(crate) use write::{ContentWriter, Draft, WriterState, put_checkpoint, put_event};

use crate::Result;
use crate::store::{Store, dispatch};

impl Store {
    /// What run `run_id`'s log, content and checkpoints take in the database.
    pub async fn run_storage(&self, run_id: &str) -> Result<RunStorage> {
        dispatch!(self, b => read::run_storage(b, run_id))
    }
}
