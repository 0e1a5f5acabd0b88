//! `rebuno::step::random_u64`: all 64 bits come from the operating system's generator, and each
//! draw is a recorded step whose value the execution's record keeps.

use rebuno::protocol::{CreateExecutionRequest, ExecutionStatus, StepStatus};
use rebuno::{Error, Kernel, Runtime, handler_fn};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Draws a value depending on the UUID version or variant bits (as the old implementation,
/// a UUIDv4's first eight bytes, did) would leave some bits the same in every draw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_u64_draws_every_bit_and_records_each_draw() {
    const DRAWS: usize = 64;
    let kernel = Kernel::memory().await.unwrap();
    let rt = Runtime::new(kernel.clone());
    let agent = rt
        .register(handler_fn("drawer", |_input: Value| async {
            let mut drawn = Vec::with_capacity(DRAWS);
            for i in 0..DRAWS {
                drawn.push(rebuno::step::random_u64(&format!("draw-{i}")).await?);
            }
            Ok::<_, Error>(json!(drawn))
        }))
        .await
        .unwrap();
    rt.start();
    let id = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: agent.id().to_owned(),
            input: None,
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    let deadline = Instant::now() + Duration::from_secs(30);
    let exec = loop {
        let e = kernel.execution(&id).await.unwrap();
        if e.status.is_terminal() {
            break e;
        }
        assert!(Instant::now() < deadline, "execution stuck: {e:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(exec.status, ExecutionStatus::Completed, "{exec:?}");
    let drawn: Vec<u64> = serde_json::from_value(exec.output.unwrap()).unwrap();
    assert_eq!(drawn.len(), DRAWS);

    let (every, any) = drawn
        .iter()
        .fold((u64::MAX, 0u64), |(every, any), x| (every & x, any | x));
    assert_eq!(every, 0, "bits set in every draw: {every:#018x}");
    assert_eq!(any, u64::MAX, "bits clear in every draw: {:#018x}", !any);

    // Each draw is a recorded step holding the value the handler got.
    let steps = kernel.steps(&id, false).await.unwrap();
    assert_eq!(steps.len(), DRAWS);
    for step in steps {
        assert_eq!(step.status, StepStatus::Succeeded);
        let i: usize = step.target.strip_prefix("draw-").unwrap().parse().unwrap();
        assert_eq!(step.result, Some(json!(drawn[i])), "{}", step.target);
    }
}
