//! Idle pickup latency: from an enqueue's commit to its handler starting, with the pool idle in between.

use std::time::{Duration, Instant};

use racklift_queue::{
    HandlerResult, JobContext, NewJob, Outcome, Queue, QueueConfig, Registry, WorkerConfig, WorkerPool,
};
use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::BenchError;

#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub samples: usize,
}

pub async fn measure(pool: &PgPool, samples: usize) -> Result<Latency, BenchError> {
    let queue = Queue::new(pool.clone(), QueueConfig::default());
    let (started_tx, mut started_rx) = mpsc::unbounded_channel::<Instant>();
    let handler = move |_ctx: JobContext| {
        let started = Instant::now();
        let tx = started_tx.clone();
        async move {
            let _ = tx.send(started);
            HandlerResult::Ok(Outcome::Complete)
        }
    };
    // A long fallback poll, so what is measured is the notification path.
    let config = WorkerConfig {
        concurrency: 10,
        poll_interval: Duration::from_secs(10),
        ..WorkerConfig::default()
    };
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(
        WorkerPool::new(queue.clone(), Registry::new().register("ping", handler), config)
            .run(shutdown.clone()),
    );
    // Let the pool settle into its idle wait (its listener connects and it finds nothing to do).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut latencies = Vec::with_capacity(samples);
    for _ in 0..samples {
        let job = NewJob::new("ping", &serde_json::json!({}))?;
        let mut tx = pool.begin().await?;
        queue.enqueue(&mut tx, &job).await?;
        let committing = Instant::now();
        tx.commit().await?;
        let started = tokio::time::timeout(Duration::from_secs(10), started_rx.recv())
            .await
            .map_err(|_| BenchError::Stalled("a job was not picked up within 10 s".into()))?
            .ok_or_else(|| BenchError::Stalled("the latency pool stopped".into()))?;
        latencies.push(started.saturating_duration_since(committing).as_secs_f64() * 1000.0);
        // Idle gap: the next enqueue finds the pool waiting, not mid-fetch.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    let _ = worker.await;
    latencies.sort_by(|a, b| a.total_cmp(b));
    let pick = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    Ok(Latency {
        p50_ms: pick(0.5),
        p99_ms: pick(0.99),
        samples,
    })
}
