//! Secrets through a real `nightshift serve`: a model that makes commands print every secret
//! the daemon holds — plainly, base64 (three alignments and base64url), hex (both cases),
//! percent-encoded, JSON-escaped, reversed, and across the output's head and tail cuts,
//! `read_file`'s line cut and `grep`'s cut — that puts secrets in its own tool inputs and
//! final text, and a provider whose 401 echoes the key. Afterwards [`sweep::Sweep`] searches
//! every byte the daemon wrote or sent (database dump with checkpoints decompressed, data
//! directory, logs, API answers, notification bodies, requests to the provider) for any
//! secret, any covered encoding of one, or any 8-character piece of one.
//!
//! - `sweep`: the reusable sweep.
//! - `leaks`: the daemon and its fakes, and the cases.

mod leaks;
pub mod sweep;
