//! HTTP/1.1 for the measured requests: each connection is driven by the task
//! that reads its stream, one socket read per wake-up, no allocation per read.
//!
//! Written here rather than taken from hyper (which the probes and the
//! scraper still use, through reqwest) because the per-token path needs what
//! hyper's client design does not give: it drives every connection in a task
//! of its own and hands the body to the request's task over a channel, so
//! each network read costs two task wake-ups and a channel node, and its read
//! buffer grows with the data waiting (543 MB at 1,024 unthrottled streams of
//! 2,048 tokens). Here a read lands in the connection's fixed buffer, the
//! caller stamps it, and the body framing (Content-Length, chunked, or until
//! close) hands the payload on as slices of that buffer. `httparse` parses
//! the response head.

use crate::rx_stamp;
use reqwest::header::HeaderMap;
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection's read buffer. Reads of a stream arrive a few hundred bytes
/// at a time; a burst of coalesced events fills it and is read again at once.
const READ_BUF: usize = 8 * 1024;
/// The largest response head accepted (the buffer grows only for a head).
const MAX_HEAD: usize = 64 * 1024;
/// The most headers a response head may carry.
const MAX_HEADERS: usize = 64;

/// What can go wrong on a connection. The messages are one line and never
/// name the URL (records keep them; the URL is in the run's config).
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// No connection could be made (refused, unreachable, name not found, TLS).
    #[error("connect error: {0}")]
    Connect(String),
    /// The server closed the connection before any byte of a response.
    #[error("connection closed before message completed")]
    Closed,
    #[error("{0}")]
    Io(#[from] io::Error),
    /// Bytes that are not HTTP/1.1, or a body framing that breaks its rules.
    #[error("{0}")]
    Malformed(String),
}

impl HttpError {
    /// The connection closed (or was reset) before any byte of a response
    /// came: what a kept-alive connection the server has dropped looks like.
    pub fn closed_before_response(&self) -> bool {
        use io::ErrorKind as K;
        match self {
            HttpError::Closed => true,
            HttpError::Io(e) => matches!(
                e.kind(),
                K::BrokenPipe | K::ConnectionReset | K::ConnectionAborted
            ),
            _ => false,
        }
    }

    pub fn is_connect(&self) -> bool {
        matches!(self, HttpError::Connect(_))
    }
}

/// Where the requests go: host, port, and TLS for `https`.
#[derive(Clone)]
struct Endpoint {
    host: Host,
    port: u16,
    tls: Option<(
        Arc<rustls::ClientConfig>,
        rustls::pki_types::ServerName<'static>,
    )>,
    /// `host[:port]`, as the `Host` header carries it.
    authority: String,
    /// Reads of plain TCP that came without the kernel's stamp (before the
    /// kernel turned stamping on, or where it will not): stamped late.
    unstamped: Arc<AtomicU64>,
}

#[derive(Clone)]
enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Endpoint {
    fn new(url: &reqwest::Url, ca_pem: Option<&[u8]>) -> Result<Endpoint, String> {
        let tls = match url.scheme() {
            "http" => false,
            "https" => true,
            other => return Err(format!("scheme `{other}` (http or https)")),
        };
        let port = url.port_or_known_default().ok_or("a URL without a port")?;
        let (host, name) = match url.host() {
            Some(url::Host::Domain(d)) => (Host::Name(d.to_string()), d.to_string()),
            Some(url::Host::Ipv4(ip)) => (Host::Ip(ip.into()), ip.to_string()),
            Some(url::Host::Ipv6(ip)) => (Host::Ip(ip.into()), ip.to_string()),
            None => return Err("a URL without a host".into()),
        };
        let authority = match url.port() {
            Some(p) => format!("{}:{p}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_string(),
        };
        let tls = match tls {
            false => None,
            true => {
                let server = rustls::pki_types::ServerName::try_from(name)
                    .map_err(|e| format!("TLS server name: {e}"))?;
                Some((tls_config(ca_pem)?, server))
            }
        };
        Ok(Endpoint {
            host,
            port,
            tls,
            authority,
            unstamped: Arc::default(),
        })
    }

    async fn tcp(&self) -> Result<TcpStream, HttpError> {
        let connect_err = |e: io::Error| HttpError::Connect(e.to_string());
        let tcp = match &self.host {
            Host::Name(n) => TcpStream::connect((n.as_str(), self.port)).await,
            Host::Ip(ip) => TcpStream::connect((*ip, self.port)).await,
        }
        .map_err(connect_err)?;
        tcp.set_nodelay(true).map_err(connect_err)?;
        Ok(tcp)
    }

    /// A plain byte stream to the endpoint (TLS where it is https), for a
    /// protocol of its own over it (the realtime API's WebSocket).
    async fn duplex(&self) -> Result<Box<dyn Duplex>, HttpError> {
        let tcp = self.tcp().await?;
        Ok(match &self.tls {
            None => Box::new(tcp),
            Some((config, name)) => Box::new(
                tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| HttpError::Connect(format!("TLS handshake: {e}")))?,
            ),
        })
    }

    async fn connect(&self) -> Result<Conn, HttpError> {
        let connect_err = |e: io::Error| HttpError::Connect(e.to_string());
        let tcp = self.tcp().await?;
        let io = match &self.tls {
            None => Io::plain(tcp, self.unstamped.clone()).map_err(connect_err)?,
            Some((config, name)) => {
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| HttpError::Connect(format!("TLS handshake: {e}")))?;
                Io::Tls(Box::new(tls))
            }
        };
        Ok(Conn::new(io))
    }
}

/// The web's roots, as browsers trust them (the same set reqwest's
/// `rustls-tls` uses), and the PEM certificates of `--ca-cert` (an internal
/// CA, a self-signed test server), offering HTTP/1.1 only.
fn tls_config(ca_pem: Option<&[u8]>) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(pem) = ca_pem {
        let mut added = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("reading the CA certificates: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("a CA certificate rustls cannot use: {e}"))?;
            added += 1;
        }
        if added == 0 {
            return Err("the CA file holds no PEM certificate".into());
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports rustls' default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A byte stream both ways: TCP, or TLS over it.
pub trait Duplex: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Duplex for T {}

/// The measured requests' client: the endpoint, the head every request
/// shares, and the idle kept-alive connections.
pub struct Client {
    endpoint: Endpoint,
    /// `POST path HTTP/1.1`, `Host`, the content type and the run's headers.
    post_head: Vec<u8>,
    headers: Vec<u8>,
    connect_timeout: Duration,
    idle: Mutex<Vec<Conn>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The headers may hold credentials: never printed.
        f.debug_struct("Client")
            .field("authority", &self.endpoint.authority)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for `url` (its path is where requests are POSTed), sending
    /// `headers` with every request, trusting `ca_pem`'s certificates too.
    pub fn new(
        url: &reqwest::Url,
        headers: &HeaderMap,
        connect_timeout: Duration,
        ca_pem: Option<&[u8]>,
    ) -> Result<Client, String> {
        let endpoint = Endpoint::new(url, ca_pem)?;
        let mut extra = Vec::new();
        for (name, value) in headers {
            extra.extend_from_slice(name.as_str().as_bytes());
            extra.extend_from_slice(b": ");
            extra.extend_from_slice(value.as_bytes());
            extra.extend_from_slice(b"\r\n");
        }
        let path = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        };
        let post_head = format!(
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n",
            endpoint.authority
        )
        .into_bytes();
        Ok(Client {
            endpoint,
            post_head,
            headers: extra,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// The client with the body's content type changed (a speech API's
    /// multipart form).
    pub fn with_content_type(mut self, content_type: &str) -> Client {
        let from = b"content-type: application/json\r\n";
        if let Some(at) = self.post_head.windows(from.len()).position(|w| w == from) {
            let line = format!("content-type: {content_type}\r\n");
            self.post_head
                .splice(at..at + from.len(), line.into_bytes());
        }
        self
    }

    /// A new byte stream to the endpoint, within the connect timeout, for
    /// a WebSocket; and the handshake's request: the endpoint's path as a
    /// `ws://` (or `wss://`) URL, with the run's headers.
    pub async fn websocket(
        &self,
        own: &[u8],
    ) -> Result<
        (
            Box<dyn Duplex>,
            tokio_tungstenite::tungstenite::ClientRequestBuilder,
        ),
        HttpError,
    > {
        use tokio_tungstenite::tungstenite::ClientRequestBuilder;
        let scheme = match self.endpoint.tls {
            Some(_) => "wss",
            None => "ws",
        };
        let head = String::from_utf8_lossy(&self.post_head);
        let path = head
            .strip_prefix("POST ")
            .and_then(|h| h.split(' ').next())
            .unwrap_or("/");
        let url = format!("{scheme}://{}{path}", self.endpoint.authority);
        let uri = url
            .parse()
            .map_err(|e| HttpError::Connect(format!("WebSocket URL `{url}`: {e}")))?;
        let mut request = ClientRequestBuilder::new(uri);
        let mut lines = String::from_utf8_lossy(&self.headers).into_owned();
        lines.push_str(&String::from_utf8_lossy(own));
        for (name, value) in lines.split("\r\n").filter_map(|l| l.split_once(": ")) {
            request = request.with_header(name, value);
        }
        let stream = match tokio::time::timeout(self.connect_timeout, self.endpoint.duplex()).await
        {
            Ok(s) => s?,
            Err(_) => {
                return Err(HttpError::Connect(format!(
                    "no connection within {:?}",
                    self.connect_timeout
                )))
            }
        };
        Ok((stream, request))
    }

    /// The bytes of a POST of `body` to the endpoint, with this request's
    /// own header lines (`own`, each ending in CRLF: its id) after the run's.
    pub fn post(&self, body: &[u8], own: &[u8]) -> Vec<u8> {
        let mut wire = Vec::with_capacity(
            self.post_head.len() + self.headers.len() + own.len() + body.len() + 32,
        );
        wire.extend_from_slice(&self.post_head);
        wire.extend_from_slice(&self.headers);
        wire.extend_from_slice(own);
        wire.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
        wire.extend_from_slice(body);
        wire
    }

    /// The bytes of a GET of `path` on the endpoint's host.
    pub fn get(&self, path: &str) -> Vec<u8> {
        let mut wire = format!(
            "GET {path} HTTP/1.1\r\nhost: {}\r\n",
            self.endpoint.authority
        )
        .into_bytes();
        wire.extend_from_slice(&self.headers);
        wire.extend_from_slice(b"\r\n");
        wire
    }

    /// An idle kept-alive connection (the most recently used) the server
    /// has not closed meanwhile, else a new one. Idle connections are not
    /// read, so one the server closed (llama.cpp closes every connection
    /// after its answer) is found here, by its pending end of stream, and dropped.
    pub async fn checkout(&self) -> Result<Conn, HttpError> {
        loop {
            let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
            match idle {
                Some(conn) if conn.closed_while_idle() => continue,
                Some(conn) => return Ok(conn),
                None => return self.connect().await,
            }
        }
    }

    /// A new connection, within the connect timeout.
    pub async fn connect(&self) -> Result<Conn, HttpError> {
        match tokio::time::timeout(self.connect_timeout, self.endpoint.connect()).await {
            Ok(conn) => conn,
            Err(_) => Err(HttpError::Connect(format!(
                "no connection within {:?}",
                self.connect_timeout
            ))),
        }
    }

    /// Keeps a connection whose answer was read to its end, for the next request.
    pub fn checkin(&self, conn: Conn) {
        if conn.rb.is_empty() {
            if let Ok(mut idle) = self.idle.lock() {
                idle.push(conn);
            }
        }
    }

    /// Reads of plain TCP that came without the kernel's arrival stamp, so
    /// far: they were stamped when read, up to `--wake-batch` late.
    pub fn unstamped_reads(&self) -> u64 {
        self.endpoint.unstamped.load(Ordering::Relaxed)
    }

    /// Connections now idle.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.idle.lock().map(|i| i.len()).unwrap_or(0)
    }
}

enum Io {
    /// Plain TCP, read with the kernel's arrival stamps (`rx_stamp`), and
    /// the endpoint's count of reads that came without one.
    Plain(AsyncFd<std::net::TcpStream>, Arc<AtomicU64>),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Io {
    fn plain(tcp: TcpStream, unstamped: Arc<AtomicU64>) -> io::Result<Io> {
        let tcp = tcp.into_std()?;
        rx_stamp::enable(&tcp);
        // SAFETY: the AsyncFd owns the std stream, whose descriptor stays
        // open and the same until the AsyncFd is dropped.
        let fd = unsafe { AsyncFd::register(tcp) }.map_err(io::Error::from)?;
        Ok(Io::Plain(fd, unstamped))
    }
}

/// One connection and its read buffer.
pub struct Conn {
    io: Io,
    rb: ReadBuf,
    /// When the latest read's bytes reached the socket, as the kernel
    /// stamped it (plain TCP on Linux); `None` when it did not.
    arrived: Option<std::time::Instant>,
}

/// Bytes read and not yet consumed: `buf[start..end]`.
struct ReadBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReadBuf {
    fn new() -> ReadBuf {
        ReadBuf {
            buf: vec![0; READ_BUF],
            start: 0,
            end: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Room for the next read: consumed bytes dropped, and the buffer grown
    /// (to a bound) only when a response head fills it.
    fn free(&mut self) -> io::Result<&mut [u8]> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.end == self.buf.len() && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.end == self.buf.len() {
            let grown = (self.buf.len() * 2).min(MAX_HEAD);
            if grown == self.buf.len() {
                return Err(io::Error::other("response head larger than 64 KiB"));
            }
            self.buf.resize(grown, 0);
        }
        Ok(&mut self.buf[self.end..])
    }

    fn parse_head(&mut self) -> Result<Option<Head>, HttpError> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut response = httparse::Response::new(&mut headers);
            let used = match response.parse(&self.buf[self.start..self.end]) {
                Ok(httparse::Status::Partial) => return Ok(None),
                Ok(httparse::Status::Complete(n)) => n,
                Err(e) => return Err(HttpError::Malformed(format!("{e} parsed"))),
            };
            let head = Head::from_parsed(&response)?;
            self.start += used;
            // Interim answers (100 Continue, 103 Early Hints) precede the real one.
            if !(100..200).contains(&head.status) || head.status == 101 {
                return Ok(Some(head));
            }
        }
    }

    fn decode(
        &mut self,
        body: &mut Body,
        on_data: &mut impl FnMut(&[u8]),
    ) -> Result<bool, HttpError> {
        let (used, done) = body
            .framing
            .decode(&self.buf[self.start..self.end], on_data)?;
        self.start += used;
        Ok(done)
    }
}

/// Decodes a whole response that arrives as `reads`, the connection closing
/// after them (for tests and the fuzz harness: the same head parser and body
/// framing as a connection's): its head and the body bytes, `None` without a
/// whole head.
pub fn decode_reads(reads: &[&[u8]]) -> Result<Option<(Head, Vec<u8>)>, HttpError> {
    let mut rb = ReadBuf::new();
    let mut head: Option<Head> = None;
    let mut payload = Vec::new();
    for read in reads {
        let mut read = *read;
        while !read.is_empty() {
            let free = rb.free()?;
            let n = free.len().min(read.len());
            free[..n].copy_from_slice(&read[..n]);
            rb.end += n;
            read = &read[n..];
            if head.is_none() {
                head = rb.parse_head()?;
            }
            if let Some(h) = head.as_mut() {
                if rb.decode(&mut h.body, &mut |d| payload.extend_from_slice(d))? {
                    return Ok(head.map(|h| (h, payload)));
                }
            }
        }
    }
    match head {
        None => Ok(None),
        Some(mut h) => {
            h.body.eof()?;
            Ok(Some((h, payload)))
        }
    }
}

impl Conn {
    fn new(io: Io) -> Conn {
        Conn {
            io,
            rb: ReadBuf::new(),
            arrived: None,
        }
    }

    /// This end's port: which connection it is, for tests.
    #[cfg(test)]
    fn local_port(&self) -> u16 {
        match &self.io {
            Io::Plain(s, _) => s.get_ref().local_addr().unwrap().port(),
            Io::Tls(s) => s.get_ref().0.local_addr().unwrap().port(),
        }
    }

    /// The server closed (or wrote to) this connection while it sat idle.
    /// Reads at most one byte, which an idle HTTP/1.1 connection must not
    /// have. Always a read syscall: a FIN that reached the socket after the
    /// previous answer may not have reached the runtime yet. Asking the
    /// runtime's readiness instead (tried 2026-12-04) handed more closed
    /// connections out, each costing its request a retry on a new one:
    /// against llama.cpp 2–4 retries in 24 requests instead of 0–1, and
    /// waves of requests started together ended 35–280 ms apart instead of
    /// 12–19.
    fn closed_while_idle(&self) -> bool {
        let mut byte = [0u8; 1];
        let read = match &self.io {
            Io::Plain(s, _) => std::io::Read::read(&mut s.get_ref(), &mut byte),
            Io::Tls(s) => s.get_ref().0.try_read(&mut byte),
        };
        !matches!(read, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Writes a whole request.
    pub async fn send(&mut self, wire: &[u8]) -> io::Result<()> {
        match &mut self.io {
            Io::Plain(s, _) => {
                let mut rest = wire;
                while !rest.is_empty() {
                    let mut ready = s.writable().await?;
                    match ready.try_io(|s| std::io::Write::write(&mut s.get_ref(), rest)) {
                        Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(Ok(n)) => rest = &rest[n..],
                        Ok(Err(e)) => return Err(e),
                        Err(_would_block) => {}
                    }
                }
                Ok(())
            }
            Io::Tls(s) => {
                s.write_all(wire).await?;
                s.flush().await
            }
        }
    }

    /// One read from the socket into the buffer: the bytes read, 0 at the
    /// end of the stream. Cancel-safe (nothing is read unless it completes).
    /// [`Conn::arrived`] says when the bytes reached the socket.
    pub async fn fill(&mut self) -> io::Result<usize> {
        self.arrived = None;
        let free = self.rb.free()?;
        let (n, arrived) = match &mut self.io {
            Io::Plain(s, unstamped) => {
                let (n, at) = read_stamped(s, free).await?;
                if n > 0 && at.is_none() {
                    unstamped.fetch_add(1, Ordering::Relaxed);
                }
                (n, at)
            }
            Io::Tls(s) => (s.read(free).await?, None),
        };
        self.rb.end += n;
        self.arrived = arrived;
        Ok(n)
    }

    /// When the latest read's bytes reached the socket (the kernel's stamp),
    /// `None` where the kernel does not stamp (TLS, another OS): then the
    /// caller's own clock reading after the read is the best there is.
    pub fn arrived(&self) -> Option<std::time::Instant> {
        self.arrived
    }

    /// Reads the response head (skipping interim 1xx answers).
    pub async fn head(&mut self) -> Result<Head, HttpError> {
        loop {
            if let Some(head) = self.rb.parse_head()? {
                return Ok(head);
            }
            if self.fill().await? == 0 {
                return Err(match self.rb.is_empty() {
                    true => HttpError::Closed,
                    false => {
                        HttpError::Malformed("connection closed inside the response head".into())
                    }
                });
            }
        }
    }

    /// Hands `on_data` the body bytes already read, as far as the framing
    /// allows; `true` once the body is complete.
    pub fn decode(
        &mut self,
        body: &mut Body,
        mut on_data: impl FnMut(&[u8]),
    ) -> Result<bool, HttpError> {
        self.rb.decode(body, &mut on_data)
    }

    /// Reads and decodes the body to its end, keeping it whole, or stops at
    /// the first byte past `limit` (`Ok(None)`): a body that never ends, or
    /// is larger than any answer, costs at most `limit` bytes of memory.
    pub async fn read_within(
        &mut self,
        body: &mut Body,
        limit: usize,
    ) -> Result<Option<Vec<u8>>, HttpError> {
        let mut whole = tokenscope_core::capped::Capped::new(limit);
        let mut over = false;
        while !self
            .rb
            .decode(body, &mut |d: &[u8]| over |= !whole.push(d))?
        {
            if over {
                return Ok(None);
            }
            if self.fill().await? == 0 {
                body.eof()?;
                break;
            }
        }
        Ok(whole.finish().ok())
    }

    /// Reads and decodes the body to its end, handing on at most `limit`
    /// bytes of it (the rest is read and dropped).
    pub async fn read_to_end(
        &mut self,
        body: &mut Body,
        limit: usize,
    ) -> Result<Vec<u8>, HttpError> {
        let mut whole = Vec::new();
        let mut keep = |d: &[u8]| {
            let room = limit.saturating_sub(whole.len());
            whole.extend_from_slice(&d[..d.len().min(room)]);
        };
        while !self.rb.decode(body, &mut keep)? {
            if self.fill().await? == 0 {
                body.eof()?;
                break;
            }
        }
        Ok(whole)
    }
}

/// One kernel-stamped read once the socket is readable. A short read clears
/// the readiness (as tokio's own reads do on edge-triggered epoll), so the
/// next read waits for new data instead of costing a syscall that finds none.
async fn read_stamped(
    s: &AsyncFd<std::net::TcpStream>,
    buf: &mut [u8],
) -> io::Result<(usize, Option<std::time::Instant>)> {
    loop {
        let mut ready = s.readable().await?;
        match ready.try_io(|s| rx_stamp::read(s.get_ref(), buf)) {
            Ok(Ok((n, at))) => {
                if n > 0 && n < buf.len() {
                    ready.clear_ready();
                }
                return Ok((n, at));
            }
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => continue,
        }
    }
}

/// A response head: what the client acts on, and how its body is framed.
#[derive(Debug)]
pub struct Head {
    pub status: u16,
    pub content_type: Option<String>,
    pub location: Option<String>,
    pub body: Body,
}

impl Head {
    fn from_parsed(r: &httparse::Response<'_, '_>) -> Result<Head, HttpError> {
        let status = r.code.unwrap_or(0);
        let mut content_type = None;
        let mut location = None;
        let mut length = None;
        let mut chunked = false;
        let mut close = r.version == Some(0);
        for h in r.headers.iter() {
            let value = || String::from_utf8_lossy(h.value).trim().to_string();
            let name = h.name;
            if name.eq_ignore_ascii_case("content-type") {
                content_type = Some(value());
            } else if name.eq_ignore_ascii_case("location") {
                location = Some(value());
            } else if name.eq_ignore_ascii_case("content-length") {
                let n = value().parse::<u64>().map_err(|_| {
                    HttpError::Malformed(format!("invalid content-length `{}`", value()))
                })?;
                length = Some(n);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value().to_ascii_lowercase().ends_with("chunked");
            } else if name.eq_ignore_ascii_case("connection") {
                let v = value().to_ascii_lowercase();
                close = v.contains("close") || (r.version == Some(0) && !v.contains("keep-alive"));
            }
        }
        let framing = if matches!(status, 204 | 304) || (100..200).contains(&status) {
            Framing::Done
        } else if chunked {
            Framing::Chunked(Chunked::Size {
                size: 0,
                digits: false,
                ext: false,
            })
        } else {
            match length {
                Some(0) => Framing::Done,
                Some(n) => Framing::Length(n),
                None => {
                    close = true;
                    Framing::UntilClose
                }
            }
        };
        Ok(Head {
            status,
            content_type,
            location,
            body: Body {
                framing,
                keep_alive: !close,
            },
        })
    }
}

/// The body still to read.
#[derive(Debug)]
pub struct Body {
    framing: Framing,
    keep_alive: bool,
}

impl Body {
    /// The connection may carry another request once this body is read.
    pub fn reusable(&self) -> bool {
        self.keep_alive && matches!(self.framing, Framing::Done)
    }

    /// The connection reached its end: fine only where the body ends so.
    pub fn eof(&mut self) -> Result<(), HttpError> {
        let why = match &self.framing {
            Framing::Done => return Ok(()),
            Framing::UntilClose => {
                self.framing = Framing::Done;
                self.keep_alive = false;
                return Ok(());
            }
            Framing::Length(_) => "end of file before message length reached",
            Framing::Chunked(Chunked::Size { .. }) => {
                "unexpected end of file during chunk size line"
            }
            Framing::Chunked(_) => "unexpected end of file inside a chunk",
        };
        Err(HttpError::Malformed(why.into()))
    }
}

#[derive(Debug)]
enum Framing {
    Length(u64),
    Chunked(Chunked),
    UntilClose,
    Done,
}

/// Where a chunked body's decoder stands.
#[derive(Debug)]
enum Chunked {
    /// In a size line: the hex digits so far, and whether an extension began.
    Size { size: u64, digits: bool, ext: bool },
    /// Inside a chunk's data: bytes left.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last chunk: trailer lines; `empty` while the line has no byte yet.
    Trailers { empty: bool },
}

impl Framing {
    /// Decodes what `bytes` hold; returns how many were used and whether the
    /// body is complete.
    fn decode(
        &mut self,
        bytes: &[u8],
        on_data: &mut impl FnMut(&[u8]),
    ) -> Result<(usize, bool), HttpError> {
        match self {
            Framing::Done => Ok((0, true)),
            Framing::UntilClose => {
                if !bytes.is_empty() {
                    on_data(bytes);
                }
                Ok((bytes.len(), false))
            }
            Framing::Length(left) => {
                let n = (*left).min(bytes.len() as u64) as usize;
                if n > 0 {
                    on_data(&bytes[..n]);
                }
                *left -= n as u64;
                let done = *left == 0;
                if done {
                    *self = Framing::Done;
                }
                Ok((n, done))
            }
            Framing::Chunked(state) => {
                let (used, done) = decode_chunked(state, bytes, on_data)?;
                if done {
                    *self = Framing::Done;
                }
                Ok((used, done))
            }
        }
    }
}

/// The chunked transfer coding (RFC 9112 §7.1); CRLF or a bare LF ends a line.
fn decode_chunked(
    state: &mut Chunked,
    bytes: &[u8],
    on_data: &mut impl FnMut(&[u8]),
) -> Result<(usize, bool), HttpError> {
    let bad = |what: &str| HttpError::Malformed(format!("invalid chunk {what}"));
    let mut i = 0;
    while i < bytes.len() {
        match state {
            Chunked::Data(left) => {
                let n = (*left).min((bytes.len() - i) as u64) as usize;
                on_data(&bytes[i..i + n]);
                i += n;
                *left -= n as u64;
                if *left == 0 {
                    *state = Chunked::DataEnd;
                }
            }
            Chunked::Size { size, digits, ext } => {
                let b = bytes[i];
                i += 1;
                match b {
                    b'\n' if *digits => {
                        *state = match *size {
                            0 => Chunked::Trailers { empty: true },
                            n => Chunked::Data(n),
                        }
                    }
                    b'\n' => return Err(bad("size line")),
                    _ if *ext => {}
                    b'\r' | b' ' | b'\t' => {}
                    b';' if *digits => *ext = true,
                    _ => {
                        let d = (b as char).to_digit(16).ok_or_else(|| bad("size line"))?;
                        if *size >> 60 != 0 {
                            return Err(bad("size line (too large)"));
                        }
                        *size = *size * 16 + d as u64;
                        *digits = true;
                    }
                }
            }
            Chunked::DataEnd => {
                let b = bytes[i];
                i += 1;
                match b {
                    b'\r' => {}
                    b'\n' => {
                        *state = Chunked::Size {
                            size: 0,
                            digits: false,
                            ext: false,
                        }
                    }
                    _ => return Err(bad("data end (no CRLF after the chunk)")),
                }
            }
            Chunked::Trailers { empty } => {
                let b = bytes[i];
                i += 1;
                match b {
                    b'\n' if *empty => return Ok((i, true)),
                    b'\n' => *empty = true,
                    b'\r' => {}
                    _ => *empty = false,
                }
            }
        }
    }
    Ok((i, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked() -> Framing {
        Framing::Chunked(Chunked::Size {
            size: 0,
            digits: false,
            ext: false,
        })
    }

    /// Decodes `wire` fed in pieces of `step` bytes; the payload and whether it ended.
    fn decode_in_steps(mut framing: Framing, wire: &[u8], step: usize) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut done = false;
        for piece in wire.chunks(step) {
            pending.extend_from_slice(piece);
            let (used, d) = framing
                .decode(&pending, &mut |d: &[u8]| out.extend_from_slice(d))
                .unwrap();
            pending.drain(..used);
            done = d;
            if done {
                break;
            }
        }
        (out, done)
    }

    #[test]
    fn chunked_bodies_decode_at_every_split() {
        let wire = b"7\r\nhello, \r\n6;ext=1\r\nworld!\r\n0\r\nx-trailer: 1\r\n\r\n";
        for step in 1..wire.len() {
            let (out, done) = decode_in_steps(chunked(), wire, step);
            assert_eq!(out, b"hello, world!", "step {step}");
            assert!(done, "step {step}");
        }
    }

    #[test]
    fn bare_lf_line_ends_and_uppercase_hex_are_accepted() {
        let (out, done) = decode_in_steps(chunked(), b"A\nabcdefghij\n0\n\n", 3);
        assert_eq!(out, b"abcdefghij");
        assert!(done);
    }

    #[test]
    fn a_bad_size_line_is_an_error_naming_it() {
        let mut f = chunked();
        let err = f.decode(b"zz\r\n", &mut |_: &[u8]| {}).unwrap_err();
        assert!(err.to_string().contains("chunk size line"), "{err}");
        let mut f = chunked();
        let err = f
            .decode(b"fffffffffffffffff\r\n", &mut |_: &[u8]| {})
            .unwrap_err();
        assert!(err.to_string().contains("too large"), "{err}");
    }

    #[test]
    fn content_length_stops_at_its_length_and_leaves_the_rest() {
        let mut f = Framing::Length(5);
        let mut out = Vec::new();
        let (used, done) = f
            .decode(b"helloHTTP/1.1", &mut |d: &[u8]| out.extend_from_slice(d))
            .unwrap();
        assert_eq!((used, done, out.as_slice()), (5, true, &b"hello"[..]));
    }

    #[test]
    fn an_early_end_of_file_names_where_the_body_broke() {
        let mut b = Body {
            framing: Framing::Length(3),
            keep_alive: true,
        };
        assert!(b
            .eof()
            .unwrap_err()
            .to_string()
            .contains("before message length"));
        let mut b = Body {
            framing: chunked(),
            keep_alive: true,
        };
        assert!(b.eof().unwrap_err().to_string().contains("chunk size line"));
        let mut b = Body {
            framing: Framing::UntilClose,
            keep_alive: false,
        };
        assert!(b.eof().is_ok() && !b.reusable());
    }

    fn head(text: &str) -> Head {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut r = httparse::Response::new(&mut headers);
        r.parse(text.as_bytes()).unwrap();
        Head::from_parsed(&r).unwrap()
    }

    #[test]
    fn heads_decide_framing_and_keep_alive() {
        let h = head("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(h.content_type.as_deref(), Some("text/event-stream"));
        assert!(matches!(h.body.framing, Framing::Chunked(_)) && h.body.keep_alive);
        let h = head("HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 3\r\n\r\n");
        assert!(matches!(h.body.framing, Framing::Length(3)) && !h.body.keep_alive);
        let h = head("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n");
        assert!(matches!(h.body.framing, Framing::UntilClose) && !h.body.keep_alive);
        let h = head("HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n");
        assert!(!h.body.keep_alive);
        let h = head("HTTP/1.1 204 No Content\r\n\r\n");
        assert!(h.body.reusable());
    }

    #[tokio::test]
    async fn a_kept_alive_connection_carries_two_answers_and_returns_to_the_pool() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            for answer in ["hi", "there"] {
                let _ = s.read(&mut buf).await.unwrap();
                let body = format!("{:x}\r\n{answer}\r\n0\r\n\r\n", answer.len());
                let head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
                s.write_all(format!("{head}{body}").as_bytes())
                    .await
                    .unwrap();
            }
        });
        let url = reqwest::Url::parse(&format!("http://{addr}/v1/completions")).unwrap();
        let client = Client::new(&url, &HeaderMap::new(), Duration::from_secs(5), None).unwrap();
        for want in ["hi", "there"] {
            let mut conn = client.checkout().await.unwrap();
            conn.send(&client.post(b"{}", b"")).await.unwrap();
            let mut head = conn.head().await.unwrap();
            assert_eq!(head.status, 200);
            let body = conn.read_to_end(&mut head.body, 1 << 20).await.unwrap();
            assert_eq!(body, want.as_bytes());
            assert!(head.body.reusable());
            client.checkin(conn);
            assert_eq!(client.idle(), 1);
        }
    }

    #[test]
    fn a_request_carries_host_length_and_the_runs_headers() {
        let url = reqwest::Url::parse("http://example.test:8000/v1/chat/completions?x=1").unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer k".parse().unwrap());
        let client = Client::new(&url, &headers, Duration::from_secs(1), None).unwrap();
        let own = b"x-request-id: ts-1-0\r\n";
        let wire = String::from_utf8(client.post(b"{\"a\":1}", own)).unwrap();
        assert!(
            wire.starts_with(
                "POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: example.test:8000\r\n"
            ),
            "{wire}"
        );
        assert!(wire.contains("authorization: Bearer k\r\nx-request-id: ts-1-0\r\n"));
        assert!(
            wire.ends_with("content-length: 7\r\n\r\n{\"a\":1}"),
            "{wire}"
        );
        assert!(!format!("{client:?}").contains("Bearer"));
    }

    /// The pool's check for a connection the server closed while it sat
    /// idle: closed ones are passed over (a new connection is made), open
    /// ones are handed out.
    #[tokio::test]
    async fn a_connection_closed_while_idle_is_not_handed_out() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
            let mut buf = vec![0u8; 4096];
            // The first connection answers once, then closes while idle.
            let (mut s, _) = listener.accept().await.unwrap();
            let _ = s.read(&mut buf).await.unwrap();
            s.write_all(answer).await.unwrap();
            drop(s);
            closed_tx.send(()).unwrap();
            // The second is kept open and answers twice.
            let (mut s, _) = listener.accept().await.unwrap();
            for _ in 0..2 {
                let _ = s.read(&mut buf).await.unwrap();
                s.write_all(answer).await.unwrap();
            }
        });
        let url = reqwest::Url::parse(&format!("http://{addr}/v1/completions")).unwrap();
        let client = Client::new(&url, &HeaderMap::new(), Duration::from_secs(5), None).unwrap();
        let wire = client.post(b"{}", b"");
        let ask = |mut conn: Conn| {
            let wire = wire.clone();
            async move {
                conn.send(&wire).await.unwrap();
                let mut head = conn.head().await.unwrap();
                conn.read_to_end(&mut head.body, 1 << 10).await.unwrap();
                conn
            }
        };
        let first = ask(client.checkout().await.unwrap()).await;
        let first_port = first.local_port();
        client.checkin(first);
        closed_rx.await.unwrap();
        // The FIN may reach the client's socket a moment after the close.
        let mut waited = 0;
        let second = loop {
            let conn = client.checkout().await.unwrap();
            if conn.local_port() != first_port || waited >= 100 {
                break conn;
            }
            client.checkin(conn);
            tokio::time::sleep(Duration::from_millis(10)).await;
            waited += 1;
        };
        assert_ne!(
            second.local_port(),
            first_port,
            "the closed connection was handed out"
        );
        let second_port = second.local_port();
        client.checkin(ask(second).await);
        let third = client.checkout().await.unwrap();
        assert_eq!(
            third.local_port(),
            second_port,
            "an open idle connection is reused"
        );
        ask(third).await;
    }

    #[tokio::test]
    async fn https_with_a_private_ca_is_trusted_only_when_given() {
        use tokio::io::AsyncWriteExt;
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(mut s) = acceptor.accept(tcp).await else {
                    continue;
                };
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let answer = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 14\r\n\r\ndata: [DONE]\n\n";
                let _ = s.write_all(answer.as_bytes()).await;
                let _ = s.flush().await;
            }
        });
        let url = reqwest::Url::parse(&format!("https://localhost:{port}/v1/completions")).unwrap();
        let pem = cert.pem();
        let trusting = Client::new(
            &url,
            &HeaderMap::new(),
            Duration::from_secs(5),
            Some(pem.as_bytes()),
        )
        .unwrap();
        let mut conn = trusting.checkout().await.unwrap();
        conn.send(&trusting.post(b"{}", b"")).await.unwrap();
        let mut head = conn.head().await.unwrap();
        let body = conn.read_to_end(&mut head.body, 1024).await.unwrap();
        assert_eq!(
            (head.status, body.as_slice()),
            (200, &b"data: [DONE]\n\n"[..])
        );

        let strict = Client::new(&url, &HeaderMap::new(), Duration::from_secs(5), None).unwrap();
        let err = strict
            .checkout()
            .await
            .err()
            .expect("an unknown CA is refused");
        assert!(
            err.is_connect() && err.to_string().contains("TLS handshake"),
            "{err}"
        );
        let bad = Client::new(
            &url,
            &HeaderMap::new(),
            Duration::from_secs(5),
            Some(b"not pem"),
        );
        assert!(bad.unwrap_err().contains("no PEM certificate"));
    }
}
