//! A BMC address that never answers: it counts connections and keeps the bytes of each request head, then hangs
//! up. What proves that a refused request sent nothing (no password, no connection) to the host it named.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// The listener's address and what reached it; it serves until the runtime ends.
pub struct RecordingBmc {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    connections: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<u8>>>,
}

impl RecordingBmc {
    /// Binds a loopback port and starts recording.
    pub async fn start() -> std::io::Result<RecordingBmc> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let connections = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (count, kept) = (connections.clone(), heads.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let kept = kept.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = socket.read(&mut buf).await {
                        head.extend_from_slice(&buf[..n]);
                        if head.windows(4).any(|w| w == b"\r\n\r\n") {
                            break;
                        }
                    }
                    kept.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend_from_slice(&head);
                });
            }
        });
        Ok(RecordingBmc {
            url,
            connections,
            heads,
        })
    }

    /// Connections accepted and request-head bytes received so far.
    pub fn seen(&self) -> (usize, usize) {
        (self.connections.load(Ordering::SeqCst), self.heads().len())
    }

    /// Every request head received so far, concatenated.
    pub fn heads(&self) -> Vec<u8> {
        self.heads.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
