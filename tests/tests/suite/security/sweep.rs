//! The sweep: every byte a finished daemon wrote or sent, searched for its secrets.
//!
//! [`Sweep`] collects, each under a label saying where it came from: a dump of every table and
//! column of the database (SQLite or PostgreSQL; text and blobs), every file under the data
//! directory, the daemon's captured stdout and stderr, and whatever else the test adds (API
//! answers it fetched, notification bodies a fake receiver got, requests a fake provider
//! received). Every gzip stream found (checkpoints, gzipped files) is searched decompressed
//! as well. [`Sweep::assert_clean`] fails naming the place and the form when any secret
//! appears exactly, in any of its covered encodings (see
//! `nightshift_tools::secret_encodings::forms`), or as any substring of 8 characters or more
//! (12 when it is only hex digits, which random ids and signatures match by chance).

use std::io::Read;
use std::path::Path;

use nightshift_tests::{Backend, TestDb};
use sqlx::Row;

/// Everything collected so far: (where it came from, the bytes).
#[derive(Default)]
pub struct Sweep {
    pub blobs: Vec<(String, Vec<u8>)>,
}

impl Sweep {
    /// Adds `bytes` found at `place` (and, if it is gzip, its decompressed content).
    pub fn add(&mut self, place: impl Into<String>, bytes: impl Into<Vec<u8>>) {
        let place = place.into();
        let bytes = bytes.into();
        if bytes.starts_with(&[0x1f, 0x8b]) {
            let mut out = Vec::new();
            if flate2::read::GzDecoder::new(&bytes[..])
                .read_to_end(&mut out)
                .is_ok()
            {
                self.blobs.push((format!("{place} (gunzipped)"), out));
            }
        }
        self.blobs.push((place, bytes));
    }

    /// Every file under `dir`, recursively.
    pub fn add_dir(&mut self, dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                self.add_dir(&path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                self.add(path.display().to_string(), bytes);
            }
        }
    }

    /// What a daemon wrote on disk: the database (every row, and the SQLite file and its WAL
    /// as bytes) and every file under `data_dir` but the workspaces, which hold what the
    /// commands themselves wrote (they were given the secrets), not what the daemon wrote.
    pub async fn add_daemon_disk(&mut self, db: &TestDb, data_dir: &Path) {
        self.add_database(db).await;
        if let Some(file) = nightshift_runner::private::sqlite_file(&db.config.url) {
            for suffix in ["", "-wal"] {
                let p = format!("{}{suffix}", file.display());
                if let Ok(bytes) = std::fs::read(&p) {
                    self.add(p, bytes);
                }
            }
        }
        for entry in std::fs::read_dir(data_dir).unwrap().flatten() {
            let path = entry.path();
            if path.file_name() == Some("workspaces".as_ref()) {
                continue;
            }
            if path.is_dir() {
                self.add_dir(&path);
            } else {
                self.add(path.display().to_string(), std::fs::read(&path).unwrap());
            }
        }
    }

    /// Every column of every row of every table of the test's database.
    pub async fn add_database(&mut self, db: &TestDb) {
        match db.backend {
            Backend::Sqlite => self.add_sqlite(db).await,
            Backend::Postgres => self.add_postgres(db).await,
        }
    }

    async fn add_sqlite(&mut self, db: &TestDb) {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&db.config.url)
            .await
            .expect("open the SQLite file");
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        assert!(tables.len() > 3, "the dump sees the schema: {tables:?}");
        for table in tables {
            let columns: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT name FROM pragma_table_info('{table}')"
            )))
            .fetch_all(&mut conn)
            .await
            .unwrap();
            // Every column as the bytes stored (text, blob or a number's text).
            let select = columns
                .iter()
                .map(|c| format!("CAST(\"{c}\" AS BLOB)"))
                .collect::<Vec<_>>()
                .join(", ");
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {select} FROM \"{table}\""
            )))
            .fetch_all(&mut conn)
            .await
            .unwrap();
            for (n, row) in rows.iter().enumerate() {
                for (i, column) in columns.iter().enumerate() {
                    if let Some(bytes) = row.try_get::<Option<Vec<u8>>, _>(i).unwrap() {
                        self.add(format!("sqlite {table}.{column} row {n}"), bytes);
                    }
                }
            }
        }
    }

    async fn add_postgres(&mut self, db: &TestDb) {
        use sqlx::Connection;
        let schema = db.config.schema.clone().expect("the test's schema");
        let mut conn = sqlx::PgConnection::connect(&db.config.url)
            .await
            .expect("connect to PostgreSQL");
        let columns: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT table_name::text, column_name::text, data_type::text \
             FROM information_schema.columns WHERE table_schema = $1 \
             ORDER BY table_name, ordinal_position",
        )
        .bind(&schema)
        .fetch_all(&mut conn)
        .await
        .unwrap();
        assert!(columns.len() > 10, "the dump sees the schema");
        for (table, column, kind) in columns {
            let expr = if kind == "bytea" {
                format!("\"{column}\"")
            } else {
                format!("convert_to(\"{column}\"::text, 'UTF8')")
            };
            let values: Vec<Option<Vec<u8>>> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT {expr} FROM \"{schema}\".\"{table}\""
            )))
            .fetch_all(&mut conn)
            .await
            .unwrap();
            for (n, v) in values.into_iter().enumerate() {
                if let Some(bytes) = v {
                    self.add(format!("postgres {table}.{column} row {n}"), bytes);
                }
            }
        }
    }

    /// Whether any blob contains `needle` (for the test's own checks that the secrets were
    /// really printed, e.g. their `[REDACTED:NAME]` markers).
    pub fn contains(&self, needle: &str) -> bool {
        self.blobs
            .iter()
            .any(|(_, b)| String::from_utf8_lossy(b).contains(needle))
    }

    /// Panics naming the place and the form if any of `secrets` (name, value) shows: the value,
    /// one of its covered encodings, or any substring of 8+ characters of the value (12+ when
    /// the substring is only hex digits: see [`piece_length`]).
    pub fn assert_clean(&self, secrets: &[(&str, &str)]) {
        let needles = needles(secrets);
        let mut found = Vec::new();
        for (place, bytes) in &self.blobs {
            let text = String::from_utf8_lossy(bytes);
            for (what, needle) in &needles {
                if let Some(at) = text.find(needle.as_str()) {
                    let mut from = at.saturating_sub(60);
                    while !text.is_char_boundary(from) {
                        from -= 1;
                    }
                    let mut to = (at + needle.len() + 60).min(text.len());
                    while !text.is_char_boundary(to) {
                        to += 1;
                    }
                    found.push(format!("{what} in {place}: …{}…", &text[from..to]));
                }
            }
        }
        assert!(
            found.is_empty(),
            "{} leak(s) in {} places swept:\n{}",
            found.len(),
            self.blobs.len(),
            found.join("\n")
        );
    }
}

/// What [`Sweep::assert_clean`] searches for: (what it is, the text).
fn needles(secrets: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut needles: Vec<(String, String)> = Vec::new();
    for (name, value) in secrets {
        needles.push((format!("{name} exactly"), value.to_string()));
        for (form, text) in nightshift_tools::secret_encodings::forms(value) {
            needles.push((format!("{name} as {form}"), text));
        }
        let chars: Vec<char> = value.chars().collect();
        for start in 0..chars.len() {
            let Some(len) = piece_length(&chars[start..]) else {
                continue;
            };
            let piece: String = chars[start..start + len].iter().collect();
            needles.push((format!("{name}[{start}..{}]", start + len), piece));
        }
    }
    needles
}

/// How long the piece of a secret starting at `rest` must be to count as a leak: 8 characters,
/// or 12 when the first 8 are all hex digits, or None when too little is left.
///
/// Random hex is everywhere in what a daemon writes (HMAC signatures, trace and span ids, run
/// ids, hashes): some 10^5 hex positions per sweep, against which each 8-hex-digit piece of a
/// random secret matches by chance with probability 16^-8, so a sweep of five secrets fails by
/// coincidence about once in a few hundred runs (it did, in CI: a token's 8 digits inside a
/// notification's signature). At 12 digits a chance match is some 10^-8 per sweep. A piece with
/// any other character (the `ns_`, `sk-`, `ghp_` prefixes, base64, escapes) stays at 8.
fn piece_length(rest: &[char]) -> Option<usize> {
    let len = if rest.len() >= 8 && rest[..8].iter().all(char::is_ascii_hexdigit) {
        12
    } else {
        8
    };
    (rest.len() >= len).then_some(len)
}

#[test]
fn hex_pieces_are_searched_at_12_digits_and_others_at_8() {
    let pieces: Vec<String> = needles(&[("T", "ns_0123456789abcdef")])
        .into_iter()
        .filter(|(what, _)| what.starts_with("T["))
        .map(|(_, text)| text)
        .collect();
    // Every start whose first 8 characters hold a non-hex one, at 8; every all-hex start with
    // 12 characters left, at 12; nothing shorter.
    assert_eq!(
        pieces,
        [
            "ns_01234",
            "s_012345",
            "_0123456",
            "0123456789ab",
            "123456789abc",
            "23456789abcd",
            "3456789abcde",
            "456789abcdef",
        ]
    );
}
