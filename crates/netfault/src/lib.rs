//! A TCP proxy that can be frozen.
//!
//! A real partition between a process and PostgreSQL sends nothing: no FIN, no RST, packets simply stop. Killing
//! a connection is a different fault (both ends learn of it at once). [`FreezableProxy`] sits between a client
//! and an upstream on loopback and, when frozen, stops moving bytes in both directions while keeping every
//! socket open, so each side sees a peer that went silent, exactly as through a cut cable; thawed, the bytes held
//! meanwhile flow again. A transaction frozen this way keeps its locks on the server until something bounds it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// A loopback TCP proxy to one upstream whose traffic can be frozen and thawed. Dropping it closes every
/// connection through it.
pub struct FreezableProxy {
    addr: SocketAddr,
    frozen: watch::Sender<bool>,
    connections: Arc<AtomicUsize>,
    _tasks: JoinSet<()>,
}

impl FreezableProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<FreezableProxy> {
        let listener = TcpListener::bind((upstream.ip(), 0)).await?;
        let addr = listener.local_addr()?;
        let (frozen, _) = watch::channel(false);
        let connections = Arc::new(AtomicUsize::new(0));
        let mut tasks = JoinSet::new();
        let accept_frozen = frozen.clone();
        let accepted = connections.clone();
        tasks.spawn(async move {
            let mut pipes = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::Relaxed);
                let frozen = accept_frozen.subscribe();
                pipes.spawn(async move {
                    match TcpStream::connect(upstream).await {
                        Ok(server) => pipe(client, server, frozen).await,
                        Err(e) => {
                            tracing::debug!(%upstream, error = %e, "proxy could not reach its upstream")
                        }
                    }
                });
                while pipes.try_join_next().is_some() {}
            }
        });
        Ok(FreezableProxy {
            addr,
            frozen,
            connections,
            _tasks: tasks,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `url` (a URL naming the upstream as `host:port`) through the proxy instead. `None` when the URL does not
    /// name the upstream's port.
    pub fn url_for(&self, url: &str, upstream: SocketAddr) -> Option<String> {
        let direct = format!("{}:{}", upstream.ip(), upstream.port());
        url.contains(&direct)
            .then(|| url.replacen(&direct, &format!("{}:{}", self.addr.ip(), self.addr.port()), 1))
    }

    /// Stops every byte in both directions, on the connections open now and on those opened later; sockets stay
    /// open.
    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    /// Lets the held bytes flow again.
    pub fn thaw(&self) {
        self.frozen.send_replace(false);
    }

    pub fn is_frozen(&self) -> bool {
        *self.frozen.borrow()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }
}

/// Moves bytes both ways until either side closes; a side that closes closes the other (a FIN passed on).
async fn pipe(client: TcpStream, server: TcpStream, frozen: watch::Receiver<bool>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        () = forward(client_read, server_write, frozen.clone()) => {}
        () = forward(server_read, client_write, frozen) => {}
    }
}

/// One direction: read, wait while frozen, write. While frozen nothing is read either, so the sender's kernel
/// buffers fill as they would behind a dead link.
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if frozen.wait_for(|f| !*f).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if frozen.wait_for(|f| !*f).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(s: &mut TcpStream, byte: u8) -> io::Result<u8> {
        s.write_all(&[byte]).await?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await?;
        Ok(b[0])
    }

    #[tokio::test]
    async fn frozen_traffic_is_held_and_flows_again_when_thawed() {
        let upstream = echo_server().await;
        let proxy = FreezableProxy::start(upstream).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut s, 1).await.unwrap(), 1);

        proxy.freeze();
        let held = tokio::time::timeout(Duration::from_millis(300), round_trip(&mut s, 2)).await;
        assert!(held.is_err(), "no answer crosses a frozen proxy");

        proxy.thaw();
        let mut b = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut b))
            .await
            .expect("the held byte arrives once thawed")
            .unwrap();
        assert_eq!(b[0], 2);
        assert_eq!(proxy.connections(), 1);
    }

    #[tokio::test]
    async fn a_frozen_connection_stays_open() {
        let upstream = echo_server().await;
        let proxy = FreezableProxy::start(upstream).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.freeze();
        let mut b = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_millis(300), s.read(&mut b)).await;
        assert!(read.is_err(), "neither EOF nor a reset while frozen: {read:?}");
    }

    #[test]
    fn urls_are_rewritten_to_the_proxy() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let upstream: SocketAddr = "127.0.0.1:5432".parse().unwrap();
            let proxy = FreezableProxy::start(upstream).await.unwrap();
            let url = proxy
                .url_for("postgres://u:p@127.0.0.1:5432/db", upstream)
                .unwrap();
            assert_eq!(
                url,
                format!("postgres://u:p@127.0.0.1:{}/db", proxy.addr().port())
            );
            assert!(
                proxy
                    .url_for("postgres://u:p@127.0.0.1:6543/db", upstream)
                    .is_none()
            );
        });
    }
}
