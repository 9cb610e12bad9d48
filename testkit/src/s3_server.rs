//! A real S3-compatible server for the object-store checkpoint tests: moto's server mode
//! (`.cache/venv/bin/moto_server`, installed by scripts/setup.sh from scripts/requirements.txt)
//! on a free localhost port, killed on drop; and [`FlakyProxy`], a fault-injecting HTTP proxy
//! in front of it that answers a seeded fraction of requests with 503, or all of them.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::cluster::free_port;

/// Credentials and region moto accepts (it checks none of them); what the store is given.
const ACCESS_KEY: &str = "weir-test";
const SECRET_KEY: &str = "weir-test-secret";
const REGION: &str = "us-east-1";

/// A moto server process; killed when dropped.
pub struct S3Server {
    child: Child,
    port: u16,
}

fn moto_binary() -> PathBuf {
    let kit = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    kit.join("../.cache/venv/bin/moto_server")
}

impl S3Server {
    /// Starts moto on a free port and waits until it answers. Panics with the fix when moto
    /// is not installed: these tests must not pass by skipping.
    pub fn start() -> S3Server {
        let binary = moto_binary();
        assert!(
            binary.is_file(),
            "{} is missing: run `bash scripts/setup.sh` (it installs moto[server] from scripts/requirements.txt into .cache/venv)",
            binary.display()
        );
        let port = free_port().expect("a free port");
        let child = Command::new(&binary)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let mut server = S3Server { child, port };
        let started = Instant::now();
        while request(&server.address(), "GET", "/", &[]).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("{} exited with {status} before answering", binary.display());
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "moto did not answer on port {port} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// The server of the tests of this process that are running: started by the first, killed
    /// when the last drops it (each test uses its own bucket).
    pub fn shared() -> Arc<S3Server> {
        static SHARED: Mutex<Weak<S3Server>> = Mutex::new(Weak::new());
        let mut shared = SHARED.lock().unwrap_or_else(|poison| poison.into_inner());
        if let Some(server) = shared.upgrade() {
            return server;
        }
        let server = Arc::new(S3Server::start());
        *shared = Arc::downgrade(&server);
        server
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Creates `bucket` (an unsigned PUT; moto checks no signatures).
    pub fn create_bucket(&self, bucket: &str) {
        let status = request(&self.address(), "PUT", &format!("/{bucket}"), &[])
            .unwrap_or_else(|e| panic!("cannot create bucket {bucket}: {e}"));
        assert_eq!(status, 200, "moto refused to create bucket {bucket}");
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `AWS_*` environment that points an S3 client at the server at `address`
/// (`127.0.0.1:<port>`, moto's or a proxy's), for a `weir` child process.
pub fn aws_env(address: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", format!("http://{address}")),
        ("AWS_ALLOW_HTTP", "true".to_owned()),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_owned()),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_owned()),
        ("AWS_REGION", REGION.to_owned()),
    ]
}

/// The same settings as `object_store` option names (`aws_endpoint`, ...), for an in-process
/// store that must not depend on the test process's environment.
pub fn aws_options(address: &str) -> Vec<(String, String)> {
    aws_env(address)
        .into_iter()
        .map(|(key, value)| {
            let key = match key {
                "AWS_ENDPOINT_URL" => "aws_endpoint".to_owned(),
                other => other.to_ascii_lowercase(),
            };
            (key, value)
        })
        .collect()
}

/// One HTTP/1.1 request with `Connection: close`; the response's status code.
fn request(address: &str, method: &str, target: &str, body: &[u8]) -> io::Result<u16> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "{method} {target} HTTP/1.1\r\nHost: {address}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(body)?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    status_of(&line)
}

fn status_of(line: &str) -> io::Result<u16> {
    line.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| io::Error::other(format!("not an HTTP status line: {line:?}")))
}

/// A proxy on a free localhost port that forwards each request to `upstream` or answers it
/// with `503 Service Unavailable`: every request while [`set_down`](Self::set_down) is on,
/// otherwise those a seeded generator picks with probability `fail_per_mille / 1000`. One
/// request per connection (`Connection: close` both ways). The accept thread ends with the
/// test process.
pub struct FlakyProxy {
    port: u16,
    state: Arc<ProxyState>,
}

struct ProxyState {
    upstream: String,
    fail_per_mille: AtomicU32,
    down: AtomicBool,
    rng: AtomicU64,
    forwarded: AtomicU64,
    failed: AtomicU64,
}

impl FlakyProxy {
    /// Starts the proxy in front of `upstream` (`127.0.0.1:<port>`).
    pub fn start(upstream: &str, fail_per_mille: u32, seed: u64) -> FlakyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(ProxyState {
            upstream: upstream.to_owned(),
            fail_per_mille: AtomicU32::new(fail_per_mille),
            down: AtomicBool::new(false),
            rng: AtomicU64::new(seed | 1),
            forwarded: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        });
        let shared = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let state = shared.clone();
                std::thread::spawn(move || {
                    let _ = state.serve(client);
                });
            }
        });
        FlakyProxy { port, state }
    }

    /// `127.0.0.1:<port>` of the proxy.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// On: every request is answered 503 (the server is down). Off: back to the seeded rate.
    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    /// Changes the fraction of requests answered 503.
    pub fn set_fail_per_mille(&self, fail_per_mille: u32) {
        self.state
            .fail_per_mille
            .store(fail_per_mille, Ordering::SeqCst);
    }

    /// Requests forwarded to the server so far.
    pub fn forwarded(&self) -> u64 {
        self.state.forwarded.load(Ordering::SeqCst)
    }

    /// Requests answered 503 so far.
    pub fn failed(&self) -> u64 {
        self.state.failed.load(Ordering::SeqCst)
    }
}

impl ProxyState {
    /// The next draw of a xorshift64 generator shared by all connections, in `0..1000`.
    fn draw(&self) -> u32 {
        let mut next = 0;
        let _ = self
            .rng
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |mut x| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                next = x;
                Some(x)
            });
        (next % 1000) as u32
    }

    fn serve(&self, mut client: TcpStream) -> io::Result<()> {
        client.set_read_timeout(Some(Duration::from_secs(30)))?;
        let (head, body) = read_request(&mut client)?;
        let fail = self.down.load(Ordering::SeqCst)
            || self.draw() < self.fail_per_mille.load(Ordering::SeqCst);
        if fail {
            self.failed.fetch_add(1, Ordering::SeqCst);
            let text = "injected fault";
            return write!(
                client,
                "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
        self.forwarded.fetch_add(1, Ordering::SeqCst);
        let mut upstream = TcpStream::connect(&self.upstream)?;
        upstream.write_all(&with_connection_close(&head))?;
        upstream.write_all(&body)?;
        let mut reader = BufReader::new(upstream);
        let response_head = read_head(&mut reader)?;
        client.write_all(&with_connection_close(&response_head))?;
        io::copy(&mut reader, &mut client)?;
        client.flush()
    }
}

/// Reads header lines up to and including the blank line.
fn read_head(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut head = Vec::new();
    loop {
        let start = head.len();
        if reader.read_until(b'\n', &mut head)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed inside a header",
            ));
        }
        if &head[start..] == b"\r\n" || &head[start..] == b"\n" {
            return Ok(head);
        }
    }
}

/// A request's head and its `Content-Length` body (chunked bodies are refused).
fn read_request(client: &mut TcpStream) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut reader = BufReader::new(client.try_clone()?);
    let head = read_head(&mut reader)?;
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    if text.contains("transfer-encoding: chunked") {
        return Err(io::Error::other(
            "the proxy does not forward chunked bodies",
        ));
    }
    let length = text
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map(|value| value.trim().parse::<usize>())
        .transpose()
        .map_err(io::Error::other)?
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok((head, body))
}

/// `head` with its `Connection` header replaced by `Connection: close`.
fn with_connection_close(head: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut out = String::with_capacity(text.len() + 20);
    for line in text.split_inclusive('\n') {
        if line.trim().is_empty() {
            out.push_str("Connection: close\r\n\r\n");
            break;
        }
        if !line.to_ascii_lowercase().starts_with("connection:") {
            out.push_str(line);
        }
    }
    out.into_bytes()
}
