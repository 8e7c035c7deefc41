//! A TCP proxy in front of PostgreSQL that can be frozen: while frozen it forwards nothing in either direction
//! and closes nothing (no FIN, no RST), as a network partition looks to both ends. Bytes read just as the freeze
//! began are held until a thaw.

use std::net::SocketAddr;
use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

pub struct Proxy {
    addr: SocketAddr,
    frozen: watch::Sender<bool>,
    /// Accepts connections; aborting it drops every connection's tasks with it.
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding to the server `url` names.
    pub async fn start(url: &str) -> Proxy {
        let target = PgConnectOptions::from_str(url).expect("the database URL parses");
        let upstream = format!("{}:{}", target.get_host(), target.get_port());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let (frozen, watch) = watch::channel(false);
        let accept = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                connections.spawn(pump(client_read, server_write, watch.clone()));
                connections.spawn(pump(server_read, client_write, watch.clone()));
            }
        });
        Proxy { addr, frozen, accept }
    }

    /// `options` pointed at this proxy instead of the server.
    pub fn route(&self, options: PgConnectOptions) -> PgConnectOptions {
        options.host("127.0.0.1").port(self.addr.port())
    }

    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    pub fn thaw(&self) {
        self.frozen.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies one direction, waiting out any freeze before each read and again before writing what it read.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut frozen: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if frozen.wait_for(|f| !*f).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if frozen.wait_for(|f| !*f).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
