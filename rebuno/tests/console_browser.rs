//! The web console in a real browser: headless Chromium driven over WebDriver by Debian's
//! `chromedriver` (`apt-get install chromium chromium-driver`; `.ci/run` installs both). An
//! approval granted from the inbox resumes its execution to completion, a live output delta
//! appears without a reload, markup in an input renders as inert text, and a grant posted from
//! another site is refused. Each page is saved as a screenshot at 1440 and 390 pixels wide under
//! `target/console-screenshots/`.

use test_support::browser;
use test_support::rebuno::console;

use browser::{Driver, WAIT};
use console::*;
use rebuno::protocol::StreamFrame;

/// The two widths every page is checked and photographed at.
const WIDTHS: [(u32, u32, &str); 2] = [(1440, 900, "1440"), (390, 844, "390")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromedriver"]
async fn an_approval_granted_in_the_console_resumes_the_execution() {
    let f = fixture(None).await;
    let (id, _) = f
        .blocked_refund(json!({"order": 42, "note": "damaged"}))
        .await;
    let mut d = Driver::start(1440, 900).await;
    // Log in with a name: the approval is decided as alice, one of its approvers.
    d.goto(&format!("{}/ui/login?next=%2Fui%2Fapprovals", f.base))
        .await;
    let name = d.find("#name").await;
    d.type_into(&name, "alice").await;
    d.click(&d.find("form button[type=submit]").await).await;
    d.find("article.approval").await;
    assert!(d.current_url().await.ends_with("/ui/approvals"));
    // Every page, at both widths, before the decision.
    let pages = [
        ("executions", "/ui/executions".to_owned()),
        ("execution-blocked", format!("/ui/executions/{id}")),
        ("agents", "/ui/agents".to_owned()),
        ("agent", "/ui/agents/refunder".to_owned()),
        ("approvals", "/ui/approvals".to_owned()),
    ];
    for (w, h, label) in WIDTHS {
        d.resize(w, h).await;
        for (name, path) in &pages {
            d.goto(&format!("{}{path}", f.base)).await;
            d.find("main h1").await;
            // Nothing overflows the viewport sideways (tables scroll inside their box).
            let wide = d
                .execute("return document.documentElement.scrollWidth > window.innerWidth + 1;")
                .await;
            assert_eq!(wide, json!(false), "{name} is wider than {w} px");
            d.screenshot(&format!("{name}-{label}")).await;
        }
    }
    d.resize(1440, 900).await;
    let rationale = d.find("article.approval textarea").await;
    d.type_into(&rationale, "customer sent photos").await;
    d.click(&d.find("article.approval button.grant").await)
        .await;
    // The grant lands on the execution, which resumes and completes; the page follows live.
    f.wait_status(&id, ExecutionStatus::Completed).await;
    assert!(
        d.current_url()
            .await
            .ends_with(&format!("/ui/executions/{id}"))
    );
    d.wait_text("#live dl.fields", "completed").await;
    d.wait_text("#live", "customer sent photos").await;
    assert!(
        d.find_all("#live form.inline").await.is_empty(),
        "no cancel once ended"
    );
    d.screenshot("execution-completed-1440").await;
    assert_eq!(f.refunds.load(Ordering::SeqCst), 1);
    let approval = &f
        .kernel
        .approval(&pending_or_decided(&f, &id).await)
        .await
        .unwrap();
    assert_eq!(approval.decided_by, "alice");
    assert_eq!(approval.status, ApprovalStatus::Granted);
}

/// The id of execution `id`'s approval, read from its event log.
async fn pending_or_decided(f: &Fixture, id: &str) -> String {
    let events = f.kernel.events(id, 0, 0).await.unwrap();
    events
        .iter()
        .find_map(|e| e.payload["approval_id"].as_str().map(str::to_owned))
        .expect("an approval event")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromedriver"]
async fn a_live_output_delta_appears_without_a_reload() {
    let f = fixture(None).await;
    let (id, _) = f.blocked_refund(json!({"order": 7})).await;
    let d = Driver::start(1440, 900).await;
    d.goto(&format!("{}/ui/executions/{id}", f.base)).await;
    d.find("#output").await;
    // A marker on this document: a reload would lose it.
    d.execute("document.documentElement.dataset.marker = 'same-document'; return null;")
        .await;
    // Deltas are not stored: one sent before the page subscribed is lost, so keep sending
    // (each with the next seq) until one shows.
    let deadline = Instant::now() + WAIT;
    let mut seq = 0;
    loop {
        seq += 1;
        f.kernel
            .publish(
                &id,
                StreamFrame {
                    step_id: "live".into(),
                    seq,
                    data: "<b>delta</b> ".into(),
                },
            )
            .unwrap();
        if d.text_of("#output").await.contains("<b>delta</b>") {
            break;
        }
        assert!(Instant::now() < deadline, "no delta reached the page");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let marker = d
        .execute("return document.documentElement.dataset.marker || null;")
        .await;
    assert_eq!(marker, json!("same-document"), "the page was reloaded");
    // The delta's markup is text, not an element.
    assert!(d.find_all("#output b").await.is_empty());
    d.screenshot("execution-live-output-1440").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromedriver"]
async fn markup_in_an_input_renders_inert() {
    let f = fixture(None).await;
    let hostile = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\"><b id=bold>bold</b>";
    let (id, _) = f.blocked_refund(json!({"order": 9, "note": hostile})).await;
    let d = Driver::start(1440, 900).await;
    for path in [format!("/ui/executions/{id}"), "/ui/approvals".to_owned()] {
        d.goto(&format!("{}{path}", f.base)).await;
        d.find("main h1").await;
        assert!(
            d.title().await.ends_with("· rebuno"),
            "{path}: {}",
            d.title().await
        );
        assert!(
            d.find_all("main img, main script, #bold").await.is_empty(),
            "{path}"
        );
        let text = d.text_of("main").await;
        assert!(
            text.contains("<script>document.title='pwned'</script>"),
            "{path}: {text}"
        );
    }
    d.screenshot("execution-hostile-input-1440").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromedriver"]
async fn a_cross_site_grant_is_refused() {
    let f = fixture(None).await;
    let (id, approval) = f.blocked_refund(json!({"order": 11})).await;
    // Another origin (another port) whose page posts a grant to the console as soon as it
    // loads, with a guessed CSRF token.
    let page = format!(
        "<!doctype html><form id=f method=post action=\"{}/ui/approvals/{approval}/grant\">\
         <input name=csrf value=guessed><input name=rationale value=forged></form>\
         <script>document.getElementById('f').submit()</script>",
        f.base
    );
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let evil = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let d = Driver::start(1440, 900).await;
    // The viewer has a console session (dev mode opens one on the first page).
    d.goto(&format!("{}/ui/approvals", f.base)).await;
    d.find("article.approval").await;
    d.goto(&evil).await;
    d.wait_text("main", "cross-site request refused").await;
    d.screenshot("cross-site-refused-1440").await;
    server.abort();
    assert_eq!(
        f.kernel.approval(&approval).await.unwrap().status,
        ApprovalStatus::Pending
    );
    f.wait_status(&id, ExecutionStatus::Blocked).await;
    assert_eq!(f.refunds.load(Ordering::SeqCst), 0);
}
