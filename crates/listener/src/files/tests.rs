//! The file server against real sockets and a real file: bodies from `sendfile` and the patched range, keep-alive,
//! pipelining, HEAD, heads it refuses, and its limits.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use axum::response::IntoResponse;
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use super::*;

const HEAD_TIMEOUT: Duration = Duration::from_millis(300);
/// Generous against a loaded machine: what is checked is that the server closes, not how fast.
const CLOSE_WITHIN: Duration = Duration::from_secs(10);
/// The test file: 3 MiB and a bit, so a body spans several reads of the socket.
const FILE_LEN: u64 = 3 * 1024 * 1024 + 17;
/// What the source patches: 1,000 bytes across the 1 MiB mark, changed to `!`.
const PATCHED: Range<u64> = 1024 * 1024 - 500..1024 * 1024 + 500;

/// A file of a known pattern whose [`PATCHED`] range goes out as `!`, recording what was sent.
struct Pattern {
    file: std::fs::File,
    sent: Mutex<Vec<(u64, u64)>>,
}

fn byte_at(offset: u64) -> u8 {
    if PATCHED.contains(&offset) {
        b'!'
    } else {
        (offset % 251) as u8
    }
}

impl FileSource for Pattern {
    fn file(&self) -> &std::fs::File {
        &self.file
    }
    fn patched(&self) -> Option<Range<u64>> {
        Some(PATCHED)
    }
    fn patch(&self, offset: u64, buf: &mut [u8]) {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = byte_at(offset + i as u64);
        }
    }
    fn sent(&self, offset: u64, len: u64) {
        self.sent.lock().unwrap().push((offset, offset + len));
    }
}

struct Served {
    addr: SocketAddr,
    source: Arc<Pattern>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _dir: TempDir,
}

/// A directory removed when the test ends.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The answer `/parts` makes: `parts` of the pattern file, as a handler of the media server would.
fn file_answer(source: Arc<Pattern>, parts: Vec<Part>) -> Response<Body> {
    let length: u64 = parts.iter().map(Part::len).sum();
    let mut response = (
        [(header::CONTENT_LENGTH, length.to_string())],
        "the body hyper would send, never sent here",
    )
        .into_response();
    response.extensions_mut().insert(FileBody {
        source,
        parts: parts.into(),
    });
    response
}

async fn start() -> Served {
    let dir = std::env::temp_dir().join(format!("racklift-files-{}-{}", std::process::id(), rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pattern.img");
    let raw: Vec<u8> = (0..FILE_LEN).map(|o| (o % 251) as u8).collect();
    std::fs::write(&path, raw).unwrap();
    let source = Arc::new(Pattern {
        file: std::fs::File::open(&path).unwrap(),
        sent: Mutex::new(Vec::new()),
    });
    let whole = source.clone();
    let ranged = source.clone();
    let app = Router::new()
        .route(
            "/whole",
            get(move || {
                let source = whole.clone();
                async move {
                    file_answer(
                        source,
                        vec![Part::File {
                            offset: 0,
                            len: FILE_LEN,
                        }],
                    )
                }
            }),
        )
        .route(
            "/parts",
            get(move || {
                let source = ranged.clone();
                async move {
                    file_answer(
                        source,
                        vec![
                            Part::Bytes(Bytes::from_static(b"<a>")),
                            Part::File { offset: 10, len: 5 },
                            Part::Bytes(Bytes::from_static(b"<b>")),
                            Part::File {
                                offset: PATCHED.start - 3,
                                len: 1006,
                            },
                            Part::Bytes(Bytes::from_static(b"<c>")),
                        ],
                    )
                }
            }),
        )
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
        );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let limits = Limits {
        header_read_timeout: HEAD_TIMEOUT,
        max_connections: 64,
        ..Limits::default()
    };
    let task = tokio::spawn(serve_files(listener, app, limits, async move {
        let _ = stopped.await;
    }));
    Served {
        addr,
        source,
        stop: Some(stop),
        task,
        _dir: TempDir(dir),
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn expected(range: Range<u64>) -> Vec<u8> {
    range.map(byte_at).collect()
}

/// Reads until the server closes the connection; fails the test if it stays open past [`CLOSE_WITHIN`].
async fn closed_by_server(mut stream: TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    tokio::time::timeout(CLOSE_WITHIN, stream.read_to_end(&mut got))
        .await
        .expect("the server closes the connection")
        .ok();
    got
}

/// Reads one answer (head and `Content-Length` bytes of body, none for `head_only`) off `stream`, keeping what
/// follows in `pending`.
async fn read_answer(stream: &mut TcpStream, pending: &mut Vec<u8>, head_only: bool) -> (String, Vec<u8>) {
    loop {
        if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8(pending[..end].to_vec()).unwrap();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map(|v| v.parse().unwrap())
                .unwrap_or(0);
            let body_len = if head_only { 0 } else { length };
            while pending.len() < end + 4 + body_len {
                read_more(stream, pending).await;
            }
            let body = pending[end + 4..end + 4 + body_len].to_vec();
            pending.drain(..end + 4 + body_len);
            return (head, body);
        }
        read_more(stream, pending).await;
    }
}

async fn read_more(stream: &mut TcpStream, pending: &mut Vec<u8>) {
    let mut chunk = vec![0u8; 64 * 1024];
    let n = tokio::time::timeout(CLOSE_WITHIN, stream.read(&mut chunk))
        .await
        .expect("the server answers")
        .unwrap();
    assert!(n > 0, "closed mid-answer: {}", String::from_utf8_lossy(pending));
    pending.extend_from_slice(&chunk[..n]);
}

#[tokio::test]
async fn a_whole_file_goes_out_with_its_patched_range_changed_and_every_byte_recorded() {
    let served = start().await;
    let response = reqwest::get(format!("http://{}/whole", served.addr))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers().contains_key("date"));
    let body = response.bytes().await.unwrap();
    assert_eq!(body.len() as u64, FILE_LEN);
    assert!(
        body[..] == expected(0..FILE_LEN)[..],
        "the body differs from the patched file"
    );
    let mut sent = served.source.sent.lock().unwrap().clone();
    sent.sort();
    let mut covered = 0;
    for (start, end) in sent {
        assert_eq!(start, covered, "recorded ranges leave a gap or overlap");
        covered = end;
    }
    assert_eq!(covered, FILE_LEN);
}

#[tokio::test]
async fn bytes_and_file_parts_alternate_in_order_across_the_patched_edge() {
    let served = start().await;
    let body = reqwest::get(format!("http://{}/parts", served.addr))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let mut want = b"<a>".to_vec();
    want.extend(expected(10..15));
    want.extend(b"<b>");
    want.extend(expected(PATCHED.start - 3..PATCHED.start + 1003));
    want.extend(b"<c>");
    assert_eq!(body[..], want[..]);
    // The file holds its pattern there: only the patch makes the 1,000 `!`.
    assert_eq!(body.iter().filter(|b| **b == b'!').count(), 1000);
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_on_one_connection_and_head_has_no_body() {
    let served = start().await;
    let mut stream = TcpStream::connect(served.addr).await.unwrap();
    stream
        .write_all(
            b"HEAD /whole HTTP/1.1\r\nHost: x\r\n\r\nGET /parts HTTP/1.1\r\nHost: x\r\n\r\nGET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n",
        )
        .await
        .unwrap();
    let mut pending = Vec::new();
    let (head, body) = read_answer(&mut stream, &mut pending, true).await;
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(head.contains(&format!("content-length: {FILE_LEN}")), "{head}");
    assert!(body.is_empty());
    let (head, body) = read_answer(&mut stream, &mut pending, false).await;
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(body.starts_with(b"<a>") && body.ends_with(b"<c>"));
    let (head, _) = read_answer(&mut stream, &mut pending, false).await;
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
    assert!(pending.is_empty(), "nothing was sent for the HEAD's body");
}

#[tokio::test]
async fn an_http10_request_or_connection_close_ends_the_connection_after_the_answer() {
    let served = start().await;
    for request in [
        "GET /peer HTTP/1.0\r\n\r\n",
        "GET /peer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ] {
        let mut stream = TcpStream::connect(served.addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let got = String::from_utf8(closed_by_server(stream).await).unwrap();
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        assert!(got.contains("connection: close"), "{got}");
        assert!(
            got.ends_with(&format!("127.0.0.1:{}", got.rsplit(':').next().unwrap())),
            "{got}"
        );
    }
}

#[tokio::test]
async fn a_request_announcing_a_body_is_answered_then_closed() {
    let served = start().await;
    let mut stream = TcpStream::connect(served.addr).await.unwrap();
    stream
        .write_all(b"GET /peer HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        .await
        .unwrap();
    let got = String::from_utf8(closed_by_server(stream).await).unwrap();
    assert!(
        got.starts_with("HTTP/1.1 200") && got.contains("connection: close"),
        "{got}"
    );
    assert_eq!(
        got.matches("HTTP/1.1").count(),
        1,
        "the body was not taken for a request: {got}"
    );
}

#[tokio::test]
async fn malformed_and_oversized_heads_are_refused_and_closed() {
    let served = start().await;
    let huge = format!(
        "GET /peer HTTP/1.1\r\nHost: x\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(MAX_HEAD_BYTES)
    );
    let many = format!(
        "GET /peer HTTP/1.1\r\n{}\r\n",
        (0..head::MAX_HEADERS + 1)
            .map(|i| format!("X-{i}: 1\r\n"))
            .collect::<String>()
    );
    for (request, status) in [
        ("GARBAGE\r\n\r\n".to_owned(), "400"),
        ("GET /peer HTTP/1.1\r\nBad Header\r\n\r\n".to_owned(), "400"),
        (huge, "431"),
        (many, "431"),
    ] {
        let mut stream = TcpStream::connect(served.addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let got = String::from_utf8(closed_by_server(stream).await).unwrap();
        assert!(got.starts_with(&format!("HTTP/1.1 {status}")), "{status}: {got}");
    }
}

#[tokio::test]
async fn stalled_and_idle_connections_are_closed_at_the_header_timeout() {
    let served = start().await;
    let mut stalled = TcpStream::connect(served.addr).await.unwrap();
    stalled.write_all(b"GET /peer HTTP/1.1\r\nHost").await.unwrap();
    let mut idle = TcpStream::connect(served.addr).await.unwrap();
    idle.write_all(b"GET /peer HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (stalled, idle) = tokio::join!(closed_by_server(stalled), closed_by_server(idle));
    assert!(stalled.is_empty(), "{}", String::from_utf8_lossy(&stalled));
    assert_eq!(
        String::from_utf8(idle).unwrap().matches("HTTP/1.1 200").count(),
        1
    );
}

#[tokio::test]
async fn shutdown_closes_idle_connections_and_the_server_returns() {
    let mut served = start().await;
    let mut idle = TcpStream::connect(served.addr).await.unwrap();
    idle.write_all(b"GET /peer HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut pending = Vec::new();
    read_answer(&mut idle, &mut pending, false).await;
    served.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(CLOSE_WITHIN, served.task)
        .await
        .expect("the server returns")
        .unwrap()
        .unwrap();
    assert!(closed_by_server(idle).await.is_empty());
    assert!(
        TcpStream::connect(served.addr).await.is_err(),
        "the listener is closed"
    );
}

#[test]
fn split_patched_cuts_a_range_where_it_meets_the_patch() {
    let p = Some(10..20);
    type Pieces = Vec<(Range<u64>, bool)>;
    let cases: [(Range<u64>, Pieces); 6] = [
        (0..5, vec![(0..5, false)]),
        (20..30, vec![(20..30, false)]),
        (0..30, vec![(0..10, false), (10..20, true), (20..30, false)]),
        (12..15, vec![(12..15, true)]),
        (5..15, vec![(5..10, false), (10..15, true)]),
        (15..25, vec![(15..20, true), (20..25, false)]),
    ];
    for (range, want) in cases {
        assert_eq!(split_patched(range.clone(), p.clone()), want, "{range:?}");
    }
    assert_eq!(split_patched(0..30, None), vec![(0..30, false)]);
}
