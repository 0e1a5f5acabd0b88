//! Resources in the Rust agent runtime, over real HTTP and embedded: a handler declares a
//! directory resource with `rebuno::resource` (checkpointed after every step) and appends one
//! line per call of a tool that names it. The worker "crashes" in the middle of the third call,
//! after that call already wrote its line into the live directory (its handlers are aborted and
//! the dispatch is reclaimed and re-delivered). The next attempt is told to re-create the
//! resource from the latest checkpoint: the recorded calls replay without running, the
//! half-done line is gone, and the interrupted call and the one after it run on the restored
//! directory. A `#[rebuno::tool(resources = [...])]` tool is checkpointed exactly as the
//! `wrap_tool` form of the same tool is.

use test_support::rebuno::sdk as harness;

use harness::*;
use rebuno::agent::resources::DirectoryDriver;
use rebuno::{CheckpointPolicy, Error};

/// Builds the agent: `runs[n]` counts the body runs of call `n`; call `HANG` hangs in its
/// first run (after writing), having raised `at_crash`.
fn agent(
    driver: Arc<DirectoryDriver>,
    runs: Arc<Mutex<Vec<u32>>>,
    at_crash: Arc<AtomicBool>,
) -> rebuno::agent::FnHandler {
    const HANG: u64 = 2;
    handler_fn("res", move |_input: Value| {
        let (driver, runs, at_crash) = (driver.clone(), runs.clone(), at_crash.clone());
        async move {
            let binding =
                rebuno::resource("scratch", driver.clone(), CheckpointPolicy::every(1)).await?;
            let dir = DirectoryDriver::path(&binding).map_err(|e| Error::Other(e.to_string()))?;
            let log = dir.join("log.txt");
            let write = {
                let (log, runs, at_crash) = (log.clone(), runs.clone(), at_crash.clone());
                wrap_tool(
                    ToolDef::new("write", "appends a line").resources(["scratch"]),
                    move |args: Value| {
                        let (log, runs, at_crash) = (log.clone(), runs.clone(), at_crash.clone());
                        async move {
                            let n = args["n"].as_u64().unwrap();
                            runs.lock().unwrap()[n as usize] += 1;
                            let mut text = std::fs::read_to_string(&log).unwrap_or_default();
                            text.push_str(&format!("{n}\n"));
                            std::fs::write(&log, text).unwrap();
                            if n == HANG && !at_crash.swap(true, Ordering::SeqCst) {
                                std::future::pending::<()>().await;
                            }
                            Ok::<_, Error>(json!(n))
                        }
                    },
                )
            };
            for n in 0..4 {
                write.call(json!({ "n": n })).await?;
            }
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            Ok::<_, Error>(json!({ "log": text.lines().collect::<Vec<_>>() }))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_resumes_from_its_checkpoint_after_a_crash() {
    for mode in MODES {
        let root = tempfile::tempdir().unwrap();
        let driver = Arc::new(DirectoryDriver::new(
            root.path().join("work"),
            root.path().join("checkpoints"),
        ));
        let runs = Arc::new(Mutex::new(vec![0; 4]));
        let at_crash = Arc::new(AtomicBool::new(false));
        let handler = agent(driver, runs.clone(), at_crash.clone());
        let h = harness(mode, handler, true).await;
        let id = h.create(json!({})).await;
        wait_for("the crash point", || at_crash.load(Ordering::SeqCst)).await;
        // The baseline, then one capture with each completed call, all of the first instance.
        let before = h.kernel.resource_checkpoints(&id, "scratch", 100).await;
        let before = before.unwrap();
        assert_eq!(before.len(), 3, "{mode:?}: {before:?}");
        assert!(
            before
                .iter()
                .all(|c| c.generation == 1 && c.error.is_empty())
        );
        h.agent.abort_all(); // the process dies mid-call
        assert_eq!(h.kernel.reclaim_for_test().await, 1, "{mode:?}");

        let done = h.wait_status(&id, ExecutionStatus::Completed).await;
        assert_eq!(
            done.output,
            Some(json!({"log": ["0", "1", "2", "3"]})),
            "{mode:?}: restored from the checkpoint taken with call 1, without call 2's line"
        );
        assert_eq!(
            *runs.lock().unwrap(),
            [1, 1, 2, 1],
            "{mode:?}: recorded calls replayed, the interrupted one ran again"
        );
        let resources = h.kernel.resources(&id).await.unwrap();
        assert_eq!(resources.len(), 1, "{mode:?}");
        assert_eq!(resources[0].generation, 2, "{mode:?}: {resources:?}");
        assert_eq!(resources[0].driver_id, "directory");
        let after = h.kernel.resource_checkpoints(&id, "scratch", 100).await;
        let after = after.unwrap();
        // The second instance: its baseline and a capture with each of calls 2 and 3.
        let second: Vec<_> = after.iter().filter(|c| c.generation == 2).collect();
        assert_eq!(second.len(), 3, "{mode:?}: {after:?}");
        assert!(second.iter().all(|c| c.error.is_empty()), "{mode:?}");
        assert!(
            second.iter().skip(1).all(|c| !c.step_id.is_empty()),
            "{mode:?}: captures went with the steps' outcomes: {second:?}"
        );
    }
}

/// A resource whose policy checkpoints only on completion is captured once, when the handler
/// returns; a tool naming it gets no capture with its outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_checkpoint_is_taken_when_the_handler_returns() {
    for mode in MODES {
        let root = tempfile::tempdir().unwrap();
        let driver = Arc::new(DirectoryDriver::new(
            root.path().join("work"),
            root.path().join("checkpoints"),
        ));
        let handler = handler_fn("res", move |_input: Value| {
            let driver = driver.clone();
            async move {
                let policy = CheckpointPolicy {
                    every_steps: 0,
                    on_completion: true,
                };
                let binding = rebuno::resource("scratch", driver, policy).await?;
                let touch = wrap_tool(
                    ToolDef::new("touch", "writes a file").resources(["scratch"]),
                    move |_args: Value| {
                        let binding = binding.clone();
                        async move {
                            let dir = DirectoryDriver::path(&binding).unwrap();
                            std::fs::write(dir.join("f"), "x").unwrap();
                            Ok::<_, Error>(json!(true))
                        }
                    },
                );
                touch.call(json!({})).await
            }
        });
        let h = harness(mode, handler, true).await;
        let id = h.create(json!({})).await;
        h.wait_status(&id, ExecutionStatus::Completed).await;
        let cps = h.kernel.resource_checkpoints(&id, "scratch", 100).await;
        let cps = cps.unwrap();
        assert_eq!(cps.len(), 1, "{mode:?}: {cps:?}");
        assert_eq!(cps[0].step_id, "", "{mode:?}: outside a step");
        let dir = root.path().join("checkpoints").join(
            cps[0]
                .checkpoint_ref
                .strip_prefix("dir:")
                .expect("a directory checkpoint"),
        );
        assert_eq!(std::fs::read_to_string(dir.join("f")).unwrap(), "x");
    }
}

/// Writes the file `name` into `dir` (the live instance of the resource `scratch`).
#[rebuno::tool(resources = ["scratch"])]
async fn touch(dir: String, name: String) -> Result<bool, std::io::Error> {
    std::fs::write(std::path::Path::new(&dir).join(name), "x")?;
    Ok(true)
}

/// Declares `scratch` (checkpointed after every step) and touches two files in it, through
/// [`touch`] or, with `by_macro` false, through the `wrap_tool` form of the same tool.
fn toucher(driver: Arc<DirectoryDriver>, by_macro: bool) -> rebuno::agent::FnHandler {
    handler_fn("res", move |_input: Value| {
        let driver = driver.clone();
        async move {
            let binding = rebuno::resource("scratch", driver, CheckpointPolicy::every(1)).await?;
            let dir = binding["path"].as_str().unwrap().to_owned();
            let wrapped = wrap_tool(
                ToolDef::new("touch", "writes a file").resources(["scratch"]),
                |args: Value| async move {
                    let (dir, name) = (args["dir"].as_str(), args["name"].as_str());
                    let path = std::path::Path::new(dir.unwrap()).join(name.unwrap());
                    std::fs::write(path, "x").map(|()| json!(true))
                },
            );
            for name in ["a", "b"] {
                if by_macro {
                    touch(dir.clone(), name.to_owned()).await?;
                } else {
                    wrapped.call(json!({ "dir": dir, "name": name })).await?;
                }
            }
            Ok::<_, Error>(json!(null))
        }
    })
}

/// The macro form declares the resource on its definition and, like the `wrap_tool` form,
/// submits each call naming it, so a checkpoint is captured with each call's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_macro_tool_naming_a_resource_is_checkpointed_as_the_wrapped_form_is() {
    assert_eq!(touch::definition().resources, ["scratch"]);
    for mode in MODES {
        let mut shapes = Vec::new();
        for by_macro in [false, true] {
            let root = tempfile::tempdir().unwrap();
            let driver = Arc::new(DirectoryDriver::new(
                root.path().join("work"),
                root.path().join("checkpoints"),
            ));
            let h = harness(mode, toucher(driver, by_macro), true).await;
            let id = h.create(json!({})).await;
            h.wait_status(&id, ExecutionStatus::Completed).await;
            let steps = h.kernel.steps(&id, false).await.unwrap();
            let cps = h.kernel.resource_checkpoints(&id, "scratch", 100).await;
            // Each checkpoint by the step it went with ("" for one taken outside a step).
            let shape: Vec<String> = cps
                .unwrap()
                .iter()
                .map(|c| {
                    assert!(c.error.is_empty(), "{mode:?}: {c:?}");
                    let step = steps.iter().find(|s| s.step_id == c.step_id);
                    step.map_or(String::new(), |s| s.target.clone())
                })
                .collect();
            shapes.push(shape);
        }
        assert_eq!(shapes[0], ["", "touch", "touch"], "{mode:?}: wrap_tool");
        assert_eq!(shapes[1], shapes[0], "{mode:?}: #[rebuno::tool]");
    }
}
