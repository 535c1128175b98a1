//! The queues under test, as one type, so one procedure serves them all.
//!
//! What it is: [`Env`] says where a queue lives (a SQLite temp dir, or a PostgreSQL server),
//! [`Who`] which queue it is (ours, or apalis with batch size 1 or its default), and
//! [`AnySubject`] is any of them behind the [`Subject`] trait of `harness.rs`.
//!
//! How each is opened: ours on a fresh SQLite file or a fresh PostgreSQL schema (`ours.rs`);
//! apalis on a fresh SQLite file (`apalis_sqlite.rs`) or a fresh PostgreSQL database
//! (`apalis_pg.rs`). Every name (file, schema, database) is `nsbench_<pid>_<sequence>`, made by
//! the caller, so runs never share state and teardown knows what to remove.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;

use crate::apalis_pg::ApalisPg;
use crate::apalis_sqlite::{ApalisSqlite, PragmaLog};
use crate::harness::{Probe, Running, Subject};
use crate::ours::Ours;

/// Where the queues under test live.
#[derive(Debug, Clone)]
pub(crate) enum Env {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Env {
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Env::Sqlite(_) => "SQLite",
            Env::Postgres(_) => "PostgreSQL",
        }
    }
}

/// Which queue, and for apalis which batch size (None: apalis's default).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Who {
    Ours,
    Apalis(Option<usize>),
}

impl Who {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Who::Ours => "ours",
            Who::Apalis(Some(_)) => "apalis (batch 1)",
            Who::Apalis(None) => "apalis (default batch)",
        }
    }
}

/// Any queue under test, so one procedure serves all.
pub(crate) enum AnySubject {
    Ours(Ours),
    ApalisSqlite(ApalisSqlite),
    ApalisPg(ApalisPg),
}

macro_rules! each {
    ($s:expr, $x:ident => $e:expr) => {
        match $s {
            AnySubject::Ours($x) => $e,
            AnySubject::ApalisSqlite($x) => $e,
            AnySubject::ApalisPg($x) => $e,
        }
    };
}

impl Subject for AnySubject {
    async fn enqueue(&mut self) -> Result<()> {
        each!(self, s => s.enqueue().await)
    }

    async fn preload(&mut self, n: u64) -> Result<()> {
        each!(self, s => s.preload(n).await)
    }

    async fn done(&self) -> Result<u64> {
        each!(self, s => s.done().await)
    }

    fn start(&mut self, probe: Probe) -> Result<Running> {
        each!(self, s => s.start(probe))
    }

    async fn teardown(self) -> Result<()> {
        each!(self, s => s.teardown().await)
    }
}

impl AnySubject {
    /// A fresh queue of `who` in `env`, its file, schema or database named `name`. apalis's
    /// SQLite connections record their pragmas in `pragmas`.
    pub(crate) async fn open(
        env: &Env,
        who: Who,
        name: &str,
        pragmas: &Arc<PragmaLog>,
    ) -> Result<AnySubject> {
        Ok(match (env, who) {
            (Env::Sqlite(dir), Who::Ours) => AnySubject::Ours(Ours::sqlite(dir, name).await?),
            (Env::Postgres(url), Who::Ours) => AnySubject::Ours(Ours::postgres(url, name).await?),
            (Env::Sqlite(dir), Who::Apalis(batch)) => AnySubject::ApalisSqlite(
                ApalisSqlite::open(dir, name, batch, pragmas.clone()).await?,
            ),
            (Env::Postgres(url), Who::Apalis(batch)) => {
                AnySubject::ApalisPg(ApalisPg::open(url, name, batch).await?)
            }
        })
    }
}
