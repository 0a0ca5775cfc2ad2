//! The Kubernetes manifests and the Dockerfile in the repo: parsed, checked
//! against the fields an Indexed Job needs, and their tokenscope arguments
//! run through the real binary's parser.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use yaml_rust2::{Yaml, YamlLoader};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A manifest as `envsubst '$RUN $START_AT'` turns it into what is applied.
fn manifest(name: &str) -> Yaml {
    let text = std::fs::read_to_string(repo().join("deploy/kubernetes").join(name)).unwrap();
    let text = text
        .replace("${RUN}", "llama70b-test")
        .replace("${START_AT}", "2026-12-03T10:00:00Z");
    assert!(
        !text.contains("${"),
        "{name}: a variable the docs do not fill"
    );
    let mut docs = YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(docs.len(), 1, "{name}: one object");
    docs.remove(0)
}

fn str_of<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {y:?}"))
}

/// A DNS-1123 name, as Kubernetes wants for object names.
fn dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// What every Job here must have: a valid name, a pod template that never
/// restarts in place, containers with images, mounts of declared volumes.
fn check_job(job: &Yaml, claim: &str) -> Yaml {
    assert_eq!(str_of(&job["apiVersion"], "apiVersion"), "batch/v1");
    assert_eq!(str_of(&job["kind"], "kind"), "Job");
    let name = str_of(&job["metadata"]["name"], "metadata.name");
    assert!(dns_name(name), "job name {name}");
    let spec = &job["spec"]["template"]["spec"];
    let restart = str_of(&spec["restartPolicy"], "restartPolicy");
    assert!(["Never", "OnFailure"].contains(&restart), "{restart}");
    let volumes: Vec<&str> = spec["volumes"]
        .as_vec()
        .expect("volumes")
        .iter()
        .map(|v| {
            assert_eq!(
                str_of(&v["persistentVolumeClaim"]["claimName"], "claimName"),
                claim
            );
            str_of(&v["name"], "volume name")
        })
        .collect();
    let containers = spec["containers"].as_vec().expect("containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert!(dns_name(str_of(&c["name"], "container name")));
    assert!(!str_of(&c["image"], "image").is_empty());
    for m in c["volumeMounts"].as_vec().expect("volumeMounts") {
        assert!(volumes.contains(&str_of(&m["name"], "mount")), "{m:?}");
        assert!(str_of(&m["mountPath"], "mountPath").starts_with('/'));
    }
    for r in ["requests", "limits"] {
        assert!(
            c["resources"][r]["cpu"].as_str().is_some(),
            "resources.{r}.cpu"
        );
        assert!(
            c["resources"][r]["memory"].as_str().is_some(),
            "resources.{r}.memory"
        );
    }
    c.clone()
}

#[test]
fn the_shards_job_is_an_indexed_job_whose_arguments_tokenscope_accepts() {
    let pvc = manifest("pvc.yaml");
    assert_eq!(str_of(&pvc["kind"], "kind"), "PersistentVolumeClaim");
    let claim = str_of(&pvc["metadata"]["name"], "pvc name").to_string();
    assert_eq!(
        pvc["spec"]["accessModes"][0].as_str(),
        Some("ReadWriteMany")
    );

    let job = manifest("shards-job.yaml");
    let c = check_job(&job, &claim);
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"].as_str(), Some("Indexed"));
    let n = spec["completions"].as_i64().expect("completions");
    assert_eq!(
        spec["parallelism"].as_i64(),
        Some(n),
        "every shard runs at once"
    );
    assert_eq!(
        spec["backoffLimit"].as_i64(),
        Some(0),
        "a late re-run is not a shard"
    );
    assert!(
        c["command"].is_badvalue(),
        "the image's entrypoint runs tokenscope"
    );
    let args: Vec<String> = c["args"]
        .as_vec()
        .expect("args")
        .iter()
        .map(|a| str_of(a, "arg").to_string())
        .collect();
    assert_eq!(args[0], "bench");
    assert!(args.contains(&format!("--shards={n}")), "{args:?}");
    assert!(args.iter().any(|a| a.starts_with("--start-at=")));
    let out = args
        .iter()
        .find(|a| a.starts_with("--out="))
        .expect("--out");
    assert!(
        out.contains("$(JOB_COMPLETION_INDEX)"),
        "one directory per shard: {out}"
    );

    // The same arguments through the real parser, as pod 3 would run them
    // (Kubernetes expands $(JOB_COMPLETION_INDEX)), against a closed port:
    // not a usage error (exit 2) but an unreachable server (exit 3).
    let dir = run_dir("deploy-shard3");
    let local: Vec<String> = args
        .iter()
        .map(|a| match a {
            a if a.starts_with("--url=") => "--url=http://127.0.0.1:9".to_string(),
            a if a.starts_with("--out=") => format!("--out={}", dir.display()),
            a => a.clone(),
        })
        .collect();
    let o = tokenscope()
        .args(&local)
        .env("JOB_COMPLETION_INDEX", "3")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("127.0.0.1:9"), "{err}");
}

#[test]
fn the_merge_job_merges_the_shards_directories() {
    let claim = str_of(&manifest("pvc.yaml")["metadata"]["name"], "pvc").to_string();
    let shards = manifest("shards-job.yaml");
    let job = manifest("merge-job.yaml");
    let c = check_job(&job, &claim);
    let script = str_of(&c["args"][0], "merge args");
    assert!(script.starts_with("tokenscope merge "), "{script}");
    // It reads where the shards write.
    let shard_out = shards["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str()?.strip_prefix("--out="))
        .next()
        .unwrap()
        .replace("$(JOB_COMPLETION_INDEX)", "*");
    assert!(script.contains(&shard_out), "{script} reads {shard_out}");
    assert!(script.contains("--out "), "{script}");
    // And the binary takes those flags.
    let o = tokenscope().args(["merge", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--out") && help.contains("--force"), "{help}");
}

#[test]
fn the_dockerfile_builds_the_release_binary_and_runs_it() {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "a build stage and a slim runtime");
    assert!(text.contains("cargo build --release --locked -p tokenscope"));
    assert!(
        text.contains("COPY --from=build /src/target/release/tokenscope /usr/local/bin/tokenscope")
    );
    assert!(text.contains("ENTRYPOINT [\"tokenscope\"]"));
    assert!(
        text.contains("ca-certificates"),
        "https targets need the roots"
    );
    assert!(text.contains("USER "), "not root");
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).unwrap();
    assert!(
        ignore.lines().any(|l| l.trim() == "target/"),
        "the build context leaves out target/"
    );
}

/// Every manifest, as the docs apply it, passes Kubernetes' own schemas
/// (offline, strict: a misspelt field is refused).
#[test]
fn the_manifests_pass_kubernetes_own_schemas() {
    for name in ["pvc.yaml", "shards-job.yaml", "merge-job.yaml"] {
        let text = std::fs::read_to_string(repo().join("deploy/kubernetes").join(name)).unwrap();
        let text = text
            .replace("${RUN}", "llama70b-test")
            .replace("${START_AT}", "2026-12-03T10:00:00Z");
        let file = write_file(&format!("k8s-{name}"), &text);
        kubernetes_validate(&file);
    }
}
