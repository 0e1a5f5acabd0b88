//! Sustained load through real HTTP: 200 executions of 20 steps each, all at once, driven by a
//! signed webhook agent (axum) that submits and completes every step over loopback against the
//! `/v0` server on a SQLite kernel. Prints steps/s, step latency percentiles, and checks that
//! every execution completed with a gapless event log.
//!
//! ```text
//! cargo bench -p rebuno --bench load
//! ```

mod support;

use axum::routing::post;
use rebuno::protocol::{
    CreateExecutionRequest, HEADER_SIGNATURE, RegisterAgentRequest, StepDecision, WebhookPayload,
};
use rebuno::server::{ServerOptions, router};
use rebuno::{Kernel, signing};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_support::rebuno::serve_router as serve;

const SECRET: &str = "load-secret";
const EXECUTIONS: usize = 200;
const STEPS: usize = 20;

/// One signed agent call with the lease; the JSON answer (or `null`).
async fn call(
    client: &reqwest::Client,
    url: String,
    body: serde_json::Value,
    lease: &(String, u32),
) -> serde_json::Value {
    let body = serde_json::to_vec(&body).unwrap();
    let r = support::signed_post(client, ("load", SECRET), &url, body, (&lease.0, lease.1))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(serde_json::Value::Null)
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let rt = test_support::bench::runtime();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let kernel = Kernel::open(&format!("sqlite://{}", dir.path().join("k.db").display())).await.unwrap();
        let base = serve(router(kernel.clone(), ServerOptions::default())).await;
        let client = reqwest::Client::new();
        let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
        let done = Arc::new(tokio::sync::Semaphore::new(0));

        // The agent: ack at once, then run the execution's 20 steps in the background.
        let agent = {
            let (client, base, latencies, done) = (client.clone(), base.clone(), latencies.clone(), done.clone());
            axum::Router::new().route(
                "/hook",
                post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let (client, base, latencies, done) = (client.clone(), base.clone(), latencies.clone(), done.clone());
                    async move {
                        let sig = headers.get(HEADER_SIGNATURE).and_then(|v| v.to_str().ok()).unwrap_or_default();
                        if !signing::verify(SECRET, &body, sig) {
                            return axum::http::StatusCode::UNAUTHORIZED;
                        }
                        let p: WebhookPayload = serde_json::from_slice(&body).unwrap();
                        tokio::spawn(async move {
                            let lease = (p.dispatch_id.clone(), p.dispatch_attempt.unwrap());
                            let exec = p.execution_id;
                            for i in 0..STEPS {
                                let t = Instant::now();
                                let step = json!({"kind": "tool_call", "target": format!("tool_{i}"), "args": {"i": i}});
                                let d: StepDecision = serde_json::from_value(
                                    call(&client, format!("{base}/v0/executions/{exec}/steps"), step, &lease).await,
                                )
                                .unwrap();
                                let step_id = d.step_id.unwrap();
                                call(
                                    &client,
                                    format!("{base}/v0/executions/{exec}/steps/{step_id}/complete"),
                                    json!({"result": {"ok": i}}),
                                    &lease,
                                )
                                .await;
                                latencies.lock().unwrap().push(t.elapsed());
                            }
                            call(&client, format!("{base}/v0/executions/{exec}/complete"), json!({"output": "done"}), &lease)
                                .await;
                            done.add_permits(1);
                        });
                        axum::http::StatusCode::OK
                    }
                }),
            )
        };
        let hook = format!("{}/hook", serve(agent).await);
        kernel
            .register_agent(RegisterAgentRequest { id: "load".into(), webhook_url: hook, secret: SECRET.into(), ..RegisterAgentRequest::default() })
            .await
            .unwrap();
        let _background = kernel.start_http();

        let started = Instant::now();
        let mut ids = Vec::with_capacity(EXECUTIONS);
        for _ in 0..EXECUTIONS {
            let req = CreateExecutionRequest { agent_id: "load".into(), input: Some(json!({})), ..CreateExecutionRequest::default() };
            ids.push(kernel.create_execution(req).await.unwrap().id);
        }
        let _all = tokio::time::timeout(Duration::from_secs(600), done.acquire_many(EXECUTIONS as u32)).await.unwrap().unwrap();
        let elapsed = started.elapsed();

        let mut gapless = 0;
        for id in &ids {
            let exec = kernel.execution(id).await.unwrap();
            assert_eq!(exec.status.as_str(), "completed", "{id}");
            let events = kernel.events(id, 0, 1000).await.unwrap();
            if events.iter().enumerate().all(|(i, e)| e.event_seq == i as u64 + 1) {
                gapless += 1;
            }
        }
        let mut lat = latencies.lock().unwrap().clone();
        let steps = lat.len();
        println!(
            "{EXECUTIONS} executions x {STEPS} steps over HTTP (SQLite): {steps} steps in {:.2} s = {:.0} steps/s",
            elapsed.as_secs_f64(),
            steps as f64 / elapsed.as_secs_f64()
        );
        println!(
            "step latency (submit + complete): p50 {:.2} ms, p99 {:.2} ms",
            percentile(&mut lat, 0.50).as_secs_f64() * 1e3,
            percentile(&mut lat, 0.99).as_secs_f64() * 1e3
        );
        println!("completed: {}/{EXECUTIONS}; gapless event logs: {gapless}/{EXECUTIONS}", ids.len());
        assert_eq!(gapless, EXECUTIONS);
    });
}
