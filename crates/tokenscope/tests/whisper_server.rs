//! The speech-to-text API against a real speech server: whisper.cpp's
//! `whisper-server`, built from PyPI's pywhispercpp source package with a
//! tiny random-weight model generated here (scripts/whisper-fixture.sh,
//! run by the test command). It takes tokenscope's multipart upload at
//! `--inference-path /v1/audio/transcriptions` and answers whole.

mod common;

use common::*;
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn fixture(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the README's test command (scripts/test.sh), which builds the whisper.cpp fixture")
    })
}

/// A whisper-server child process on 127.0.0.1, killed when dropped.
struct Whisper {
    child: Child,
    url: String,
}

impl Whisper {
    fn start() -> Whisper {
        let port = free_port();
        let log = std::fs::File::create(run_dir(&format!("whisper-{port}")).with_extension("txt"))
            .unwrap();
        let child = Command::new(fixture("WHISPER_SERVER"))
            .args(["-m", &fixture("WHISPER_MODEL"), "--host", "127.0.0.1"])
            .args(["--port", &port.to_string(), "-t", "1"])
            .args(["--inference-path", "/v1/audio/transcriptions"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting whisper-server");
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "whisper-server did not listen within 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Whisper {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Whisper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const WHOLE: [&str; 9] = [
    "--model",
    "tiny",
    "--api",
    "openai-transcriptions",
    "--no-metrics",
    "--no-stream",
    "--concurrency",
    "1",
    "--audio",
];

#[test]
fn whisper_cpp_transcribes_the_upload_and_its_rtfx_is_its_audio_over_its_time() {
    let server = Whisper::start();
    let args = ["1", "--audio-seconds", "3", "--requests", "3"];
    let (_, r, recs) = bench_ok(&server.url, "whisper-whole", &[&WHOLE[..], &args[..]]);
    assert_eq!(recs.len(), 3);
    let mut rtfx = Vec::new();
    for q in &recs {
        assert!(q["error_kind"].is_null(), "{q}");
        assert_eq!(q["status"], 200, "{q}");
        assert_eq!(q["speech"]["audio_s"], 3.0, "{q}");
        let e2e_s = (q["done_at_us"].as_f64().unwrap() - q["sent_at_us"].as_f64().unwrap()) / 1e6;
        rtfx.push(3.0 / e2e_s);
    }
    rtfx.sort_by(f64::total_cmp);
    let p50 = stat(&r, "speech.rtfx.p50");
    assert!((p50 - rtfx[1]).abs() / rtfx[1] < 0.002, "{p50} vs {rtfx:?}");
    assert_eq!(stat(&r, "speech.audio_in_s"), 9.0);
}

#[test]
fn whisper_cpp_reads_a_dataset_of_wav_files_and_a_streamed_ask_is_said_to_be_ignored() {
    let server = Whisper::start();
    let dir = run_dir("whisper-wavs");
    std::fs::create_dir_all(&dir).unwrap();
    let mut lines = String::new();
    for (i, seconds) in [2.0f64, 4.5].iter().enumerate() {
        let samples = (seconds * 16_000.0) as u32;
        let mut b = Vec::new();
        b.extend_from_slice(b"RIFF");
        b.extend_from_slice(&(36 + samples * 2).to_le_bytes());
        b.extend_from_slice(b"WAVEfmt ");
        b.extend_from_slice(&16u32.to_le_bytes());
        for v in [1u16, 1] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&16_000u32.to_le_bytes());
        b.extend_from_slice(&32_000u32.to_le_bytes());
        for v in [2u16, 16] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(b"data");
        b.extend_from_slice(&(samples * 2).to_le_bytes());
        b.resize(b.len() + samples as usize * 2, 0);
        std::fs::write(dir.join(format!("c{i}.wav")), b).unwrap();
        lines.push_str(&format!(
            "{{\"prompt\": \"c{i}\", \"audio\": \"c{i}.wav\"}}\n"
        ));
    }
    let data = dir.join("clips.jsonl");
    std::fs::write(&data, lines).unwrap();
    let data = data.to_string_lossy().into_owned();
    let args = [
        "--model",
        "tiny",
        "--api",
        "openai-transcriptions",
        "--no-metrics",
        "--no-stream",
    ];
    let (_, _, recs) = bench_ok(
        &server.url,
        "whisper-data",
        &[&args[..], &["--dataset", &data, "--requests", "4"]],
    );
    for q in &recs {
        assert!(q["error_kind"].is_null(), "{q}");
        let s = q["speech"]["audio_s"].as_f64().unwrap();
        assert!(s == 2.0 || s == 4.5, "{q}");
    }
    // whisper.cpp does not stream: asked to, it answers whole, and the
    // record says the server ignored stream=true.
    let streamed = [
        "--model",
        "tiny",
        "--api",
        "openai-transcriptions",
        "--no-metrics",
        "--audio",
        "1",
        "--requests",
        "1",
    ];
    let out = run_dir("whisper-streamed");
    bench(&server.url, &out, &streamed);
    let r: Value = records(&out).remove(0);
    assert_eq!(r["error_kind"], "not_streamed", "{r}");
    assert!(r["error"].as_str().unwrap().contains("stream=true"), "{r}");
}
