//! `nightshift-sandbox-exec sandbox-exec <policy JSON> -- <program> <args…>`: the launcher of
//! `nightshift sandbox-exec` on its own (see `nightshift_sandbox::launch`), for tests.

fn main() {
    let code =
        nightshift_sandbox::launch::dispatch(std::env::args_os().collect()).unwrap_or_else(|| {
            eprintln!(
                "usage: nightshift-sandbox-exec sandbox-exec <policy JSON> -- <program> [args…]"
            );
            2
        });
    std::process::exit(code);
}
