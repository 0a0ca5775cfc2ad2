//! What both built-in servers need from HTTP: a lenient JSON body and a
//! listener that sends small writes at once.

use axum::serve::ListenerExt;
use axum::Router;
use tokio::net::TcpListener;

/// A request body as JSON, whatever its Content-Type; the error says why not.
pub fn parse_body(body: &[u8]) -> Result<serde_json::Value, String> {
    serde_json::from_slice(body).map_err(|e| format!("the request body is not JSON: {e}"))
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
