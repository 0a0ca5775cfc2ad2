//! `sim size`: the cheapest deployments that meet an SLO at a target load,
//! searched over GPU types, tensor parallelism, weight/KV dtypes and replica
//! counts — before anyone buys a GPU.
//!
//! For each candidate (a GPU, a TP degree, a dtype pair):
//! 1. **Fit**: weights, the activation reserve and one KV block must fit in
//!    the GPU's memory, else it is left out, saying why.
//! 2. **Alone**: one request at a time; if a latency objective's median is
//!    already over its limit, no replica count can help.
//! 3. **Capacity**: the most output tokens/s one replica gives (a closed loop
//!    at its `max_num_seqs`); the target's tokens/s over that is the fewest
//!    replicas that could carry the load at all — a lower bound on the cost.
//! 4. **Replicas**: from that bound up, one replica at `rate / R` (a fair
//!    router gives each replica that share) is simulated until the SLO is
//!    met; then the whole fleet — R replicas behind the router at the full
//!    rate, exactly what `sim plan --replicas R` runs — confirms it (one
//!    more replica while it does not, up to three).
//!
//! Candidates are tried cheapest bound first, and one whose bound already
//! costs more than the `top`-th option found is not simulated further
//! (branch and bound): the answer is the same, in seconds.
//!
//! Each option carries its SLO verdict (judged as `bench` judges: each
//! statistic with its interval and sample size), its margin and the
//! constraint that binds — what failed with one replica fewer.

use crate::engine::catalogue::Gpu;
use crate::engine::cost::Dtype;
use crate::engine::preset::Preset;
use crate::engine::EngineConfig;
use crate::plan::{simulate_into, EngineSummary, PlanLoad};
use crate::router::{Disaggregation, Fleet, Router};
use serde::Serialize;
use tokenscope_core::metrics::{Aggregator, Measured};
use tokenscope_core::slo::{ObjectiveResult, Slo, SloMetric};
use tokenscope_workload::arrival::LoadPattern;

/// One deployment shape to price.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    pub gpu: String,
    pub tp: u32,
    pub weights: Dtype,
    pub kv_dtype: Dtype,
    /// $ per GPU-hour.
    pub usd_per_gpu_hour: f64,
    /// Served disaggregated: prefill and decode pools of this shape.
    #[serde(default)]
    pub disaggregated: bool,
    /// Whose scheduling rules (and, uncalibrated, per-step overhead).
    pub engine: Preset,
}

impl Candidate {
    /// GPU, TP, dtypes and serving: the shape, whatever the engine's rules.
    pub fn shape(&self) -> String {
        format!(
            "{} × {} TP {} ({} weights, {} KV){}",
            self.tp,
            self.gpu,
            self.tp,
            dtype(self.weights),
            dtype(self.kv_dtype),
            if self.disaggregated {
                ", disaggregated"
            } else {
                ""
            }
        )
    }

    /// The shape, and the engine's rules where they are not vLLM's.
    pub fn label(&self) -> String {
        match self.engine {
            Preset::Vllm => self.shape(),
            other => format!("{} on {}", self.shape(), other.name()),
        }
    }
}

fn dtype(d: Dtype) -> &'static str {
    match d {
        Dtype::Bf16 => "bf16",
        Dtype::Fp8 => "fp8",
    }
}

/// What to size for.
pub struct Search<'a> {
    /// Model, efficiency, memory utilisation, prefix caching: every
    /// candidate is this with its own GPU, TP, dtypes and engine rules.
    pub template: &'a EngineConfig,
    /// The template's efficiency was fitted (`--profile`): keep its step
    /// overhead rather than each engine's default.
    pub calibrated: bool,
    pub gpus: &'a [Gpu],
    /// The target: an open loop at the full rate, its workload and requests.
    pub load: &'a PlanLoad,
    pub slo: &'a Slo,
    pub router: Router,
    /// Also size each shape served disaggregated (prefill and decode pools).
    pub disaggregate: bool,
    /// The KV transfer link of a disaggregated fleet, GB/s per GPU.
    pub kv_transfer_gbs: f64,
    pub max_replicas: u32,
    /// How many options to list.
    pub top: usize,
}

/// A deployment that meets the SLO, as the fleet simulation found it.
#[derive(Debug, Clone, Serialize)]
pub struct Sized {
    pub candidate: Candidate,
    pub replicas: u32,
    /// Disaggregated: how many of the replicas prefill (the rest decode).
    pub prefill_replicas: Option<u32>,
    pub gpus: u32,
    pub usd_per_hour: f64,
    /// At the target load's output tokens/s.
    pub usd_per_million_output_tokens: f64,
    pub output_tokens_per_s: f64,
    pub objectives: Vec<ObjectiveResult>,
    /// How far under its limit the worst objective is, in %.
    pub margin_pct: f64,
    /// What stops one replica fewer: `KV capacity`, `queueing`,
    /// `prefill compute`, `decode bandwidth`, or `throughput` (one fewer
    /// could not carry the tokens/s at all).
    pub binding: String,
    /// Per replica: the load it carries at the target (req/s).
    pub rate_per_replica: f64,
    /// The most the deployment holds within the SLO, req/s: its replicas ×
    /// the highest rate one replica was simulated to meet it at (bisected to
    /// 2 %, from its share of the target up to its token throughput). For a
    /// disaggregated option, the target rate it was shown to meet (a lower bound).
    pub slo_capacity_rps: f64,
}

/// Why a candidate is not listed.
#[derive(Debug, Clone, Serialize)]
pub struct Rejected {
    pub candidate: String,
    /// The candidate's shape ([`Candidate::shape`]), for grouping its engines.
    pub shape: String,
    pub why: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Cheapest first.
    pub options: Vec<Sized>,
    pub rejected: Vec<Rejected>,
    /// Candidates whose lower bound already cost more than the last option listed.
    pub pruned: Vec<String>,
    pub candidates: usize,
    pub simulations: usize,
}

/// One simulation's verdict and what it says of the engine.
struct Eval {
    measured: Measured,
    summary: EngineSummary,
    kv_usage_max: f64,
}

impl Eval {
    fn met(&self) -> bool {
        self.measured.slo.as_ref().is_some_and(|s| s.met)
    }

    fn objectives(&self) -> Vec<ObjectiveResult> {
        self.measured
            .slo
            .as_ref()
            .map(|s| s.objectives.clone())
            .unwrap_or_default()
    }
}

/// A candidate that fits, and the fewest replicas that could carry the load.
struct Bound {
    cfg: EngineConfig,
    low: u32,
    /// Output tokens/s the target needs, and one replica's most.
    needed_tps: f64,
    capacity_tps: f64,
}

struct Searcher<'a> {
    search: &'a Search<'a>,
    rate: f64,
    simulations: usize,
}

/// Sizes every candidate; the `top` cheapest that meet the SLO.
pub fn size(search: &Search, candidates: Vec<Candidate>) -> Result<Report, String> {
    let LoadPattern::Open { rate, .. } = search.load.pattern else {
        return Err("sim size needs an open-loop target (--rate)".into());
    };
    let mut s = Searcher {
        search,
        rate,
        simulations: 0,
    };
    let total = candidates.len();
    let mut rejected = Vec::new();
    let mut bounded = Vec::new();
    for c in candidates {
        match s.bound(&c) {
            Ok(b) => bounded.push((c, b)),
            Err(why) => rejected.push(Rejected {
                candidate: c.label(),
                shape: c.shape(),
                why,
            }),
        }
    }
    let cost = |c: &Candidate, r: u32| c.usd_per_gpu_hour * (c.tp * r) as f64;
    // Disaggregated shapes are bounded by two replicas (a pool each): one
    // decode replica may carry more than a mixed one, so the mixed bound
    // would not be safe to prune by.
    for (c, b) in bounded.iter_mut() {
        if c.disaggregated {
            b.low = 2;
        }
    }
    bounded.sort_by(|a, b| cost(&a.0, a.1.low).total_cmp(&cost(&b.0, b.1.low)));
    let mut options: Vec<Sized> = Vec::new();
    let mut pruned = Vec::new();
    for (c, b) in bounded {
        let limit = (options.len() >= search.top).then(|| options[search.top - 1].usd_per_hour);
        if limit.is_some_and(|l| cost(&c, b.low) > l) {
            pruned.push(c.label());
            continue;
        }
        let found = if c.disaggregated {
            s.pools(&c, &b, limit)
        } else {
            s.replicas(&c, &b, limit)
        };
        match found {
            Ok(Some(mut sized)) => {
                if !c.disaggregated {
                    sized.slo_capacity_rps = s.capacity(&b, &sized)?;
                }
                options.push(sized);
                options.sort_by(|a, b| a.usd_per_hour.total_cmp(&b.usd_per_hour));
                options.truncate(search.top);
            }
            Ok(None) => pruned.push(c.label()),
            Err(why) => rejected.push(Rejected {
                candidate: c.label(),
                shape: c.shape(),
                why,
            }),
        }
    }
    Ok(Report {
        options,
        rejected,
        pruned,
        candidates: total,
        simulations: s.simulations,
    })
}

impl Searcher<'_> {
    /// The candidate's engine and the fewest replicas that could carry the
    /// load; an error when it does not fit or cannot meet the SLO at all.
    fn bound(&mut self, c: &Candidate) -> Result<Bound, String> {
        let gpu = self
            .search
            .gpus
            .iter()
            .find(|g| g.name == c.gpu)
            .ok_or_else(|| format!("{} is not in the catalogue", c.gpu))?;
        let mut cfg = self.search.template.clone();
        cfg.gpu = gpu.clone();
        cfg.tp = c.tp;
        cfg.weights = c.weights;
        cfg.kv_dtype = c.kv_dtype;
        match self.search.calibrated {
            true => cfg.engine = c.engine,
            false => cfg.set_engine(c.engine),
        }
        cfg.check_tp()?;
        cfg.kv_blocks().map_err(|e| format!("does not fit: {e}"))?;
        let alone = self.eval(&cfg, LoadPattern::Closed { concurrency: 1 }, 1, Some(16))?;
        if let Some(e) = alone.measured.counts.top_errors.first() {
            // A request the engine refuses (longer than its context or cache).
            return Err(format!("refuses the load's requests: {}", e.message));
        }
        if let Some(o) = alone
            .objectives()
            .iter()
            .find(|o| o.value_ms.is_some_and(|v| v > o.limit_ms))
        {
            return Err(format!(
                "cannot meet {}_{} ≤ {} ms even alone: one request at a time reads {:.0} ms",
                o.metric,
                o.stat,
                o.limit_ms,
                o.value_ms.unwrap_or_default()
            ));
        }
        let seqs = cfg.limits().max_num_seqs.min(512) as usize;
        let full = self.eval(
            &cfg,
            LoadPattern::Closed { concurrency: seqs },
            1,
            Some((2 * seqs).max(200) as u64),
        )?;
        let capacity = full.measured.throughput.output_tokens_per_s;
        let per_request = alone.measured.tokens.output_total as f64
            / alone.measured.counts.succeeded.max(1) as f64;
        if capacity <= 0.0 {
            return Err("produced no tokens".into());
        }
        let low = (self.rate * per_request / capacity).ceil().max(1.0) as u32;
        if low > self.search.max_replicas {
            return Err(format!(
                "needs at least {low} replicas to carry {:.0} output tokens/s (one gives {capacity:.0}); --max-replicas is {}",
                self.rate * per_request,
                self.search.max_replicas
            ));
        }
        Ok(Bound {
            cfg,
            low,
            needed_tps: self.rate * per_request,
            capacity_tps: capacity,
        })
    }

    /// The fewest replicas meeting the SLO from `low` up, confirmed by the
    /// fleet; `None` when the search passed `limit` ($/h) first.
    fn replicas(
        &mut self,
        c: &Candidate,
        b: &Bound,
        limit: Option<f64>,
    ) -> Result<Option<Sized>, String> {
        let (cfg, low) = (&b.cfg, b.low);
        let over = |r: u32| limit.is_some_and(|l| c.usd_per_gpu_hour * (c.tp * r) as f64 > l);
        let max = self.search.max_replicas;
        // Grow by half until one replica's share is met, then bisect.
        let (mut failing, mut failed_eval) = (low - 1, None);
        let mut r = low;
        let passing = loop {
            if over(r) {
                return Ok(None);
            }
            let e = self.share(cfg, r)?;
            if e.met() {
                break r;
            }
            if let Some(why) = undecided(&e) {
                // More replicas cannot help a statistic with too few requests.
                return Err(why);
            }
            failing = r;
            failed_eval = Some(e);
            if r >= max {
                return self.fewest_fleet(c, b).map(Some);
            }
            r = ((r as f64 * 1.5).ceil() as u32).max(r + 1).min(max);
        };
        let mut passing = passing;
        while passing - failing > 1 {
            let mid = failing + (passing - failing) / 2;
            let e = self.share(cfg, mid)?;
            if e.met() {
                passing = mid;
            } else {
                failing = mid;
                failed_eval = Some(e);
            }
        }
        let binding = binding_of(failed_eval.as_ref().filter(|_| failing + 1 == passing), b);
        // The fleet at the full rate, as `sim plan --replicas` runs it.
        for replicas in passing..(passing + 3).min(max + 1) {
            if over(replicas) {
                return Ok(None);
            }
            let fleet = self.fleet(cfg, replicas)?;
            if fleet.met() {
                return Ok(Some(self.sized(c, replicas, &fleet, binding)));
            }
        }
        Err(format!(
            "one replica met its share at {passing}, but the fleet of {passing}–{} behind the {} router did not",
            (passing + 2).min(max),
            self.search.router.name()
        ))
    }

    /// When even `--max-replicas` shares of the load miss: the fleet itself
    /// at that size, which its router may carry where a random share of the
    /// arrivals does not (least-outstanding sends a burst to idle replicas);
    /// if it meets the SLO, the fewest fleet that does, by bisection from
    /// the throughput bound. An error when the whole fleet misses too.
    fn fewest_fleet(&mut self, c: &Candidate, b: &Bound) -> Result<Sized, String> {
        let (cfg, max) = (&b.cfg, self.search.max_replicas);
        let mut passing = (max, self.fleet(cfg, max)?);
        if !passing.1.met() {
            return Err(format!(
                "misses the SLO even with {max} replicas (--max-replicas): {}",
                missed(Some(&passing.1))
            ));
        }
        let (mut failing, mut failed_eval) = (b.low - 1, None);
        while passing.0 - failing > 1 {
            let mid = failing + (passing.0 - failing) / 2;
            let e = self.fleet(cfg, mid)?;
            if e.met() {
                passing = (mid, e);
            } else {
                (failing, failed_eval) = (mid, Some(e));
            }
        }
        let binding = binding_of(failed_eval.as_ref(), b);
        Ok(self.sized(c, passing.0, &passing.1, binding))
    }

    /// A disaggregated shape's pools: the fewest replicas in all whose best
    /// split meets the SLO. Greedy first, from one prefill and one decode
    /// replica, growing the pool behind each missed objective (TTFT:
    /// prefill; TPOT, ITL, E2E: decode) until the fleet meets it; then each
    /// smaller fleet is tried at its best split ([`Searcher::split`]) until
    /// one has none. More replicas never hurt, so the first fleet without a
    /// split proves the one above it the fewest.
    fn pools(
        &mut self,
        c: &Candidate,
        b: &Bound,
        limit: Option<f64>,
    ) -> Result<Option<Sized>, String> {
        let (mut p, mut d) = (1u32, 1u32);
        let mut found = loop {
            let n = p + d;
            if limit.is_some_and(|l| c.usd_per_gpu_hour * (c.tp * n) as f64 > l) {
                return Ok(None);
            }
            if n > self.search.max_replicas {
                return Err(format!(
                    "disaggregated, misses the SLO within {} replicas (--max-replicas)",
                    self.search.max_replicas
                ));
            }
            let e = self.eval_fleet(&b.cfg, Some((p, d)), n)?;
            if e.met() {
                break (p, d, e);
            }
            let (prefill_short, decode_short) = shortfalls(&e);
            p += u32::from(prefill_short || !decode_short);
            d += u32::from(decode_short);
        };
        while found.0 + found.1 > 2 {
            match self.split(&b.cfg, found.0 + found.1 - 1)? {
                Some(smaller) => found = smaller,
                None => break,
            }
        }
        let (p, d, e) = found;
        let binding = if p + d == 2 {
            format!("disaggregated {p}:{d} (the fewest possible)")
        } else {
            format!(
                "disaggregated {p}:{d} (the fewest replicas: no split of {} meets the SLO)",
                p + d - 1
            )
        };
        let mut sized = self.sized(c, p + d, &e, binding);
        sized.prefill_replicas = Some(p);
        sized.slo_capacity_rps = self.rate;
        Ok(Some(sized))
    }

    /// The split of `n` replicas that meets the SLO, if one does. TTFT only
    /// improves with prefill replicas and the decode objectives with decode
    /// replicas, so the fewest prefill replicas that meet TTFT (bisected)
    /// leave the most for decode: if that split misses, every split does.
    fn split(&mut self, cfg: &EngineConfig, n: u32) -> Result<Option<(u32, u32, Eval)>, String> {
        let (mut lo, mut hi) = (1u32, n - 1);
        let mut at_hi: Option<Eval> = None;
        while lo < hi {
            let mid = (lo + hi) / 2;
            let e = self.eval_fleet(cfg, Some((mid, n - mid)), n)?;
            if shortfalls(&e).0 {
                lo = mid + 1;
            } else {
                hi = mid;
                at_hi = Some(e);
            }
        }
        let e = match at_hi {
            Some(e) => e,
            None => self.eval_fleet(cfg, Some((lo, n - lo)), n)?,
        };
        Ok(e.met().then(|| (lo, n - lo, e)))
    }

    fn sized(&self, c: &Candidate, replicas: u32, e: &Eval, binding: String) -> Sized {
        let usd_per_hour = c.usd_per_gpu_hour * (c.tp * replicas) as f64;
        let tps = e.measured.throughput.output_tokens_per_s;
        let objectives = e.objectives();
        let margin_pct = objectives
            .iter()
            .filter_map(|o| o.value_ms.map(|v| (o.limit_ms - v) / o.limit_ms * 100.0))
            .fold(f64::INFINITY, f64::min);
        Sized {
            candidate: c.clone(),
            replicas,
            prefill_replicas: None,
            gpus: c.tp * replicas,
            usd_per_hour,
            usd_per_million_output_tokens: if tps > 0.0 {
                usd_per_hour / 3600.0 / tps * 1e6
            } else {
                f64::INFINITY
            },
            output_tokens_per_s: tps,
            objectives,
            margin_pct,
            binding,
            rate_per_replica: self.rate / replicas as f64,
            slo_capacity_rps: f64::NAN,
        }
    }

    /// One replica at its share of the rate.
    fn share(&mut self, cfg: &EngineConfig, replicas: u32) -> Result<Eval, String> {
        self.at_rate(cfg, self.rate / replicas as f64)
    }

    /// One replica at `rate` requests/s.
    fn at_rate(&mut self, cfg: &EngineConfig, rate: f64) -> Result<Eval, String> {
        let pattern = match self.search.load.pattern {
            LoadPattern::Open {
                process,
                max_concurrency,
                ..
            } => LoadPattern::Open {
                rate,
                process,
                max_concurrency,
            },
            p => p,
        };
        self.eval(cfg, pattern, 1, None)
    }

    /// The option's SLO capacity (see [`Sized::slo_capacity_rps`]).
    fn capacity(&mut self, b: &Bound, o: &Sized) -> Result<f64, String> {
        let per_request = b.needed_tps / self.rate;
        let (mut met, mut missed) = (
            o.rate_per_replica,
            (b.capacity_tps / per_request).max(o.rate_per_replica),
        );
        if self.at_rate(&b.cfg, missed)?.met() {
            return Ok(missed * o.replicas as f64);
        }
        while missed - met > 0.02 * met {
            let mid = (met + missed) / 2.0;
            if self.at_rate(&b.cfg, mid)?.met() {
                met = mid;
            } else {
                missed = mid;
            }
        }
        Ok(met * o.replicas as f64)
    }

    fn fleet(&mut self, cfg: &EngineConfig, replicas: u32) -> Result<Eval, String> {
        self.eval_fleet(cfg, None, replicas)
    }

    /// The fleet at the full rate, co-located or in (prefill, decode) pools.
    fn eval_fleet(
        &mut self,
        cfg: &EngineConfig,
        pools: Option<(u32, u32)>,
        replicas: u32,
    ) -> Result<Eval, String> {
        let disaggregate = pools.map(|(prefill, decode)| Disaggregation {
            prefill,
            decode,
            transfer_gbs: self.search.kv_transfer_gbs,
        });
        self.run(cfg, self.search.load.pattern, replicas, None, disaggregate)
    }

    fn eval(
        &mut self,
        cfg: &EngineConfig,
        pattern: LoadPattern,
        replicas: u32,
        requests: Option<u64>,
    ) -> Result<Eval, String> {
        self.run(cfg, pattern, replicas, requests, None)
    }

    fn run(
        &mut self,
        cfg: &EngineConfig,
        pattern: LoadPattern,
        replicas: u32,
        requests: Option<u64>,
        disaggregate: Option<Disaggregation>,
    ) -> Result<Eval, String> {
        self.simulations += 1;
        let load = PlanLoad {
            pattern,
            requests: requests.or(self.search.load.requests),
            fleet: Fleet {
                replicas,
                router: self.search.router,
                autoscale: None,
                disaggregate,
            },
            ..self.search.load.clone()
        };
        let mut agg = Aggregator::new(Some(self.search.slo.clone()), None);
        let (samples, summary) = simulate_into(cfg, &load, 1.0, &mut |r| agg.add(&r))?;
        let kv_usage_max = samples.iter().map(|s| s.state.kv_usage).fold(0.0, f64::max);
        Ok(Eval {
            measured: agg.finish(),
            summary,
            kv_usage_max,
        })
    }
}

/// Which pool a missed SLO asks for more of: (prefill: TTFT, decode: the rest).
fn shortfalls(e: &Eval) -> (bool, bool) {
    let objectives = e.objectives();
    let ttft = SloMetric::Ttft.name();
    (
        objectives.iter().any(|o| !o.met && o.metric == ttft),
        objectives.iter().any(|o| !o.met && o.metric != ttft),
    )
}

/// The objectives a failed evaluation missed, in words.
/// When every objective `e` missed rests on too few requests to be judged
/// (not on a value past its limit): why, and what to raise.
fn undecided(e: &Eval) -> Option<String> {
    let objectives = e.objectives();
    let failed: Vec<&ObjectiveResult> = objectives.iter().filter(|o| !o.met).collect();
    let too_few =
        |o: &&ObjectiveResult| o.verdict == Some(tokenscope_core::slo::Verdict::NotEnoughData);
    if failed.is_empty() || !failed.iter().all(too_few) {
        return None;
    }
    let said: Vec<String> = failed
        .iter()
        .map(|o| {
            format!(
                "{}_{} ({} ms) rests on {} requests, {} needed",
                o.metric,
                o.stat,
                o.value_ms.map_or("-".into(), |v| format!("{v:.0}")),
                o.n.map_or("-".into(), |n| n.to_string()),
                o.needed.map_or("more".into(), |n| n.to_string())
            )
        })
        .collect();
    Some(format!(
        "cannot be judged: {}; raise --requests",
        said.join(", ")
    ))
}

fn missed(e: Option<&Eval>) -> String {
    e.map(|e| {
        e.objectives()
            .iter()
            .filter(|o| !o.met)
            .map(|o| {
                format!(
                    "{}_{} {} ms > {} ms",
                    o.metric,
                    o.stat,
                    o.value_ms.map_or("-".into(), |v| format!("{v:.0}")),
                    o.limit_ms
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    })
    .unwrap_or_default()
}

/// The constraint that binds: what made one replica fewer (`failed`, the
/// fleet one below the answer) miss, else the throughput bound itself.
fn binding_of(failed: Option<&Eval>, b: &Bound) -> String {
    match failed {
        Some(e) => binding(e),
        None => format!(
            "throughput: {:.0} output tokens/s need {} replica(s) at ~{:.0} each at most",
            b.needed_tps, b.low, b.capacity_tps
        ),
    }
}

/// What made one replica fewer miss: the KV cache filling, requests
/// waiting, prefill, or decode.
fn binding(e: &Eval) -> String {
    let objectives = e.objectives();
    let failed: Vec<&ObjectiveResult> = objectives.iter().filter(|o| !o.met).collect();
    let words = missed(Some(e));
    if e.summary.preemptions_total > 0 || e.kv_usage_max > 0.9 {
        return format!(
            "KV capacity: one replica fewer filled its KV cache to {:.0} % ({} preemptions) and missed {words}",
            e.kv_usage_max * 100.0,
            e.summary.preemptions_total
        );
    }
    let ttft = failed.iter().any(|o| o.metric == SloMetric::Ttft.name());
    if ttft {
        format!("prefill compute and queueing: one replica fewer missed {words}")
    } else {
        format!("decode bandwidth: one replica fewer missed {words}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_the_shape() {
        let c = Candidate {
            gpu: "h100-sxm".into(),
            tp: 4,
            weights: Dtype::Fp8,
            kv_dtype: Dtype::Fp8,
            usd_per_gpu_hour: 2.0,
            disaggregated: false,
            engine: Preset::Vllm,
        };
        assert_eq!(c.label(), "4 × h100-sxm TP 4 (fp8 weights, fp8 KV)");
        let on_sglang = Candidate {
            engine: Preset::Sglang,
            disaggregated: true,
            ..c
        };
        assert_eq!(
            on_sglang.label(),
            "4 × h100-sxm TP 4 (fp8 weights, fp8 KV), disaggregated on sglang"
        );
    }
}
