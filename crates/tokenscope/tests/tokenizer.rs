//! `--tokenizer FILE`: the model's own tokenizer (a Hugging Face
//! tokenizer.json, generated here — never downloaded) gives synthetic
//! prompts their exact length in it, and counts what the server does not.

mod common;
use common::*;
use serde_json::json;

/// Nonsense words: one token each in the generated tokenizer, several in cl100k.
const WORDS: [&str; 20] = [
    "zqx", "vbnm", "qwkj", "plof", "zzut", "xorv", "kjhq", "mnbv", "wqpz", "jxqk", "vvyz", "qqzt",
    "bxzj", "fzqw", "ykzq", "zqyx", "hjzk", "kqxz", "wzvq", "jqvx",
];

/// A byte-level BPE whose merges spell each word (with its leading space)
/// into one token: every prefix of "Ġword" is a token, merged letter by letter.
fn tokenizer_json() -> serde_json::Value {
    let mut vocab = serde_json::Map::new();
    let add = |t: &str, vocab: &mut serde_json::Map<String, serde_json::Value>| {
        if !vocab.contains_key(t) {
            let id = vocab.len();
            vocab.insert(t.to_string(), json!(id));
        }
    };
    add("<unk>", &mut vocab);
    for c in "Ġabcdefghijklmnopqrstuvwxyz".chars() {
        add(&c.to_string(), &mut vocab);
    }
    let mut merges = Vec::new();
    for w in WORDS {
        let spelled: Vec<String> = std::iter::once("Ġ".to_string())
            .chain(w.chars().map(|c| c.to_string()))
            .collect();
        let mut prefix = spelled[0].clone();
        for c in &spelled[1..] {
            let merged = format!("{prefix}{c}");
            if !vocab.contains_key(&merged) {
                merges.push(format!("{prefix} {c}"));
                add(&merged, &mut vocab);
            }
            prefix = merged;
        }
    }
    json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "vocab": vocab, "merges": merges}
    })
}

fn write_tokenizer(name: &str) -> (std::path::PathBuf, tokenizers::Tokenizer) {
    let path = run_dir(name).with_extension("json");
    std::fs::write(&path, tokenizer_json().to_string()).unwrap();
    let t = tokenizers::Tokenizer::from_file(&path).unwrap();
    (path, t)
}

fn count(t: &tokenizers::Tokenizer, text: &str) -> usize {
    t.encode(text, false).unwrap().len()
}

#[test]
fn synthetic_prompts_are_exact_in_the_models_tokenizer() {
    let (path, t) = write_tokenizer("tokenizer-bpe");
    assert_eq!(count(&t, " zqx vbnm"), 2, "the generated tokenizer works");
    let (url, bodies) = logging_server();
    let out = run_dir("tokenizer-prompts");
    let o = bench_chat(
        &url,
        &out,
        &[
            "--tokenizer",
            path.to_str().unwrap(),
            "--requests",
            "6",
            "--input-tokens",
            "uniform:20..60",
            "--shared-prefix",
            "8",
        ],
    );
    assert_ok(&o);
    let stderr = String::from_utf8_lossy(&o.stderr);
    // The words and every prefix of them ("Ġzq", "Ġzqx", …) are one token each.
    assert!(
        stderr.contains("one-token words; synthetic prompts are exact in it"),
        "{stderr}"
    );
    let r = results(&out);
    assert_eq!(r["config"]["tokenizer"]["exact"], true);
    assert_eq!(records(&out).len(), 6);
    let bodies = bodies.lock().unwrap().clone();
    let mut lengths = std::collections::BTreeSet::new();
    for b in &bodies {
        let prompt = b["messages"][0]["content"].as_str().unwrap();
        let n = count(&t, prompt);
        assert!((20..=60).contains(&n), "{n} tokens: {prompt}");
        assert_eq!(n, prompt.split_whitespace().count(), "one token a word");
        lengths.insert(n);
        // cl100k would count these words as several tokens each.
        let cl = tokenscope_workload::tokenizer::count_tokens(prompt).unwrap() as usize;
        assert!(cl > n, "cl100k {cl} vs the model's {n}");
    }
    assert!(lengths.len() > 1, "lengths follow the distribution");
}

#[test]
fn the_models_tokenizer_counts_what_the_server_does_not() {
    let (path, t) = write_tokenizer("tokenizer-count");
    // A stream without usage: its answer is counted here.
    let url = raw_server(|_| {
        let sse = "data: {\"choices\":[{\"delta\":{\"content\":\" zqx vbnm\"}}]}\n\n\
                   data: {\"choices\":[{\"delta\":{\"content\":\" plof\"},\"finish_reason\":\"stop\"}]}\n\n\
                   data: [DONE]\n\n";
        http("200 OK", "text/event-stream", sse)
    });
    let data = run_dir("tokenizer-dataset").with_extension("jsonl");
    std::fs::write(&data, "{\"prompt\": \" qwkj xorv kjhq mnbv\"}\n").unwrap();
    let out = run_dir("tokenizer-count-run");
    let o = bench_chat(
        &url,
        &out,
        &[
            "--tokenizer",
            path.to_str().unwrap(),
            "--dataset",
            data.to_str().unwrap(),
        ],
    );
    assert_ok(&o);
    let rec = &records(&out)[0];
    assert_eq!(rec["output_tokens"], 3, "{rec}");
    assert_eq!(rec["output_token_source"], "tokenizer");
    assert_eq!(
        rec["input_tokens"].as_u64(),
        Some(count(&t, " qwkj xorv kjhq mnbv") as u64)
    );
    assert_eq!(rec["input_tokens"], 4);

    let bad = run_dir("tokenizer-bad").with_extension("json");
    std::fs::write(&bad, "{\"model\": 3}").unwrap();
    let o = bench_chat(
        &url,
        &run_dir("tokenizer-bad-run"),
        &["--tokenizer", bad.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("not a tokenizer.json"), "{stderr}");
}
