//! CSV exports: one row per request (`requests.csv`), one row per sweep
//! point (`sweep.csv`). Times in ms on the run's clock.

use crate::run_dir::{for_each_record, ReadError, Sweep};

fn ms(us: Option<u64>) -> String {
    us.map_or(String::new(), |v| format!("{:.3}", v as f64 / 1e3))
}

fn num(v: Option<f64>) -> String {
    v.map_or(String::new(), |v| format!("{v}"))
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("writing CSV: {0}")]
    Csv(#[from] csv::Error),
}

/// `requests.csv` of the run in `dir`: every request, warm-up included and
/// marked, written to `out` as `requests.jsonl` is read (never all in memory).
pub fn requests_csv(dir: &std::path::Path, out: impl std::io::Write) -> Result<(), ExportError> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "id",
        "warmup",
        "scheduled_ms",
        "sent_ms",
        "first_token_ms",
        "done_ms",
        "ttft_ms",
        "tpot_ms",
        "e2e_ms",
        "input_tokens",
        "output_tokens",
        "requested_output_tokens",
        "status",
        "error_kind",
        "retries",
    ])?;
    let mut failed = None;
    for_each_record(dir, |r| {
        if failed.is_some() {
            return;
        }
        failed = w
            .write_record([
                r.id.to_string(),
                r.warmup.to_string(),
                ms(Some(r.scheduled_at_us)),
                ms(Some(r.sent_at_us)),
                ms(r.first_token_at_us),
                ms(Some(r.done_at_us)),
                ms(r.ttft_us()),
                num(r.tpot_us().map(|v| v / 1e3)),
                ms(Some(r.e2e_us())),
                r.input_tokens.map_or(String::new(), |v| v.to_string()),
                r.output_tokens.to_string(),
                r.requested_output_tokens
                    .map_or(String::new(), |v| v.to_string()),
                r.status.map_or(String::new(), |v| v.to_string()),
                r.error_kind.map_or(String::new(), |k| k.to_string()),
                r.retries.to_string(),
            ])
            .err();
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    w.flush().map_err(csv::Error::from)?;
    Ok(())
}

/// `sweep.csv`: every point's reduced figures and where it stands.
pub fn sweep_csv(s: &Sweep) -> Result<String, csv::Error> {
    let a = &s.analysis;
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "point",
        "load",
        "output_tokens_per_s",
        "per_user_tokens_per_s",
        "requests_per_s",
        "ttft_p99_ms",
        "tpot_p99_ms",
        "e2e_p99_ms",
        "cost_per_1k_output_tokens",
        "gpu_util_pct",
        "kv_usage_max",
        "preemptions",
        "failed",
        "pareto_frontier",
        "knee",
    ])?;
    for p in &s.points {
        // Repeated runs of a load share its analysed point.
        let Some(i) = a.series.iter().position(|q| q.load == p.load) else {
            continue;
        };
        let q = &a.series[i];
        w.write_record([
            p.point.clone(),
            q.load.to_string(),
            q.output_tps.to_string(),
            q.per_user_tps.to_string(),
            p.results.throughput.requests_per_s.to_string(),
            q.ttft_p99_ms.to_string(),
            q.tpot_p99_ms.to_string(),
            q.e2e_p99_ms.to_string(),
            num(q.cost_per_1k),
            num(q.gpu_util_pct),
            num(q.kv_usage_max),
            num(q.preemptions),
            q.failed.to_string(),
            a.pareto_frontier.contains(&i).to_string(),
            a.knee.is_some_and(|k| k.index == i).to_string(),
        ])?;
    }
    Ok(
        String::from_utf8(w.into_inner().map_err(|e| e.into_error())?)
            .expect("CSV of UTF-8 fields"),
    )
}
