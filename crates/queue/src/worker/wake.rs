//! Wake-ups: LISTEN for enqueues of our kinds, with a jittered fallback poll for jobs that became due by time
//! (retries, snoozes) and for notifications missed while the listening connection was down.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::sql::CHANNEL;

pub(crate) async fn listen(
    pool: PgPool,
    kinds: HashSet<String>,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    while !shutdown.is_cancelled() {
        match PgListener::connect_with(&pool).await {
            Ok(mut listener) => {
                if let Err(error) = listener.listen(CHANNEL).await {
                    tracing::warn!(error = %error, "LISTEN failed");
                } else {
                    // Anything enqueued while we were not listening is found by one fetch.
                    wake.notify_one();
                    loop {
                        tokio::select! {
                            _ = shutdown.cancelled() => return,
                            next = listener.try_recv() => match next {
                                Ok(Some(n)) if kinds.contains(n.payload()) => wake.notify_one(),
                                Ok(Some(_)) => {}
                                Ok(None) => {
                                    tracing::warn!("LISTEN connection lost; reconnecting");
                                    wake.notify_one();
                                }
                                Err(error) => {
                                    tracing::warn!(error = %error, "LISTEN connection failed");
                                    break;
                                }
                            }
                        }
                    }
                }
            }
            Err(error) => tracing::warn!(error = %error, "cannot open the LISTEN connection"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// `base` scaled by a random factor in [0.5, 1.5), so a fleet of workers does not poll in lockstep.
pub(crate) fn jittered(base: Duration) -> Duration {
    base.mul_f64(0.5 + rand::random::<f64>())
}
