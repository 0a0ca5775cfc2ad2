//! The media a run's requests carried, as lines every format shows the
//! same way: what each request sent, what the server counted for it, and
//! TTFT by image count and size.

use tokenscope_core::results::RunResults;

/// What the tokens per image rest on: the client's count of the text is
/// the server's only where they tokenize alike — the built-in servers,
/// or `--tokenizer` with the model's own.
fn basis(r: &RunResults) -> &'static str {
    let own_tokenizer = r.config["tokenizer"]["path"].is_string();
    match (r.target.builtin.is_some(), own_tokenizer) {
        (true, _) | (_, true) => "",
        _ => " ‡ the text counted with the built-in cl100k: off by as much as the server tokenizes it differently (--tokenizer with the model's own makes it exact)",
    }
}

/// One line each; none when no request carried media.
pub fn lines(r: &RunResults) -> Vec<String> {
    let Some(m) = &r.media else {
        return Vec::new();
    };
    let mut sent = Vec::new();
    for (n, what) in [
        (m.images_per_request, "images"),
        (m.audio_per_request, "audio clips"),
        (m.video_per_request, "videos"),
    ] {
        if n > 0.0 {
            sent.push(format!("{n:.1} {what}"));
        }
    }
    let mut out = vec![format!(
        "{} per request, {:.1} KB inline, over {} requests",
        sent.join(", "),
        m.bytes_per_request / 1e3,
        m.requests
    )];
    out.push(match m.tokens_per_image {
        Some(t) => format!(
            "{t:.0} prompt tokens per image (the server's count past the text's){}",
            basis(r)
        ),
        None => "tokens per image: the server counted no prompt tokens".into(),
    });
    let by = |what: &str, cells: Vec<String>| {
        (!cells.is_empty()).then(|| format!("TTFT p50 by {what}: {}", cells.join(", ")))
    };
    out.extend(by(
        "images",
        m.ttft_ms_by_images
            .iter()
            .map(|(k, s)| format!("{k} → {:.1} ms (n={})", s.p50, s.count))
            .collect(),
    ));
    out.extend(by(
        "first image's size",
        m.ttft_ms_by_size
            .iter()
            .map(|(k, s)| format!("{k} → {:.1} ms (n={})", s.p50, s.count))
            .collect(),
    ));
    out
}
