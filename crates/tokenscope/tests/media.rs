//! Images and audio in requests: `--images 2 --image-size 640x480` sends
//! two 640×480 images per request in each API's own form (the exact
//! server reads each image's size from its header and counts its tokens),
//! the server's count of them comes back per image, TTFT is reported by
//! image count and size, datasets name their media by path, an API that
//! cannot carry media is refused, and the simulated engine charges the
//! image tokens' prefill.

mod common;

use base64::Engine as _;
use common::*;
use serde_json::Value;

const IMAGE_APIS: [&str; 3] = ["openai-chat", "openai-responses", "anthropic-messages"];

/// Tokens of a 640×480 image as the built-in servers count them (28-pixel tiles).
const TOKENS_640X480: u64 = 23 * 18;

fn run(server: &Server, name: &str, args: &[&str]) -> (Value, Vec<Value>) {
    let fixed = [
        "--no-metrics",
        "--output-tokens",
        "8",
        "--input-tokens",
        "32",
    ];
    let (_, r, recs) = bench_ok(&server.url, name, &[&fixed, args]);
    (r, recs)
}

#[test]
fn two_640x480_images_go_in_every_apis_own_form_and_are_counted() {
    for api in IMAGE_APIS {
        let server = Server::start(exact(5, 1));
        let args = [
            "--api",
            api,
            "--images",
            "2",
            "--image-size",
            "640x480",
            "--requests",
            "6",
        ];
        let (r, recs) = run(&server, &format!("media-{api}"), &args);
        assert_eq!(r["counts"]["failed"], 0, "{api}: {}", r["counts"]);
        let seen = &server.stats.snapshot(false)["images"];
        assert_eq!(seen["640x480"], 12, "{api}: the server saw {seen}");
        for q in &recs {
            let m = &q["media"];
            assert_eq!(
                (m["images"].as_u64(), m["image_size"].as_str()),
                (Some(2), Some("640x480")),
                "{api}: {q}"
            );
            assert!(m["bytes"].as_u64().unwrap() > 1000, "{api}: {q}");
            let (sent, counted) = (
                q["requested_input_tokens"].as_u64().unwrap(),
                q["input_tokens"].as_u64().unwrap(),
            );
            assert_eq!(counted, sent + 2 * TOKENS_640X480, "{api}: {q}");
        }
        let m = &r["media"];
        assert_eq!(m["images_per_request"], 2.0, "{api}");
        assert_eq!(m["tokens_per_image"], TOKENS_640X480 as f64, "{api}");
        assert!(
            m["ttft_ms_by_images"]["2"]["p50"].as_f64().unwrap() >= 5.0,
            "{api}: {m}"
        );
        assert!(m["ttft_ms_by_size"]["640x480"].is_object(), "{api}: {m}");
    }
}

#[test]
fn jpeg_images_and_audio_clips_are_sent_and_counted() {
    let server = Server::start(exact(5, 1));
    let args = [
        "--images",
        "1",
        "--image-size",
        "300x200",
        "--image-format",
        "jpeg",
        "--requests",
        "4",
    ];
    let (r, _) = run(&server, "media-jpeg", &args);
    assert_eq!(r["counts"]["failed"], 0);
    assert_eq!(server.stats.snapshot(false)["images"]["300x200"], 4);
    // Two seconds of audio: 25 tokens a second in the built-in servers.
    let (r, recs) = run(
        &server,
        "media-audio",
        &["--audio", "1", "--audio-seconds", "2", "--requests", "3"],
    );
    assert_eq!(r["counts"]["failed"], 0);
    for q in &recs {
        assert_eq!(q["media"]["audio"], 1, "{q}");
        let extra =
            q["input_tokens"].as_u64().unwrap() - q["requested_input_tokens"].as_u64().unwrap();
        assert_eq!(extra, 50, "{q}");
    }
}

#[test]
fn an_api_without_media_parts_is_refused_rather_than_sent_without_them() {
    let server = Server::start(exact(5, 1));
    for (api, flags) in [
        ("openai-completions", ["--images", "1"]),
        ("tgi", ["--images", "1"]),
        ("anthropic-messages", ["--audio", "1"]),
    ] {
        let err = refused(&server.url, &[&["--api", api][..], &flags].concat());
        assert!(err.contains("cannot carry"), "{api}: {err}");
    }
}

#[test]
fn a_datasets_image_paths_are_read_once_and_sent() {
    let dir = run_dir("media-dataset");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, size) in [("a.png", "200x100"), ("b.png", "120x90")] {
        let img = tokenscope_workload::media::image(size.parse().unwrap(), Default::default(), 1);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(img.base64().unwrap())
            .unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    let jsonl = dir.join("prompts.jsonl");
    std::fs::write(
        &jsonl,
        "{\"prompt\": \"describe the river\", \"images\": [\"a.png\", \"b.png\"]}\n{\"prompt\": \"and the stone\", \"image\": \"a.png\"}\n",
    )
    .unwrap();
    let server = Server::start(exact(5, 1));
    let out = run_dir("media-dataset-run");
    assert_ok(&bench(
        &server.url,
        &out,
        &["--no-metrics", "--dataset", jsonl.to_str().unwrap()],
    ));
    let seen = &server.stats.snapshot(false)["images"];
    assert_eq!(
        (seen["200x100"].as_u64(), seen["120x90"].as_u64()),
        (Some(2), Some(1)),
        "{seen}"
    );
    let r = results(&out);
    assert_eq!(r["media"]["images_per_request"], 1.5);
}

/// The engine charges an image's tokens (and its encoder's work) as
/// prefill: four 1024×1024 images make TTFT longer than the same text alone.
#[test]
fn the_engine_charges_images_as_prefill() {
    let ttft = |images: &str| {
        let args = [
            "--requests",
            "6",
            "--concurrency",
            "1",
            "--input-tokens",
            "64",
            "--output-tokens",
            "4",
            "--images",
            images,
            "--image-size",
            "1024x1024",
        ];
        let r = bench_builtin(&format!("media-engine-{images}"), &args);
        assert_eq!(r["counts"]["failed"], 0);
        stat(&r, "latency.ttft_ms.p50")
    };
    let (plain, four) = (ttft("0"), ttft("4"));
    // 4 × 1,369 image tokens and their encoder: a prefill of ~7,000 tokens.
    assert!(
        four > plain + 5.0,
        "TTFT {plain} ms without images, {four} ms with four"
    );
}
