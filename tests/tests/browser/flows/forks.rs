//! Forking from the page: **Fork from here** on a finished run's last model turn makes a
//! fork that lands on its own page, links back to its parent (whose page lists it), and ends
//! like it without posting again (the `post` command's receiver, `out/posts`, still holds one
//! line).

use std::time::Duration;

use nightshift_store::RunStatus;
use nightshift_tests::{Backend, eventually};
use serde_json::json;

use super::{click, open_run, setup, sign_in, teardown};

#[tokio::test]
async fn a_fork_from_a_model_turn_reuses_the_side_effect_before_it() {
    let Some((db, serve, b)) = setup(Backend::Sqlite, "browser_fork").await else {
        return;
    };
    sign_in(&b, &serve).await;
    let parent = serve.enqueue("reviewer", "Review PR 7.", json!({})).await;
    serve.wait_for(&parent, RunStatus::Succeeded).await;
    let posts = serve.gate("posts");
    let lines = || {
        std::fs::read_to_string(&posts)
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert_eq!(lines(), 1, "the parent posted once");
    open_run(&b, &serve, &parent).await;
    // Turn 2 is the answer after the post: a fork from it keeps the lint and the post.
    click(
        &b,
        "li[data-kind=model_turn] form[data-action=fork] input[name=from_turn][value='2'] ~ button",
    )
    .await;
    b.until(
        "the fork's page",
        &format!(
            "return location.pathname.startsWith('/ui/runs/') && !location.pathname.endsWith('{parent}') \
             && !!document.querySelector('.flash')"
        ),
    )
    .await;
    let flash = b.find(".flash").await.text().await.unwrap();
    assert!(
        flash.contains(&format!("Forked from run {parent} at turn 2")),
        "{flash}"
    );
    let path = b.js("return location.pathname").await;
    let fork = path
        .as_str()
        .unwrap()
        .trim_start_matches("/ui/runs/")
        .to_string();
    serve.wait_for(&fork, RunStatus::Succeeded).await;
    let link = b
        .find(&format!("#run-header a[href='/ui/runs/{parent}']"))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(link, parent);
    eventually(
        Duration::from_secs(30),
        "the fork item on its timeline",
        || async {
            let n = b
                .js("return document.querySelectorAll('ol#timeline > li[data-kind=fork]').length")
                .await;
            (n.as_u64() == Some(1)).then_some(())
        },
    )
    .await;
    assert_eq!(
        lines(),
        1,
        "the fork read the post's result; nothing was posted again"
    );
    // The parent's page lists the fork, linking to it.
    open_run(&b, &serve, &parent).await;
    let listed = b
        .find(&format!(
            "#forks li[data-fork='{fork}'] a[href='/ui/runs/{fork}']"
        ))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(listed, fork);
    teardown(db, serve, b).await;
}
