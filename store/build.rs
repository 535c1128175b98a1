//! Renders the store's SQL files into `OUT_DIR`, where `sql!` embeds them from.
//!
//! - **One list of run states.** A SQL file names the states a run has ended in as
//!   `{terminal_run_states}`, the others as `{live_run_states}`, and the live ones no worker
//!   holds (a claim may start or resume them) as `{idle_run_states}`; all are rendered from
//!   `src/run_states.rs` (tied to `RunStatus::is_terminal` by a test), so no SQL file spells
//!   them out. Any other `{…_run_states}` is an error here.
//! - **Every statement by name.** `statements.rs` maps `(backend, name)` to the rendered text
//!   (`nightshift_store::statement`), for tests that read plans or check binds.
//! - Rebuilds the store when a migration is added or changed: `sqlx::migrate!` embeds
//!   `migrations/` at compile time but does not tell cargo to watch the directory, so without
//!   this an incremental build keeps serving the migrations it saw last.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

include!("src/run_states.rs");

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
    println!("cargo:rerun-if-changed=sql");
    println!("cargo:rerun-if-changed=src/run_states.rs");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut files = Vec::new();
    collect(Path::new("sql"), &mut files);
    files.sort();
    let mut table = String::from(
        "/// The rendered text of `store/sql/{backend}/{name}.sql`.\n\
         pub fn statement(backend: &str, name: &str) -> Option<&'static str> {\n\
         \x20   Some(match (backend, name) {\n",
    );
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a SQL file is readable");
        let rendered = render(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let target = out.join(file);
        std::fs::create_dir_all(target.parent().expect("a SQL file has a directory"))
            .expect("OUT_DIR is writable");
        std::fs::write(&target, rendered).expect("OUT_DIR is writable");
        let relative = file.strip_prefix("sql").expect("under sql/");
        let mut parts = relative.iter().map(|p| p.to_string_lossy().into_owned());
        let backend = parts.next().expect("sql/BACKEND/…");
        let name = parts.collect::<Vec<_>>().join("/");
        let Some(name) = name.strip_suffix(".sql") else {
            panic!(
                "{}: a SQL file belongs under sql/sqlite/ or sql/postgres/",
                file.display()
            );
        };
        writeln!(
            table,
            "        ({backend:?}, {name:?}) => include_str!({:?}),",
            target.display().to_string()
        )
        .expect("writing to a String");
    }
    table.push_str("        _ => return None,\n    })\n}\n");
    table.push_str(&constants(&files, &out));
    std::fs::write(out.join("statements.rs"), table).expect("OUT_DIR is writable");
}

/// `pub mod sql { pub mod sqlite { pub const LISTING_PAGE: &str = …; … } … }`: each rendered
/// statement as a constant named after its path.
fn constants(files: &[PathBuf], out: &Path) -> String {
    let mut code = String::from(
        "/// Every rendered statement, by backend, named after its path \
         (`listing/page.sql`: `LISTING_PAGE`).\npub mod sql {\n",
    );
    for backend in ["sqlite", "postgres"] {
        writeln!(
            code,
            "    /// `store/sql/{backend}/`.\n    pub mod {backend} {{"
        )
        .expect("a String");
        for file in files
            .iter()
            .filter(|f| f.starts_with(Path::new("sql").join(backend)))
        {
            let relative = file
                .strip_prefix(Path::new("sql").join(backend))
                .expect("under it");
            let name = relative.with_extension("").display().to_string();
            let constant = name.replace(['/', '-'], "_").to_uppercase();
            writeln!(
                code,
                "        #[doc = {:?}]\n        pub const {constant}: &str = include_str!({:?});",
                format!("`{name}.sql`"),
                out.join(file).display().to_string()
            )
            .expect("a String");
        }
        code.push_str("    }\n");
    }
    code.push_str("}\n");
    code
}

/// Every `.sql` file under `dir`.
fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("store/sql is readable") {
        let path = entry.expect("store/sql is readable").path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "sql") {
            files.push(path);
        }
    }
}

/// `text` with the run-state lists filled in.
fn render(text: &str) -> Result<String, String> {
    let list = |keep: &dyn Fn(&str, bool) -> bool| {
        RUN_STATES
            .iter()
            .filter(|(name, terminal)| keep(name, *terminal))
            .map(|(name, _)| format!("'{name}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let rendered = text
        .replace("{terminal_run_states}", &list(&|_, terminal| terminal))
        .replace("{live_run_states}", &list(&|_, terminal| !terminal))
        .replace(
            "{idle_run_states}",
            &list(&|name, terminal| !terminal && name != "running"),
        );
    match rendered.find("_run_states}") {
        Some(at) => Err(format!(
            "unknown list {:?}: only {{terminal_run_states}}, {{live_run_states}} and \
             {{idle_run_states}} are known",
            &rendered[rendered[..at].rfind('{').unwrap_or(at)..at + 12]
        )),
        None => Ok(rendered),
    }
}
