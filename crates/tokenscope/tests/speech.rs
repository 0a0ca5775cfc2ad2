//! The speech APIs end to end: transcription and translation (whole and
//! streamed), text to speech, and realtime sessions over a WebSocket,
//! against the exact server (whose own stamps, at `/speech-log`, are the
//! truth) and the simulated engine (whose lag must grow with its load).

mod common;

use common::*;
use serde_json::Value;

/// A 16 kHz mono 16-bit WAV of `seconds` of silence.
fn wav(seconds: f64) -> Vec<u8> {
    let data = (seconds * 16_000.0) as u32 * 2;
    let mut b = Vec::new();
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + data).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&16u32.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&16_000u32.to_le_bytes());
    b.extend_from_slice(&32_000u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(b"data");
    b.extend_from_slice(&data.to_le_bytes());
    b.resize(b.len() + data as usize, 0);
    b
}

/// The exact server's own stamps of its speech requests, of one kind, in order.
fn log(server: &Server, kind: &str) -> Vec<Value> {
    server
        .stats
        .speech
        .entries()
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

/// A record's stamp on the host's shared clock, µs.
fn shared(r: &Value, rec: &Value, field: &str) -> f64 {
    let origin = r["client"]["monotonic_origin_us"].as_f64().expect("origin");
    origin
        + rec[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{field}: {rec}"))
}

/// Each client read minus the server's send of the same bytes, ms: none
/// before its send, the median within 1 ms.
fn within_a_millisecond(pairs: &[(f64, f64)], what: &str) {
    let d: Vec<f64> = pairs
        .iter()
        .map(|(read, sent)| (read - sent) / 1e3)
        .collect();
    assert!(
        d.iter().all(|&x| x > -0.5),
        "{what}: read before sent {d:?}"
    );
    assert!(median(d.clone()) < 1.0, "{what}: {d:?}");
}

fn speech(
    url: &str,
    name: &str,
    api: &str,
    rest: &[&str],
) -> (std::path::PathBuf, Value, Vec<Value>) {
    let base = [
        "--model",
        "tokenscope-exact",
        "--api",
        api,
        "--no-metrics",
        "--concurrency",
        "1",
    ];
    bench_ok(url, name, &[&base[..], rest])
}

#[test]
fn transcriptions_and_translations_are_timed_within_a_millisecond_and_their_rtfx_is_exact() {
    let server = Server::start(exact(40, 10));
    let clip = ["--audio", "1", "--audio-seconds", "2", "--requests", "5"];
    for (api, kind) in [
        ("openai-transcriptions", "transcription"),
        ("openai-translations", "translation"),
    ] {
        let (_, r, recs) = speech(&server.url, kind, api, &clip);
        let own = log(&server, kind);
        assert_eq!((recs.len(), own.len()), (5, 5), "{api}");
        let mut first = Vec::new();
        let mut last = Vec::new();
        for (rec, s) in recs.iter().zip(&own) {
            // 2 s of audio: 5 words (2.5 a second), one token each.
            assert_eq!(rec["speech"]["audio_s"], 2.0, "{rec}");
            assert_eq!(rec["speech"]["words"], 5, "{rec}");
            assert_eq!(rec["media"]["audio_ms"], 2000);
            assert_eq!(rec["chunks"]["tokens"], 1, "one word a chunk: {rec}");
            first.push((
                shared(&r, rec, "first_token_at_us"),
                s["first_sent_mono_us"].as_f64().unwrap(),
            ));
            last.push((
                shared(&r, rec, "done_at_us"),
                s["last_sent_mono_us"].as_f64().unwrap(),
            ));
            // The server's own processing: TTFT, then 4 gaps.
            let took = (s["last_sent_mono_us"].as_f64().unwrap()
                - s["arrived_mono_us"].as_f64().unwrap())
                / 1e3;
            assert!(
                (80.0..130.0).contains(&took),
                "{api}: the server took {took} ms"
            );
        }
        within_a_millisecond(&first, &format!("{api}: first delta"));
        within_a_millisecond(&last, &format!("{api}: end"));
        // RTFx: each request's audio over its own send-to-end, and the run's p50 of those.
        let mut rtfx: Vec<f64> = recs
            .iter()
            .map(|q| {
                2.0 / ((q["done_at_us"].as_f64().unwrap() - q["sent_at_us"].as_f64().unwrap())
                    / 1e6)
            })
            .collect();
        rtfx.sort_by(f64::total_cmp);
        let p50 = stat(&r, "speech.rtfx.p50");
        assert!((p50 - rtfx[2]).abs() / rtfx[2] < 0.002, "{p50} vs {rtfx:?}");
        // Against the server's known time (80 ms for 2 s: RTFx 25), the
        // client's send-to-end adds the upload, the loopback and, on a
        // loaded machine, the server's own lateness (bounded above).
        assert!(rtfx[2] <= 25.0 && rtfx[2] > 25.0 * 80.0 / 130.0, "{rtfx:?}");
        assert!((stat(&r, "speech.rtf_p50") - 1.0 / p50).abs() < 1e-9);
        assert_eq!(stat(&r, "speech.audio_in_s"), 10.0);
    }
}

#[test]
fn a_whole_transcription_and_speech_are_timed_to_their_end() {
    let server = Server::start(exact(40, 10));
    let clip = [
        "--audio",
        "1",
        "--audio-seconds",
        "3",
        "--requests",
        "2",
        "--no-stream",
    ];
    let (_, r, recs) = speech(&server.url, "whole", "openai-transcriptions", &clip);
    let own = log(&server, "transcription");
    let ends: Vec<(f64, f64)> = recs
        .iter()
        .zip(&own)
        .map(|(q, s)| {
            (
                shared(&r, q, "done_at_us"),
                s["last_sent_mono_us"].as_f64().unwrap(),
            )
        })
        .collect();
    within_a_millisecond(&ends, "whole transcription");
    // 3 s: 8 words, and the server's count of the seconds from its usage.
    assert!(
        recs.iter()
            .all(|q| q["speech"]["words"] == 8 && q["speech"]["server_audio_s"] == 3.0),
        "{recs:?}"
    );
    // Text to speech: 10 words said, 4 s of 24 kHz WAV in 50 tokens of 80 ms.
    let (_, r, recs) = speech(
        &server.url,
        "tts",
        "openai-speech",
        &["--input-tokens", "10", "--requests", "2"],
    );
    let own = log(&server, "speech");
    assert_eq!(own.len(), 2);
    let mut first = Vec::new();
    let mut last = Vec::new();
    for (q, s) in recs.iter().zip(&own) {
        assert_eq!(q["speech"]["audio_s"], 4.0, "{q}");
        first.push((
            shared(&r, q, "first_token_at_us"),
            s["first_sent_mono_us"].as_f64().unwrap(),
        ));
        last.push((
            shared(&r, q, "done_at_us"),
            s["last_sent_mono_us"].as_f64().unwrap(),
        ));
    }
    within_a_millisecond(&first, "speech: first audio byte");
    within_a_millisecond(&last, "speech: last byte");
    assert_eq!(stat(&r, "speech.audio_out_s"), 8.0);
    // Audio seconds produced a second: 4 s in 40 + 49 × 10 ms.
    let x = stat(&r, "speech.rtfx.p50");
    assert!(x <= 4.0 / 0.530 && x > 4.0 / 0.630, "{x}");
}

#[test]
fn a_realtime_session_at_pace_lags_as_the_server_says() {
    let server = Server::start(exact(40, 10));
    let args = [
        "--audio",
        "1",
        "--audio-seconds",
        "2",
        "--audio-chunk-ms",
        "100",
        "--requests",
        "3",
    ];
    let (_, r, recs) = speech(&server.url, "realtime", "openai-realtime", &args);
    let own = log(&server, "realtime");
    assert_eq!((recs.len(), own.len()), (3, 3));
    let mut diffs = Vec::new();
    let mut ends = Vec::new();
    for (q, s) in recs.iter().zip(&own) {
        let rt = &q["speech"]["realtime"];
        assert_eq!(
            (rt["chunks"].as_u64(), rt["paced"].as_bool()),
            (Some(20), Some(true)),
            "{q}"
        );
        let arrived: Vec<f64> = s["chunks_arrived_mono_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let sent: Vec<f64> = s["deltas_sent_mono_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let lags: Vec<f64> = rt["lags_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!((arrived.len(), sent.len(), lags.len()), (20, 20, 20));
        // At the speaker's pace: a chunk every 100 ms, as the server saw them come.
        let gaps: Vec<f64> = arrived.windows(2).map(|w| (w[1] - w[0]) / 1e3).collect();
        assert!((median(gaps.clone()) - 100.0).abs() < 10.0, "{gaps:?}");
        // Each delta's lag is the server's own: its send minus its chunk's arrival.
        for k in 0..20 {
            diffs.push((lags[k] - (sent[k] - arrived[k])) / 1e3);
        }
        let own_end =
            s["done_sent_mono_us"].as_f64().unwrap() - s["final_arrived_mono_us"].as_f64().unwrap();
        ends.push((rt["final_to_done_us"].as_f64().unwrap() - own_end) / 1e3);
    }
    let abs: Vec<f64> = diffs.iter().map(|d| d.abs()).collect();
    assert!(
        median(abs.clone()) < 1.0,
        "lag − the server's own, ms: {diffs:?}"
    );
    assert!(abs.iter().all(|&d| d < 25.0), "{diffs:?}");
    // From the last audio to `transcription.done`: the server's own, too.
    assert!(ends.iter().all(|d| d.abs() < 25.0), "{ends:?}");
    assert!(
        median(ends.iter().map(|d| d.abs()).collect()) < 1.0,
        "{ends:?}"
    );
    // The lag is the TTFT of each chunk: 40 ms, the median and p99 within a few.
    let p50 = stat(&r, "speech.lag_ms.p50");
    assert!((40.0..80.0).contains(&p50), "{p50}");
    // Three sessions of 20 deltas judged, none growing: no finding.
    assert_eq!(stat(&r, "speech.sessions_judged"), 3.0);
    assert!(!has_rule(&r, "realtime_lag_grows"));
    // As fast as possible: the chunks come together, the config says so.
    let (_, r, recs) = speech(
        &server.url,
        "realtime-fast",
        "openai-realtime",
        &[&args[..], &["--audio-pace", "fast"]].concat(),
    );
    assert_eq!(r["config"]["audio_pace"], "fast");
    assert!(recs
        .iter()
        .all(|q| q["speech"]["realtime"]["paced"] == false));
    // Its lags are the server's backlog, not the speaker's: kept per
    // record, never summarised or judged.
    assert!(r["speech"]["lag_ms"].is_null(), "{}", r["speech"]);
    let kept = |q: &Value| q["speech"]["realtime"]["lags_us"].as_array().map(Vec::len);
    assert!(recs.iter().all(|q| kept(q) == Some(20)), "{recs:?}");
}

#[test]
fn a_dataset_of_wav_files_gives_their_durations() {
    let server = Server::start(exact(5, 1));
    let dir = run_dir("wav-dataset");
    std::fs::create_dir_all(&dir).unwrap();
    let lengths = [1.5, 2.0, 3.25];
    let mut lines = String::new();
    for (i, s) in lengths.iter().enumerate() {
        std::fs::write(dir.join(format!("clip{i}.wav")), wav(*s)).unwrap();
        lines.push_str(&format!(
            "{{\"prompt\": \"clip {i}\", \"audio\": \"clip{i}.wav\"}}\n"
        ));
    }
    let data = dir.join("clips.jsonl");
    std::fs::write(&data, lines).unwrap();
    let data = data.to_string_lossy().into_owned();
    let (_, _, recs) = speech(
        &server.url,
        "wav-run",
        "openai-transcriptions",
        &["--dataset", &data, "--requests", "3"],
    );
    // Each record holds its clip's length as its header says, exactly.
    for q in &recs {
        let s = q["speech"]["audio_s"].as_f64().unwrap();
        assert!(lengths.contains(&s), "{q}");
        assert_eq!(q["media"]["audio_ms"].as_f64().unwrap(), s * 1000.0, "{q}");
    }
    // A file whose length cannot be read is refused, naming it.
    std::fs::write(dir.join("bad.wav"), b"RIFF\0\0\0\0WAVEjunk").unwrap();
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"prompt\": \"a\", \"audio\": \"bad.wav\"}\n").unwrap();
    let said = refused(
        &server.url,
        &[
            "--model",
            "tokenscope-exact",
            "--api",
            "openai-transcriptions",
            "--no-metrics",
            "--dataset",
            &bad.to_string_lossy(),
        ],
    );
    assert!(
        said.contains("bad.wav") && said.contains("no `data` chunk"),
        "{said}"
    );
}

#[test]
fn a_speech_api_without_audio_is_refused_saying_what_to_add() {
    let server = Server::start(exact(5, 1));
    let said = refused(
        &server.url,
        &[
            "--model",
            "tokenscope-exact",
            "--api",
            "openai-transcriptions",
            "--no-metrics",
        ],
    );
    assert!(
        said.contains("--audio 1") && said.lines().count() <= 2,
        "{said}"
    );
    let said = refused(
        &server.url,
        &[
            "--model",
            "m",
            "--api",
            "openai-realtime",
            "--no-metrics",
            "--audio",
            "1",
            "--audio-seconds",
            "uniform:5..2",
        ],
    );
    assert!(said.contains("upper bound"), "{said}");
    let said = refused(
        &server.url,
        &[
            "--model",
            "m",
            "--api",
            "openai-realtime",
            "--no-metrics",
            "--audio",
            "1",
            "--audio-chunk-ms",
            "0",
        ],
    );
    assert!(said.contains("audio-chunk-ms"), "{said}");
    // One clip is uploaded: two would be counted and not sent.
    let two = [
        "--model",
        "m",
        "--api",
        "openai-transcriptions",
        "--no-metrics",
        "--audio",
        "2",
    ];
    let said = refused(&server.url, &two);
    assert!(said.contains("one clip a request"), "{said}");
    // The lag is a realtime session's: another API has none to judge.
    let said = refused(
        &server.url,
        &[&EXACT_CHAT[..], &["--slo", "lag_p99=500ms"]].concat(),
    );
    assert!(said.contains("openai-realtime"), "{said}");
}

/// Realtime lag on the simulated engine, at one concurrency: its results.
fn realtime_on_the_engine(url: &str, c: u32) -> Value {
    // At least 3 sessions, so the finding can be judged at any load.
    let (n, sessions) = (c.to_string(), c.max(3).to_string());
    let args = [
        "--model",
        "llama-3.1-8b",
        "--api",
        "openai-realtime",
        "--no-metrics",
        "--audio",
        "1",
        "--audio-seconds",
        "3",
        "--media-pool",
        "1",
        "--requests",
        &sessions,
        "--concurrency",
        &n,
    ];
    bench_ok(url, &format!("engine-rt-{c}"), &[&args[..]]).1
}

#[test]
fn on_the_engine_the_lag_grows_with_concurrency_and_the_finding_names_the_load() {
    // An 8B model on an L4 holding 4 sequences: about 75 chunks a second.
    let port = free_port();
    let _engine = SimServe::start(
        port,
        &[
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "l4",
            "--max-num-seqs",
            "4",
        ],
    );
    let url = format!("http://127.0.0.1:{port}");
    let light = realtime_on_the_engine(&url, 2);
    let heavy = realtime_on_the_engine(&url, 12);
    let (l, h) = (
        stat(&light, "speech.lag_ms.p99"),
        stat(&heavy, "speech.lag_ms.p99"),
    );
    assert!(h > 3.0 * l, "lag p99 at 2 sessions {l} ms, at 12 {h} ms");
    assert!(stat(&light, "speech.sessions_judged") >= 3.0);
    assert!(
        !has_rule(&light, "realtime_lag_grows"),
        "{:?}",
        rules(&light)
    );
    let found = heavy["diagnosis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "realtime_lag_grows");
    let found = found.unwrap_or_else(|| panic!("no lag finding: {:?}", rules(&heavy)));
    assert!(
        found["message"]
            .as_str()
            .unwrap()
            .contains("concurrency 12"),
        "{found}"
    );
}

#[test]
fn a_sweep_recommends_the_voice_load_and_names_where_it_stops_keeping_up() {
    let port = free_port();
    let _engine = SimServe::start(
        port,
        &[
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "l4",
            "--max-num-seqs",
            "4",
        ],
    );
    let dir = run_dir("voice-sweep");
    let o = tokenscope()
        .args([
            "sweep",
            "--quiet",
            "--no-history",
            "--url",
            &format!("http://127.0.0.1:{port}"),
        ])
        .args([
            "--model",
            "llama-3.1-8b",
            "--api",
            "openai-realtime",
            "--no-metrics",
            "--audio",
            "1",
            "--audio-seconds",
            "3",
            "--media-pool",
            "1",
        ])
        .args(["--concurrency", "2,12", "--requests", "12"])
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    assert_ok(&o);
    let doc = sweep_doc(&dir);
    let recs = doc["analysis"]["recommendations"]
        .as_array()
        .expect("recommendations");
    let voice = recs
        .iter()
        .find(|r| r["profile"] == "voice")
        .unwrap_or_else(|| panic!("{recs:?}"));
    assert_eq!(voice["load"], 2.0, "{voice}");
    assert!(
        voice["why"]
            .as_str()
            .unwrap()
            .contains("stops keeping up at 12"),
        "{voice}"
    );
}

/// A WebSocket server on 127.0.0.1 whose every session says `session.created`
/// then runs `then` (what a hostile server sends); its URL.
fn ws_server(then: fn() -> Vec<tokio_tungstenite::tungstenite::Message>) -> String {
    use futures_util::{SinkExt, StreamExt};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                        return;
                    };
                    let created = r#"{"type":"session.created","id":"s","created":0}"#;
                    let _ = ws.send(created.into()).await;
                    for m in then() {
                        if ws.send(m).await.is_err() {
                            return;
                        }
                    }
                    // Then it reads what comes, answering nothing more, until the client leaves.
                    while let Some(Ok(_)) = ws.next().await {}
                });
            }
        });
    });
    url
}

fn hostile_session(url: &str, name: &str) -> Value {
    let args = [
        "--model",
        "m",
        "--api",
        "openai-realtime",
        "--no-metrics",
        "--audio",
        "1",
        "--audio-seconds",
        "0.5",
        "--requests",
        "1",
        "--idle-timeout",
        "2s",
        "--timeout",
        "20s",
    ];
    let out = run_dir(name);
    let o = bench(url, &out, &args);
    assert!(o.status.code().is_some(), "{o:?}");
    records(&out).remove(0)
}

#[test]
fn a_hostile_realtime_server_fails_its_session_with_a_reason() {
    use tokio_tungstenite::tungstenite::Message;
    // One endless event: 2 MiB of delta, past the 1 MiB an event may hold.
    let huge = ws_server(|| {
        vec![Message::text(format!(
            r#"{{"type":"transcription.delta","delta":"{}"}}"#,
            "a".repeat(2 << 20)
        ))]
    });
    let r = hostile_session(&huge, "ws-huge");
    assert_eq!(r["error_kind"], "too_large", "{r}");
    // The wrong shape: JSON without a type, then a binary frame.
    let shapeless = ws_server(|| vec![Message::text(r#"{"delta":"x"}"#)]);
    let r = hostile_session(&shapeless, "ws-shape");
    assert_eq!(r["error_kind"], "malformed", "{r}");
    assert!(r["error"].as_str().unwrap().contains("type"), "{r}");
    let binary = ws_server(|| vec![Message::binary(vec![0u8; 16])]);
    assert_eq!(
        hostile_session(&binary, "ws-binary")["error_kind"],
        "malformed"
    );
    // Deltas, then silence: the session fails at --idle-timeout, not later.
    let silent = ws_server(|| {
        vec![Message::text(
            r#"{"type":"transcription.delta","delta":" hi"}"#,
        )]
    });
    let r = hostile_session(&silent, "ws-silent");
    assert_eq!(r["error_kind"], "timeout", "{r}");
    // The server's own error event, with its code.
    let refusing = ws_server(|| {
        vec![Message::text(
            r#"{"type":"error","error":"model not found","code":"model_not_found"}"#,
        )]
    });
    let r = hostile_session(&refusing, "ws-error");
    assert_eq!(r["error_kind"], "server_error", "{r}");
    assert_eq!(r["error"], "model not found (model_not_found)");
    // A plain HTTP server that does not upgrade: the handshake's failure, said.
    let plain = raw_server(|_| http("404 Not Found", "text/plain", "no"));
    let r = hostile_session(&plain, "ws-plain");
    assert_eq!(r["error_kind"], "connect", "{r}");
    assert!(r["error"].as_str().unwrap().contains("handshake"), "{r}");
}

#[test]
fn a_speech_answer_of_the_wrong_shape_is_malformed() {
    // Text to speech answered with JSON and HTTP 200: not audio.
    let json = raw_server(|_| http("200 OK", "application/json", r#"{"ok":true}"#));
    let out = run_dir("tts-json");
    bench(
        &json,
        &out,
        &[
            "--model",
            "m",
            "--api",
            "openai-speech",
            "--no-metrics",
            "--requests",
            "1",
        ],
    );
    let r = &records(&out)[0];
    assert_eq!(r["error_kind"], "malformed", "{r}");
    // A transcription answered whole with no `text`.
    let shapeless = raw_server(|_| http("200 OK", "application/json", r#"{"words":[]}"#));
    let out = run_dir("stt-shape");
    let args = [
        "--model",
        "m",
        "--api",
        "openai-transcriptions",
        "--no-metrics",
        "--requests",
        "1",
        "--no-stream",
        "--audio",
        "1",
        "--audio-seconds",
        "0.2",
    ];
    bench(&shapeless, &out, &args);
    let r = &records(&out)[0];
    assert_eq!(r["error_kind"], "malformed", "{r}");
    assert!(r["error"].as_str().unwrap().contains("text"), "{r}");
}
