//! The history as CSV (one row per run, one column per figure) or JSON
//! (the runs as stored, figures and tags included).

use crate::entry::StoredRun;
use crate::metrics::METRICS;

/// CSV: the run's facts, then every figure of the catalogue (empty where
/// the run has none).
pub fn csv(runs: &[StoredRun]) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<&str> = vec![
        "id",
        "recorded_at",
        "started_at",
        "kind",
        "parent_id",
        "point",
        "tags",
        "target",
        "api",
        "server_kind",
        "model",
        "engine_version",
        "config_key",
        "slo",
        "slo_met",
        "partial",
        "requests",
        "failed",
        "run_dir",
    ];
    header.extend(METRICS.iter().map(|m| m.name));
    w.write_record(&header)?;
    for r in runs {
        let e = &r.entry;
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        let mut row = vec![
            r.id.to_string(),
            r.recorded_at.clone(),
            e.started_at.clone(),
            e.kind.name().to_string(),
            r.parent_id.map(|p| p.to_string()).unwrap_or_default(),
            opt(&e.point),
            e.tags.join(";"),
            e.target.clone(),
            e.api.clone(),
            opt(&e.server_kind),
            e.model.clone(),
            opt(&e.engine_version),
            e.config_key.clone(),
            opt(&e.slo),
            e.slo_met.map(|m| m.to_string()).unwrap_or_default(),
            e.partial.to_string(),
            e.requests.to_string(),
            e.failed.to_string(),
            e.run_dir.clone(),
        ];
        row.extend(METRICS.iter().map(|m| {
            r.figure(m.name)
                .map(|f| f.value.to_string())
                .unwrap_or_default()
        }));
        w.write_record(&row)?;
    }
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// JSON: an array of the runs as stored.
pub fn json(runs: &[StoredRun]) -> String {
    serde_json::to_string_pretty(runs).unwrap_or_else(|_| "[]".into())
}
