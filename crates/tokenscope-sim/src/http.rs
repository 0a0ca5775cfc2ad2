//! What both built-in servers need from HTTP: a lenient JSON body and a
//! listener that takes a burst of connections and sends small writes at once.

use crate::openai::Dialect;
use crate::pooling::Pooled;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::Router;
use bytes::Bytes;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::{TcpListener, TcpSocket};

/// Connections a listener holds before it accepts them. tokio's default,
/// 1,024, is overrun when a client opens 1,024 or more at once (the
/// client's connections ahead of a burst): the rest wait for a SYN
/// retransmit, a second or more. Linux caps it at `net.core.somaxconn`.
pub const BACKLOG: u32 = 16_384;

/// Binds `addr` with a backlog of [`BACKLOG`].
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Every API's endpoint: the generating ones answered by `respond` in
/// their dialect, the pooling ones (embeddings, rerank) by `pool`; a server
/// adds its own routes (models, health, metrics) and its state.
pub fn api_routes<S, F, Fut, P, PFut>(respond: F, pool: P) -> Router<Arc<S>>
where
    S: Send + Sync + 'static,
    F: Fn(Arc<S>, Bytes, Dialect) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send + 'static,
    P: Fn(Arc<S>, Bytes, Pooled) -> PFut + Clone + Send + Sync + 'static,
    PFut: Future<Output = Response> + Send + 'static,
{
    // `None`: `/generate`, which is TGI's whole answer or SGLang's, by body.
    let answer = |dialect: Option<Dialect>| {
        let respond = respond.clone();
        post(move |State(s): State<Arc<S>>, body: Bytes| {
            let dialect = dialect.unwrap_or_else(|| Dialect::of_generate(&body));
            respond(s, body, dialect)
        })
    };
    let pooled = |kind: Pooled| {
        let pool = pool.clone();
        post(move |State(s): State<Arc<S>>, body: Bytes| pool(s, body, kind))
    };
    Router::new()
        .route("/v1/chat/completions", answer(Some(Dialect::Chat)))
        .route("/v1/completions", answer(Some(Dialect::Completions)))
        .route("/v1/responses", answer(Some(Dialect::Responses)))
        .route("/v1/messages", answer(Some(Dialect::Messages)))
        .route("/generate_stream", answer(Some(Dialect::Tgi)))
        .route("/generate", answer(None))
        .route(
            "/v2/models/{model}/generate_stream",
            answer(Some(Dialect::Triton)),
        )
        .route("/v2/models/{model}/generate", answer(Some(Dialect::Triton)))
        .route("/v1/embeddings", pooled(Pooled::Embeddings))
        .route("/v1/rerank", pooled(Pooled::Rerank))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// The ids the requests were sent under, as a server's access log keeps
/// them: `X-Request-Id` and W3C `traceparent`, in arrival order, the first
/// [`SeenIds::KEPT`] kept (the count goes on). What a test holds a client's
/// records against.
#[derive(Debug, Default)]
pub struct SeenIds {
    kept: std::sync::Mutex<Vec<SeenId>>,
    count: std::sync::atomic::AtomicU64,
}

/// One request's ids, as received.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SeenId {
    pub request_id: Option<String>,
    pub traceparent: Option<String>,
}

impl SeenIds {
    /// The most kept: a long run's log stays bounded.
    pub const KEPT: usize = 100_000;

    fn saw(&self, id: SeenId) {
        self.count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() < Self::KEPT {
            kept.push(id);
        }
    }

    /// The ids kept, in arrival order.
    pub fn kept(&self) -> Vec<SeenId> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many requests came, kept or not.
    pub fn count(&self) -> u64 {
        self.count.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Logs every POST's ids into `log` and echoes its `X-Request-Id` on the
/// response, as vLLM does with `--enable-request-id-headers`.
pub fn log_request_ids<S>(router: Router<S>, log: Arc<SeenIds>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let logged = move |req: axum::extract::Request, next: axum::middleware::Next| {
        let log = log.clone();
        async move {
            let (id, parent) = {
                let text = |name: &str| {
                    req.headers()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned)
                };
                (text("x-request-id"), text("traceparent"))
            };
            if req.method() == axum::http::Method::POST {
                log.saw(SeenId {
                    request_id: id.clone(),
                    traceparent: parent,
                });
            }
            let mut response = next.run(req).await;
            if let Some(v) = id.and_then(|i| axum::http::HeaderValue::from_str(&i).ok()) {
                response.headers_mut().insert("x-request-id", v);
            }
            response
        }
    };
    router.layer(axum::middleware::from_fn(logged))
}

/// The largest request body taken. axum's default (2 MB) answered a
/// million-token prompt with a 413 before the engine could refuse it by
/// its length, as a vLLM server (which sets no such limit) does; 256 MB
/// holds any context and a prompt's images in base64.
const MAX_BODY_BYTES: usize = 256 << 20;

/// A request body as JSON, whatever its Content-Type; the error says why not.
pub fn parse_body(body: &[u8]) -> Result<serde_json::Value, String> {
    serde_json::from_slice(body).map_err(|e| format!("the request body is not JSON: {e}"))
}

/// The error answer of an injected `--fault http_CODE`.
pub fn injected_status(code: u16) -> Response {
    use axum::response::IntoResponse;
    let status = axum::http::StatusCode::from_u16(code).expect("valid status");
    let msg = format!("injected {code}");
    let err = serde_json::json!({"error": {"message": msg, "type": "injected", "code": code}});
    (status, axum::Json(err)).into_response()
}

/// A 400 answer in OpenAI's error shape.
pub fn bad_request(msg: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    let err =
        serde_json::json!({"error": {"message": msg, "type": "BadRequestError", "code": 400}});
    (axum::http::StatusCode::BAD_REQUEST, axum::Json(err)).into_response()
}

/// Serves `app` on `listener` until `stopped` resolves. Accepted sockets get
/// TCP_NODELAY, as inference servers' HTTP stacks set it: without it a token
/// written right after the role chunk waits for the client's delayed ACK (~40 ms).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let _ = axum::serve(listener, app.into_make_service())
        .with_graceful_shutdown(async {
            let _ = stopped.await;
        })
        .await;
}
