//! Latency of the proceed path over real HTTP on loopback: an agent's signed `submit` then
//! `complete` against the `/v0` server on a SQLite kernel, reported as percentiles next to the
//! machine's own floors measured in the same run (a signed HTTP round trip to a server that
//! only verifies the signature, and a 200-byte append plus fdatasync).
//!
//! ```text
//! cargo bench -p rebuno --bench http
//! ```
//!
//! `REBUNO_BENCH_LOG=info` measures with logging on (see `support`).
//!
//! Targets: p50 of submit + complete <= 2 round trips + 2 syncs + 200 us; dispatch latency
//! (from `POST /v0/executions` to the webhook arriving at a local agent) p50 <= 5 ms.

mod support;

use axum::routing::post;
use rebuno::protocol::{
    CreateExecutionRequest, HEADER_DISPATCH_ATTEMPT, HEADER_DISPATCH_ID, HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
};
use rebuno::protocol::{RegisterAgentRequest, StepDecision};
use rebuno::server::{ServerOptions, router};
use rebuno::{Kernel, signing};
use serde_json::json;
use std::io::Write;
use std::time::{Duration, Instant};
use test_support::rebuno::serve_router as serve;

const SECRET: &str = "bench-secret";
const ROUNDS: usize = 2_000;

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn show(name: &str, samples: &mut [Duration]) -> Duration {
    let p50 = percentile(samples, 0.50);
    println!(
        "{name:<44} p50 {:>8.1} us   p90 {:>8.1} us   p99 {:>8.1} us",
        p50.as_secs_f64() * 1e6,
        percentile(samples, 0.90).as_secs_f64() * 1e6,
        percentile(samples, 0.99).as_secs_f64() * 1e6
    );
    p50
}

fn signed(
    client: &reqwest::Client,
    url: String,
    body: Vec<u8>,
    dispatch: &str,
    attempt: u32,
) -> reqwest::RequestBuilder {
    support::signed_post(client, ("bench", SECRET), &url, body, (dispatch, attempt))
}

fn main() {
    let _telemetry = support::telemetry();
    let rt = test_support::bench::runtime();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let client = reqwest::Client::new();

        // Floor 1: a 200-byte append + fdatasync.
        let mut f = std::fs::File::create(dir.path().join("f")).unwrap();
        let mut sync: Vec<Duration> = (0..500)
            .map(|_| {
                let t = Instant::now();
                f.write_all(&[b'x'; 200]).unwrap();
                f.sync_data().unwrap();
                t.elapsed()
            })
            .collect();
        let sync_p50 = show("reference: 200 B append + fdatasync", &mut sync);

        // Floor 2: a signed round trip to a server that only checks the (v1) signature.
        let echo =
            axum::Router::new().route(
                "/echo",
                post(
                    |uri: axum::http::Uri,
                     headers: axum::http::HeaderMap,
                     body: axum::body::Bytes| async move {
                        let header = |name: &str| {
                            headers
                                .get(name)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                        };
                        let request = signing::V1Request {
                            method: "POST",
                            target: uri.path(),
                            timestamp: header(HEADER_TIMESTAMP),
                            dispatch_id: header(HEADER_DISPATCH_ID),
                            dispatch_attempt: header(HEADER_DISPATCH_ATTEMPT),
                            body: &body,
                        };
                        if request.verify(SECRET, header(HEADER_SIGNATURE)) {
                            axum::http::StatusCode::OK
                        } else {
                            axum::http::StatusCode::UNAUTHORIZED
                        }
                    },
                ),
            );
        let echo_url = format!("{}/echo", serve(echo).await);
        let body =
            serde_json::to_vec(&json!({"kind": "tool_call", "target": "t", "args": {"i": 0}}))
                .unwrap();
        let mut rtt = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let t = Instant::now();
            let r = signed(&client, echo_url.clone(), body.clone(), "d", 1)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
            rtt.push(t.elapsed());
        }
        let rtt_p50 = show("reference: signed HTTP round trip", &mut rtt);

        // The kernel over HTTP on a SQLite file.
        let kernel = Kernel::open(&format!("sqlite://{}", dir.path().join("k.db").display()))
            .await
            .unwrap();
        kernel
            .register_agent(RegisterAgentRequest {
                id: "bench".into(),
                webhook_url: "http://127.0.0.1:9/".into(),
                secret: SECRET.into(),
                ..RegisterAgentRequest::default()
            })
            .await
            .unwrap();
        let base = serve(router(kernel.clone(), ServerOptions::default())).await;
        let exec = kernel
            .create_execution(CreateExecutionRequest {
                agent_id: "bench".into(),
                input: Some(json!({})),
                agent_version: String::new(),
                ..CreateExecutionRequest::default()
            })
            .await
            .unwrap();
        let lease = kernel.claim_dispatches(1).await.unwrap()[0].lease();
        let mut pairs = Vec::with_capacity(ROUNDS);
        for i in 0..ROUNDS {
            let submit = serde_json::to_vec(
                &json!({"kind": "tool_call", "target": "search", "args": {"q": "rust", "i": i}}),
            )
            .unwrap();
            let t = Instant::now();
            let r = signed(
                &client,
                format!("{base}/v0/executions/{}/steps", exec.id),
                submit,
                &lease.dispatch_id,
                lease.attempt,
            )
            .send()
            .await
            .unwrap();
            let d: StepDecision = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
            let step_id = d.step_id.expect("proceed carries the step id");
            let complete = serde_json::to_vec(&json!({"result": {"hits": 3}})).unwrap();
            let r = signed(
                &client,
                format!("{base}/v0/executions/{}/steps/{step_id}/complete", exec.id),
                complete,
                &lease.dispatch_id,
                lease.attempt,
            )
            .send()
            .await
            .unwrap();
            assert!(r.status().is_success());
            pairs.push(t.elapsed());
        }
        let p50 = show("kernel over HTTP: submit + complete (SQLite)", &mut pairs);
        // Dispatch latency: create over HTTP, time until the signed webhook reaches the agent.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
        let hook = axum::Router::new().route(
            "/hook",
            post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let tx = tx.clone();
                    async move {
                        let sig = headers
                            .get(HEADER_SIGNATURE)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default();
                        if !signing::verify(SECRET, &body, sig) {
                            return axum::http::StatusCode::UNAUTHORIZED;
                        }
                        let _ = tx.send(Instant::now());
                        axum::http::StatusCode::OK
                    }
                },
            ),
        );
        let hook_url = format!("{}/hook", serve(hook).await);
        kernel
            .register_agent(RegisterAgentRequest {
                id: "hooked".into(),
                webhook_url: hook_url,
                secret: SECRET.into(),
                ..RegisterAgentRequest::default()
            })
            .await
            .unwrap();
        let _background = kernel.start_http();
        let mut dispatch = Vec::with_capacity(500);
        for _ in 0..500 {
            let body = serde_json::to_vec(&json!({"agent_id": "hooked", "input": {}})).unwrap();
            let t = Instant::now();
            let r = client
                .post(format!("{base}/v0/executions"))
                .header("Content-Type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201);
            let arrived = rx.recv().await.unwrap();
            dispatch.push(arrived.duration_since(t));
        }
        let dispatch_p50 = show("dispatch latency: create -> webhook arrives", &mut dispatch);
        println!(
            "target: dispatch p50 {:.2} ms <= 5 ms: {}",
            dispatch_p50.as_secs_f64() * 1e3,
            if dispatch_p50 <= Duration::from_millis(5) {
                "met"
            } else {
                "missed"
            }
        );

        let budget = rtt_p50 * 2 + sync_p50 * 2 + Duration::from_micros(200);
        println!(
            "target: p50 {:.1} us <= 2 x {:.1} + 2 x {:.1} + 200 = {:.1} us: {}",
            p50.as_secs_f64() * 1e6,
            rtt_p50.as_secs_f64() * 1e6,
            sync_p50.as_secs_f64() * 1e6,
            budget.as_secs_f64() * 1e6,
            if p50 <= budget { "met" } else { "missed" }
        );
    });
}
