//! The directory driver against the kernel: a worker writes into its directory resource step by
//! step, checkpointing with every step's outcome; it "crashes" (its live directory is lost and
//! the dispatch is re-delivered); the next worker is told to re-create the resource from the
//! latest checkpoint, and finds exactly what the recorded steps wrote.

use test_support::rebuno::kernel as harness;

use harness::*;
use rebuno::agent::resources::{DirectoryDriver, ResourceDriver};
use rebuno::protocol::{BindResourceRequest, Capture, Checkpoints, DeclareResourceRequest};

fn declare(driver: &DirectoryDriver) -> DeclareResourceRequest {
    DeclareResourceRequest {
        key: "scratch".into(),
        driver_id: driver.driver_id().into(),
        configuration: driver.configuration(),
        coverage_reuse: false,
        every_steps: 1,
        on_completion: true,
    }
}

/// Opens or re-creates the resource as the kernel says; answers its binding.
async fn open(env: &Env, driver: &DirectoryDriver, exec: &str, lease: &Lease) -> Value {
    let view = env
        .k
        .declare_resource(exec, lease, declare(driver))
        .await
        .unwrap();
    if !view.binding.is_null() {
        return view.binding;
    }
    let from = Some(view.checkpoint_ref.as_str()).filter(|r| !r.is_empty());
    let binding = driver.create(from).unwrap();
    let bind = BindResourceRequest {
        binding: binding.clone(),
    };
    env.k
        .bind_resource(exec, "scratch", lease, bind)
        .await
        .unwrap();
    binding
}

/// Runs step `n` (append a line) and completes it with a checkpoint when due.
async fn write_step(
    env: &Env,
    driver: &DirectoryDriver,
    exec: &str,
    lease: &Lease,
    binding: &Value,
    n: u32,
) {
    let mut req = tool("work", &format!("{{\"n\":{n}}}"));
    req.resources = vec!["scratch".into()];
    let d = env.submit(exec, lease, req).await;
    assert_eq!(d.decision, Decision::Proceed);
    let path = DirectoryDriver::path(binding).unwrap().join("log.txt");
    let mut text = std::fs::read_to_string(&path).unwrap_or_default();
    text.push_str(&format!("step {n}\n"));
    std::fs::write(&path, text).unwrap();
    let mut cps = Checkpoints::default();
    for r in d.resources.iter().filter(|r| r.due) {
        cps.captures.push(Capture {
            key: r.key.clone(),
            generation: r.generation,
            checkpoint_ref: driver.capture(binding).unwrap(),
        });
    }
    assert_eq!(cps.captures.len(), 1, "every_steps 1: due after each step");
    env.k
        .complete_step_with(
            exec,
            d.step_id.as_deref().unwrap(),
            lease,
            Some(json!(n)),
            cps,
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_directory_resource_resumes_from_its_checkpoint_after_a_crash() {
    each_backend(config(), |env| async move {
        let root = TempDir::new();
        let driver = DirectoryDriver::new(root.0.join("work"), root.0.join("checkpoints"));
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let binding = open(&env, &driver, &exec, &lease).await;
        for n in 1..=2 {
            write_step(&env, &driver, &exec, &lease, &binding, n).await;
        }
        // Step 3 runs but the worker dies before completing it: its write is lost with the
        // live directory.
        let mut req = tool("work", r#"{"n":3}"#);
        req.resources = vec!["scratch".into()];
        assert_eq!(
            env.submit(&exec, &lease, req).await.decision,
            Decision::Proceed
        );
        let live = DirectoryDriver::path(&binding).unwrap();
        std::fs::write(live.join("log.txt"), "step 1\nstep 2\nstep 3 (half-done)\n").unwrap();
        std::fs::remove_dir_all(&live).unwrap();

        let lease2 = env.redeliver(&exec, &lease).await;
        let restored = open(&env, &driver, &exec, &lease2).await;
        assert_ne!(
            restored, binding,
            "a new instance, restored from the checkpoint"
        );
        let path = DirectoryDriver::path(&restored).unwrap().join("log.txt");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "step 1\nstep 2\n");
        // The recorded steps replay; step 3 runs again on the restored directory.
        for n in 1..=2 {
            let mut req = tool("work", &format!("{{\"n\":{n}}}"));
            req.resources = vec!["scratch".into()];
            assert_eq!(
                env.submit(&exec, &lease2, req).await.decision,
                Decision::Replay
            );
        }
        write_step(&env, &driver, &exec, &lease2, &restored, 3).await;
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "step 1\nstep 2\nstep 3\n"
        );
    })
    .await;
}
