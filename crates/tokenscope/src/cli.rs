//! Command-line interface: commands and flags (the names are a contract: README, docs/architecture.md).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use std::time::SystemTime;
use tokenscope_core::analysis::Objectives;
use tokenscope_core::duration::parse_duration;
use tokenscope_core::slo::Slo;
use tokenscope_load::protocol::{self, Protocol};
use tokenscope_sim::engine::cost::Dtype;
use tokenscope_workload::arrival::Process;
use tokenscope_workload::workload::LengthSpec;

#[derive(Parser, Debug)]
#[command(
    name = "tokenscope",
    version,
    about = "Measure, explain and tune LLM inference servers",
    after_help = "Examples:\n  \
tokenscope bench                                   # the built-in server, 100 requests\n  \
tokenscope bench --url http://localhost:8000 --concurrency 32 --requests 500\n  \
tokenscope bench --url http://localhost:8000 --rate 8 --duration 60s --slo ttft_p99=500ms,tpot_p99=50ms\n  \
tokenscope sim exact --port 8000 --ttft 100ms --itl 20ms\n\n\
Exit codes: 0 success · 2 bad usage · 3 target unreachable · 4 every request failed · 5 SLO not met · 6 regression (compare) · 7 SLO not judged (too few requests) · 8 output failed (disk full) · 130 interrupted · 1 other error or nothing measured"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The shards' run directories, every shard of the run once.
    #[arg(required = true, num_args = 1..)]
    pub shards: Vec<PathBuf>,
    /// Where the merged run goes.
    #[arg(long)]
    pub out: PathBuf,
    /// Replace a run already in --out.
    #[arg(long)]
    pub force: bool,
    /// Print nothing but errors.
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub history: HistoryArgs,
}

/// Where a finished run is recorded (the results history).
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "History")]
pub struct HistoryArgs {
    /// The results history: a SQLite file, or postgres://user:pass@host/db for a
    /// team's shared database (default: ~/.local/share/tokenscope/history.db).
    /// Never stored in config.toml; the password is never printed
    #[arg(
        long,
        value_name = "PATH|URL",
        env = "TOKENSCOPE_DB",
        hide_env_values = true
    )]
    pub db: Option<String>,
    /// Do not record this run in the results history.
    #[arg(long)]
    pub no_history: bool,
    /// A label for the run in the history, repeatable (`--tag nightly --tag vllm-0.8`);
    /// `tokenscope history list --tag nightly` finds it.
    #[arg(long, value_name = "TAG")]
    pub tag: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// One load test: drive load, time every token, report latency and throughput.
    Bench(Box<BenchArgs>),
    /// A series of bench runs over concurrency levels or request rates, one run directory each.
    #[command(after_help = "Examples:\n  \
tokenscope sweep --concurrency 1,2,4,8,16 --requests 100\n  \
tokenscope sweep --auto --requests 50\n  \
tokenscope sweep --url http://localhost:8000 --rate 1,2,4,8 --duration 60s --slo ttft_p99=500ms\n  \
tokenscope sweep --url http://localhost:8000 --auto --slo ttft_p99=1s,tpot_p99=50ms --target-load 32   # CI gate\n  \
tokenscope sweep --url http://localhost:8000 --find rate --slo ttft_p99=500ms --precision 5%   # the SLO capacity, by bisection\n  \
tokenscope sweep --concurrency 1,4,16,64 --out runs/s1 --resume   # re-runs only the missing points\n  \
tokenscope sweep --url http://localhost:8000 --concurrency 1,8,64 --consistency --keep-text   # answers that change with load")]
    Sweep(Box<SweepArgs>),
    /// Re-render a run or sweep directory: HTML (default), Markdown, CSV or the terminal summary.
    #[command(after_help = "Examples:\n  \
tokenscope report runs/c16                       # writes runs/c16/report.html\n  \
tokenscope report runs/c16 --format md > pr-comment.md\n  \
tokenscope report runs/s1 --format csv           # runs/s1/sweep.csv (a run: requests.csv)\n  \
tokenscope report runs/s1 --slo ttft_p99=300ms --objectives chat_ttft_p99=300ms   # re-judge a sweep\n  \
tokenscope report runs/merged --format aiperf    # runs/merged/profile_export_aiperf.json, for AIPerf's dashboards")]
    Report(Box<ReportArgs>),
    /// Compare two runs: each metric side by side, the change and its bootstrap confidence interval.
    #[command(after_help = "Examples:\n  \
tokenscope compare runs/before runs/after\n  \
tokenscope compare runs/main runs/pr --fail-on-regression 5%     # CI: exit 6 on a regression\n  \
tokenscope compare runs/a runs/b --json > diff.json")]
    Compare(CompareArgs),
    /// No load: sample a live server's /metrics (and the GPU) and show its own figures.
    #[command(after_help = "Examples:\n  \
tokenscope watch http://localhost:8000                       # the dashboard, until Ctrl-C\n  \
tokenscope watch http://localhost:8000 --metrics-url http://gpu-node:9400/metrics\n  \
tokenscope watch http://localhost:8000 --once --json          # one snapshot for scripts\n  \
tokenscope watch http://localhost:8000 --duration 10m > watch.log   # one line per sample")]
    Watch(WatchArgs),
    /// The error floor of this machine's measurements: the client against the built-in exact server at a load.
    #[command(after_help = "Examples:\n  \
tokenscope selftest --concurrency 64\n  \
tokenscope selftest --concurrency 1024 --itl 20ms --output-tokens 256   # a large burst\n  \
tokenscope selftest --concurrency 1024 --client-threads 1 --json        # one client core, for scripts\n\n\
It prints how far the client's TTFT and TPOT lie from the server's own send times\n\
(p50 / p99): differences smaller than that are below this machine's resolution.\n\
`bench --self-check` runs it first at the bench's concurrency and stores it in results.json.")]
    Selftest(SelftestArgs),
    /// Merge the run directories of a sharded run (`bench --shard I/N`) into one run directory.
    #[command(after_help = "Examples:\n  \
tokenscope merge runs/s0 runs/s1 runs/s2 runs/s3 --out runs/merged\n  \
tokenscope merge /results/llama70b/shard-* --out /results/llama70b/merged --force\n\n\
The merged directory reads like any run (report, compare): its percentiles come\n\
from every shard's requests pooled, its time on the earliest shard's clock. It\n\
refuses shards of different runs, settings or start instants, and says why.")]
    Merge(MergeArgs),
    /// The results history: every run recorded, listed, trended, its change points flagged.
    #[command(after_help = "Examples:\n  \
tokenscope history list --model llama --since 2026-11-01\n  \
tokenscope history trend tpot_p50 --config 3f2a9c   # one configuration's TPOT over time\n  \
tokenscope history trend ttft_p99 --run 42 --html trend.html\n  \
tokenscope history changes --tag nightly            # runs that broke from their history\n  \
tokenscope history import runs/*                    # record existing run directories\n  \
tokenscope history export --format csv > history.csv\n  \
tokenscope history list --db postgres://ci@db.internal/perf   # a team's shared history\n\n\
Every bench, sweep, sim plan and merge records its run (--no-history not to), in\n\
~/.local/share/tokenscope/history.db unless --db or TOKENSCOPE_DB says otherwise.\n\
A run is a change point when a figure lies > 4 robust SDs from the median of its\n\
configuration's previous 10 runs, > 5 % from it, and its own 95 % interval is clear\n\
of theirs (docs/history.md).")]
    History(HistoryCommand),
    /// Start the server once per setting, find each setting's SLO capacity by search, recommend one.
    #[command(after_help = "Examples:\n  \
tokenscope tune --serve 'llama-server -m model.gguf --port {port} -np {slots} -c 8192' --param slots=1,2,4 --slo ttft_p99=2s\n  \
tokenscope tune --serve 'vllm serve meta-llama/Llama-3.1-8B --port {port} --max-num-seqs {seqs}' --param seqs=64,128,256 \\\n      --slo ttft_p99=500ms,tpot_p99=50ms --between-points reset-prefix-cache --gpu-price h100=2.49\n  \
tokenscope tune --serve 'tokenscope sim serve --port {port} --max-num-seqs {n}' --param n=8,32 --slo ttft_p90=1s\n\n\
For each setting (the grid of every --param, or each [[setting]] of --settings FILE):\n\
its command starts in a process group of its own (output in SETTING/server.log),\n\
is timed to its first /health, searched (sweep --find rate unless --find says\n\
concurrency), and stopped (SIGTERM, 10 s, SIGKILL). A setting that does not start,\n\
or whose server dies, is a result, not the end. Writes tune.json.")]
    Tune(Box<TuneArgs>),
    /// Built-in servers.
    #[command(subcommand)]
    Sim(SimCommand),
    /// A shell's completion script for tokenscope, on stdout.
    #[command(after_help = "Examples:\n  \
tokenscope completions bash > ~/.local/share/bash-completion/completions/tokenscope\n  \
tokenscope completions zsh > ~/.zfunc/_tokenscope      # with fpath+=~/.zfunc before compinit\n  \
tokenscope completions fish > ~/.config/fish/completions/tokenscope.fish\n  \
tokenscope completions powershell >> $PROFILE")]
    Completions(CompletionsArgs),
    /// The manual page (roff), on stdout.
    #[command(after_help = "Examples:\n  \
tokenscope man > tokenscope.1 && man ./tokenscope.1\n  \
tokenscope man | gzip > /usr/local/share/man/man1/tokenscope.1.gz")]
    Man,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, powershell or elvish.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct SelftestArgs {
    /// Concurrent streams, all started at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub concurrency: u64,
    /// Requests in all (default: one per stream, a single wave).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub requests: Option<u64>,
    /// The exact server's time to first token.
    #[arg(long, default_value = "100ms", value_parser = duration)]
    pub ttft: Duration,
    /// The exact server's time between tokens.
    #[arg(long, default_value = "20ms", value_parser = duration)]
    pub itl: Duration,
    /// Tokens per answer.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(2..=100_000))]
    pub output_tokens: u64,
    /// Client worker threads (default: all cores).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub client_threads: Option<u64>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// The server (its /metrics is read) or a metrics URL.
    pub url: String,
    /// More Prometheus endpoints merged in, repeatable (a DCGM exporter). The
    /// API key and --header go only to an endpoint on URL's own origin.
    #[arg(long = "metrics-url", value_name = "URL")]
    pub metrics_urls: Vec<String>,
    /// Header for the --metrics-url endpoints, repeatable.
    #[arg(long = "metrics-header", value_parser = header, value_name = "NAME:VALUE")]
    pub metrics_headers: Vec<(String, String)>,
    /// How often to sample (100ms or more).
    #[arg(long, default_value = "1s", value_parser = scrape_interval)]
    pub interval: Duration,
    /// The rolling window the rates and quantiles are computed over.
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub window: Duration,
    /// Stop after this long (default, or `forever`: at Ctrl-C).
    #[arg(long, value_parser = run_length)]
    pub duration: Option<Duration>,
    /// Print one snapshot (two samples an --interval apart) and exit.
    #[arg(long)]
    pub once: bool,
    /// With --once: the snapshot as JSON.
    #[arg(long, requires = "once")]
    pub json: bool,
    /// `local`: read this machine's GPUs through NVML.
    #[arg(long, value_enum, default_value = "none")]
    pub gpu: GpuSource,
    /// Serve what watch reads for Prometheus at http://ADDR/metrics
    /// (`tokenscope_server{figure=…}` gauges: running, waiting, KV usage,
    /// requests/s, tokens/s, TTFT and queue p99, GPU use), labelled by target.
    #[arg(long, value_name = "ADDR")]
    pub serve_metrics: Option<std::net::SocketAddr>,
    /// Environment variable holding a bearer token for /metrics.
    #[arg(long, value_name = "NAME")]
    pub api_key_env: Option<String>,
    /// Extra request header, repeatable.
    #[arg(long = "header", value_parser = header, value_name = "NAME:VALUE")]
    pub headers: Vec<(String, String)>,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// The baseline: a run directory, or a run's id in the history (`42` or `#42`).
    pub a: PathBuf,
    /// The run compared with it (a directory or a history id).
    pub b: PathBuf,
    /// The history the ids are looked up in (default as for bench).
    #[arg(
        long,
        value_name = "PATH|URL",
        env = "TOKENSCOPE_DB",
        hide_env_values = true
    )]
    pub db: Option<String>,
    /// Exit 6 when a metric got significantly worse by at least this much (e.g. 5%).
    #[arg(long, value_parser = percent, value_name = "PCT")]
    pub fail_on_regression: Option<f64>,
    /// Changes smaller than this are never called significant.
    #[arg(long, default_value = "2%", value_parser = percent, value_name = "PCT")]
    pub noise_threshold: f64,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(100..=100_000))]
    pub resamples: u64,
    /// Confidence of the intervals.
    #[arg(long, default_value_t = 0.95, value_parser = probability)]
    pub confidence: f64,
    /// Judge regressions even when the runs differ in model, server, API or
    /// workload (otherwise such a comparison is reported, never gated).
    #[arg(long)]
    pub allow_unlike: bool,
    /// Print the comparison as JSON alone.
    #[arg(long)]
    pub json: bool,
}

fn percent(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("`{s}` is not a percentage like 5%")),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    Html,
    Md,
    Csv,
    Terminal,
    /// vLLM's `bench serve --save-result` JSON (vllm-result.json).
    Vllm,
    /// NVIDIA AIPerf's profile_export_aiperf.json.
    Aiperf,
    /// GuideLLM's benchmarks.json.
    Guidellm,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A run directory (results.json) or a sweep directory (sweep.json).
    pub dir: PathBuf,
    #[arg(long, value_enum, default_value = "html")]
    pub format: ReportFormat,
    /// Where to write (default: report.html, requests.csv or sweep.csv in DIR; Markdown and terminal go to stdout).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// A sweep: judge it against this SLO (its capacity and --target-load).
    #[arg(long, value_parser = Slo::parse)]
    pub slo: Option<Slo>,
    #[command(flatten)]
    pub series: SeriesArgs,
}

impl ReportArgs {
    pub fn objectives_given(&self) -> bool {
        self.series.objectives != Objectives::default()
    }

    /// The output settings a re-analysis needs (only the SLO matters there).
    pub fn output(&self) -> OutputArgs {
        OutputArgs {
            slo: self.slo.clone(),
            gpu_price: None,
            gpu_type: None,
            gpus: 1,
            gpu_known: None,
            out: None,
            force: false,
            json: false,
            quiet: true,
            config: None,
            records: RecordsArgs::default(),
            serve_metrics: None,
            otlp_endpoint: None,
            otlp_span_sample: 1.0,
            history: HistoryArgs {
                no_history: true,
                ..HistoryArgs::default()
            },
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum SimCommand {
    /// Serve the exact server: OpenAI-compatible streaming with exactly the given timing.
    Exact(Box<ExactArgs>),
    /// Serve the simulated engine in real time: OpenAI-compatible, with vLLM's /metrics.
    Serve(Box<ServeArgs>),
    /// Predict a deployment on a virtual clock: the same workload flags as bench, results in seconds.
    Plan(Box<PlanArgs>),
    /// Fit the engine's efficiency factors to a measured run of a real server.
    Calibrate(Box<CalibrateArgs>),
    /// The cheapest deployments that meet --slo at --rate: GPU types, TP, dtypes and replicas searched on the virtual clock.
    #[command(after_help = "Examples:\n  \
tokenscope sim size --model llama-3.1-70b --rate 20 --input-tokens 1024 --output-tokens 256 --slo ttft_p99=1s,tpot_p99=50ms\n  \
tokenscope sim size --model llama-3.1-8b --rate 50 --dataset sharegpt.json --slo ttft_p99=500ms --gpu l40s,h100-sxm --out runs/size\n\n\
Each option lists the `sim plan` command that reproduces it (the fleet behind the\n\
router at the full rate); `--out DIR` writes size.json and report.html (cost against\n\
SLO capacity per option). Prices: docs/results-schema.md; --price gpu=$/h overrides.")]
    Size(Box<SizeArgs>),
    /// List the GPUs and models the engine knows.
    List(ListArgs),
}

/// The simulated deployment.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Engine")]
pub struct EngineArgs {
    /// Model from the catalogue (`tokenscope sim list`).
    #[arg(long, default_value = "llama-3.1-8b")]
    pub model: String,
    /// GPU from the catalogue.
    #[arg(long, default_value = "h100-sxm")]
    pub gpu: String,
    /// Tensor-parallel GPUs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub tp: u32,
    /// Weight type: bf16 or fp8.
    #[arg(long, default_value = "bf16")]
    pub dtype: Dtype,
    /// KV-cache type: bf16 or fp8.
    #[arg(long, default_value = "bf16")]
    pub kv_dtype: Dtype,
    /// Share of GPU memory the engine may use (vLLM's --gpu-memory-utilization).
    #[arg(long, default_value_t = 0.9, value_parser = probability)]
    pub gpu_memory_utilization: f64,
    /// Running sequences at most (default: vLLM's for the GPU).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_num_seqs: Option<u32>,
    /// Token budget per step (default: vLLM's for the GPU).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_num_batched_tokens: Option<u32>,
    /// vLLM's --scheduling-policy: `fcfs` (first come, first served) or
    /// `priority` (a request's `priority` field, lowest first; out of
    /// blocks, the lowest-priority running request is preempted).
    #[arg(long, default_value = "fcfs", value_parser = ["fcfs", "priority"])]
    pub scheduling_policy: String,
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// Extra GPUs and models: a JSON file {"gpus": [...], "models": [...]}.
    #[arg(long)]
    pub catalogue: Option<PathBuf>,
    /// Whose scheduling rules and per-step overhead: vllm (V1: chunked
    /// prefill, mixed steps), vllm-v0 (whole prompts, prefill steps first),
    /// sglang (chunked, prefill batches first), trtllm (whole prompts, mixed),
    /// static (a batch's prompts prefilled together; no one joins it until
    /// it ends).
    #[arg(long, default_value = "vllm")]
    pub engine: tokenscope_sim::engine::preset::Preset,
    /// Multi-step scheduling, as vLLM 0.6's --num-scheduler-steps: a step of
    /// decodes alone starts a block of N decode steps scheduled once; no
    /// request is admitted until it ends, and its tokens reach the clients
    /// together at its end (TTFT waits out the block; ITL comes in bursts).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub num_scheduler_steps: u32,
    /// Speculative decoding: k=4,acceptance=0.7 (vLLM's accepted ÷ drafted
    /// tokens), or per-position rates acceptance=0.9/0.7/0.5 (they set k);
    /// method=eagle (default: an EAGLE head, one layer and the LM head),
    /// ngram (prompt lookup, no GPU work) or draft:MODEL (a catalogue model).
    /// Each decode verifies 1 + k tokens and keeps the accepted ones and one
    /// more; `sim serve` exports vLLM's spec_decode counters.
    #[arg(long, value_name = "SPEC")]
    pub spec_decode: Option<String>,
}

/// What a series is judged by: shared by `sweep` and `sim plan --sweep`.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Series and search")]
pub struct SeriesArgs {
    /// Override the service profiles' objectives, e.g.
    /// chat_ttft_p99=500ms,chat_tpot_p99=30ms,batch_e2e_growth=3,cost_ttft_cap=5s,long_context_kv_max=80%,agent_e2e_p99=30s.
    /// Defaults: chat TTFT p99 ≤ 1s (the answer start's, when the model reasons) and TPOT p99 ≤ 50ms;
    /// batch E2E p99 ≤ 10× the lowest; cost TTFT p99 ≤ 10s; long-context KV usage < 90 %;
    /// agent (reasoning and tool-calling services) E2E p99 ≤ 60s, at the least cost per answer.
    #[arg(long, value_parser = objectives, default_value = "")]
    pub objectives: Objectives,
    /// CI gate: exit 5 when the --slo cannot be met at this load (concurrency or
    /// requests/s), interpolating between points.
    #[arg(long, requires = "slo", value_parser = positive_f64)]
    pub target_load: Option<f64>,
    /// With --slo: the share of a replica's SLO capacity an autoscaler keeps free
    /// (for the time a new replica takes to come up). The series then gives the
    /// per-replica threshold (running requests, requests/s) and writes keda.yaml
    /// and hpa.yaml on the server's metric.
    #[arg(long, default_value = "20%", value_parser = headroom)]
    pub headroom: f64,
}

fn headroom(s: &str) -> Result<f64, String> {
    match percent(s)? {
        p if p < 100.0 => Ok(p / 100.0),
        _ => Err(format!("`{s}`: a headroom is under 100 %")),
    }
}

fn precision(s: &str) -> Result<f64, String> {
    let share = match s.ends_with('%') {
        true => percent(s)? / 100.0,
        false => s
            .parse::<f64>()
            .map_err(|_| format!("`{s}`: expected a share like 5% or 0.05"))?,
    };
    match share {
        p if (0.001..=0.5).contains(&p) => Ok(p),
        _ => Err(format!("`{s}`: a precision lies between 0.1% and 50%")),
    }
}

fn objectives(s: &str) -> Result<Objectives, String> {
    Objectives::default().with_overrides(s)
}

/// `tokenscope sweep`: the bench flags, a series and its analysis.
#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("search").args(["auto", "find"])))]
pub struct SweepArgs {
    #[command(flatten)]
    pub bench: BenchArgs,
    #[command(flatten)]
    pub series: SeriesArgs,
    /// Choose the concurrency levels: a synchronous baseline (1), a
    /// maximum-throughput probe (--auto-max-concurrency), then powers of two
    /// between them, stopping once the server is past saturation. Without
    /// --requests or --duration a point runs 2 × its concurrency requests,
    /// at least 32.
    #[arg(help_heading = "Series and search", long, conflicts_with_all = ["concurrency", "rate"])]
    pub auto: bool,
    /// --auto and --find: the concurrency of the maximum-throughput probe.
    #[arg(help_heading = "Series and search", long, default_value_t = 256, requires = "search", value_parser = clap::value_parser!(u64).range(2..=100_000))]
    pub auto_max_concurrency: u64,
    /// Search the highest load that meets --slo: a maximum-throughput probe
    /// (a closed loop at --auto-max-concurrency) bounds it, then bisection
    /// until the bracket is within --precision. Each point stops once its
    /// verdict is decided by the objectives' 95 % intervals, or at
    /// --requests (default: what the SLO's percentiles need, at least 100);
    /// an open-loop point also stops when its queue grows. Writes find.json.
    #[arg(help_heading = "Series and search", long, value_name = "rate|concurrency", value_parser = tokenscope_core::search::SearchOver::parse,
          conflicts_with_all = ["auto", "concurrency", "rate", "resume", "repeat"], requires = "slo")]
    pub find: Option<tokenscope_core::search::SearchOver>,
    /// --find: stop when the bracket's width is at most this share of its top.
    #[arg(help_heading = "Series and search", long, default_value = "5%", value_parser = precision, requires = "find")]
    pub precision: f64,
    /// Before each point after the first: `reset-prefix-cache` (vLLM's
    /// /reset_prefix_cache, SGLang's /flush_cache, llama.cpp's slots erased:
    /// start it with --slot-save-path) or `cmd:COMMAND` (must exit 0). A
    /// refusal is said and kept with the point.
    #[arg(help_heading = "Series and search", long, value_name = "ACTION", value_parser = crate::between::Between::parse)]
    pub between_points: Option<crate::between::Between>,
    /// --find: no point is decided to meet the SLO before it has run this
    /// long (an open loop's queue takes time to build).
    #[arg(help_heading = "Series and search", long, default_value = "10s", value_parser = duration, requires = "find")]
    pub min_point_time: Duration,
    /// Reuse the finished points already in --out (same load and workload) and run only the rest.
    #[arg(help_heading = "Series and search", long, requires = "out")]
    pub resume: bool,
    /// Run each point K times: the analysis uses each load's median run, shows
    /// the spread across runs, takes the knee rule's noise from it, and a load
    /// meets --slo only if every run does.
    #[arg(help_heading = "Series and search", long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub repeat: u32,
    /// Send the same prompts at temperature 0 at every point and report,
    /// per point, the share of answers identical to the lowest load's (and,
    /// with --keep-text, where the first difference falls): answers that
    /// change with load are batch-variance, KV-cache or kernel bugs.
    #[arg(help_heading = "Series and search", long)]
    pub consistency: bool,
    /// A sharded sweep (--shard/--shards with --start-at and --duration): the
    /// time from one point's end to the next point's shared start, for the
    /// requests in flight to finish. Point k starts at --start-at + k × (--duration + this).
    #[arg(help_heading = "Series and search", long, default_value = "20s", value_parser = duration)]
    pub point_gap: Duration,
}

/// `tokenscope tune`: the bench flags, the search's, and the settings.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Tune")]
pub struct TuneArgs {
    #[command(flatten)]
    pub bench: BenchArgs,
    #[command(flatten)]
    pub series: SeriesArgs,
    /// The server's command: `{port}` becomes a free port on 127.0.0.1
    /// (unless --url names where it listens), each `{NAME}` its setting's value.
    /// (The load is the search's: --rate and --concurrency are not tune's.)
    #[arg(help_heading = "Tune", long, value_name = "CMD", conflicts_with_all = ["rate", "concurrency", "cold_start"])]
    pub serve: String,
    /// A parameter and its values, `NAME=V1,V2,…`; repeat it for a grid of
    /// every combination.
    #[arg(help_heading = "Tune", long = "param", value_name = "NAME=VALUES", value_parser = param, conflicts_with = "settings")]
    pub params: Vec<(String, Vec<String>)>,
    /// Named settings instead of a grid: a TOML file of `[[setting]]`
    /// tables, each with a `name` and its parameters' values.
    #[arg(help_heading = "Tune", long, value_name = "FILE")]
    pub settings: Option<PathBuf>,
    /// What to search: rate (an open loop) or concurrency.
    #[arg(help_heading = "Tune", long, value_name = "rate|concurrency", default_value = "rate", value_parser = tokenscope_core::search::SearchOver::parse)]
    pub find: tokenscope_core::search::SearchOver,
    /// Stop a setting's search when its bracket is at most this share of its top.
    #[arg(help_heading = "Tune", long, default_value = "5%", value_parser = precision)]
    pub precision: f64,
    /// No point is decided to meet the SLO before it has run this long.
    #[arg(help_heading = "Tune", long, default_value = "10s", value_parser = duration)]
    pub min_point_time: Duration,
    /// The concurrency of each setting's maximum-throughput probe.
    #[arg(help_heading = "Tune", long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(2..=100_000))]
    pub auto_max_concurrency: u64,
    /// Before each point after a setting's first: `reset-prefix-cache` or `cmd:COMMAND`.
    #[arg(help_heading = "Tune", long, value_name = "ACTION", value_parser = crate::between::Between::parse)]
    pub between_points: Option<crate::between::Between>,
    /// The simulated engine each setting maps onto: `sim plan`'s engine
    /// flags with each `{NAME}` filled in (`--model llama-3.1-8b --gpu
    /// h100-sxm --max-num-seqs {n}`, `--profile FILE` for a `sim calibrate`
    /// fit). Every setting's capacity is planned on the virtual clock and
    /// reported beside what was measured.
    #[arg(
        help_heading = "Tune",
        long,
        value_name = "FLAGS",
        allow_hyphen_values = true
    )]
    pub sim: Option<String>,
    /// With --sim: measure only the K settings the plan ranks highest by
    /// SLO capacity; the rest are reported with their planned capacity.
    /// The first measured setting calibrates the simulator (`sim
    /// calibrate`), and the others are planned again before they are chosen.
    #[arg(help_heading = "Tune", long, value_name = "K", requires = "sim", value_parser = clap::value_parser!(u64).range(1..))]
    pub plan_first: Option<u64>,
    /// With --plan-first: plan with --sim's flags as given, not calibrated
    /// to the first measured setting.
    #[arg(help_heading = "Tune", long, requires = "plan_first")]
    pub no_calibrate: bool,
}

fn history_id(s: &str) -> Result<i64, String> {
    s.trim_start_matches('#')
        .parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| format!("`{s}`: expected a run's id as `history list` shows it (12 or #12)"))
}

fn param(s: &str) -> Result<(String, Vec<String>), String> {
    let (name, values) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NAME=V1,V2 (slots=1,2,4)"))?;
    let name = name.trim();
    let ok_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !ok_name || name == "port" {
        return Err(format!(
            "`{s}`: a parameter's name is letters, digits, _ or - (and not `port`, which tune chooses)"
        ));
    }
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().any(String::is_empty) {
        return Err(format!("`{s}`: an empty value"));
    }
    Ok((name.to_string(), values))
}

/// A load series for `sim plan --sweep`: `concurrency:1,4,16` or `rate:1,2,4`.
#[derive(Debug, Clone, PartialEq)]
pub enum Sweep {
    Concurrency(Vec<u64>),
    Rate(Vec<f64>),
}

impl std::str::FromStr for Sweep {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: expected concurrency:1,4,16 or rate:0.5,1,2");
        let (kind, list) = s.split_once(':').ok_or_else(bad)?;
        match kind {
            "concurrency" => list
                .split(',')
                .map(|v| v.trim().parse::<u64>().ok().filter(|&n| n > 0))
                .collect::<Option<Vec<_>>>()
                .map(Sweep::Concurrency)
                .ok_or_else(bad),
            "rate" => list
                .split(',')
                .map(|v| {
                    v.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|&r| r > 0.0 && r.is_finite())
                })
                .collect::<Option<Vec<_>>>()
                .map(Sweep::Rate)
                .ok_or_else(bad),
            _ => Err(bad()),
        }
    }
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
tokenscope sim plan --concurrency 64 --requests 1000\n  \
tokenscope sim plan --model llama-3.1-70b --gpu h100-sxm --tp 4 --rate 8 --duration 10m\n  \
tokenscope sim plan --gpu-memory-utilization 0.3 --concurrency 128 --output-tokens 2048\n  \
tokenscope sim plan --sweep concurrency:1,4,16,64,256 --requests 500")]
pub struct PlanArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    /// Run a series of loads in one call; each point gets its own run directory.
    #[arg(help_heading = "Simulation", long)]
    pub sweep: Option<Sweep>,
    /// Reasoning models: each request thinks this many tokens (a SPEC:
    /// `512`, `uniform:200..2000`, …) before its answer of --output-tokens;
    /// the thinking is decoded like any token, and the results give the
    /// answer's start (`latency.answer_start_ms`, the `answer_start` SLO).
    #[arg(help_heading = "Simulation", long, value_name = "SPEC")]
    pub reasoning_tokens: Option<LengthSpec>,
    #[command(flatten)]
    pub series: SeriesArgs,
    /// One-way client–server delay for the request and every token.
    #[arg(help_heading = "Simulation", long, default_value = "0.5ms", value_parser = duration)]
    pub network_delay: Duration,
    /// Replay a measured run: its load pattern and its requests' token counts (overrides the load flags).
    #[arg(help_heading = "Simulation", long, value_name = "RUN_DIR")]
    pub replay: Option<PathBuf>,
    /// Efficiency factors fitted by `sim calibrate`.
    #[arg(help_heading = "Simulation", long, value_name = "PROFILE")]
    pub profile: Option<PathBuf>,
    /// Engine replicas behind one endpoint (each the deployment the engine flags
    /// describe); MIN..MAX with --autoscale.
    #[arg(help_heading = "Simulation", long, default_value = "1", value_parser = replicas)]
    pub replicas: (u32, u32),
    /// Disaggregated serving: P prefill replicas and D decode replicas (each
    /// the deployment the engine flags describe); the KV cache of each
    /// prompt crosses from one to the other (--kv-transfer-gbs).
    #[arg(help_heading = "Simulation", long, value_name = "P:D", value_parser = pools, conflicts_with_all = ["replicas", "autoscale"])]
    pub disaggregate: Option<(u32, u32)>,
    /// --disaggregate: each GPU's link for the KV transfer, GB/s (50: one
    /// 400 Gb/s RDMA NIC per GPU, as in a DGX H100).
    #[arg(help_heading = "Simulation", long, default_value_t = 50.0, value_parser = positive_f64)]
    pub kv_transfer_gbs: f64,
    /// Add and remove replicas by a policy, as KEDA or an HPA would:
    /// metric=running|waiting|in-server,target=X (per replica),delay=30s (how long
    /// it must want more before scaling up)[,interval=15s][,cooldown=5m].
    /// New replicas serve after their start-up (--startup).
    #[arg(help_heading = "Simulation", long, value_name = "POLICY", value_parser = autoscale_policy)]
    pub autoscale: Option<tokenscope_sim::autoscale::Policy>,
    /// A new replica's start-up before it serves: `auto` (its weights read at
    /// --load-bandwidth and over PCIe, plus 40 s of engine initialisation) or a duration.
    #[arg(
        help_heading = "Simulation",
        long,
        default_value = "auto",
        requires = "autoscale"
    )]
    pub startup: String,
    /// --startup auto: storage read speed for the weights, GB/s.
    #[arg(help_heading = "Simulation", long, default_value_t = 2.0, value_parser = positive_f64, requires = "autoscale")]
    pub load_bandwidth: f64,
    /// How requests pick a replica: round-robin, least-outstanding,
    /// prefix-affinity (by the prompt's first block) or kv-aware (the replica
    /// holding the longest start of the prompt in its prefix cache).
    #[arg(help_heading = "Simulation", long, default_value = "round-robin", value_parser = router)]
    pub router: tokenscope_sim::router::Router,
}

/// `h100-sxm=2.99`: a GPU and its $/GPU-hour.
fn gpu_price(s: &str) -> Result<(String, f64), String> {
    let (gpu, price) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected GPU=PRICE, e.g. h100-sxm=2.99"))?;
    Ok((gpu.trim().to_string(), positive_f64(price.trim())?))
}

/// An engine preset, or `all` of them.
fn engines(s: &str) -> Result<Vec<tokenscope_sim::engine::preset::Preset>, String> {
    use tokenscope_sim::engine::preset::Preset;
    match s {
        "all" => Ok(Preset::ALL.to_vec()),
        one => Ok(vec![one.parse::<Preset>()?]),
    }
}

fn router(s: &str) -> Result<tokenscope_sim::router::Router, String> {
    s.parse()
}

/// `sim size`.
#[derive(Args, Debug)]
pub struct SizeArgs {
    /// Model from the catalogue (`tokenscope sim list`).
    #[arg(long, default_value = "llama-3.1-8b")]
    pub model: String,
    /// GPUs to consider (default: every GPU in the catalogue that has a price).
    #[arg(long, value_delimiter = ',')]
    pub gpu: Vec<String>,
    /// Tensor-parallel degrees to consider.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub tp: Vec<u32>,
    /// Dtypes to consider, for weights and KV cache alike: bf16, fp8.
    #[arg(long, value_delimiter = ',', default_value = "bf16,fp8")]
    pub dtype: Vec<tokenscope_sim::engine::cost::Dtype>,
    /// How the fleet routes requests.
    #[arg(long, default_value = "least-outstanding", value_parser = router)]
    pub router: tokenscope_sim::router::Router,
    /// The most replicas of one deployment.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_replicas: u32,
    /// Also size every shape served disaggregated: prefill and decode pools
    /// (`sim plan --disaggregate P:D`), each pool grown for the objectives it
    /// misses.
    #[arg(long)]
    pub disaggregate: bool,
    /// --disaggregate: each GPU's link for the KV transfer, GB/s.
    #[arg(long, default_value_t = 50.0, value_parser = positive_f64)]
    pub kv_transfer_gbs: f64,
    /// How many options to list.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=50))]
    pub top: u64,
    /// A GPU's price, $/GPU-hour, over the default (repeatable): --price h100-sxm=2.99.
    #[arg(long, value_parser = gpu_price)]
    pub price: Vec<(String, f64)>,
    /// Extra GPUs and models: a JSON file {"gpus": [...], "models": [...]}.
    #[arg(long)]
    pub catalogue: Option<PathBuf>,
    /// Efficiency factors fitted by `sim calibrate` (applied to every shape).
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<PathBuf>,
    /// Speculative decoding on every shape, as `sim plan --spec-decode`
    /// (k=4,acceptance=0.7,method=eagle): it lowers TPOT at small batches
    /// and stops paying at large ones, so it can change which shape wins.
    #[arg(long, value_name = "SPEC")]
    pub spec_decode: Option<String>,
    /// Whose scheduling rules to size under (as `sim plan --engine`): one or
    /// more of vllm, vllm-v0, sglang, trtllm, static, or `all`; every shape is tried
    /// under each.
    #[arg(long, value_delimiter = ',', default_value = "vllm", value_parser = engines)]
    pub engine: Vec<Vec<tokenscope_sim::engine::preset::Preset>>,
    #[command(flatten)]
    pub load: LoadArgs,
    /// The objectives every option must meet: ttft_p99=1s,tpot_p99=50ms
    /// (with --reasoning-tokens, `answer_start_p99=…` judges when the answer starts).
    #[arg(help_heading = "Sizing", long, value_parser = Slo::parse, required = true)]
    pub slo: Slo,
    /// Reasoning models: each request thinks this many tokens (a SPEC) before
    /// its answer of --output-tokens, decoded like any token, as `sim plan`'s.
    #[arg(help_heading = "Sizing", long, value_name = "SPEC")]
    pub reasoning_tokens: Option<LengthSpec>,
    /// One-way client–server delay for the request and every token.
    #[arg(help_heading = "Sizing", long, default_value = "0.5ms", value_parser = duration)]
    pub network_delay: Duration,
    /// Write size.json and report.html here.
    #[arg(help_heading = "Sizing", long)]
    pub out: Option<PathBuf>,
    /// Print the sizing document alone on stdout.
    #[arg(help_heading = "Sizing", long)]
    pub json: bool,
}

/// `P:D`: prefill and decode replicas, at least one each.
fn pools(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("`{s}`: prefill and decode replicas as P:D, e.g. 1:3");
    let (p, d) = s.split_once(':').ok_or_else(bad)?;
    let n = |v: &str| {
        v.trim()
            .parse::<u32>()
            .ok()
            .filter(|&n| (1..=512).contains(&n))
    };
    Ok((n(p).ok_or_else(bad)?, n(d).ok_or_else(bad)?))
}

/// `N`, or `MIN..MAX` for an autoscaled fleet.
fn replicas(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("`{s}`: a count (4) or a range (1..8), from 1 to 1024");
    let n = |v: &str| {
        v.trim()
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=1024).contains(n))
    };
    match s.split_once("..") {
        None => n(s).map(|k| (k, k)).ok_or_else(bad),
        Some((lo, hi)) => match (n(lo), n(hi)) {
            (Some(lo), Some(hi)) if lo <= hi => Ok((lo, hi)),
            _ => Err(bad()),
        },
    }
}

fn autoscale_policy(s: &str) -> Result<tokenscope_sim::autoscale::Policy, String> {
    tokenscope_sim::autoscale::Policy::parse(s)
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
tokenscope bench --url http://localhost:8000 --concurrency 16 --out runs/c16\n  \
tokenscope sim calibrate runs/c16 --model llama-3.1-8b --gpu a100-80gb\n  \
tokenscope sim plan --profile runs/c16/profile.json --model llama-3.1-8b --gpu a100-80gb --concurrency 64")]
pub struct CalibrateArgs {
    /// Run directories written by `bench` against the real server; runs at
    /// different loads separate per-step from per-sequence cost.
    #[arg(required = true)]
    pub run_dirs: Vec<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Where to write the profile (default: profile.json in the first run directory).
    #[arg(help_heading = "Calibration", long)]
    pub out: Option<PathBuf>,
    /// One-way client–server delay of the measured setup.
    #[arg(help_heading = "Calibration", long, default_value = "0.5ms", value_parser = duration)]
    pub network_delay: Duration,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Extra GPUs and models: a JSON file {"gpus": [...], "models": [...]}.
    #[arg(long)]
    pub catalogue: Option<PathBuf>,
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

/// A duration that must be above zero (`--duration 0s` would send nothing,
/// `--idle-timeout 0` would time out every request).
fn positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("`{s}` must be above zero")),
        d => Ok(d),
    }
}

/// `--duration`: above zero, or `forever`.
fn run_length(s: &str) -> Result<Duration, String> {
    match tokenscope_core::duration::parse_run_length(s)? {
        d if d.is_zero() => Err(format!("`{s}` must be above zero")),
        d => Ok(d),
    }
}

fn scrape_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(100) {
        return Err(format!("`{s}` is below the 100ms minimum"));
    }
    Ok(d)
}

fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("`{s}` is not a positive number")),
    }
}

/// Requests/s between one an hour and a million a second: outside that, a typo.
fn rate(s: &str) -> Result<f64, String> {
    let r = positive_f64(s)?;
    if !(1.0 / 3600.0..=1e6).contains(&r) {
        return Err(format!(
            "`{s}` requests/s is outside 0.0003 (one an hour) … 1000000"
        ));
    }
    Ok(r)
}

fn probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a probability between 0 and 1")),
    }
}

fn header(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}`: expected NAME:VALUE"))?;
    Ok((header_name(k.trim())?, v.trim().to_string()))
}

/// A header's name: letters, digits, `-` and `_`.
fn header_name(k: &str) -> Result<String, String> {
    match tokenscope_load::request_ids::is_header_name(k) {
        true => Ok(k.to_string()),
        false => Err(format!("`{k}` is not a valid header name")),
    }
}

/// `--request-id-header`: a header's name, or `none`; never one that
/// frames the request or carries the trace context.
fn request_id_header(s: &str) -> Result<String, String> {
    match s {
        "none" => Ok(s.into()),
        _ if tokenscope_load::request_ids::set_by_tokenscope(s) => Err(format!(
            "`{s}` is a header tokenscope sets itself: name another (x-request-id, the default) or `none`"
        )),
        _ => header_name(s).map_err(|e| format!("{e} (or `none` to send no request id)")),
    }
}

/// `--api`: `auto`, or the name of one of the client's APIs
/// (`tokenscope_load::protocol::ALL`); an API added there is a value here.
#[derive(Debug, Clone, Copy)]
pub struct ApiChoice(Option<&'static dyn Protocol>);

impl ApiChoice {
    /// The API it names; `None` for `auto`.
    pub fn protocol(self) -> Option<&'static dyn Protocol> {
        self.0
    }
}

/// `--api`'s values: `auto` and every API's name, listed in the help.
fn api_choice() -> impl clap::builder::TypedValueParser<Value = ApiChoice> {
    use clap::builder::TypedValueParser;
    let names = std::iter::once("auto").chain(protocol::ALL.iter().map(|p| p.name()));
    clap::builder::PossibleValuesParser::new(names).map(|name| ApiChoice(protocol::by_name(&name)))
}

#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:\n  \
tokenscope bench\n  \
tokenscope bench --url http://localhost:8000 --model meta-llama/Llama-3.1-8B-Instruct --concurrency 64 --requests 1000 --ignore-eos\n  \
tokenscope bench --url http://localhost:8080 --rate 4 --arrival gamma:0.5 --duration 2m --input-tokens normal:1024,128 --output-tokens 256\n  \
tokenscope bench --url http://localhost:8000 --slo ttft_p99=500ms,tpot_p99=50ms --gpu-price 2.50 --gpus 1 --json > results.json\n  \
tokenscope bench --url http://localhost:8000 --tools tools.json --tool-choice required --multi-turn --tool-latency 200ms\n  \
tokenscope bench --url http://localhost:8000 --workflow agent.toml --concurrency 8 --workflows 50   # fan-out, join, loop (docs/workflows.md)\n  \
tokenscope bench --url http://localhost:8000 --replay-trace spans.json --trace-format otlp-json --replay-speed 2\n  \
tokenscope bench --url http://localhost:8000 --dataset builtin:arithmetic --grade number --concurrency 64")]
pub struct BenchArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub request: RequestArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub shard: ShardArgs,
    /// Without --url: which built-in server to test. `engine` simulates Llama-3.1-8B on
    /// one H100 SXM (vLLM-like batching and KV cache); `exact` streams with exactly
    /// 100 ms TTFT and 20 ms between tokens (ground truth).
    #[arg(
        help_heading = "Target",
        long,
        value_enum,
        default_value = "engine",
        conflicts_with = "url"
    )]
    pub builtin: BuiltinChoice,
}

/// The server a run is sent to: `bench` and `sweep`.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Target")]
pub struct TargetArgs {
    /// Server base URL (http or https). Without it a built-in server (--builtin) is started on 127.0.0.1.
    #[arg(long)]
    pub url: Option<String>,
    /// API to use; `auto` probes chat, then completions.
    #[arg(long, default_value = "auto", value_parser = api_choice())]
    pub api: ApiChoice,
    /// Model name; default: the first one the server lists at /v1/models.
    #[arg(long)]
    pub model: Option<String>,
}

/// How every request of a run is made: its body's options, credentials,
/// TLS and time limits.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Requests and API")]
pub struct RequestArgs {
    /// Ask for exact output lengths (ignore_eos and min_tokens) where the server supports it.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Non-streaming requests (`stream: false`): the answer comes whole, so
    /// only E2E and token counts are measured — no TTFT, TPOT or ITL.
    #[arg(long)]
    pub no_stream: bool,
    /// `--api openai-realtime`: audio a chunk, ms (each an
    /// `input_audio_buffer.append`).
    #[arg(long, value_name = "MS", default_value_t = 100, value_parser = clap::value_parser!(u32).range(10..=10_000))]
    pub audio_chunk_ms: u32,
    /// `--api openai-realtime`: send the audio at the speaker's pace
    /// (`realtime`, a chunk every --audio-chunk-ms) or as fast as the socket
    /// takes it (`fast`).
    #[arg(long, value_name = "PACE", default_value = "realtime", value_parser = ["realtime", "fast"])]
    pub audio_pace: String,
    /// A system message before every prompt (completions API: the prompt's first paragraph).
    #[arg(long, value_name = "TEXT")]
    pub system_prompt: Option<String>,
    /// Sampling temperature sent with every request (default: the server's).
    #[arg(long, value_parser = non_negative_f64)]
    pub temperature: Option<f64>,
    /// A JSON object merged into every request body ('{"top_p": 0.9, "seed": 1}'); the
    /// fields tokenscope times by (model, prompt/messages, stream, lengths) win. Its keys
    /// are recorded in the run's config, its values are not.
    #[arg(long, value_name = "JSON", value_parser = json_object)]
    pub extra_body: Option<serde_json::Map<String, serde_json::Value>>,
    /// Environment variable holding the API key, sent as a bearer token (default: OPENAI_API_KEY when set).
    #[arg(long, value_name = "NAME")]
    pub api_key_env: Option<String>,
    /// Extra request header, repeatable: --header 'X-Team: search'.
    #[arg(long = "header", value_parser = header, value_name = "NAME:VALUE")]
    pub headers: Vec<(String, String)>,
    /// The header that names each request to the server, its value
    /// `ts-RUN-N` (RUN drawn once per run, N the record's id, kept in its
    /// `request_id`): servers and gateways log it, vLLM echoes it. `none`
    /// sends none.
    #[arg(long, value_name = "NAME|none", default_value = "x-request-id", value_parser = request_id_header)]
    pub request_id_header: String,
    /// The share of requests whose user leaves part-way (0–1, chosen by
    /// --seed): the client closes the connection as a user who leaves
    /// does, when --cancel-after says. Counted apart as `abandoned`, in no
    /// latency figure; a server that keeps generating for nobody is found
    /// from its abort counter (vLLM's). --cancel 0.25 --cancel-after tokens:10
    #[arg(long, value_name = "SHARE", value_parser = probability, requires = "cancel_after")]
    pub cancel: Option<f64>,
    /// When a leaving user leaves: a time after the send (`800ms`), one
    /// drawn per request (`uniform:100ms..2s`), or after N chunks of
    /// output (`tokens:N`).
    #[arg(long, value_name = "WHEN", value_parser = tokenscope_load::abandon::After::parse, requires = "cancel")]
    pub cancel_after: Option<tokenscope_load::abandon::After>,
    /// Count the leavers' TTFT and the gaps between the tokens they got
    /// in the latency figures (TTFT, ITL), as the server did serve them;
    /// their TPOT and E2E, cut short by the user, stay out.
    #[arg(long, requires = "cancel")]
    pub abandoned_in_latency: bool,
    /// A class of traffic, repeatable: NAME:SHARE[:priority=N][:header=K=V]…[:slo=SPEC].
    /// Each request draws its class by share (from --seed); `priority`
    /// goes in the body as vLLM's field (served lowest first under its
    /// --scheduling-policy priority), headers with the request, and the
    /// figures and SLO verdict are given per class (SPEC as --slo takes it,
    /// last; without, the run's --slo).
    /// --class chat:0.7:priority=0:slo=ttft_p99=300ms --class batch:0.3:priority=10
    #[arg(long = "class", value_name = "NAME:SHARE[:…]", value_parser = tokenscope_load::classes::TrafficClass::parse)]
    pub classes: Vec<tokenscope_load::classes::TrafficClass>,
    /// Also send a W3C `traceparent` with each request (kept in its record),
    /// so a server that traces (vLLM's --otlp-traces-endpoint) joins its
    /// spans to the client's: with --otlp-endpoint, tokenscope exports a
    /// span per request under the same trace and span ids.
    #[arg(long)]
    pub trace_context: bool,
    /// PEM file of CA certificates to trust for an https target, besides the web's
    /// roots: an internal CA or a self-signed server (--ca-cert /etc/ssl/internal-ca.pem).
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Where reasoning is recognised: `auto` (reasoning fields, and
    /// `<think>`…`</think>` opening the answer), `field` (the fields only),
    /// `think-tags` (the tags only) or `none` (all generated text is answer).
    /// Reasoning counts as output (TTFT includes it); the answer's start is
    /// reported apart.
    #[arg(long, default_value = "auto", value_name = "PARSER")]
    pub reasoning_parser: tokenscope_load::protocol::ReasoningParser,
    /// Inputs per request of a pooling API: `openai-embeddings` embeds this
    /// many prompts in one `input` list; `rerank` scores this many documents
    /// against its query (one more prompt). The generating APIs send one
    /// prompt a request and refuse more.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub batch_size: u64,
    /// Ask for structured answers and check every one: `json` (any JSON
    /// object: OpenAI's `json_object`) or `schema:FILE` (a JSON Schema,
    /// sent as each API takes one — `response_format`, Responses'
    /// `text.format`, Anthropic's `output_format`, TGI's `grammar`,
    /// SGLang's `json_schema`). The share of valid answers is reported.
    #[arg(help_heading = "Agents and answers", long, value_name = "json|schema:FILE", value_parser = response_format)]
    pub response_format: Option<tokenscope_load::structured::ResponseFormat>,
    /// Tools every request offers the model: a JSON file holding a list in
    /// OpenAI's form (`[{"type": "function", "function": {"name",
    /// "parameters"}}]`; BFCL's bare functions are taken too). Sent in each
    /// API's form (chat, Responses, Anthropic); streamed calls are timed as
    /// output, and every call's arguments are checked against its tool's
    /// schema. A dataset entry's own `tools` win.
    #[arg(help_heading = "Agents and answers", long, value_name = "FILE", value_parser = tools_file)]
    pub tools: Option<std::sync::Arc<Vec<serde_json::Value>>>,
    /// Whether the model may call a tool: `auto` (it decides), `required`
    /// (it must), `none` (it must not) or a tool's name (it must call that one).
    #[arg(
        help_heading = "Agents and answers",
        long,
        value_name = "auto|required|none|NAME"
    )]
    pub tool_choice: Option<tokenscope_load::tools::ToolChoice>,
    /// Grade every answer against its dataset entry's `expected`: `exact`
    /// (case and a final period ignored), `contains`, `number` (the
    /// answer's last number), `json` (equal JSON) or `regex:PATTERN` (its
    /// first group, exactly). Accuracy is reported with its 95 % interval;
    /// `--dataset builtin:arithmetic` is a set with known answers.
    #[arg(help_heading = "Agents and answers", long, value_name = "RULE")]
    pub grade: Option<tokenscope_load::grading::Grade>,
    /// Keep each answer's text in requests.jsonl (every record keeps a hash
    /// of it anyway): what tells where two runs' answers first differ.
    #[arg(help_heading = "Agents and answers", long)]
    pub keep_text: bool,
    /// LoRA adapters to send the requests to, comma-separated: each request
    /// names one as its `model`, as vLLM serves adapters (`--lora-modules`).
    /// Every figure is also reported per adapter.
    #[arg(long, value_delimiter = ',', value_name = "NAME[,NAME…]")]
    pub lora: Vec<String>,
    /// How requests are spread over the --lora adapters: `round-robin`
    /// (exact equal shares), `random` (uniform draws), or `weights:W1,W2,…`
    /// (draws with one weight per adapter, in --lora's order: weights:3,1).
    /// Reproducible with --seed.
    #[arg(
        long,
        default_value = "round-robin",
        value_name = "HOW",
        requires = "lora"
    )]
    pub lora_assignment: tokenscope_workload::adapters::Assignment,
    /// Longest one request may take.
    #[arg(long, default_value = "10m", value_parser = positive_duration)]
    pub timeout: Duration,
    /// Longest to wait for the response head or the next bytes of a stream.
    #[arg(long, default_value = "120s", value_parser = positive_duration)]
    pub idle_timeout: Duration,
}

/// What is read beside the load: the server's metrics and the GPUs.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Server telemetry")]
pub struct MetricsArgs {
    /// Prometheus endpoint(s) to sample during the run, repeatable (a DCGM exporter, a
    /// second replica). Default: the server's own /metrics. The API key and
    /// --header go only to an endpoint on the target's own origin.
    #[arg(long = "metrics-url", value_name = "URL")]
    pub metrics_urls: Vec<String>,
    /// Header for the metrics endpoints only, repeatable ('Authorization: Bearer …').
    #[arg(long = "metrics-header", value_parser = header, value_name = "NAME:VALUE")]
    pub metrics_headers: Vec<(String, String)>,
    /// How often to sample the metrics (100ms or more).
    #[arg(long, default_value = "1s", value_parser = scrape_interval)]
    pub scrape_interval: Duration,
    /// Do not read the server's metrics.
    #[arg(long, conflicts_with = "metrics_urls")]
    pub no_metrics: bool,
    /// `local`: read this machine's GPUs through NVML during the run (loaded at run time).
    #[arg(long, value_enum, default_value = "none")]
    pub gpu: GpuSource,
}

/// The flags `-h` shows of a command with many (`--help` shows them all,
/// under their headings): what most runs set.
const MOST_USED: [&str; 30] = [
    "url",
    "api",
    "model",
    "builtin",
    "concurrency",
    "rate",
    "requests",
    "duration",
    "warmup",
    "input_tokens",
    "output_tokens",
    "dataset",
    "seed",
    "slo",
    "out",
    "json",
    "quiet",
    "metrics_url",
    "gpu_price",
    "gpus",
    "config",
    "help",
    "param",
    "serve",
    "settings",
    "find",
    "sweep",
    "engine",
    "gpu",
    "compare_to",
];

/// A command with more flags than this gets a short `-h`.
const SHORT_HELP_ABOVE: usize = 30;

/// `-h` short, `--help` long, as ripgrep's: a command with many flags
/// shows only its [`MOST_USED`] under `-h`, and says so; `--help` shows
/// every flag under its heading. Applied to every subcommand.
pub fn short_help(cmd: clap::Command) -> clap::Command {
    let n = cmd.get_arguments().count();
    let cmd = match n > SHORT_HELP_ABOVE {
        false => cmd,
        true => {
            let rest: Vec<String> = cmd
                .get_arguments()
                .map(|a| a.get_id().to_string())
                .filter(|id| !MOST_USED.contains(&id.as_str()))
                .collect();
            rest.iter()
                .fold(cmd, |c, id| c.mut_arg(id, |a| a.hide_short_help(true)))
                .before_help(format!(
                    "The most-used flags; --help shows all {n}, grouped by topic."
                ))
                .before_long_help(format!(
                    "All {n} flags, grouped by topic; -h shows the most-used."
                ))
        }
    };
    cmd.mut_subcommands(short_help)
}

/// The client itself: its threads, connections, self-check and a server it
/// starts cold.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Client")]
pub struct ClientArgs {
    /// Stop the run early when a rule trips, judged on each finished
    /// request: `saturation` (the server's queue grows: TTFT rising with
    /// send time over the sends of the last 60 s, from 20 s in;
    /// docs/metrics.md) or `errors>P%` (P % of the last 50 requests failed).
    /// Repeatable. Every finished request is kept; results.json says which
    /// rule stopped the run, when and why. In a sweep, a point stopped on
    /// saturation skips the loads at or above it.
    #[arg(long, value_name = "RULE", value_parser = tokenscope_core::breaker::StopRule::parse)]
    pub stop_on: Vec<tokenscope_core::breaker::StopRule>,
    /// Client worker threads (default: all cores).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub client_threads: Option<u64>,
    /// How long an idle client thread gathers wake-ups before it sleeps, so
    /// one wake-up serves every socket read that became ready meanwhile (at
    /// one token per read most of the client's CPU is wake-ups). `auto`:
    /// 200us where the kernel stamps each read's arrival (plain http on
    /// Linux), so no stamp moves; none elsewhere. `0` wakes for every read.
    #[arg(long, default_value = "auto", value_name = "DURATION|auto")]
    pub wake_batch: tokenscope_load::runtime::WakeBatch,
    /// Open no connections ahead of the load: each stream's first request
    /// connects inside the measured window (its TTFT includes the connect, as a
    /// new user's would). By default one connection per stream is opened before
    /// the clock starts and its connect time is reported on its own.
    #[arg(long)]
    pub cold_connections: bool,
    /// First run `tokenscope selftest` at this run's concurrency (64 tokens
    /// a stream, ~2 s) and store the error floor it measured in results.json
    /// (`client.self_check`), so a reader knows the resolution of the numbers.
    #[arg(long)]
    pub self_check: bool,
    /// Start the server with this shell command first (the model loads, the
    /// KV cache is set up), time it to its first successful /health, send the
    /// load at once, report the first requests' TTFT apart from the steady
    /// state, and stop the server after. Its output goes to server.log in the
    /// run directory. --api auto means chat here (a probe would be the
    /// server's first generation).
    #[arg(long, value_name = "COMMAND", requires = "url")]
    pub cold_start: Option<String>,
    /// --cold-start and tune: the longest to wait for a server it started to answer /health.
    #[arg(long, default_value = "10m", value_parser = positive_duration)]
    pub ready_timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GpuSource {
    None,
    Local,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BuiltinChoice {
    Engine,
    Exact,
}

impl LoadArgs {
    /// `--replay-trace` alone: the dataset's own times.
    pub fn replays_dataset(&self) -> bool {
        matches!(self.replay, Some(None))
    }

    /// `--replay-trace FILE`: agent traces replayed as workflows.
    pub fn trace_file(&self) -> Option<&std::path::Path> {
        self.replay.as_ref().and_then(|f| f.as_deref())
    }
}

/// How much load, of what shape: shared by `bench` and `sim plan`.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Load")]
pub struct LoadArgs {
    /// Closed loop: exactly N requests in flight (default 10 unless --rate is given).
    /// `sweep` takes a list: 1,2,4,8 (each point then runs at least 2 × its
    /// concurrency requests unless --duration is given); `sim plan` runs a
    /// list as its --sweep.
    #[arg(long, conflicts_with = "rate", value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub concurrency: Vec<u64>,
    /// Open loop: requests per second, whatever the server does. `sweep` takes a list: 1,2,4
    /// (`sim plan` runs a list as its --sweep).
    #[arg(long, value_delimiter = ',', value_parser = rate)]
    pub rate: Vec<f64>,
    /// Open-loop arrivals: poisson, constant or gamma:K (K < 1 burstier).
    #[arg(long, default_value = "poisson", requires = "rate")]
    pub arrival: Process,
    /// Open loop: cap on requests in flight; late requests are counted and their lateness reported.
    #[arg(long, requires = "rate", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub max_concurrency: Option<u64>,
    /// Measured requests (default 100 when --duration is not given).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: Option<u64>,
    /// Stop starting requests after this long (e.g. 60s, 2m, 24h); those in
    /// flight finish. `forever`: until Ctrl-C or SIGTERM (a soak, a canary;
    /// see --window and --keep-records).
    #[arg(long, value_parser = run_length)]
    pub duration: Option<Duration>,
    /// Requests sent first and excluded from the results.
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// Closed loop: start the N workers evenly over this long (e.g. 5s) instead of all at once.
    #[arg(long, value_parser = duration, conflicts_with = "rate")]
    pub ramp_up: Option<Duration>,
    /// Prompt length in tokens: 256, uniform:128..512, normal:512,64, lognormal:512,256.
    #[arg(help_heading = "Workload", long, default_value = "256")]
    pub input_tokens: LengthSpec,
    /// Output length (max_tokens): same forms as --input-tokens.
    #[arg(help_heading = "Workload", long, default_value = "128")]
    pub output_tokens: LengthSpec,
    /// The first N prompt tokens are the same for every request (prefix caching on purpose).
    #[arg(help_heading = "Workload", long, default_value_t = 0)]
    pub shared_prefix: u64,
    /// Agentic loads: N different shared prefixes (system prompts, tool
    /// contexts) of --shared-prefix tokens, each request's (each session's)
    /// drawn with Zipf popularity (--prefix-zipf).
    #[arg(help_heading = "Workload", long, value_name = "N", default_value_t = 1, requires = "shared_prefix", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub prefix_groups: u32,
    /// Zipf exponent of the prefix groups' popularity (0: all equally used; 1: the classic long tail).
    #[arg(help_heading = "Workload", long, value_name = "S", default_value_t = 1.0, requires = "prefix_groups", value_parser = non_negative_f64)]
    pub prefix_zipf: f64,
    /// Sessions instead of single requests: each turn sends the whole
    /// conversation so far (the server's own answers) plus a new user
    /// message. Conversations from --dataset (ShareGPT, JSONL `session_id`)
    /// or synthetic (--turns, --think-time; each user message --input-tokens long).
    /// --concurrency counts users; --rate counts session starts.
    #[arg(help_heading = "Agents and answers", long)]
    pub multi_turn: bool,
    /// Agent workflows instead of single requests (docs/workflows.md): a
    /// TOML or JSON graph of steps — model calls and tool waits, fan-outs,
    /// joins, loops — each workflow an arrival of the load. --concurrency
    /// counts workflows in flight, --rate workflows a second. Reports each
    /// workflow's makespan and critical path, and each step's figures.
    #[arg(help_heading = "Agents and answers", long, value_name = "FILE", conflicts_with_all = ["multi_turn", "replay_trace"])]
    pub workflow: Option<std::path::PathBuf>,
    /// Workflows to run (each whole; default 10 without --requests or
    /// --duration; a replayed trace's workflows each once).
    #[arg(help_heading = "Agents and answers", long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub workflows: Option<u64>,
    /// Synthetic sessions: turns per session (same forms as --input-tokens).
    #[arg(
        help_heading = "Agents and answers",
        long,
        value_name = "DIST",
        default_value = "4",
        requires = "multi_turn"
    )]
    pub turns: LengthSpec,
    /// Pause between an answer and the next turn: 0, 2s, uniform:1s..3s, exponential:2s.
    #[arg(
        help_heading = "Agents and answers",
        long,
        value_name = "DIST",
        default_value = "0",
        requires = "multi_turn"
    )]
    pub think_time: tokenscope_workload::session::ThinkTime,
    /// With --tools: how long a called tool runs before the next turn carries
    /// its result (0, 2s, uniform:1s..3s, exponential:500ms): the agent's
    /// time in tools, reported apart from the server's.
    #[arg(
        help_heading = "Agents and answers",
        long,
        value_name = "DIST",
        default_value = "0",
        requires = "multi_turn"
    )]
    pub tool_latency: tokenscope_workload::session::ThinkTime,
    /// With --tools: tokens of a tool's result (a length spec: 64,
    /// uniform:16..256, …).
    #[arg(
        help_heading = "Agents and answers",
        long,
        value_name = "SPEC",
        default_value = "64",
        requires = "multi_turn"
    )]
    pub tool_result_tokens: LengthSpec,
    /// With --tools: turns that go on from tool results, at most, per user
    /// message (a model that keeps calling cannot hold a session forever).
    #[arg(help_heading = "Agents and answers", long, value_name = "N", default_value_t = 8, requires = "multi_turn", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_tool_rounds: u32,
    /// Seed for prompts, lengths and arrivals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Prompts from a file (docs/workloads.md): ShareGPT JSON, JSONL of
    /// `prompt`/`messages`, or a trace (Azure, BurstGPT, Mooncake) whose prompts are
    /// made to the recorded lengths. Request i sends entry i; without --requests and
    /// --duration every entry is sent once.
    #[arg(help_heading = "Workload", long, value_name = "FILE")]
    pub dataset: Option<std::path::PathBuf>,
    /// auto (from the content), sharegpt, jsonl, azure-trace, burstgpt or mooncake.
    #[arg(
        help_heading = "Workload",
        long,
        default_value = "auto",
        requires = "dataset"
    )]
    pub dataset_format: String,
    /// Send a seeded sample of N entries (--seed), in the file's order.
    #[arg(help_heading = "Workload", long, value_name = "N", requires = "dataset", value_parser = clap::value_parser!(u64).range(1..))]
    pub dataset_sample: Option<u64>,
    /// Leave out entries whose prompt is longer (tokens; text counted with the built-in tokenizer).
    #[arg(
        help_heading = "Workload",
        long,
        value_name = "N",
        requires = "dataset"
    )]
    pub max_input_tokens: Option<u64>,
    /// Leave out entries that ask for a longer answer.
    #[arg(
        help_heading = "Workload",
        long,
        value_name = "N",
        requires = "dataset"
    )]
    pub max_output_tokens: Option<u64>,
    /// Send each entry at its recorded time (open loop; the first at 0): the
    /// dataset's `timestamp`s, a trace's times. Lateness is client lag.
    /// (`sim plan --replay RUN_DIR` is another thing: a measured run's workload.)
    /// With FILE: replay agent traces (OpenTelemetry spans in OTLP JSON,
    /// --trace-format otlp-json) as workflows of the same shape, lengths and
    /// gaps, each trace at its own start (docs/workflows.md).
    #[arg(long = "replay-trace", id = "replay_trace", value_name = "FILE", num_args = 0..=1, conflicts_with_all = ["rate", "concurrency", "ramp_up", "multi_turn"])]
    pub replay: Option<Option<std::path::PathBuf>>,
    /// The format of --replay-trace FILE: otlp-json (OTLP JSON spans
    /// following the GenAI conventions; one document, or one per line).
    #[arg(long, value_name = "FORMAT", default_value = "otlp-json", value_parser = ["otlp-json"], requires = "replay_trace")]
    pub trace_format: String,
    /// Replay faster (2 = twice as fast) or slower (0.5).
    #[arg(long, default_value_t = 1.0, requires = "replay_trace", value_parser = positive_f64)]
    pub replay_speed: f64,
    /// Replay only the entries from FROM to TO after the first (e.g. 10m..20m).
    #[arg(long, value_name = "FROM..TO", requires = "replay_trace", value_parser = window)]
    pub replay_window: Option<(Duration, Duration)>,
    /// The model's own tokenizer (a Hugging Face tokenizer.json, read from the
    /// file, never fetched): synthetic prompts are made of words that are one
    /// token each in it, and it counts tokens where the server sends no usage
    /// and a dataset's prompts. Default: the built-in cl100k.
    #[arg(help_heading = "Workload", long, value_name = "FILE")]
    pub tokenizer: Option<std::path::PathBuf>,
    /// Images per request (openai-chat, openai-responses,
    /// anthropic-messages): synthetic, made from --seed, each of an
    /// --image-size, sent inline in each API's own form (chat's `image_url`
    /// data URL, Responses' `input_image`, Anthropic's base64 `image`
    /// source): --images 2 --image-size 640x480.
    #[arg(help_heading = "Media", long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub images: u32,
    /// Image sizes in pixels, WxH; with several (640x480,1280x720) each
    /// image's is drawn from them.
    #[arg(
        help_heading = "Media",
        long,
        value_name = "WxH[,WxH…]",
        value_delimiter = ',',
        default_value = "512x512",
        requires = "images"
    )]
    pub image_size: Vec<tokenscope_workload::media::Size>,
    /// How images are encoded: png or jpeg.
    #[arg(
        help_heading = "Media",
        long,
        value_name = "FORMAT",
        default_value = "png",
        requires = "images"
    )]
    pub image_format: tokenscope_workload::media::Format,
    /// Audio clips per request (openai-chat's `input_audio`): synthetic
    /// 16 kHz mono WAV, --audio-seconds long.
    #[arg(help_heading = "Media", long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=16))]
    pub audio: u32,
    /// Length of each synthetic audio clip, seconds: `5`, or drawn per clip
    /// from `uniform:2..10`, `normal:6,2`, `lognormal:6,3` (at most 600).
    #[arg(
        help_heading = "Media",
        long,
        value_name = "S|SPEC",
        default_value = "5"
    )]
    pub audio_seconds: tokenscope_workload::media::ClipSeconds,
    /// Distinct synthetic images (per size) and clips the requests draw
    /// from; each is encoded once and shared. A server's media cache may
    /// hit on repeats: raise it to defeat one.
    #[arg(help_heading = "Media", long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub media_pool: u32,
}

/// A tools file read at once, in OpenAI's form.
fn tools_file(path: &str) -> Result<std::sync::Arc<Vec<serde_json::Value>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{path}: not JSON: {e}"))?;
    let tools = tokenscope_workload::tools::normalize(&v).map_err(|e| format!("{path}: {e}"))?;
    match tools.is_empty() {
        true => Err(format!("{path}: the list of tools is empty")),
        false => Ok(std::sync::Arc::new(tools)),
    }
}

/// `json`, or `schema:FILE` read at once (its name: the file's stem).
fn response_format(s: &str) -> Result<tokenscope_load::structured::ResponseFormat, String> {
    use tokenscope_load::structured::ResponseFormat;
    if s == "json" {
        return Ok(ResponseFormat::Json);
    }
    let path = s
        .strip_prefix("schema:")
        .ok_or_else(|| format!("`{s}`: json, or schema:FILE (a JSON Schema)"))?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let schema: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{path}: not JSON: {e}"))?;
    let name = std::path::Path::new(path)
        .file_stem()
        .map_or("answer".into(), |n| {
            n.to_string_lossy().replace(
                |c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '-',
                "_",
            )
        });
    Ok(ResponseFormat::Schema { name, schema })
}

fn non_negative_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{s}`: a finite number of 0 or more is needed")),
    }
}

/// A JSON object (for `--extra-body`).
fn json_object(s: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str(s) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err(format!(
            "`{s}`: a JSON object ({{\"key\": value, …}}) is needed"
        )),
        Err(e) => Err(format!("`{s}`: not JSON ({e})")),
    }
}

/// `FROM..TO` as two durations, FROM before TO.
fn window(s: &str) -> Result<(Duration, Duration), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("`{s}`: expected FROM..TO, e.g. 10m..20m"))?;
    let (a, b) = (duration(a)?, duration(b)?);
    if b <= a {
        return Err(format!("`{s}`: TO must come after FROM"));
    }
    Ok((a, b))
}

/// What to judge and where to write: shared by `bench` and `sim plan`.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Outputs and live export")]
pub struct OutputArgs {
    /// Service-level objectives: ttft_p99=500ms,tpot_p99=50ms (goodput, verdict, exit code 5).
    #[arg(help_heading = "SLO and cost", long, value_parser = Slo::parse)]
    pub slo: Option<Slo>,
    /// GPU price in $/GPU-hour, for cost per token.
    #[arg(help_heading = "SLO and cost", long, value_parser = positive_f64)]
    pub gpu_price: Option<f64>,
    /// GPU type for a default price (docs/results-schema.md lists them with source and date); --gpu-price wins.
    #[arg(help_heading = "SLO and cost", long)]
    pub gpu_type: Option<String>,
    /// GPUs behind the server.
    #[arg(help_heading = "SLO and cost", long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus: u32,
    /// Set when the GPU type was not given but is known (a simulated engine
    /// knows its GPU): the run is priced at that GPU's default price.
    #[arg(skip)]
    pub gpu_known: Option<String>,
    /// Run directory (default runs/<UTC timestamp>); it must be new or empty.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace the earlier run in --out (its files are removed first).
    #[arg(long)]
    pub force: bool,
    /// Print the results document alone on stdout.
    #[arg(long)]
    pub json: bool,
    /// No progress output.
    #[arg(long, short)]
    pub quiet: bool,
    /// A scenario file: any of these flags by long name (`concurrency = 32`,
    /// `ignore-eos = true`, a list for a repeated flag); flags on the command
    /// line win. Every run directory holds the flags it ran with as
    /// config.toml: `--config RUN/config.toml` repeats the run.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// Serve tokenscope's own live figures for Prometheus at
    /// http://ADDR/metrics while it runs (127.0.0.1:9464): requests by
    /// outcome, tokens, TTFT, TPOT, ITL, E2E and send lag as histograms,
    /// requests in flight; labelled by run, model, API, tag and shard.
    #[arg(long, value_name = "ADDR")]
    pub serve_metrics: Option<std::net::SocketAddr>,
    /// Push the same live figures over OTLP/HTTP (protobuf) to a collector
    /// every 5 s (http://collector:4318, or the full /v1/metrics URL),
    /// named after OpenTelemetry's GenAI conventions
    /// (gen_ai.client.operation.duration, gen_ai.client.token.usage,
    /// gen_ai.server.time_to_first_token, …).
    /// With it, a client span per request goes to the collector's
    /// /v1/traces (GenAI attributes, the first token as an event; its ids
    /// the request's traceparent with --trace-context).
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// The share of requests given a client span with --otlp-endpoint
    /// (0 sends none, 1 every one): a long run stays light with 0.01.
    /// The same requests are chosen each time (by their ids).
    #[arg(long, default_value_t = 1.0, value_name = "SHARE", value_parser = probability, requires = "otlp_endpoint")]
    pub otlp_span_sample: f64,
    #[command(flatten)]
    pub records: RecordsArgs,
    #[command(flatten)]
    pub history: HistoryArgs,
}

/// How a long run (a soak, a canary) keeps its directory compact and is
/// read while it goes on.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Outputs and live export")]
pub struct RecordsArgs {
    /// The figures of each window of this length, one line each in
    /// windows.jsonl (and with --serve-metrics as the tokenscope_window
    /// gauges: rolling percentiles and the SLO's status). Default: 1m for a
    /// --duration of forever or an hour or more, or with --serve-metrics;
    /// else none.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub windows: Option<Duration>,
    /// Rotate requests.jsonl into zstd segments (requests.000001.jsonl.zst, …)
    /// each time it reaches this size (64MiB, 1GB). Default: 64MiB for a
    /// --duration of forever or an hour or more, else never.
    #[arg(long, value_name = "SIZE", value_parser = byte_size)]
    pub rotate_records: Option<u64>,
    /// Keep at most this much of the rotated segments, removing the oldest
    /// (their requests still count in results.json and windows.jsonl).
    /// Default: 1GiB with --duration forever, else every segment.
    #[arg(long, value_name = "SIZE", value_parser = byte_size)]
    pub keep_records: Option<u64>,
}

/// `64MiB`, `1GB`, `500000`: a size in bytes, at least 4 KiB.
fn byte_size(s: &str) -> Result<u64, String> {
    let size: bytesize::ByteSize = s
        .trim()
        .parse()
        .map_err(|e| format!("`{s}` is not a size ({e}; try 64MiB or 1GB)"))?;
    match size.as_u64() {
        n if n < 4096 => Err(format!("`{s}` is below the 4KiB minimum")),
        n => Ok(n),
    }
}

/// Fault injection for the built-in servers.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Faults")]
pub struct FaultArgs {
    /// Share of requests answered 429.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub error_429: f64,
    /// Share of requests answered 500.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub error_500: f64,
    /// Share of requests answered 503.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub error_503: f64,
    /// Share of streams cut halfway.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub disconnect: f64,
    /// Share of streams with a malformed chunk halfway.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub malformed: f64,
    /// Share of streams that stall halfway for --stall-for.
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub stall: f64,
    /// Share of the answers asked for as JSON (`response_format` and the
    /// like) whose JSON is cut before its end (drawn apart from the rest).
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub bad_json: f64,
    /// Share of the answers that call a tool (the request offered tools)
    /// whose arguments are cut before their end (drawn apart).
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub bad_tool_args: f64,
    /// Share of the questions with a known answer (--dataset
    /// builtin:arithmetic) answered wrong, off by one (drawn apart).
    #[arg(long, default_value_t = 0.0, value_parser = probability)]
    pub wrong_answers: f64,
    /// Above this many requests in flight, --diverge of the answers change
    /// one word (the same prompts at every such load): answers that
    /// change with load, as batch-variance bugs make them.
    #[arg(long, value_name = "N", requires = "diverge")]
    pub diverge_above: Option<u64>,
    /// The share of answers that change above --diverge-above.
    #[arg(long, default_value_t = 0.0, value_parser = probability, requires = "diverge_above")]
    pub diverge: f64,
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub stall_for: Duration,
    /// Seed of the fault draw.
    #[arg(long, default_value_t = 0)]
    pub fault_seed: u64,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
tokenscope sim serve --port 8000\n  \
tokenscope sim serve --model llama-3.1-70b --gpu h100-sxm --tp 4 --port 8000\n  \
tokenscope sim serve --port 8000 --error-429 0.05 --disconnect 0.01")]
pub struct ServeArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[arg(help_heading = "Server", long, default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
    /// Port (0: a free one, printed at start).
    #[arg(help_heading = "Server", long, default_value_t = 8000)]
    pub port: u16,
    /// Output tokens when a request sets no max_tokens.
    #[arg(help_heading = "Server", long, default_value_t = 256)]
    pub default_max_tokens: u32,
    /// Model a start-up of this long (weights loading, KV cache set-up): /health
    /// and the APIs answer 503 "loading model" until it has passed (for
    /// `bench --cold-start`).
    #[arg(help_heading = "Server", long, default_value = "0s", value_parser = duration)]
    pub load_time: Duration,
    /// Serve with the efficiency factors fitted by `sim calibrate` (a profile.json).
    #[arg(help_heading = "Server", long, value_name = "PROFILE")]
    pub profile: Option<PathBuf>,
    /// Engines behind the one endpoint, as vLLM's data parallelism runs them:
    /// each its own scheduler and KV cache, /metrics labelled engine="i".
    #[arg(help_heading = "Server", long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub replicas: u32,
    /// Which engine a request goes to: round-robin, least-outstanding or
    /// prefix-affinity (by the prompt's first cache block).
    #[arg(help_heading = "Server", long, default_value = "round-robin", value_parser = router)]
    pub router: tokenscope_sim::router::Router,
    /// A reasoning model: each answer's first tokens are thinking, this many
    /// (a SPEC: `512`, `uniform:200..2000`, …; within the request's
    /// max_tokens, as servers count them), decoded like any token and
    /// reported in usage's `completion_tokens_details.reasoning_tokens`.
    #[arg(help_heading = "Server", long, value_name = "SPEC")]
    pub reasoning_tokens: Option<LengthSpec>,
    /// How the reasoning is shown: `field` (`reasoning_content` deltas),
    /// `tags` (`<think>`…`</think>` opening the content) or `hidden`.
    #[arg(
        help_heading = "Server",
        long,
        default_value = "field",
        value_name = "HOW",
        requires = "reasoning_tokens"
    )]
    pub reasoning_as: tokenscope_sim::exact::ReasoningAs,
    #[command(flatten)]
    pub faults: FaultArgs,
}

#[derive(Args, Debug)]
pub struct ExactArgs {
    #[arg(long, default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
    /// Port (0: a free one, printed at start).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    #[arg(long, default_value = "tokenscope-exact")]
    pub model: String,
    /// Time to first token.
    #[arg(long, default_value = "100ms", value_parser = duration)]
    pub ttft: Duration,
    /// Time between tokens.
    #[arg(long, default_value = "20ms", value_parser = duration)]
    pub itl: Duration,
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub tokens_per_chunk: u32,
    /// Output tokens when a request sets no max_tokens.
    #[arg(long, default_value_t = 128)]
    pub output_tokens: u64,
    /// The first N tokens of every answer are reasoning (counted in its
    /// length, and in usage's `completion_tokens_details.reasoning_tokens`).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub reasoning_tokens: u64,
    /// How the reasoning is shown: `field` (`reasoning_content` deltas),
    /// `tags` (`<think>`…`</think>` opening the content) or `hidden` (not
    /// streamed: the answer starts after the thinking's time).
    #[arg(long, default_value = "field", value_name = "HOW")]
    pub reasoning_as: tokenscope_sim::exact::ReasoningAs,
    #[command(flatten)]
    pub faults: FaultArgs,
    /// Requests served at once; the rest wait their turn, first come first
    /// served, and their TTFT counts the wait (default: no limit). With
    /// `--arrival constant` its capacity is exactly SLOTS ÷ (ttft + (N − 1)
    /// × itl) requests a second for N-token answers.
    #[arg(help_heading = "Server", long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub slots: Option<u32>,
    /// Server worker threads (default: all cores).
    #[arg(help_heading = "Server", long)]
    pub threads: Option<usize>,
}

/// `tokenscope history`.
#[derive(Args, Debug)]
pub struct HistoryCommand {
    /// The results history: a SQLite file or a postgres:// URL
    /// (default: ~/.local/share/tokenscope/history.db).
    #[arg(
        long,
        value_name = "PATH|URL",
        env = "TOKENSCOPE_DB",
        hide_env_values = true,
        global = true
    )]
    pub db: Option<String>,
    #[command(subcommand)]
    pub action: HistoryAction,
}

#[derive(Subcommand, Debug)]
pub enum HistoryAction {
    /// The recorded runs, oldest first: id, start, kind, target, model, headline figures, run directory.
    List(HistoryListArgs),
    /// One configuration's figure over time, as a sparkline and a table (and an HTML page).
    Trend(HistoryTrendArgs),
    /// The runs that broke from their configuration's recent history, figure by figure.
    Changes(HistoryChangesArgs),
    /// Record existing run or sweep directories.
    Import(HistoryImportArgs),
    /// The history as CSV or JSON.
    Export(HistoryExportArgs),
}

/// Which runs: every filter matches a part of the field, ignoring case.
#[derive(Args, Debug, Clone, Default)]
pub struct RunFilterArgs {
    /// Target URL (or built-in server) containing this.
    #[arg(long)]
    pub target: Option<String>,
    /// Model containing this.
    #[arg(long)]
    pub model: Option<String>,
    /// Runs tagged exactly this.
    #[arg(long)]
    pub tag: Option<String>,
    /// bench, sweep, sweep-point, plan, merge or tune.
    #[arg(long)]
    pub kind: Option<String>,
    /// The runs recorded under this one (`12` or `#12`): a sweep's points,
    /// a tune's settings.
    #[arg(long, value_name = "ID", value_parser = history_id)]
    pub under: Option<i64>,
    /// Configuration key (or its first digits), as `list` shows it.
    #[arg(long)]
    pub config: Option<String>,
    /// Started on or after (2026-11-01, or an RFC 3339 instant).
    #[arg(long)]
    pub since: Option<String>,
    /// Started on or before (a date includes its whole day).
    #[arg(long)]
    pub until: Option<String>,
    /// Only the latest N runs matching.
    #[arg(long, value_name = "N")]
    pub last: Option<usize>,
}

#[derive(Args, Debug)]
pub struct HistoryListArgs {
    #[command(flatten)]
    pub filter: RunFilterArgs,
    /// Include the points of sweeps.
    #[arg(long)]
    pub points: bool,
    /// The runs as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct HistoryTrendArgs {
    /// The figure: ttft_p50, ttft_p99, tpot_p50, itl_p50, e2e_p99, output_tokens_per_s, …
    pub metric: String,
    /// The configuration of this run (else --config, or the filters' only configuration).
    #[arg(long, value_name = "ID")]
    pub run: Option<i64>,
    #[command(flatten)]
    pub filter: RunFilterArgs,
    /// Also write an HTML page with this configuration's trend charts (every figure).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// The trend as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct HistoryChangesArgs {
    #[command(flatten)]
    pub filter: RunFilterArgs,
    /// Judge only these figures (repeatable; default: every figure).
    #[arg(long)]
    pub metric: Vec<String>,
    /// The judgements as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct HistoryImportArgs {
    /// Run or sweep directories (each with results.json or sweep.json).
    #[arg(required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,
    /// Tags for the imported runs, repeatable.
    #[arg(long)]
    pub tag: Vec<String>,
}

#[derive(Args, Debug)]
pub struct HistoryExportArgs {
    #[command(flatten)]
    pub filter: RunFilterArgs,
    /// Include the points of sweeps.
    #[arg(long)]
    pub points: bool,
    #[arg(long, value_enum, default_value = "csv")]
    pub format: HistoryFormat,
    /// Write here instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryFormat {
    Csv,
    Json,
}

/// Which part of a sharded run this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Shards")]
pub struct ShardArgs {
    /// Run shard I of N of one run (0-based): this process sends its part of
    /// the load the other flags give for the whole run (--concurrency 4096
    /// --shard 3/16 runs 256 streams). Merge the shards' directories with
    /// `tokenscope merge`.
    #[arg(long, value_name = "I/N", value_parser = parse_shard, conflicts_with = "shards")]
    pub shard: Option<Shard>,
    /// As --shard, the index read from JOB_COMPLETION_INDEX (set by a
    /// Kubernetes Indexed Job), so every pod runs the same arguments.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub shards: Option<u32>,
    /// Start the load at this instant: RFC 3339 UTC (2026-12-03T10:00:00Z), or
    /// +30s from now. Give every shard the same absolute instant (resolve +90s
    /// once, in the script that starts them); connections are opened before it.
    #[arg(long, value_name = "WHEN", value_parser = parse_start_at)]
    pub start_at: Option<StartAt>,
}

/// A start instant, as given and as resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartAt {
    pub at: SystemTime,
    /// RFC 3339 UTC, to the second or finer as given.
    pub text: String,
}

impl StartAt {
    pub fn at(at: SystemTime) -> StartAt {
        StartAt {
            at,
            text: humantime::format_rfc3339_millis(at).to_string(),
        }
    }
}

pub(crate) fn parse_shard(s: &str) -> Result<Shard, String> {
    let bad = || format!("`{s}`: expected I/N with 0 ≤ I < N, e.g. 3/16");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let index: u32 = i.trim().parse().map_err(|_| bad())?;
    let count: u32 = n.trim().parse().map_err(|_| bad())?;
    if count == 0 || index >= count || count > 10_000 {
        return Err(bad());
    }
    Ok(Shard { index, count })
}

pub(crate) fn parse_start_at(s: &str) -> Result<StartAt, String> {
    let at = match s.strip_prefix('+') {
        Some(rel) => {
            let d = humantime::parse_duration(rel).map_err(|e| format!("`{s}`: {e}"))?;
            SystemTime::now() + d
        }
        None => humantime::parse_rfc3339_weak(s).map_err(|e| {
            format!("`{s}`: {e} (expected RFC 3339 UTC like 2026-12-03T10:00:00Z, or +30s)")
        })?,
    };
    Ok(StartAt::at(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every flag of the commands people scan most sits under a heading,
    /// and under its own: clap carries a flattened group's heading on to
    /// the fields after it, so a command's own flags name theirs.
    #[test]
    fn every_flag_sits_under_its_own_heading() {
        use clap::CommandFactory;
        let cli = Cli::command();
        let find = |path: &[&str]| {
            let mut cmd = &cli;
            for name in path {
                cmd = cmd.find_subcommand(name).expect("a command");
            }
            cmd.clone()
        };
        for path in [&["bench"][..], &["sweep"], &["tune"], &["sim", "plan"]] {
            let loose: Vec<String> = find(path)
                .get_arguments()
                .filter(|a| a.get_long().is_some() && a.get_help_heading().is_none())
                .map(|a| a.get_id().to_string())
                .collect();
            assert!(
                loose.is_empty(),
                "{path:?}: flags under no heading: {loose:?}"
            );
        }
        let cases: &[(&[&str], &str, &str)] = &[
            (&["bench"], "url", "Target"),
            (&["bench"], "builtin", "Target"),
            (&["bench"], "rate", "Load"),
            (&["bench"], "input_tokens", "Workload"),
            (&["bench"], "images", "Media"),
            (&["bench"], "multi_turn", "Agents and answers"),
            (&["bench"], "tools", "Agents and answers"),
            (&["bench"], "api_key_env", "Requests and API"),
            (&["bench"], "metrics_urls", "Server telemetry"),
            (&["bench"], "slo", "SLO and cost"),
            (&["bench"], "out", "Outputs and live export"),
            (&["bench"], "db", "History"),
            (&["bench"], "stop_on", "Client"),
            (&["sweep"], "find", "Series and search"),
            (&["sweep"], "objectives", "Series and search"),
            (&["tune"], "serve", "Tune"),
            (&["tune"], "no_calibrate", "Tune"),
            (&["sim", "plan"], "sweep", "Simulation"),
            (&["sim", "plan"], "router", "Simulation"),
            (&["sim", "plan"], "max_num_seqs", "Engine"),
            (&["sim", "serve"], "port", "Server"),
            (&["sim", "exact"], "slots", "Server"),
            (&["sim", "size"], "json", "Sizing"),
            (&["sim", "calibrate"], "out", "Calibration"),
        ];
        for (path, id, heading) in cases {
            let cmd = find(path);
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_id() == *id)
                .unwrap_or_else(|| panic!("{path:?} has no {id}"));
            assert_eq!(arg.get_help_heading(), Some(*heading), "{path:?} --{id}");
        }
    }

    #[test]
    fn a_history_id_is_a_positive_number_or_refused_with_the_form() {
        assert_eq!(history_id("12"), Ok(12));
        assert_eq!(history_id("#12"), Ok(12));
        for bad in ["0", "-3", "", "#", "x1", "99999999999999999999999", "1.5"] {
            let e = history_id(bad).unwrap_err();
            assert!(e.contains("12 or #12"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_api_of_the_client_is_a_value_of_api_and_auto_probes() {
        #[derive(Parser)]
        struct Argv {
            #[command(flatten)]
            target: TargetArgs,
        }
        let api = |v: &str| Argv::try_parse_from(["t", "--api", v]).map(|a| a.target.api);
        for p in protocol::ALL {
            assert_eq!(
                api(p.name()).unwrap().protocol().map(|x| x.name()),
                Some(p.name())
            );
        }
        assert!(api("auto").unwrap().protocol().is_none());
        let err = api("grpc").unwrap_err().to_string();
        assert!(err.contains("openai-chat") && err.contains("auto"), "{err}");
    }
}
